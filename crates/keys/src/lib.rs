//! # bourse-keys
//!
//! API keys: who a client session is, what it may do, and which client ids it may claim.
//!
//! A key is a random secret shown once when it is made (`bourse gateway key-add`); the
//! key file keeps only its BLAKE3 hash, with a name, the accounts the key trades for, and
//! whether it may send administrative commands. Every gateway of an exchange reads the
//! same file, and so do the nodes (`client_keys`), which check the sessions gateways
//! claim for keys ([`Claim`]). Keys are 256-bit random strings, so a fast hash is the
//! right one: there is nothing to guess.
//!
//! **Client ids.** A client picks its own id; the exchange-wide id is derived from it
//! and the key's name ([`Principal::client_id`]), so the clients of two keys never share
//! an exactly-once record, and a client that moves to another gateway finds its session
//! there. A gateway tells the node which client a session is with a [`Claim`]: for a key
//! of the file, the key itself (the node hashes it and derives the id again); for the
//! gateway's own front ends (keys made in its process, or an open gateway), an id in the
//! gateway's own namespace ([`gateway_client_id`]). So no gateway can register, pre-empt
//! or read a session of a key it was never shown, or of another gateway's front ends.
//!
//! ```toml
//! [[key]]
//! name = "alice"
//! hash = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! accounts = [3, 4]
//! admin = false
//! ```

use std::path::Path;
use std::sync::Arc;

use bourse_engine::command::CommandBody;
use rand::RngCore;
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// One entry of the key file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    pub name: String,
    /// Hex BLAKE3 hash of the key.
    pub hash: String,
    /// Accounts this key places, cancels, reduces and moves orders for.
    #[serde(default)]
    pub accounts: Vec<u32>,
    /// May create assets, symbols and accounts, move money and suspend accounts, and
    /// act for every account.
    #[serde(default)]
    pub admin: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    #[serde(default)]
    key: Vec<KeyEntry>,
}

/// An authenticated key holder.
#[derive(Debug)]
pub struct Principal {
    pub name: String,
    accounts: Vec<u32>,
    pub admin: bool,
    /// A key of the gateway's own process (its front ends), or the holder of an open
    /// gateway's sessions: its clients are the gateway's, in its namespace.
    own: bool,
}

impl Principal {
    /// The accounts the key acts for (an admin key acts for every account).
    pub fn accounts(&self) -> &[u32] {
        &self.accounts
    }

    /// Whether this is the gateway's own (a front end's key of its process, or an open
    /// gateway's holder) rather than a key of the file.
    pub fn is_own(&self) -> bool {
        self.own
    }

    /// The holder every session is on a gateway that runs without keys.
    pub fn open() -> Principal {
        Principal { name: "open".into(), accounts: Vec::new(), admin: true, own: true }
    }

    /// Whether this key may send `body`. Trading commands need the account; the rest
    /// (creating things, moving money, suspensions, closing the trading day) need an
    /// administrative key.
    pub fn may(&self, body: &CommandBody) -> bool {
        self.refusal(body).is_none()
    }

    /// Why this key may not send `body`, or `None` when it may.
    pub fn refusal(&self, body: &CommandBody) -> Option<String> {
        if self.admin || is_filler(body) {
            return None;
        }
        let account = match body {
            CommandBody::Place(order) => order.account,
            CommandBody::Cancel { account, .. }
            | CommandBody::Reduce { account, .. }
            | CommandBody::Move { account, .. } => *account,
            _ => return Some(format!("key {:?} may not send administrative commands", self.name)),
        };
        if self.accounts.contains(&account.0) {
            None
        } else {
            Some(format!("key {:?} does not own account {}", self.name, account.0))
        }
    }

    /// Whether this key may read `account`'s balances and orders.
    pub fn may_query(&self, account: u32) -> bool {
        self.admin || self.accounts.contains(&account)
    }

    /// The exchange-wide client id of this key's client `client`: clients of different
    /// keys cannot collide or impersonate each other, and every gateway maps alike.
    pub fn client_id(&self, client: u64) -> u64 {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"bourse client id\0");
        hasher.update(self.name.as_bytes());
        hasher.update(&[0]);
        hasher.update(&client.to_le_bytes());
        let bytes = hasher.finalize();
        let id = u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes"));
        id.max(1)
    }

    /// What a gateway (`gateway`) tells the nodes about this principal's client
    /// `client`, which authenticated with `key`: the exchange-wide id and its proof.
    pub fn claim(&self, key: &str, gateway: u32, client: u64) -> Claim {
        if self.own {
            let inner = self.client_id(client);
            Claim { client_id: gateway_client_id(gateway, inner), key: String::new(), local_id: inner }
        } else {
            Claim { client_id: self.client_id(client), key: key.to_owned(), local_id: client }
        }
    }
}

/// A gateway's word for which client a session is, checked by the nodes
/// ([`KeyStore::check_claim`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The exchange-wide client id the session's commands and reports carry.
    pub client_id: u64,
    /// The client's API key, for a key of the file; empty for a session of the
    /// gateway's own (then `client_id` is in the gateway's namespace).
    pub key: String,
    /// The id `client_id` is derived from: the client's own choice (a key of the file),
    /// or the principal's id of it (the gateway's own).
    pub local_id: u64,
}

/// The id of a session of gateway `gateway`'s own front ends (or of an open gateway):
/// `inner` in that gateway's namespace, which no other gateway can claim.
pub fn gateway_client_id(gateway: u32, inner: u64) -> u64 {
    let mut hasher = blake3::Hasher::new();
    hasher.update(b"bourse gateway client id\0");
    hasher.update(&gateway.to_le_bytes());
    hasher.update(&inner.to_le_bytes());
    let bytes = hasher.finalize();
    u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes")).max(1)
}

/// A cancel of order 0: what a client sends to fill the seq of a command refused before
/// the log (see bourse_client's window). The engine always rejects it and changes
/// nothing but the client's exactly-once record, so no key, rate or limit stops it:
/// refusing it would leave the client's seq hole open for ever.
pub fn is_filler(body: &CommandBody) -> bool {
    matches!(body, CommandBody::Cancel { order: bourse_engine::OrderId(0), .. })
}

/// The keys a gateway accepts.
#[derive(Debug, Default)]
pub struct KeyStore {
    by_hash: FxHashMap<[u8; 32], Arc<Principal>>,
}

/// Why a key file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    #[error("key {name:?}: {reason}")]
    Entry { name: String, reason: String },
}

impl KeyStore {
    pub fn from_entries(entries: Vec<KeyEntry>) -> Result<Self, KeyError> {
        let mut by_hash = FxHashMap::default();
        let mut names = rustc_hash::FxHashSet::default();
        for entry in entries {
            let bad = |reason: &str| KeyError::Entry { name: entry.name.clone(), reason: reason.to_owned() };
            let hash = decode_hex32(&entry.hash).ok_or_else(|| bad("hash must be 64 hex digits"))?;
            if entry.name.is_empty() {
                return Err(bad("the name is empty"));
            }
            // A key's clients are numbered by its name (`Principal::claim`): two keys of
            // one name would share, and could take over, each other's sessions.
            if !names.insert(entry.name.clone()) {
                return Err(bad("two keys have this name: each key needs its own"));
            }
            let principal =
                Principal { name: entry.name.clone(), accounts: entry.accounts, admin: entry.admin, own: false };
            if by_hash.insert(hash, Arc::new(principal)).is_some() {
                return Err(bad("the same key appears twice"));
            }
        }
        Ok(KeyStore { by_hash })
    }

    /// Reads a key file.
    pub fn load(path: &Path) -> Result<Self, KeyError> {
        let file = read_file(path)?;
        KeyStore::from_entries(file.key)
    }

    /// The holder of `key`, if it is one of ours.
    pub fn verify(&self, key: &str) -> Option<Arc<Principal>> {
        self.by_hash.get(blake3::hash(key.as_bytes()).as_bytes()).cloned()
    }

    /// Makes a key that only this process knows (it is in no file), for front ends
    /// running in the gateway's own process (the HTTP, XML and FIX servers): returns
    /// the key.
    pub fn add_process_key(&mut self, name: &str, admin: bool) -> String {
        let key = generate_key();
        let principal = Principal { name: name.to_owned(), accounts: Vec::new(), admin, own: true };
        self.by_hash.insert(*blake3::hash(key.as_bytes()).as_bytes(), Arc::new(principal));
        key
    }

    /// This file's keys with the process keys of `running` (the front ends' keys, made
    /// at start and in no file): what a gateway takes when it re-reads its key file.
    pub fn with_process_keys_of(mut self, running: &KeyStore) -> KeyStore {
        for (hash, principal) in &running.by_hash {
            if principal.own {
                self.by_hash.insert(*hash, Arc::clone(principal));
            }
        }
        self
    }

    /// A key made for a front end of this process that acts with the rights of the
    /// file's key `name` (its accounts, and admin if it is): the XML listener, whose
    /// protocol carries no key, acts as the key the operator names. `None` when the
    /// file has no key of that name.
    pub fn add_process_key_as(&mut self, front_end: &str, name: &str) -> Option<String> {
        let named = self.by_hash.values().find(|p| !p.own && p.name == name)?.clone();
        let key = generate_key();
        let principal = Principal {
            name: format!("{front_end} as {name}"),
            accounts: named.accounts.clone(),
            admin: named.admin,
            own: true,
        };
        self.by_hash.insert(*blake3::hash(key.as_bytes()).as_bytes(), Arc::new(principal));
        Some(key)
    }

    /// Whether gateway `gateway` may claim `claim`: the key is one of this file's and
    /// the id is its client's, or the id is in the gateway's own namespace.
    pub fn check_claim(&self, gateway: u32, claim: &Claim) -> Result<(), String> {
        let expected = if claim.key.is_empty() {
            gateway_client_id(gateway, claim.local_id)
        } else {
            let principal = self.verify(&claim.key).ok_or_else(|| {
                format!(
                    "client {} is claimed with an API key that is not in the nodes' key file (client_keys: add \
                     the key there and send the nodes SIGHUP)",
                    claim.client_id
                )
            })?;
            if principal.own {
                return Err(format!("client {} is claimed with a key of a gateway's own", claim.client_id));
            }
            principal.client_id(claim.local_id)
        };
        if expected == claim.client_id {
            Ok(())
        } else if claim.key.is_empty() {
            Err(format!("client {} is not in gateway {gateway}'s namespace", claim.client_id))
        } else {
            Err(format!("client {} is not a client of the key it is claimed with", claim.client_id))
        }
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

fn read_file(path: &Path) -> Result<KeyFile, KeyError> {
    let fail = |reason: String| KeyError::File { path: path.display().to_string(), reason };
    match std::fs::read_to_string(path) {
        Ok(text) => toml::from_str(&text).map_err(|e| fail(e.to_string())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(KeyFile::default()),
        Err(error) => Err(fail(error.to_string())),
    }
}

/// A new random key: `bk_` and 64 hex digits.
pub fn generate_key() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    format!("bk_{}", hex(&bytes))
}

/// The file entry of `key`.
pub fn entry_for(key: &str, name: &str, accounts: Vec<u32>, admin: bool) -> KeyEntry {
    KeyEntry { name: name.to_owned(), hash: hex(blake3::hash(key.as_bytes()).as_bytes()), accounts, admin }
}

/// Adds an entry to the key file at `path` (created if absent), refusing a name that
/// is already there.
pub fn append(path: &Path, entry: KeyEntry) -> Result<(), KeyError> {
    // The file is replaced by a rename: never do that to a device or a directory (a
    // mistyped `--keys /dev/null` would otherwise put a regular file in its place).
    if let Ok(meta) = std::fs::metadata(path) {
        if !meta.is_file() {
            let reason = "not a regular file: give the path of a key file (created if absent)".to_string();
            return Err(KeyError::File { path: path.display().to_string(), reason });
        }
    }
    let mut file = read_file(path)?;
    if file.key.iter().any(|k| k.name == entry.name) {
        return Err(KeyError::Entry { name: entry.name, reason: "a key of this name exists".into() });
    }
    file.key.push(entry);
    write_file(path, &file)
}

/// Removes the entry named `name` from the key file at `path` (replaced atomically, as
/// by [`append`]); refuses a name the file does not hold. A gateway that re-reads the
/// file refuses the key from then on and ends its sessions.
pub fn remove(path: &Path, name: &str) -> Result<(), KeyError> {
    let mut file = read_file(path)?;
    let before = file.key.len();
    file.key.retain(|k| k.name != name);
    if file.key.len() == before {
        return Err(KeyError::Entry { name: name.to_owned(), reason: "no key of this name in the file".into() });
    }
    write_file(path, &file)
}

/// Replaces the key file at `path` with `file`: written beside it, then renamed over it.
fn write_file(path: &Path, file: &KeyFile) -> Result<(), KeyError> {
    let text = toml::to_string(file)
        .map_err(|e| KeyError::File { path: path.display().to_string(), reason: e.to_string() })?;
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| KeyError::File { path: path.display().to_string(), reason: e.to_string() })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn decode_hex32(text: &str) -> Option<[u8; 32]> {
    let text = text.as_bytes();
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in text.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use bourse_engine::command::{OrderRequest, Tif};
    use bourse_engine::{AccountId, AssetId, OrderId, Px, Qty, Side, SymbolId};

    use super::*;

    fn cancel(account: u32) -> CommandBody {
        CommandBody::Cancel { account: AccountId(account), symbol: SymbolId(0), order: OrderId(1) }
    }

    #[test]
    fn a_key_acts_for_its_accounts_only() {
        let alice = generate_key();
        let admin = generate_key();
        let store = KeyStore::from_entries(vec![
            entry_for(&alice, "alice", vec![3, 4], false),
            entry_for(&admin, "ops", vec![], true),
        ])
        .unwrap();
        let principal = store.verify(&alice).expect("alice's key");
        assert_eq!(principal.name, "alice");
        assert!(principal.may(&cancel(3)) && principal.may(&cancel(4)));
        assert!(!principal.may(&cancel(5)), "another account");
        let deposit =
            CommandBody::Deposit { account: AccountId(3), asset: AssetId(0), amount: bourse_engine::Amount(10) };
        assert!(!principal.may(&deposit), "money moves need an admin key");
        assert!(store.verify(&admin).unwrap().may(&deposit));
        assert!(!principal.may(&CommandBody::CloseDay), "closing the trading day needs an admin key");
        assert!(store.verify(&admin).unwrap().may(&CommandBody::CloseDay));
        assert!(store.verify("bk_not_a_key").is_none());
        let place = |account| {
            CommandBody::Place(OrderRequest::limit(
                AccountId(account),
                SymbolId(0),
                Side::Buy,
                Px(100),
                Qty(1),
                Tif::Gtc,
            ))
        };
        assert!(principal.may(&place(4)) && !principal.may(&place(9)));
    }

    #[test]
    fn a_process_key_as_a_named_key_has_its_rights_only() {
        let mut store = KeyStore::from_entries(vec![
            entry_for("k1", "alice", vec![3], false),
            entry_for("k2", "ops", vec![], true),
        ])
        .unwrap();
        let as_alice = store.add_process_key_as("xml", "alice").unwrap();
        let principal = store.verify(&as_alice).unwrap();
        assert!(principal.may(&cancel(3)) && !principal.may(&cancel(4)));
        assert!(!principal.may(&CommandBody::CloseDay), "alice is no admin");
        let as_ops = store.add_process_key_as("xml", "ops").unwrap();
        assert!(store.verify(&as_ops).unwrap().may(&CommandBody::CloseDay));
        assert!(store.add_process_key_as("xml", "nobody").is_none());
    }

    #[test]
    fn a_file_with_two_keys_of_one_name_is_refused() {
        let twice = vec![entry_for("k1", "alice", vec![1], false), entry_for("k2", "alice", vec![2], false)];
        match KeyStore::from_entries(twice) {
            Err(KeyError::Entry { name, reason }) => {
                assert_eq!(name, "alice");
                assert!(reason.contains("two keys have this name"), "{reason}");
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn client_ids_are_per_key_and_stable() {
        let store = KeyStore::from_entries(vec![
            entry_for("k1", "alice", vec![], false),
            entry_for("k2", "bob", vec![], false),
        ])
        .unwrap();
        let (alice, bob) = (store.verify("k1").unwrap(), store.verify("k2").unwrap());
        assert_eq!(alice.client_id(7), alice.client_id(7));
        assert_ne!(alice.client_id(7), bob.client_id(7));
        assert_ne!(alice.client_id(7), alice.client_id(8));
    }

    #[test]
    fn claims_hold_only_for_the_key_or_the_gateway_they_name() {
        let alice_key = generate_key();
        let mut store = KeyStore::from_entries(vec![entry_for(&alice_key, "alice", vec![1], false)]).unwrap();
        let front_end = store.add_process_key("xml-front-end", true);
        let alice = store.verify(&alice_key).unwrap();

        // A key's client: the same id from every gateway, and the key proves it.
        let claim = alice.claim(&alice_key, 1, 7);
        assert_eq!(claim, alice.claim(&alice_key, 2, 7), "alike on every gateway");
        assert_eq!(claim.client_id, alice.client_id(7));
        assert_eq!(store.check_claim(1, &claim), Ok(()));
        assert_eq!(store.check_claim(2, &claim), Ok(()));
        let mut forged = claim.clone();
        forged.key = generate_key();
        assert!(store.check_claim(1, &forged).unwrap_err().contains("not in the nodes' key file"));
        let mut forged = claim.clone();
        forged.local_id = 8;
        assert!(store.check_claim(1, &forged).unwrap_err().contains("not a client of the key"));
        // Without the key, the id can only be claimed in the gateway's own namespace.
        let mut forged = claim.clone();
        forged.key.clear();
        assert!(store.check_claim(1, &forged).unwrap_err().contains("gateway 1's namespace"));

        // A gateway's own front end: its namespace, which no other gateway can claim.
        let own = store.verify(&front_end).unwrap().claim(&front_end, 1, 7);
        assert!(own.key.is_empty(), "a process key never leaves its process");
        assert_eq!(store.check_claim(1, &own), Ok(()));
        assert!(store.check_claim(2, &own).is_err());
        assert_ne!(own.client_id, store.verify(&front_end).unwrap().claim(&front_end, 2, 7).client_id);
        let open = Principal::open();
        assert_eq!(store.check_claim(3, &open.claim("", 3, 7)), Ok(()));
        assert!(store.check_claim(4, &open.claim("", 3, 7)).is_err());
        // A process key sent as if it were a file key is refused: it is not in the file
        // the nodes read, and on a node that shares the gateway's store it is its own.
        let smuggled = Claim { client_id: own.client_id, key: front_end.clone(), local_id: 7 };
        assert!(store.check_claim(1, &smuggled).is_err());
    }

    #[test]
    fn the_key_file_round_trips_and_refuses_bad_entries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.toml");
        let key = generate_key();
        append(&path, entry_for(&key, "alice", vec![1], false)).unwrap();
        assert!(append(&path, entry_for("other", "alice", vec![], false)).is_err(), "duplicate name");
        let store = KeyStore::load(&path).unwrap();
        assert_eq!(store.len(), 1);
        assert!(store.verify(&key).is_some());
        let bad = KeyEntry { name: "x".into(), hash: "zz".into(), accounts: vec![], admin: false };
        assert!(KeyStore::from_entries(vec![bad]).is_err());
        std::fs::write(&path, "[[key]]\nname = 1\n").unwrap();
        assert!(matches!(KeyStore::load(&path), Err(KeyError::File { .. })));
        // Not a regular file: refused, and left as it is.
        let refused = append(dir.path(), entry_for("k", "bob", vec![], false)).unwrap_err();
        assert!(refused.to_string().contains("not a regular file"), "{refused}");
        assert!(dir.path().is_dir());
    }
}

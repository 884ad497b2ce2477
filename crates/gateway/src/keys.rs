//! API keys: who a session is, and what it may do.
//!
//! A key is a random secret shown once when it is made (`bourse gateway key-add`); the
//! key file keeps only its BLAKE3 hash, with a name, the accounts the key trades for, and
//! whether it may send administrative commands. Every gateway of an exchange reads the
//! same file. Keys are 256-bit random strings, so a fast hash is the right one: there is
//! nothing to guess.
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
}

impl Principal {
    /// The holder every session is on a gateway that runs without keys.
    pub fn open() -> Principal {
        Principal { name: "open".into(), accounts: Vec::new(), admin: true }
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
        for entry in entries {
            let bad = |reason: &str| KeyError::Entry { name: entry.name.clone(), reason: reason.to_owned() };
            let hash = decode_hex32(&entry.hash).ok_or_else(|| bad("hash must be 64 hex digits"))?;
            if entry.name.is_empty() {
                return Err(bad("the name is empty"));
            }
            let principal = Principal { name: entry.name.clone(), accounts: entry.accounts, admin: entry.admin };
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
        let principal = Principal { name: name.to_owned(), accounts: Vec::new(), admin };
        self.by_hash.insert(*blake3::hash(key.as_bytes()).as_bytes(), Arc::new(principal));
        key
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
    let mut file = read_file(path)?;
    if file.key.iter().any(|k| k.name == entry.name) {
        return Err(KeyError::Entry { name: entry.name, reason: "a key of this name exists".into() });
    }
    file.key.push(entry);
    let text = toml::to_string(&file)
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
    }
}

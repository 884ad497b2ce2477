//! Who a certificate names: a [`Role`] and an id, encoded as one SAN URI
//! `bourse://<role>/<id>` (e.g. `bourse://node/1`).
//!
//! The id's alphabet (A-Z a-z 0-9 `.` `_` `-`, 1 to 64 characters) is a subset of the
//! URI's unreserved characters, so the URI needs no escaping and a name reads the same in
//! a certificate, a file name (`node-1.pem`) and a log line (`node 1`). A certificate
//! this crate accepts as an identity has exactly one URI SAN and it is such a URI: none,
//! several or a malformed one is refused rather than guessed at.

use std::fmt;
use std::str::FromStr;

use rustls::pki_types::CertificateDer;
use serde::{Deserialize, Serialize};
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::PkiError;

/// The scheme and authority-less prefix of every identity URI.
const URI_PREFIX: &str = "bourse://";

/// The longest id, in characters (bytes: the alphabet is ASCII).
pub const ID_LEN_MAX: usize = 64;

/// What a holder of a certificate may be inside the cluster; each RPC checks the role
/// it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// A Raft member holding the log and the engine.
    Node,
    /// A gateway: client sessions, sequencing, market data.
    Gateway,
    /// A person or tool administering the exchange.
    Operator,
    /// A read-only client (history, dashboards).
    Observer,
}

impl Role {
    /// Every role, in declaration order.
    pub const ALL: [Role; 4] = [Role::Node, Role::Gateway, Role::Operator, Role::Observer];

    /// The role's name in URIs, file names and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Gateway => "gateway",
            Role::Operator => "operator",
            Role::Observer => "observer",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = PkiError;

    fn from_str(s: &str) -> Result<Role, PkiError> {
        Role::ALL.into_iter().find(|role| role.as_str() == s).ok_or_else(|| PkiError::RoleUnknown(s.to_string()))
    }
}

/// A role and an id: who is at the other end of a connection. Displayed as `node 1`.
///
/// The fields are public for matching; [`Identity::new`] (and everything in this crate
/// that writes a certificate) checks the id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Identity {
    /// What the holder may do.
    pub role: Role,
    /// Which one of its role it is: 1 to 64 characters of A-Z a-z 0-9 `.` `_` `-`.
    pub id: String,
}

impl Identity {
    /// An identity whose id is checked.
    pub fn new(role: Role, id: impl Into<String>) -> Result<Identity, PkiError> {
        let identity = Identity { role, id: id.into() };
        identity.check()?;
        Ok(identity)
    }

    /// Refuses an id outside the alphabet or the length bound.
    pub fn check(&self) -> Result<(), PkiError> {
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if self.id.is_empty() || self.id.len() > ID_LEN_MAX || !self.id.chars().all(allowed) {
            return Err(PkiError::IdInvalid(self.id.clone()));
        }
        Ok(())
    }

    /// The certificate's SAN URI: `bourse://<role>/<id>`.
    pub fn uri(&self) -> String {
        format!("{URI_PREFIX}{}/{}", self.role, self.id)
    }

    /// Parses a SAN URI written by [`Identity::uri`]; anything else is refused.
    pub fn from_uri(uri: &str) -> Result<Identity, PkiError> {
        let malformed = || PkiError::CertificateInvalid(format!("malformed identity URI `{uri}`"));
        let rest = uri.strip_prefix(URI_PREFIX).ok_or_else(malformed)?;
        let (role, id) = rest.split_once('/').ok_or_else(malformed)?;
        let role = role.parse::<Role>().map_err(|_| malformed())?;
        Identity::new(role, id).map_err(|_| malformed())
    }

    /// The stem of the identity's certificate and key files: `<role>-<id>`.
    pub fn file_stem(&self) -> String {
        format!("{}-{}", self.role, self.id)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.role, self.id)
    }
}

/// The identity an end-entity certificate (DER) names in its one URI SAN.
///
/// This reads, it does not verify: call it on a certificate rustls has already verified
/// against the CA (a peer's, after the handshake), as [`peer_identity`] does.
pub fn identity_of(cert_der: &[u8]) -> Result<Identity, PkiError> {
    let (_, cert) = X509Certificate::from_der(cert_der)
        .map_err(|e| PkiError::CertificateInvalid(format!("not an X.509 certificate: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| PkiError::CertificateInvalid(format!("bad subject alternative names: {e}")))?
        .ok_or_else(|| PkiError::CertificateInvalid("no subject alternative names, so no identity".to_string()))?;
    let mut uris = san.value.general_names.iter().filter_map(|name| match name {
        GeneralName::URI(uri) => Some(*uri),
        _ => None,
    });
    let uri = uris.next().ok_or_else(|| PkiError::CertificateInvalid("no identity URI".to_string()))?;
    if uris.next().is_some() {
        return Err(PkiError::CertificateInvalid("several URIs: which identity is meant is not clear".to_string()));
    }
    Identity::from_uri(uri)
}

/// The identity of the peer of an established connection (its first certificate), or
/// `None` before the handshake, without a peer certificate, or if it names none.
///
/// Takes `&CommonState`, which `&ServerConnection` and `&ClientConnection` deref to.
pub fn peer_identity(conn: &rustls::CommonState) -> Option<Identity> {
    let first: &CertificateDer<'_> = conn.peer_certificates()?.first()?;
    identity_of(first).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_round_trips_and_unknown_is_refused() {
        for role in Role::ALL {
            assert_eq!(role.to_string().parse::<Role>().unwrap(), role);
        }
        let e = "admin".parse::<Role>().unwrap_err();
        assert!(e.to_string().contains("unknown role `admin`"), "{e}");
    }

    #[test]
    fn id_rule() {
        for good in ["1", "a.b_c-D9", &"x".repeat(ID_LEN_MAX)] {
            Identity::new(Role::Node, good).unwrap();
        }
        for bad in ["", "a/b", "a b", "é", "a:b", &"x".repeat(ID_LEN_MAX + 1)] {
            assert!(matches!(Identity::new(Role::Node, bad), Err(PkiError::IdInvalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn uri_round_trips_and_malformed_is_refused() {
        let identity = Identity::new(Role::Gateway, "g-7").unwrap();
        assert_eq!(identity.uri(), "bourse://gateway/g-7");
        assert_eq!(identity.to_string(), "gateway g-7");
        assert_eq!(Identity::from_uri(&identity.uri()).unwrap(), identity);
        for bad in ["bourse://node", "bourse://node/", "bourse://king/1", "https://node/1", "bourse://node/1/2"] {
            assert!(Identity::from_uri(bad).is_err(), "{bad}");
        }
    }
}

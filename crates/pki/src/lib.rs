//! `bourse-pki`: the cluster's certificate authority and its mutual TLS (issue 23,
//! DESIGN.md's "Identities, not addresses").
//!
//! Every connection inside the cluster is mutual TLS: both ends present a certificate
//! issued by the cluster's CA, both verify the other's against the CA and its CRL, and
//! each learns who the other is — not from its address but from its certificate, which
//! names a [`Role`] and an id. This crate makes and revokes those certificates ([`Ca`])
//! and builds the rustls configurations that check them ([`server_config`],
//! [`client_config`], and [`ReloadableServerConfig`] / [`ReloadableClientConfig`] to
//! pick up a new CRL or certificate without a restart).
//!
//! Client-facing listeners are TLS too, but one-sided: clients prove who they are with
//! an API key, so only the server presents a certificate ([`EdgeTls`], from the
//! operator's files or the gateway's own from this CA).
//!
//! # Identities
//!
//! An [`Identity`] is a role (`node`, `gateway`, `operator`, `observer`) and an id of 1
//! to 64 characters of `A-Z a-z 0-9 . _ -`. A certificate carries it as its one URI
//! subject alternative name, `bourse://<role>/<id>` (e.g. `bourse://node/1`); the CN
//! (`node 1`) is for people and is never read. [`identity_of`] reads a certificate's
//! identity and refuses one with none, several or a malformed one; [`peer_identity`]
//! reads it from an established rustls connection. Certificates also name the hosts
//! they serve (SAN DNS names and IP addresses), which clients verify as usual; both
//! extended key usages (serverAuth, clientAuth) are set, since every member is both.
//!
//! # Files
//!
//! A CA is a directory (mode 0700 when created here):
//!
//! ```text
//! DIR/ca.pem        the CA's self-signed certificate (ECDSA P-256, ten years)
//! DIR/ca.key        its private key, PKCS#8 PEM, mode 0600
//! DIR/crl.pem       the current CRL, signed by the CA (empty at first)
//! DIR/issued.json   the register: serial, identity, hosts, validity, revocation of every
//!                   certificate issued, and the current CRL number
//! DIR/.lock         flock'd while issuing or revoking (several processes may share DIR)
//! DIR/issued/<role>-<id>.pem   a certificate issued without another `out` directory
//! DIR/issued/<role>-<id>.key   its private key, mode 0600
//! ```
//!
//! [`TlsFiles::issued`] names the four files an endpoint needs. Every file is replaced
//! atomically (written beside, synced, renamed), so a reader sees the old one or the new
//! one. Certificates are valid one year by default ([`Ca::with_validity`]) and start five
//! minutes before they are issued (clock skew between machines); serials are 126 random
//! bits, shown as lowercase hex.
//!
//! # Revocation
//!
//! [`Ca::revoke`] marks the serial revoked in the register and rewrites `crl.pem` with a
//! higher CRL number. Verifiers read the CRL when their configuration is built: a
//! process sees a revocation after it rebuilds its configuration (a reloadable one's
//! `reload()`), and then refuses the certificate on every new handshake; connections
//! already established are not cut. The CRL's nextUpdate is informational and not
//! enforced, so a cluster keeps working on an old CRL rather than locking itself out.
//!
//! # Known limits
//!
//! The CA key sits in a file next to the certificates; there is no HSM, no intermediate
//! CA, no OCSP and no automatic renewal. Re-issuing an identity writes new files over
//! the old ones, and the old certificate stays valid until it expires or is revoked.

mod ca;
mod edge;
mod error;
mod files;
pub mod grpc;
mod identity;
mod register;
pub mod testing;
mod tls;

pub use ca::{
    Ca, Issued, IssuedInfo, CA_CERT_FILE, CA_KEY_FILE, CRL_FILE, ISSUED_DIR, REGISTER_FILE, VALIDITY_DEFAULT,
};
pub use edge::{certificate_hosts, Alpn, EdgeFiles, EdgeTls};
pub use error::PkiError;
pub use identity::{identity_of, peer_identity, Identity, Role, ID_LEN_MAX};
pub use tls::{client_config, server_config, Reloadable, ReloadableClientConfig, ReloadableServerConfig, TlsFiles};

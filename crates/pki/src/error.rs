//! The one error type of the crate: every refusal names what was refused and why, in a
//! sentence a person at a terminal can act on (the `bourse pki` command prints them as
//! they are).

use std::path::PathBuf;

/// Why a PKI operation or a TLS configuration failed.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// A file or directory could not be read, written or created.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// A role that is not one of node, gateway, operator, observer.
    #[error("unknown role `{0}` (expected node, gateway, operator or observer)")]
    RoleUnknown(String),
    /// An id outside the rule (1 to 64 characters of A-Z a-z 0-9 . _ -).
    #[error("bad id `{0}`: an id is 1 to 64 characters of A-Z, a-z, 0-9, '.', '_' and '-'")]
    IdInvalid(String),
    /// A host that is neither an IP address nor a valid DNS name.
    #[error("bad host `{0}`: expected an IP address or a DNS name")]
    HostInvalid(String),
    /// `Ca::init` found a CA (or the remains of one) in the directory.
    #[error("a CA already exists in {} ({} is present)", dir.display(), file)]
    CaExists {
        /// The CA directory.
        dir: PathBuf,
        /// The file that is already there.
        file: &'static str,
    },
    /// `Ca::open` found no CA in the directory.
    #[error("no CA in {} (no ca.pem there; create one with `bourse pki init --dir {}`)", dir.display(), dir.display())]
    CaMissing {
        /// The CA directory.
        dir: PathBuf,
    },
    /// The CA's key does not belong to its certificate.
    #[error("{}: ca.key is not the key of ca.pem", dir.display())]
    CaKeyMismatch {
        /// The CA directory.
        dir: PathBuf,
    },
    /// `Ca::revoke` was given a serial this CA never issued.
    #[error("no certificate with serial {0} was issued by this CA")]
    SerialUnknown(String),
    /// A PEM file held no object of the expected kind, or a malformed one.
    #[error("{}: {what}: {source}", path.display())]
    Pem {
        /// The file.
        path: PathBuf,
        /// What was expected in it.
        what: &'static str,
        /// What the PEM reader said.
        source: rustls::pki_types::pem::Error,
    },
    /// A certificate without an identity, with several, or with a malformed one.
    #[error("certificate: {0}")]
    CertificateInvalid(String),
    /// The register of issued certificates (issued.json) could not be read or written.
    #[error("{}: {source}", path.display())]
    Register {
        /// The register file.
        path: PathBuf,
        /// What the JSON reader or writer said.
        source: serde_json::Error,
    },
    /// A validity that is zero or too long to represent.
    #[error("bad validity: {0}")]
    ValidityInvalid(String),
    /// Generating a key, a certificate or a CRL failed.
    #[error("signing: {0}")]
    Sign(#[from] rcgen::Error),
    /// rustls refused the certificate, key or CRL of a configuration.
    #[error("tls: {0}")]
    Tls(#[from] rustls::Error),
    /// rustls could not build a certificate verifier (e.g. an unparsable CRL).
    #[error("tls verifier: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
}

impl PkiError {
    /// An I/O error on `path`.
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> PkiError {
        PkiError::Io { path: path.into(), source }
    }
}

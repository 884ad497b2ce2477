//! rustls configurations for mutual TLS inside the cluster: both ends present a
//! certificate from the CA and verify the other's against the CA and its CRL.
//!
//! The ring provider is installed in each builder; nothing depends on a process-wide
//! default provider. A configuration reads its files once: a certificate revoked or
//! renewed afterwards is seen by configurations built afterwards, which is what
//! [`ReloadableServerConfig`] and [`ReloadableClientConfig`] are for. TLS 1.2 and 1.3
//! are offered (rustls' safe defaults); between two Bourse processes it is 1.3.
//!
//! The CRL's nextUpdate is not enforced (see `ca.rs`), and revocation is checked on the
//! end-entity certificate only: the CA issues no intermediates and the trust anchor has
//! no CRL above it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::ca::{CA_CERT_FILE, CRL_FILE, ISSUED_DIR};
use crate::{Identity, PkiError};

/// The four files a TLS endpoint needs: the CA certificate it trusts, the CRL it checks
/// peers against, and its own certificate and key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TlsFiles {
    /// The CA's certificate (PEM): the only trust anchor.
    pub ca: PathBuf,
    /// The CA's CRL (PEM).
    pub crl: PathBuf,
    /// This endpoint's certificate (PEM; a chain, leaf first, is accepted).
    pub cert: PathBuf,
    /// This endpoint's private key (PEM).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The conventional paths of `identity` issued into `ca_dir/issued/` (where
    /// `bourse pki issue` puts certificates unless told `--out`).
    pub fn issued(ca_dir: &Path, identity: &Identity) -> TlsFiles {
        TlsFiles::in_dir(ca_dir, &ca_dir.join(ISSUED_DIR), identity)
    }

    /// The identity named by this endpoint's own certificate (its first, the leaf): what
    /// its peers will see, e.g. to check at start that a node was given its own files.
    pub fn identity(&self) -> Result<Identity, PkiError> {
        let leaf = certificates(&self.cert)?.swap_remove(0);
        crate::identity_of(&leaf)
    }

    /// The paths of `identity` issued into `out` by the CA in `ca_dir`.
    pub fn in_dir(ca_dir: &Path, out: &Path, identity: &Identity) -> TlsFiles {
        let stem = identity.file_stem();
        TlsFiles {
            ca: ca_dir.join(CA_CERT_FILE),
            crl: ca_dir.join(CRL_FILE),
            cert: out.join(format!("{stem}.pem")),
            key: out.join(format!("{stem}.key")),
        }
    }
}

/// A server configuration that presents `files.cert` and requires every client to
/// present a certificate chaining to `files.ca` and not revoked by `files.crl`.
/// Read the client's identity after the handshake with [`peer_identity`](crate::peer_identity).
///
/// Setting ALPN or other options: `Arc::unwrap_or_clone` gives a `ServerConfig` to change.
pub fn server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, PkiError> {
    let loaded = Loaded::read(files)?;
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(loaded.roots.clone(), provider.clone())
        .with_crls(loaded.crls)
        .only_check_end_entity_revocation()
        .build()?;
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(verifier)
        .with_single_cert(loaded.chain, loaded.key)?;
    Ok(Arc::new(config))
}

/// A client configuration that presents `files.cert` and verifies the server's
/// certificate against `files.ca` and `files.crl`, and its name against the
/// `ServerName` the connection is opened with (a DNS name or an IP address from the
/// `hosts` it was issued for). Read the server's identity with
/// [`peer_identity`](crate::peer_identity).
pub fn client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, PkiError> {
    let loaded = Loaded::read(files)?;
    let provider = provider();
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(loaded.roots, provider.clone())
        .with_crls(loaded.crls)
        .only_check_end_entity_revocation()
        .build()?;
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_webpki_verifier(verifier)
        .with_client_auth_cert(loaded.chain, loaded.key)?;
    Ok(Arc::new(config))
}

/// The crypto provider of every configuration: ring.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The contents of a [`TlsFiles`].
struct Loaded {
    roots: Arc<RootCertStore>,
    crls: Vec<CertificateRevocationListDer<'static>>,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

impl Loaded {
    fn read(files: &TlsFiles) -> Result<Loaded, PkiError> {
        let mut roots = RootCertStore::empty();
        for cert in certificates(&files.ca)? {
            roots.add(cert)?;
        }
        let crls = CertificateRevocationListDer::pem_file_iter(&files.crl)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|source| pem_error(&files.crl, "a CRL", source))?;
        if crls.is_empty() {
            return Err(PkiError::CertificateInvalid(format!("{}: no CRL in it", files.crl.display())));
        }
        let chain = certificates(&files.cert)?;
        let key = PrivateKeyDer::from_pem_file(&files.key)
            .map_err(|source| pem_error(&files.key, "a private key", source))?;
        Ok(Loaded { roots: Arc::new(roots), crls, chain, key })
    }
}

fn pem_error(path: &Path, what: &'static str, source: rustls::pki_types::pem::Error) -> PkiError {
    PkiError::Pem { path: path.to_path_buf(), what, source }
}

/// Every certificate in a PEM file; at least one.
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, PkiError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|source| pem_error(path, "certificates", source))?;
    if certs.is_empty() {
        return Err(PkiError::CertificateInvalid(format!("{}: no certificate in it", path.display())));
    }
    Ok(certs)
}

/// A configuration rebuilt from its files on demand: after a revocation (a new CRL) or a
/// renewal (a new certificate and key), `reload()` builds a new configuration that new
/// handshakes use; established connections are not affected.
#[derive(Debug)]
pub struct Reloadable<C> {
    files: TlsFiles,
    build: fn(&TlsFiles) -> Result<Arc<C>, PkiError>,
    current: RwLock<Arc<C>>,
}

/// A [`server_config`] that [`reload`](Reloadable::reload)s.
pub type ReloadableServerConfig = Reloadable<ServerConfig>;
/// A [`client_config`] that [`reload`](Reloadable::reload)s.
pub type ReloadableClientConfig = Reloadable<ClientConfig>;

impl Reloadable<ServerConfig> {
    /// Builds the first server configuration from `files`.
    pub fn server(files: TlsFiles) -> Result<ReloadableServerConfig, PkiError> {
        Reloadable::new(files, server_config)
    }
}

impl Reloadable<ClientConfig> {
    /// Builds the first client configuration from `files`.
    pub fn client(files: TlsFiles) -> Result<ReloadableClientConfig, PkiError> {
        Reloadable::new(files, client_config)
    }
}

impl<C> Reloadable<C> {
    pub(crate) fn new(
        files: TlsFiles,
        build: fn(&TlsFiles) -> Result<Arc<C>, PkiError>,
    ) -> Result<Reloadable<C>, PkiError> {
        let current = RwLock::new(build(&files)?);
        Ok(Reloadable { files, build, current })
    }

    /// The configuration for the next handshake (e.g. `TlsAcceptor::from(r.current())`).
    pub fn current(&self) -> Arc<C> {
        self.current.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Re-reads the files and swaps in a new configuration. On an error (a file half
    /// replaced by hand, a key that does not match) the current one stays.
    pub fn reload(&self) -> Result<(), PkiError> {
        let next = (self.build)(&self.files)?;
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = next;
        Ok(())
    }

    /// The files it is built from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }
}

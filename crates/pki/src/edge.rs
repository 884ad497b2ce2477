//! TLS at the edge: the server side of client-facing listeners (HTTPS and WSS, FIX, XML,
//! the gateway's gRPC), where clients prove who they are with an API key, not with a
//! certificate, so only the server presents one.
//!
//! The certificate and key come from files ([`EdgeFiles`]): ones the operator got from
//! a public CA, or the gateway's own from the cluster's CA ([`EdgeFiles::issued`];
//! clients then trust the CA's `ca.pem`). [`EdgeTls`] reads them and builds one
//! configuration per application protocol; [`EdgeTls::reload`] re-reads them, so a
//! renewed certificate serves the next handshake without a restart.

use std::path::{Path, PathBuf};
use std::sync::{Arc, PoisonError, RwLock};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;

use crate::ca::{CA_CERT_FILE, ISSUED_DIR};
use crate::{Identity, PkiError};

/// The certificate (PEM, leaf first, then any intermediates) and private key (PEM) a
/// client-facing listener presents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl EdgeFiles {
    /// The certificate `bourse pki` issued to `identity` in `ca_dir/issued/`; clients
    /// verify it against `ca_dir/ca.pem` ([`EdgeFiles::ca_of`]).
    pub fn issued(ca_dir: &Path, identity: &Identity) -> EdgeFiles {
        let stem = identity.file_stem();
        let dir = ca_dir.join(ISSUED_DIR);
        EdgeFiles { cert: dir.join(format!("{stem}.pem")), key: dir.join(format!("{stem}.key")) }
    }

    /// The CA certificate clients of an [`EdgeFiles::issued`] certificate trust.
    pub fn ca_of(ca_dir: &Path) -> PathBuf {
        ca_dir.join(CA_CERT_FILE)
    }
}

/// The application protocol a listener speaks after the handshake, announced with ALPN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alpn {
    /// HTTP/1.1 (REST and its WebSocket upgrades).
    Http1,
    /// HTTP/2 (gRPC).
    H2,
    /// None announced (FIX, XML).
    None,
}

/// The configurations of one certificate, one per [`Alpn`].
struct Configs {
    http1: Arc<ServerConfig>,
    h2: Arc<ServerConfig>,
    none: Arc<ServerConfig>,
}

/// A client-facing listener's TLS: the server configuration for each handshake, rebuilt
/// from its files on [`EdgeTls::reload`]. Clones share the configuration.
#[derive(Clone)]
pub struct EdgeTls {
    inner: Arc<EdgeInner>,
}

struct EdgeInner {
    files: EdgeFiles,
    current: RwLock<Arc<Configs>>,
}

impl std::fmt::Debug for EdgeTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeTls").field("files", &self.inner.files).finish()
    }
}

impl EdgeTls {
    /// Reads `files`; fails on a missing or malformed file or a key that is not the
    /// certificate's.
    pub fn load(files: EdgeFiles) -> Result<EdgeTls, PkiError> {
        let configs = build(&files)?;
        Ok(EdgeTls { inner: Arc::new(EdgeInner { files, current: RwLock::new(Arc::new(configs)) }) })
    }

    /// The configuration for the next handshake of a listener speaking `alpn`.
    pub fn config(&self, alpn: Alpn) -> Arc<ServerConfig> {
        let configs = self.inner.current.read().unwrap_or_else(PoisonError::into_inner).clone();
        match alpn {
            Alpn::Http1 => Arc::clone(&configs.http1),
            Alpn::H2 => Arc::clone(&configs.h2),
            Alpn::None => Arc::clone(&configs.none),
        }
    }

    /// Re-reads the files; on an error the current configuration stays.
    pub fn reload(&self) -> Result<(), PkiError> {
        let next = build(&self.inner.files)?;
        *self.inner.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(next);
        Ok(())
    }

    pub fn files(&self) -> &EdgeFiles {
        &self.inner.files
    }
}

/// The hosts (SAN DNS names and IP addresses) the first certificate in the PEM file
/// `path` is valid for: what clients may dial to reach a listener presenting it.
pub fn certificate_hosts(path: &Path) -> Result<Vec<String>, PkiError> {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let leaf = CertificateDer::pem_file_iter(path)
        .and_then(|mut iter| iter.next().transpose())
        .map_err(|source| PkiError::Pem { path: path.to_path_buf(), what: "certificates", source })?
        .ok_or_else(|| PkiError::CertificateInvalid(format!("{}: no certificate in it", path.display())))?;
    let (_, cert) = X509Certificate::from_der(&leaf)
        .map_err(|e| PkiError::CertificateInvalid(format!("{}: not an X.509 certificate: {e}", path.display())))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| PkiError::CertificateInvalid(format!("{}: bad subject alternative names: {e}", path.display())))?;
    let names = san.map(|san| san.value.general_names.iter().collect::<Vec<_>>()).unwrap_or_default();
    Ok(names
        .into_iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            GeneralName::IPAddress(&[a, b, c, d]) => Some(std::net::Ipv4Addr::new(a, b, c, d).to_string()),
            GeneralName::IPAddress(bytes) => {
                <[u8; 16]>::try_from(*bytes).ok().map(|v6| std::net::Ipv6Addr::from(v6).to_string())
            }
            _ => None,
        })
        .collect())
}

fn build(files: &EdgeFiles) -> Result<Configs, PkiError> {
    let chain = CertificateDer::pem_file_iter(&files.cert)
        .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
        .map_err(|source| PkiError::Pem { path: files.cert.clone(), what: "certificates", source })?;
    if chain.is_empty() {
        return Err(PkiError::CertificateInvalid(format!("{}: no certificate in it", files.cert.display())));
    }
    let key = PrivateKeyDer::from_pem_file(&files.key).map_err(|source| PkiError::Pem {
        path: files.key.clone(),
        what: "a private key",
        source,
    })?;
    let none = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(chain, key)?;
    let with = |protocol: &[u8]| {
        let mut config = none.clone();
        config.alpn_protocols = vec![protocol.to_vec()];
        Arc::new(config)
    };
    Ok(Configs { http1: with(b"http/1.1"), h2: with(b"h2"), none: Arc::new(none) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Ca, Role};

    #[test]
    fn loads_an_issued_certificate_and_refuses_a_mismatched_key() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Ca::init(&dir.path().join("ca")).unwrap();
        let gateway = Identity::new(Role::Gateway, "1").unwrap();
        let other = Identity::new(Role::Gateway, "2").unwrap();
        let hosts = vec!["localhost".to_string()];
        ca.issue(&gateway, &hosts, &ca.dir().join(ISSUED_DIR)).unwrap();
        ca.issue(&other, &hosts, &ca.dir().join(ISSUED_DIR)).unwrap();
        let files = EdgeFiles::issued(ca.dir(), &gateway);
        assert_eq!(certificate_hosts(&files.cert).unwrap(), hosts);
        let tls = EdgeTls::load(files.clone()).unwrap();
        assert_eq!(tls.config(Alpn::Http1).alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(tls.config(Alpn::H2).alpn_protocols, vec![b"h2".to_vec()]);
        assert!(tls.config(Alpn::None).alpn_protocols.is_empty());
        tls.reload().unwrap();

        let mismatched = EdgeFiles { key: EdgeFiles::issued(ca.dir(), &other).key, ..files };
        assert!(EdgeTls::load(mismatched).is_err(), "another certificate's key is refused");
        let missing = EdgeFiles { cert: dir.path().join("absent.pem"), key: dir.path().join("absent.key") };
        let error = EdgeTls::load(missing).unwrap_err().to_string();
        assert!(error.contains("absent.pem"), "{error}");
    }
}

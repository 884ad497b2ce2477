//! For tests of TLS listeners: a CA of their own, a gateway certificate from it for
//! loopback, and a client configuration that trusts that CA only.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::{Ca, EdgeFiles, Identity, Role, ISSUED_DIR};

/// The hosts of [`loopback_edge`]'s certificate.
pub const LOOPBACK_HOSTS: [&str; 2] = ["127.0.0.1", "localhost"];

/// Makes a CA in `dir` and issues `gateway 1` a certificate for [`LOOPBACK_HOSTS`];
/// returns its files and the CA certificate clients trust. Panics on failure.
pub fn loopback_edge(dir: &Path) -> (EdgeFiles, PathBuf) {
    let ca = Ca::init(dir).expect("a new CA");
    let identity = Identity::new(Role::Gateway, "1").expect("a valid identity");
    ca.issue(&identity, &LOOPBACK_HOSTS.map(String::from), &dir.join(ISSUED_DIR)).expect("a certificate");
    (EdgeFiles::issued(dir, &identity), EdgeFiles::ca_of(dir))
}

/// A client configuration trusting the CA certificate in `ca` only, announcing `alpn`.
pub fn client_trusting(ca: &Path, alpn: &[&[u8]]) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("a PEM file") {
        roots.add(cert.expect("a certificate")).expect("a CA certificate");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS 1.2 and 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

//! Mutual TLS over loopback with tokio-rustls, as the Raft transport will use it: a
//! client with a certificate from the CA is let in and named; no certificate, another
//! CA's certificate, a revoked certificate (once the configuration is reloaded) and a
//! server answering for another host are refused.

use std::path::Path;
use std::sync::Arc;

use bourse_pki::{client_config, peer_identity, server_config, Ca, Identity, ReloadableServerConfig, Role, TlsFiles};
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};

/// What each end saw: the peer's identity, or why the connection failed.
struct Outcome {
    server: Result<Option<Identity>, String>,
    client: Result<Option<Identity>, String>,
}

impl Outcome {
    /// The server refused the client, for `reason`, and the client got no answer.
    fn assert_refused_by_server(&self, reason: &str) {
        let error = self.server.as_ref().expect_err("the server let the client in");
        assert!(error.contains(reason), "server: {error} (expected {reason})");
        assert!(self.client.is_err(), "the client got an answer");
    }

    /// The client refused the server, for `reason`, and the server did not let it in.
    fn assert_refused_by_client(&self, reason: &str) {
        let error = self.client.as_ref().expect_err("the client accepted the server");
        assert!(error.contains(reason), "client: {error} (expected {reason})");
        assert!(self.server.is_err(), "the server let the client in");
    }
}

/// One connection: the server accepts, reads the client's identity and answers "ok";
/// the client connects to `server_name` and reads the answer.
async fn connect(server: Arc<ServerConfig>, client: Arc<ClientConfig>, server_name: &str) -> Outcome {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_side = async move {
        let (tcp, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let mut tls = TlsAcceptor::from(server).accept(tcp).await.map_err(|e| e.to_string())?;
        let identity = peer_identity(tls.get_ref().1);
        tls.write_all(b"ok").await.map_err(|e| e.to_string())?;
        tls.shutdown().await.map_err(|e| e.to_string())?;
        Ok(identity)
    };
    let name = ServerName::try_from(server_name.to_string()).unwrap();
    let client_side = async move {
        let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        let mut tls = TlsConnector::from(client).connect(name, tcp).await.map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        tls.read_to_end(&mut answer).await.map_err(|e| e.to_string())?;
        if answer != b"ok" {
            return Err(format!("answer {answer:?}"));
        }
        Ok(peer_identity(tls.get_ref().1))
    };
    let (server, client) = tokio::join!(server_side, client_side);
    Outcome { server, client }
}

fn identity(role: Role, id: &str) -> Identity {
    Identity::new(role, id).unwrap()
}

/// A CA in `dir` with node 1 (on 127.0.0.1) and gateway g1 issued into `dir/issued`.
fn cluster(dir: &Path) -> (Ca, TlsFiles, TlsFiles) {
    let ca = Ca::init(dir).unwrap();
    let hosts = ["127.0.0.1".to_string()];
    let node = ca.issue(&identity(Role::Node, "1"), &hosts, &dir.join("issued")).unwrap();
    let gateway = ca.issue(&identity(Role::Gateway, "g1"), &hosts, &dir.join("issued")).unwrap();
    assert_eq!(node.files, TlsFiles::issued(dir, &identity(Role::Node, "1")));
    (ca, node.files, gateway.files)
}

#[tokio::test]
async fn mutual_handshake_names_both_ends() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, node, gateway) = cluster(dir.path());
    let outcome = connect(server_config(&node).unwrap(), client_config(&gateway).unwrap(), "127.0.0.1").await;
    assert_eq!(outcome.server.unwrap(), Some(identity(Role::Gateway, "g1")));
    assert_eq!(outcome.client.unwrap(), Some(identity(Role::Node, "1")));
}

#[tokio::test]
async fn client_without_certificate_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, node, _gateway) = cluster(dir.path());
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::pem::PemObject::from_pem_file(&node.ca).unwrap()).unwrap();
    let anonymous = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let outcome = connect(server_config(&node).unwrap(), Arc::new(anonymous), "127.0.0.1").await;
    outcome.assert_refused_by_server("peer sent no certificates");
}

#[tokio::test]
async fn certificate_from_another_ca_is_refused_both_ways() {
    let ours = tempfile::tempdir().unwrap();
    let theirs = tempfile::tempdir().unwrap();
    let (_ca, node, gateway) = cluster(ours.path());
    let (_other, stranger_node, stranger_gateway) = cluster(theirs.path());
    // A client that trusts our CA but presents the other CA's certificate.
    let impostor = TlsFiles { cert: stranger_gateway.cert, key: stranger_gateway.key, ..gateway.clone() };
    let outcome = connect(server_config(&node).unwrap(), client_config(&impostor).unwrap(), "127.0.0.1").await;
    outcome.assert_refused_by_server("UnknownIssuer");
    // A server that trusts our CA but presents the other CA's certificate.
    let impostor = TlsFiles { cert: stranger_node.cert, key: stranger_node.key, ..node };
    let outcome = connect(server_config(&impostor).unwrap(), client_config(&gateway).unwrap(), "127.0.0.1").await;
    outcome.assert_refused_by_client("UnknownIssuer");
}

#[tokio::test]
async fn revoked_client_is_refused_after_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, node, gateway) = cluster(dir.path());
    let other_gateway = ca.issue(&identity(Role::Gateway, "g2"), &[], &dir.path().join("issued")).unwrap();
    let server = ReloadableServerConfig::server(node).unwrap();
    let client = client_config(&gateway).unwrap();
    assert!(connect(server.current(), client.clone(), "127.0.0.1").await.server.is_ok());

    let serial = ca.list().unwrap().into_iter().find(|i| i.identity == identity(Role::Gateway, "g1")).unwrap().serial;
    ca.revoke(&serial).unwrap();
    // The configuration read the CRL when it was built: until it is rebuilt, it does not know.
    assert!(connect(server.current(), client.clone(), "127.0.0.1").await.server.is_ok());
    server.reload().unwrap();
    connect(server.current(), client.clone(), "127.0.0.1").await.assert_refused_by_server("Revoked");
    // Everyone else is still let in.
    let other = connect(server.current(), client_config(&other_gateway.files).unwrap(), "127.0.0.1").await;
    assert_eq!(other.server.unwrap(), Some(identity(Role::Gateway, "g2")));
}

#[tokio::test]
async fn revoked_server_is_refused_by_a_client_built_after() {
    let dir = tempfile::tempdir().unwrap();
    let (ca, node, gateway) = cluster(dir.path());
    let server = server_config(&node).unwrap();
    ca.revoke(&ca.list().unwrap()[0].serial).unwrap();
    connect(server, client_config(&gateway).unwrap(), "127.0.0.1").await.assert_refused_by_client("Revoked");
}

#[tokio::test]
async fn server_answering_for_another_host_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (_ca, node, gateway) = cluster(dir.path());
    // node 1 was issued for 127.0.0.1 only.
    let outcome = connect(server_config(&node).unwrap(), client_config(&gateway).unwrap(), "localhost").await;
    outcome.assert_refused_by_client("not valid for name \"localhost\"");
    let outcome = connect(server_config(&node).unwrap(), client_config(&gateway).unwrap(), "127.0.0.2").await;
    outcome.assert_refused_by_client("not valid for name \"127.0.0.2\"");
}

#[tokio::test]
async fn dns_names_are_verified_as_issued() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(dir.path()).unwrap();
    let out = dir.path().join("issued");
    let node = ca.issue(&identity(Role::Node, "2"), &["localhost".to_string()], &out).unwrap();
    let operator = ca.issue(&identity(Role::Operator, "alice"), &[], &out).unwrap();
    let outcome =
        connect(server_config(&node.files).unwrap(), client_config(&operator.files).unwrap(), "localhost").await;
    assert_eq!(outcome.server.unwrap(), Some(identity(Role::Operator, "alice")));
}

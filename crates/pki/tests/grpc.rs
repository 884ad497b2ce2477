//! The gRPC side's connections (`bourse_pki::grpc`): `incoming()` names each peer by its
//! certificate, drops one whose handshake fails without stopping, and ends a connection
//! at the next reload, on every read and write after it (never polling a finished
//! future twice); `Connector` dials, verifies the server and checks its role.

use std::sync::Arc;

use bourse_pki::grpc::{incoming, AcceptStats, Connector, ServerTls};
use bourse_pki::{Ca, Identity, Reloadable, Role, TlsFiles};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

fn issue(ca: &Ca, dir: &std::path::Path, role: Role, id: &str, hosts: &[&str]) -> Identity {
    let identity = Identity::new(role, id).unwrap();
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    ca.issue(&identity, &hosts, &dir.join(bourse_pki::ISSUED_DIR)).unwrap();
    identity
}

#[tokio::test]
async fn connections_carry_their_identity_and_end_at_the_next_reload() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("ca");
    let ca = Ca::init(&dir).unwrap();
    let node = issue(&ca, &dir, Role::Node, "1", &["127.0.0.1"]);
    let gateway = issue(&ca, &dir, Role::Gateway, "3", &[]);
    let config = Arc::new(Reloadable::grpc_server(TlsFiles::issued(&dir, &node)).unwrap());
    let (reload, reloads) = tokio::sync::watch::channel(0u64);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let stats = Arc::new(AcceptStats::default());
    let mut accepted = incoming(listener, Some(ServerTls { config, reloads }), Arc::clone(&stats));

    // A client without any certificate fails its handshake; the server goes on.
    let plain = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    drop(plain);

    let connector = Connector::issued(&dir, &gateway, Role::Node).unwrap();
    let mut client = connector.connect("127.0.0.1", port).await.expect("the gateway connects");
    let mut conn = accepted.next().await.unwrap().unwrap();
    assert_eq!(conn.peer().identity.as_ref(), Some(&gateway));
    client.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    conn.read_exact(&mut buf).await.unwrap();
    assert_eq!(&buf, b"ping");

    // A reload ends it: the read waiting now fails, and so does every call after.
    let waiting = tokio::spawn(async move {
        let mut buf = [0u8; 4];
        let first = conn.read(&mut buf).await;
        let second = conn.read(&mut buf).await;
        let write = conn.write_all(b"late").await;
        (first.is_err(), second.is_err(), write.is_err())
    });
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    reload.send_modify(|n| *n += 1);
    let ended = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
    assert_eq!(ended, (true, true, true), "read, read again and write after the reload");

    // A client that expects an operator's server refuses the node.
    let wrong = Connector::issued(&dir, &gateway, Role::Operator).unwrap();
    let error = wrong.connect("127.0.0.1", port).await.expect_err("a node is not an operator");
    assert!(error.to_string().contains("not a operator") || error.to_string().contains("node 1"), "{error}");
    let _ = accepted.next().await; // the server side of that connection
    assert!(stats.handshakes_failed.load(std::sync::atomic::Ordering::Relaxed) >= 1, "the plaintext client counted");
}

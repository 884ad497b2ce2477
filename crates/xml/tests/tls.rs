//! The XML protocol over TLS on ports of its own: the spec's example in both framings
//! through listeners that present a certificate from a CA the client trusts, while the
//! plaintext listeners keep serving; a client that connects and never starts the
//! handshake is dropped at the listener's first-request deadline.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_xml::{Framing, XmlConfig, XmlServer};
use support::{frame, results, Exchange2};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CREATE: &str = "<create>\n  <account id=\"42\" balance=\"1000\"/>\n  <symbol sym=\"ACME\">\n    <account id=\"42\">10</account>\n  </symbol>\n</create>\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_framings_over_tls_beside_plaintext() {
    let x = Exchange2::start().await;
    let pki = tempfile::tempdir().unwrap();
    let (files, ca) = bourse_pki::testing::loopback_edge(pki.path());
    let edge = bourse_port::EdgeTls::load(files).unwrap();
    let start = |framing| {
        let mut config = XmlConfig::new("127.0.0.1:0".parse().unwrap(), framing);
        config.tls = Some(edge.clone());
        config.limits.first_request_timeout = Duration::from_millis(500);
        XmlServer::start(config, Arc::clone(&x.exchange))
    };
    let (bare, framed) = (start(Framing::Bare).await.unwrap(), start(Framing::Prefixed).await.unwrap());
    let client = tokio_rustls::TlsConnector::from(bourse_pki::testing::client_trusting(&ca, &[]));
    let connect = |addr: std::net::SocketAddr| {
        let client = client.clone();
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            client.connect(rustls::pki_types::ServerName::try_from("localhost").unwrap(), tcp).await.unwrap()
        }
    };

    // Bare: one request, the reply, the server closes.
    let mut stream = connect(bare.addr()).await;
    stream.write_all(&frame(CREATE.as_bytes())).await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_string(&mut reply)).await.unwrap().unwrap();
    assert_eq!(reply, results(&["  <created id=\"42\"/>", "  <created sym=\"ACME\" id=\"42\"/>"]));

    // Length-prefixed: two requests on one kept-open connection.
    let mut stream = connect(framed.addr()).await;
    let expected =
        results(&["  <error id=\"42\">Account already exists</error>", "  <created sym=\"ACME\" id=\"42\"/>"]);
    for _ in 0..2 {
        stream.write_all(&frame(CREATE.as_bytes())).await.unwrap();
        assert_eq!(read_framed(&mut stream).await, expected);
    }

    // The plaintext listener still serves beside them.
    let plain = x.bare("<query id=\"42\"/>\n").await;
    assert!(plain.contains("<results>"), "{plain}");

    // A client that connects and sends nothing is dropped at the handshake deadline.
    let began = Instant::now();
    let mut silent = tokio::net::TcpStream::connect(bare.addr()).await.unwrap();
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut sink)).await;
    assert!(read.is_ok(), "the server closed the stalled connection");
    assert!(began.elapsed() >= Duration::from_millis(400), "not before the deadline: {:?}", began.elapsed());

    bare.shutdown().await;
    framed.shutdown().await;
    x.stop().await;
}

/// One `N\n` + body reply.
async fn read_framed(stream: &mut (impl AsyncReadExt + Unpin)) -> String {
    let mut header = Vec::new();
    loop {
        let byte = stream.read_u8().await.unwrap();
        if byte == b'\n' {
            break;
        }
        header.push(byte);
    }
    let len: usize = std::str::from_utf8(&header).unwrap().parse().unwrap();
    let mut body = vec![0; len];
    stream.read_exact(&mut body).await.unwrap();
    String::from_utf8(body).unwrap()
}

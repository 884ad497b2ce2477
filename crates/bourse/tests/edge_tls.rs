//! TLS for clients through the binary: `bourse gateway run` with a certificate from
//! `bourse pki issue` serves HTTPS, FIX over TLS and the XML protocol's TLS port, each
//! verified by a client that trusts the CA only and checks the host name; plaintext
//! client listeners bind loopback unless `--allow-plaintext`, and every refusal says
//! what to do.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use bourse_fix::codec::Message;
use support::{bourse_run, GatewayProcess, NodeProcess};

type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

/// A TLS connection to `addr` verifying the name `localhost` against the CA in `ca`.
fn tls(addr: &str, ca: &std::path::Path, alpn: &[&[u8]]) -> Tls {
    let config = bourse_pki::testing::client_trusting(ca, alpn);
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let connection = rustls::ClientConnection::new(Arc::clone(&config), name).unwrap();
    let socket = TcpStream::connect(addr).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    rustls::StreamOwned::new(connection, socket)
}

#[test]
fn client_listeners_serve_tls_and_plaintext_binds_loopback_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (keys, pki) = (path("keys.toml"), path("pki"));
    let ops = bourse_run(&["gateway", "key-add", "--keys", &keys, "--name", "ops", "--admin"]);
    let alice = bourse_run(&["gateway", "key-add", "--keys", &keys, "--name", "alice", "--account", "0"]);
    assert!(ops.status.success() && alice.status.success(), "{} {}", ops.stderr, alice.stderr);
    let (ops_key, alice_key) = (ops.stdout.trim().to_owned(), alice.stdout.trim().to_owned());
    for args in [
        &["pki", "init", "--dir", &pki][..],
        &["pki", "issue", "--dir", &pki, "--role", "gateway", "--id", "edge", "--host", "127.0.0.1,localhost"],
        &["pki", "issue", "--dir", &pki, "--role", "gateway", "--id", "other", "--host", "localhost"],
    ] {
        let run = bourse_run(args);
        assert!(run.status.success(), "{args:?}: {}", run.stderr);
    }
    let issued = |stem: &str, ext: &str| format!("{pki}/issued/gateway-{stem}.{ext}");
    let (cert, key, other_key) = (issued("edge", "pem"), issued("edge", "key"), issued("other", "key"));
    let ca = std::path::PathBuf::from(format!("{pki}/ca.pem"));

    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let cluster = node.addr.to_string();
    let fix_data = path("fix");
    let base = ["gateway", "run", "--id", "1", "--cluster", &cluster, "--keys", &keys, "--hold-us", "0"];
    let loopback = ["--listen", "127.0.0.1:0"];

    // Refused before anything starts, each saying what to do.
    let refusals: [(&[&str], &str); 7] = [
        (&[&loopback[..], &["--http", "0.0.0.0:0"]].concat(), "--allow-plaintext"),
        (&[&loopback[..], &["--fix", "0.0.0.0:0", "--data", &fix_data]].concat(), "--tls-cert"),
        (&["--listen", "0.0.0.0:0"], "--tls-cert"),
        (&[&loopback[..], &["--day-trading", "0.0.0.0:0"]].concat(), "no TLS of its own"),
        (&[&loopback[..], &["--xml-tls", "127.0.0.1:0", "--xml-as", "ops"]].concat(), "need a certificate"),
        (&[&loopback[..], &["--http", "127.0.0.1:0", "--tls-cert", &cert, "--tls-key", &other_key]].concat(), &cert),
        (&[&loopback[..], &["--tls-cert", &cert]].concat(), "--tls-key"),
    ];
    for (extra, says) in refusals {
        let run = bourse_run(&[&base[..], extra].concat());
        assert!(!run.status.success() && run.stderr.contains(says), "{extra:?} should say {says:?}: {}", run.stderr);
    }
    // --allow-plaintext is the operator's say-so.
    let open = GatewayProcess::start(
        [&base[2..], &loopback[..], &["--http", "0.0.0.0:0", "--allow-plaintext"]].concat(),
        "REST + WebSocket API on ",
    );
    assert!(open.addr.starts_with("http://"), "{}", open.addr);
    drop(open);

    // With a certificate: gRPC, HTTPS, FIX and XML over TLS.
    let tls_args = ["--tls-cert", &cert, "--tls-key", &key, "--http", "127.0.0.1:0", "--fix", "127.0.0.1:0"];
    let xml_args = ["--data", &fix_data, "--xml-framed-tls", "127.0.0.1:0", "--xml-as", "ops"];
    let gateway = GatewayProcess::start(
        [&base[2..], &loopback[..], &tls_args[..], &xml_args[..]].concat(),
        "XML exchange protocol on ",
    );
    let grpc = gateway.printed("bourse gateway listening on ").expect("the gRPC address");
    assert!(gateway.stdout.lock().unwrap()[0].ends_with(" (TLS)"), "the gRPC port says it is TLS");
    let http = gateway.printed("REST + WebSocket API on ").expect("the REST address");
    let http = http.strip_prefix("https://").expect("served over HTTPS").trim_end_matches('/').to_owned();
    let fix = gateway.printed("FIX 4.4 acceptor on ").expect("the FIX address");
    assert!(gateway.stdout.lock().unwrap().iter().any(|l| l.starts_with("FIX 4.4") && l.ends_with(" (TLS)")));

    // gRPC: the CLI with the key and --ca verifies the gateway and is served.
    let ca_s = ca.to_str().unwrap();
    let created = bourse_run(&["--node", &grpc, "--api-key", &ops_key, "--ca", ca_s, "account-create"]);
    assert!(created.status.success() && created.stdout.contains("ok: id 0"), "{} {}", created.stdout, created.stderr);

    // HTTPS: a key's request answered.
    let mut stream = tls(&http, &ca, &[b"http/1.1"]);
    let request = format!(
        "GET /v1/symbols HTTP/1.1\r\nhost: localhost\r\nauthorization: Bearer {alice_key}\r\nconnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // Plaintext to the HTTPS port gets no HTTP answer.
    let mut plain = TcpStream::connect(&http).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"GET /v1/accounts/0 HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
    let mut bytes = Vec::new();
    let _ = plain.read_to_end(&mut bytes);
    assert!(!bytes.starts_with(b"HTTP/"), "{:?}", String::from_utf8_lossy(&bytes));

    // FIX over TLS: the Logon with alice's key is answered with a Logon.
    let mut stream = tls(&fix, &ca, &[]);
    let mut logon = Message::new("A");
    logon.push(49, "ALICE").push(56, "BOURSE").push_display(34, 1u64).push(52, "20261127-00:00:00.000");
    logon.push(98, "0").push(108, "30").push(554, &alice_key).push(141, "Y");
    stream.write_all(&logon.encode()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut bytes = Vec::new();
    while bourse_fix::codec::frame(&bytes).ok().flatten().is_none() {
        let chunk = reader.fill_buf().unwrap();
        assert!(!chunk.is_empty(), "the FIX acceptor closed: {:?}", String::from_utf8_lossy(&bytes));
        bytes.extend_from_slice(chunk);
        let n = chunk.len();
        reader.consume(n);
    }
    let (answer, error) = Message::decode(&bytes[..bourse_fix::codec::frame(&bytes).unwrap().unwrap()]);
    assert_eq!((answer.msg_type(), error), ("A", None), "a Logon answers the Logon");

    // XML over TLS: length-prefixed, acting as ops (admin): <create> works.
    let mut stream = tls(&gateway.addr, &ca, &[]);
    let body = "<create><account id=\"7\" balance=\"10\"/></create>";
    stream.write_all(format!("{}\n{body}", body.len()).as_bytes()).unwrap();
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header).unwrap();
    let mut reply = vec![0; header.trim().parse::<usize>().expect("a length line")];
    reader.read_exact(&mut reply).unwrap();
    let reply = String::from_utf8(reply).unwrap();
    assert!(reply.contains("<created id=\"7\"/>"), "{reply}");
}

/// `bourse serve --gateway`: the gateway in the node's process serves its client port
/// over TLS with the certificate the node's own CA issues it (for 127.0.0.1 and
/// localhost), and a plaintext one binds loopback only.
#[test]
fn a_gateway_in_the_nodes_process_serves_tls_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    let (keys, data) = (path("keys.toml"), path("data"));
    let ops = bourse_run(&["gateway", "key-add", "--keys", &keys, "--name", "ops", "--admin"]);
    assert!(ops.status.success(), "{}", ops.stderr);
    let ops_key = ops.stdout.trim().to_owned();
    let base = ["--data", &data, "--listen", "127.0.0.1:0", "--keys", &keys];

    let refused = bourse_run(&[&["serve"][..], &base[..], &["--plaintext", "--gateway", "0.0.0.0:0"]].concat());
    assert!(!refused.status.success() && refused.stderr.contains("--allow-plaintext"), "{}", refused.stderr);

    let serve =
        GatewayProcess::serve([&base[..], &["--gateway", "127.0.0.1:0"]].concat(), "bourse gateway listening on ");
    let line = serve.stdout.lock().unwrap().iter().find(|l| l.starts_with("bourse gateway listening on ")).cloned();
    assert!(line.is_some_and(|l| l.ends_with(" (TLS)")), "the gateway's port says it is TLS");
    let ca = format!("{data}/pki/ca.pem");
    let created = bourse_run(&["--node", &serve.addr, "--api-key", &ops_key, "--ca", &ca, "account-create"]);
    assert!(created.status.success() && created.stdout.contains("ok: id 0"), "{} {}", created.stdout, created.stderr);
    // A plaintext HTTP/2 client gets no HTTP/2 answer (its SETTINGS frame, type 4),
    // only the TLS layer's alert or the end.
    let mut plain = TcpStream::connect(&serve.addr).unwrap();
    plain.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    plain.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0").unwrap();
    let mut bytes = Vec::new();
    let _ = plain.read_to_end(&mut bytes);
    assert!(bytes.first().is_none_or(|&b| b == 0x15), "a plaintext client was answered: {bytes:?}");
}

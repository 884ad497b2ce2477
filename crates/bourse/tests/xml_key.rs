//! The XML listener's rights, through the binary: the protocol carries no key, so a
//! keyed gateway's XML listeners act as the key the operator names (`--xml-as`), bind
//! loopback unless told otherwise, and `<create>` (accounts, money, shares) works only
//! when that key is an admin's.

mod support;

use std::io::BufReader;
use std::net::TcpStream;

use support::{bourse_run, xml_request as request, GatewayProcess, NodeProcess};

#[test]
fn xml_acts_as_the_named_key_and_binds_loopback_unless_told() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let keys = keys.to_str().unwrap();
    for (name, extra) in [("ops", &["--admin"][..]), ("alice", &["--account", "0"][..])] {
        let mut args = vec!["gateway", "key-add", "--keys", keys, "--name", name];
        args.extend_from_slice(extra);
        let added = bourse_run(&args);
        assert!(added.status.success(), "{}", added.stderr);
    }
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let cluster = node.addr.to_string();
    let base = ["gateway", "run", "--id", "1", "--listen", "127.0.0.1:0", "--cluster", &cluster, "--keys", keys];

    // Refused before anything starts, each with what to do.
    let refusals: [(&[&str], &str); 3] = [
        (&["--xml", "127.0.0.1:0"], "--xml-as NAME"),
        (&["--xml", "127.0.0.1:0", "--xml-as", "nobody"], "no key of that name"),
        (&["--xml", "0.0.0.0:0", "--xml-as", "ops"], "--xml-allow-remote"),
    ];
    for (extra, says) in refusals {
        let run = bourse_run(&[&base[..], extra].concat());
        assert!(!run.status.success() && run.stderr.contains(says), "{extra:?}: {}", run.stderr);
    }

    // As ops (admin): <create> makes the account (and, at start, the quote asset).
    let xml_as = |name: &str| {
        GatewayProcess::start(
            [&base[2..], &["--hold-us", "0", "--xml-framed", "127.0.0.1:0", "--xml-as", name]].concat(),
            "XML exchange protocol on ",
        )
    };
    let create = |id: u32| format!("<create><account id=\"{id}\" balance=\"1000\"/></create>");
    let as_ops = xml_as("ops");
    let mut conn = BufReader::new(TcpStream::connect(&as_ops.addr).unwrap());
    let reply = request(&mut conn, &create(42));
    assert!(reply.contains("<created id=\"42\"/>"), "{reply}");
    drop(conn);
    drop(as_ops);

    // As alice (no admin): the same request is refused, and nothing is made.
    let as_alice = xml_as("alice");
    let mut conn = BufReader::new(TcpStream::connect(&as_alice.addr).unwrap());
    let reply = request(&mut conn, &create(43));
    assert!(reply.contains("<error id=\"43\"") && !reply.contains("<created"), "{reply}");
}

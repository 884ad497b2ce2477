//! Keys added and removed while a gateway runs, through the binary: `bourse gateway
//! key-add` and `key-remove` rewrite the key file, and the running gateway takes the
//! change by itself within about a second (no signal): the new key is served by the
//! REST API and the day-trading service, the removed one is refused by both (the
//! service checks callers against the gateway's keys, not a copy of its own).

mod support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{bourse_run, GatewayProcess, NodeProcess};

/// The status of `GET path` with `key` (plain HTTP on loopback).
fn status(addr: &str, path: &str, key: &str) -> u16 {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer.get(9..12).and_then(|code| code.parse().ok()).unwrap_or_else(|| panic!("not HTTP: {answer:?}"))
}

/// Waits (5 s at most) until the REST route and the day-trading one both answer as
/// `taken` says: served (the REST route 200, the service anything but 401 and 403: a
/// user it does not know yet is 404), or refused (401 from both).
fn until_both(addr: &str, key: &str, taken: bool, what: &str) {
    let routes = ["/v1/symbols", "/v1/daytrading/users/trader01/summary"];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got: Vec<u16> = routes.iter().map(|route| status(addr, route, key)).collect();
        let done = match taken {
            true => got[0] == 200 && !matches!(got[1], 401 | 403),
            false => got == [401, 401],
        };
        if done {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {routes:?} answered {got:?} after 5 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_key_added_or_removed_while_the_gateway_runs_takes_effect_within_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let keys = keys.to_str().unwrap();
    let ops = bourse_run(&["gateway", "key-add", "--keys", keys, "--name", "ops", "--admin"]);
    assert!(ops.status.success(), "{}", ops.stderr);
    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let cluster = node.addr.to_string();
    let args = ["--id", "1", "--listen", "127.0.0.1:0", "--hold-us", "0", "--cluster", &cluster, "--keys", keys];
    let fronts = ["--http", "127.0.0.1:0", "--day-trading", "127.0.0.1:0"];
    let gateway = GatewayProcess::start(args.iter().chain(&fronts), "REST + WebSocket API on ");
    let http = gateway.addr.trim_start_matches("http://").trim_end_matches('/').to_owned();

    let added = bourse_run(&["gateway", "key-add", "--keys", keys, "--name", "trader01"]);
    assert!(added.status.success(), "{}", added.stderr);
    let key = added.stdout.trim().to_owned();
    until_both(&http, &key, true, "a key added to the file");

    let removed = bourse_run(&["gateway", "key-remove", "--keys", keys, "--name", "trader01"]);
    assert!(removed.status.success(), "{}", removed.stderr);
    until_both(&http, &key, false, "a key removed from the file");
    let again = bourse_run(&["gateway", "key-remove", "--keys", keys, "--name", "trader01"]);
    assert!(!again.status.success() && again.stderr.contains("no key of this name"), "{}", again.stderr);
    let reloads = gateway.stdout.lock().unwrap().iter().filter(|line| line.starts_with("keys reloaded")).count();
    assert!(reloads >= 2, "the gateway said it reloaded its keys: {reloads}");
}

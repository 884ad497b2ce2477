//! The README's cluster commands end to end through the binary: `cluster up` (mutual TLS
//! by default, with the nodes reading `DATA/keys.toml`), `cluster status`, a key added
//! with `gateway key-add` and taken by the nodes after `cluster reload`, a gateway run
//! with that file carrying a load with no error, and `cluster down`. A key the gateway
//! knows but the nodes do not is refused by the nodes; a key added to both files works
//! after SIGHUP to the nodes and the gateway, and a key removed from the gateway's file
//! is refused by the gateway, without a restart.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn bourse() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_bourse"));
    command.env_remove("BOURSE_PKI").env_remove("BOURSE_AS").env_remove("BOURSE_API_KEY");
    command
}

/// Runs bourse with `args`: stdout, or a panic with both streams.
fn ok(args: &[&str]) -> String {
    let output = bourse().args(args).output().expect("run bourse");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(output.status.success(), "bourse {}:\n{}\n{}", args.join(" "), text(&output.stdout), text(&output.stderr));
    text(&output.stdout)
}

/// A base port whose +1..3 and +101..103 (the nodes' client and Raft ports) are free now
/// (each call of this process from another start, as the tests run at once).
fn free_base() -> u16 {
    static CALLS: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let seed = (std::process::id() as u16).wrapping_add(call.wrapping_mul(4_999));
    for attempt in 0..200u16 {
        let base = 20_000 + (seed.wrapping_mul(7).wrapping_add(attempt * 211)) % 20_000;
        let free = [1, 2, 3, 101, 102, 103].iter().all(|&o| TcpListener::bind(("127.0.0.1", base + o)).is_ok());
        if free {
            return base;
        }
    }
    panic!("no free base port");
}

/// A port free now, below the kernel's ephemeral range (`bourse_node::ports`).
fn free_port() -> u16 {
    bourse_node::ports::free_local_port().expect("a free loopback port")
}

/// Stops the cluster and the gateway however the test ends.
struct Cleanup {
    data: PathBuf,
    gateway: Option<Child>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(mut gateway) = self.gateway.take() {
            let _ = gateway.kill();
            let _ = gateway.wait();
        }
        let _ = bourse().args(["cluster", "down", "--data"]).arg(&self.data).output();
    }
}

fn wait_listening(port: u16, within: Duration) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {port}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn add_key(keys: &Path, name: &str) -> String {
    let keys = keys.to_str().expect("utf-8");
    ok(&["gateway", "key-add", "--keys", keys, "--name", name, "--admin"]).trim().to_string()
}

#[test]
fn cluster_up_key_add_reload_gateway_load_down() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("cluster");
    let data_s = data.to_str().expect("utf-8").to_string();
    let base = free_base();
    let mut cleanup = Cleanup { data: data.clone(), gateway: None };

    let up = ok(&["--json", "cluster", "up", "--nodes", "3", "--data", &data_s, "--base-port", &base.to_string()]);
    let up: Value = serde_json::from_str(up.lines().last().expect("output")).expect("json");
    let nodes = up["addresses"].as_str().expect("addresses").to_string();
    let pki = data.join("pki");
    let pki_s = pki.to_str().expect("utf-8");
    assert!(pki.join("ca.pem").exists(), "cluster up makes its CA");
    let status = ok(&["--pki", pki_s, "cluster", "status", "--data", &data_s]);
    assert_eq!(status.matches("leader").count(), 1, "{status}");

    // A key for the nodes and the gateway, and one for the gateway only.
    let keys = data.join("keys.toml");
    let ops = add_key(&keys, "ops");
    let reload = ok(&["cluster", "reload", "--data", &data_s]);
    assert!(reload.contains("SIGHUP to 3 of 3"), "{reload}");
    let gateway_keys = dir.path().join("gateway-keys.toml");
    std::fs::copy(&keys, &gateway_keys).expect("copy");
    let stranger = add_key(&gateway_keys, "stranger");

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let gateway = bourse()
        .args(["--pki", pki_s, "gateway", "run", "--id", "1", "--listen", &listen, "--cluster", &nodes])
        .args(["--admin-as", "operator:admin", "--keys"])
        .arg(&gateway_keys)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gateway run");
    cleanup.gateway = Some(gateway);
    wait_listening(port, Duration::from_secs(20));

    // A load that does not end within a minute fails the test instead of hanging it.
    let load = |key: &str| {
        let mut child = bourse()
            // The gateway serves TLS with its certificate from the cluster's CA (issued by
            // `cluster up` for loopback): the load trusts that CA (--pki's ca.pem).
            .args(["--pki", pki_s, "load", "--target", &listen, "--seconds", "2", "--connections", "2", "--json"])
            .args(["--api-key", key])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("load");
        let deadline = Instant::now() + Duration::from_secs(60);
        while child.try_wait().expect("wait").is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("bourse load with key {key} did not end within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        child.wait_with_output().expect("load output")
    };
    let taken = load(&ops);
    let stdout = String::from_utf8_lossy(&taken.stdout);
    assert!(taken.status.success(), "load with a key the nodes know: {}", String::from_utf8_lossy(&taken.stderr));
    let report: Value = serde_json::from_str(stdout.lines().last().expect("output")).expect("json");
    assert!(report["acked"].as_u64().expect("acked") > 0, "{report}");
    assert_eq!(report["errors"], 0, "{report}");

    let refused = load(&stranger);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "a key the nodes do not know carried a load: {stderr}");
    assert!(stderr.contains("not in the nodes' key file"), "{stderr}");

    // A key added to the nodes' file, copied to the gateway's (which drops stranger),
    // works after SIGHUP to the nodes and to the gateway, without a restart; stranger
    // is now refused by the gateway itself.
    let late = add_key(&keys, "late");
    std::fs::copy(&keys, &gateway_keys).expect("copy");
    let reload = ok(&["cluster", "reload", "--data", &data_s]);
    assert!(reload.contains("SIGHUP to 3 of 3"), "{reload}");
    let pid = cleanup.gateway.as_ref().expect("the gateway").id().to_string();
    assert!(Command::new("kill").args(["-HUP", &pid]).status().expect("kill").success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let taken = load(&late);
        if taken.status.success() {
            break;
        }
        let stderr = String::from_utf8_lossy(&taken.stderr).to_string();
        assert!(Instant::now() < deadline, "the key added was not taken after SIGHUP: {stderr}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let refused = load(&stranger);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("unknown API key"), "{stderr}");

    // Every replica reaches one state hash.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status = ok(&["--pki", pki_s, "cluster", "status", "--data", &data_s]);
        let hashes: Vec<&str> =
            status.lines().filter_map(|line| line.split_whitespace().last()).filter(|h| h.len() == 64).collect();
        if hashes.len() == 3 && hashes.iter().all(|h| *h == hashes[0]) {
            break;
        }
        assert!(Instant::now() < deadline, "the replicas do not converge: {status}");
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(cleanup);
    assert!(!data.join("cluster.json").exists(), "cluster down removes its record");
}

/// Nodes started under `nohup` (SIGHUP inherited as ignored) still reload on `cluster
/// reload`: SIGHUP means a reload to them, not a stop, so they catch it. Before, they
/// kept the inherited `SIG_IGN`, and `cluster reload` reported "sent SIGHUP to 3 of 3"
/// while no node re-read its key file (a CI run under `nohup` failed the test above so).
#[test]
fn nodes_started_under_nohup_still_reload_on_sighup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("cluster");
    let data_s = data.to_str().expect("utf-8").to_string();
    let base = free_base();
    let _cleanup = Cleanup { data: data.clone(), gateway: None };
    let up = Command::new("nohup")
        .arg(env!("CARGO_BIN_EXE_bourse"))
        .args(["cluster", "up", "--nodes", "3", "--data", &data_s, "--base-port", &base.to_string()])
        .env_remove("BOURSE_PKI")
        .output()
        .expect("nohup bourse cluster up");
    assert!(up.status.success(), "{}", String::from_utf8_lossy(&up.stderr));

    add_key(&data.join("keys.toml"), "ops");
    let reload = ok(&["cluster", "reload", "--data", &data_s]);
    assert!(reload.contains("SIGHUP to 3 of 3"), "{reload}");
    let deadline = Instant::now() + Duration::from_secs(10);
    for id in 1..=3 {
        let log = data.join(format!("node{id}/node.log"));
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if text.contains("client keys read") && text.contains("keys=1") {
                break;
            }
            assert!(Instant::now() < deadline, "node {id} did not reload its key file within 10 s:\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

//! `bourse pki` end to end through the binary: init, issue (the files and the identity
//! in the certificate), list shows it valid, revoke, list shows it revoked and the CRL
//! names it; bad input (unknown role, bad id, bad host, no CA, unknown serial, a second
//! init) fails with a sentence that says what was wrong.

use std::process::Command;

use serde_json::Value;

/// Runs `bourse pki ARGS`; returns success, stdout and stderr.
fn pki(args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_bourse")).arg("pki").args(args).output().expect("run bourse");
    let text = |bytes: Vec<u8>| String::from_utf8(bytes).expect("utf-8");
    (output.status.success(), text(output.stdout), text(output.stderr))
}

fn pki_ok(args: &[&str]) -> String {
    let (ok, stdout, stderr) = pki(args);
    assert!(ok, "bourse pki {}: {stdout}\n{stderr}", args.join(" "));
    stdout
}

/// The failure's stderr, which must contain `expected`.
fn pki_fails(args: &[&str], expected: &str) {
    let (ok, stdout, stderr) = pki(args);
    assert!(!ok, "bourse pki {} succeeded: {stdout}", args.join(" "));
    assert!(stderr.contains(expected), "bourse pki {}: {stderr:?} lacks {expected:?}", args.join(" "));
}

fn list(dir: &str) -> Vec<Value> {
    pki_ok(&["list", "--dir", dir, "--json"]).lines().map(|line| serde_json::from_str(line).expect("json")).collect()
}

#[test]
fn init_issue_list_revoke_list() {
    let temp = tempfile::tempdir().unwrap();
    let dir_path = temp.path().join("ca");
    let dir = dir_path.to_str().unwrap();
    pki_fails(&["list", "--dir", dir], "no CA in");
    assert!(pki_ok(&["init", "--dir", dir]).contains("CA created"));
    pki_fails(&["init", "--dir", dir], "already exists");

    let issued =
        pki_ok(&["issue", "--dir", dir, "--role", "node", "--id", "1", "--host", "127.0.0.1", "--host", "n1.local"]);
    assert!(issued.contains("issued node 1 (bourse://node/1)"), "{issued}");
    let node = bourse_pki::Identity::new(bourse_pki::Role::Node, "1").unwrap();
    let cert = dir_path.join("issued/node-1.pem");
    let key = dir_path.join("issued/node-1.key");
    let files =
        bourse_pki::TlsFiles { cert: cert.clone(), key: key.clone(), ..bourse_pki::TlsFiles::issued(&dir_path, &node) };
    assert_eq!(files, bourse_pki::TlsFiles::issued(&dir_path, &node));
    assert_eq!(files.identity().unwrap(), node);
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions()) & 0o777, 0o600);

    let out = temp.path().join("gw");
    let line = pki_ok(&[
        "issue",
        "--dir",
        dir,
        "--role",
        "gateway",
        "--id",
        "g1",
        "--days",
        "30",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    let gateway: Value = serde_json::from_str(line.trim()).unwrap();
    assert_eq!(gateway["uri"], "bourse://gateway/g1");
    assert!(out.join("gateway-g1.pem").is_file() && out.join("gateway-g1.key").is_file());

    let entries = list(dir);
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["identity"], "node 1");
    assert_eq!(entries[0]["hosts"], serde_json::json!(["127.0.0.1", "n1.local"]));
    assert_eq!(entries[1]["serial"], gateway["serial"]);
    assert!(entries.iter().all(|e| e["status"] == "valid"), "{entries:?}");
    let table = pki_ok(&["list", "--dir", dir]);
    assert!(table.contains("node 1") && table.contains("gateway g1") && table.contains("valid"), "{table}");

    let serial = entries[0]["serial"].as_str().unwrap().to_string();
    assert!(pki_ok(&["revoke", "--dir", dir, "--serial", &serial]).contains("revoked"));
    let entries = list(dir);
    assert_eq!(entries[0]["status"], "revoked");
    assert!(entries[0]["revoked_at"].is_string());
    assert_eq!(entries[1]["status"], "valid");
    let table = pki_ok(&["list", "--dir", dir]);
    assert!(table.lines().any(|l| l.starts_with(&serial) && l.contains("revoked")), "{table}");
    pki_fails(&["revoke", "--dir", dir, "--serial", "00ff"], "no certificate with serial 00ff");
}

#[test]
fn bad_input_fails_with_a_clear_message() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().to_str().unwrap();
    pki_fails(&["issue", "--dir", dir, "--role", "node", "--id", "1"], "bourse pki init");
    pki_ok(&["init", "--dir", dir]);
    pki_fails(
        &["issue", "--dir", dir, "--role", "king", "--id", "1"],
        "unknown role `king` (expected node, gateway, operator or observer)",
    );
    pki_fails(&["issue", "--dir", dir, "--role", "node", "--id", "a/b"], "bad id `a/b`");
    pki_fails(&["issue", "--dir", dir, "--role", "node", "--id", "1", "--host", "not a host"], "bad host `not a host`");
    pki_fails(&["issue", "--dir", dir, "--role", "node", "--id", "1", "--days", "0"], "--days");
    assert!(list(dir).is_empty());
}

/// `bourse serve` is secure by default: with no flag it makes a CA in DATA/pki, serves
/// its gRPC port over mutual TLS, and issues the CLI's certificates beside it; the CLI
/// with `--pki` administers and reads, as another role it is refused by name, and a
/// non-loopback address without TLS is refused before anything starts.
#[test]
fn serve_runs_mutual_tls_by_default_and_the_cli_dials_with_its_certificates() {
    use std::io::BufRead;
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().join("data");
    let port = bourse_node::ports::free_local_port().unwrap();
    let listen = format!("127.0.0.1:{port}");
    let bin = env!("CARGO_BIN_EXE_bourse");
    let mut serve = Command::new(bin)
        .args(["serve", "--history", "none", "--listen", &listen, "--data"])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = std::io::BufReader::new(serve.stdout.take().unwrap());
    let listening = stdout.lines().map_while(Result::ok).any(|line| line.starts_with("bourse node listening on"));
    assert!(listening, "serve did not start");
    let pki = data.join("pki");
    for file in ["ca.pem", "crl.pem", "issued/node-1.pem", "issued/operator-admin.pem", "issued/gateway-load.pem"] {
        assert!(pki.join(file).exists(), "serve made no {file}");
    }
    let cli = |args: &[&str]| {
        let output = Command::new(bin).arg("--pki").arg(&pki).args(["--node", &listen]).args(args).output().unwrap();
        let text = |bytes: Vec<u8>| String::from_utf8(bytes).unwrap();
        (output.status.success(), text(output.stdout), text(output.stderr))
    };
    let (ok, stdout, stderr) = cli(&["asset-create", "USD"]);
    assert!(ok && stdout.contains("asset ok"), "{stdout}\n{stderr}");
    let (ok, stdout, stderr) = cli(&["--as", "observer:history", "asset-create", "EUR"]);
    assert!(!ok, "an observer created an asset: {stdout}");
    assert!(stderr.contains("PermissionDenied") && stderr.contains("observer history"), "{stderr}");
    let (ok, stdout, stderr) = cli(&["asset-create", "EUR"]);
    assert!(ok && stdout.contains("asset ok: id 1"), "the refused EUR took no id: {stdout}\n{stderr}");
    let (ok, stdout, stderr) = cli(&["markets"]);
    assert!(ok, "an operator reads the markets: {stdout}\n{stderr}");
    let _ = serve.kill();
    let _ = serve.wait();

    // Plaintext only on loopback.
    let output = Command::new(bin)
        .args(["serve", "--plaintext", "--listen", "0.0.0.0:0", "--data"])
        .arg(temp.path().join("open"))
        .output()
        .unwrap();
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(!output.status.success() && stderr.contains("not a loopback address"), "{stderr}");
}

//! The day-trading page as a person uses it: `bourse serve`, `bourse gateway run --keys
//! … --http … --web web/dist --day-trading …`, a user's key made with `bourse gateway
//! key-add --name USERID` while the gateway runs (the service reads the key file again
//! for a key it does not know), and Debian's headless Chromium driven by playwright-core
//! (`web/e2e/daytrading.mjs`): a wrong key is refused, then the user logs in, adds
//! funds (and sees a bad amount refused with the spec's text), quotes, buys and commits
//! within the 60-second countdown, sets a buy trigger that fires and a sell trigger that
//! stays armed, and the summary shows each change.
//!
//! The screenshot goes to `target/tmp/daytrading-e2e/`; with `BOURSE_BLESS=1` it is also
//! copied to `docs/daytrading.png`. Needs web/dist (scripts/deps/web.sh, which this test
//! runs) and Chromium (scripts/deps/chromium.sh), as `make test` installs them.

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{bourse_run, NodeProcess};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// A `bourse gateway run` child, killed on drop.
struct GatewayProcess {
    child: Child,
    http: String,
}

impl GatewayProcess {
    fn start(node: &NodeProcess, keys: &Path, web: &Path) -> GatewayProcess {
        let mut child = Command::new(support::bourse_bin())
            .args(["gateway", "run", "--id", "1", "--listen", "127.0.0.1:0", "--hold-us", "0", "--keys"])
            .arg(keys)
            .arg("--cluster")
            .arg(node.addr.to_string())
            .args(["--http", "127.0.0.1:0", "--day-trading", "127.0.0.1:0", "--dt-trigger-poll-ms", "200", "--web"])
            .arg(web)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bourse gateway run");
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines, addresses) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("gateway | {line}");
                if let Some(rest) = line.strip_prefix("REST + WebSocket API on ") {
                    let url = rest.split_whitespace().next().unwrap_or_default().to_owned();
                    let _ = lines.send(url);
                }
            }
        });
        let http = addresses.recv_timeout(Duration::from_secs(60)).expect("the HTTP API listens");
        GatewayProcess { child, http }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_day_trader_logs_in_trades_and_sees_a_trigger_fire_in_the_browser() {
    let root = repo();
    let built =
        Command::new("bash").arg(root.join("scripts/deps/web.sh")).status().expect("running scripts/deps/web.sh");
    assert!(built.success(), "scripts/deps/web.sh failed: the web pages could not be built");
    let chromium = std::env::var("BOURSE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: scripts/deps/chromium.sh installs Debian's chromium (make test runs it)"
    );

    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys.toml");
    let keys_arg = keys.to_str().unwrap();
    let admin = bourse_run(&["gateway", "key-add", "--keys", keys_arg, "--name", "ops", "--admin"]);
    assert!(admin.status.success(), "{}", admin.stderr);
    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let gateway = GatewayProcess::start(&node, &keys, &root.join("web/dist"));
    // The user's key is made after the gateway started: it works without a restart.
    let user = "daytrader7";
    let made = bourse_run(&["gateway", "key-add", "--keys", keys_arg, "--name", user]);
    assert!(made.status.success(), "{}", made.stderr);
    let key = made.stdout.trim().to_owned();
    // The reload is at most once a second, and the wrong key tried first may have used it.
    std::thread::sleep(Duration::from_millis(1_100));

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("daytrading-e2e");
    std::fs::create_dir_all(&shots).expect("the screenshot directory");
    let shot = shots.join("daytrading.png");
    let args = [gateway.http.as_ref(), shot.as_os_str(), user.as_ref(), key.as_ref()];
    let (status, report) =
        support::run_browser_script("daytrading.mjs", &args, Path::new(&chromium), Duration::from_secs(120), || {});
    assert!(status.success(), "the browser checks failed: {report}");
    assert!(report["wrong_key"].as_str().is_some_and(|t| t.contains("unknown API key")), "{report}");
    assert!(report["invalid"].as_str().is_some_and(|t| t.contains("invalid amount")), "{report}");
    assert_eq!((report["bought"].as_u64(), report["after_trigger"].as_u64()), (Some(2), Some(5)), "{report}");
    assert!(report["countdown_first"].as_u64().is_some_and(|s| (50..=60).contains(&s)), "{report}");
    let size = std::fs::metadata(&shot).map(|m| m.len()).unwrap_or(0);
    assert!(size > 20_000, "the screenshot is {size} bytes");
    if std::env::var_os("BOURSE_BLESS").is_some() {
        std::fs::copy(&shot, root.join("docs/daytrading.png")).expect("copying the screenshot to docs/");
    }
    drop(gateway);
    drop(node);
}

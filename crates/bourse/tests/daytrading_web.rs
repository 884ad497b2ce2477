//! The day-trading page as a person uses it: `bourse serve`, `bourse gateway run --keys
//! … --http … --web web/dist --day-trading …`, a user's key made with `bourse gateway
//! key-add --name USERID` while the gateway runs (the gateway re-reads its key file when
//! it changes, and the service checks keys against the gateway's), and Debian's headless Chromium driven by playwright-core
//! (`web/e2e/daytrading.mjs`): before login only the login form shows (the trading
//! panels are hidden), a wrong key is refused, then the user logs in, adds
//! funds (and sees a bad amount refused with the spec's text), quotes, buys and commits
//! within the 60-second countdown, sets a buy trigger that fires and a sell trigger that
//! stays armed, and the summary shows each change.
//!
//! The screenshot goes to `target/tmp/daytrading-e2e/`; with `BOURSE_BLESS=1` it is also
//! copied to `docs/daytrading.png`. Needs web/dist (scripts/deps/web.sh, which this test
//! runs) and Chromium (scripts/deps/chromium.sh), as `make test` installs them.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use support::{bourse_run, GatewayProcess, NodeProcess};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// `bourse gateway run` with keys, the REST API serving `web` and the day-trading service.
fn gateway(node: &NodeProcess, keys: &Path, web: &Path) -> GatewayProcess {
    let (cluster, keys, web) = (node.addr.to_string(), keys.display().to_string(), web.display().to_string());
    let args = ["--id", "1", "--listen", "127.0.0.1:0", "--hold-us", "0", "--keys", &keys, "--cluster", &cluster];
    let fronts =
        ["--http", "127.0.0.1:0", "--day-trading", "127.0.0.1:0", "--dt-trigger-poll-ms", "200", "--web", &web];
    GatewayProcess::start(args.iter().chain(&fronts), "REST + WebSocket API on ")
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
    let gateway = gateway(&node, &keys, &root.join("web/dist"));
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
    let args = [gateway.addr.as_ref(), shot.as_os_str(), user.as_ref(), key.as_ref()];
    let (status, report) =
        support::run_browser_script("daytrading.mjs", &args, Path::new(&chromium), Duration::from_secs(120), || {});
    assert!(status.success(), "the browser checks failed: {report}");
    // The trading panels show only once logged in (`hidden` must beat `.dt`'s grid).
    let shown = |when: &str| (report[when]["app"].as_bool(), report[when]["login"].as_bool());
    assert_eq!(shown("before_login"), (Some(false), Some(true)), "{report}");
    assert_eq!(shown("after_login"), (Some(true), Some(false)), "{report}");
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

//! The demo end to end, as a person sees it: `bourse demo` (three node processes,
//! gateways, 48 simulated traders, the dashboard) and Debian's headless Chromium driven
//! by playwright-core (`web/e2e/dashboard.mjs`): trades appear and prices move on the
//! dashboard, the kill button on the leader brings a new leader and trading goes on,
//! a second kill while that node is down is refused, the trading page places, moves and
//! cancels an order and gets a fill. The demo then stops on SIGTERM and every replica
//! replays to the same index and state hash.
//! Screenshots go to `target/tmp/demo-e2e/`.
//!
//! Needs what `make test` installs first: web/dist (scripts/deps/web.sh, which this
//! test also runs: it is quick when the build is current) and Chromium
//! (scripts/deps/chromium.sh).

mod support;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("the repository")
}

/// Stops the demo (SIGTERM, then SIGKILL) whatever happens to the test.
struct Demo {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Demo {
    /// The next line of the demo's stdout, within `timeout`.
    fn line(&mut self, timeout: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(timeout).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    fn terminate(&mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
    }

    /// Waits for the demo to exit and returns its status and the rest of its output.
    fn finish(&mut self, timeout: Duration) -> (Option<std::process::ExitStatus>, Vec<String>) {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                while let Some(line) = self.line(Duration::from_millis(200)) {
                    let _ = line;
                }
                return (Some(status), self.seen.clone());
            }
            if let Some(line) = self.line(Duration::from_millis(100)) {
                let _ = line;
            }
        }
        (None, self.seen.clone())
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn start_demo(web: &Path) -> Demo {
    let mut child = Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(["demo", "--seconds", "600", "--http", "127.0.0.1:0", "--restart-after", "3", "--web"])
        .arg(web)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("starting bourse demo");
    let stdout = child.stdout.take().expect("the demo's stdout");
    let (sender, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("demo | {line}");
            if sender.send(line).is_err() {
                return;
            }
        }
    });
    Demo { child, lines, seen: Vec::new() }
}

#[test]
fn the_dashboard_shows_a_living_market_that_survives_a_leader_kill() {
    let root = repo();
    let built =
        Command::new("bash").arg(root.join("scripts/deps/web.sh")).status().expect("running scripts/deps/web.sh");
    assert!(built.success(), "scripts/deps/web.sh failed: the dashboard could not be built");
    let chromium = std::env::var("BOURSE_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: scripts/deps/chromium.sh installs Debian's chromium (make test runs it)"
    );

    let mut demo = start_demo(&root.join("web/dist"));
    let deadline = Instant::now() + Duration::from_secs(120);
    let url = loop {
        let line = demo.line(deadline.saturating_duration_since(Instant::now()));
        let line = line.unwrap_or_else(|| panic!("the demo printed no dashboard address: {:?}", demo.seen));
        if let Some(url) = line.strip_prefix("dashboard: ") {
            let url = url.trim().to_owned();
            assert!(url.starts_with("https://"), "the demo serves the dashboard over HTTPS: {url}");
            break url;
        }
    };

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo-e2e");
    std::fs::create_dir_all(&shots).expect("the screenshot directory");
    let args = [url.as_ref(), shots.as_os_str()];
    let (status, report) =
        support::run_browser_script("dashboard.mjs", &args, Path::new(&chromium), Duration::from_secs(240), || {
            while demo.line(Duration::from_millis(50)).is_some() {}
        });
    assert!(status.success(), "the browser checks failed: {report}");
    assert_eq!(report["symbols"], 11, "every symbol on the ticker: ten stocks and the margin contract");
    assert!(report["trades_first"].as_u64().unwrap_or(0) > 0);
    assert!(report["moved"].as_array().is_some_and(|m| !m.is_empty()), "a price moved");
    assert_ne!(report["old_leader"], report["new_leader"], "a new leader after the kill");
    assert_eq!(report["second_kill"]["name"], "kill_refused", "a second kill while a node is down is refused");
    assert!(report["trades_after_failover"].as_u64().unwrap_or(0) >= 10, "trading went on");
    assert_eq!(report["filled"], true, "the trading page's marketable order filled");
    assert_eq!(report["statement"], true, "the trading page's statement, from the demo's history sink, shows the fill");
    assert!(report["position"].as_i64().is_some_and(|size| size > 0), "the trading page shows the bought future");
    assert!(report["margin_equity"].as_i64().is_some_and(|equity| equity > 0), "and the margin it needs");
    for shot in ["dashboard.png", "trade.png"] {
        let size = std::fs::metadata(shots.join(shot)).map(|m| m.len()).unwrap_or(0);
        assert!(size > 20_000, "{shot} is {size} bytes");
    }

    demo.terminate();
    let (status, lines) = demo.finish(Duration::from_secs(90));
    let status = status.expect("the demo exits within 90 s of SIGTERM");
    assert!(status.success(), "the demo failed: {status:?}\n{}", lines.join("\n"));
    assert!(
        lines.iter().any(|l| l.starts_with("  history: ") && l.contains("rows written")),
        "the history sink wrote and stopped cleanly: {}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.starts_with("  margin contract FUT/USD")),
        "the demo lists its margin contract: {}",
        lines.join("\n")
    );
    assert!(
        lines.iter().any(|l| l.contains("every replica: same index, same state hash")),
        "the replicas' replay check: {}",
        lines.join("\n")
    );
}

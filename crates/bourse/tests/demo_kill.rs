//! `bourse demo` leaves nothing behind, however it ends. SIGKILLed — none of its code
//! runs — its three `bourse node` processes see the pipe on their stdin close, stop,
//! and the last of them removes the demo's temporary data directory in /dev/shm. On
//! SIGHUP (the terminal closed, an SSH session dropped) it stops cleanly as on SIGTERM:
//! its replicas replay to the same state, it exits with success, nothing is left.
//!
//! In both tests the demo's stdout is closed once it trades, as a closed terminal's
//! would be: its writes then fail, which must not stop it from stopping cleanly.
//! Loopback only; each wait is bounded; a failing test kills what it started and
//! removes the directory.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

/// One demo at a time: each runs three nodes and 48 traders, and a two-core machine
/// running two would starve both.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// How long the demo may take to start trading (a debug build on a busy machine).
const START_WAIT_MAX: Duration = Duration::from_secs(120);
/// How long the nodes may take to stop and remove the data once the demo has ended.
const CLEANUP_WAIT_MAX: Duration = Duration::from_secs(15);
/// How long the demo may take to stop cleanly on a signal: traders (10 s at most), the
/// nodes catching up (20 s), stopping (15 s) and the replay.
const STOP_WAIT_MAX: Duration = Duration::from_secs(90);

/// A running demo and its temporary data directory; dropped (a failing test), it kills
/// the demo and every process still using the directory, and removes the directory.
struct Demo {
    child: Child,
    data: PathBuf,
    seen: Vec<String>,
}

impl Demo {
    /// Starts the demo and returns once it trades, with its stdout closed from then on.
    fn start() -> Demo {
        let web = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("demo-kill-no-web");
        // Through `env --default-signal=HUP` (which execs, keeping the pid): SIGHUP at its
        // default disposition whatever this test inherited, so under `nohup` too the
        // demo is a process SIGHUP stops (it rightly keeps an inherited SIG_IGN).
        let mut child = Command::new("env")
            .arg("--default-signal=HUP")
            .arg(env!("CARGO_BIN_EXE_bourse"))
            .args(["demo", "--seconds", "600", "--http", "127.0.0.1:0", "--gateways", "1", "--web"])
            .arg(&web)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting bourse demo");
        let stdout = child.stdout.take().expect("the demo's stdout");
        let (sender, lines) = mpsc::channel();
        // Reads until the demo trades, then drops the pipe's read end: a closed terminal.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("demo | {line}");
                let last = line.starts_with("running for ");
                if sender.send(line).is_err() || last {
                    return;
                }
            }
        });
        let mut demo = Demo { child, data: PathBuf::new(), seen: Vec::new() };
        let deadline = Instant::now() + START_WAIT_MAX;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = lines.recv_timeout(left) else {
                panic!("the demo did not start trading within {START_WAIT_MAX:?}: {:?}", demo.seen);
            };
            demo.seen.push(line.clone());
            if let Some(dir) = line.strip_prefix("  nodes' data in ") {
                demo.data = PathBuf::from(dir.trim());
            }
            if line.starts_with("running for ") {
                break;
            }
        }
        assert!(demo.data.is_dir(), "the demo's data directory {:?}: {:?}", demo.data, demo.seen);
        let nodes = processes_using(&demo.data);
        assert_eq!(nodes.len(), 3, "three node processes on {:?}: {nodes:?}", demo.data);
        demo
    }

    fn signal(&self, name: &str) {
        let sent = Command::new("kill").arg(format!("-{name}")).arg(self.child.id().to_string()).status();
        assert!(sent.is_ok_and(|s| s.success()), "kill -{name} {}", self.child.id());
    }

    /// The demo's exit status within `timeout`.
    fn exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    /// Waits until no process uses the data directory and it is gone; says what is left
    /// otherwise.
    fn assert_nothing_left(&self) {
        let deadline = Instant::now() + CLEANUP_WAIT_MAX;
        loop {
            let left = processes_using(&self.data);
            if left.is_empty() && !self.data.exists() {
                return;
            }
            if Instant::now() > deadline {
                let entries: Vec<_> = std::fs::read_dir(&self.data)
                    .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
                    .unwrap_or_default();
                // What each node said last: how it stopped, and whether it tried to
                // remove the directory.
                let logs: String = (1..=3)
                    .map(|n| {
                        let log = std::fs::read_to_string(self.data.join(format!("node{n}/node.log")));
                        let log = log.unwrap_or_default();
                        let lines: Vec<&str> = log.lines().collect();
                        format!("node {n}:\n{}\n", lines[lines.len().saturating_sub(12)..].join("\n"))
                    })
                    .collect();
                let lock = self.data.join("holders.lock");
                let open_by: Vec<String> = std::fs::read_dir("/proc")
                    .into_iter()
                    .flatten()
                    .filter_map(Result::ok)
                    .filter_map(|entry| {
                        let fds = std::fs::read_dir(entry.path().join("fd")).ok()?;
                        let holds =
                            fds.filter_map(Result::ok).any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t == lock));
                        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
                        holds.then(|| format!("{:?} {}", entry.file_name(), comm.trim()))
                    })
                    .collect();
                let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
                panic!(
                    "{CLEANUP_WAIT_MAX:?} after the demo ended: processes on {:?}: {left:?}; directory exists: {}, \
                     holding {entries:?}; the lock file open in {open_by:?}\n/proc/locks:\n{locks}\n{logs}",
                    self.data,
                    self.data.exists()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.data.as_os_str().is_empty() {
            return;
        }
        for pid in processes_using(&self.data) {
            let _ = Command::new("kill").arg("-KILL").arg(pid.to_string()).status();
        }
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// The live processes with `dir` in their command line (the demo's nodes: `--data
/// DIR/nodeN`); a zombie's command line is empty, so the dead are not counted.
fn processes_using(dir: &Path) -> Vec<u32> {
    let needle = dir.to_str().expect("a UTF-8 path");
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            cmdline.split(|b| *b == 0).any(|arg| std::str::from_utf8(arg).is_ok_and(|a| a.contains(needle)))
        })
        .collect()
}

#[test]
fn a_demo_killed_outright_leaves_no_node_and_no_data() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut demo = Demo::start();
    demo.child.kill().expect("SIGKILL to the demo");
    let _ = demo.child.wait();
    demo.assert_nothing_left();
}

#[test]
fn a_demo_hung_up_on_stops_cleanly_and_leaves_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut demo = Demo::start();
    demo.signal("HUP");
    let status = demo.exit(STOP_WAIT_MAX);
    let status = status.unwrap_or_else(|| panic!("the demo still runs {STOP_WAIT_MAX:?} after SIGHUP"));
    // Success: the traders, gateways and nodes stopped and every replica replayed to
    // the same index and state hash (the demo exits non-zero otherwise).
    assert!(status.success(), "the demo's stop after SIGHUP: {status:?}");
    demo.assert_nothing_left();
}

//! The day-trading service through the binary: `bourse serve` (its history sink on),
//! `bourse gateway run --open --day-trading …` reading that history, and `bourse
//! workload` replaying the one-user course file in both modes; the global DUMPLOG file
//! validates against the project's schema copy with xmllint. A file with lines that are
//! not commands is refused with their line numbers.

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command as Process, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::{bourse_run, NodeProcess};

/// A `bourse gateway run` child, killed on drop.
struct GatewayProcess {
    child: Child,
    day_trading: String,
}

impl GatewayProcess {
    fn start(node: &NodeProcess, history: &Path, dumps: &Path) -> GatewayProcess {
        let mut child = Process::new(support::bourse_bin())
            .args(["gateway", "run", "--id", "1", "--open", "--listen", "127.0.0.1:0", "--hold-us", "0", "--cluster"])
            .arg(node.addr.to_string())
            .args(["--day-trading", "127.0.0.1:0", "--dt-trigger-poll-ms", "100", "--dt-history"])
            .arg(history)
            .arg("--dt-dump-dir")
            .arg(dumps)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn bourse gateway run");
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines, addresses) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("day-trading service on ") {
                    let _ = lines.send(addr.trim().to_owned());
                }
            }
        });
        let day_trading = addresses.recv_timeout(Duration::from_secs(60)).expect("the day-trading service listens");
        GatewayProcess { child, day_trading }
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workload_file(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daytrading/workloads").join(name);
    path.to_str().unwrap().to_owned()
}

fn xmllint(file: &Path) {
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("../daytrading/schema/logfile.xsd");
    let output =
        Process::new("xmllint").arg("--noout").arg("--schema").arg(schema).arg(file).output().expect("xmllint");
    assert!(output.status.success(), "{}: {}", file.display(), String::from_utf8_lossy(&output.stderr));
}

#[test]
fn bourse_workload_replays_the_one_user_file_through_a_gateways_day_trading_service() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let dumps = dir.path().join("dumps");
    let gateway = GatewayProcess::start(&node, &data.join("history.sqlite"), &dumps);
    for mode in ["sequential", "per-user"] {
        let file = workload_file("1userWorkLoad");
        let finished = bourse_run(&["workload", &file, "--target", &gateway.day_trading, "--mode", mode, "--json"]);
        assert!(finished.status.success(), "bourse workload: {}\n{}", finished.stdout, finished.stderr);
        let report: serde_json::Value = serde_json::from_str(finished.stdout.lines().last().unwrap()).unwrap();
        assert_eq!(report["commands"], 99, "{report}");
        assert_eq!(report["failures"], serde_json::json!({}), "{report}");
        assert!(report["latency"]["BUY"]["p90_us"].as_u64().is_some(), "{report}");
        assert_eq!(report["dumps"][0]["file"], "testLOG", "{report}");
        assert!(finished.stderr.contains("1userWorkLoad: 100 commands of 1 users"), "{}", finished.stderr);
        xmllint(&dumps.join("testLOG"));
    }
    // The second run's ADDs found the user there: twice the commands in the log.
    let text = std::fs::read_to_string(dumps.join("testLOG")).unwrap();
    assert_eq!(text.matches("<userCommand>").count(), 200);
}

#[test]
fn bourse_workload_refuses_lines_that_are_not_commands_with_their_line_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad");
    std::fs::write(&file, "[1] ADD,u,1.00 \n[2] SHOUT,u\nhello\n[3] DUMPLOG,./x\n").unwrap();
    let path = file.to_str().unwrap();
    // Nothing listens there: the file is refused before any connection.
    let finished = bourse_run(&["workload", path, "--target", "127.0.0.1:9"]);
    assert!(!finished.status.success());
    assert!(finished.stderr.contains("2 lines are not workload commands"), "{}", finished.stderr);
    assert!(finished.stderr.contains("line 2 [2]: unknown command \"SHOUT\""), "{}", finished.stderr);
    assert!(finished.stderr.contains("line 3: not [n] COMMAND: \"hello\""), "{}", finished.stderr);
    // With --skip-invalid they are reported and skipped (the connection then fails).
    let finished = bourse_run(&["workload", path, "--target", "127.0.0.1:9", "--skip-invalid"]);
    assert!(!finished.status.success());
    assert!(finished.stderr.contains("line 2 [2]: unknown command"), "{}", finished.stderr);
    assert!(!finished.stderr.contains("lines are not workload commands"), "{}", finished.stderr);
}

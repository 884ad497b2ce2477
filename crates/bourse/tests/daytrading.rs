//! The day-trading service through the binary: `bourse serve` (its history sink on),
//! `bourse gateway run --open --day-trading …` reading that history, and `bourse
//! workload` replaying the one-user course file in both modes; the global DUMPLOG file
//! validates against the project's schema copy with xmllint. `bourse serve --config` takes
//! the ledger's `[day_trading]` table, and its service uses the node's quote validity. A
//! file with lines that are not commands is refused with their line numbers.

mod support;

use std::path::Path;
use std::process::Command as Process;

use support::{bourse_run, GatewayProcess, NodeProcess};

/// `bourse gateway run --open` with the day-trading service reading `history`.
fn gateway(node: &NodeProcess, history: &Path, dumps: &Path) -> GatewayProcess {
    let (cluster, history, dumps) = (node.addr.to_string(), history.display().to_string(), dumps.display().to_string());
    let args = ["--id", "1", "--open", "--listen", "127.0.0.1:0", "--hold-us", "0", "--cluster", &cluster];
    let day_trading = [
        "--day-trading",
        "127.0.0.1:0",
        "--dt-trigger-poll-ms",
        "100",
        "--dt-history",
        &history,
        "--dt-dump-dir",
        &dumps,
    ];
    GatewayProcess::start(args.iter().chain(&day_trading), "day-trading service on ")
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
    let gateway = gateway(&node, &data.join("history.sqlite"), &dumps);
    for mode in ["sequential", "per-user"] {
        let file = workload_file("1userWorkLoad");
        let finished = bourse_run(&["workload", &file, "--target", &gateway.addr, "--mode", mode, "--json"]);
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
fn bourse_serve_runs_a_gateway_and_the_day_trading_service_in_its_own_process() {
    let dir = tempfile::tempdir().unwrap();
    let dumps = dir.path().join("dumps");
    let dumps_flag = dumps.display().to_string();
    // The ledger's rules from the node's configuration file; a flag overrides the file.
    let config = dir.path().join("node.toml");
    std::fs::write(&config, "[day_trading]\nquote_ttl_ms = 45000\npending_ttl_ms = 30000\n").unwrap();
    // No --dt-history: DUMPLOG reads the node's own history store.
    let node = NodeProcess::start(
        &dir.path().join("data"),
        "127.0.0.1:0".parse().unwrap(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--dt-quote-ttl-ms",
            "50000",
            "--gateway",
            "127.0.0.1:0",
            "--open",
            "--hold-us",
            "0",
            "--day-trading",
            "127.0.0.1:0",
            "--dt-trigger-poll-ms",
            "100",
            "--dt-dump-dir",
            &dumps_flag,
        ],
    );
    let gateway = node.announced("bourse gateway listening on ");
    assert_ne!(gateway, node.addr.to_string(), "the gateway has an address of its own");
    let service = node.announced("day-trading service on ");
    assert_eq!(node.announced("day-trading quote validity "), "50000", "the service's is the node's");
    let file = workload_file("1userWorkLoad");
    let finished = bourse_run(&["workload", &file, "--target", &service, "--mode", "per-user", "--json"]);
    assert!(finished.status.success(), "bourse workload: {}\n{}", finished.stdout, finished.stderr);
    let report: serde_json::Value = serde_json::from_str(finished.stdout.lines().last().unwrap()).unwrap();
    assert_eq!(report["commands"], 99, "{report}");
    assert_eq!(report["failures"], serde_json::json!({}), "{report}");
    assert_eq!(report["dumps"][0]["file"], "testLOG", "{report}");
    xmllint(&dumps.join("testLOG"));
    let text = std::fs::read_to_string(dumps.join("testLOG")).unwrap();
    assert_eq!(text.matches("<userCommand>").count(), 100);
    // Its gateway takes orders like any other: the market it trades on is the node's.
    let markets = bourse_run(&["markets", "--node", &gateway]);
    assert!(markets.status.success(), "bourse markets through the gateway: {}", markets.stderr);
    node.term();
    let (status, stderr) = node.wait();
    assert!(status.success(), "a clean stop: {stderr}");
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

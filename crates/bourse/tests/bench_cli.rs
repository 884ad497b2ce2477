//! The `bourse bench engine` command line, run as a real process.

use std::process::Command;

use serde_json::Value;

fn bourse(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_bourse")).args(args).output().expect("bourse runs")
}

/// Runs a benchmark with `--json` and parses the last line of its stdout.
fn bench_json(args: &[&str]) -> Value {
    let mut all = vec!["bench", "engine"];
    all.extend_from_slice(args);
    all.push("--json");
    let output = bourse(&all);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bourse {all:?} failed: {}", String::from_utf8_lossy(&output.stderr));
    let last = stdout.lines().last().expect("some output");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("last line is not JSON ({e}): {last}"))
}

fn assert_number(report: &Value, pointer: &str) -> f64 {
    report.pointer(pointer).and_then(Value::as_f64).unwrap_or_else(|| panic!("{pointer} missing in {report}"))
}

#[test]
fn ec2020_json_has_the_required_keys() {
    let report = bench_json(&["--workload", "ec2020", "--commands", "20000", "--cycles", "1", "--rates", "100000"]);
    assert_eq!(report["workload"], "ec2020");
    assert_eq!(report["commands"], 20_000);
    assert!(assert_number(&report, "/seconds") > 0.0);
    assert!(assert_number(&report, "/mops") > 0.0);
    for key in ["p50", "p90", "p99", "p999", "p9999", "max"] {
        assert!(assert_number(&report, &format!("/latency_ns/{key}")) > 0.0, "latency_ns.{key}");
    }
    assert_eq!(report["latency"].as_array().map(Vec::len), Some(1));
    assert_eq!(report["latency"][0]["rate"], 100_000);
    let moves = assert_number(&report, "/mix/move_pct");
    assert!((65.0..=77.0).contains(&moves), "move share {moves}");
    assert!(assert_number(&report, "/book/orders_avg") > 500.0);
    assert!(assert_number(&report, "/book/levels_avg") > 100.0);
}

/// `--margin --against-spot`: spot and margin cycles alternated, a ratio per pair, the
/// median ratio between the extremes.
#[test]
fn margin_against_spot_reports_each_pair() {
    let report =
        bench_json(&["--workload", "ec2020", "--margin", "--against-spot", "--commands", "20000", "--cycles", "3"]);
    assert_eq!(report["margin"], true);
    assert!(assert_number(&report, "/spot_mops") > 0.0 && assert_number(&report, "/mops") > 0.0);
    let ratios: Vec<f64> = report["ratios"].as_array().expect("ratios").iter().filter_map(Value::as_f64).collect();
    assert_eq!(ratios.len(), 3);
    assert!(ratios.iter().all(|r| *r > 0.0));
    assert_eq!(assert_number(&report, "/ratio"), ratios[1], "the median of three sorted ratios");
    assert!(!bourse(&["bench", "engine", "--against-spot"]).status.success(), "--against-spot needs --margin");
}

#[test]
fn ec2018_reports_every_rate_and_cycle() {
    let report = bench_json(&[
        "--workload",
        "ec2018",
        "--commands",
        "5000",
        "--cycles",
        "2",
        "--rates",
        "50000,100000",
        "--seed",
        "9",
    ]);
    assert_eq!(report["workload"], "ec2018");
    assert_eq!(report["seed"], 9);
    assert_eq!(report["mops_cycles"].as_array().map(Vec::len), Some(2));
    let rates: Vec<u64> =
        report["latency"].as_array().expect("latency array").iter().filter_map(|r| r["rate"].as_u64()).collect();
    assert_eq!(rates, vec![50_000, 100_000]);
    assert!(assert_number(&report, "/mix/ioc_pct") > 1.0);
}

#[test]
fn the_human_report_names_workload_seed_and_figures() {
    let output = bourse(&[
        "bench",
        "engine",
        "--workload",
        "ec2020",
        "--commands",
        "3000",
        "--cycles",
        "1",
        "--rates",
        "100000",
    ]);
    assert!(output.status.success());
    let stdout = String::from_utf8_lossy(&output.stdout);
    for needle in ["workload ec2020", "seed 1", "mix generated", "median:", "p99.99"] {
        assert!(stdout.contains(needle), "missing {needle:?} in:\n{stdout}");
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("cycle 1/1"), "no progress line on stderr:\n{stderr}");
}

#[test]
fn groups_run_their_pipeline_and_end_as_one_engine() {
    let report = bench_json(&[
        "--workload",
        "groups",
        "--groups",
        "1,3",
        "--accounts",
        "600",
        "--symbols",
        "30",
        "--commands",
        "20000",
        "--cycles",
        "1",
    ]);
    assert_eq!(report["workload"], "groups");
    assert!(assert_number(&report, "/engine/mops") > 0.0);
    let rows = report["groups"].as_array().expect("a row per group count");
    assert_eq!(rows.iter().map(|row| row["groups"].as_u64()).collect::<Vec<_>>(), [Some(1), Some(3)]);
    for row in rows {
        for key in ["mops", "cpu_s_per_m", "busiest_cpu_s_per_m", "projected_mops"] {
            assert!(row[key].as_f64().is_some_and(|v| v > 0.0), "{key} in {row}");
        }
    }
    // Accounts are spread by hash: with three groups most orders cross.
    assert_eq!(rows[0]["crossing_share"], 0.0);
    let crossing = rows[1]["crossing_share"].as_f64().expect("crossing share");
    assert!((0.5..0.8).contains(&crossing), "crossing share {crossing}");
    let refused = bourse(&["bench", "engine", "--workload", "ec2020", "--groups", "2"]);
    assert!(!refused.status.success(), "--groups with ec2020 must be refused");
}

#[test]
fn bad_arguments_are_refused() {
    assert!(!bourse(&["bench", "engine", "--cycles", "0"]).status.success());
    assert!(!bourse(&["bench", "engine", "--rates", "0"]).status.success());
    assert!(!bourse(&["bench", "engine", "--workload", "nope"]).status.success());
}

/// `bench history --postgres URL` measures a server the user names: each round writes
/// into a database of its own, every row of the log, and the databases are dropped at
/// the end.
#[test]
fn history_on_a_named_server_writes_into_new_databases_and_drops_them() {
    let server = bourse_history::testing::TempPostgres::start().expect("a temporary PostgreSQL");
    let url = server.url();
    let args = ["bench", "history", "--backend", "postgres", "--postgres", &url, "--commands", "2000"];
    let output = bourse(&[&args[..], &["--rounds", "2", "--rate", "0", "--json"]].concat());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("the server's not measured"), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(stdout.lines().last().expect("some output")).expect("JSON");
    let recorded = assert_number(&report, "/recorder/rows");
    let runs = report["throughput"].as_array().expect("throughput runs");
    assert_eq!(runs.len(), 2, "{report}");
    for run in runs {
        assert_eq!(run["backend"], "postgres");
        assert_eq!(assert_number(run, "/rows"), recorded, "every row of the log, in each round");
    }
    let mut admin = bourse_history::Store::open(&url).unwrap();
    let left = admin.query("SELECT datname FROM pg_database WHERE datname LIKE 'bourse_bench_%'", &[]).unwrap();
    assert!(left.is_empty(), "databases left behind: {left:?}");
}

/// `bench order-latency` on a real 3-node cluster, briefly: every round of the three
/// paths (nodes, gateway, REST on the gateway) is reported, its orders acknowledged and
/// none lost, and the disk's fdatasync is measured beside them.
#[test]
fn order_latency_reports_every_round_of_every_path() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["bench", "order-latency", "--clients", "1,4", "--seconds", "1", "--json"];
    let output = Command::new(env!("CARGO_BIN_EXE_bourse"))
        .args(args)
        .arg("--data")
        .arg(dir.path())
        .output()
        .expect("bourse runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "bench order-latency failed: {}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_str(stdout.lines().last().expect("output")).expect("JSON");
    assert!(assert_number(&report, "/fdatasync_p50_us") > 0.0);
    let rounds = report["rounds"].as_array().expect("rounds");
    let shape: Vec<(String, u64)> =
        rounds.iter().map(|r| (r["via"].as_str().unwrap().to_string(), r["clients"].as_u64().unwrap())).collect();
    let expected = [("nodes", 1), ("nodes", 4), ("gateway", 1), ("gateway", 4), ("rest", 1), ("rest", 4)];
    assert_eq!(shape, expected.map(|(v, c)| (v.to_string(), c)).to_vec());
    for round in rounds {
        assert!(assert_number(round, "/acked") > 0.0, "{round}");
        assert_eq!(round["errors"], 0, "{round}");
        assert!(assert_number(round, "/latency_us/p50") > 0.0, "{round}");
        assert!(assert_number(round, "/nodes_cpu_us_per_order") > 0.0, "{round}");
        // The breakdown from the nodes' /metrics: the leader committed what was acked,
        // and the Raft logs were synced.
        let (commit, fsync) = (assert_number(round, "/commit_mean_us"), assert_number(round, "/fsync_mean_us"));
        assert!(fsync > 0.0 && commit > 0.0, "{round}");
        // ... and the leader's replication round trips and the followers' service of them.
        let trip = assert_number(round, "/append_round_trip_mean_us");
        assert!(trip > 0.0 && assert_number(round, "/append_served_mean_us") > 0.0, "{round}");
        assert!(commit < assert_number(round, "/latency_us/max"), "a commit is part of an ack's wait: {round}");
    }
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "the scratch directory is removed");
}

/// `bench http`, `bench fix` and `bench xml`, briefly, with the gateway linked to the
/// node in memory (as `bourse serve --gateway` runs them) and over loopback gRPC: each
/// round places orders and every one is answered as placed.
#[test]
fn front_end_benches_run_on_both_layouts() {
    for layout in ["local", "grpc"] {
        for (bench, clients) in [("http", "--clients"), ("fix", "--sessions"), ("xml", "--clients")] {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().to_str().unwrap();
            let mut args = vec!["bench", bench, clients, "1", "--seconds", "1", "--layout", layout, "--json"];
            args.extend(["--data", data]);
            if bench == "xml" {
                args.extend(["--framing", "prefixed"]);
            }
            let output = bourse(&args);
            let stdout = String::from_utf8_lossy(&output.stdout);
            assert!(output.status.success(), "bourse {args:?}: {}", String::from_utf8_lossy(&output.stderr));
            let report: Value = serde_json::from_str(stdout.lines().last().expect("output")).expect("JSON");
            let rounds = report["rounds"].as_array().expect("rounds");
            assert_eq!(rounds.len(), 1, "{report}");
            assert_eq!(rounds[0]["errors"], 0, "{bench} {layout}: {report}");
            let done = rounds[0].get("orders").or_else(|| rounds[0].get("requests")).and_then(Value::as_u64);
            assert!(done.is_some_and(|n| n > 0), "{bench} {layout}: nothing done: {report}");
        }
    }
}

#[test]
fn identical_traders_race_and_each_race_has_one_winner_at_most() {
    let args = [
        "bench",
        "fairness",
        "--identical-traders",
        "2",
        "--d-s",
        "0,500",
        "--d-h",
        "0,1000",
        "--seconds",
        "2",
        "--races-per-sec",
        "20",
        "--release-priority",
        "0",
        "--json",
    ];
    let output = bourse(&args);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&output.stderr));
    let report: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    let runs = report["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "one run per (d_s, d_h) pair: {report}");
    for run in runs {
        let (races, taken) = (run["races"].as_u64().unwrap(), run["taken"].as_u64().unwrap());
        assert!(races >= 10 && taken >= 1 && taken <= races, "{run}");
        let bots = run["bots"].as_array().unwrap();
        assert_eq!(bots.len(), 2);
        // The maker's count of bargains taken and the bots' shares bought agree: one
        // share per race, to one bot.
        let won: u64 = bots.iter().map(|bot| bot["won"].as_u64().unwrap()).sum();
        assert_eq!(won, taken, "{run}");
        for bot in bots {
            assert!(bot["entered"].as_u64().unwrap() <= races, "{bot}");
            // Each share was bought 10 below the mid and paid the taker's fee.
            let pnl = bot["pnl"].as_i64().unwrap();
            assert!(pnl <= 10 * bot["won"].as_i64().unwrap(), "{bot}");
        }
    }
}

//! A meta group of its own, as processes (issue 28): `cluster up --groups 2
//! --meta-group --nodes 3` starts group 0 as the meta group (the catalog, the books'
//! placement, the moves and the cuts; no account and no book) beside data groups 1 and
//! 2. `group-load` creates accounts through it, moves a book between the data groups
//! and closes the day through it while its leader is killed with SIGKILL and started
//! again; the load's checks hold (every group's members in one state, every asset
//! conserved, every acknowledged command recorded, every command answered), no account
//! lives in the meta group and it holds no order, and a move to it is refused by name.

use std::process::Stdio;
use std::time::Duration;

#[path = "support/groups.rs"]
mod support;

use serde_json::Value;
use support::{bourse, free_base, kill, leader_of, ok, pid_of, Cleanup};

#[test]
fn a_meta_group_orders_the_catalog_moves_and_cuts_through_its_leader_killed() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("groups");
    let data_text = data.to_str().expect("utf-8").to_string();
    let base = free_base(3).to_string();
    let _cleanup = Cleanup(data.clone());
    let up = ok(&[
        "--json",
        "cluster",
        "up",
        "--groups",
        "2",
        "--meta-group",
        "--nodes",
        "3",
        "--data",
        &data_text,
        "--base-port",
        &base,
        "--node-args=--snapshot-every-entries=300",
    ]);
    let up: Value = serde_json::from_str(up.trim()).expect("cluster up --json");
    assert_eq!(up["nodes"].as_array().map(Vec::len), Some(9), "three groups of three: {up}");

    // Symbol 0's book lives in data group 1 (the map skips the meta group): it moves to
    // group 2 at 4 s, and the day closes at 6 s, both ordered by the meta group, whose
    // leader is killed at 2 s and started again 1.5 s later.
    let load = bourse()
        .args(["--json", "group-load", "--data", &data_text, "--seconds", "10", "--online-accounts", "2"])
        .args(["--move", "0:2", "--move-after", "4", "--close-day-after", "6"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("group-load");
    std::thread::sleep(Duration::from_millis(2_000));
    let leader = leader_of(&data_text, 0);
    kill(pid_of(&data, leader));
    std::thread::sleep(Duration::from_millis(1_500));
    ok(&["cluster", "restart", "--data", &data_text, "--id", &leader.to_string()]);
    let output = load.wait_with_output().expect("group-load ends");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(output.status.success(), "group-load:\n{}\n{}", text(&output.stdout), text(&output.stderr));
    let report: Value = serde_json::from_str(text(&output.stdout).trim()).expect("group-load --json");
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0), "{report}");
    assert_eq!(report["created_accounts"], serde_json::json!([64, 65]), "{report}");
    assert!(report["placed"].as_u64().unwrap_or(0) > 20, "{report}");
    assert_eq!((report["moved"]["from"].as_u64(), report["moved"]["to"].as_u64()), (Some(1), Some(2)), "{report}");
    assert!(report["closed"]["expired"].as_u64().is_some(), "the day closed: {report}");

    // An account is read from the data groups only, and one of them owns it.
    for account in ["0", "64"] {
        let read = ok(&["--json", "group-query", "--data", &data_text, "account", "--account", account]);
        let read: Value = serde_json::from_str(read.trim()).expect("group-query --json");
        let answers = read["answers"].as_array().expect("an answer per data group");
        let groups: Vec<u64> = answers.iter().filter_map(|a| a["group"].as_u64()).collect();
        assert_eq!(groups, [1, 2], "{read}");
        assert_eq!(answers.iter().filter(|a| a["answer"]["Account"]["owned"] == true).count(), 1, "{read}");
    }
    // Every book lives in a data group.
    for symbol in 0..4 {
        let book = ok(&["--json", "group-query", "--data", &data_text, "book", "--symbol", &symbol.to_string()]);
        let book: Value = serde_json::from_str(book.trim()).expect("group-query --json");
        let expected = if symbol == 0 { 2 } else { 1 + symbol % 2 };
        assert_eq!(book["answers"][0]["group"].as_u64(), Some(expected), "{book}");
    }
    // A book cannot move to the meta group.
    let refused =
        bourse().args(["group-move", "--data", &data_text, "--symbol", "1", "--to", "0"]).output().expect("run");
    let said = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert!(!refused.status.success() && said.contains("meta group"), "{said}");

    let status = ok(&["cluster", "status", "--data", &data_text]);
    assert_eq!(status.lines().filter(|l| l.contains("leader")).count(), 3, "{status}");
    ok(&["cluster", "down", "--data", &data_text]);
}

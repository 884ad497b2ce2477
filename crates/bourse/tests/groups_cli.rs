//! The partitioned exchange as processes, end to end through the binary (issue 28):
//! `cluster up --groups 2 --nodes 3` (mutual TLS by default), `group-load` creating and
//! funding accounts on the running groups and then trading on it while the leader of
//! each group is killed with SIGKILL and started again, then the load's checks (every
//! group's members in one state, every group with the same catalog and accounts, every
//! asset conserved across the groups, every acknowledged command in its session's
//! record on every member, every command answered), a second load that creates more,
//! resumes the traders' sessions and moves a book from one group to the other while it
//! is traded, a close of the day in each load (under a leader's restart, and while a
//! book moves) and two by hand (`group-close-day`; the second expires nothing), reads
//! of every book and of an account (`group-query`), `cluster status` and `cluster down`.

use std::process::Stdio;
use std::time::Duration;

#[path = "support/groups.rs"]
mod support;

use serde_json::Value;
use support::{bourse, free_base, kill, leader_of, ok, pid_of, Cleanup};

#[test]
fn groups_trade_through_leader_kills_in_every_group_and_conserve_every_asset() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("groups");
    let data_text = data.to_str().expect("utf-8").to_string();
    let base = free_base(2).to_string();
    let _cleanup = Cleanup(data.clone());
    let up =
        // Snapshots every 300 entries: a restarted member starts from its newest one.
        ok(&[
            "--json",
            "cluster",
            "up",
            "--groups",
            "2",
            "--nodes",
            "3",
            "--data",
            &data_text,
            "--base-port",
            &base,
            "--node-args=--snapshot-every-entries=300",
        ]);
    let up: Value = serde_json::from_str(up.trim()).expect("cluster up --json");
    assert_eq!(up["nodes"].as_array().map(Vec::len), Some(6), "{up}");
    assert!(data.join("pki").join("ca.pem").exists(), "mutual TLS by default");

    let load = bourse()
        // The day closes at 7 s, while group 1's leader restarts.
        .args([
            "--json",
            "group-load",
            "--data",
            &data_text,
            "--seconds",
            "12",
            "--online-accounts",
            "4",
            "--close-day-after",
            "7",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("group-load");
    // Each group's leader killed mid-flow and started again on its data.
    for (group, at) in [(0, 2_000), (1, 2_500)] {
        std::thread::sleep(Duration::from_millis(at));
        let leader = leader_of(&data_text, group);
        kill(pid_of(&data, leader));
        std::thread::sleep(Duration::from_millis(1_500));
        ok(&["cluster", "restart", "--data", &data_text, "--id", &leader.to_string()]);
    }
    let output = load.wait_with_output().expect("group-load ends");
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    assert!(output.status.success(), "group-load:\n{}\n{}", text(&output.stdout), text(&output.stderr));
    let report: Value = serde_json::from_str(text(&output.stdout).trim()).expect("group-load --json");
    assert_eq!(report["violations"].as_array().map(Vec::len), Some(0), "{report}");
    // Accounts created on the running groups (through group 0), numbered after the
    // genesis's 64 alike in every group (the load checks every group knows them).
    assert_eq!(report["created_accounts"], serde_json::json!([64, 65, 66, 67]), "{report}");
    assert!(report["commands"].as_u64().unwrap_or(0) > 50, "{report}");
    assert!(report["placed"].as_u64().unwrap_or(0) > 20, "{report}");
    // The kills cost some clients their answers, which they had by sending again.
    assert!(report["resends"].as_u64().unwrap_or(0) > 0, "{report}");
    // The close of the day expired Day orders across the groups (and the load checked
    // that none placed before it is open in any group).
    assert!(report["closed"]["expired"].as_u64().unwrap_or(0) > 0, "{report}");

    // The traders' sessions go on where the groups' records stand.
    // ... and moves symbol 1's book from group 1 to group 0 while its traders trade it.
    let again = ok(&[
        "--json",
        "group-load",
        "--data",
        &data_text,
        "--seconds",
        "3",
        "--online-accounts",
        "2",
        "--move",
        "1:0",
        "--move-after",
        "1",
        // A close at the same moment: whichever reaches group 0 second is refused until
        // the other is done, and sent again.
        "--close-day-after",
        "1",
    ]);
    let again: Value = serde_json::from_str(again.trim()).expect("group-load --json");
    assert_eq!(again["violations"].as_array().map(Vec::len), Some(0), "{again}");
    assert_eq!(again["created_accounts"], serde_json::json!([68, 69]), "the operator's sessions resume: {again}");
    assert_eq!((again["moved"]["from"].as_u64(), again["moved"]["to"].as_u64()), (Some(1), Some(0)), "{again}");
    assert!(again["moved"]["orders_else"].as_u64().unwrap_or(0) > 0, "symbol 1 was traded: {again}");
    assert_eq!(again["repeats"].as_u64(), Some(0), "a resumed session sends new numbers: {again}");
    assert!(again["closed"]["expired"].as_u64().is_some(), "{again}");
    // Orders sampled over the run, symbol 1's closed before its book left group 1
    // among them, read back by id as the group holding each has it.
    assert!(again["read_back"].as_u64().unwrap_or(0) > 0, "{again}");

    // The day closed by hand on the idle groups, twice: the second finds no Day order.
    let closed: Value =
        serde_json::from_str(ok(&["--json", "group-close-day", "--data", &data_text]).trim()).expect("json");
    assert_eq!(closed["ok"], Value::Bool(true), "{closed}");
    let again_closed: Value =
        serde_json::from_str(ok(&["--json", "group-close-day", "--data", &data_text]).trim()).expect("json");
    assert_eq!(again_closed["expired"].as_u64(), Some(0), "{again_closed}");

    // Reads, each from its group's leader after a read index: every book is uncrossed;
    // an account created online is owned by one group, and the orders each group lists
    // for it are its own, open, and read back alike by id from their symbol's group.
    for symbol in 0..4 {
        let book = ok(&["--json", "group-query", "--data", &data_text, "book", "--symbol", &symbol.to_string()]);
        let book: Value = serde_json::from_str(book.trim()).expect("group-query --json");
        // Symbol 1's book lives in group 0 now; the others where the map put them.
        assert_eq!(book["answers"][0]["group"].as_u64(), Some(if symbol == 1 { 0 } else { symbol % 2 }), "{book}");
        let answer = &book["answers"][0]["answer"]["Book"];
        let best = |side: &str| answer[side][0][0].as_i64();
        if let (Some(bid), Some(ask)) = (best("bids"), best("asks")) {
            assert!(bid < ask, "symbol {symbol}'s book is crossed: {book}");
        }
    }
    let account = ok(&["--json", "group-query", "--data", &data_text, "account", "--account", "64"]);
    let account: Value = serde_json::from_str(account.trim()).expect("group-query --json");
    let answers = account["answers"].as_array().expect("an answer per group");
    assert_eq!(answers.len(), 2, "{account}");
    let owners = answers.iter().filter(|a| a["answer"]["Account"]["owned"] == true).count();
    assert_eq!(owners, 1, "{account}");
    let mut orders = 0;
    for answer in answers {
        for order in answer["answer"]["Account"]["orders"].as_array().expect("orders") {
            orders += 1;
            assert_eq!(order["record"]["account"], 64, "{account}");
            assert!(order["qty_open"].as_i64().unwrap_or(0) > 0, "{account}");
            let (symbol, id) = (order["record"]["symbol"].to_string(), order["record"]["id"].to_string());
            let read =
                ok(&["--json", "group-query", "--data", &data_text, "order", "--symbol", &symbol, "--order", &id]);
            let read: Value = serde_json::from_str(read.trim()).expect("group-query --json");
            assert_eq!(read["answers"][0]["answer"]["Order"]["record"], order["record"], "{read}");
        }
    }
    assert!(orders > 0, "a trader of account 64 left orders resting: {account}");

    // Every member took snapshots (and the restarted ones started from theirs).
    for group in ["group0", "group1"] {
        for member in std::fs::read_dir(data.join(group)).expect("a group's directory") {
            let snapshots = member.expect("a member").path().join("snapshots");
            let taken = std::fs::read_dir(&snapshots).map_or(0, |d| d.count());
            assert!(taken > 0, "{}: no snapshot", snapshots.display());
        }
    }
    let status = ok(&["cluster", "status", "--data", &data_text]);
    assert_eq!(status.lines().filter(|l| l.contains("leader")).count(), 2, "{status}");
    assert_eq!(status.lines().count(), 6, "{status}");
    ok(&["cluster", "down", "--data", &data_text]);
}

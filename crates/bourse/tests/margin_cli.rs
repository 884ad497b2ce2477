//! Margin trading from the command line, end to end through the binary: a `bourse serve`
//! node, a margin contract made with `symbol-create --margin-initial-bp …`, positions
//! opened with `place`, valued in `report`, an account liquidated by `mark`, its rest
//! taken over by the insurance account, `close-day` settling the variation margin, the
//! `exchange-report` balancing every asset throughout, the journal replaying to the
//! same state, and `clearing report` of the day — from the node's own history while it
//! runs, and from a history rebuilt from its journal — saying what the engine says.

mod support;

use serde_json::Value;
use support::{bourse_replay, bourse_run, NodeProcess};

/// `(size, cost, realised)` of the account's position in symbol 0.
fn position(node: &NodeProcess, account: &str) -> (i64, i64, i64) {
    let report = node.verb(&["report", account]);
    let positions = report["positions"].as_array().expect("positions");
    positions.iter().find(|p| p["symbol"] == 0).map_or((0, 0, 0), |p| {
        (p["size"].as_i64().unwrap(), p["cost"].as_i64().unwrap(), p["realized"].as_i64().unwrap())
    })
}

fn usd_available(node: &NodeProcess, account: &str) -> i64 {
    let report = node.verb(&["report", account]);
    let usd = report["balances"].as_array().expect("balances").iter().find(|b| b["asset"] == 0).cloned();
    usd.map_or(0, |b| b["available"].as_i64().unwrap())
}

fn assert_balanced(node: &NodeProcess) -> Value {
    let report = node.verb(&["exchange-report"]);
    for asset in report["assets"].as_array().expect("assets") {
        assert_eq!(asset["balanced"], true, "{report}");
    }
    report
}

#[test]
fn a_margin_contract_is_traded_marked_liquidated_and_settled_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    node.verb(&["asset-create", "USD"]);
    node.verb(&["asset-create", "FUT", "--decimals", "0"]);
    for _ in 0..4 {
        node.verb(&["account-create"]);
    }
    node.verb(&[
        "symbol-create",
        "FUT/USD",
        "--base",
        "FUT",
        "--quote",
        "USD",
        "--px-min",
        "10",
        "--px-max",
        "10000",
        "--margin-initial-bp",
        "1000",
        "--margin-maintenance-bp",
        "500",
        "--margin-multiplier",
        "10",
        "--margin-insurance",
        "3",
    ]);
    let markets = bourse_run(&["markets", "--node", &node.addr.to_string()]);
    assert!(
        markets.stdout.contains("margin: initial 1000 bp, maintenance 500 bp, multiplier 10"),
        "{}",
        markets.stdout
    );
    for (account, amount) in [("0", "1000"), ("1", "10000"), ("2", "10000"), ("3", "5000")] {
        node.verb(&["deposit", account, "USD", amount]);
    }
    // A buys 10 at 100 from B: 10 contracts worth 10,000 on 1,000 of cash.
    node.verb(&["place", "1", "FUT/USD", "sell", "10", "--px", "100"]);
    node.verb(&["place", "0", "FUT/USD", "buy", "10", "--px", "100"]);
    assert_eq!(position(&node, "0"), (10, 10_000, 0));
    assert_eq!(position(&node, "1"), (-10, -10_000, 0));
    let report = node.verb(&["report", "0"]);
    let margin = &report["margin"][0];
    assert_eq!((margin["equity"].as_i64(), margin["initial_margin"].as_i64()), (Some(1_000), Some(1_000)));
    // A liquidates at a mark below 95 (equity 1,000 − 10 × (100 − p) × 10 under 5 %).
    assert_eq!(report["positions"][0]["liquidation_px"].as_i64(), Some(95));
    // Its cash could hold one more contract's margin, but its position already needs all
    // of it: refused with the rule's name.
    let refused = bourse_run(&["place", "0", "FUT/USD", "buy", "1", "--px", "100", "--node", &node.addr.to_string()]);
    assert!(!refused.status.success() && refused.stdout.contains("margin_insufficient"), "{}", refused.stdout);
    assert_balanced(&node);

    // C bids 3 at 92; the mark falls to 80: A is liquidated, 3 into C's bid, 7 to the
    // insurance account at the bankruptcy price 90.
    node.verb(&["place", "2", "FUT/USD", "buy", "3", "--px", "92"]);
    node.verb(&["mark", "FUT/USD", "80"]);
    assert_eq!(position(&node, "0"), (0, 0, -940));
    assert_eq!(usd_available(&node, "0"), 60);
    assert_eq!(position(&node, "3"), (7, 6_300, 0));
    assert_eq!(position(&node, "2"), (3, 2_760, 0));
    let totals = assert_balanced(&node);
    assert_eq!(totals["symbols"][0]["open_interest"].as_i64(), Some(10));

    // The close of the day settles everyone at 80: B (short 10 at 100) gains 2,000.
    node.verb(&["close-day"]);
    assert_eq!(position(&node, "1"), (-10, -8_000, 0));
    assert_eq!(usd_available(&node, "1"), 12_000);
    let totals = assert_balanced(&node);
    let usd = &totals["assets"][0];
    assert_eq!(usd["open_cost"].as_i64(), Some(0), "settled costs sum to zero: {totals}");
    let index_last = totals["log_index"].as_u64().expect("log index");
    assert_eq!(totals["days_closed"].as_u64(), Some(1));

    // The day's clearing report from the node's own history (once its sink has the close).
    let history = data.join("history.sqlite");
    let live = clearing_report(&history, std::time::Duration::from_secs(30));
    assert_clears_like_the_engine(&live, &totals);

    let (status, stderr) = node.terminate();
    assert!(status.success(), "{stderr}");
    let (replayed, _) = bourse_replay(&data).unwrap_or_else(|f| panic!("replay failed:\n{}", f.stderr));
    assert_eq!(replayed.index, index_last);

    // A history rebuilt from the journal reports the same day, byte for byte.
    let rebuilt = dir.path().join("rebuilt.sqlite");
    let done = bourse_run(&["history", "rebuild", "--data", data.to_str().unwrap(), "--db", rebuilt.to_str().unwrap()]);
    assert!(done.status.success(), "{}", done.stderr);
    assert_eq!(clearing_report(&rebuilt, std::time::Duration::ZERO), live);
    let csv = bourse_run(&["clearing", "report", "--day", "1", "--csv", "--db", rebuilt.to_str().unwrap()]);
    assert!(csv.status.success(), "{}", csv.stderr);
    assert!(csv.stdout.starts_with("positions,day,account,symbol,"), "{}", csv.stdout);
    assert!(csv.stdout.contains("\nasset,1,USD,"), "{}", csv.stdout);
    // Day 2 has not closed: it is the open day; day 3 is not there.
    let open = bourse_run(&["clearing", "report", "--day", "2", "--json", "--db", rebuilt.to_str().unwrap()]);
    assert!(open.status.success(), "{}", open.stderr);
    let missing = bourse_run(&["clearing", "report", "--day", "3", "--db", rebuilt.to_str().unwrap()]);
    assert!(!missing.status.success() && missing.stderr.contains("1 trading days closed"), "{}", missing.stderr);
}

/// `bourse clearing report --day 1 --json` on `db`, retried for up to `wait` while the
/// history has not recorded the close yet (until then day 1 is the open day, or the
/// store is not there yet).
fn clearing_report(db: &std::path::Path, wait: std::time::Duration) -> Value {
    let deadline = std::time::Instant::now() + wait;
    loop {
        let done = bourse_run(&["clearing", "report", "--day", "1", "--json", "--db", db.to_str().unwrap()]);
        let report: Option<Value> = done
            .status
            .success()
            .then(|| serde_json::from_str(done.stdout.lines().last().expect("a report")).expect("JSON"));
        match report {
            Some(report) if report["closed"] == true => return report,
            report => assert!(
                std::time::Instant::now() < deadline,
                "no clearing report of the closed day: {report:?} {}",
                done.stderr
            ),
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The report of the day just closed against the engine's totals after the close, and
/// the positions the scenario made.
fn assert_clears_like_the_engine(report: &Value, totals: &Value) {
    assert_eq!(report["closed"], true, "{report}");
    assert_eq!(report["imbalances"].as_array().map(Vec::len), Some(0), "{report}");
    for (line, engine) in report["assets"].as_array().unwrap().iter().zip(totals["assets"].as_array().unwrap()) {
        assert_eq!(line["asset"], engine["asset"]);
        for field in ["supply", "fees", "bad_debt", "open_cost"] {
            assert_eq!(line[field], engine[field], "{field}: {line} {engine}");
        }
        let cash = engine["available"].as_i64().unwrap() + engine["reserved"].as_i64().unwrap();
        assert_eq!(line["cash"].as_i64(), Some(cash), "{line} {engine}");
    }
    let symbol = &report["symbols"][0];
    assert_eq!(symbol["open_interest"], totals["symbols"][0]["open_interest"]);
    assert_eq!(symbol["settle_px"], totals["symbols"][0]["mark"]);
    assert_eq!((symbol["trades"].as_i64(), symbol["volume"].as_i64()), (Some(2), Some(13)), "{symbol}");
    let line = |account: i64| {
        report["positions"].as_array().unwrap().iter().find(|l| l["account"] == account).cloned().expect("a line")
    };
    let fields = |l: &Value, names: &[&str]| names.iter().map(|n| l[*n].as_i64().unwrap()).collect::<Vec<_>>();
    let names = ["bought", "sold", "transferred", "position", "realized", "variation"];
    // A: bought 10, 3 sold into C's bid by the liquidation, 7 given to the insurance account.
    assert_eq!(fields(&line(0), &names), [10, 3, -7, 0, -940, 0]);
    // B: short 10 at 100, settled at 80.
    assert_eq!(fields(&line(1), &names), [0, 10, 0, -10, 0, 2_000]);
    // C: long 3 at 92, settled at 80.
    assert_eq!(fields(&line(2), &names), [3, 0, 0, 3, 0, -360]);
    // The insurance account: 7 taken over at 90, settled at 80.
    assert_eq!(fields(&line(3), &names), [0, 0, 7, 7, 0, -700]);
}

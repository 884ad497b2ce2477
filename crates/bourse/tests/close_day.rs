//! The operator's close of the trading day, end to end through the binary: a `bourse
//! serve` node, orders placed with `bourse place … --tif day`, then `bourse close-day`
//! expires the Day order's remainder (and leaves the GTC order), the order reads back
//! as expired with its hold released, a second close expires nothing, and the journal
//! with the close in it replays.

mod support;

use support::{bourse_replay, NodeProcess};

fn reserved_usd(node: &NodeProcess, account: &str) -> i64 {
    let balances = node.verb(&["balances", account]);
    let usd = balances["balances"].as_array().expect("balances").iter().find(|b| b["name"] == "USD");
    usd.map_or(0, |b| b["reserved"].as_i64().expect("reserved"))
}

#[test]
fn close_day_expires_day_orders_placed_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    node.verb(&["asset-create", "USD"]);
    node.verb(&["asset-create", "ACME", "--decimals", "0"]);
    node.verb(&["symbol-create", "ACME/USD", "--base", "ACME", "--quote", "USD"]);
    node.verb(&["account-create"]);
    node.verb(&["account-create"]);
    node.verb(&["deposit", "0", "USD", "100000"]);
    node.verb(&["credit", "1", "ACME", "100"]);

    let day = node.verb(&["place", "0", "ACME/USD", "buy", "10", "--px", "150", "--tif", "day"]);
    let day = day["id"].as_u64().expect("order id").to_string();
    let gtc = node.verb(&["place", "0", "ACME/USD", "buy", "5", "--px", "140"]);
    let gtc = gtc["id"].as_u64().expect("order id").to_string();
    node.verb(&["place", "1", "ACME/USD", "sell", "4", "--px", "150", "--tif", "ioc"]);
    assert_eq!(reserved_usd(&node, "0"), 6 * 150 + 5 * 140);

    let closed = node.verb(&["close-day"]);
    assert_eq!((closed["ok"].as_bool(), closed["expired"].as_u64()), (Some(true), Some(1)), "{closed}");
    let expired = node.verb(&["order", &day]);
    let status = bourse_protocol::proto::OrderStatus::Expired as i64;
    assert_eq!(expired["status"].as_i64(), Some(status), "{expired}");
    assert_eq!((expired["qty_filled"].as_i64(), expired["qty_open"].as_i64()), (Some(4), Some(0)));
    let open = node.verb(&["order", &gtc]);
    assert_eq!(open["status"].as_i64(), Some(bourse_protocol::proto::OrderStatus::Open as i64));
    assert_eq!(reserved_usd(&node, "0"), 5 * 140);

    let again = node.verb(&["close-day"]);
    assert_eq!(again["expired"].as_u64(), Some(0));
    let index_last = again["log_index"].as_u64().expect("log index");

    let (status, stderr) = node.terminate();
    assert!(status.success(), "{stderr}");
    let (replayed, _) = bourse_replay(&data).unwrap_or_else(|f| panic!("replay failed:\n{}", f.stderr));
    assert_eq!(replayed.index, index_last);
}

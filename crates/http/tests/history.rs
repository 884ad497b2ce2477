//! The history routes against a real node, gateway and history sink: a statement that
//! adds up to the balances, an order's history and protocol query before and after it
//! is cancelled, a symbol's trades, the key's permissions, typed errors, and 404 on a
//! server without a history store.

mod support;

use serde_json::{json, Value};
use support::{limit, Exchange};

fn sum(values: &Value, field: &str) -> i64 {
    values.as_array().unwrap().iter().map(|v| v[field].as_i64().unwrap()).sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statement_order_history_query_and_trades() {
    let exchange = Exchange::start_with_history().await;
    exchange.market().await;
    let admin = exchange.client(&exchange.admin);
    admin.expect(201, "POST", "/v1/accounts", None).await; // account 2: not alice's
    let alice = exchange.client(&exchange.alice);
    let sell = alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 10, 150))).await;
    let sell_id = sell["id"].as_u64().unwrap();
    let buy = alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 4, 151))).await;
    let buy_id = buy["id"].as_u64().unwrap();
    exchange.history_caught_up().await;

    // The buyer's statement: the deposit, the buy's reservation and the trade; opening
    // plus the deltas is the closing balance, which is the exchange's balance.
    let statement = alice.expect(200, "GET", "/v1/accounts/1/statement", None).await;
    let movements = statement["movements"].as_array().unwrap();
    let causes: Vec<&str> = movements.iter().map(|m| m["cause"].as_str().unwrap()).collect();
    assert_eq!(causes.first(), Some(&"deposit"));
    assert!(causes.contains(&"accepted") && causes.contains(&"trade"), "{causes:?}");
    assert_eq!(statement["opening"], json!([]));
    let balances = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    for balance in balances["balances"].as_array().unwrap() {
        let asset = balance["asset"].as_i64().unwrap();
        let moved: Vec<Value> = movements.iter().filter(|m| m["asset"].as_i64() == Some(asset)).cloned().collect();
        assert_eq!(sum(&Value::Array(moved.clone()), "delta_available"), balance["available"].as_i64().unwrap());
        let closing =
            statement["closing"].as_array().unwrap().iter().find(|b| b["asset"].as_i64() == Some(asset)).unwrap();
        assert_eq!(closing["available"], balance["available"]);
        assert_eq!(closing["reserved"], balance["reserved"]);
    }
    // A window after everything: no movements, opening = closing = the balances.
    let last_ts = movements.last().unwrap()["ts"].as_i64().unwrap();
    let later = alice.expect(200, "GET", &format!("/v1/accounts/1/statement?from={}", last_ts + 1), None).await;
    assert_eq!(later["movements"], json!([]));
    assert_eq!(later["opening"], statement["closing"]);
    let bounded = alice.expect(200, "GET", "/v1/accounts/1/statement?limit=1", None).await;
    assert_eq!((bounded["movements"].as_array().unwrap().len(), &bounded["truncated"]), (1, &json!(true)));

    // The resting sell: accepted, rested, filled 4 by the buy.
    let history = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}/history"), None).await;
    let events: Vec<&str> =
        history["changes"].as_array().unwrap().iter().map(|c| c["event"].as_str().unwrap()).collect();
    assert_eq!(events, ["accepted", "rested", "fill"]);
    assert_eq!(history["executions"][0]["taker_order"], buy_id);
    assert_eq!(history["executions"][0]["fee_taker"], 4);
    let query = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}/query"), None).await;
    assert_eq!((query["status"].as_str(), query["qty_open"].as_i64()), (Some("open"), Some(6)));
    assert_eq!(query["executed"], json!([{"qty": 4, "px": 150, "ts": history["changes"][2]["ts"]}]));
    // The buy filled completely at once.
    let query = alice.expect(200, "GET", &format!("/v1/orders/{buy_id}/query"), None).await;
    assert_eq!((query["status"].as_str(), query["qty_open"].as_i64()), (Some("filled"), Some(0)));

    // Cancelled, the sell's query shows the cancelled part.
    alice.expect(200, "DELETE", &format!("/v1/orders/{sell_id}"), None).await;
    exchange.history_caught_up().await;
    let query = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}/query"), None).await;
    assert_eq!(query["status"], "cancelled");
    assert_eq!(query["qty_open"], 0);
    assert_eq!(query["cancelled"].as_array().unwrap().len(), 1);
    assert_eq!(query["cancelled"][0]["qty"], 6);

    let trades = alice.expect(200, "GET", "/v1/history/trades/ACME%2FUSD", None).await;
    assert_eq!((trades["symbol"].as_u64(), trades["trades"].as_array().unwrap().len()), (Some(0), 1));
    assert_eq!(trades["trades"][0]["px"], 150);
    let none = alice.expect(200, "GET", &format!("/v1/history/trades/0?from={}", last_ts + 1), None).await;
    assert_eq!(none["trades"], json!([]));
    // Who traded is shown to whom it concerns: alice owns both sides (accounts 0 and 1),
    // the admin sees everything, a key of neither account sees price and size only.
    let both =
        |trade: &Value| (trade["maker_account"].clone(), trade["taker_account"].clone(), trade["fee_taker"].clone());
    assert_eq!(both(&trades["trades"][0]), (json!(0), json!(1), json!(4)));
    let seen = admin.expect(200, "GET", "/v1/history/trades/ACME%2FUSD", None).await;
    assert_eq!(both(&seen["trades"][0]), (json!(0), json!(1), json!(4)));
    let other = exchange.client(&exchange.dt_user_key);
    let seen = other.expect(200, "GET", "/v1/history/trades/ACME%2FUSD", None).await;
    let trade = &seen["trades"][0];
    assert_eq!((trade["px"].clone(), trade["qty"].clone()), (json!(150), json!(4)));
    for field in ["maker_account", "taker_account", "maker_order", "taker_order", "fee_maker", "fee_taker"] {
        assert_eq!(trade[field], Value::Null, "{field} shown to a key of neither side: {trade}");
    }

    // Permissions and typed errors; nothing changes.
    let error = alice.expect(403, "GET", "/v1/accounts/2/statement", None).await;
    assert_eq!(error["error"]["name"], "forbidden");
    alice.expect(400, "GET", "/v1/accounts/1/statement?limit=0", None).await;
    alice.expect(400, "GET", "/v1/accounts/1/statement?from=5&to=4", None).await;
    alice.expect(400, "GET", "/v1/accounts/1/statement?from=soon", None).await;
    let error = alice.expect(404, "GET", "/v1/orders/999999/history", None).await;
    assert_eq!(error["error"]["name"], "not_found");
    // Another key's order answers exactly as a missing one does.
    let other = exchange.client(&exchange.dt_user_key);
    for route in ["history", "query"] {
        let foreign = other.expect(404, "GET", &format!("/v1/orders/{sell_id}/{route}"), None).await;
        let missing = other.expect(404, "GET", &format!("/v1/orders/999999/{route}"), None).await;
        assert_eq!(foreign["error"]["message"], format!("order {sell_id} is not in the history"));
        assert_eq!(missing["error"]["message"], "order 999999 is not in the history");
    }
    alice.expect(404, "GET", "/v1/history/trades/NOPE%2FUSD", None).await;
    let stranger = exchange.client("not-a-key");
    stranger.expect(401, "GET", "/v1/accounts/1/statement", None).await;
    exchange.stop().await;
}

/// The clearing report of a closed day over REST: the day's trade netted per account,
/// the fee on the taker's cash line, the conservation line per asset; administrative
/// keys only; a day not there is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clearing_report_of_a_closed_day() {
    let exchange = Exchange::start_with_history().await;
    exchange.market().await;
    let admin = exchange.client(&exchange.admin);
    let alice = exchange.client(&exchange.alice);
    alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 10, 150))).await;
    alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 4, 151))).await;
    admin.expect(200, "POST", "/v1/admin/close-day", None).await;
    exchange.history_caught_up().await;

    let report = admin.expect(200, "GET", "/v1/admin/clearing", None).await;
    assert_eq!((report["day"].as_u64(), report["closed"].as_bool()), (Some(1), Some(true)), "{report}");
    assert_eq!(report["imbalances"], json!([]));
    let line = |account: i64| {
        report["positions"].as_array().unwrap().iter().find(|l| l["account"] == account).cloned().expect("a line")
    };
    // Seller 0 sold 4 at 150 (the maker, no fee); buyer 1 paid 600 and the taker fee, 1 a lot.
    assert_eq!((line(0)["sold"].as_i64(), line(0)["cash"].as_i64()), (Some(4), Some(600)));
    assert_eq!(
        (line(1)["net_qty"].as_i64(), line(1)["cash"].as_i64(), line(1)["fees"].as_i64()),
        (Some(4), Some(-600), Some(4))
    );
    let symbol = &report["symbols"][0];
    assert_eq!(
        (symbol["trades"].as_i64(), symbol["volume"].as_i64(), symbol["vwap"].as_f64()),
        (Some(1), Some(4), Some(150.0))
    );
    for asset in report["assets"].as_array().unwrap() {
        assert_eq!(asset["balanced"], true, "{asset}");
    }
    let usd = report["assets"].as_array().unwrap().iter().find(|a| a["name"] == "USD").unwrap();
    assert_eq!((usd["supply"].as_i64(), usd["fees"].as_i64()), (Some(2_000_000), Some(4)));
    assert_eq!(admin.expect(200, "GET", "/v1/admin/clearing?day=1", None).await, report);
    // Day 2 is open (nothing yet); day 3 is not there; a trader's key may not read it.
    let open = admin.expect(200, "GET", "/v1/admin/clearing?day=2", None).await;
    assert_eq!((open["closed"].as_bool(), open["positions"].as_array().map(Vec::len)), (Some(false), Some(0)));
    let missing = admin.expect(404, "GET", "/v1/admin/clearing?day=3", None).await;
    assert_eq!(missing["error"]["name"], "not_found");
    alice.expect(403, "GET", "/v1/admin/clearing", None).await;
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_the_history_routes_are_404() {
    let exchange = Exchange::start().await;
    let alice = exchange.client(&exchange.alice);
    let error = alice.expect(404, "GET", "/v1/accounts/0/statement", None).await;
    assert_eq!(error["error"]["name"], "not_found");
    alice.expect(404, "GET", "/v1/orders/1/query", None).await;
    exchange.client(&exchange.admin).expect(404, "GET", "/v1/admin/clearing", None).await;
    exchange.stop().await;
}

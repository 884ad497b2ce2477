//! Authorization, table-driven, over every route of the REST API and its WebSocket: a
//! key of accounts 0 and 1 (alice) acting on account 2 and on account 2's order, a
//! non-admin key calling every admin action, a user's key acting as another day
//! trader, and a revoked key on every route. Each attempt must be refused with the
//! status the table gives, and nothing may change: the balances, open orders, the
//! foreign order and the day trader's account read the same before and after. Each
//! kind of refusal has a positive control (the same call by a key that may make it is
//! served), so a route that refused everyone would not pass.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::{limit, Exchange, DT_USER};
use tokio_tungstenite::tungstenite::Message;

/// One attempt: method, path, body, the status it must get.
type Row = (&'static str, String, Option<Value>, u16);

/// What must not change: balances and open orders of accounts 0-2, the foreign order,
/// the day trader's money, holdings, triggers and pending orders. (Not the log index:
/// a command refused before the log still has its seq filled by a no-op there.)
async fn snapshot(exchange: &Exchange, foreign: u64) -> Value {
    let admin = exchange.client(&exchange.admin);
    let mut state = serde_json::Map::new();
    for account in 0..3 {
        let balances = admin.expect(200, "GET", &format!("/v1/accounts/{account}/balances"), None).await;
        let orders = admin.expect(200, "GET", &format!("/v1/accounts/{account}/orders"), None).await;
        state.insert(format!("account {account}"), json!({"balances": balances, "orders": orders}));
    }
    state.insert("foreign order".into(), admin.expect(200, "GET", &format!("/v1/orders/{foreign}"), None).await);
    let summary = admin.expect(200, "GET", &format!("/v1/daytrading/users/{DT_USER}/summary"), None).await;
    let kept = ["cash", "holdings", "buyTriggers", "sellTriggers", "pendingBuy", "pendingSell"];
    state.insert("day trader".into(), kept.iter().map(|k| (k.to_string(), summary[k].clone())).collect());
    let mut state = Value::Object(state);
    without_log_index(&mut state);
    state
}

fn without_log_index(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.remove("log_index");
            map.values_mut().for_each(without_log_index);
        }
        Value::Array(items) => items.iter_mut().for_each(without_log_index),
        _ => {}
    }
}

/// Runs `rows` with `key`; returns the rows whose status was not the one expected.
async fn attempt(exchange: &Exchange, key: &str, who: &str, rows: &[Row]) -> Vec<String> {
    let client = exchange.client(key);
    let mut wrong = Vec::new();
    for (method, path, body, want) in rows {
        let (got, answer) = client.request(method, path, body.clone()).await;
        if got != *want {
            wrong.push(format!("{who}: {method} {path} answered {got}, not {want}: {answer}"));
        }
    }
    wrong
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_refuses_what_a_key_may_not_do_and_changes_nothing() {
    let exchange = Exchange::start_with_day_trading().await;
    exchange.market().await;
    let admin = exchange.client(&exchange.admin);
    // Account 2, nobody's but the admin's, with money and a resting order of its own.
    assert_eq!(admin.expect(201, "POST", "/v1/accounts", None).await["id"], 2);
    admin.expect(200, "POST", "/v1/accounts/2/deposits", Some(json!({"asset": "USD", "amount": 50_000}))).await;
    let foreign = admin.expect(201, "POST", "/v1/orders", Some(limit(2, "buy", 3, 120))).await["id"].as_u64().unwrap();
    admin.expect(200, "POST", &format!("/v1/daytrading/users/{DT_USER}/add"), Some(json!({"amount": "500.00"}))).await;
    let before = snapshot(&exchange, foreign).await;

    let o = |suffix: &str| format!("/v1/orders/{foreign}{suffix}");
    let u = |suffix: &str| format!("/v1/daytrading/users/{DT_USER}{suffix}");
    // Alice (accounts 0 and 1) on account 2 and its order: another account is forbidden
    // (403); another key's order reads exactly as a missing one (404).
    let cross: Vec<Row> = vec![
        ("POST", "/v1/orders".into(), Some(limit(2, "buy", 1, 100)), 403),
        ("GET", "/v1/accounts/2/balances".into(), None, 403),
        ("GET", "/v1/accounts/2/orders".into(), None, 403),
        ("GET", "/v1/accounts/2/report".into(), None, 403),
        ("GET", "/v1/accounts/2/statement".into(), None, 403),
        ("GET", o(""), None, 404),
        ("DELETE", o(""), None, 404),
        ("GET", o("/fills"), None, 404),
        ("POST", o("/move"), Some(json!({"px": 121})), 404),
        ("POST", o("/reduce"), Some(json!({"qty_by": 1})), 404),
        ("GET", o("/history"), None, 404),
        ("GET", o("/query"), None, 404),
    ];
    // Alice is no admin: creating things, moving money, closing the day, setting a mark
    // and reading the exchange's totals are not hers, even for her own accounts.
    let money = Some(json!({"asset": "USD", "amount": 100}));
    let symbol = json!({"name": "EVIL/USD", "base": "ACME", "quote": "USD", "tick": 1, "lot": 1,
        "px_min": 1, "px_max": 1000, "fee_taker": 0});
    let admin_only: Vec<Row> = vec![
        ("POST", "/v1/assets".into(), Some(json!({"name": "EVIL", "decimals": 0})), 403),
        ("POST", "/v1/symbols".into(), Some(symbol), 403),
        ("POST", "/v1/accounts".into(), None, 403),
        ("POST", "/v1/accounts/0/deposits".into(), money.clone(), 403),
        ("POST", "/v1/accounts/0/withdrawals".into(), money.clone(), 403),
        ("POST", "/v1/accounts/0/credits".into(), Some(json!({"asset": "ACME", "amount": 5})), 403),
        ("POST", "/v1/admin/close-day".into(), None, 403),
        ("GET", "/v1/admin/report".into(), None, 403),
        ("POST", "/v1/admin/symbols/ACME%2FUSD/mark".into(), Some(json!({"px": 100})), 403),
        ("POST", "/v1/daytrading/dumplog".into(), Some(json!({"filename": "all.xml"})), 403),
    ];
    // Alice acting as another day trader (a user's key acts only as its user).
    let amount = Some(json!({"amount": "10.00"}));
    let order = Some(json!({"symbol": "ABC", "amount": "10.00"}));
    let price = Some(json!({"price": "1.00"}));
    let day_trader: Vec<Row> = vec![
        ("POST", u("/add"), amount.clone(), 403),
        ("POST", u("/quote"), Some(json!({"symbol": "ABC"})), 403),
        ("POST", u("/buy"), order.clone(), 403),
        ("POST", u("/buy/commit"), None, 403),
        ("POST", u("/buy/cancel"), None, 403),
        ("POST", u("/sell"), order, 403),
        ("POST", u("/sell/commit"), None, 403),
        ("POST", u("/sell/cancel"), None, 403),
        ("PUT", u("/buy-triggers/ABC/amount"), amount.clone(), 403),
        ("PUT", u("/buy-triggers/ABC/price"), price.clone(), 403),
        ("DELETE", u("/buy-triggers/ABC"), None, 403),
        ("PUT", u("/sell-triggers/ABC/amount"), amount, 403),
        ("PUT", u("/sell-triggers/ABC/price"), price, 403),
        ("DELETE", u("/sell-triggers/ABC"), None, 403),
        ("GET", u("/summary"), None, 403),
        ("GET", u("/dumplog?filename=mine.xml"), None, 403),
    ];
    let mut wrong = Vec::new();
    for rows in [&cross, &admin_only, &day_trader] {
        wrong.extend(attempt(&exchange, &exchange.alice, "alice", rows).await);
    }
    assert_eq!(snapshot(&exchange, foreign).await, before, "the refused calls changed nothing");

    // History trades: alice sees price, size and time of account 2's trade, not its side.
    let alice = exchange.client(&exchange.alice);
    alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 1, 120))).await;
    exchange.history_caught_up().await;
    let trades = alice.expect(200, "GET", "/v1/history/trades/ACME%2FUSD", None).await;
    let trade = trades["trades"].as_array().and_then(|t| t.first()).cloned().expect("one trade");
    let shown = trade.to_string();
    assert!(!shown.contains(&format!("\"order\":{foreign}")), "account 2's order is not shown to alice: {shown}");

    // The WebSocket: alice's order channel carries her own orders' events only.
    let url = format!("ws://{}/v1/ws?api_key={}", exchange.http.addr(), exchange.alice);
    let (mut socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let subscribe = json!({"op": "subscribe", "channels": ["orders"], "symbols": ["ACME/USD"]});
    socket.send(Message::Text(subscribe.to_string().into())).await.unwrap();
    admin.expect(201, "POST", "/v1/orders", Some(limit(2, "buy", 1, 110))).await;
    let own = alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 1, 111))).await["id"].clone();
    let mut seen = Vec::new();
    let wait = async {
        while let Some(Ok(message)) = socket.next().await {
            let Message::Text(text) = message else { continue };
            let value: Value = serde_json::from_str(&text).unwrap();
            if value["type"] == "order" {
                seen.push(value.clone());
                if value["order"] == own {
                    return;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.expect("alice's own order event within 10 s");
    for event in &seen {
        assert!(matches!(event["account"].as_u64(), Some(0 | 1)), "alice sees another account's order: {event}");
    }

    // The checks above traded and placed orders: the revoked key's baseline is now.
    let baseline = snapshot(&exchange, foreign).await;

    // A revoked key: every route that takes a key answers 401, the WebSocket upgrade too.
    assert!(exchange.revoke("alice") >= 1, "alice's open session ended");
    let mut every: Vec<Row> = Vec::new();
    let routes = cross.iter().chain(&admin_only).chain(&day_trader);
    every.extend(routes.map(|(method, path, body, _)| (*method, path.clone(), body.clone(), 401)));
    every.extend([
        ("GET", "/v1/assets".into(), None, 401),
        ("GET", "/v1/symbols".into(), None, 401),
        ("GET", "/v1/accounts/0/balances".into(), None, 401),
        ("GET", "/v1/books/ACME%2FUSD".into(), None, 401),
        ("GET", "/v1/trades/ACME%2FUSD".into(), None, 401),
        ("GET", "/v1/history/trades/ACME%2FUSD".into(), None, 401),
        ("POST", "/v1/orders".into(), Some(limit(0, "buy", 1, 100)), 401),
    ]);
    wrong.extend(attempt(&exchange, &exchange.alice, "revoked", &every).await);
    assert_eq!(snapshot(&exchange, foreign).await, baseline, "a revoked key's calls changed nothing");
    // Its open WebSocket is closed, saying why; a new upgrade is refused.
    let closed = tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(message)) = socket.next().await {
            if let Message::Close(frame) = message {
                return frame;
            }
        }
        None
    })
    .await
    .expect("the revoked key's WebSocket closed within 5 s")
    .expect("with a close frame");
    assert_eq!((u16::from(closed.code), closed.reason.as_str()), (1008, "this API key was revoked"));
    let url = format!("ws://{}/v1/ws?api_key={}", exchange.http.addr(), exchange.alice);
    match tokio_tungstenite::connect_async(url).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("a revoked key's upgrade must be refused with 401: {:?}", other.map(|_| ())),
    }

    // Positive controls: the admin may do what alice may not; the day trader may act as
    // itself; a key of the file still works after another was revoked.
    let user = exchange.client(&exchange.dt_user_key);
    user.expect(200, "GET", &u("/summary"), None).await;
    admin.expect(200, "GET", "/v1/accounts/2/balances", None).await;
    admin.expect(200, "GET", "/v1/accounts/2/report", None).await;
    admin.expect(200, "GET", "/v1/admin/report", None).await;
    admin.expect(200, "POST", "/v1/accounts/0/credits", Some(json!({"asset": "ACME", "amount": 5}))).await;
    admin.expect(200, "POST", &o("/move"), Some(json!({"px": 121}))).await;

    assert!(wrong.is_empty(), "{} attempts were not refused as expected:\n{}", wrong.len(), wrong.join("\n"));
    exchange.stop().await;
}

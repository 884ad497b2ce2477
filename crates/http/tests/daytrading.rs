//! The day-trading routes through a real node, gateway, history sink and day-trading
//! service: every command's success and its logged failures (the spec's errorMessage
//! texts as typed errors), a trigger firing in the summary, both DUMPLOG forms, who may
//! act for whom, and the routes of a server without the service.

mod support;

use serde_json::{json, Value};
use support::{Exchange, Http, DT_USER};

fn cents(text: &Value) -> i64 {
    let text = text.as_str().unwrap_or_else(|| panic!("a d.dd string: {text}"));
    let (dollars, cents) = text.split_once('.').expect("d.dd");
    dollars.parse::<i64>().unwrap() * 100 + cents.parse::<i64>().unwrap()
}

fn dollars(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Asserts a logged failure: its status, the code 3000 + n, the name and the spec's
/// text, and (spec 2) the command and its transactionNum; answers the transactionNum.
async fn failed(client: &Http, status: u16, method: &str, path: &str, body: Option<Value>, message: &str) -> u64 {
    let answer = client.expect(status, method, path, body).await;
    assert_eq!(answer["error"]["message"], message, "{method} {path}: {answer}");
    assert_eq!(answer["error"]["name"], message.replace(' ', "_"), "{answer}");
    assert!(answer["error"]["code"].as_u64().is_some_and(|c| (3001..=3016).contains(&c)), "{answer}");
    assert!(answer["command"].as_str().is_some_and(|c| !c.is_empty()), "{method} {path}: {answer}");
    answer["transactionNum"].as_u64().filter(|n| *n > 0).unwrap_or_else(|| panic!("{method} {path}: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_through_rest_with_its_errors_and_a_trigger_firing() {
    let exchange = Exchange::start_with_day_trading().await;
    let me = exchange.client(&exchange.dt_user_key);
    let u = format!("/v1/daytrading/users/{DT_USER}");
    let at = |rest: &str| format!("{u}{rest}");

    // Before ADD the user does not exist.
    failed(&me, 404, "GET", &at("/summary"), None, "unknown user").await;
    let added = me.expect(200, "POST", &at("/add"), Some(json!({"amount": "10000.00"}))).await;
    assert_eq!((added["command"].as_str(), added["amount"].as_str()), (Some("ADD"), Some("10000.00")), "{added}");
    assert!(added["transactionNum"].as_u64().unwrap() > 0 && added["logIndex"].as_u64().unwrap() > 0);
    failed(&me, 400, "POST", &at("/add"), Some(json!({"amount": "-5"})), "invalid amount").await;
    failed(&me, 400, "POST", &at("/add"), Some(json!({"amount": "1.005"})), "invalid amount").await;
    // A body that is not the schema's is this API's own 400, before anything is logged.
    let bad = me.expect(400, "POST", &at("/add"), Some(json!({"amount": 5}))).await;
    assert_eq!(bad["error"]["name"], "invalid_body");

    // QUOTE, then BUY at that price (the cached quote: the same price), commit and cancel.
    let quote = me.expect(200, "POST", &at("/quote"), Some(json!({"symbol": "ABC"}))).await;
    let p = cents(&quote["price"]);
    assert!((100..=50_000).contains(&p), "{quote}");
    assert!(quote["quoteArrival"].as_u64().is_some() && quote["quoteServerTime"].as_u64().is_some(), "{quote}");
    failed(&me, 400, "POST", &at("/quote"), Some(json!({"symbol": "abcd"})), "invalid symbol").await;
    let buy =
        me.expect(200, "POST", &at("/buy"), Some(json!({"symbol": "ABC", "amount": dollars(3 * p + p / 2)}))).await;
    assert_eq!((buy["shares"].as_i64(), cents(&buy["amount"]), cents(&buy["price"])), (Some(3), 3 * p, p), "{buy}");
    assert_eq!(buy["expiresAt"].as_u64().unwrap(), buy["stamp"].as_u64().unwrap() + 60_000);
    failed(&me, 422, "POST", &at("/buy"), Some(json!({"symbol": "ABC", "amount": "1000000.00"})), "insufficient funds")
        .await;
    failed(
        &me,
        422,
        "POST",
        &at("/buy"),
        Some(json!({"symbol": "ABC", "amount": dollars(p - 1)})),
        "amount below price",
    )
    .await;
    let committed = me.expect(200, "POST", &at("/buy/commit"), None).await;
    assert_eq!((committed["command"].as_str(), committed["shares"].as_i64()), (Some("COMMIT_BUY"), Some(3)));
    // A failed command's body names it and its number, the next after the commit's.
    let again = me.expect(422, "POST", &at("/buy/commit"), None).await;
    assert_eq!(again["error"]["message"], "no pending buy", "{again}");
    assert_eq!(again["command"], "COMMIT_BUY", "{again}");
    assert_eq!(again["transactionNum"], committed["transactionNum"].as_u64().unwrap() + 1, "{again}");
    me.expect(200, "POST", &at("/buy"), Some(json!({"symbol": "ABC", "amount": dollars(p)}))).await;
    let cancelled = me.expect(200, "POST", &at("/buy/cancel"), None).await;
    assert_eq!(cents(&cancelled["amount"]), p, "{cancelled}");
    failed(&me, 422, "POST", &at("/buy/cancel"), None, "no pending buy").await;

    // SELL two of the three, commit; sell one, cancel.
    let sell = me.expect(200, "POST", &at("/sell"), Some(json!({"symbol": "ABC", "amount": dollars(2 * p)}))).await;
    assert_eq!(sell["shares"], 2, "{sell}");
    me.expect(200, "POST", &at("/sell/commit"), None).await;
    failed(&me, 422, "POST", &at("/sell/commit"), None, "no pending sell").await;
    me.expect(200, "POST", &at("/sell"), Some(json!({"symbol": "ABC", "amount": dollars(p)}))).await;
    me.expect(200, "POST", &at("/sell/cancel"), None).await;
    failed(&me, 422, "POST", &at("/sell/cancel"), None, "no pending sell").await;
    failed(&me, 422, "POST", &at("/sell"), Some(json!({"symbol": "XYZ", "amount": "1.00"})), "insufficient shares")
        .await;

    // A buy trigger: no price without an amount; armed at 500.00 it fires at once
    // against the cached quote (every emulated price is at most 500.00).
    failed(&me, 422, "PUT", &at("/buy-triggers/ABC/price"), Some(json!({"price": "500.00"})), "no buy trigger").await;
    me.expect(200, "PUT", &at("/buy-triggers/ABC/amount"), Some(json!({"amount": "600.00"}))).await;
    let before = me.expect(200, "GET", &at("/summary"), None).await;
    assert_eq!(before["buyTriggers"][0]["symbol"], "ABC", "{before}");
    assert_eq!(before["buyTriggers"][0]["triggerPrice"], Value::Null);
    assert_eq!(cents(&before["cash"]["reserved"]), 60_000);
    let armed = me.expect(200, "PUT", &at("/buy-triggers/ABC/price"), Some(json!({"price": "500.00"}))).await;
    assert_eq!(armed["command"], "SET_BUY_TRIGGER");
    let after = me.expect(200, "GET", &at("/summary"), None).await;
    assert_eq!(after["buyTriggers"], json!([]), "the trigger fired: {after}");
    assert_eq!(after["holdings"][0]["available"], 1 + 60_000 / p, "{after}");
    assert_eq!(cents(&after["cash"]["reserved"]), 0);
    failed(&me, 422, "DELETE", &at("/buy-triggers/ABC"), None, "no buy trigger").await;
    me.expect(200, "PUT", &at("/buy-triggers/XYZ/amount"), Some(json!({"amount": "50.00"}))).await;
    let released = me.expect(200, "DELETE", &at("/buy-triggers/XYZ"), None).await;
    assert_eq!(released["amount"], "50.00", "{released}");

    // A sell trigger above every emulated price stays armed, holding ⌊1000/600⌋ share.
    failed(&me, 422, "PUT", &at("/sell-triggers/ABC/price"), Some(json!({"price": "600.00"})), "no sell trigger").await;
    me.expect(200, "PUT", &at("/sell-triggers/ABC/amount"), Some(json!({"amount": "1000.00"}))).await;
    let armed = me.expect(200, "PUT", &at("/sell-triggers/ABC/price"), Some(json!({"price": "600.00"}))).await;
    assert_eq!(armed["shares"], 1, "{armed}");
    let summary = me.expect(200, "GET", &at("/summary"), None).await;
    assert_eq!(summary["user"], DT_USER);
    let trigger = &summary["sellTriggers"][0];
    assert_eq!((trigger["triggerPrice"].as_str(), trigger["reservedShares"].as_i64()), (Some("600.00"), Some(1)));
    assert_eq!(summary["holdings"][0]["reserved"], 1);
    assert_eq!(summary["history"]["recent"][0]["command"], "SET_SELL_TRIGGER", "{summary}");
    assert_eq!(summary["history"]["recent"][0]["outcome"], "ok");
    let released = me.expect(200, "DELETE", &at("/sell-triggers/ABC"), None).await;
    assert_eq!(released["shares"], 1);
    failed(&me, 422, "DELETE", &at("/sell-triggers/ABC"), None, "no sell trigger").await;

    // The user's own audit log, as XML offered for download.
    let (status, content_type, disposition, document) = me.get_text(&at("/dumplog?filename=mine.xml")).await;
    assert_eq!(status, 200, "{document}");
    assert_eq!(content_type, "application/xml");
    assert_eq!(disposition, "attachment; filename=\"mine.xml\"");
    assert!(
        document.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n") && document.ends_with("</log>\n")
    );
    assert!(document.contains("<errorMessage>no sell trigger</errorMessage>"));
    failed(&me, 400, "GET", &at("/dumplog?filename=..%2Fx"), None, "invalid filename").await;

    // Who may act for whom: the user's key only as DT_USER; an administrator for
    // anyone; the global DUMPLOG only for administrators.
    let forbidden = me.expect(403, "POST", "/v1/daytrading/users/alice/add", Some(json!({"amount": "1.00"}))).await;
    assert!(forbidden["error"]["message"].as_str().unwrap().starts_with("not authorized"), "{forbidden}");
    me.expect(403, "GET", "/v1/daytrading/users/alice/summary", None).await;
    let alice = exchange.client(&exchange.alice);
    alice.expect(403, "GET", &at("/summary"), None).await;
    failed(&me, 403, "POST", "/v1/daytrading/dumplog", Some(json!({"filename": "all.xml"})), "not authorized").await;
    let admin = exchange.client(&exchange.admin);
    let theirs = admin.expect(200, "GET", &at("/summary"), None).await;
    assert_eq!(theirs["user"], DT_USER);
    admin.expect(200, "POST", "/v1/daytrading/users/alice/add", Some(json!({"amount": "1.00"}))).await;
    failed(&admin, 400, "GET", "/v1/daytrading/users/bad%20user/summary", None, "invalid user").await;
    // Arguments past the exchange's bounds are refused before the log: a plain 400.
    let long = format!("/v1/daytrading/users/{}/summary", "u".repeat(600));
    let refused = admin.expect(400, "GET", &long, None).await;
    assert_eq!(refused["error"]["name"], "invalid_parameter", "{refused}");
    let written = admin.expect(200, "POST", "/v1/daytrading/dumplog", Some(json!({"filename": "./all.xml"}))).await;
    assert_eq!(written["filename"], "all.xml", "{written}");
    assert!(written["records"].as_u64().unwrap() > 40 && written["bytes"].as_u64().unwrap() > 1_000);
    failed(&admin, 400, "POST", "/v1/daytrading/dumplog", Some(json!({"filename": "../x"})), "invalid filename").await;
    let stranger = exchange.client("bk_not_a_key");
    let refused = stranger.expect(401, "GET", &at("/summary"), None).await;
    // Not logged: the command is named, with no number.
    assert_eq!((refused["command"].as_str(), &refused["transactionNum"]), (Some("DISPLAY_SUMMARY"), &Value::Null));
    let anonymous = Http { addr: exchange.http.addr(), key: None, tls: None };
    anonymous.expect(401, "GET", &at("/summary"), None).await;
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_service_the_routes_say_it_is_not_enabled() {
    let exchange = Exchange::start().await;
    let admin = exchange.client(&exchange.admin);
    let answer = admin.expect(404, "GET", "/v1/daytrading/users/u1/summary", None).await;
    assert_eq!(answer["error"]["name"], "not_found");
    assert!(answer["error"]["message"].as_str().unwrap().contains("day trading is not enabled"), "{answer}");
    admin.expect(404, "POST", "/v1/daytrading/users/u1/add", Some(json!({"amount": "1.00"}))).await;
    exchange.stop().await;
}

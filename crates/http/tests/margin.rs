//! Margin trading over REST against a real node and gateway: a margin contract made by
//! `POST /v1/symbols` with `margin`, positions opened by orders, the account report's
//! figures to the unit, an operator's mark that liquidates an account (its rest taken
//! over by the insurance account), the exchange report balancing every asset, and who
//! may read and mark what. The numbers are those of `crates/bourse/tests/margin_cli.rs`:
//! FUT/USD with multiplier 10, initial margin 1000 bp, maintenance 500 bp.

mod support;

use serde_json::{json, Value};
use support::{Exchange, Http};

/// Accounts made here (after the market's 0 and 1): A, B, C and the insurance account.
const A: u32 = 2;
const B: u32 = 3;
const C: u32 = 4;
const INSURANCE: u32 = 5;

fn margin_rules() -> Value {
    json!({"initial_bp": 1000, "maintenance_bp": 500, "multiplier": 10, "position_limit": 1000,
        "mark": "operator", "insurance": INSURANCE})
}

fn future(margin: Value) -> Value {
    json!({"name": "FUT/USD", "base": "FUT", "quote": "USD", "tick": 1, "lot": 1, "px_min": 10, "px_max": 10000,
        "margin": margin})
}

fn order(account: u32, side: &str, qty: i64, px: i64) -> Value {
    json!({"account": account, "symbol": "FUT/USD", "side": side, "type": "limit", "qty": qty, "px": px})
}

async fn report(admin: &Http, account: u32) -> Value {
    admin.expect(200, "GET", &format!("/v1/accounts/{account}/report"), None).await
}

/// The account's position in FUT/USD: (size, cost, realised).
fn position(report: &Value) -> (i64, i64, i64) {
    let found = report["positions"].as_array().unwrap().iter().find(|p| p["symbol_name"] == "FUT/USD");
    found.map_or((0, 0, 0), |p| {
        (p["size"].as_i64().unwrap(), p["cost"].as_i64().unwrap(), p["realized"].as_i64().unwrap())
    })
}

fn usd(report: &Value) -> Value {
    report["balances"].as_array().unwrap().iter().find(|b| b["asset_name"] == "USD").cloned().unwrap()
}

/// Every asset balances; returns the report.
async fn balanced(admin: &Http) -> Value {
    let totals = admin.expect(200, "GET", "/v1/admin/report", None).await;
    for asset in totals["assets"].as_array().unwrap() {
        assert_eq!(asset["balanced"], true, "{totals}");
    }
    totals
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_margin_contract_is_traded_reported_marked_and_liquidated_over_rest() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (admin, alice) = (exchange.client(&exchange.admin), exchange.client(&exchange.alice));
    let code = |value: &Value| (value["error"]["code"].as_u64().unwrap(), value["error"]["name"].clone());

    admin.expect(201, "POST", "/v1/assets", Some(json!({"name": "FUT", "decimals": 0}))).await;
    for (account, cash) in [(A, 1_000), (B, 10_000), (C, 10_000), (INSURANCE, 5_000)] {
        assert_eq!(admin.expect(201, "POST", "/v1/accounts", None).await["id"], account);
        let deposit = json!({"asset": "USD", "amount": cash});
        admin.expect(200, "POST", &format!("/v1/accounts/{account}/deposits"), Some(deposit)).await;
    }

    // Rules the API cannot read are a 400 that names what was wrong; rules the engine
    // refuses, its 422; neither makes a symbol.
    let mut bad = margin_rules();
    bad["mark"] = json!("foo");
    let (status, body) = admin.request("POST", "/v1/symbols", Some(future(bad))).await;
    assert_eq!((status, code(&body)), (400, (2000, json!("invalid_body"))), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("unknown variant `foo`"), "{body}");
    let mut bad = margin_rules();
    bad["leverage"] = json!(10);
    let (status, body) = admin.request("POST", "/v1/symbols", Some(future(bad))).await;
    assert_eq!((status, code(&body).0), (400, 2000), "{body}");
    let mut bad = margin_rules();
    bad.as_object_mut().unwrap().remove("insurance");
    let (status, _) = admin.request("POST", "/v1/symbols", Some(future(bad))).await;
    assert_eq!(status, 400, "every margin rule is required");
    let mut bad = margin_rules();
    bad["maintenance_bp"] = json!(2000);
    let (status, body) = admin.request("POST", "/v1/symbols", Some(future(bad))).await;
    assert_eq!((status, code(&body)), (422, (41, json!("margin_spec_invalid"))), "{body}");

    let created = admin.expect(201, "POST", "/v1/symbols", Some(future(margin_rules()))).await;
    assert_eq!(created["id"], 1);
    let symbols = alice.expect(200, "GET", "/v1/symbols", None).await;
    assert_eq!(symbols[0]["margin"], Value::Null, "a spot pair has no margin rules: {symbols}");
    assert_eq!(symbols[1]["name"], "FUT/USD");
    assert_eq!(symbols[1]["margin"], margin_rules());

    // A buys 10 at 100 from B: 10 contracts worth 10,000 on 1,000 of cash. B also
    // offers 1 at 150, which holds its initial margin (150) from its available cash.
    admin.expect(201, "POST", "/v1/orders", Some(order(B, "sell", 10, 100))).await;
    admin.expect(201, "POST", "/v1/orders", Some(order(A, "buy", 10, 100))).await;
    let resting = admin.expect(201, "POST", "/v1/orders", Some(order(B, "sell", 1, 150))).await["id"].clone();

    let a = report(&admin, A).await;
    assert_eq!(a["account"], A);
    assert_eq!(
        a["positions"],
        json!([{"symbol": 1, "symbol_name": "FUT/USD", "size": 10, "cost": 10_000, "realized": 0, "buying": 0,
            "selling": 0, "mark": 100, "unrealized": 0, "initial_margin": 1_000, "maintenance_margin": 500,
            // Liquidated at a mark below 95: 1,000 + 10 × (p − 100) × 10 < 5 % of 10 × p × 10.
            "liquidation_px": 95}])
    );
    assert_eq!(
        a["margin"],
        json!([{"asset": 0, "asset_name": "USD", "cash": 1_000, "unrealized": 0, "equity": 1_000,
            "initial_margin": 1_000, "maintenance_margin": 500, "free_margin": 0}])
    );
    assert_eq!(a["open_orders"], json!([]));
    let b = report(&admin, B).await;
    let b_position = &b["positions"][0];
    assert_eq!((b_position["size"].as_i64(), b_position["cost"].as_i64()), (Some(-10), Some(-10_000)));
    assert_eq!(b_position["selling"], 1);
    // A short is liquidated at a mark of 191 or more: 20,000 − 100 p < 5 p.
    assert_eq!(b_position["liquidation_px"], 191);
    assert_eq!((usd(&b)["available"].as_i64(), usd(&b)["reserved"].as_i64()), (Some(9_850), Some(150)));
    assert_eq!(b["margin"][0]["free_margin"], 9_850 - 1_000);
    let open = b["open_orders"].as_array().unwrap();
    assert_eq!((open.len(), &open[0]["id"], &open[0]["px_resting"]), (1, &resting, &json!(150)));
    // A's margin is all used: one more contract is refused with the rule's name.
    let (status, body) = admin.request("POST", "/v1/orders", Some(order(A, "buy", 1, 100))).await;
    assert_eq!((status, code(&body)), (422, (42, json!("margin_insufficient"))), "{body}");
    let totals = balanced(&admin).await;
    assert_eq!(
        totals["symbols"],
        json!([{"symbol": 1, "symbol_name": "FUT/USD", "mark": 100, "open_interest": 10, "longs": 1, "shorts": 1}])
    );

    // C bids 3 at 92; the operator's mark falls to 80: A is liquidated, 3 into C's bid,
    // 7 to the insurance account at the bankruptcy price 90 (where A's equity is 0).
    admin.expect(201, "POST", "/v1/orders", Some(order(C, "buy", 3, 92))).await;
    let marked = admin.expect(200, "POST", "/v1/admin/symbols/FUT%2FUSD/mark", Some(json!({"px": 80}))).await;
    assert!(marked["log_index"].as_u64().unwrap() > 0);
    let a = report(&admin, A).await;
    assert_eq!(position(&a), (0, 0, -940), "3 × (92 − 100) × 10 + 7 × (90 − 100) × 10");
    assert_eq!(a["positions"][0]["liquidation_px"], Value::Null, "flat");
    assert_eq!(usd(&a)["available"], 60);
    assert_eq!(position(&report(&admin, INSURANCE).await), (7, 6_300, 0));
    let c = report(&admin, C).await;
    assert_eq!(position(&c), (3, 2_760, 0));
    assert_eq!(c["positions"][0]["unrealized"], 3 * 80 * 10 - 2_760);
    // Cash well above its losses at any mark: no positive mark liquidates C's long.
    assert_eq!(c["positions"][0]["liquidation_px"], Value::Null);
    assert_eq!(
        c["margin"][0],
        json!({"asset": 0, "asset_name": "USD", "cash": 10_000, "unrealized": -360, "equity": 9_640,
            "initial_margin": 240, "maintenance_margin": 120, "free_margin": 10_000 - 360 - 240})
    );
    let b = report(&admin, B).await;
    assert_eq!(b["margin"][0]["unrealized"], 2_000, "short 10 from 100 to 80");
    let totals = balanced(&admin).await;
    assert_eq!(
        totals["symbols"],
        json!([{"symbol": 1, "symbol_name": "FUT/USD", "mark": 80, "open_interest": 10, "longs": 2, "shorts": 1}])
    );
    let usd_totals = totals["assets"].as_array().unwrap().iter().find(|a| a["asset_name"] == "USD").unwrap();
    assert_eq!(usd_totals["supply"], 2 * 1_000_000 + 1_000 + 10_000 + 10_000 + 5_000);
    assert_eq!((usd_totals["bad_debt"].as_i64(), usd_totals["fees"].as_i64()), (Some(0), Some(0)));

    // A spot pair has no mark to set; nor has an unknown symbol.
    let (status, body) = admin.request("POST", "/v1/admin/symbols/ACME%2FUSD/mark", Some(json!({"px": 90}))).await;
    assert_eq!((status, code(&body).1), (422, json!("mark_not_settable")), "{body}");
    let (status, _) = admin.request("POST", "/v1/admin/symbols/NOPE%2FUSD/mark", Some(json!({"px": 90}))).await;
    assert_eq!(status, 404);
    let (status, body) = admin.request("POST", "/v1/admin/symbols/1/mark", Some(json!({"px": "90"}))).await;
    assert_eq!((status, code(&body).0), (400, 2000), "{body}");

    // Alice (accounts 0 and 1, no admin rights) reads her own report, not another
    // account's, not the exchange's, and may not mark; her attempts change nothing.
    let own = alice.expect(200, "GET", "/v1/accounts/0/report", None).await;
    assert_eq!((own["positions"].clone(), own["margin"].clone()), (json!([]), json!([])));
    assert_eq!(usd(&own)["available"], 1_000_000);
    let (status, body) = alice.request("GET", &format!("/v1/accounts/{A}/report"), None).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = alice.request("GET", "/v1/admin/report", None).await;
    assert_eq!(status, 403, "{body}");
    let (status, body) = alice.request("POST", "/v1/admin/symbols/FUT%2FUSD/mark", Some(json!({"px": 200}))).await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(position(&report(&admin, B).await), (-10, -10_000, 0), "B was not liquidated by alice's mark");
    let (status, _) = admin.request("GET", "/v1/accounts/99/report", None).await;
    assert_eq!(status, 404, "an unknown account");
    exchange.stop().await;
}

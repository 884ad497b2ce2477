//! FIX order entry against a real node and gateway: orders that rest, trade, are
//! cancelled and replaced, Day orders that expire when the trading day closes (live and
//! while the front end was down), with ExecutionReports checked field by field and the
//! exchange's balances checked behind them; refusals change nothing.

mod support;

use std::time::Duration;

use bourse_protocol::proto;
use support::{f, get, limit, Exchange, FixClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_rest_trade_cancel_and_replace() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, logon) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    assert_eq!(logon.msg_type(), "A");
    assert_eq!(get(&logon, 108), "30");

    // A buy that rests.
    fix.send("D", &limit("b1", 1, "1", 10, 150)).await;
    let new = fix.recv_app().await;
    assert_eq!((new.msg_type(), get(&new, 150), get(&new, 39)), ("8", "0", "0"));
    assert_eq!((get(&new, 11), get(&new, 151), get(&new, 14), get(&new, 6)), ("b1", "10", "0", "0"));
    let buy_id = get(&new, 37).to_owned();
    // 10 × 150 + taker fee 10 reserved.
    assert_eq!(exchange.balance(1, 0).await, (1_000_000 - 1_510, 1_510));

    // A sell of 4 at 149 trades 4 at 150: the buy is partially filled, the sell filled.
    fix.send("D", &limit("s1", 0, "2", 4, 149)).await;
    let mut reports = Vec::new();
    for _ in 0..3 {
        reports.push(fix.recv_app().await);
    }
    let find = |cl: &str, exec_type: &str| {
        reports
            .iter()
            .find(|r| get(r, 11) == cl && get(r, 150) == exec_type)
            .unwrap_or_else(|| panic!("no {exec_type} for {cl}: {reports:?}"))
            .clone()
    };
    assert_eq!(get(&find("s1", "0"), 39), "0");
    let sell_fill = find("s1", "F");
    assert_eq!(
        (get(&sell_fill, 39), get(&sell_fill, 32), get(&sell_fill, 31), get(&sell_fill, 151)),
        ("2", "4", "150", "0")
    );
    let buy_fill = find("b1", "F");
    assert_eq!(
        (get(&buy_fill, 39), get(&buy_fill, 14), get(&buy_fill, 151), get(&buy_fill, 6)),
        ("1", "4", "6", "150")
    );
    assert_eq!(get(&buy_fill, 37), buy_id);
    // The buyer paid 600 and the maker fee (0); the rest of the reservation is for 6.
    assert_eq!(exchange.balance(1, 0).await, (1_000_000 - 600 - 906, 906));

    // Replace: a lower quantity keeps the order (reduce), then a new price moves it.
    let mut replace = limit("b1-r1", 1, "1", 8, 150);
    replace.push((41, "b1".into()));
    fix.send("G", &replace).await;
    let replaced = fix.recv_app().await;
    assert_eq!(
        (get(&replaced, 150), get(&replaced, 39), get(&replaced, 11), get(&replaced, 41)),
        ("5", "1", "b1-r1", "b1")
    );
    assert_eq!((get(&replaced, 38), get(&replaced, 151), get(&replaced, 14)), ("8", "4", "4"));
    let mut moved = limit("b1-r2", 1, "1", 8, 140);
    moved.push((41, "b1-r1".into()));
    fix.send("G", &moved).await;
    let replaced = fix.recv_app().await;
    assert_eq!(
        (get(&replaced, 150), get(&replaced, 44), get(&replaced, 151), get(&replaced, 37)),
        ("5", "140", "4", buy_id.as_str())
    );
    assert_eq!(exchange.balance(1, 0).await.1, 4 * 140 + 4);

    // A replace that changes both is refused with a reason and changes nothing.
    let mut both = limit("b1-r3", 1, "1", 6, 141);
    both.push((41, "b1-r2".into()));
    fix.send("G", &both).await;
    let refused = fix.recv_app().await;
    assert_eq!((refused.msg_type(), get(&refused, 434), get(&refused, 39)), ("9", "2", "1"));
    assert!(get(&refused, 58).contains("not both"), "{refused:?}");

    // Cancel the rest.
    fix.send("F", &f(&[(11, "b1-c"), (41, "b1-r2"), (55, "ACME/USD"), (54, "1"), (60, "20260101-00:00:00")])).await;
    let cancelled = fix.recv_app().await;
    assert_eq!(
        (get(&cancelled, 150), get(&cancelled, 39), get(&cancelled, 11), get(&cancelled, 41)),
        ("4", "4", "b1-c", "b1-r2")
    );
    assert_eq!((get(&cancelled, 151), get(&cancelled, 14)), ("0", "4"));
    assert_eq!(exchange.balance(1, 0).await, (1_000_000 - 600, 0));
    let order =
        exchange.query(&exchange.admin).await.order(bourse_engine::OrderId(buy_id.parse().unwrap())).await.unwrap();
    assert_eq!(order.order.unwrap().qty_filled, 4);

    // Cancelling again: the engine no longer has it open.
    fix.send("F", &f(&[(11, "b1-c2"), (41, "b1-c"), (55, "ACME/USD"), (54, "1"), (60, "20260101-00:00:00")])).await;
    let refused = fix.recv_app().await;
    assert_eq!((refused.msg_type(), get(&refused, 434)), ("9", "1"));

    // Logout is answered and the connection closes.
    fix.send("5", &[]).await;
    assert_eq!(fix.recv_app().await.msg_type(), "5");
    assert!(fix.closed(Duration::from_secs(3)).await);
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cannot_be_expressed_is_rejected_with_a_reason_and_changes_nothing() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    let before = exchange.balance(1, 0).await;
    // (name, the order, OrdRejReason (103), what Text (58) says). The refusals of the
    // gateway and the engine carry no FIX reason of their own (99, Other): Text names
    // the refusal with its stable code, `name (code)`, which is what is checked.
    let cases: Vec<(&str, Fields, &str, &str)> = vec![
        ("good till date", with(limit("r1", 1, "1", 1, 150), 59, "6"), "11", "TimeInForce 6"),
        ("unknown order type", with(limit("r1b", 1, "1", 1, 150), 40, "Z"), "11", "OrdType Z is not supported"),
        ("unknown symbol", with(limit("r2", 1, "1", 1, 150), 55, "NOPE/USD"), "1", "unknown symbol"),
        (
            "market buy without budget",
            without(with(limit("r3", 1, "1", 1, 150), 40, "1"), &[44, 59]),
            "11",
            "CashOrderQty",
        ),
        ("fractional price", with(limit("r4", 1, "1", 1, 150), 44, "150.5"), "11", "whole number"),
        // The gateway's refusal before the log: alice's key does not own account 7.
        ("not her account", limit("r5", 7, "1", 1, 150), "99", "not_authorized (1004)"),
        ("too poor", limit("r6", 1, "1", 1_000_000, 150), "3", "balance_insufficient (13)"),
        ("post-only that would trade", with(limit("r7", 0, "2", 1, 1), 18, "6"), "99", "post_only_would_trade (14)"),
    ];
    // Something to trade against for the post-only case: a resting bid.
    fix.send("D", &limit("bid", 1, "1", 1, 100)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    let before_bid = exchange.balance(1, 0).await;
    for (name, fields, reason, text) in cases {
        fix.send("D", &fields).await;
        let report = fix.recv_app().await;
        assert_eq!((report.msg_type(), get(&report, 150), get(&report, 39)), ("8", "8", "8"), "{name}: {report:?}");
        assert_eq!((get(&report, 37), get(&report, 103)), ("NONE", reason), "{name}: {report:?}");
        assert!(get(&report, 58).contains(text), "{name}: {:?}", get(&report, 58));
    }
    assert_ne!(before, before_bid);
    assert_eq!(exchange.balance(1, 0).await, before_bid);
    assert_eq!(exchange.balance(0, 1).await, (100, 0));
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_orders_rest_trade_and_expire_when_the_day_closes() {
    let mut exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    let mut query = exchange.query(&exchange.admin).await;
    let tif_of = async |query: &mut bourse_client::QueryClient, report: &bourse_fix::codec::Message| {
        let id = bourse_engine::OrderId(get(report, 37).parse().unwrap());
        query.order(id).await.unwrap().order.unwrap().tif
    };

    // TimeInForce 0: a Day order that rests, then trades 4 of 10.
    fix.send("D", &with(limit("d1", 1, "1", 10, 150), 59, "0")).await;
    let new = fix.recv_app().await;
    assert_eq!((get(&new, 150), get(&new, 39), get(&new, 59), get(&new, 151)), ("0", "0", "0", "10"));
    assert_eq!(tif_of(&mut query, &new).await, proto::Tif::Day as i32);
    let d1 = get(&new, 37).to_owned();
    fix.send("D", &limit("s1", 0, "2", 4, 150)).await;
    let reports = until_done(&mut fix, "s1", 3).await;
    let fill = reports.iter().find(|r| get(r, 11) == "d1").expect("d1's fill");
    assert_eq!((get(fill, 150), get(fill, 39), get(fill, 14), get(fill, 151)), ("F", "1", "4", "6"));

    // No TimeInForce: Day, as FIX 4.4 defines it; a market order's Day is IOC.
    fix.send("D", &without(limit("d2", 1, "1", 2, 140), &[59])).await;
    let new = fix.recv_app().await;
    assert_eq!((get(&new, 150), new.get(59)), ("0", None));
    assert_eq!(tif_of(&mut query, &new).await, proto::Tif::Day as i32);
    let market = without(with(with(limit("m1", 1, "1", 1, 0), 40, "1"), 152, "1000"), &[44]);
    fix.send("D", &with(market, 59, "0")).await;
    let reports = until_done(&mut fix, "m1", 2).await;
    assert_eq!(exec(&reports, "m1"), vec![("0", "0"), ("4", "4")], "nothing to buy: the IOC remainder");
    assert_eq!(tif_of(&mut query, &reports[0]).await, proto::Tif::Ioc as i32);
    fix.send("D", &limit("g1", 1, "1", 1, 130)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    // 6 × 150 + 2 × 140 + 130, each with the taker fee of 1 a share.
    assert_eq!(exchange.balance(1, 0).await.1, 6 * 151 + 2 * 141 + 131);

    // The operator closes the day: both Day orders expire, the GTC one stays.
    assert_eq!(exchange.close_day().await, 2);
    let mut expired = [fix.recv_app().await, fix.recv_app().await];
    expired.sort_by_key(|r| get(r, 11).to_owned());
    let (e1, e2) = (&expired[0], &expired[1]);
    assert_eq!((get(e1, 11), get(e1, 37), get(e1, 150), get(e1, 39)), ("d1", d1.as_str(), "C", "C"));
    assert_eq!((get(e1, 151), get(e1, 14), get(e1, 6), get(e1, 58)), ("0", "4", "150", "expired"));
    assert_eq!((get(e2, 11), get(e2, 150), get(e2, 39), get(e2, 151), get(e2, 14)), ("d2", "C", "C", "0", "0"));
    assert_eq!(exchange.balance(1, 0).await.1, 131, "only the GTC order holds anything");
    // An expired order cannot be cancelled: OrderCancelReject with its status, Expired.
    fix.send("F", &f(&[(11, "d1-c"), (41, "d1"), (55, "ACME/USD"), (54, "1"), (60, "20260101-00:00:00")])).await;
    let refused = fix.recv_app().await;
    assert_eq!((refused.msg_type(), get(&refused, 39), get(&refused, 434)), ("9", "C", "1"));

    // A Day order whose day closes while the FIX front end is down: after the restart
    // its expiry is read from the exchange and reported.
    fix.send("D", &with(limit("d3", 1, "1", 3, 120), 59, "0")).await;
    let new = fix.recv_app().await;
    let new_seq: u64 = get(&new, 34).parse().unwrap();
    let seq = fix.seq;
    drop(fix);
    tokio::time::sleep(Duration::from_millis(100)).await;
    exchange.stop_fix().await;
    assert_eq!(exchange.close_day().await, 1);
    exchange.start_fix().await;
    let mut fix = support::FixClient::connect(exchange.fix_addr, "ALICE", seq).await;
    fix.send("A", &f(&[(98, "0"), (108, "30"), (554, &exchange.alice)])).await;
    assert_eq!(fix.recv().await.msg_type(), "A");
    fix.send("2", &f(&[(7, &(new_seq + 1).to_string()), (16, "0")])).await;
    let expiry = loop {
        let message = fix.recv_app().await;
        if message.msg_type() == "8" {
            break message;
        }
    };
    assert_eq!((get(&expiry, 11), get(&expiry, 150), get(&expiry, 39), get(&expiry, 151)), ("d3", "C", "C", "0"));
    exchange.stop().await;
}

type Fields = Vec<(u32, String)>;

fn with(mut fields: Vec<(u32, String)>, tag: u32, value: &str) -> Vec<(u32, String)> {
    match fields.iter_mut().find(|(t, _)| *t == tag) {
        Some(field) => field.1 = value.into(),
        None => fields.push((tag, value.into())),
    }
    fields
}

fn without(fields: Vec<(u32, String)>, tags: &[u32]) -> Vec<(u32, String)> {
    fields.into_iter().filter(|(t, _)| !tags.contains(t)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_order_kind_maps_to_its_engine_order() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    let mut query = exchange.query(&exchange.admin).await;

    // An iceberg: 10 resting, 3 shown (MaxFloor).
    fix.send("D", &with(limit("ice", 0, "2", 10, 150), 111, "3")).await;
    let new = fix.recv_app().await;
    assert_eq!(get(&new, 150), "0");
    let id = bourse_engine::OrderId(get(&new, 37).parse().unwrap());
    let order = query.order(id).await.unwrap().order.unwrap();
    assert_eq!((order.qty_open, order.qty_visible), (10, 3));

    // A market buy with a budget (CashOrderQty) takes 4 of it and is done.
    let market = without(with(with(limit("mkt", 1, "1", 4, 0), 40, "1"), 152, "1000"), &[44, 59]);
    fix.send("D", &market).await;
    let reports = until_done(&mut fix, "mkt", 4).await;
    // The iceberg shows 3 at a time: two fills, 3 then 1 after its refresh.
    assert_eq!(exec(&reports, "mkt"), vec![("0", "0"), ("F", "1"), ("F", "2")]);
    let last = reports.iter().rfind(|r| get(r, 11) == "mkt").unwrap();
    assert_eq!((get(last, 14), get(last, 151), get(last, 6)), ("4", "0", "150"));

    // IOC for more than is offered: New, the fill, then the rest cancelled ("unfilled").
    fix.send("D", &with(limit("ioc", 1, "1", 10, 150), 59, "3")).await;
    let reports = until_done(&mut fix, "ioc", 4).await;
    let ioc = exec(&reports, "ioc");
    assert_eq!((ioc.first(), ioc.last()), (Some(&("0", "0")), Some(&("4", "4"))), "{ioc:?}");
    let cancelled = reports.iter().rfind(|r| get(r, 11) == "ioc").unwrap();
    assert_eq!((get(cancelled, 14), get(cancelled, 151), get(cancelled, 58)), ("6", "0", "unfilled"));
    let ice = reports.iter().rfind(|r| get(r, 11) == "ice").unwrap();
    assert_eq!((get(ice, 39), get(ice, 14), get(ice, 151)), ("2", "10", "0"));

    // FOK that cannot fill: rejected by the engine's rule, nothing changes.
    fix.send("D", &with(limit("fok", 1, "1", 5, 150), 59, "4")).await;
    let report = fix.recv_app().await;
    assert_eq!((get(&report, 150), get(&report, 39)), ("8", "8"));
    assert!(get(&report, 58).contains("fok_cannot_fill"), "{report:?}");

    // A stop-limit and a stop (market, with a budget) wait for their trigger.
    let stop_limit = with(with(limit("sl", 1, "1", 1, 200), 40, "4"), 99, "190");
    fix.send("D", &stop_limit).await;
    let new = fix.recv_app().await;
    assert_eq!((get(&new, 150), get(&new, 99), get(&new, 44)), ("0", "190", "200"));
    let stop = without(with(with(with(limit("sm", 1, "1", 1, 0), 40, "3"), 99, "190"), 152, "500"), &[44, 59]);
    fix.send("D", &stop).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    let open = query.open_orders(bourse_engine::AccountId(1)).await.unwrap().orders;
    assert_eq!(open.len(), 2);
    assert!(open.iter().all(|o| o.status == bourse_protocol::proto::OrderStatus::Pending as i32), "{open:?}");
    exchange.stop().await;
}

/// Application messages until `cl` is done (filled, cancelled or rejected) and at
/// least `n` have arrived (the other side's reports may come after).
async fn until_done(fix: &mut FixClient, cl: &str, n: usize) -> Vec<bourse_fix::codec::Message> {
    let mut out: Vec<bourse_fix::codec::Message> = Vec::new();
    let done = |out: &[bourse_fix::codec::Message]| {
        out.iter().any(|r| get(r, 11) == cl && matches!(get(r, 39), "2" | "4" | "8"))
    };
    while out.len() < n || !done(&out) {
        out.push(fix.recv_app().await);
    }
    // Whatever else is already on its way (the maker's last report).
    while let Some(message) = fix.try_recv(std::time::Duration::from_millis(200)).await {
        out.push(message);
    }
    out
}

/// (ExecType, OrdStatus) of the reports for `cl`, in order.
fn exec<'a>(reports: &'a [bourse_fix::codec::Message], cl: &str) -> Vec<(&'a str, &'a str)> {
    reports.iter().filter(|r| get(r, 11) == cl).map(|r| (get(r, 150), get(r, 39))).collect()
}

/// Authorisation over every FIX application message: alice's key (accounts 0 and 1)
/// acting on account 2's order or account, and alice's key revoked while her session is
/// open. Each is refused, answered exactly like a missing order where an order is
/// named, and nothing changes. (FIX has no administrative message: what only an admin
/// key may do is not reachable over FIX at all.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_application_message_refuses_another_accounts_orders_and_a_revoked_key() {
    use bourse_client::{random_client_id, AdminSession, ApiKey, ClientOptions};
    use bourse_engine::command::CommandBody;
    use bourse_engine::{AccountId, Amount, AssetId};
    use bourse_gateway::keys::entry_for;
    use bourse_gateway::KeyStore;

    let exchange = Exchange::start().await;
    exchange.market().await;
    let options = ClientOptions { api_key: Some(ApiKey(exchange.admin.clone())), ..ClientOptions::default() };
    let endpoints = vec![exchange.gateway.addr().to_string()];
    let mut admin = AdminSession::connect(endpoints, random_client_id(), options).await.unwrap();
    let theirs = AccountId(admin.submit(CommandBody::CreateAccount).await.unwrap().ok_id().unwrap() as u32);
    assert_eq!(theirs, AccountId(2));
    let deposit = CommandBody::Deposit { account: theirs, asset: AssetId(0), amount: Amount(1_000_000) };
    admin.submit(deposit).await.unwrap().ok_id().unwrap();

    // The operator's session rests an order for account 2.
    let (mut ops, _) = FixClient::logon(exchange.fix_addr, "OPS", &exchange.admin, false).await;
    ops.send("D", &limit("theirs", 2, "1", 10, 100)).await;
    let rested = ops.recv_app().await;
    assert_eq!(get(&rested, 150), "0");
    let their_order = get(&rested, 37).to_owned();
    let before = (exchange.balance(2, 0).await, exchange.balance(0, 0).await, exchange.balance(1, 0).await);

    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    let mut wrong = Vec::new();
    // NewOrderSingle for account 2: refused by the gateway before the log.
    fix.send("D", &limit("a1", 2, "1", 1, 100)).await;
    let report = fix.recv_app().await;
    if (get(&report, 150), get(&report, 37)) != ("8", "NONE") || !get(&report, 58).contains("not_authorized (1004)") {
        wrong.push(format!("NewOrderSingle on account 2: {report:?}"));
    }
    // Cancel and CancelReplace naming account 2's order by OrderID answer exactly as
    // for an order that does not exist: OrderCancelReject, unknown order.
    for (msg_type, name) in [("F", "OrderCancelRequest"), ("G", "OrderCancelReplaceRequest")] {
        let mut answers = Vec::new();
        for (n, order) in [(0, their_order.as_str()), (1, "999999")] {
            let cl = format!("{msg_type}{n}");
            let mut fields = limit(&cl, 2, "1", 5, 101);
            fields.extend(f(&[(41, "not-mine"), (37, order), (60, "20260101-00:00:00")]));
            fix.send(msg_type, &fields).await;
            let answer = fix.recv_app().await;
            answers.push(
                [39, 102, 434, 58, 37, 41].map(|tag| get(&answer, tag).to_owned()).into_iter().collect::<Vec<_>>(),
            );
            if answer.msg_type() != "9" {
                wrong.push(format!("{name} of order {order}: {answer:?}"));
            }
        }
        if answers[0] != answers[1] {
            wrong.push(format!("{name}: a foreign order {:?} and a missing one {:?} differ", answers[0], answers[1]));
        }
        if answers[0][1] != "1" {
            wrong.push(format!("{name}: CxlRejReason {} is not 1 (unknown order)", answers[0][1]));
        }
    }
    let after = (exchange.balance(2, 0).await, exchange.balance(0, 0).await, exchange.balance(1, 0).await);
    assert_eq!(after, before, "the refused messages changed nothing");

    // Revoked: the gateway's key file loses alice's key. Her open session ends at once
    // with a Logout that says why, and a new Logon is refused.
    let kept = KeyStore::from_entries(vec![entry_for(&exchange.admin, "ops", Vec::new(), true)]).unwrap();
    exchange.gateway.reload_keys(kept);
    let answer = fix.recv_app().await;
    if answer.msg_type() != "5" || !get(&answer, 58).contains("revoked") {
        wrong.push(format!("her session after the revocation: {answer:?}"));
    }
    assert!(fix.closed(Duration::from_secs(5)).await, "the revoked session's connection closes");
    let (_, refused) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    if refused.msg_type() != "5" {
        wrong.push(format!("a Logon with the revoked key: {refused:?}"));
    }
    let after = (exchange.balance(2, 0).await, exchange.balance(0, 0).await, exchange.balance(1, 0).await);
    assert_eq!(after, before, "the revoked key changed nothing");
    // Positive control: the operator's order is still there to cancel.
    ops.send("F", &f(&[(11, "theirs-c"), (41, "theirs"), (55, "ACME/USD"), (54, "1"), (60, "20260101-00:00:00")]))
        .await;
    let cancelled = ops.recv_app().await;
    assert_eq!((get(&cancelled, 150), get(&cancelled, 39)), ("4", "4"), "{cancelled:?}");
    assert!(wrong.is_empty(), "{} messages were not refused as expected:\n{}", wrong.len(), wrong.join("\n"));
    exchange.stop().await;
}

//! Margin trading over FIX against a real node and gateway: positions opened and
//! reduced with NewOrderSingle, marked by the operator, and read back with
//! RequestForPositions (35=AN): the RequestForPositionsAck (AO) and each PositionReport
//! (AP) checked field by field and against the exchange's own account report; the
//! refusals (an unsupported or unknown PosReqType, another key's account, an unknown
//! account, a symbol without positions or unknown, a missing tag, a malformed date),
//! position reports gap-filled on resend; the margin refusals as ExecutionReports
//! (OrdRejReason 99, the reject's name and code in Text), a market buy without
//! CashOrderQty in a margin symbol, and an order cancelled by a liquidation (Text
//! `liquidation`).
//!
//! The numbers (FUT/USD: multiplier 1,000, initial margin 10 %, maintenance 5 %, no
//! fees; accounts 0 and 1 with 1,000,000 cents each): account 0 sells 10 at 100 to
//! account 1, account 1 sells 4 back at 120, and the operator marks 110. Account 1 is
//! long 6 with cost 600,000 (carried at 100), realised 4 × 120 × 1,000 − 400,000 =
//! 80,000, unrealised 6 × 110 × 1,000 − 600,000 = 60,000, initial margin 66,000 and
//! maintenance 33,000; account 0 the mirror image, short 6.

mod support;

use std::collections::HashMap;

use bourse_engine::AccountId;
use bourse_fix::codec::Message;
use bourse_fix::time::{now_ns, utc_timestamp};
use support::{f, get, limit, Exchange, FixClient};

/// A limit NewOrderSingle in FUT/USD.
fn fut(cl: &str, account: u32, side: &str, qty: i64, px: i64) -> Vec<(u32, String)> {
    let mut fields = limit(cl, account, side, qty, px);
    for (tag, value) in &mut fields {
        if *tag == 55 {
            *value = "FUT/USD".into();
        }
    }
    fields
}

/// A RequestForPositions for `account`, with `extra` fields, less the tags in `without`.
fn request(id: &str, account: &str, extra: &[(u32, &str)], without: &[u32]) -> Vec<(u32, String)> {
    let now = utc_timestamp(now_ns());
    let mut fields = f(&[(710, id), (724, "0"), (1, account), (581, "1"), (715, "20260102"), (60, &now)]);
    fields.retain(|(tag, _)| !without.contains(tag));
    for (tag, value) in extra {
        match fields.iter_mut().find(|(t, _)| t == tag) {
            Some(field) => field.1 = (*value).to_owned(),
            None => fields.push((*tag, (*value).to_owned())),
        }
    }
    fields
}

/// The next `n` application messages, by (ClOrdID, ExecType).
async fn reports(fix: &mut FixClient, n: usize) -> HashMap<(String, String), Message> {
    let mut out = HashMap::new();
    for _ in 0..n {
        let report = fix.recv_app().await;
        assert_eq!(report.msg_type(), "8", "{report:?}");
        out.insert((get(&report, 11).to_owned(), get(&report, 150).to_owned()), report);
    }
    out
}

/// The positions of the module header, opened over FIX and marked at 110.
async fn open_positions(exchange: &Exchange, fix: &mut FixClient) {
    fix.send("D", &fut("s1", 0, "2", 10, 100)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    fix.send("D", &fut("b1", 1, "1", 10, 100)).await;
    let got = reports(fix, 3).await;
    for key in [("b1", "0"), ("b1", "F"), ("s1", "F")] {
        assert!(got.contains_key(&(key.0.into(), key.1.into())), "no {key:?}: {got:?}");
    }
    fix.send("D", &fut("s2", 1, "2", 4, 120)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    fix.send("D", &fut("b2", 0, "1", 4, 120)).await;
    let got = reports(fix, 3).await;
    assert_eq!(get(&got[&("s2".into(), "F".into())], 31), "120");
    exchange.set_mark(1, 110).await;
}

/// The fields of `message` after its header, but PosMaintRptID (unique, checked apart).
fn body(message: &Message) -> Vec<(u32, String)> {
    let header = [8, 9, 35, 49, 56, 34, 52, 43, 122, 10, 721];
    message
        .fields
        .iter()
        .filter(|(tag, _)| !header.contains(tag))
        .map(|(tag, value)| (*tag, String::from_utf8_lossy(value).into_owned()))
        .collect()
}

/// The one position of `account` in the exchange's account report.
async fn position_of(exchange: &Exchange, account: u32) -> bourse_protocol::proto::PositionInfo {
    let report = exchange.query(&exchange.admin).await.account_report(AccountId(account)).await.unwrap();
    assert_eq!(report.positions.len(), 1, "{report:?}");
    report.positions.into_iter().next().expect("a position")
}

/// Sends `fields` as a RequestForPositions; returns the AO and the APs it announces.
async fn ask(fix: &mut FixClient, fields: &[(u32, String)]) -> (Message, Vec<Message>) {
    fix.send("AN", fields).await;
    let ack = fix.recv_app().await;
    assert_eq!(ack.msg_type(), "AO", "{ack:?}");
    let total: usize = get(&ack, 727).parse().unwrap();
    let mut reports = Vec::new();
    for _ in 0..total {
        let report = fix.recv_app().await;
        assert_eq!(report.msg_type(), "AP", "{report:?}");
        reports.push(report);
    }
    (ack, reports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn positions_are_reported_field_by_field() {
    let exchange = Exchange::start().await;
    exchange.margin_market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    open_positions(&exchange, &mut fix).await;

    // The exchange's own report, which the FIX answers must agree with.
    let long = position_of(&exchange, 1).await;
    let short = position_of(&exchange, 0).await;
    assert_eq!((long.size, long.cost, long.realized, long.unrealized), (6, 600_000, 80_000, 60_000));
    assert_eq!((short.size, short.cost, short.realized, short.unrealized), (-6, -600_000, -80_000, -60_000));
    assert_eq!((long.initial_margin, long.maintenance_margin, long.mark), (66_000, 33_000, Some(110)));
    // Account 0, short 6 with 920,000 cents: liquidated when 10,000 × (920,000 −
    // 6,000 × mark + 600,000) < 6,000 × mark × 500, that is from a mark of 242.
    assert_eq!(short.liquidation_px, Some(242));

    let (ack, reports) = ask(&mut fix, &request("p1", "1", &[], &[])).await;
    let expected = f(&[(710, "p1"), (727, "1"), (728, "0"), (729, "0"), (1, "1"), (581, "1")]);
    assert_eq!(body(&ack), expected);
    // Account 1, long 6 with 1,080,000 cents: only a mark below zero, which cannot be,
    // would liquidate it (10,000 × (480,000 + 6,000 × mark) < 3,000,000 × mark); the
    // report has no liquidation price for it, and the AP says so.
    assert_eq!(long.liquidation_px, None);
    let text = "initial margin 66000, maintenance margin 33000, no liquidation price, open buy 0, open sell 0";
    let expected = f(&[
        (710, "p1"),
        (724, "0"),
        (727, "1"),
        (728, "0"),
        (715, "20260102"),
        (1, "1"),
        (581, "1"),
        (55, "FUT/USD"),
        (231, "1000"),
        (730, "110"),
        (731, "2"),
        (734, "100"),
        (702, "1"),
        (703, "FIN"),
        (704, "6"),
        (705, "0"),
        (753, "2"),
        (707, "FMTM"),
        (708, "60000"),
        (707, "CASH"),
        (708, "80000"),
        (58, text),
    ]);
    assert_eq!(body(&reports[0]), expected);
    let (ack_id, report_id) = (get(&ack, 721), get(&reports[0], 721));
    assert!(!ack_id.is_empty() && !report_id.is_empty() && ack_id != report_id);

    // The short side, asked for by symbol: the AO names it.
    let (ack, reports) = ask(&mut fix, &request("p2", "0", &[(55, "FUT/USD")], &[])).await;
    let expected = f(&[(710, "p2"), (727, "1"), (728, "0"), (729, "0"), (1, "0"), (581, "1"), (55, "FUT/USD")]);
    assert_eq!(body(&ack), expected);
    let report = &reports[0];
    assert_eq!((get(report, 704), get(report, 705), get(report, 730), get(report, 734)), ("0", "6", "110", "100"));
    let amounts: Vec<_> = body(report).into_iter().filter(|(tag, _)| matches!(tag, 707 | 708)).collect();
    assert_eq!(amounts, f(&[(707, "FMTM"), (708, "-60000"), (707, "CASH"), (708, "-80000")]));
    assert_eq!(
        get(report, 58),
        "initial margin 66000, maintenance margin 33000, liquidation price 242, open buy 0, open sell 0"
    );

    // A ResendRequest over the AO and AP gap-fills them: a stale report is worse than none.
    let ap_seq: u64 = get(report, 34).parse().unwrap();
    let (begin, end) = ((ap_seq - 1).to_string(), ap_seq.to_string());
    fix.send("2", &f(&[(7, &begin), (16, &end)])).await;
    let gap_fill = fix.recv_app().await;
    let after = (ap_seq + 1).to_string();
    assert_eq!(
        (gap_fill.msg_type(), get(&gap_fill, 123), get(&gap_fill, 34), get(&gap_fill, 36)),
        ("4", "Y", begin.as_str(), after.as_str())
    );

    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_that_cannot_be_served_are_refused_with_a_reason() {
    let exchange = Exchange::start().await;
    exchange.margin_market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    open_positions(&exchange, &mut fix).await;

    // (the request, PosReqResult, PosReqStatus, Text): no AP follows any of them.
    let cases = [
        (request("r1", "1", &[(55, "ACME/USD")], &[]), "2", "0", "account 1 has no position in ACME/USD"),
        (request("r2", "1", &[(55, "NOPE/USD")], &[]), "2", "0", "unknown symbol NOPE/USD"),
        // Account 2 is the insurance account: alice's key does not own it.
        (request("r3", "2", &[], &[]), "3", "2", "this key does not own account 2"),
        (
            request("r4", "1", &[(724, "1")], &[]),
            "1",
            "2",
            "PosReqType 1 (trades) is not supported: 0 (positions) only",
        ),
        (
            request("r5", "1", &[(724, "99")], &[]),
            "1",
            "2",
            "PosReqType 99 is not a FIX 4.4 value (0 positions, 1 trades, 2 exercises, 3 assignments): 0 (positions) \
             is supported",
        ),
        (
            request("r6", "1", &[(263, "1")], &[]),
            "1",
            "2",
            "SubscriptionRequestType 1 is not supported: 0 (snapshot) only",
        ),
        (request("r7", "1", &[], &[715]), "1", "2", "ClearingBusinessDate (715) is required"),
        (request("r8", "1", &[], &[60]), "1", "2", "TransactTime (60) is required"),
        (request("r9", "alice", &[], &[]), "1", "2", "Account (1) must be the exchange account number"),
        (
            request("r10", "1", &[(581, "3")], &[]),
            "1",
            "2",
            "AccountType 3 is not supported: 1 (the exchange's accounts)",
        ),
    ];
    for (fields, result, status, text) in cases {
        let (ack, reports) = ask(&mut fix, &fields).await;
        let id = &fields[0].1;
        assert_eq!(
            (get(&ack, 710), get(&ack, 728), get(&ack, 729), get(&ack, 727), get(&ack, 58)),
            (id.as_str(), result, status, "0", text),
            "{fields:?}"
        );
        assert!(reports.is_empty());
    }
    // No PosReqID: refused all the same, the AO carrying none.
    let (ack, _) = ask(&mut fix, &request("", "1", &[], &[710])).await;
    assert_eq!((ack.get(710), get(&ack, 728), get(&ack, 58)), (None, "1", "PosReqID (710) is required"));

    // What FIX cannot read is a session-level Reject: no Account (an AO must name
    // one), a ClearingBusinessDate that is no date. The session carries on.
    let seq = fix.send("AN", &request("x1", "1", &[], &[1])).await;
    let reject = fix.recv_app().await;
    assert_eq!(
        (reject.msg_type(), get(&reject, 45), get(&reject, 371), get(&reject, 372), get(&reject, 373)),
        ("3", seq.to_string().as_str(), "1", "AN", "1")
    );
    fix.send("AN", &request("x2", "1", &[(715, "2026-01-02")], &[])).await;
    let reject = fix.recv_app().await;
    assert_eq!((reject.msg_type(), get(&reject, 371), get(&reject, 373)), ("3", "715", "6"));
    let (ack, reports) = ask(&mut fix, &request("p1", "1", &[], &[])).await;
    assert_eq!((get(&ack, 728), reports.len()), ("0", 1));

    // An administrative key may read any account: one without positions, one that does not exist.
    let (mut ops, _) = FixClient::logon(exchange.fix_addr, "OPS", &exchange.admin, false).await;
    let (ack, _) = ask(&mut ops, &request("o1", "2", &[], &[])).await;
    assert_eq!((get(&ack, 728), get(&ack, 729), get(&ack, 58)), ("2", "0", "account 2 has no positions"));
    let (ack, _) = ask(&mut ops, &request("o2", "99", &[], &[])).await;
    assert_eq!((get(&ack, 728), get(&ack, 729), get(&ack, 58)), ("1", "2", "unknown account 99"));
    let (ack, reports) = ask(&mut ops, &request("o3", "0", &[], &[])).await;
    assert_eq!((get(&ack, 728), get(&reports[0], 705)), ("0", "6"));
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn margin_orders_over_fix_refusals_market_buys_and_liquidation() {
    let exchange = Exchange::start().await;
    exchange.margin_market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    open_positions(&exchange, &mut fix).await;

    // The engine's margin refusals: OrdRejReason 99 (FIX has none of its own), the
    // reject's name and code in Text.
    let mut market_with_budget = fut("m1", 1, "1", 1, 0);
    market_with_budget.retain(|(tag, _)| !matches!(tag, 44 | 59));
    market_with_budget.iter_mut().for_each(|(tag, value)| {
        if *tag == 40 {
            *value = "1".into();
        }
    });
    let mut without_budget = market_with_budget.clone();
    without_budget[0].1 = "m2".into();
    market_with_budget.push((152, "5000".into()));
    // Account 0, short 6 with an unrealised loss of 60,000, cannot hold 85 more.
    let cases = [
        (fut("r1", 0, "2", 85, 100), "margin_insufficient (42)"),
        (fut("r2", 1, "1", 995, 10), "position_limit (43)"),
        (market_with_budget, "budget_not_for_margin (45)"),
    ];
    for (fields, text) in cases {
        fix.send("D", &fields).await;
        let refused = fix.recv_app().await;
        assert_eq!(
            (get(&refused, 150), get(&refused, 39), get(&refused, 103), get(&refused, 58)),
            ("8", "8", "99", text),
            "{fields:?}"
        );
    }

    // A market buy in a margin symbol needs no CashOrderQty: it holds margin at the
    // highest price instead. It takes account 0's offer.
    fix.send("D", &fut("s3", 0, "2", 1, 115)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    fix.send("D", &without_budget).await;
    let got = reports(&mut fix, 3).await;
    let fill = &got[&("m2".into(), "F".into())];
    assert_eq!((get(fill, 39), get(fill, 31), get(fill, 32)), ("2", "115", "1"));

    // Account 0 (short 7 now) rests a bid; a mark of 400 liquidates it: the bid is
    // cancelled with the reason in Text.
    fix.send("D", &fut("b3", 0, "1", 1, 50)).await;
    let rested = fix.recv_app().await;
    assert_eq!(get(&rested, 150), "0");
    exchange.set_mark(1, 400).await;
    let cancelled = fix.recv_app().await;
    assert_eq!(
        (get(&cancelled, 11), get(&cancelled, 150), get(&cancelled, 39), get(&cancelled, 151), get(&cancelled, 58)),
        ("b3", "4", "4", "0", "liquidation")
    );
    // Account 0 is flat now, its realised loss reported; a flat position is carried at the mark.
    let (_, reports) = ask(&mut fix, &request("p3", "0", &[], &[])).await;
    let report = &reports[0];
    assert_eq!((get(report, 704), get(report, 705), get(report, 730), get(report, 734)), ("0", "0", "400", "400"));
    let position = position_of(&exchange, 0).await;
    assert_eq!(position.size, 0);
    let amounts: Vec<_> = body(report).into_iter().filter(|(tag, _)| matches!(tag, 707 | 708)).collect();
    let realized = position.realized.to_string();
    assert_eq!(amounts, f(&[(707, "FMTM"), (708, "0"), (707, "CASH"), (708, &realized)]));
    exchange.stop().await;
}

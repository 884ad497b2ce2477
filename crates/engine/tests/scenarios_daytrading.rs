//! The day-trading ledger, command by command (spec `day-trading.md`): each command's
//! effect, records and result; every error text and the order in which checks decide;
//! the 60-second rules at exactly 59,999 and 60,000 ms; expiry release at the user's
//! next command; trigger firing order and leftovers; `DISPLAY_SUMMARY`'s JSON;
//! `DUMPLOG`'s rights; numbering; malformed entries; snapshots and retries.

mod dt_support;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::{DtConfig, DtRequest, QUOTE_PRICE_MAX};
use bourse_engine::{ClientId, Engine, EngineConfig, Outcome, Reject};
use dt_support::{parse, quote, Dt, T0_MS};

/// A user with `dollars` of cash.
fn funded(dt: &mut Dt, user: &str, dollars: &str) {
    dt.cmd(0, &format!("ADD,{user},{dollars}"));
}

#[test]
fn add_creates_the_user_and_adds_cash() {
    let mut dt = Dt::default();
    assert_eq!(dt.cmd(0, "ADD,alice,100.00"), ["userCommand #1", "add alice 100.00 #1", "ok cash 100.00"]);
    assert_eq!(dt.cmd(1, "ADD,alice,0.5"), ["userCommand #2", "add alice 0.50 #2", "ok cash 100.50"]);
    assert_eq!(dt.cash("alice"), ("100.50".into(), "0.00".into()));
    // Bad amounts are logged errors and create no user.
    for (i, bad) in ["0", "0.00", "-5.00", "1.234", "abc", "", "92233720368547758.08", "1e3"].iter().enumerate() {
        let txn = 3 + i as u64;
        assert_eq!(
            dt.cmd(2, &format!("ADD,bob,{bad}")),
            [format!("userCommand #{txn}"), format!("error invalid amount #{txn}"), "failed invalid amount".into()],
            "{bad:?}"
        );
    }
    assert!(dt.engine.day_trading().user_by_name("bob").is_none());
    assert_eq!(dt.cmd(3, "DISPLAY_SUMMARY,bob"), ["userCommand #11", "error unknown user #11", "failed unknown user"]);
    // Cash is bounded by i64 cents: a total that would overflow is an invalid amount.
    dt.cmd(4, "ADD,carol,92233720368547758.00");
    assert_eq!(dt.done(), "ok cash 92233720368547758.00");
    dt.cmd(5, "ADD,carol,1.00");
    assert_eq!(dt.done(), "failed invalid amount");
}

#[test]
fn argument_count_and_userid_are_checked_first() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    let cases = [
        ("ADD,alice", "invalid arguments"),
        ("ADD,alice,1.00,2", "invalid arguments"),
        ("QUOTE,alice", "invalid arguments"),
        ("BUY,alice,S", "invalid arguments"),
        ("COMMIT_BUY", "invalid arguments"),
        ("COMMIT_BUY,alice,x", "invalid arguments"),
        ("CANCEL_SET_SELL,alice", "invalid arguments"),
        ("DISPLAY_SUMMARY,alice,x", "invalid arguments"),
        ("DUMPLOG", "invalid arguments"),
        ("DUMPLOG,alice,f,x", "invalid arguments"),
        // Count before userid, userid before existence, existence before the rest.
        ("BUY,bad user,S", "invalid arguments"),
        ("BUY,bad user,s,-1", "invalid user"),
        ("ADD,bad user,-1", "invalid user"),
        ("BUY,nobody,s,-1", "unknown user"),
        ("QUOTE,,S", "invalid user"),
        (&format!("ADD,{},1.00", "x".repeat(65)), "invalid user"),
        // Symbol before amount, amount before funds.
        ("BUY,alice,s,-1", "invalid symbol"),
        ("BUY,alice,ABCD,1.00", "invalid symbol"),
        ("BUY,alice,S,-1", "invalid amount"),
        ("BUY,alice,S,1000.00", "insufficient funds"),
        // Funds before the price: a BUY that must fail never needs a quote.
        ("BUY,alice,S,50.00", "quote unavailable"),
        ("SET_BUY_TRIGGER,alice,S,0", "invalid amount"),
        ("SET_BUY_TRIGGER,alice,S,1.00", "no buy trigger"),
        ("SET_SELL_TRIGGER,alice,S,1.00", "no sell trigger"),
        ("CANCEL_SET_BUY,alice,S", "no buy trigger"),
        ("CANCEL_SET_SELL,alice,S1", "invalid symbol"),
        ("CANCEL_SET_SELL,alice,S", "no sell trigger"),
        ("SET_BUY_AMOUNT,alice,S,100.01", "insufficient funds"),
        ("SET_SELL_AMOUNT,alice,S,1.00", "insufficient shares"),
        ("SELL,alice,S,1.00", "insufficient shares"),
        ("COMMIT_BUY,alice", "no pending buy"),
        ("CANCEL_BUY,alice", "no pending buy"),
        ("COMMIT_SELL,alice", "no pending sell"),
        ("CANCEL_SELL,alice", "no pending sell"),
        ("QUOTE,alice,S", "quote unavailable"),
    ];
    for (line, error) in cases {
        let records = dt.cmd(10, line);
        let txn = dt.engine.day_trading().transaction_num_max();
        assert_eq!(
            records,
            [format!("userCommand #{txn}"), format!("error {error} #{txn}"), format!("failed {error}")],
            "{line}"
        );
    }
    // No error changed anything.
    assert_eq!(dt.cash("alice"), ("100.00".into(), "0.00".into()));
}

#[test]
fn buy_holds_whole_shares_at_the_quoted_price() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    // The spec's example: $50.00 at $15.00 holds 3 × 15.00.
    assert_eq!(
        dt.cmd_quoted(1_000, "BUY,alice,S,50.00", 1_500),
        [
            "userCommand #2",
            "quoteServer (quote's) #2",
            "reserve alice 45.00 #2",
            "ok pending S 15.00 x3 = 45.00 until +61000"
        ]
    );
    assert_eq!(dt.cash("alice"), ("55.00".into(), "45.00".into()));
    // $10.00 at $15.00 is below the price; the pending BUY stays as it was.
    assert_eq!(
        dt.cmd(2_000, "BUY,alice,S,10.00"),
        ["userCommand #3", "error amount below price #3", "failed amount below price"]
    );
    assert_eq!(dt.cash("alice"), ("55.00".into(), "45.00".into()));
    // Funds count the hold of the BUY being replaced: 55 + 45 ≥ 100.
    assert_eq!(
        dt.cmd(3_000, "BUY,alice,S,100.00"),
        [
            "userCommand #4",
            "release alice 45.00 #4",
            "reserve alice 90.00 #4",
            "ok pending S 15.00 x6 = 90.00 until +63000"
        ]
    );
    assert_eq!(
        dt.cmd(3_500, "BUY,alice,S,100.01"),
        ["userCommand #5", "error insufficient funds #5", "failed insufficient funds"]
    );
    // A quote attached to a failing command is still logged and cached.
    assert_eq!(
        dt.cmd_quoted(4_000, "BUY,alice,T,100.01", 100),
        ["userCommand #6", "quoteServer (quote's) #6", "error insufficient funds #6", "failed insufficient funds"]
    );
    assert_eq!(
        dt.engine.day_trading().quote_cached(bourse_engine::daytrading::Sym::parse("T").unwrap()).unwrap().price,
        100
    );
    assert_eq!(
        dt.cmd(5_000, "COMMIT_BUY,alice"),
        ["userCommand #7", "remove alice 90.00 #7", "ok settled S x6 at 15.00 = 90.00"]
    );
    assert_eq!(dt.cash("alice"), ("10.00".into(), "0.00".into()));
    assert_eq!(dt.shares("alice", "S"), (6, 0));
    assert_eq!(
        dt.cmd(5_001, "COMMIT_BUY,alice"),
        ["userCommand #8", "error no pending buy #8", "failed no pending buy"]
    );
}

#[test]
fn cancel_buy_returns_the_hold() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    dt.cmd_quoted(0, "BUY,alice,S,50.00", 1_500);
    assert_eq!(dt.cmd(1, "CANCEL_BUY,alice"), ["userCommand #3", "release alice 45.00 #3", "ok released S 45.00"]);
    assert_eq!(dt.cash("alice"), ("100.00".into(), "0.00".into()));
}

#[test]
fn pending_orders_and_quotes_live_59999_ms() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    dt.cmd_quoted(1_000, "BUY,alice,S,50.00", 1_500);
    // The quote serves until 59,999 ms after it arrived, not at 60,000.
    assert_eq!(dt.cmd(60_999, "QUOTE,alice,S"), ["userCommand #3", "ok quote S 15.00 at +1000 qst 1700000000000"]);
    funded(&mut dt, "bob", "1.00");
    assert_eq!(dt.cmd(60_999, "QUOTE,bob,S")[1], "ok quote S 15.00 at +1000 qst 1700000000000");
    assert_eq!(
        dt.cmd(61_000, "QUOTE,bob,S"),
        ["userCommand #6", "error quote unavailable #6", "failed quote unavailable"]
    );
    // At 59,999 ms the pending BUY can still be committed.
    let mut late = Dt::default();
    funded(&mut late, "alice", "100.00");
    late.cmd_quoted(1_000, "BUY,alice,S,50.00", 1_500);
    assert_eq!(
        late.cmd(60_999, "COMMIT_BUY,alice"),
        ["userCommand #3", "remove alice 45.00 #3", "ok settled S x3 at 15.00 = 45.00"]
    );
    // At 60,000 ms it has expired: released right after the userCommand, before the checks.
    assert_eq!(
        dt.cmd(61_000, "COMMIT_BUY,alice"),
        [
            "userCommand #7",
            "systemEvent BUY alice S 45.00 #7",
            "release alice 45.00 #7",
            "error no pending buy #7",
            "failed no pending buy"
        ]
    );
    assert_eq!(dt.cash("alice"), ("100.00".into(), "0.00".into()));
}

#[test]
fn an_expired_order_is_released_at_the_users_next_command_whatever_it_is() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    funded(&mut dt, "bob", "100.00");
    dt.cmd_quoted(0, "BUY,alice,S,50.00", 1_500);
    // Another user's commands do not release it.
    dt.cmd(70_000, "DISPLAY_SUMMARY,bob");
    assert_eq!(dt.cash("alice"), ("55.00".into(), "45.00".into()));
    // A failing command of alice's does, and the failure still decides the outcome.
    assert_eq!(
        dt.cmd(70_001, "ADD,alice,-1"),
        [
            "userCommand #5",
            "systemEvent BUY alice S 45.00 #5",
            "release alice 45.00 #5",
            "error invalid amount #5",
            "failed invalid amount"
        ]
    );
    assert_eq!(dt.cash("alice"), ("100.00".into(), "0.00".into()));
}

#[test]
fn sell_reserves_shares_and_commit_pays_the_proceeds() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "1000.00");
    dt.cmd_quoted(0, "BUY,alice,S,100.00", 1_000);
    dt.cmd(1, "COMMIT_BUY,alice");
    dt.cmd_quoted(2, "BUY,alice,T,100.00", 2_000);
    dt.cmd(3, "COMMIT_BUY,alice");
    assert_eq!(dt.shares("alice", "S"), (10, 0));
    // Holding × price must cover the amount: 10 × 12.00 < 130.00.
    assert_eq!(
        dt.cmd_quoted(4, "SELL,alice,S,130.00", 1_200)[2..],
        ["error insufficient shares #6", "failed insufficient shares"]
    );
    assert_eq!(
        dt.cmd(5, "SELL,alice,S,11.00"),
        ["userCommand #7", "error amount below price #7", "failed amount below price"]
    );
    assert_eq!(dt.cmd(6, "SELL,alice,S,50.00"), ["userCommand #8", "ok pending S 12.00 x4 = 48.00 until +60006"]);
    assert_eq!(dt.shares("alice", "S"), (6, 4));
    // A replacing SELL of the same symbol counts the replaced shares: (6 + 4) × 12.00.
    assert_eq!(dt.cmd(7, "SELL,alice,S,120.00"), ["userCommand #9", "ok pending S 12.00 x10 = 120.00 until +60007"]);
    assert_eq!(dt.shares("alice", "S"), (0, 10));
    // One of another symbol releases them and reserves its own.
    dt.cmd(8, "SELL,alice,T,40.00");
    assert_eq!(dt.done(), "ok pending T 20.00 x2 = 40.00 until +60008");
    assert_eq!((dt.shares("alice", "S"), dt.shares("alice", "T")), ((10, 0), (3, 2)));
    assert_eq!(dt.cmd(9, "CANCEL_SELL,alice"), ["userCommand #11", "ok released T x2"]);
    dt.cmd(10, "SELL,alice,S,36.00");
    assert_eq!(
        dt.cmd(11, "COMMIT_SELL,alice"),
        ["userCommand #13", "add alice 36.00 #13", "ok settled S x3 at 12.00 = 36.00"]
    );
    assert_eq!(dt.shares("alice", "S"), (7, 0));
    assert_eq!(dt.cash("alice"), ("836.00".into(), "0.00".into()));
    // An expired SELL is released with a systemEvent only (shares are not cash).
    dt.cmd(12, "SELL,alice,S,24.00");
    assert_eq!(
        dt.cmd(60_012, "CANCEL_SELL,alice"),
        [
            "userCommand #15",
            "systemEvent SELL alice S 24.00 #15",
            "error no pending sell #15",
            "failed no pending sell"
        ]
    );
    assert_eq!(dt.shares("alice", "S"), (7, 0));
}

#[test]
fn buy_triggers_reserve_fire_at_the_quote_and_refund_the_leftover() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    assert_eq!(
        dt.cmd(0, "SET_BUY_AMOUNT,alice,S,50.00"),
        ["userCommand #2", "reserve alice 50.00 #2", "ok amount S 50.00"]
    );
    // A replacing amount releases the old reserve first.
    assert_eq!(
        dt.cmd(1, "SET_BUY_AMOUNT,alice,S,40.00"),
        ["userCommand #3", "release alice 50.00 #3", "reserve alice 40.00 #3", "ok amount S 40.00"]
    );
    assert_eq!(dt.cmd(2, "SET_BUY_AMOUNT,alice,S,100.01")[1], "error insufficient funds #4");
    assert_eq!(dt.cmd(3, "SET_BUY_TRIGGER,alice,S,12.00"), ["userCommand #5", "ok buy trigger S 40.00 at 12.00"]);
    // A quote above the trigger price: nothing.
    assert_eq!(
        dt.cmd_quoted(4, "QUOTE,alice,S", 1_300),
        ["userCommand #6", "quoteServer (quote's) #6", "ok quote S 13.00 at +4 qst 1700000000000"]
    );
    // At or below it fires at the quoted price, after the command's own records, in the
    // name of the command that armed it: 3 × 11.00 spent, 7.00 back.
    assert_eq!(
        dt.cmd_quoted(5, "QUOTE,alice,S", 1_100),
        [
            "userCommand #7",
            "quoteServer (quote's) #7",
            "systemEvent SET_BUY_TRIGGER alice S 33.00 #5",
            "remove alice 33.00 #5",
            "release alice 7.00 #5",
            "ok quote S 11.00 at +5 qst 1700000000000"
        ]
    );
    assert_eq!(dt.cash("alice"), ("67.00".into(), "0.00".into()));
    assert_eq!(dt.shares("alice", "S"), (3, 0));
    assert_eq!(dt.cmd(6, "CANCEL_SET_BUY,alice,S")[1], "error no buy trigger #8");
    // With a price above the reserve it stays armed (0 shares), and no leftover record
    // when the reserve is spent exactly.
    dt.cmd(7, "SET_BUY_AMOUNT,alice,S,10.00");
    dt.cmd(8, "SET_BUY_TRIGGER,alice,S,20.00");
    assert_eq!(dt.cmd_quoted(9, "QUOTE,alice,S", 1_500).len(), 3);
    assert_eq!(dt.cash("alice"), ("57.00".into(), "10.00".into()));
    assert_eq!(
        dt.cmd_quoted(10, "QUOTE,alice,S", 500)[2..4],
        ["systemEvent SET_BUY_TRIGGER alice S 10.00 #10", "remove alice 10.00 #10"]
    );
    assert_eq!(dt.cash("alice"), ("57.00".into(), "0.00".into()));
    assert_eq!(dt.shares("alice", "S"), (5, 0));
}

#[test]
fn cancel_set_buy_returns_the_reserve() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    dt.cmd(0, "SET_BUY_AMOUNT,alice,S,50.00");
    dt.cmd(1, "SET_BUY_TRIGGER,alice,S,10.00");
    assert_eq!(
        dt.cmd(2, "CANCEL_SET_BUY,alice,S"),
        ["userCommand #4", "release alice 50.00 #4", "ok released S 50.00"]
    );
    assert_eq!(dt.cash("alice"), ("100.00".into(), "0.00".into()));
    // Cancelled, it no longer fires.
    assert_eq!(dt.cmd_quoted(3, "QUOTE,alice,S", 100).len(), 3);
}

#[test]
fn sell_triggers_reserve_shares_once_priced_and_fire_at_or_above() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "1000.00");
    dt.cmd_quoted(0, "BUY,alice,S,100.00", 1_000);
    dt.cmd(1, "COMMIT_BUY,alice");
    // An amount alone reserves nothing. (After the BUY's quote expired, so that arming
    // does not fire against it.)
    assert_eq!(dt.cmd(60002, "SET_SELL_AMOUNT,alice,S,95.00"), ["userCommand #4", "ok amount S 95.00"]);
    assert_eq!(dt.shares("alice", "S"), (10, 0));
    assert_eq!(dt.cmd(60003, "SET_SELL_TRIGGER,alice,S,100.00")[1], "error amount below price #5");
    // ⌊95.00 / 9.00⌋ = 10 ≤ 10 held; 95.00 / 8.00 = 11 is too many.
    assert_eq!(dt.cmd(60004, "SET_SELL_TRIGGER,alice,S,8.00")[1], "error insufficient shares #6");
    assert_eq!(
        dt.cmd(60005, "SET_SELL_TRIGGER,alice,S,9.00"),
        ["userCommand #7", "ok sell trigger S 95.00 at 9.00 x10"]
    );
    assert_eq!(dt.shares("alice", "S"), (0, 10));
    // A new amount on a priced trigger re-reserves: ⌊50.00 / 9.00⌋ = 5.
    assert_eq!(dt.cmd(60006, "SET_SELL_AMOUNT,alice,S,50.00"), ["userCommand #8", "ok amount S 50.00"]);
    assert_eq!(dt.shares("alice", "S"), (5, 5));
    assert_eq!(dt.cmd(60007, "SET_SELL_AMOUNT,alice,S,5.00")[1], "error amount below price #9");
    assert_eq!(dt.cmd(60008, "SET_SELL_AMOUNT,alice,S,100.00")[1], "error insufficient shares #10");
    // Below the trigger price nothing; at or above it sells the reserved shares at p.
    assert_eq!(dt.cmd_quoted(60009, "QUOTE,alice,S", 899).len(), 3);
    assert_eq!(
        dt.cmd_quoted(60010, "QUOTE,alice,S", 950),
        [
            "userCommand #12",
            "quoteServer (quote's) #12",
            "systemEvent SET_SELL_TRIGGER alice S 47.50 #8",
            "add alice 47.50 #8",
            "ok quote S 9.50 at +60010 qst 1700000000000"
        ]
    );
    assert_eq!(dt.shares("alice", "S"), (5, 0));
    assert_eq!(dt.cash("alice"), ("947.50".into(), "0.00".into()));
    // CANCEL_SET_SELL returns the reserved shares.
    dt.cmd(60011, "SET_SELL_AMOUNT,alice,S,20.00");
    dt.cmd(60012, "SET_SELL_TRIGGER,alice,S,20.00");
    assert_eq!(dt.shares("alice", "S"), (4, 1));
    assert_eq!(dt.cmd(60013, "CANCEL_SET_SELL,alice,S"), ["userCommand #15", "ok released S x1"]);
    assert_eq!(dt.shares("alice", "S"), (5, 0));
}

#[test]
fn triggers_fire_in_arming_order_and_at_arming_against_a_valid_quote() {
    let mut dt = Dt::default();
    for user in ["ann", "ben", "cid"] {
        funded(&mut dt, user, "100.00");
    }
    dt.cmd(0, "SET_BUY_AMOUNT,ann,S,30.00"); // #4
    dt.cmd(0, "SET_BUY_TRIGGER,ann,S,10.00"); // #5
    dt.cmd(0, "SET_BUY_AMOUNT,ben,S,30.00"); // #6
    dt.cmd(0, "SET_BUY_TRIGGER,ben,S,10.00"); // #7
    dt.cmd(0, "SET_BUY_AMOUNT,cid,S,30.00"); // #8
    dt.cmd(0, "SET_BUY_TRIGGER,cid,S,10.00"); // #9
                                              // Ann sets her amount again: she goes to the back of the arming order.
    dt.cmd(0, "SET_BUY_AMOUNT,ann,S,20.00"); // #10
    let records = dt.poll(1_000, "S", 900, 0);
    let fired: Vec<&String> = records.iter().filter(|r| r.starts_with("systemEvent")).collect();
    assert_eq!(
        fired,
        [
            "systemEvent SET_BUY_TRIGGER ben S 27.00 #7",
            "systemEvent SET_BUY_TRIGGER cid S 27.00 #9",
            "systemEvent SET_BUY_TRIGGER ann S 18.00 #10"
        ]
    );
    // The poller's quoteServer record names the earliest-armed trigger (ben, #7).
    assert_eq!(records[0], "quoteServer ben #7");
    // A poller quote for a symbol without armed triggers keeps its own number (and
    // the numbering goes on after it).
    assert_eq!(dt.poll(1_001, "T", 900, 42), ["quoteServer (quote's) #42"]);
    // Arming against the cached quote (still valid) fires at once.
    dt.cmd(2_000, "SET_BUY_AMOUNT,ann,S,30.00");
    assert_eq!(
        dt.cmd(2_001, "SET_BUY_TRIGGER,ann,S,9.00"),
        [
            "userCommand #44",
            "systemEvent SET_BUY_TRIGGER ann S 27.00 #44",
            "remove ann 27.00 #44",
            "release ann 3.00 #44",
            "ok buy trigger S 30.00 at 9.00"
        ]
    );
    // Not against an expired one (arrival 1,000 + 60,000).
    dt.cmd(61_000, "SET_BUY_AMOUNT,ben,S,30.00");
    assert_eq!(dt.cmd(61_001, "SET_BUY_TRIGGER,ben,S,9.00"), ["userCommand #46", "ok buy trigger S 30.00 at 9.00"]);
}

#[test]
fn display_summary_is_the_specs_json() {
    let mut dt = Dt::default();
    funded(&mut dt, "oY01WVirLr", "1000.00");
    dt.cmd_quoted(0, "BUY,oY01WVirLr,XYZ,100.00", 500);
    dt.cmd(1, "COMMIT_BUY,oY01WVirLr");
    dt.cmd(2, "SET_SELL_AMOUNT,oY01WVirLr,XYZ,200.00");
    dt.cmd(3, "SET_SELL_TRIGGER,oY01WVirLr,XYZ,12.50");
    dt.cmd(4, "SET_BUY_AMOUNT,oY01WVirLr,ABC,500.00");
    dt.cmd_quoted(5, "BUY,oY01WVirLr,S,280.00", 9_211);
    dt.cmd(6, "CANCEL_SELL,oY01WVirLr");
    let records = dt.cmd(7, "DISPLAY_SUMMARY,oY01WVirLr");
    // It writes only its userCommand.
    assert_eq!(records, ["userCommand #9", "ok summary"]);
    let json = dt.engine.day_trading().summary_json("oY01WVirLr", 9, T0_MS + 7).unwrap();
    assert_eq!(
        json,
        concat!(
            r#"{"user":"oY01WVirLr","transactionNum":9,"asOf":1732270000007,"#,
            r#""cash":{"available":"123.67","reserved":"776.33"},"#,
            r#""holdings":[{"symbol":"XYZ","available":4,"reserved":16}],"#,
            r#""pendingBuy":{"symbol":"S","price":"92.11","shares":3,"cost":"276.33","expiresAt":1732270060005},"#,
            r#""pendingSell":null,"#,
            r#""buyTriggers":[{"symbol":"ABC","amount":"500.00","triggerPrice":null}],"#,
            r#""sellTriggers":[{"symbol":"XYZ","amount":"200.00","triggerPrice":"12.50","reservedShares":16}],"#,
            r#""history":{"total":8,"recent":["#,
            r#"{"transactionNum":8,"stamp":1732270000006,"command":"CANCEL_SELL","outcome":"no pending sell"},"#,
            r#"{"transactionNum":7,"stamp":1732270000005,"command":"BUY","outcome":"ok"},"#,
            r#"{"transactionNum":6,"stamp":1732270000004,"command":"SET_BUY_AMOUNT","outcome":"ok"},"#,
            r#"{"transactionNum":5,"stamp":1732270000003,"command":"SET_SELL_TRIGGER","outcome":"ok"},"#,
            r#"{"transactionNum":4,"stamp":1732270000002,"command":"SET_SELL_AMOUNT","outcome":"ok"},"#,
            r#"{"transactionNum":3,"stamp":1732270000001,"command":"COMMIT_BUY","outcome":"ok"},"#,
            r#"{"transactionNum":2,"stamp":1732270000000,"command":"BUY","outcome":"ok"},"#,
            r#"{"transactionNum":1,"stamp":1732270000000,"command":"ADD","outcome":"ok"}]}}"#
        )
    );
    // The history shows at most summary_history (10) commands before the summary.
    for i in 0..12 {
        dt.cmd(8 + i, "DISPLAY_SUMMARY,oY01WVirLr");
    }
    let txn = dt.engine.day_trading().transaction_num_max();
    let json = dt.engine.day_trading().summary_json("oY01WVirLr", txn, T0_MS + 20).unwrap();
    assert!(json.contains(r#""history":{"total":20,"recent":[{"transactionNum":20,"#), "{json}");
    assert_eq!(json.matches("\"outcome\"").count(), 10);
}

#[test]
fn dumplog_needs_the_right_and_a_good_file_name() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "1.00");
    funded(&mut dt, "bob", "1.00");
    // Global: administrators only, then the file name.
    assert_eq!(
        dt.cmd_full(0, 3, "DUMPLOG,./testLOG", None, false)[1..],
        ["error not authorized #3", "failed not authorized"]
    );
    assert_eq!(
        dt.cmd_full(0, 4, "DUMPLOG,../x", None, true)[1..],
        ["error invalid filename #4", "failed invalid filename"]
    );
    assert_eq!(dt.cmd_full(0, 5, "DUMPLOG,./testLOG", None, true), ["userCommand #5", "ok dump through record 9"]);
    // One user's: that user (the caller) or an administrator.
    let mut other = parse("DUMPLOG,alice,alice.xml");
    other.caller = "bob".into();
    assert_eq!(dt.run_command(0, other)[1], "error not authorized #6");
    assert_eq!(
        dt.cmd_full(0, 7, "DUMPLOG,alice,alice.xml", None, false),
        ["userCommand #7", "ok dump through record 12"]
    );
    assert_eq!(dt.cmd_full(0, 8, "DUMPLOG,bob,", None, true)[1], "error invalid filename #8");
    assert_eq!(dt.cmd_full(0, 9, "DUMPLOG,carl,x", None, true)[1], "error unknown user #9");
}

#[test]
fn commands_without_a_number_get_one_more_than_the_highest_seen() {
    let mut dt = Dt::default();
    dt.cmd_full(0, 41, "ADD,alice,1.00", None, false);
    assert_eq!(dt.cmd_full(0, 0, "ADD,alice,1.00", None, false)[0], "userCommand #42");
    dt.cmd_full(0, 7, "ADD,alice,1.00", None, false);
    assert_eq!(dt.cmd_full(0, 0, "ADD,alice,1.00", None, false)[0], "userCommand #43");
}

#[test]
fn malformed_entries_are_refused_and_change_nothing() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    let before = format!("{:?}", dt.engine.day_trading());
    let mut bad_quotes = Vec::new();
    for change in [
        (|q: &mut bourse_engine::daytrading::DtQuote| q.price = 0) as fn(&mut _),
        |q| q.price = QUOTE_PRICE_MAX + 1,
        |q| q.symbol = bourse_engine::daytrading::Sym([b'a', 0, 0]),
        |q| q.cryptokey = "\u{1}".into(),
        |q| q.userid = "x".repeat(65),
    ] {
        let mut q = quote("S", 100, "alice");
        change(&mut q);
        bad_quotes.push(q);
    }
    for q in bad_quotes {
        let mut command = parse("BUY,alice,S,50.00");
        command.quote = Some(q.clone());
        for request in [DtRequest::Command(command), DtRequest::Quote(q)] {
            let applied = dt.apply(0, request);
            assert_eq!(applied.outcome, Outcome::Rejected(Reject::DayTradingInvalid));
        }
    }
    let mut long = parse("ADD,alice,1.00");
    long.args.push("x".repeat(600));
    assert_eq!(dt.apply(0, DtRequest::Command(long)).outcome, Outcome::Rejected(Reject::DayTradingInvalid));
    let mut many = parse("ADD,alice,1.00");
    many.args.extend((0..8).map(|i| i.to_string()));
    assert_eq!(dt.apply(0, DtRequest::Command(many)).outcome, Outcome::Rejected(Reject::DayTradingInvalid));
    // The ledger did not move (the engine's exactly-once record did: it remembers the
    // rejections).
    assert_eq!(format!("{:?}", dt.engine.day_trading()), before);
}

#[test]
fn the_user_bound_refuses_a_new_user_only() {
    let config =
        EngineConfig { day_trading: DtConfig { users_max: 1, ..DtConfig::default() }, ..EngineConfig::default() };
    let mut dt = Dt::with_config(config);
    funded(&mut dt, "alice", "1.00");
    let before = dt.engine.state_hash();
    let applied = dt.apply(0, DtRequest::Command(parse("ADD,bob,1.00")));
    assert_eq!(applied.outcome, Outcome::Rejected(Reject::LimitReached));
    // Only the exactly-once record moved.
    let mut fresh = Dt::with_config(config);
    funded(&mut fresh, "alice", "1.00");
    assert_eq!(fresh.engine.day_trading().audit_records(), dt.engine.day_trading().audit_records());
    assert_ne!(before, [0; 32]);
    // An ADD of bob that fails anyway is logged as usual.
    assert_eq!(dt.cmd(0, "ADD,bob,-1")[1], "error invalid amount #2");
    funded(&mut dt, "alice", "1.00");
    assert_eq!(dt.done(), "ok cash 2.00");
}

#[test]
fn snapshots_restore_the_ledger_and_retries_get_the_original_outcome() {
    let mut dt = Dt::default();
    funded(&mut dt, "alice", "100.00");
    dt.cmd_quoted(0, "BUY,alice,S,50.00", 1_500);
    dt.cmd(1, "SET_BUY_AMOUNT,alice,T,20.00");
    dt.cmd(2, "SET_BUY_TRIGGER,alice,T,5.00");
    let bytes = dt.engine.snapshot();
    let restored = Engine::restore(&bytes).expect("restores");
    restored.check_invariants();
    assert_eq!(restored.state_hash(), dt.engine.state_hash());
    // The restored engine continues exactly as the original.
    let mut copy = Dt { engine: restored, seq: dt.seq, events: Vec::new() };
    for d in [&mut dt, &mut copy] {
        d.poll(3, "T", 400, 0);
    }
    assert_eq!(dt.rendered(), copy.rendered());
    assert_eq!(dt.engine.state_hash(), copy.engine.state_hash());
    // A retried (client, seq) is answered with its first outcome and changes nothing.
    let command = Command {
        client: ClientId(7),
        seq: dt.seq,
        ts: (T0_MS + 4) * 1_000_000,
        body: CommandBody::DayTrading(Box::new(DtRequest::Command(parse("ADD,alice,1.00")))),
    };
    let hash = dt.engine.state_hash();
    let applied = dt.engine.apply(&command, &mut Vec::new());
    assert!(applied.duplicate);
    assert_eq!(dt.engine.state_hash(), hash);
    // The user's recent results answer a retried command.
    let item = dt.engine.day_trading().recent_result("alice", 2).expect("the BUY");
    assert_eq!(dt_support::render_return(item.ret), "pending S 15.00 x3 = 45.00 until +60000");
}

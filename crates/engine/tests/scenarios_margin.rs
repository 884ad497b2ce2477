//! Margin trading scenarios with exact positions, balances and events: opening and
//! reducing with realised P&L, the pre-trade margin checks, liquidation into the book
//! and to the insurance account, a shortfall paid by the insurance account or left as
//! bad debt, and a snapshot that keeps positions and the liquidation index. Run
//! against both books; the harness checks every invariant (conservation with position
//! costs and bad debt, the index's keys) after every command.
//!
//! `FUT/USD`: tick 1, lot 1, prices 1..=10,000, multiplier 10 (a contract at 100 is
//! worth 1,000 cents), initial margin 10 %, maintenance 5 %, limit 1,000, operator's
//! mark, insurance account 3. No fees unless a scenario sets them.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{
    CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderKind, OrderRequest, SymbolSpec, Tif,
};
use bourse_engine::{AccountId, Amount, AssetId, CancelReason, Engine, Event, Px, Qty, Reject, Side, SymbolId};
use common::Harness;

both_books!(
    a_reducing_trade_realises_its_pnl_at_the_average_price,
    orders_need_free_margin_unless_they_only_reduce,
    a_mark_below_maintenance_liquidates_into_the_book,
    what_the_book_cannot_take_passes_to_the_insurance_account,
    a_loss_beyond_cash_is_paid_by_the_insurance_account_or_left_as_bad_debt,
    a_restored_snapshot_keeps_positions_and_liquidates_alike,
    the_close_of_the_day_settles_variation_margin_at_the_mark,
);

const USD: AssetId = AssetId(0);
const FUT: SymbolId = SymbolId(0);
const A: AccountId = AccountId(0);
const B: AccountId = AccountId(1);
const C: AccountId = AccountId(2);
const INSURANCE: AccountId = AccountId(3);

fn setup<B: Book>(deposits: [i64; 4], fee_taker: i64) -> Harness<B> {
    let mut h = Harness::<B>::default();
    h.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
    h.ok(CommandBody::CreateAsset { name: "FUT".into(), decimals: 0 });
    for _ in 0..4 {
        h.ok(CommandBody::CreateAccount);
    }
    h.ok(CommandBody::CreateMarginSymbol(Box::new(MarginSymbol {
        spec: SymbolSpec {
            name: "FUT/USD".into(),
            base: AssetId(1),
            quote: USD,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(10),
            px_max: Px(10_000),
            fee_maker: Amount(0),
            fee_taker: Amount(fee_taker),
            policy: MatchPolicy::Fifo,
        },
        margin: MarginSpec {
            initial_bp: 1_000,
            maintenance_bp: 500,
            multiplier: 10,
            position_limit: Qty(1_000),
            mark: MarkSource::Operator,
            insurance: INSURANCE,
        },
    })));
    for (account, amount) in deposits.into_iter().enumerate() {
        if amount > 0 {
            h.ok(CommandBody::Deposit { account: AccountId(account as u32), asset: USD, amount: Amount(amount) });
        }
    }
    h
}

fn limit(account: AccountId, side: Side, px: i64, qty: i64, tif: Tif) -> CommandBody {
    CommandBody::Place(OrderRequest::limit(account, FUT, side, Px(px), Qty(qty), tif))
}

fn mark(px: i64) -> CommandBody {
    CommandBody::SetMark { symbol: FUT, px: Px(px) }
}

/// `(size, cost, realised)` of a position; zeros when there is none.
fn position<B: Book>(engine: &Engine<B>, account: AccountId) -> (i64, i64, i64) {
    engine
        .positions(account)
        .iter()
        .find(|(sym, _)| *sym == FUT)
        .map_or((0, 0, 0), |(_, p)| (p.size, p.cost, p.realized))
}

/// A long 10 at 100 for A (cost 10,000) against B's short, both holds released.
fn a_long_ten_at_100<B: Book>(h: &mut Harness<B>) {
    h.ok(limit(B, Side::Sell, 100, 10, Tif::Gtc));
    h.ok(limit(A, Side::Buy, 100, 10, Tif::Gtc));
    assert_eq!(position(&h.engine, A), (10, 10_000, 0));
    assert_eq!(position(&h.engine, B), (-10, -10_000, 0));
}

fn a_reducing_trade_realises_its_pnl_at_the_average_price<B: Book>() {
    let mut h = setup::<B>([10_000, 10_000, 10_000, 0], 0);
    // B's resting sell holds its initial margin: 10 % of 10 × 100 × 10.
    h.ok(limit(B, Side::Sell, 100, 10, Tif::Gtc));
    assert_eq!(h.balance_of(B, USD), (9_000, 1_000));
    h.ok(limit(A, Side::Buy, 100, 10, Tif::Gtc));
    assert_eq!(h.balance_of(A, USD), (10_000, 0), "the fill released the whole hold");
    assert_eq!(h.balance_of(B, USD), (10_000, 0));
    assert!(h.events.contains(&Event::Position {
        account: A,
        symbol: FUT,
        size: Qty(10),
        cost: Amount(10_000),
        realized: Amount(0)
    }));
    // A second buy at 110: the average is (10,000 + 11,000) / 20 contracts = 105.
    h.ok(limit(B, Side::Sell, 110, 10, Tif::Gtc));
    h.ok(limit(A, Side::Buy, 110, 10, Tif::Gtc));
    assert_eq!(position(&h.engine, A), (20, 21_000, 0));
    // C buys 4 from A at 120: A realises 4 × 120 × 10 − 21,000 × 4 / 20 = 4,800 − 4,200.
    h.ok(limit(C, Side::Buy, 120, 4, Tif::Gtc));
    h.ok(limit(A, Side::Sell, 120, 4, Tif::Gtc));
    assert_eq!(position(&h.engine, A), (16, 16_800, 600));
    assert_eq!(h.balance_of(A, USD), (10_600, 0));
    assert_eq!(position(&h.engine, C), (4, 4_800, 0));
    // B buys its whole short back at 90 from A (16) and C (4): B realises 21,000 − 18,000.
    h.ok(limit(A, Side::Sell, 90, 16, Tif::Gtc));
    h.ok(limit(C, Side::Sell, 90, 4, Tif::Gtc));
    h.ok(limit(B, Side::Buy, 90, 20, Tif::Gtc));
    assert_eq!(position(&h.engine, B), (0, 0, 3_000));
    assert_eq!(h.balance_of(B, USD), (13_000, 0));
    // A sold 16 at 90 against cost 16,800: −2,400, on top of the 600.
    assert_eq!(position(&h.engine, A), (0, 0, -1_800));
    assert_eq!(h.balance_of(A, USD), (8_200, 0));
    // C bought 4 at 120 and sold them at 90: −1,200.
    assert_eq!(position(&h.engine, C), (0, 0, -1_200));
    assert_eq!(h.balance_of(C, USD), (8_800, 0));
}

fn orders_need_free_margin_unless_they_only_reduce<B: Book>() {
    let mut h = setup::<B>([1_500, 10_000, 10_000, 0], 0);
    a_long_ten_at_100(&mut h);
    // At mark 96, A's equity is 1,500 − 400 and its position needs 960 of initial
    // margin: 5 more contracts (hold 500) would leave 1,100 − 500 < 960.
    h.ok(mark(96));
    h.reject(limit(A, Side::Buy, 100, 5, Tif::Gtc), Reject::MarginInsufficient);
    h.ok(limit(A, Side::Buy, 100, 1, Tif::Gtc));
    // A sell that can only reduce passes on its cash alone.
    h.ok(limit(A, Side::Sell, 120, 5, Tif::Gtc));
    // The limit counts open orders as filled: C's 985 bid and 16 more is past 1,000.
    h.ok(limit(C, Side::Buy, 10, 985, Tif::Gtc));
    h.reject(limit(C, Side::Buy, 10, 16, Tif::Gtc), Reject::PositionLimit);
    h.reject(
        CommandBody::Place(OrderRequest::market(A, FUT, Side::Buy, Qty(1), Some(Amount(1_000)))),
        Reject::BudgetNotForMargin,
    );
    // A withdrawal may not take the margin the position needs.
    let (available, _) = h.balance_of(A, USD);
    h.reject(CommandBody::Withdraw { account: A, asset: USD, amount: Amount(available) }, Reject::MarginInsufficient);
    h.reject(CommandBody::SetMark { symbol: SymbolId(9), px: Px(100) }, Reject::SymbolUnknown);
    h.reject(mark(10_001), Reject::PxOutOfBounds);
}

fn a_mark_below_maintenance_liquidates_into_the_book<B: Book>() {
    let mut h = setup::<B>([1_000, 10_000, 10_000, 5_000], 0);
    a_long_ten_at_100(&mut h);
    assert_eq!(h.balance_of(A, USD), (1_000, 0));
    h.ok(limit(C, Side::Buy, 94, 10, Tif::Gtc));
    // At 95 A's equity (1,000 − 500) still covers maintenance (475).
    h.ok(mark(95));
    assert_eq!(position(&h.engine, A), (10, 10_000, 0));
    // At 94, 400 < 470: A's position is sold into C's bid at 94, within the
    // bankruptcy price 90 (where 1,000 − 10 × (100 − p) × 10 reaches 0).
    h.ok(mark(94));
    assert!(h.events.contains(&Event::Liquidated { account: A, asset: USD }));
    let liquidation = h.events.iter().find_map(|e| match e {
        Event::Accepted { order, account: A, kind: OrderKind::Limit { px }, qty, side: Side::Sell, .. } => {
            Some((*order, *px, *qty))
        }
        _ => None,
    });
    let (order, px, qty) = liquidation.expect("a liquidation order");
    assert_eq!((px, qty), (Px(90), Qty(10)));
    assert!(h.trades().iter().any(|&(_, taker, p, q)| taker == order && p == 94 && q == 10));
    assert_eq!(position(&h.engine, A), (0, 0, -600));
    assert_eq!(h.balance_of(A, USD), (400, 0));
    assert_eq!(position(&h.engine, C), (10, 9_400, 0));
    assert_eq!(h.balance_of(C, USD), (10_000, 0));
    assert_eq!(h.balance_of(INSURANCE, USD), (5_000, 0), "the book took it all");
}

fn what_the_book_cannot_take_passes_to_the_insurance_account<B: Book>() {
    let mut h = setup::<B>([1_000, 10_000, 10_000, 5_000], 0);
    a_long_ten_at_100(&mut h);
    // A resting sell of A's own is cancelled first; C's bid takes 3 at 92.
    h.ok(limit(A, Side::Sell, 150, 2, Tif::Gtc));
    h.ok(limit(C, Side::Buy, 92, 3, Tif::Gtc));
    h.ok(mark(80));
    assert!(h.events.contains(&Event::Liquidated { account: A, asset: USD }));
    assert!(h
        .events
        .iter()
        .any(|e| matches!(e, Event::Cancelled { reason: CancelReason::Liquidation, qty_cancelled: Qty(2), .. })));
    // 3 at 92 realise 3 × 920 − 3,000 = −240; the other 7 go to the insurance account
    // at the bankruptcy price 90: 7 × 900 − 7,000 = −700. A ends with 1,000 − 940.
    assert!(h.events.contains(&Event::PositionTransferred {
        symbol: FUT,
        from: A,
        to: INSURANCE,
        qty: Qty(7),
        px: Px(90)
    }));
    assert_eq!(position(&h.engine, A), (0, 0, -940));
    assert_eq!(h.balance_of(A, USD), (60, 0));
    assert_eq!(position(&h.engine, INSURANCE), (7, 6_300, 0));
    assert_eq!(position(&h.engine, C), (3, 2_760, 0));
    // The insurance account is never liquidated, however far the mark goes.
    h.ok(mark(10));
    assert_eq!(position(&h.engine, INSURANCE), (7, 6_300, 0));
}

fn a_loss_beyond_cash_is_paid_by_the_insurance_account_or_left_as_bad_debt<B: Book>() {
    for (fund, covered, bad_debt) in [(5_000, 500, 0), (200, 200, 300)] {
        let mut h = setup::<B>([1_000, 10_000, 10_000, fund], 0);
        a_long_ten_at_100(&mut h);
        h.ok(mark(100));
        // A sells its 10 into C's bid at 85, far below the mark: −1,500 on 1,000 of cash.
        h.ok(limit(C, Side::Buy, 85, 10, Tif::Gtc));
        h.ok(limit(A, Side::Sell, 85, 10, Tif::Gtc));
        assert!(h.events.contains(&Event::Shortfall {
            account: A,
            asset: USD,
            covered: Amount(covered),
            bad_debt: Amount(bad_debt)
        }));
        assert_eq!(h.balance_of(A, USD), (0, 0));
        assert_eq!(h.balance_of(INSURANCE, USD), (fund - covered, 0));
        assert_eq!(h.engine.asset_info(USD).unwrap().bad_debt, Amount(bad_debt));
    }
}

fn a_restored_snapshot_keeps_positions_and_liquidates_alike<B: Book>() {
    let mut h = setup::<B>([1_100, 10_000, 10_000, 5_000], 2);
    a_long_ten_at_100(&mut h);
    h.ok(limit(C, Side::Buy, 93, 4, Tif::Gtc));
    let mut restored = Harness::<B> {
        engine: Engine::restore(&h.engine.snapshot()).expect("restores"),
        seq: h.seq,
        ts: h.ts,
        ..Harness::default()
    };
    assert_eq!(restored.engine.state_hash(), h.engine.state_hash());
    for account in [A, B, C] {
        assert_eq!(position(&restored.engine, account), position(&h.engine, account));
    }
    h.ok(mark(80));
    restored.ok(mark(80));
    assert_eq!(h.events, restored.events);
    assert!(h.events.contains(&Event::Liquidated { account: A, asset: USD }));
    assert_eq!(restored.engine.state_hash(), h.engine.state_hash());
}

fn the_close_of_the_day_settles_variation_margin_at_the_mark<B: Book>() {
    let mut h = setup::<B>([10_000, 10_000, 10_000, 0], 0);
    a_long_ten_at_100(&mut h);
    h.ok(limit(C, Side::Buy, 104, 3, Tif::Gtc));
    h.ok(limit(A, Side::Sell, 104, 3, Tif::Day));
    // A: 7 long (cost 7,000, realised 120), B: 10 short (cost −10,000), C: 3 long (3,120).
    assert_eq!(position(&h.engine, A), (7, 7_000, 120));
    h.ok(limit(C, Side::Buy, 50, 1, Tif::Day));
    h.ok(mark(110));
    assert_eq!(h.ok(CommandBody::CloseDay), 1, "the Day bid expired");
    // Each pays or receives size × 110 × 10 − cost; the costs then sum to zero.
    for (account, size, variation) in [(A, 7, 700), (B, -10, -1_000), (C, 3, 180)] {
        assert!(h.events.contains(&Event::Settled { account, symbol: FUT, px: Px(110), variation: Amount(variation) }));
        assert_eq!(position(&h.engine, account).1, size * 1_100);
    }
    assert!(h.events.contains(&Event::Settlement { symbol: FUT, px: Px(110), open_interest: Qty(10) }));
    assert_eq!(h.balance_of(A, USD), (10_000 + 120 + 700, 0));
    assert_eq!(h.balance_of(B, USD), (9_000, 0));
    assert_eq!(h.balance_of(C, USD), (10_000 + 180, 0));
    // Settling again at the same mark moves nothing.
    h.ok(CommandBody::CloseDay);
    assert!(h.events.contains(&Event::Settled { account: A, symbol: FUT, px: Px(110), variation: Amount(0) }));
    assert_eq!(h.balance_of(A, USD), (10_820, 0));
}

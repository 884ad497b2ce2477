//! Scenarios for changing resting orders: cancel, reduce (keeps priority) and move
//! (loses priority, may trade, adjusts a buy's hold). Run against both books.
//!
//! Every account starts with 1,000,000 USD cents and 10,000 ACME.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy};
use bourse_engine::{Amount, CancelReason, Event, OrderStatus, Px, Qty, Reject, Side};
use common::{market, market_fees, market_with, Harness, MarketOptions, OrderRequestExt, ACME_START, USD_START};

both_books!(
    cancel_releases_the_hold_and_leaves_the_book,
    cancel_of_a_partly_filled_order_releases_what_is_left,
    cancel_of_a_closed_order_is_order_unknown,
    reduce_keeps_time_priority,
    reduce_of_a_buy_releases_notional_and_taker_fee,
    reduce_by_the_remaining_qty_or_more_cancels_with_reduced_to_zero,
    reduce_of_an_iceberg_takes_from_the_reserve_first,
    reduce_qty_must_be_positive_and_a_multiple_of_lot,
    move_loses_time_priority_even_at_the_same_price,
    move_to_a_better_price_takes_the_lead,
    move_across_the_spread_trades,
    move_of_a_buy_adjusts_its_hold_up_and_down,
    move_of_a_sell_keeps_its_hold,
    move_rejected_when_the_new_hold_exceeds_available_leaves_the_order_unchanged,
    move_of_an_iceberg_keeps_its_display,
    move_price_must_be_on_tick_and_in_bounds,
);

fn cancel_releases_the_hold_and_leaves_the_book<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let b = m.accounts[0];
    let id = h.place_ok(m.buy(b, 100, 10));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 1_020, 1_020));
    assert_eq!(h.ok(m.cancel(b, id)), id.0);
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: id, qty_cancelled: Qty(10), reason: CancelReason::Requested },
            m.usd_balance(b, USD_START, 0),
        ]
    );
    assert_eq!(h.order_view(id).record.status, OrderStatus::Cancelled);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
    assert!(h.engine.open_orders(b).is_empty());
}

fn cancel_of_a_partly_filled_order_releases_what_is_left<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let id = h.place_ok(m.sell(a, 100, 10));
    h.place_ok(m.buy(b, 100, 4));
    h.ok(m.cancel(a, id));
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: id, qty_cancelled: Qty(6), reason: CancelReason::Requested },
            m.acme_balance(a, ACME_START - 4, 0),
        ]
    );
    let record = h.order_view(id).record;
    assert_eq!((record.status, record.qty_filled), (OrderStatus::Cancelled, Qty(4)));
}

fn cancel_of_a_closed_order_is_order_unknown<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let cancelled = h.place_ok(m.sell(a, 100, 10));
    h.ok(m.cancel(a, cancelled));
    h.reject(m.cancel(a, cancelled), Reject::OrderUnknown);
    let filled = h.place_ok(m.sell(a, 100, 1));
    h.place_ok(m.buy(b, 100, 1));
    h.reject(m.cancel(a, filled), Reject::OrderUnknown);
    h.reject(m.reduce(a, filled, 1), Reject::OrderUnknown);
    h.reject(m.move_to(a, filled, 101), Reject::OrderUnknown);
}

fn reduce_keeps_time_priority<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let first = h.place_ok(m.sell(a, 100, 10));
    let second = h.place_ok(m.sell(c, 100, 10));
    assert_eq!(h.ok(m.reduce(a, first, 4)), first.0);
    assert_eq!(
        h.events,
        vec![
            Event::Reduced { order: first, qty_by: Qty(4), qty_remaining: Qty(6) },
            m.acme_balance(a, ACME_START - 6, 6),
        ]
    );
    assert_eq!(h.order_view(first).record.qty_reduced, Qty(4));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 16)]));
    // The reduced order is still first in line.
    let id = h.place_ok(m.buy(b, 100, 7));
    assert_eq!(h.trades(), vec![(first, id, 100, 6), (second, id, 100, 1)]);
}

fn reduce_of_a_buy_releases_notional_and_taker_fee<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let b = m.accounts[0];
    let id = h.place_ok(m.buy(b, 100, 10));
    h.ok(m.reduce(b, id, 3));
    assert_eq!(
        h.events,
        vec![
            Event::Reduced { order: id, qty_by: Qty(3), qty_remaining: Qty(7) },
            m.usd_balance(b, USD_START - 714, 714),
        ]
    );
}

fn reduce_by_the_remaining_qty_or_more_cancels_with_reduced_to_zero<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let more = h.place_ok(m.sell(a, 100, 10));
    h.place_ok(m.buy(b, 100, 4));
    h.ok(m.reduce(a, more, 8));
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: more, qty_cancelled: Qty(6), reason: CancelReason::ReducedToZero },
            m.acme_balance(a, ACME_START - 4, 0),
        ]
    );
    assert_eq!(h.order_view(more).record.status, OrderStatus::Cancelled);
    let exact = h.place_ok(m.buy(a, 90, 5));
    h.ok(m.reduce(a, exact, 5));
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: exact, qty_cancelled: Qty(5), reason: CancelReason::ReducedToZero },
            m.usd_balance(a, USD_START + 400, 0),
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

fn reduce_of_an_iceberg_takes_from_the_reserve_first<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let id = h.place_ok(m.sell(a, 100, 20).with_display(5));
    h.ok(m.reduce(a, id, 12));
    assert_eq!(
        h.events,
        vec![
            Event::Reduced { order: id, qty_by: Qty(12), qty_remaining: Qty(8) },
            m.acme_balance(a, ACME_START - 8, 8),
        ]
    );
    let view = h.order_view(id);
    assert_eq!((view.qty_open, view.qty_visible), (Qty(8), Qty(5)));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 5)]));
    // 3 left in reserve; reducing by 6 empties it and takes 3 of the 5 shown.
    h.ok(m.reduce(a, id, 6));
    let view = h.order_view(id);
    assert_eq!((view.qty_open, view.qty_visible), (Qty(2), Qty(2)));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 2)]));
}

fn reduce_qty_must_be_positive_and_a_multiple_of_lot<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { lot: 5, accounts: 2, ..Default::default() });
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let id = h.place_ok(m.sell(a, 100, 20));
    h.reject(m.reduce(a, id, 0), Reject::QtyMustBePositive);
    h.reject(m.reduce(a, id, -5), Reject::QtyMustBePositive);
    h.reject(m.reduce(a, id, 7), Reject::QtyMustBeMultipleOfLot);
    h.reject(m.reduce(b, id, 5), Reject::OrderNotOwned);
}

fn move_loses_time_priority_even_at_the_same_price<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let first = h.place_ok(m.sell(a, 101, 10));
    let second = h.place_ok(m.sell(c, 101, 10));
    assert_eq!(h.ok(m.move_to(a, first, 101)), first.0);
    assert_eq!(h.events, vec![Event::Moved { order: first, px: Px(101) }, m.rested(first, Side::Sell, 101, 10)]);
    let id = h.place_ok(m.buy(b, 101, 12));
    assert_eq!(h.trades(), vec![(second, id, 101, 10), (first, id, 101, 2)]);
}

fn move_to_a_better_price_takes_the_lead<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let moved = h.place_ok(m.sell(a, 300, 10));
    h.place_ok(m.sell(c, 101, 10));
    h.ok(m.move_to(a, moved, 100));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 10), (101, 10)]));
    let id = h.place_ok(m.buy(b, 101, 5));
    assert_eq!(h.trades(), vec![(moved, id, 100, 5)]);
    assert_eq!(h.order_view(moved).px_resting, Some(Px(100)));
}

fn move_across_the_spread_trades<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 105, 10));
    let bid = h.place_ok(m.buy(b, 100, 15));
    h.ok(m.move_to(b, bid, 105));
    assert_eq!(
        h.events,
        vec![
            Event::Moved { order: bid, px: Px(105) },
            m.usd_balance(b, USD_START - 1_575, 1_575),
            m.trade(Side::Buy, (105, 10), (ask, a), (bid, b), (0, 0), true),
            m.usd_balance(a, USD_START + 1_050, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 1_575, 525),
            m.acme_balance(b, ACME_START + 10, 0),
            m.rested(bid, Side::Buy, 105, 5),
        ]
    );
    let view = h.order_view(bid);
    assert_eq!((view.record.qty, view.record.qty_filled, view.qty_open), (Qty(15), Qty(10), Qty(5)));
    assert_eq!(h.engine.last_px(m.sym), Some(Px(105)));
}

fn move_of_a_buy_adjusts_its_hold_up_and_down<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let b = m.accounts[0];
    let id = h.place_ok(m.buy(b, 100, 10));
    h.ok(m.move_to(b, id, 110));
    assert_eq!(
        h.events,
        vec![
            Event::Moved { order: id, px: Px(110) },
            m.usd_balance(b, USD_START - 1_120, 1_120),
            m.rested(id, Side::Buy, 110, 10),
        ]
    );
    h.ok(m.move_to(b, id, 90));
    assert_eq!(
        h.events,
        vec![
            Event::Moved { order: id, px: Px(90) },
            m.usd_balance(b, USD_START - 920, 920),
            m.rested(id, Side::Buy, 90, 10),
        ]
    );
}

fn move_of_a_sell_keeps_its_hold<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let id = h.place_ok(m.sell(a, 100, 10));
    h.ok(m.move_to(a, id, 120));
    assert_eq!(h.events, vec![Event::Moved { order: id, px: Px(120) }, m.rested(id, Side::Sell, 120, 10)]);
    assert_eq!(h.balance_of(a, m.acme), (ACME_START - 10, 10));
}

fn move_rejected_when_the_new_hold_exceeds_available_leaves_the_order_unchanged<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let id = h.place_ok(m.buy(b, 50_000, 10));
    let behind = h.place_ok(m.buy(c, 50_000, 10));
    h.ok(CommandBody::Withdraw { account: b, asset: m.usd, amount: Amount(400_000) });
    assert_eq!(h.balance_of(b, m.usd), (100_000, 500_000));
    // 70,000 × 10 needs 200,000 more; only 100,000 is available.
    h.reject(m.move_to(b, id, 70_000), Reject::BalanceInsufficient);
    // Still first in line at 50,000.
    let sell = h.place_ok(m.sell(a, 50_000, 10));
    assert_eq!(h.trades(), vec![(id, sell, 50_000, 10)]);
    assert_eq!(h.order_view(behind).qty_open, Qty(10));
    // Exactly what is available is enough: 100,000 left, 50,000 held by the new bid.
    let other = h.place_ok(m.buy(b, 10_000, 5));
    h.ok(m.move_to(b, other, 20_000));
    assert_eq!(h.balance_of(b, m.usd), (0, 100_000));
}

fn move_of_an_iceberg_keeps_its_display<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let id = h.place_ok(m.sell(a, 100, 20).with_display(5));
    h.ok(m.move_to(a, id, 101));
    assert_eq!(h.events, vec![Event::Moved { order: id, px: Px(101) }, m.rested(id, Side::Sell, 101, 5)]);
    let view = h.order_view(id);
    assert_eq!((view.qty_open, view.qty_visible), (Qty(20), Qty(5)));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(101, 5)]));
}

fn move_price_must_be_on_tick_and_in_bounds<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { tick: 5, px_min: 5, accounts: 2, ..Default::default() });
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let id = h.place_ok(m.buy(a, 100, 1));
    h.reject(m.move_to(a, id, 102), Reject::PxMustBeMultipleOfTick);
    h.reject(m.move_to(a, id, 0), Reject::PxOutOfBounds);
    h.reject(m.move_to(a, id, -5), Reject::PxOutOfBounds);
    h.reject(m.move_to(a, id, 1_000_005), Reject::PxOutOfBounds);
    h.reject(m.move_to(b, id, 105), Reject::OrderNotOwned);
}

//! Scenarios for stop orders: stop-limit and stop-market, triggered by the last trade
//! price (a buy at or above its trigger, a sell at or below), immediately when already
//! reached, in cascades, and their cancel, move and reduce rules. Run against both
//! books.
//!
//! Most scenarios first trade 1 share at 100 between accounts a and d so the last
//! price is 100; those set-up orders take ids 1 and 2.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy, OrderKind, Tif};
use bourse_engine::{Amount, CancelReason, Event, OrderStatus, Px, Qty, Reject, Side};
use common::{
    market, market_fees, market_with, Harness, Market, MarketOptions, OrderRequestExt, ACME_START, USD_START,
};

both_books!(
    stop_limit_buy_waits_below_its_trigger_and_fires_when_last_reaches_it,
    stop_buy_fires_when_last_jumps_past_its_trigger,
    stop_limit_sell_fires_when_last_falls_to_its_trigger,
    stop_market_sell_fires_and_sells_into_the_bids,
    stop_market_buy_fires_and_releases_unspent_budget,
    stop_market_remainder_is_cancelled_unfilled,
    stop_fires_at_once_when_last_already_reached_its_trigger,
    stop_waits_while_there_is_no_last_trade,
    stops_cascade_while_their_trades_reach_more_triggers,
    stops_fired_by_one_trade_go_oldest_first,
    a_trade_caused_by_a_move_fires_stops,
    stops_fire_only_after_the_incoming_order_is_done,
    triggered_stop_limit_rests_and_is_then_an_ordinary_order,
    triggered_fok_stop_without_enough_liquidity_is_cancelled_unfilled,
    cancel_of_a_pending_stop_releases_its_hold,
    pending_stop_cannot_be_moved_or_reduced,
    stop_shape_rules,
);

/// A market with four accounts where one share traded at 100 (orders 1 and 2).
fn market_at_100<B: Book>(h: &mut Harness<B>) -> Market {
    let m = market(h, 0, 0, MatchPolicy::Fifo, 4);
    m.trade_at(h, m.accounts[0], m.accounts[3], 100, 1);
    assert_eq!(h.engine.last_px(m.sym), Some(Px(100)));
    m
}

fn stop_limit_buy_waits_below_its_trigger_and_fires_when_last_reaches_it<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let request = m.stop_limit(b, Side::Buy, 105, 106, 5);
    let stop = h.place_ok(request);
    assert_eq!(h.events, vec![m.accepted(stop, &request, h.ts), m.usd_balance(b, USD_START - 530, 530)]);
    let view = h.order_view(stop);
    assert_eq!((view.record.status, view.qty_open, view.px_resting), (OrderStatus::Pending, Qty(5), None));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));

    m.trade_at(&mut h, a, d, 104, 1);
    assert!(!h.events.iter().any(|e| matches!(e, Event::Triggered { .. })));
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Pending);

    let ask = h.place_ok(m.sell(a, 105, 10));
    let request = m.buy(c, 105, 5);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(c, USD_START - 525, 525),
            m.trade(Side::Buy, (105, 5), (ask, a), (id, c), (0, 0), false),
            m.usd_balance(a, USD_START + 100 + 104 + 525, 0),
            m.acme_balance(a, ACME_START - 12, 5),
            m.usd_balance(c, USD_START - 525, 0),
            m.acme_balance(c, ACME_START + 5, 0),
            Event::Triggered { order: stop, last_px: Px(105) },
            // The stop is now a buy limited at 106; it pays 105 and gets 5 back.
            m.trade(Side::Buy, (105, 5), (ask, a), (stop, b), (0, 0), true),
            m.usd_balance(a, USD_START + 100 + 104 + 1_050, 0),
            m.acme_balance(a, ACME_START - 12, 0),
            m.usd_balance(b, USD_START - 525, 0),
            m.acme_balance(b, ACME_START + 5, 0),
        ]
    );
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Filled);
}

fn stop_buy_fires_when_last_jumps_past_its_trigger<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_limit(b, Side::Buy, 105, 110, 5));
    let ask = h.place_ok(m.sell(a, 108, 10));
    h.place_ok(m.buy(c, 108, 1));
    let fired: Vec<Event> =
        h.events.iter().filter(|e| matches!(e, Event::Triggered { .. } | Event::Trade { .. })).copied().collect();
    assert_eq!(
        fired[1..],
        [
            Event::Triggered { order: stop, last_px: Px(108) },
            m.trade(Side::Buy, (108, 5), (ask, a), (stop, b), (0, 0), false),
        ]
    );
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 540, 0));
}

fn stop_limit_sell_fires_when_last_falls_to_its_trigger<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let request = m.stop_limit(b, Side::Sell, 95, 94, 5);
    let stop = h.place_ok(request);
    assert_eq!(h.events, vec![m.accepted(stop, &request, h.ts), m.acme_balance(b, ACME_START - 5, 5)]);

    m.trade_at(&mut h, a, c, 96, 1);
    assert!(!h.events.iter().any(|e| matches!(e, Event::Triggered { .. })));

    let bid = h.place_ok(m.buy(c, 95, 10));
    h.place_ok(m.sell(a, 95, 4));
    let n = h.events.len();
    assert_eq!(
        h.events[n - 6..],
        [
            Event::Triggered { order: stop, last_px: Px(95) },
            m.trade(Side::Sell, (95, 5), (bid, c), (stop, b), (0, 0), false),
            m.usd_balance(c, USD_START - 96 - 950, 95),
            m.acme_balance(c, ACME_START + 10, 0),
            m.usd_balance(b, USD_START + 475, 0),
            m.acme_balance(b, ACME_START - 5, 0),
        ]
    );
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Filled);
}

fn stop_market_sell_fires_and_sells_into_the_bids<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_market(b, Side::Sell, 95, 5, None));
    let bid = h.place_ok(m.buy(c, 95, 10));
    let id = h.place_ok(m.sell(a, 95, 3));
    assert_eq!(h.trades(), vec![(bid, id, 95, 3), (bid, stop, 95, 5)]);
    assert!(h.events.contains(&Event::Triggered { order: stop, last_px: Px(95) }));
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Filled);
    assert_eq!(h.balance_of(b, m.usd), (USD_START + 475, 0));
    assert_eq!(h.balance_of(b, m.acme), (ACME_START - 5, 0));
}

fn stop_market_buy_fires_and_releases_unspent_budget<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let request = m.stop_market(b, Side::Buy, 105, 5, Some(600));
    let stop = h.place_ok(request);
    assert_eq!(h.events, vec![m.accepted(stop, &request, h.ts), m.usd_balance(b, USD_START - 600, 600)]);
    let ask = h.place_ok(m.sell(a, 105, 10));
    h.place_ok(m.buy(c, 105, 5));
    let n = h.events.len();
    assert_eq!(
        h.events[n - 7..],
        [
            Event::Triggered { order: stop, last_px: Px(105) },
            m.trade(Side::Buy, (105, 5), (ask, a), (stop, b), (0, 0), true),
            m.usd_balance(a, USD_START + 100 + 1_050, 0),
            m.acme_balance(a, ACME_START - 11, 0),
            m.usd_balance(b, USD_START - 600, 75),
            m.acme_balance(b, ACME_START + 5, 0),
            m.usd_balance(b, USD_START - 525, 0),
        ]
    );
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Filled);
}

fn stop_market_remainder_is_cancelled_unfilled<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_market(b, Side::Sell, 95, 5, None));
    let bid = h.place_ok(m.buy(c, 95, 2));
    h.place_ok(m.sell(a, 95, 1));
    let n = h.events.len();
    assert_eq!(
        h.events[n - 8..],
        [
            Event::Triggered { order: stop, last_px: Px(95) },
            m.trade(Side::Sell, (95, 1), (bid, c), (stop, b), (0, 0), true),
            m.usd_balance(c, USD_START - 190, 0),
            m.acme_balance(c, ACME_START + 2, 0),
            m.usd_balance(b, USD_START + 95, 0),
            m.acme_balance(b, ACME_START - 5, 4),
            Event::Cancelled { order: stop, qty_cancelled: Qty(4), reason: CancelReason::Unfilled },
            m.acme_balance(b, ACME_START - 1, 0),
        ]
    );
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Cancelled);
}

fn stop_fires_at_once_when_last_already_reached_its_trigger<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 101, 5));
    // A buy stop at 95 when the last trade was 100 has already been reached.
    let request = m.stop_limit(b, Side::Buy, 95, 101, 5);
    let stop = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(stop, &request, h.ts),
            m.usd_balance(b, USD_START - 505, 505),
            Event::Triggered { order: stop, last_px: Px(100) },
            m.trade(Side::Buy, (101, 5), (ask, a), (stop, b), (0, 0), true),
            m.usd_balance(a, USD_START + 100 + 505, 0),
            m.acme_balance(a, ACME_START - 6, 0),
            m.usd_balance(b, USD_START - 505, 0),
            m.acme_balance(b, ACME_START + 5, 0),
        ]
    );
    // Likewise a sell stop at 105: the last price is already at or below it.
    let request = m.stop_limit(b, Side::Sell, 105, 120, 2);
    let stop = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(stop, &request, h.ts),
            m.acme_balance(b, ACME_START + 3, 2),
            Event::Triggered { order: stop, last_px: Px(101) },
            m.rested(stop, Side::Sell, 120, 2),
        ]
    );
}

fn stop_waits_while_there_is_no_last_trade<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let b = m.accounts[0];
    let buy = h.place_ok(m.stop_limit(b, Side::Buy, 1, 100, 5));
    let sell = h.place_ok(m.stop_limit(b, Side::Sell, 1_000_000, 100, 5));
    assert_eq!(h.order_view(buy).record.status, OrderStatus::Pending);
    assert_eq!(h.order_view(sell).record.status, OrderStatus::Pending);
    assert_eq!(h.engine.open_orders(b).len(), 2);
}

fn stops_cascade_while_their_trades_reach_more_triggers<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let bid_99 = h.place_ok(m.buy(c, 99, 1));
    let bid_98 = h.place_ok(m.buy(c, 98, 5));
    let bid_97 = h.place_ok(m.buy(c, 97, 5));
    let first = h.place_ok(m.stop_market(b, Side::Sell, 99, 5, None));
    let second = h.place_ok(m.stop_market(d, Side::Sell, 98, 5, None));
    let id = h.place_ok(m.sell(a, 99, 1));
    let fired: Vec<Event> =
        h.events.iter().filter(|e| matches!(e, Event::Triggered { .. } | Event::Trade { .. })).copied().collect();
    assert_eq!(
        fired,
        vec![
            m.trade(Side::Sell, (99, 1), (bid_99, c), (id, a), (0, 0), true),
            Event::Triggered { order: first, last_px: Px(99) },
            m.trade(Side::Sell, (98, 5), (bid_98, c), (first, b), (0, 0), true),
            Event::Triggered { order: second, last_px: Px(98) },
            m.trade(Side::Sell, (97, 5), (bid_97, c), (second, d), (0, 0), true),
        ]
    );
    assert_eq!(h.engine.last_px(m.sym), Some(Px(97)));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

fn stops_fired_by_one_trade_go_oldest_first<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    // The older stop has the higher trigger: order of placement, not of trigger, wins.
    let older = h.place_ok(m.stop_market(b, Side::Buy, 103, 1, Some(200)));
    let newer = h.place_ok(m.stop_market(d, Side::Buy, 102, 1, Some(200)));
    let ask = h.place_ok(m.sell(a, 104, 10));
    h.place_ok(m.buy(c, 104, 1));
    let fired: Vec<Event> =
        h.events.iter().filter(|e| matches!(e, Event::Triggered { .. } | Event::Trade { .. })).copied().collect();
    assert_eq!(
        fired[1..],
        [
            Event::Triggered { order: older, last_px: Px(104) },
            m.trade(Side::Buy, (104, 1), (ask, a), (older, b), (0, 0), false),
            Event::Triggered { order: newer, last_px: Px(104) },
            m.trade(Side::Buy, (104, 1), (ask, a), (newer, d), (0, 0), false),
        ]
    );
}

fn triggered_stop_limit_rests_and_is_then_an_ordinary_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_limit(b, Side::Buy, 101, 101, 5));
    m.trade_at(&mut h, a, c, 101, 1);
    let n = h.events.len();
    assert_eq!(
        h.events[n - 2..],
        [Event::Triggered { order: stop, last_px: Px(101) }, m.rested(stop, Side::Buy, 101, 5)]
    );
    let view = h.order_view(stop);
    assert_eq!((view.record.status, view.px_resting, view.qty_open), (OrderStatus::Open, Some(Px(101)), Qty(5)));
    // Now in the book, it can be reduced and moved like any resting order.
    h.ok(m.reduce(b, stop, 1));
    h.ok(m.move_to(b, stop, 99));
    assert_eq!(h.depth_of(m.sym), (vec![(99, 4)], vec![]));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 396, 396));
}

fn triggered_fok_stop_without_enough_liquidity_is_cancelled_unfilled<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_limit(b, Side::Buy, 101, 102, 10).with_tif(Tif::Fok));
    let ask = h.place_ok(m.sell(a, 101, 3));
    h.place_ok(m.buy(c, 101, 1));
    let n = h.events.len();
    assert_eq!(
        h.events[n - 3..],
        [
            Event::Triggered { order: stop, last_px: Px(101) },
            Event::Cancelled { order: stop, qty_cancelled: Qty(10), reason: CancelReason::Unfilled },
            m.usd_balance(b, USD_START, 0),
        ]
    );
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Cancelled);
    assert_eq!(h.order_view(ask).qty_open, Qty(2));
}

fn cancel_of_a_pending_stop_releases_its_hold<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let b = m.accounts[0];
    let buy = h.place_ok(m.stop_limit(b, Side::Buy, 105, 106, 5));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 540, 540));
    let sell = h.place_ok(m.stop_market(b, Side::Sell, 90, 7, None));
    assert_eq!(h.balance_of(b, m.acme), (ACME_START - 7, 7));

    assert_eq!(h.ok(m.cancel(b, buy)), buy.0);
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: buy, qty_cancelled: Qty(5), reason: CancelReason::Requested },
            m.usd_balance(b, USD_START, 0),
        ]
    );
    h.ok(m.cancel(b, sell));
    assert_eq!(
        h.events,
        vec![
            Event::Cancelled { order: sell, qty_cancelled: Qty(7), reason: CancelReason::Requested },
            m.acme_balance(b, ACME_START, 0),
        ]
    );
    assert_eq!(h.order_view(buy).record.status, OrderStatus::Cancelled);
    assert!(h.engine.open_orders(b).is_empty());
    h.reject(m.cancel(b, buy), Reject::OrderUnknown);
}

fn pending_stop_cannot_be_moved_or_reduced<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let stop = h.place_ok(m.stop_limit(b, Side::Buy, 105, 106, 5));
    h.reject(m.move_to(b, stop, 104), Reject::OrderIsStop);
    h.reject(m.reduce(b, stop, 1), Reject::OrderIsStop);
    // Another account learns only that the order is not theirs.
    h.reject(m.move_to(a, stop, 104), Reject::OrderNotOwned);
    h.reject(m.reduce(a, stop, 1), Reject::OrderNotOwned);
    h.reject(m.cancel(a, stop), Reject::OrderNotOwned);
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Pending);
}

fn stop_shape_rules<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_with(&mut h, MarketOptions { tick: 5, px_min: 5, accounts: 1, ..Default::default() });
    let b = m.accounts[0];
    let place = CommandBody::Place;
    h.reject(place(m.stop_market(b, Side::Sell, 100, 5, None).with_tif(Tif::Gtc)), Reject::MarketOrderCannotRest);
    h.reject(place(m.stop_market(b, Side::Buy, 100, 5, None)), Reject::MarketBuyRequiresBudget);
    h.reject(place(m.stop_market(b, Side::Sell, 100, 5, Some(400))), Reject::BudgetRequiresMarketOrFok);
    h.reject(place(m.stop_limit(b, Side::Buy, 103, 105, 5)), Reject::PxMustBeMultipleOfTick);
    h.reject(place(m.stop_limit(b, Side::Buy, 105, 103, 5)), Reject::PxMustBeMultipleOfTick);
    h.reject(place(m.stop_limit(b, Side::Buy, 0, 105, 5)), Reject::PxOutOfBounds);
    h.reject(place(m.stop_limit(b, Side::Buy, 1_000_005, 105, 5)), Reject::PxOutOfBounds);
    h.reject(place(m.stop_limit(b, Side::Buy, 105, 105, 0)), Reject::QtyMustBePositive);
    h.reject(place(m.stop_limit(b, Side::Buy, 105, 200_000, 6)), Reject::BalanceInsufficient);
    // A stop-market sell may carry a minimum of proceeds with FOK.
    let id = h.place_ok(m.stop_market(b, Side::Sell, 100, 5, Some(400)).with_tif(Tif::Fok));
    let kind = OrderKind::StopMarket { trigger: Px(100), budget: Some(Amount(400)) };
    assert_eq!((h.order_view(id).record.kind, h.order_view(id).record.status), (kind, OrderStatus::Pending));
}

fn a_trade_caused_by_a_move_fires_stops<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_market(b, Side::Sell, 95, 1, None));
    let bid = h.place_ok(m.buy(c, 95, 10));
    let ask = h.place_ok(m.sell(a, 110, 5));
    h.ok(m.move_to(a, ask, 95));
    assert_eq!(h.trades(), vec![(bid, ask, 95, 5), (bid, stop, 95, 1)]);
    assert!(h.events.contains(&Event::Triggered { order: stop, last_px: Px(95) }));
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Filled);
}

/// The order whose trade fires a stop has finished (its remainder cancelled or rested)
/// before the stop trades: a stop never fills the order that triggered it.
fn stops_fire_only_after_the_incoming_order_is_done<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let stop = h.place_ok(m.stop_market(b, Side::Buy, 102, 7, Some(1_000)));
    let bid = h.place_ok(m.buy(a, 102, 1));
    let ask = h.place_ok(m.sell(a, 103, 7));
    let ioc = h.place_ok(m.sell(c, 101, 8).with_tif(Tif::Ioc));
    let sequence: Vec<Event> = h
        .events
        .iter()
        .filter(|e| matches!(e, Event::Trade { .. } | Event::Cancelled { .. } | Event::Triggered { .. }))
        .copied()
        .collect();
    assert_eq!(
        sequence,
        vec![
            m.trade(Side::Sell, (102, 1), (bid, a), (ioc, c), (0, 0), true),
            Event::Cancelled { order: ioc, qty_cancelled: Qty(7), reason: CancelReason::Unfilled },
            Event::Triggered { order: stop, last_px: Px(102) },
            m.trade(Side::Buy, (103, 7), (ask, a), (stop, b), (0, 0), true),
        ]
    );
    assert_eq!(h.order_view(ioc).record.qty_filled, Qty(1));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 721, 0));
}

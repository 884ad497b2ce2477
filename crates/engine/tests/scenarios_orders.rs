//! Scenarios for every order type and time in force: limit GTC/IOC/FOK, FOK by budget,
//! market orders, post-only and icebergs, run against both books.
//!
//! Every account of `market` starts with 1,000,000 USD cents and 10,000 ACME; prices are
//! in cents per share, tick 1, lot 1 unless a test says otherwise.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy, OrderKind, OrderRequest, Stp, Tif};
use bourse_engine::{Amount, CancelReason, Event, OrderId, OrderStatus, Px, Qty, Reject, Side};
use common::{market, market_fees, Harness, OrderRequestExt, ACME_START, USD_START};

both_books!(
    limit_gtc_rests_and_holds_notional_plus_taker_fee,
    limit_gtc_partially_filled_rests_the_remainder,
    limit_orders_match_best_price_first_then_time,
    ioc_remainder_is_cancelled_unfilled,
    ioc_without_liquidity_is_cancelled_whole,
    fok_fills_completely_across_levels,
    fok_sell_is_all_or_nothing,
    fok_rejected_when_not_fully_fillable_changes_nothing,
    fok_counts_iceberg_hidden_quantity_as_liquidity,
    fok_with_cancel_resting_ignores_own_orders_and_rejects_without_cancelling_them,
    fok_with_cancel_resting_cancels_own_orders_and_fills_from_others,
    fok_with_cancel_incoming_counts_only_liquidity_ahead_of_own_order,
    fok_with_cancel_incoming_fills_when_own_order_is_beyond_need,
    fok_with_cancel_incoming_does_not_count_iceberg_reserve_that_refreshes_behind_own_order,
    fok_with_allow_counts_own_orders,
    fok_market_buy_fills_only_when_cost_with_fees_fits_budget,
    fok_market_sell_fills_only_when_proceeds_net_of_fees_reach_minimum,
    market_buy_stops_when_budget_exhausted_and_releases_leftover,
    market_buy_filled_releases_unspent_budget,
    market_buy_without_more_liquidity_is_cancelled_unfilled,
    market_buy_without_budget_is_rejected,
    market_buy_whose_budget_cannot_pay_one_lot_with_fee_trades_nothing,
    market_sell_takes_bids_best_first_and_cancels_remainder,
    market_order_cannot_rest,
    market_sell_budget_requires_fok,
    post_only_rests_when_it_does_not_cross,
    post_only_rejected_when_it_would_trade,
    post_only_moved_across_the_spread_is_rejected,
    post_only_requires_gtc_limit,
    iceberg_depth_shows_only_the_displayed_slice,
    iceberg_refresh_loses_priority,
    iceberg_last_slice_is_what_is_left_of_the_reserve,
    iceberg_shape_rules,
    price_improvement_on_a_buy_is_released_at_once,
    sell_limit_trades_at_the_resting_bid_price,
    resting_buy_gets_taker_minus_maker_fee_back,
);

fn limit_gtc_rests_and_holds_notional_plus_taker_fee<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let a = m.accounts[0];
    let request = m.buy(a, 100, 10);
    let id = h.place_ok(request);
    assert_eq!(id, OrderId(1));
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(a, USD_START - 1_020, 1_020),
            m.rested(id, Side::Buy, 100, 10),
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![(100, 10)], vec![]));
    let view = h.order_view(id);
    assert_eq!(view.record.status, OrderStatus::Open);
    assert_eq!((view.px_resting, view.qty_open, view.qty_visible), (Some(Px(100)), Qty(10), Qty(10)));
}

fn limit_gtc_partially_filled_rests_the_remainder<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let request = m.buy(b, 101, 15);
    let bid = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(bid, &request, h.ts),
            m.usd_balance(b, USD_START - 1_515, 1_515),
            m.trade(Side::Buy, (100, 10), (ask, a), (bid, b), (0, 0), true),
            m.usd_balance(a, USD_START + 1_000, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            // The 10 bought at 100 release their 101·10 hold; 10 cents come back.
            m.usd_balance(b, USD_START - 1_505, 505),
            m.acme_balance(b, ACME_START + 10, 0),
            m.rested(bid, Side::Buy, 101, 5),
        ]
    );
    assert_eq!(h.order_view(ask).record.status, OrderStatus::Filled);
    let view = h.order_view(bid);
    assert_eq!((view.record.status, view.record.qty_filled, view.qty_open), (OrderStatus::Open, Qty(10), Qty(5)));
    assert_eq!(h.depth_of(m.sym), (vec![(101, 5)], vec![]));
    assert_eq!(h.engine.last_px(m.sym), Some(Px(100)));
}

fn limit_orders_match_best_price_first_then_time<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 4);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    // 101 and 300 lie in other 64-price blocks of the fast book's ladder than 100.
    let worst = h.place_ok(m.sell(a, 300, 5));
    let later = h.place_ok(m.sell(a, 101, 5));
    let first = h.place_ok(m.sell(b, 100, 5));
    let second = h.place_ok(m.sell(c, 100, 5));
    let taker = h.place_ok(m.buy(d, 300, 12));
    assert_eq!(h.trades(), vec![(first, taker, 100, 5), (second, taker, 100, 5), (later, taker, 101, 2)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(101, 3), (300, 5)]));
    assert_eq!(h.order_view(worst).qty_open, Qty(5));
}

fn ioc_remainder_is_cancelled_unfilled<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 3));
    let request = m.buy(b, 100, 5).with_tif(Tif::Ioc);
    let bid = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(bid, &request, h.ts),
            m.usd_balance(b, USD_START - 500, 500),
            m.trade(Side::Buy, (100, 3), (ask, a), (bid, b), (0, 0), true),
            m.usd_balance(a, USD_START + 300, 0),
            m.acme_balance(a, ACME_START - 3, 0),
            m.usd_balance(b, USD_START - 500, 200),
            m.acme_balance(b, ACME_START + 3, 0),
            Event::Cancelled { order: bid, qty_cancelled: Qty(2), reason: CancelReason::Unfilled },
            m.usd_balance(b, USD_START - 300, 0),
        ]
    );
    let view = h.order_view(bid);
    assert_eq!((view.record.status, view.record.qty_filled, view.qty_open), (OrderStatus::Cancelled, Qty(3), Qty(0)));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

fn ioc_without_liquidity_is_cancelled_whole<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 101, 3));
    let request = m.sell(b, 100, 4).with_tif(Tif::Ioc);
    let id = h.place_ok(request);
    // A sell IOC below the only ask finds no bid.
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.acme_balance(b, ACME_START - 4, 4),
            Event::Cancelled { order: id, qty_cancelled: Qty(4), reason: CancelReason::Unfilled },
            m.acme_balance(b, ACME_START, 0),
        ]
    );
    assert_eq!(h.order_view(id).record.status, OrderStatus::Cancelled);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(101, 3)]));
}

fn fok_fills_completely_across_levels<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let first = h.place_ok(m.sell(a, 100, 5));
    let second = h.place_ok(m.sell(a, 101, 5));
    let request = m.buy(b, 101, 10).with_tif(Tif::Fok);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_010, 1_010),
            m.trade(Side::Buy, (100, 5), (first, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 10, 5),
            m.usd_balance(b, USD_START - 1_005, 505),
            m.acme_balance(b, ACME_START + 5, 0),
            m.trade(Side::Buy, (101, 5), (second, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 1_005, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 1_005, 0),
            m.acme_balance(b, ACME_START + 10, 0),
        ]
    );
    assert_eq!(h.order_view(id).record.status, OrderStatus::Filled);
}

fn fok_rejected_when_not_fully_fillable_changes_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 5));
    h.place_ok(m.sell(a, 102, 5));
    // Only 5 are within the limit of 101.
    h.reject(CommandBody::Place(m.buy(b, 101, 10).with_tif(Tif::Fok)), Reject::FokCannotFill);
    // 10 are on offer, 11 are asked for.
    h.reject(CommandBody::Place(m.buy(b, 102, 11).with_tif(Tif::Fok)), Reject::FokCannotFill);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 5), (102, 5)]));
    assert_eq!(h.balance_of(b, m.usd), (USD_START, 0));
}

fn fok_counts_iceberg_hidden_quantity_as_liquidity<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let iceberg = h.place_ok(m.sell(a, 100, 20).with_display(5));
    let id = h.place_ok(m.buy(b, 100, 15).with_tif(Tif::Fok));
    assert_eq!(h.trades(), vec![(iceberg, id, 100, 5), (iceberg, id, 100, 5), (iceberg, id, 100, 5)]);
    let refreshed: Vec<&Event> = h.events.iter().filter(|e| matches!(e, Event::Refreshed { .. })).collect();
    assert_eq!(refreshed, vec![&Event::Refreshed { order: iceberg, qty_visible: Qty(5) }; 3]);
    assert_eq!(h.order_view(id).record.status, OrderStatus::Filled);
    assert_eq!(h.order_view(iceberg).qty_open, Qty(5));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 5)]));
    assert_eq!(h.balance_of(b, m.acme), (ACME_START + 15, 0));
}

fn fok_with_cancel_resting_ignores_own_orders_and_rejects_without_cancelling_them<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let own = h.place_ok(m.sell(b, 100, 10));
    h.place_ok(m.sell(a, 101, 5));
    let fok = m.buy(b, 101, 10).with_tif(Tif::Fok).with_stp(Stp::CancelResting);
    h.reject(CommandBody::Place(fok), Reject::FokCannotFill);
    assert_eq!(h.order_view(own).record.status, OrderStatus::Open);
}

fn fok_with_cancel_resting_cancels_own_orders_and_fills_from_others<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let own = h.place_ok(m.sell(b, 100, 10));
    let other = h.place_ok(m.sell(a, 101, 10));
    let request = m.buy(b, 101, 10).with_tif(Tif::Fok).with_stp(Stp::CancelResting);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_010, 1_010),
            Event::Cancelled { order: own, qty_cancelled: Qty(10), reason: CancelReason::SelfTrade },
            m.acme_balance(b, ACME_START, 0),
            m.trade(Side::Buy, (101, 10), (other, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 1_010, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 1_010, 0),
            m.acme_balance(b, ACME_START + 10, 0),
        ]
    );
    assert_eq!(h.order_view(own).record.status, OrderStatus::Cancelled);
}

fn fok_with_cancel_incoming_counts_only_liquidity_ahead_of_own_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 5));
    h.place_ok(m.sell(b, 100, 5));
    h.place_ok(m.sell(a, 101, 10));
    // Matching would stop at b's own order after 5.
    let fok = m.buy(b, 101, 10).with_tif(Tif::Fok).with_stp(Stp::CancelIncoming);
    h.reject(CommandBody::Place(fok), Reject::FokCannotFill);
}

fn fok_with_cancel_incoming_fills_when_own_order_is_beyond_need<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let other = h.place_ok(m.sell(a, 100, 5));
    let own = h.place_ok(m.sell(b, 100, 5));
    let id = h.place_ok(m.buy(b, 100, 5).with_tif(Tif::Fok).with_stp(Stp::CancelIncoming));
    assert_eq!(h.trades(), vec![(other, id, 100, 5)]);
    assert_eq!(h.order_view(id).record.status, OrderStatus::Filled);
    assert_eq!(h.order_view(own).record.status, OrderStatus::Open);
}

/// FOK is all or nothing: when matching would stop at the account's own order before
/// the whole quantity trades, nothing may trade.
fn fok_with_cancel_incoming_does_not_count_iceberg_reserve_that_refreshes_behind_own_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    // a's iceberg shows 2 of 10; b's own order is next in the queue. After the first
    // slice trades the iceberg refreshes behind b's order, where matching must stop.
    h.place_ok(m.sell(a, 100, 10).with_display(2));
    h.place_ok(m.sell(b, 100, 5));
    let fok = m.buy(b, 100, 8).with_tif(Tif::Fok).with_stp(Stp::CancelIncoming);
    h.reject(CommandBody::Place(fok), Reject::FokCannotFill);
}

fn fok_with_allow_counts_own_orders<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let other = h.place_ok(m.sell(a, 100, 5));
    let own = h.place_ok(m.sell(b, 100, 5));
    let id = h.place_ok(m.buy(b, 100, 10).with_tif(Tif::Fok).with_stp(Stp::Allow));
    assert_eq!(h.trades(), vec![(other, id, 100, 5), (own, id, 100, 5)]);
    // b sold 5 to itself and bought 5 from a.
    assert_eq!(h.balance_of(b, m.acme), (ACME_START + 5, 0));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 500, 0));
}

fn fok_market_buy_fills_only_when_cost_with_fees_fits_budget<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 1, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let first = h.place_ok(m.sell(a, 100, 5));
    let second = h.place_ok(m.sell(a, 102, 5));
    // 10 cost 500 + 510 plus a taker fee of 1 a lot: 1,020.
    h.reject(CommandBody::Place(m.market_buy(b, 10, 1_019).with_tif(Tif::Fok)), Reject::FokCannotFill);
    let request = m.market_buy(b, 10, 1_020).with_tif(Tif::Fok);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_020, 1_020),
            m.trade(Side::Buy, (100, 5), (first, a), (id, b), (0, 5), true),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 10, 5),
            m.usd_balance(b, USD_START - 1_020, 515),
            m.acme_balance(b, ACME_START + 5, 0),
            m.trade(Side::Buy, (102, 5), (second, a), (id, b), (0, 5), true),
            m.usd_balance(a, USD_START + 1_010, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 1_020, 0),
            m.acme_balance(b, ACME_START + 10, 0),
        ]
    );
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 10);
}

fn fok_market_sell_fills_only_when_proceeds_net_of_fees_reach_minimum<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 1, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.buy(a, 100, 5));
    h.place_ok(m.buy(a, 98, 5));
    // Selling 10 brings 500 + 490 less a taker fee of 10: 980.
    let sell = |minimum: i64| OrderRequest {
        kind: OrderKind::Market { budget: Some(Amount(minimum)) },
        tif: Tif::Fok,
        ..m.market_sell(b, 10)
    };
    h.reject(CommandBody::Place(sell(981)), Reject::FokCannotFill);
    let id = h.place_ok(sell(980));
    assert_eq!(h.trades().len(), 2);
    assert_eq!(h.order_view(id).record.status, OrderStatus::Filled);
    assert_eq!(h.balance_of(b, m.usd), (USD_START + 980, 0));
    assert_eq!(h.balance_of(b, m.acme), (ACME_START - 10, 0));
}

fn market_buy_stops_when_budget_exhausted_and_releases_leftover<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let request = m.market_buy(b, 10, 550);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 550, 550),
            m.trade(Side::Buy, (100, 5), (ask, a), (id, b), (0, 0), false),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 10, 5),
            m.usd_balance(b, USD_START - 550, 50),
            m.acme_balance(b, ACME_START + 5, 0),
            Event::Cancelled { order: id, qty_cancelled: Qty(5), reason: CancelReason::BudgetExhausted },
            m.usd_balance(b, USD_START - 500, 0),
        ]
    );
    assert_eq!(h.order_view(id).record.status, OrderStatus::Cancelled);
    assert_eq!(h.order_view(ask).qty_open, Qty(5));
}

fn market_buy_filled_releases_unspent_budget<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let request = m.market_buy(b, 10, 2_000);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 2_000, 2_000),
            m.trade(Side::Buy, (100, 10), (ask, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 1_000, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 2_000, 1_000),
            m.acme_balance(b, ACME_START + 10, 0),
            m.usd_balance(b, USD_START - 1_000, 0),
        ]
    );
    assert_eq!(h.order_view(id).record.status, OrderStatus::Filled);
}

fn market_buy_without_more_liquidity_is_cancelled_unfilled<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 3));
    let id = h.place_ok(m.market_buy(b, 5, 1_000));
    assert_eq!(
        h.events[h.events.len() - 2..],
        [
            Event::Cancelled { order: id, qty_cancelled: Qty(2), reason: CancelReason::Unfilled },
            m.usd_balance(b, USD_START - 300, 0),
        ]
    );
}

fn market_buy_without_budget_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 3));
    let request = OrderRequest::market(b, m.sym, Side::Buy, Qty(3), None);
    h.reject(CommandBody::Place(request), Reject::MarketBuyRequiresBudget);
}

fn market_sell_takes_bids_best_first_and_cancels_remainder<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let low = h.place_ok(m.buy(a, 99, 5));
    let high = h.place_ok(m.buy(a, 100, 5));
    let id = h.place_ok(m.market_sell(b, 12));
    assert_eq!(h.trades(), vec![(high, id, 100, 5), (low, id, 99, 5)]);
    assert_eq!(
        h.events[h.events.len() - 2..],
        [
            Event::Cancelled { order: id, qty_cancelled: Qty(2), reason: CancelReason::Unfilled },
            m.acme_balance(b, ACME_START - 10, 0),
        ]
    );
    assert_eq!(h.balance_of(b, m.usd), (USD_START + 995, 0));
    assert_eq!(h.balance_of(a, m.usd), (USD_START - 995, 0));
    assert_eq!(h.balance_of(a, m.acme), (ACME_START + 10, 0));
}

fn market_order_cannot_rest<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let gtc = m.market_sell(a, 5).with_tif(Tif::Gtc);
    h.reject(CommandBody::Place(gtc), Reject::MarketOrderCannotRest);
}

fn market_sell_budget_requires_fok<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.buy(a, 100, 5));
    let ioc = OrderRequest { kind: OrderKind::Market { budget: Some(Amount(100)) }, ..m.market_sell(b, 5) };
    h.reject(CommandBody::Place(ioc), Reject::BudgetRequiresMarketOrFok);
}

fn post_only_rests_when_it_does_not_cross<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 101, 10));
    let request = m.buy(b, 100, 10).with_post_only();
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_000, 1_000),
            m.rested(id, Side::Buy, 100, 10)
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![(100, 10)], vec![(101, 10)]));
}

fn post_only_rejected_when_it_would_trade<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 101, 10));
    h.place_ok(m.buy(a, 99, 10));
    let place = CommandBody::Place;
    h.reject(place(m.buy(b, 101, 10).with_post_only()), Reject::PostOnlyWouldTrade);
    h.reject(place(m.buy(b, 150, 1).with_post_only()), Reject::PostOnlyWouldTrade);
    h.reject(place(m.sell(b, 99, 1).with_post_only()), Reject::PostOnlyWouldTrade);
}

fn post_only_moved_across_the_spread_is_rejected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 101, 10));
    let id = h.place_ok(m.buy(b, 100, 10).with_post_only());
    h.reject(m.move_to(b, id, 101), Reject::PostOnlyWouldTrade);
    assert_eq!(h.order_view(id).px_resting, Some(Px(100)));
    // Moving away from the spread is fine and keeps the post-only flag.
    h.ok(m.move_to(b, id, 99));
    assert_eq!(
        h.events,
        vec![
            Event::Moved { order: id, px: Px(99) },
            m.usd_balance(b, USD_START - 990, 990),
            m.rested(id, Side::Buy, 99, 10)
        ]
    );
}

fn post_only_requires_gtc_limit<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let place = CommandBody::Place;
    h.reject(place(m.buy(a, 100, 1).with_post_only().with_tif(Tif::Ioc)), Reject::PostOnlyRequiresGtcLimit);
    h.reject(place(m.buy(a, 100, 1).with_post_only().with_tif(Tif::Fok)), Reject::PostOnlyRequiresGtcLimit);
    h.reject(place(m.market_sell(a, 1).with_post_only()), Reject::PostOnlyRequiresGtcLimit);
    h.reject(place(m.stop_limit(a, Side::Buy, 100, 100, 1).with_post_only()), Reject::PostOnlyRequiresGtcLimit);
}

fn iceberg_depth_shows_only_the_displayed_slice<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let a = m.accounts[0];
    let request = m.sell(a, 100, 20).with_display(5);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![m.accepted(id, &request, h.ts), m.acme_balance(a, ACME_START - 20, 20), m.rested(id, Side::Sell, 100, 5)]
    );
    h.place_ok(m.sell(a, 100, 3));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 8)]));
    let view = h.order_view(id);
    assert_eq!((view.qty_open, view.qty_visible), (Qty(20), Qty(5)));
}

fn iceberg_refresh_loses_priority<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let iceberg = h.place_ok(m.sell(a, 100, 15).with_display(5));
    let plain = h.place_ok(m.sell(c, 100, 5));
    let request = m.buy(b, 100, 5);
    let first = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(first, &request, h.ts),
            m.usd_balance(b, USD_START - 500, 500),
            m.trade(Side::Buy, (100, 5), (iceberg, a), (first, b), (0, 0), false),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 15, 10),
            m.usd_balance(b, USD_START - 500, 0),
            m.acme_balance(b, ACME_START + 5, 0),
            Event::Refreshed { order: iceberg, qty_visible: Qty(5) },
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 10)]));
    // The refreshed slice went behind c's order.
    let second = h.place_ok(m.buy(b, 100, 5));
    assert_eq!(h.trades(), vec![(plain, second, 100, 5)]);
    let third = h.place_ok(m.buy(b, 100, 5));
    assert_eq!(h.trades(), vec![(iceberg, third, 100, 5)]);
}

fn iceberg_last_slice_is_what_is_left_of_the_reserve<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let iceberg = h.place_ok(m.sell(a, 100, 12).with_display(5));
    let id = h.place_ok(m.buy(b, 100, 12));
    let trades_and_refreshes: Vec<Event> =
        h.events.iter().filter(|e| matches!(e, Event::Trade { .. } | Event::Refreshed { .. })).copied().collect();
    assert_eq!(
        trades_and_refreshes,
        vec![
            m.trade(Side::Buy, (100, 5), (iceberg, a), (id, b), (0, 0), false),
            Event::Refreshed { order: iceberg, qty_visible: Qty(5) },
            m.trade(Side::Buy, (100, 5), (iceberg, a), (id, b), (0, 0), false),
            Event::Refreshed { order: iceberg, qty_visible: Qty(2) },
            m.trade(Side::Buy, (100, 2), (iceberg, a), (id, b), (0, 0), true),
        ]
    );
    assert_eq!(h.order_view(iceberg).record.status, OrderStatus::Filled);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

fn iceberg_shape_rules<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = common::market_with(&mut h, common::MarketOptions { lot: 5, accounts: 1, ..Default::default() });
    let a = m.accounts[0];
    let place = CommandBody::Place;
    h.reject(place(m.sell(a, 100, 20).with_display(0)), Reject::DisplayQtyInvalid);
    h.reject(place(m.sell(a, 100, 20).with_display(-5)), Reject::DisplayQtyInvalid);
    h.reject(place(m.sell(a, 100, 20).with_display(7)), Reject::DisplayQtyInvalid);
    h.reject(place(m.sell(a, 100, 20).with_display(25)), Reject::DisplayQtyInvalid);
    h.reject(place(m.sell(a, 100, 20).with_display(5).with_tif(Tif::Ioc)), Reject::IcebergRequiresGtcLimit);
    h.reject(place(m.market_sell(a, 20).with_display(5)), Reject::IcebergRequiresGtcLimit);
    h.reject(place(m.stop_limit(a, Side::Sell, 100, 100, 20).with_display(5)), Reject::IcebergRequiresGtcLimit);
    // Showing everything is allowed.
    let id = h.place_ok(m.sell(a, 100, 20).with_display(20));
    assert_eq!(h.order_view(id).qty_visible, Qty(20));
}

fn price_improvement_on_a_buy_is_released_at_once<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let request = m.buy(b, 105, 10);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_070, 1_070),
            m.trade(Side::Buy, (100, 10), (ask, a), (id, b), (10, 20), true),
            m.usd_balance(a, USD_START + 990, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            // (105 − 100)·10 comes back in the same step.
            m.usd_balance(b, USD_START - 1_020, 0),
            m.acme_balance(b, ACME_START + 10, 0),
        ]
    );
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 30);
}

fn resting_buy_gets_taker_minus_maker_fee_back<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    // The bid holds the taker fee (2 a lot) in case it ever takes; as a maker it pays 1.
    let bid = h.place_ok(m.buy(b, 100, 10));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 1_020, 1_020));
    let id = h.place_ok(m.sell(a, 100, 10));
    assert_eq!(
        h.events[2..],
        [
            m.trade(Side::Sell, (100, 10), (bid, b), (id, a), (10, 20), true),
            m.usd_balance(b, USD_START - 1_010, 0),
            m.acme_balance(b, ACME_START + 10, 0),
            m.usd_balance(a, USD_START + 980, 0),
            m.acme_balance(a, ACME_START - 10, 0),
        ]
    );
}

fn market_buy_whose_budget_cannot_pay_one_lot_with_fee_trades_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 1, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 10));
    // One share costs 100 plus a taker fee of 1.
    let request = m.market_buy(b, 10, 100);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 100, 100),
            Event::Cancelled { order: id, qty_cancelled: Qty(10), reason: CancelReason::BudgetExhausted },
            m.usd_balance(b, USD_START, 0),
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 10)]));
}

fn fok_sell_is_all_or_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let high = h.place_ok(m.buy(a, 101, 4));
    let low = h.place_ok(m.buy(a, 99, 4));
    h.reject(CommandBody::Place(m.sell(b, 100, 5).with_tif(Tif::Fok)), Reject::FokCannotFill);
    h.reject(CommandBody::Place(m.market_sell(b, 9).with_tif(Tif::Fok)), Reject::FokCannotFill);
    let id = h.place_ok(m.sell(b, 99, 8).with_tif(Tif::Fok));
    assert_eq!(h.trades(), vec![(high, id, 101, 4), (low, id, 99, 4)]);
    assert_eq!(h.balance_of(b, m.usd), (USD_START + 800, 0));
}

fn sell_limit_trades_at_the_resting_bid_price<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let bid = h.place_ok(m.buy(a, 100, 10));
    let request = m.sell(b, 95, 10);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.acme_balance(b, ACME_START - 10, 10),
            m.trade(Side::Sell, (100, 10), (bid, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START - 1_000, 0),
            m.acme_balance(a, ACME_START + 10, 0),
            m.usd_balance(b, USD_START + 1_000, 0),
            m.acme_balance(b, ACME_START - 10, 0),
        ]
    );
}

//! Scenarios for how fills are decided and settled: self-trade prevention under FIFO
//! and pro-rata, fees (zero, positive, maker rebates, per lot) and the pro-rata split
//! with its remainder rule. Run against both books.
//!
//! Every account starts with 1,000,000 USD cents and 10,000 ACME.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy, Stp, Tif};
use bourse_engine::{CancelReason, Event, OrderStatus, Qty, Reject, Side};
use common::{market, market_fees, market_with, Harness, MarketOptions, OrderRequestExt, ACME_START, USD_START};

both_books!(
    stp_cancel_resting_cancels_own_order_and_keeps_matching,
    stp_default_is_cancel_resting,
    stp_cancel_incoming_cancels_the_rest_of_the_incoming_order,
    stp_allow_trades_with_own_order_and_pays_both_fees,
    stp_cancel_resting_cancels_an_own_iceberg_with_its_reserve,
    pro_rata_stp_cancel_resting_cancels_every_own_order_at_the_level,
    pro_rata_stp_cancel_incoming_stops_at_a_level_holding_an_own_order,
    pro_rata_stp_allow_includes_own_orders_in_the_split,
    pro_rata_fok_cancel_incoming_rejects_when_a_needed_level_holds_an_own_order,
    pro_rata_fok_cancel_resting_ignores_own_orders,
    pro_rata_fok_allow_counts_own_orders,
    best_price_is_found_across_price_blocks,
    zero_fees_move_exactly_the_notional,
    maker_and_taker_fees_are_charged_and_collected,
    negative_maker_fee_is_a_rebate_to_a_resting_seller,
    negative_maker_fee_is_a_rebate_to_a_resting_buyer,
    rebate_equal_to_taker_fee_leaves_the_exchange_nothing,
    fees_are_charged_per_lot,
    pro_rata_split_rounds_down_and_gives_the_remainder_to_the_first_in_time,
    pro_rata_remainder_goes_in_time_order_up_to_each_visible_qty,
    pro_rata_allocates_whole_lots,
    pro_rata_fills_a_whole_level_before_the_next,
    pro_rata_splits_by_displayed_qty_of_icebergs,
    pro_rata_market_buy_stops_when_budget_is_spent,
);

fn stp_cancel_resting_cancels_own_order_and_keeps_matching<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let own = h.place_ok(m.sell(b, 100, 5));
    let other = h.place_ok(m.sell(a, 100, 5));
    let request = m.buy(b, 100, 5).with_stp(Stp::CancelResting);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 500, 500),
            Event::Cancelled { order: own, qty_cancelled: Qty(5), reason: CancelReason::SelfTrade },
            m.acme_balance(b, ACME_START, 0),
            m.trade(Side::Buy, (100, 5), (other, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 5, 0),
            m.usd_balance(b, USD_START - 500, 0),
            m.acme_balance(b, ACME_START + 5, 0),
        ]
    );
    assert_eq!(h.order_view(own).record.status, OrderStatus::Cancelled);
}

fn stp_default_is_cancel_resting<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let b = m.accounts[1];
    let own = h.place_ok(m.sell(b, 100, 5));
    let id = h.place_ok(m.buy(b, 100, 5));
    assert!(h.trades().is_empty());
    assert!(h.events.contains(&Event::Cancelled {
        order: own,
        qty_cancelled: Qty(5),
        reason: CancelReason::SelfTrade
    }));
    assert_eq!(h.order_view(id).record.status, OrderStatus::Open);
    assert_eq!(h.depth_of(m.sym), (vec![(100, 5)], vec![]));
}

fn stp_cancel_incoming_cancels_the_rest_of_the_incoming_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let first = h.place_ok(m.sell(a, 100, 5));
    let own = h.place_ok(m.sell(b, 100, 5));
    let behind = h.place_ok(m.sell(a, 100, 5));
    let request = m.buy(b, 100, 15).with_stp(Stp::CancelIncoming);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_500, 1_500),
            m.trade(Side::Buy, (100, 5), (first, a), (id, b), (0, 0), true),
            m.usd_balance(a, USD_START + 500, 0),
            m.acme_balance(a, ACME_START - 10, 5),
            m.usd_balance(b, USD_START - 1_500, 1_000),
            m.acme_balance(b, ACME_START, 5),
            // A GTC order stopped by self-trade prevention does not rest.
            Event::Cancelled { order: id, qty_cancelled: Qty(10), reason: CancelReason::SelfTrade },
            m.usd_balance(b, USD_START - 500, 0),
        ]
    );
    assert_eq!(h.order_view(own).record.status, OrderStatus::Open);
    assert_eq!(h.order_view(behind).record.status, OrderStatus::Open);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 10)]));
}

fn stp_allow_trades_with_own_order_and_pays_both_fees<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 1);
    let b = m.accounts[0];
    let own = h.place_ok(m.sell(b, 100, 5));
    let request = m.buy(b, 100, 5).with_stp(Stp::Allow);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 510, 510),
            m.trade(Side::Buy, (100, 5), (own, b), (id, b), (5, 10), true),
            m.usd_balance(b, USD_START - 15, 0),
            m.acme_balance(b, ACME_START, 0),
            m.usd_balance(b, USD_START - 15, 0),
            m.acme_balance(b, ACME_START, 0),
        ]
    );
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 15);
}

fn pro_rata_stp_cancel_resting_cancels_every_own_order_at_the_level<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let first = h.place_ok(m.sell(a, 100, 6));
    let own = h.place_ok(m.sell(b, 100, 2));
    let third = h.place_ok(m.sell(c, 100, 4));
    let own_later = h.place_ok(m.sell(b, 100, 1));
    let id = h.place_ok(m.buy(b, 100, 5).with_stp(Stp::CancelResting));
    assert_eq!(
        h.events[2..6],
        [
            Event::Cancelled { order: own, qty_cancelled: Qty(2), reason: CancelReason::SelfTrade },
            m.acme_balance(b, ACME_START - 1, 1),
            Event::Cancelled { order: own_later, qty_cancelled: Qty(1), reason: CancelReason::SelfTrade },
            m.acme_balance(b, ACME_START, 0),
        ]
    );
    // The rest of the level (6 and 4) shares 5: 3 and 2.
    assert_eq!(h.trades(), vec![(first, id, 100, 3), (third, id, 100, 2)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 5)]));
}

fn pro_rata_stp_cancel_incoming_stops_at_a_level_holding_an_own_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let better = h.place_ok(m.sell(a, 99, 3));
    let other = h.place_ok(m.sell(a, 100, 6));
    h.place_ok(m.sell(b, 100, 2));
    let id = h.place_ok(m.buy(b, 100, 5).with_stp(Stp::CancelIncoming));
    // Under pro-rata the whole level at 100 would include b's order, so it is not
    // touched at all, though a's 6 rest there ahead of b's.
    assert_eq!(h.trades(), vec![(better, id, 99, 3)]);
    assert_eq!(
        h.events[h.events.len() - 2..],
        [
            Event::Cancelled { order: id, qty_cancelled: Qty(2), reason: CancelReason::SelfTrade },
            m.usd_balance(b, USD_START - 297, 0),
        ]
    );
    assert_eq!(h.order_view(other).qty_open, Qty(6));
}

fn pro_rata_stp_allow_includes_own_orders_in_the_split<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let other = h.place_ok(m.sell(a, 100, 6));
    let own = h.place_ok(m.sell(b, 100, 4));
    let id = h.place_ok(m.buy(b, 100, 5).with_stp(Stp::Allow));
    assert_eq!(h.trades(), vec![(other, id, 100, 3), (own, id, 100, 2)]);
    // b sold 2 to itself, bought 3 from a, and still offers 2.
    assert_eq!(h.balance_of(b, m.acme), (ACME_START - 4 + 5, 2));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 300, 0));
}

fn pro_rata_fok_cancel_incoming_rejects_when_a_needed_level_holds_an_own_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 10));
    h.place_ok(m.sell(b, 100, 5));
    let fok = m.buy(b, 100, 5).with_tif(Tif::Fok).with_stp(Stp::CancelIncoming);
    h.reject(CommandBody::Place(fok), Reject::FokCannotFill);
}

fn zero_fees_move_exactly_the_notional<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let id = h.place_ok(m.buy(b, 100, 10));
    assert_eq!(h.events[2], m.trade(Side::Buy, (100, 10), (ask, a), (id, b), (0, 0), true));
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 1_000, 0));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 1_000, 0));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 0);
}

fn maker_and_taker_fees_are_charged_and_collected<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 1, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let request = m.buy(b, 100, 10);
    let id = h.place_ok(request);
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(b, USD_START - 1_020, 1_020),
            m.trade(Side::Buy, (100, 10), (ask, a), (id, b), (10, 20), true),
            m.usd_balance(a, USD_START + 990, 0),
            m.acme_balance(a, ACME_START - 10, 0),
            m.usd_balance(b, USD_START - 1_020, 0),
            m.acme_balance(b, ACME_START + 10, 0),
        ]
    );
    let usd = h.engine.asset_info(m.usd).unwrap();
    assert_eq!((usd.fees.0, usd.supply.0), (30, 2 * USD_START));
    assert_eq!(h.engine.asset_info(m.acme).unwrap().fees.0, 0);
    // The order records carry each side's fee.
    assert_eq!(h.order_view(ask).record.fills[0].fee.0, 10);
    assert_eq!(h.order_view(id).record.fills[0].fee.0, 20);
}

fn negative_maker_fee_is_a_rebate_to_a_resting_seller<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, -1, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 10));
    let id = h.place_ok(m.buy(b, 100, 10));
    assert_eq!(h.events[2], m.trade(Side::Buy, (100, 10), (ask, a), (id, b), (-10, 20), true));
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 1_010, 0));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 1_020, 0));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 10);
}

fn negative_maker_fee_is_a_rebate_to_a_resting_buyer<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, -1, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let bid = h.place_ok(m.buy(b, 100, 10));
    let id = h.place_ok(m.sell(a, 100, 10));
    assert_eq!(
        h.events[2..],
        [
            m.trade(Side::Sell, (100, 10), (bid, b), (id, a), (-10, 20), true),
            // Held 1,020 (taker fee included); pays 1,000 less a rebate of 10.
            m.usd_balance(b, USD_START - 990, 0),
            m.acme_balance(b, ACME_START + 10, 0),
            m.usd_balance(a, USD_START + 980, 0),
            m.acme_balance(a, ACME_START - 10, 0),
        ]
    );
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 10);
}

fn rebate_equal_to_taker_fee_leaves_the_exchange_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, -2, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 10));
    h.place_ok(m.buy(b, 100, 10));
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 1_020, 0));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 1_020, 0));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 0);
}

fn fees_are_charged_per_lot<B: Book>() {
    let mut h = Harness::<B>::default();
    let options = MarketOptions { lot: 10, px_min: 10, fee_maker: 3, fee_taker: 5, accounts: 2, ..Default::default() };
    let m = market_with(&mut h, options);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 100, 30));
    let id = h.place_ok(m.buy(b, 100, 30));
    assert_eq!(h.events[1], m.usd_balance(b, USD_START - 3_015, 3_015));
    assert_eq!(h.events[2], m.trade(Side::Buy, (100, 30), (ask, a), (id, b), (9, 15), true));
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 2_991, 0));
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 3_015, 0));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().fees.0, 24);
}

fn pro_rata_split_rounds_down_and_gives_the_remainder_to_the_first_in_time<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 4);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let five = h.place_ok(m.sell(a, 100, 5));
    let three = h.place_ok(m.sell(b, 100, 3));
    let two = h.place_ok(m.sell(c, 100, 2));
    let request = m.buy(d, 100, 7);
    let id = h.place_ok(request);
    // Floors of 7·5/10, 7·3/10, 7·2/10 are 3, 2, 1; the lot left goes to the first.
    assert_eq!(
        h.events,
        vec![
            m.accepted(id, &request, h.ts),
            m.usd_balance(d, USD_START - 700, 700),
            m.trade(Side::Buy, (100, 4), (five, a), (id, d), (0, 0), false),
            m.usd_balance(a, USD_START + 400, 0),
            m.acme_balance(a, ACME_START - 5, 1),
            m.usd_balance(d, USD_START - 700, 300),
            m.acme_balance(d, ACME_START + 4, 0),
            m.trade(Side::Buy, (100, 2), (three, b), (id, d), (0, 0), false),
            m.usd_balance(b, USD_START + 200, 0),
            m.acme_balance(b, ACME_START - 3, 1),
            m.usd_balance(d, USD_START - 700, 100),
            m.acme_balance(d, ACME_START + 6, 0),
            m.trade(Side::Buy, (100, 1), (two, c), (id, d), (0, 0), false),
            m.usd_balance(c, USD_START + 100, 0),
            m.acme_balance(c, ACME_START - 2, 1),
            m.usd_balance(d, USD_START - 700, 0),
            m.acme_balance(d, ACME_START + 7, 0),
        ]
    );
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 3)]));
}

fn pro_rata_remainder_goes_in_time_order_up_to_each_visible_qty<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 4);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    // 1, 1, 8 sharing 5: floors 0, 0, 4; the one left goes to the first order.
    let one = h.place_ok(m.sell(a, 100, 1));
    let other_one = h.place_ok(m.sell(b, 100, 1));
    let eight = h.place_ok(m.sell(c, 100, 8));
    let id = h.place_ok(m.buy(d, 100, 5));
    assert_eq!(h.trades(), vec![(one, id, 100, 1), (eight, id, 100, 4)]);
    // Now 1 (b) and 4 (c) share 2: floors 0 and 1; b gets the other.
    let id = h.place_ok(m.buy(d, 100, 2));
    assert_eq!(h.trades(), vec![(other_one, id, 100, 1), (eight, id, 100, 1)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 3)]));
}

fn pro_rata_allocates_whole_lots<B: Book>() {
    let mut h = Harness::<B>::default();
    let m =
        market_with(&mut h, MarketOptions { lot: 10, policy: MatchPolicy::ProRata, accounts: 4, ..Default::default() });
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let fifty = h.place_ok(m.sell(a, 100, 50));
    let thirty = h.place_ok(m.sell(b, 100, 30));
    let twenty = h.place_ok(m.sell(c, 100, 20));
    // 7 lots over 5, 3, 2 lots: floors 3, 2, 1 lots; the lot left goes to the first.
    let id = h.place_ok(m.buy(d, 100, 70));
    assert_eq!(h.trades(), vec![(fifty, id, 100, 40), (thirty, id, 100, 20), (twenty, id, 100, 10)]);
    // 1, 1, 1 lots left sharing 2 lots: floors 0; the two lots go to the first two.
    let id = h.place_ok(m.buy(d, 100, 20));
    assert_eq!(h.trades(), vec![(fifty, id, 100, 10), (thirty, id, 100, 10)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 10)]));
}

fn pro_rata_fills_a_whole_level_before_the_next<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 4);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let first = h.place_ok(m.sell(a, 100, 5));
    let second = h.place_ok(m.sell(b, 100, 5));
    let next = h.place_ok(m.sell(c, 101, 10));
    let id = h.place_ok(m.buy(d, 101, 15));
    assert_eq!(h.trades(), vec![(first, id, 100, 5), (second, id, 100, 5), (next, id, 101, 5)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(101, 5)]));
}

fn pro_rata_splits_by_displayed_qty_of_icebergs<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 3);
    let (a, b, d) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let iceberg = h.place_ok(m.sell(a, 100, 20).with_display(4));
    let plain = h.place_ok(m.sell(b, 100, 6));
    // Shown: 4 and 6. Sharing 5: 2 and 3.
    let id = h.place_ok(m.buy(d, 100, 5));
    assert_eq!(h.trades(), vec![(iceberg, id, 100, 2), (plain, id, 100, 3)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 5)]));
    // Shown: 2 and 3; 5 takes both, and the iceberg shows a new slice.
    let id = h.place_ok(m.buy(d, 100, 5));
    assert_eq!(h.trades(), vec![(iceberg, id, 100, 2), (plain, id, 100, 3)]);
    assert!(h.events.contains(&Event::Refreshed { order: iceberg, qty_visible: Qty(4) }));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 4)]));
    assert_eq!(h.order_view(iceberg).qty_open, Qty(16));
}

fn pro_rata_market_buy_stops_when_budget_is_spent<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 3);
    let (a, b, d) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let first = h.place_ok(m.sell(a, 100, 5));
    let second = h.place_ok(m.sell(b, 100, 5));
    // 700 buys 7 at 100: floors 3 and 3, the one left to the first.
    let id = h.place_ok(m.market_buy(d, 10, 700));
    assert_eq!(h.trades(), vec![(first, id, 100, 4), (second, id, 100, 3)]);
    // Nothing of the budget is left to release.
    assert_eq!(
        h.events.last(),
        Some(&Event::Cancelled { order: id, qty_cancelled: Qty(3), reason: CancelReason::BudgetExhausted })
    );
    assert_eq!(h.balance_of(d, m.usd), (USD_START - 700, 0));
}

fn stp_cancel_resting_cancels_an_own_iceberg_with_its_reserve<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let own = h.place_ok(m.sell(b, 100, 20).with_display(5));
    let other = h.place_ok(m.sell(a, 100, 5));
    let id = h.place_ok(m.buy(b, 100, 5));
    assert_eq!(
        h.events[2..4],
        [
            Event::Cancelled { order: own, qty_cancelled: Qty(20), reason: CancelReason::SelfTrade },
            m.acme_balance(b, ACME_START, 0),
        ]
    );
    assert_eq!(h.trades(), vec![(other, id, 100, 5)]);
}

fn pro_rata_fok_cancel_resting_ignores_own_orders<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let other = h.place_ok(m.sell(a, 100, 10));
    let own = h.place_ok(m.sell(b, 100, 5));
    let too_much = m.buy(b, 100, 11).with_tif(Tif::Fok).with_stp(Stp::CancelResting);
    h.reject(CommandBody::Place(too_much), Reject::FokCannotFill);
    assert_eq!(h.order_view(own).record.status, OrderStatus::Open);
    let id = h.place_ok(m.buy(b, 100, 10).with_tif(Tif::Fok).with_stp(Stp::CancelResting));
    assert_eq!(h.trades(), vec![(other, id, 100, 10)]);
    assert_eq!(h.order_view(own).record.status, OrderStatus::Cancelled);
}

fn pro_rata_fok_allow_counts_own_orders<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::ProRata, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let other = h.place_ok(m.sell(a, 100, 10));
    let own = h.place_ok(m.sell(b, 100, 5));
    h.reject(CommandBody::Place(m.buy(b, 100, 16).with_tif(Tif::Fok).with_stp(Stp::Allow)), Reject::FokCannotFill);
    let id = h.place_ok(m.buy(b, 100, 15).with_tif(Tif::Fok).with_stp(Stp::Allow));
    assert_eq!(h.trades(), vec![(other, id, 100, 10), (own, id, 100, 5)]);
}

/// The fast book keeps prices in blocks of 64; levels at block edges (63/64, 127/128)
/// must be found as the best price empties, on both sides.
fn best_price_is_found_across_price_blocks<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let bids = [1, 63, 64, 127, 128, 200];
    let ids: Vec<_> = bids.iter().map(|&px| h.place_ok(m.buy(a, px, 1))).collect();
    assert_eq!(h.depth_of(m.sym).0, vec![(200, 1), (128, 1), (127, 1), (64, 1), (63, 1), (1, 1)]);
    h.ok(m.cancel(a, ids[2]));
    for expected in [Some(128), Some(127), Some(63), Some(1), None] {
        h.place_ok(m.sell(b, 1, 1).with_tif(Tif::Ioc));
        assert_eq!(h.engine.best(m.sym, Side::Buy).map(|px| px.0), expected);
    }
    let asks = [63, 64, 127, 128, 1_000];
    let ids: Vec<_> = asks.iter().map(|&px| h.place_ok(m.sell(a, px, 1))).collect();
    assert_eq!(h.depth_of(m.sym).1, vec![(63, 1), (64, 1), (127, 1), (128, 1), (1_000, 1)]);
    h.ok(m.cancel(a, ids[3]));
    for expected in [Some(64), Some(127), Some(1_000), None] {
        h.place_ok(m.buy(b, 1_000_000, 1).with_tif(Tif::Ioc));
        assert_eq!(h.engine.best(m.sym, Side::Sell).map(|px| px.0), expected);
    }
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

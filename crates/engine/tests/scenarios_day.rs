//! Scenarios for Day orders and the close of the trading day (`CloseDay`): a Day order
//! is exactly a GTC order until the close, which expires every open Day order (resting
//! ones, partly filled ones for their remainder, icebergs with their hidden part,
//! pending Day stops) by symbol then order id, releasing each hold as a cancel would,
//! and leaves GTC orders alone. Run against both books.

#[macro_use]
mod common;

use bourse_engine::book::{Book, FastBook, ReferenceBook};
use bourse_engine::command::{CommandBody, MatchPolicy, OrderKind, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, AssetId, CancelReason, ClientId, Engine, Event, OrderId, OrderStatus, Outcome, Px, Qty, Reject,
    Side, SymbolId,
};
use common::{market, market_fees, Harness, Market, Observable, OrderRequestExt, ACME_START, USD_START};

both_books!(
    day_orders_behave_exactly_like_gtc_until_the_close,
    close_day_expires_resting_day_orders_and_releases_their_holds,
    close_day_expires_only_the_remainder_of_a_partly_filled_day_order,
    close_day_expires_an_iceberg_with_its_hidden_part,
    close_day_expires_pending_day_stops_and_leaves_gtc_stops,
    close_day_expires_a_triggered_day_stop_resting_in_the_book,
    a_moved_day_order_stays_a_day_order,
    close_day_goes_by_symbol_then_order_id,
    a_second_close_expires_nothing,
    a_day_order_placed_after_the_close_lives_until_the_next,
    a_suspended_accounts_day_orders_expire_too,
    close_day_continues_identically_after_a_snapshot_restore,
    day_shape_rules,
);

fn day(request: OrderRequest) -> OrderRequest {
    request.with_tif(Tif::Day)
}

fn expired(order: OrderId, qty: i64) -> Event {
    Event::Cancelled { order, qty_cancelled: Qty(qty), reason: CancelReason::Expired }
}

/// Closes the day and returns how many orders expired.
fn close<B: Book>(h: &mut Harness<B>) -> u64 {
    h.ok(CommandBody::CloseDay)
}

/// A script of every order kind that rests, with `tif` on each order that could rest
/// (post-only, iceberg, a crossing move, a reduce, a stop-limit that fires and rests);
/// returns every command's events and the final state with each order's time in force
/// blanked out (the one thing that may differ).
fn resting_script<B: Book>(tif: Tif) -> (Vec<Vec<Event>>, Observable) {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 0, 1, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    let mut events = Vec::new();
    let mut step = |h: &mut Harness<B>, body: CommandBody| {
        h.ok(body);
        events.push(h.events.clone());
    };
    step(&mut h, CommandBody::Place(m.sell(a, 101, 10).with_display(4).with_tif(tif)));
    step(&mut h, CommandBody::Place(m.buy(b, 99, 5).with_post_only().with_tif(tif)));
    // Takes the iceberg's slice of 4, then 2 of the next slice.
    step(&mut h, CommandBody::Place(m.buy(c, 101, 6).with_tif(tif)));
    step(&mut h, CommandBody::Place(m.buy(c, 100, 8).with_tif(tif)));
    // Crosses: trades the iceberg's last 4 and rests the other 4 at 101.
    step(&mut h, m.move_to(c, OrderId(4), 101));
    step(&mut h, m.reduce(b, OrderId(2), 2));
    step(&mut h, CommandBody::Place(m.stop_limit(b, Side::Buy, 102, 103, 2).with_tif(tif)));
    step(&mut h, CommandBody::Place(m.sell(a, 102, 1)));
    // Last trade at 102 fires the stop-limit, which finds no ask and rests at 103.
    step(&mut h, CommandBody::Place(m.buy(c, 102, 1).with_tif(Tif::Ioc)));
    let mut observable = h.observable();
    for view in &mut observable.orders {
        view.record.tif = Tif::Gtc;
    }
    (events, observable)
}

fn day_orders_behave_exactly_like_gtc_until_the_close<B: Book>() {
    let (gtc_events, gtc_state) = resting_script::<B>(Tif::Gtc);
    let (day_events, day_state) = resting_script::<B>(Tif::Day);
    assert_eq!(day_events, gtc_events);
    assert_eq!(day_state, gtc_state);
    // The script did what it says: trades, a refresh, a stop that fired and rested.
    let all: Vec<&Event> = day_events.iter().flatten().collect();
    assert!(all.iter().any(|e| matches!(e, Event::Refreshed { .. })));
    assert!(all.iter().any(|e| matches!(e, Event::Triggered { .. })));
    assert!(all.iter().filter(|e| matches!(e, Event::Trade { .. })).count() >= 4);
    let open = day_state.orders.iter().filter(|v| v.record.status == OrderStatus::Open).count();
    assert_eq!(open, 3, "{:?}", day_state.orders);
}

fn close_day_expires_resting_day_orders_and_releases_their_holds<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 0, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let buy = h.place_ok(day(m.buy(a, 100, 10)));
    let sell = h.place_ok(day(m.sell(b, 110, 5)));
    let gtc = h.place_ok(m.buy(b, 99, 3));
    // 10 × 100 plus the taker fee of 2 a lot.
    assert_eq!(h.balance_of(a, m.usd), (USD_START - 1_020, 1_020));
    assert_eq!(h.balance_of(b, m.acme), (ACME_START - 5, 5));

    assert_eq!(close(&mut h), 2);
    assert_eq!(
        h.events,
        vec![expired(buy, 10), m.usd_balance(a, USD_START, 0), expired(sell, 5), m.acme_balance(b, ACME_START, 0),]
    );
    assert_eq!(h.depth_of(m.sym), (vec![(99, 3)], vec![]));
    let view = h.order_view(buy);
    assert_eq!((view.record.status, view.record.ts_closed, view.qty_cancelled), (OrderStatus::Expired, h.ts, Qty(10)));
    assert_eq!((view.qty_open, view.px_resting), (Qty::ZERO, None));
    assert_eq!(h.order_view(gtc).record.status, OrderStatus::Open);
    assert_eq!(h.balance_of(b, m.usd), (USD_START - 303, 303), "the GTC order keeps its hold");
    assert_eq!(h.engine.open_orders(a), vec![]);
    // An expired order is gone: cancelling it is refused like any closed order.
    h.reject(m.cancel(a, buy), Reject::OrderUnknown);
}

fn close_day_expires_only_the_remainder_of_a_partly_filled_day_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_fees(&mut h, 0, 2, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let buy = h.place_ok(day(m.buy(a, 100, 10)));
    h.place_ok(m.sell(b, 100, 4).with_tif(Tif::Ioc));
    // The maker pays 4 × 100 and no fee (maker fee 0, so the taker fee it held for 4
    // lots comes back); 6 lots stay reserved with their taker fee.
    assert_eq!(h.balance_of(a, m.usd), (USD_START - 400 - 612, 612));

    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events, vec![expired(buy, 6), m.usd_balance(a, USD_START - 400, 0)]);
    let view = h.order_view(buy);
    assert_eq!(
        (view.record.status, view.record.qty_filled, view.qty_cancelled),
        (OrderStatus::Expired, Qty(4), Qty(6))
    );
    assert_eq!(view.record.fills.len(), 1);
    assert_eq!(h.balance_of(a, m.acme), (ACME_START + 4, 0));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
}

fn close_day_expires_an_iceberg_with_its_hidden_part<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ice = h.place_ok(day(m.sell(a, 100, 10)).with_display(3));
    h.place_ok(m.buy(b, 100, 4).with_tif(Tif::Ioc));
    assert!(h.events.iter().any(|e| matches!(e, Event::Refreshed { .. })));
    assert_eq!(h.depth_of(m.sym), (vec![], vec![(100, 2)]));

    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events, vec![expired(ice, 6), m.acme_balance(a, ACME_START - 4, 0)]);
    assert_eq!(h.depth_of(m.sym), (vec![], vec![]));
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 400, 0));
}

/// A market with four accounts where one share traded at 100.
fn market_at_100<B: Book>(h: &mut Harness<B>) -> Market {
    let m = market_fees(h, 1, 2, 4);
    m.trade_at(h, m.accounts[0], m.accounts[3], 100, 1);
    m
}

fn close_day_expires_pending_day_stops_and_leaves_gtc_stops<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c, d) = (m.accounts[0], m.accounts[1], m.accounts[2], m.accounts[3]);
    let usd_b = h.balance_of(b, m.usd).0;
    let day_buy = h.place_ok(day(m.stop_limit(b, Side::Buy, 105, 106, 5)));
    let day_sell = h.place_ok(day(m.stop_limit(b, Side::Sell, 90, 89, 7)));
    let gtc_buy = h.place_ok(m.stop_limit(c, Side::Buy, 105, 106, 2));
    assert_eq!(h.balance_of(b, m.usd), (usd_b - 540, 540));

    assert_eq!(close(&mut h), 2);
    assert_eq!(
        h.events,
        vec![expired(day_buy, 5), m.usd_balance(b, usd_b, 0), expired(day_sell, 7), m.acme_balance(b, ACME_START, 0),]
    );
    assert_eq!(h.order_view(day_buy).record.status, OrderStatus::Expired);
    assert_eq!(h.order_view(gtc_buy).record.status, OrderStatus::Pending);

    // A trade at 105 fires only the GTC stop.
    h.place_ok(m.sell(a, 105, 3));
    h.place_ok(m.buy(d, 105, 1));
    let fired: Vec<&Event> = h.events.iter().filter(|e| matches!(e, Event::Triggered { .. })).collect();
    assert_eq!(fired, vec![&Event::Triggered { order: gtc_buy, last_px: Px(105) }]);
    assert_eq!(h.order_view(gtc_buy).record.status, OrderStatus::Filled);
}

fn close_day_expires_a_triggered_day_stop_resting_in_the_book<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, d) = (m.accounts[0], m.accounts[1], m.accounts[3]);
    let stop = h.place_ok(day(m.stop_limit(b, Side::Buy, 101, 101, 5)));
    // The trade at 102 fires the stop; its limit of 101 finds nothing and it rests.
    h.place_ok(m.sell(a, 102, 1));
    h.place_ok(m.buy(d, 102, 1));
    assert_eq!(h.order_view(stop).record.status, OrderStatus::Open);
    assert_eq!(h.depth_of(m.sym).0, vec![(101, 5)]);

    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events[0], expired(stop, 5));
    assert_eq!(h.balance_of(b, m.usd).1, 0);
}

fn a_moved_day_order_stays_a_day_order<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let ask = h.place_ok(m.sell(a, 105, 2));
    let buy = h.place_ok(day(m.buy(b, 100, 5)));
    h.ok(m.move_to(b, buy, 101));
    // A crossing move trades 2 and rests the other 3 at 105: still a Day order.
    h.ok(m.move_to(b, buy, 105));
    assert_eq!(h.trades(), vec![(ask, buy, 105, 2)]);
    let view = h.order_view(buy);
    assert_eq!((view.record.tif, view.record.status, view.px_resting), (Tif::Day, OrderStatus::Open, Some(Px(105))));

    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events, vec![expired(buy, 3), m.usd_balance(b, USD_START - 210, 0)]);
}

fn close_day_goes_by_symbol_then_order_id<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let beta = AssetId(h.ok(CommandBody::CreateAsset { name: "BETA".into(), decimals: 0 }) as u32);
    let other = SymbolId(h.ok(CommandBody::CreateSymbol(Box::new(SymbolSpec {
        name: "BETA/USD".into(),
        base: beta,
        quote: m.usd,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::ProRata,
    }))) as u32);
    let on_other = |account: AccountId, px: i64, qty: i64| {
        OrderRequest::limit(account, other, Side::Buy, Px(px), Qty(qty), Tif::Day)
    };
    // Placed alternating between the two books, newest ids on the first symbol.
    let o1 = h.place_ok(on_other(a, 50, 1));
    let s1 = h.place_ok(day(m.buy(b, 90, 1)));
    let o2 = h.place_ok(on_other(b, 51, 2));
    let s2 = h.place_ok(day(m.sell(a, 120, 3)));
    let s3 = h.place_ok(day(m.buy(a, 91, 4)));

    assert_eq!(close(&mut h), 5);
    let order: Vec<OrderId> = h
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Cancelled { order, reason: CancelReason::Expired, .. } => Some(*order),
            _ => None,
        })
        .collect();
    assert_eq!(order, vec![s1, s2, s3, o1, o2]);
    assert_eq!(h.engine.orders_resting(), 0);
}

fn a_second_close_expires_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.place_ok(day(m.buy(a, 100, 1)));
    let gtc = h.place_ok(m.buy(a, 99, 1));
    assert_eq!(close(&mut h), 1);
    let after_first = h.observable();
    assert_eq!(close(&mut h), 0);
    assert_eq!(h.events, vec![]);
    assert_eq!(h.observable(), after_first);
    assert_eq!(h.order_view(gtc).record.status, OrderStatus::Open);
}

fn a_day_order_placed_after_the_close_lives_until_the_next<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(day(m.buy(a, 100, 1)));
    assert_eq!(close(&mut h), 1);
    let next_day = h.place_ok(day(m.buy(a, 100, 10)));
    // Trading goes on; the order is partly filled and stays.
    h.place_ok(m.sell(b, 100, 3));
    assert_eq!(h.trades(), vec![(next_day, OrderId(3), 100, 3)]);
    assert_eq!(h.order_view(next_day).record.status, OrderStatus::Open);

    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events[0], expired(next_day, 7));
    assert_eq!(h.balance_of(a, m.usd), (USD_START - 300, 0));
}

fn a_suspended_accounts_day_orders_expire_too<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let buy = h.place_ok(day(m.buy(a, 100, 2)));
    h.ok(CommandBody::SuspendAccount { account: a });
    assert_eq!(close(&mut h), 1);
    assert_eq!(h.events, vec![expired(buy, 2), m.usd_balance(a, USD_START, 0)]);
}

/// Day orders of every kind in an engine on `B`, snapshotted and restored into both
/// books: the close gives the same events and hashes everywhere.
fn close_day_continues_identically_after_a_snapshot_restore<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    h.place_ok(day(m.buy(a, 98, 4)).with_display(2));
    h.place_ok(day(m.sell(b, 103, 6)).with_post_only());
    h.place_ok(day(m.stop_limit(c, Side::Buy, 110, 111, 1)));
    h.place_ok(m.buy(c, 97, 1));
    let bytes = h.engine.snapshot();
    let mut fast = Engine::<FastBook>::restore(&bytes).expect("restores");
    let mut reference = Engine::<ReferenceBook>::restore(&bytes).expect("restores");
    assert_eq!(fast.state_hash(), h.engine.state_hash());

    let command =
        bourse_engine::command::Command { client: ClientId(9), seq: 1, ts: h.ts + 1, body: CommandBody::CloseDay };
    let (mut e0, mut e1, mut e2) = (Vec::new(), Vec::new(), Vec::new());
    let applied = h.engine.apply(&command, &mut e0);
    assert_eq!(applied.outcome, Outcome::Ok { id: 3 });
    assert_eq!(fast.apply(&command, &mut e1), applied);
    assert_eq!(reference.apply(&command, &mut e2), applied);
    assert_eq!((&e1, &e2), (&e0, &e0));
    for engine_hash in [fast.state_hash(), reference.state_hash()] {
        assert_eq!(engine_hash, h.engine.state_hash());
    }
    h.engine.check_invariants();
    fast.check_invariants();
    reference.check_invariants();
    // And the expired records survive a snapshot of their own.
    let again = Engine::<ReferenceBook>::restore(&h.engine.snapshot()).expect("restores");
    assert_eq!(again.order(OrderId(3)).map(|v| v.record.status), Some(OrderStatus::Expired));
}

fn day_shape_rules<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market_at_100(&mut h);
    let b = m.accounts[1];
    let place = CommandBody::Place;
    // Market orders cannot rest, so they cannot be Day orders; nor stop-markets.
    h.reject(place(day(m.market_buy(b, 1, 1_000))), Reject::MarketOrderCannotRest);
    h.reject(place(day(m.stop_market(b, Side::Sell, 90, 1, None))), Reject::MarketOrderCannotRest);
    // Post-only and icebergs are fine, as with GTC; not with IOC.
    h.place_ok(day(m.buy(b, 90, 2)).with_post_only());
    h.place_ok(day(m.buy(b, 90, 4)).with_display(2));
    h.reject(place(m.buy(b, 90, 4).with_display(2).with_tif(Tif::Ioc)), Reject::IcebergRequiresGtcLimit);
    // A Day stop-limit is taken; its record says Day.
    let stop = h.place_ok(day(m.stop_limit(b, Side::Buy, 120, 121, 1)));
    let view = h.order_view(stop);
    assert_eq!((view.record.tif, view.record.kind.trigger()), (Tif::Day, Some(Px(120))));
    assert!(matches!(view.record.kind, OrderKind::StopLimit { .. }));
}

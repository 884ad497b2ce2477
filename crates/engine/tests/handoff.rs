//! A book handed from one engine to another (`Engine::detach_book`, `attach_book`): the
//! receiving engine goes on matching exactly as the giving one would have, both keep
//! their invariants, and the holds move with the book.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, MatchPolicy, OrderKind, OrderRequest, Tif};
use bourse_engine::{AccountId, Event, HandoffError, OrderId, Px, Qty, Side};
use common::{market, Harness};

fn limit(account: AccountId, side: Side, px: i64, qty: i64, m: &common::Market) -> OrderRequest {
    OrderRequest::limit(account, m.sym, side, Px(px), Qty(qty), Tif::Gtc)
}

/// What a taker's command did to the book: the trades (maker order, price, quantity,
/// maker's fee) and the stops it triggered. The taker's own ids differ between engines.
fn effects(events: &[Event]) -> Vec<(u8, OrderId, i64, i64, i64)> {
    events
        .iter()
        .filter_map(|event| match *event {
            Event::Trade { maker_order, px, qty, fee_maker, .. } => Some((0, maker_order, px.0, qty.0, fee_maker.0)),
            Event::Triggered { order, last_px } => Some((1, order, last_px.0, 0, 0)),
            _ => None,
        })
        .collect()
}

fn a_book_moved_to_another_engine_matches_there_as_it_would_have_here<B: Book>() {
    let mut giver = Harness::<B>::default();
    let m = market(&mut giver, 0, 1, MatchPolicy::Fifo, 4);
    let mut taker = Harness::<B> { engine: giver.engine.clone(), ..Harness::default() };
    taker.seq = giver.seq;
    taker.ts = giver.ts;
    // The receiving engine has the same catalog and accounts, and numbers its orders in
    // a space of its own.
    let mut receiver = Harness::<B> { engine: giver.engine.clone(), ..Harness::default() };
    receiver.seq = giver.seq;
    receiver.ts = giver.ts;
    receiver.engine.number_orders_from(1 << 40);
    let [a, b, c, d] = m.accounts[..] else { panic!("four accounts") };

    giver.place(limit(a, Side::Buy, 100, 5, &m));
    giver.place(limit(b, Side::Buy, 100, 3, &m));
    giver.place(limit(a, Side::Buy, 99, 4, &m));
    giver.place(OrderRequest { display_qty: Some(Qty(2)), ..limit(c, Side::Sell, 105, 6, &m) });
    giver.place(limit(b, Side::Sell, 105, 3, &m));
    giver.place(limit(b, Side::Sell, 106, 7, &m));
    let stop_buy = OrderKind::StopLimit { trigger: Px(106), px: Px(108) };
    giver.place(OrderRequest { kind: stop_buy, ..limit(d, Side::Buy, 108, 2, &m) });
    giver.place(OrderRequest {
        kind: OrderKind::StopMarket { trigger: Px(90), budget: None },
        ..limit(a, Side::Sell, 90, 1, &m)
    });
    // A trade, so the book has a last price to hand over.
    giver.place(OrderRequest { tif: Tif::Ioc, ..limit(d, Side::Sell, 100, 1, &m) });
    let staying = giver.engine.clone();
    let usd_before = giver.engine.asset_info(m.usd).expect("usd").supply;
    let depth_before = giver.engine.depth(m.sym, 10).expect("listed");

    let handoff = giver.engine.detach_book(m.sym).expect("a spot book detaches");
    giver.engine.check_invariants();
    assert_eq!(giver.engine.book_len(m.sym), 0);
    assert_eq!(giver.engine.last_px(m.sym), None);
    let usd_held: i64 = handoff.funds().filter(|(asset, _)| *asset == m.usd).map(|(_, amount)| amount.0).sum();
    assert!(usd_held > 0, "the bids and the buy stop hold cash");
    assert_eq!(giver.engine.asset_info(m.usd).expect("usd").supply.0, usd_before.0 - usd_held);
    for account in [a, b, c, d] {
        let open = giver.engine.open_orders(account);
        assert!(open.is_empty(), "account {account} still has {open:?}");
        let reserved = giver.engine.balances(account).expect("known").iter().map(|(_, b)| b.reserved.0).sum::<i64>();
        assert_eq!(reserved, 0, "account {account} still holds");
    }

    // Refused where it cannot go, and nothing changes then.
    let hash = giver.engine.state_hash();
    let mut stranger = handoff.clone();
    stranger.orders[0].account = AccountId(99);
    assert!(matches!(giver.engine.attach_book(stranger), Err(HandoffError::Inconsistent(_))));
    assert_eq!(giver.engine.state_hash(), hash);

    let latest = handoff.records.iter().map(|record| record.ts).max().expect("records");
    assert!(receiver.engine.ts_last() < latest, "the receiver was cloned before the orders");
    receiver.engine.attach_book(handoff.clone()).expect("an empty book takes it");
    receiver.engine.check_invariants();
    // Its log time is not before an order it now holds, so none closes before it was
    // accepted, whatever the receiver's own commands had been stamped.
    assert!(receiver.engine.ts_last() >= latest);
    assert_eq!(receiver.engine.depth(m.sym, 10).expect("listed"), depth_before);
    assert_eq!(receiver.engine.last_px(m.sym), staying.last_px(m.sym));
    for record in &handoff.records {
        assert_eq!(receiver.engine.order(record.id), staying.order(record.id), "order {}", record.id);
    }
    let hash = receiver.engine.state_hash();
    assert_eq!(receiver.engine.attach_book(handoff), Err(HandoffError::BookNotEmpty(m.sym)));
    assert_eq!(receiver.engine.state_hash(), hash);

    // The same buy sweeps both books alike: the iceberg's slices, the next level, the
    // stop it triggers, the fees.
    taker.engine = staying;
    taker.seq = giver.seq;
    taker.ts = giver.ts;
    // (The receiver's client numbers on from its own record.)
    receiver.ts = giver.ts;
    let sweep = limit(a, Side::Buy, 106, 11, &m);
    let balances = |engine: &bourse_engine::Engine<B>| -> Vec<Vec<(i64, i64)>> {
        [a, b, c, d]
            .iter()
            .map(|&account| {
                let held = engine.balances(account).expect("known");
                [m.usd, m.acme]
                    .iter()
                    .map(|asset| {
                        held.iter().find(|(a, _)| a == asset).map_or((0, 0), |(_, b)| (b.available.0, b.reserved.0))
                    })
                    .collect()
            })
            .collect()
    };
    let (there_before, here_before) = (balances(&receiver.engine), balances(&taker.engine));
    taker.place(sweep);
    receiver.place(sweep);
    let (there, here) = (effects(&receiver.events), effects(&taker.events));
    assert!(there.iter().any(|e| e.0 == 1), "the stop was triggered: {there:?}");
    assert_eq!(there, here);
    assert!(receiver.engine.next_order_id().0 > 1 << 40, "the receiver numbers its own orders in its space");
    // The receiver's balances hold only what came with the book (the giver kept the
    // rest): what the sweep changed is the same in both.
    let change = |after: Vec<Vec<(i64, i64)>>, before: Vec<Vec<(i64, i64)>>| -> Vec<Vec<(i64, i64)>> {
        after.iter().zip(&before).map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x.0 - y.0, x.1 - y.1)).collect()).collect()
    };
    let there_change = change(balances(&receiver.engine), there_before);
    assert_eq!(there_change, change(balances(&taker.engine), here_before));
    assert!(there_change.iter().flatten().any(|&delta| delta != (0, 0)), "the sweep moved money");
    // Cancels name the moved orders by their ids.
    receiver.ok(CommandBody::Cancel { account: a, symbol: m.sym, order: OrderId(1) });
    receiver.engine.check_invariants();
}

both_books!(a_book_moved_to_another_engine_matches_there_as_it_would_have_here);

//! Hand-made feeds: what each entry publishes on every channel, coalescing, the
//! subscriber's gap recovery, and bad input.

use bourse_market::proto::market_data_update::Update;
use bourse_market::proto::order_event::Event as Kind;
use bourse_market::{channel, proto, symbol, FeedError, Gap, L2Book, MarketState};
use proto::{Channel, Side};

const BUY: i32 = Side::Buy as i32;
const SELL: i32 = Side::Sell as i32;

fn info(id: u32) -> proto::SymbolInfo {
    let spec = proto::SymbolSpec { name: format!("S{id}"), tick: 1, lot: 1, ..Default::default() };
    proto::SymbolInfo { id, spec: Some(spec) }
}

fn resting(order: u64, symbol: u32, side: i32, px: i64, qty: i64) -> proto::RestingOrder {
    proto::RestingOrder { order, symbol, side, px, qty }
}

/// Symbols 0 and 1 at log index 10. Symbol 0: asks o1 100×5, o2 100×3, o3 101×4;
/// bid o4 99×2. Symbol 1: bid o7 50×1.
fn image() -> proto::BookImage {
    proto::BookImage {
        log_index: 10,
        ts: 100,
        symbols: vec![info(0), info(1)],
        orders: vec![
            resting(4, 0, BUY, 99, 2),
            resting(1, 0, SELL, 100, 5),
            resting(2, 0, SELL, 100, 3),
            resting(3, 0, SELL, 101, 4),
            resting(7, 1, BUY, 50, 1),
        ],
        last_trades: vec![proto::LastTrade { symbol: 0, px: 98 }],
    }
}

fn ev(symbol: u32, kind: Kind) -> proto::OrderEvent {
    proto::OrderEvent { symbol, symbol_seq: 0, event: Some(kind) }
}

fn added(symbol: u32, order: u64, side: i32, px: i64, qty: i64) -> proto::OrderEvent {
    ev(symbol, Kind::Added(proto::OrderAdded { order, side, px, qty }))
}

fn executed(order: u64, taker_side: i32, px: i64, qty: i64, remaining: i64, trade_seq: u32) -> proto::OrderEvent {
    let executed = proto::OrderExecuted { order, taker_order: 99, taker_side, px, qty, remaining, trade_seq };
    ev(0, Kind::Executed(executed))
}

fn cancelled(symbol: u32, order: u64, qty: i64, remaining: i64) -> proto::OrderEvent {
    ev(symbol, Kind::Cancelled(proto::OrderCancelled { order, qty, remaining }))
}

fn replaced(order: u64, px: i64, qty: i64) -> proto::OrderEvent {
    ev(0, Kind::Replaced(proto::OrderReplaced { order, px, qty }))
}

fn entry(log_index: u64, events: Vec<proto::OrderEvent>) -> proto::FeedEntry {
    proto::FeedEntry { log_index, ts: log_index * 1000, events, from_index: 0, release_ts: 0 }
}

fn apply(state: &mut MarketState, entry: &proto::FeedEntry) -> Vec<proto::MarketDataUpdate> {
    let mut out = Vec::new();
    state.apply_entry(entry, &mut out).expect("entry applies");
    for u in &out {
        assert_eq!((u.seq, u.ts, u.release_ts), (0, entry.ts, 0));
    }
    out
}

fn l2(update: &proto::MarketDataUpdate) -> Option<(u32, u64, i32, i64, i64)> {
    match &update.update {
        Some(Update::L2Update(u)) => Some((u.symbol, u.symbol_seq, u.side, u.px, u.qty)),
        _ => None,
    }
}

fn l2s(out: &[proto::MarketDataUpdate]) -> Vec<(u32, u64, i32, i64, i64)> {
    out.iter().filter_map(l2).collect()
}

fn on(out: &[proto::MarketDataUpdate], wanted: Channel) -> Vec<&Update> {
    out.iter().filter(|u| channel(u) == wanted).map(|u| u.update.as_ref().expect("an update")).collect()
}

#[test]
fn an_execution_publishes_the_event_the_trade_the_level_the_bbo_and_the_stats() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let out = apply(&mut state, &entry(11, vec![executed(1, BUY, 100, 5, 0, 0), executed(2, BUY, 100, 1, 2, 1)]));
    let channels: Vec<Channel> = out.iter().map(channel).collect();
    use Channel::*;
    assert_eq!(channels, vec![Orders, Trades, Orders, Trades, L2, Bbo, Stats]);
    assert!(out.iter().all(|u| symbol(u) == Some(0)));
    let Some(Update::Order(first)) = &out[0].update else { panic!() };
    assert_eq!((first.symbol_seq, first.event.clone()), (1, executed(1, BUY, 100, 5, 0, 0).event));
    let Some(Update::Order(second)) = &out[2].update else { panic!() };
    assert_eq!(second.symbol_seq, 2);
    let trade =
        |qty, trade_seq| proto::TradeUpdate { symbol: 0, px: 100, qty, taker_side: BUY, log_index: 11, trade_seq };
    assert_eq!(out[1].update, Some(Update::Trade(trade(5, 0))));
    assert_eq!(out[3].update, Some(Update::Trade(trade(1, 1))));
    assert_eq!(l2s(&out), vec![(0, 1, SELL, 100, 2)]);
    let bbo =
        proto::BboUpdate { symbol: 0, bid_px: Some(99), bid_qty: 2, ask_px: Some(100), ask_qty: 2, log_index: 11 };
    assert_eq!(out[5].update, Some(Update::Bbo(bbo)));
    let stats = proto::SymbolStats { symbol: 0, open: 100, high: 100, low: 100, last: 100, volume: 6, trades: 2 };
    assert_eq!(out[6].update, Some(Update::Stats(stats)));
    assert_eq!(state.bbo(0), Some(bbo));
    assert_eq!(state.last_px(0), Some(100));
    assert_eq!(state.log_index(), 11);

    // Stats accumulate across entries; other symbols have none.
    let out = apply(&mut state, &entry(12, vec![executed(2, BUY, 100, 2, 0, 0), executed(3, BUY, 101, 4, 0, 1)]));
    let stats = proto::SymbolStats { symbol: 0, open: 100, high: 101, low: 100, last: 101, volume: 12, trades: 4 };
    assert_eq!(on(&out, Stats), vec![&Update::Stats(stats)]);
    assert_eq!(state.stats(0), Some(stats));
    assert_eq!(state.stats(1).map(|s| s.trades), Some(0));
    assert_eq!(l2s(&out), vec![(0, 2, SELL, 100, 0), (0, 3, SELL, 101, 0)]);
    let bbo = proto::BboUpdate { symbol: 0, bid_px: Some(99), bid_qty: 2, ask_px: None, ask_qty: 0, log_index: 12 };
    assert_eq!(on(&out, Bbo), vec![&Update::Bbo(bbo)]);
}

#[test]
fn changes_to_one_level_in_an_entry_are_coalesced_and_net_zero_changes_dropped() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let out = apply(
        &mut state,
        &entry(
            11,
            vec![
                added(0, 5, SELL, 101, 2),
                cancelled(0, 3, 4, 0),
                added(0, 6, SELL, 102, 1),
                cancelled(0, 6, 1, 0),
                replaced(4, 98, 2),
                added(1, 8, SELL, 60, 3),
                cancelled(0, 5, 1, 1),
            ],
        ),
    );
    // 101 changed three times (4 → 6 → 2 → 1): one update; 102 came and went: none.
    assert_eq!(l2s(&out), vec![(0, 1, BUY, 98, 2), (0, 2, BUY, 99, 0), (0, 3, SELL, 101, 1), (1, 1, SELL, 60, 3)]);
    let order_seqs: Vec<(u32, u64)> = on(&out, Channel::Orders)
        .into_iter()
        .map(|u| match u {
            Update::Order(o) => (o.symbol, o.symbol_seq),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(order_seqs, vec![(0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 1), (0, 6)]);
    let bbos: Vec<(u32, Option<i64>, Option<i64>)> = on(&out, Channel::Bbo)
        .into_iter()
        .map(|u| match u {
            Update::Bbo(b) => (b.symbol, b.bid_px, b.ask_px),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(bbos, vec![(0, Some(98), Some(100)), (1, Some(50), Some(60))]);
    assert!(on(&out, Channel::Stats).is_empty() && on(&out, Channel::Trades).is_empty());
    assert_eq!(state.l2_seq(0), Some(3));
    assert_eq!(state.orders_seq(1), Some(1));
}

#[test]
fn bbo_is_published_only_when_the_top_changes() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let out = apply(&mut state, &entry(11, vec![added(0, 5, SELL, 105, 2), added(0, 6, BUY, 90, 2)]));
    assert_eq!(l2s(&out).len(), 2);
    assert!(on(&out, Channel::Bbo).is_empty());
    // Quantity at the top is part of the BBO.
    let out = apply(&mut state, &entry(12, vec![added(0, 8, BUY, 99, 1)]));
    let bbo =
        proto::BboUpdate { symbol: 0, bid_px: Some(99), bid_qty: 3, ask_px: Some(100), ask_qty: 8, log_index: 12 };
    assert_eq!(on(&out, Channel::Bbo), vec![&Update::Bbo(bbo)]);
    // An entry with no events publishes nothing but moves the log index on.
    assert!(apply(&mut state, &entry(13, vec![])).is_empty());
    assert_eq!(state.log_index(), 13);
}

#[test]
fn an_iceberg_refresh_goes_to_the_back_and_the_l3_image_shows_priority() {
    let mut state = MarketState::from_image(&image()).expect("image");
    // o1 shows 5 of an iceberg: its slice trades, a new slice of 4 shows behind o2.
    let out = apply(&mut state, &entry(11, vec![executed(1, BUY, 100, 5, 4, 0), replaced(1, 100, 4)]));
    assert_eq!(l2s(&out), vec![(0, 1, SELL, 100, 7)]);
    let ids: Vec<u64> = state.orders(0, Side::Sell).iter().map(|o| o.order).collect();
    assert_eq!(ids, vec![2, 1, 3]);
    let image: Vec<(u64, i64, i64, u64)> = state
        .l3_image(0)
        .iter()
        .map(|e| match &e.event {
            Some(Kind::Added(a)) => (a.order, a.px, a.qty, e.symbol_seq),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(image, vec![(4, 99, 2, 2), (2, 100, 3, 2), (1, 100, 4, 2), (3, 101, 4, 2)]);
    assert!(state.l3_image(9).is_empty());
    let snapshot = state.l2_snapshot(0, 1).expect("symbol 0");
    assert_eq!((snapshot.symbol_seq, snapshot.log_index), (1, 11));
    assert_eq!(snapshot.asks, vec![proto::Level { px: 100, qty: 7 }]);
    assert_eq!(snapshot.bids, vec![proto::Level { px: 99, qty: 2 }]);
}

#[test]
fn a_new_symbol_gets_its_own_book_and_sequences() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let out = apply(&mut state, &entry(11, vec![ev(2, Kind::SymbolAdded(info(2))), added(2, 9, BUY, 10, 1)]));
    assert_eq!(l2s(&out), vec![(2, 1, BUY, 10, 1)]);
    assert_eq!(state.symbols().map(|s| s.id).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(state.orders_seq(2), Some(2));
    let mut out = Vec::new();
    let skipped = entry(12, vec![ev(5, Kind::SymbolAdded(info(5)))]);
    assert!(matches!(state.apply_entry(&skipped, &mut out), Err(FeedError::Invalid { .. })));
}

#[test]
fn bad_events_are_errors_not_panics_and_poison_the_state() {
    type Expected = fn(&FeedError) -> bool;
    let bad: Vec<(proto::OrderEvent, Expected)> = vec![
        (cancelled(0, 999, 1, 0), |e| matches!(e, FeedError::UnknownOrder { order: 999, .. })),
        (executed(999, BUY, 100, 1, 0, 0), |e| matches!(e, FeedError::UnknownOrder { .. })),
        (replaced(999, 100, 1), |e| matches!(e, FeedError::UnknownOrder { .. })),
        (added(7, 20, BUY, 1, 1), |e| matches!(e, FeedError::UnknownSymbol { symbol: 7, .. })),
        (added(0, 1, BUY, 1, 1), |e| matches!(e, FeedError::DuplicateOrder { order: 1, .. })),
        (added(0, 20, 0, 1, 1), |e| matches!(e, FeedError::Invalid { .. })),
        (added(0, 20, BUY, 1, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (cancelled(1, 1, 5, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (cancelled(0, 1, 2, 2), |e| matches!(e, FeedError::Invalid { .. })),
        (executed(1, BUY, 101, 1, 4, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (executed(1, SELL, 100, 1, 4, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (executed(1, BUY, 100, 6, 0, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (executed(1, BUY, 100, 2, 2, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (replaced(1, 100, 0), |e| matches!(e, FeedError::Invalid { .. })),
        (proto::OrderEvent { symbol: 0, symbol_seq: 0, event: None }, |e| matches!(e, FeedError::Invalid { .. })),
    ];
    for (event, expected) in bad {
        let mut state = MarketState::from_image(&image()).expect("image");
        let mut out = Vec::new();
        // The good event before the bad one is applied and published.
        let result = state.apply_entry(&entry(11, vec![added(0, 30, BUY, 95, 1), event.clone()]), &mut out);
        let error = result.expect_err("a bad event");
        assert!(expected(&error), "{event:?} gave {error:?}");
        assert!(!error.to_string().is_empty());
        assert_eq!(l2s(&out), vec![(0, 1, BUY, 95, 1)]);
        assert!(state.is_poisoned());
        assert_eq!(state.apply_entry(&entry(12, vec![]), &mut out), Err(FeedError::Poisoned));
    }
}

#[test]
fn entries_must_follow_on() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let mut out = Vec::new();
    assert_eq!(state.apply_entry(&entry(10, vec![]), &mut out), Err(FeedError::LogIndex { expected: 11, got: 10 }));
    assert!(!state.is_poisoned(), "an entry already applied is refused without harm");
    assert_eq!(state.apply_entry(&entry(12, vec![]), &mut out), Err(FeedError::LogIndex { expected: 11, got: 12 }));
    assert!(state.is_poisoned(), "a lost entry leaves the state behind");
    assert!(out.is_empty());
}

#[test]
fn a_message_may_account_for_quiet_entries_before_it() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let mut out = Vec::new();
    // Entries 11 to 14 had no order events; 15 adds an order.
    let covering = proto::FeedEntry { from_index: 11, ..entry(15, vec![added(0, 30, BUY, 95, 1)]) };
    state.apply_entry(&covering, &mut out).expect("it starts where the state stands");
    assert_eq!(state.log_index(), 15);
    assert_eq!(l2s(&out), vec![(0, 1, BUY, 95, 1)]);
    // A quiet run alone moves the state on.
    state.apply_entry(&proto::FeedEntry { from_index: 16, ..entry(20, vec![]) }, &mut out).expect("quiet run");
    assert_eq!(state.log_index(), 20);
    // One that starts past the next index is a gap; one that starts before it overlaps.
    let overlap = proto::FeedEntry { from_index: 20, ..entry(22, vec![]) };
    assert_eq!(state.apply_entry(&overlap, &mut out), Err(FeedError::LogIndex { expected: 21, got: 20 }));
    assert!(!state.is_poisoned());
    let gap = proto::FeedEntry { from_index: 22, ..entry(25, vec![]) };
    assert_eq!(state.apply_entry(&gap, &mut out), Err(FeedError::LogIndex { expected: 21, got: 22 }));
    assert!(state.is_poisoned());
}

#[test]
fn malformed_images_are_refused() {
    let mut bad = image();
    bad.orders.push(resting(1, 0, SELL, 100, 1));
    assert!(matches!(MarketState::from_image(&bad), Err(FeedError::DuplicateOrder { order: 1, .. })));
    let mut bad = image();
    bad.orders.push(resting(50, 4, SELL, 100, 1));
    assert!(matches!(MarketState::from_image(&bad), Err(FeedError::UnknownSymbol { symbol: 4, .. })));
    let mut bad = image();
    bad.symbols.swap(0, 1);
    assert!(matches!(MarketState::from_image(&bad), Err(FeedError::Invalid { .. })));
    let mut bad = image();
    bad.orders[0].side = 0;
    assert!(matches!(MarketState::from_image(&bad), Err(FeedError::Invalid { .. })));
}

/// After a poisoned state or a lost feed, a rebase onto a newer image publishes what
/// changed, with sequence numbers that continue: subscribers follow without a gap.
#[test]
fn rebase_continues_every_subscriber() {
    let mut state = MarketState::from_image(&image()).expect("image");
    let mut l2: Vec<L2Book> =
        (0..2).map(|s| L2Book::from_snapshot(&state.l2_snapshot(s, usize::MAX).unwrap())).collect();
    let mut l3 = MarketState::from_image(&image()).expect("image");
    let mut follow = |out: &[proto::MarketDataUpdate], log_index: u64, l2: &mut Vec<L2Book>| {
        let mut events = Vec::new();
        for u in out {
            match &u.update {
                Some(Update::L2Update(update)) => l2[update.symbol as usize].apply(update).expect("no gap"),
                Some(Update::Order(event)) => events.push(event.clone()),
                _ => {}
            }
        }
        if !events.is_empty() {
            l3.apply_entry(
                &proto::FeedEntry { log_index, ts: 0, events, from_index: 0, release_ts: 0 },
                &mut Vec::new(),
            )
            .expect("orders follow");
        }
    };
    let out = apply(&mut state, &entry(11, vec![cancelled(0, 1, 5, 0)]));
    follow(&out, 11, &mut l2);
    // Entry 12 errs; the feed reconnects with an image at 20.
    let mut out = Vec::new();
    assert!(state.apply_entry(&entry(12, vec![cancelled(0, 2, 1, 2), cancelled(0, 1, 1, 0)]), &mut out).is_err());
    follow(&out, 12, &mut l2);
    let newer = proto::BookImage {
        log_index: 20,
        ts: 20_000,
        symbols: vec![info(0), info(1), info(2)],
        orders: vec![
            resting(4, 0, BUY, 99, 2),
            resting(11, 0, BUY, 97, 6),
            resting(3, 0, SELL, 101, 4),
            resting(2, 0, SELL, 101, 3),
            resting(7, 1, BUY, 50, 1),
            resting(12, 2, SELL, 7, 7),
        ],
        last_trades: vec![],
    };
    let mut out = Vec::new();
    state.rebase(&newer, &mut out).expect("rebase");
    assert!(!state.is_poisoned());
    assert!(out.iter().all(|u| u.ts == 20_000));
    // Symbol 1 did not change: nothing about it.
    assert!(out.iter().all(|u| symbol(u) != Some(1)));
    let bbo =
        proto::BboUpdate { symbol: 0, bid_px: Some(99), bid_qty: 2, ask_px: Some(101), ask_qty: 7, log_index: 20 };
    assert!(on(&out, Channel::Bbo).contains(&&Update::Bbo(bbo)));
    l2.push(L2Book::new(2));
    l2[2].resync(&proto::L2Snapshot { symbol: 2, ..Default::default() }).expect("empty book");
    // The L3 follower sees symbol 2 appear in the rebase.
    follow(&out, 13, &mut l2);
    assert_eq!(state.image().orders, newer.orders);
    assert_eq!(l3.image().orders, newer.orders);
    for s in 0..3 {
        let snapshot = state.l2_snapshot(s, usize::MAX).unwrap();
        assert_eq!(l2[s as usize].seq(), snapshot.symbol_seq);
        assert_eq!(
            l2[s as usize].bids().collect::<Vec<_>>(),
            snapshot.bids.iter().map(|l| (l.px, l.qty)).collect::<Vec<_>>()
        );
        assert_eq!(
            l2[s as usize].asks().collect::<Vec<_>>(),
            snapshot.asks.iter().map(|l| (l.px, l.qty)).collect::<Vec<_>>()
        );
    }
    // Entries continue after the image.
    apply(&mut state, &entry(21, vec![cancelled(0, 11, 6, 0)]));
    let mut lacking = newer.clone();
    lacking.symbols.pop();
    lacking.orders.pop();
    assert!(state.rebase(&lacking, &mut Vec::new()).is_err());
    assert_eq!(state.log_index(), 21, "a refused rebase changes nothing");
}

fn snapshot(symbol_seq: u64, bids: &[(i64, i64)], asks: &[(i64, i64)]) -> proto::L2Snapshot {
    let levels = |l: &[(i64, i64)]| l.iter().map(|&(px, qty)| proto::Level { px, qty }).collect();
    proto::L2Snapshot { symbol: 3, symbol_seq, bids: levels(bids), asks: levels(asks), log_index: symbol_seq * 10 }
}

fn l2_update(symbol_seq: u64, side: i32, px: i64, qty: i64) -> proto::L2Update {
    proto::L2Update { symbol: 3, symbol_seq, side, px, qty, log_index: symbol_seq * 10 }
}

type Levels = Vec<(i64, i64)>;

fn levels(book: &L2Book) -> (Levels, Levels) {
    (book.bids().collect(), book.asks().collect())
}

#[test]
fn an_l2_book_follows_updates_and_ignores_what_its_snapshot_includes() {
    let mut book = L2Book::from_snapshot(&snapshot(5, &[(99, 1), (98, 2)], &[(101, 3)]));
    assert_eq!(book.apply(&l2_update(4, BUY, 99, 50)), Ok(()));
    assert_eq!(book.apply(&l2_update(5, BUY, 99, 50)), Ok(()));
    assert_eq!(book.apply(&l2_update(6, BUY, 99, 0)), Ok(()));
    assert_eq!(book.apply(&l2_update(7, SELL, 100, 4)), Ok(()));
    // Another symbol's update is not this book's business.
    assert_eq!(book.apply(&proto::L2Update { symbol: 4, symbol_seq: 99, ..l2_update(0, BUY, 1, 1) }), Ok(()));
    assert_eq!(levels(&book), (vec![(98, 2)], vec![(100, 4), (101, 3)]));
    assert_eq!(
        (book.seq(), book.log_index(), book.best_bid(), book.best_ask()),
        (7, 70, Some((98, 2)), Some((100, 4)))
    );
}

#[test]
fn a_lost_l2_update_is_a_gap_until_a_snapshot_resyncs_the_book() {
    let mut book = L2Book::from_snapshot(&snapshot(5, &[(99, 1)], &[(101, 3)]));
    book.apply(&l2_update(6, BUY, 99, 2)).unwrap();
    // 7 is lost.
    let gap = Gap { symbol: 3, expected: 7, got: 8 };
    assert_eq!(book.apply(&l2_update(8, SELL, 101, 1)), Err(gap));
    assert!(!book.is_synced());
    assert!(!gap.to_string().is_empty());
    // Later updates are kept, not applied.
    assert!(book.apply(&l2_update(9, SELL, 102, 9)).is_err());
    assert!(book.apply(&l2_update(10, BUY, 97, 1)).is_err());
    assert_eq!(book.buffered(), 3);
    assert_eq!(levels(&book), (vec![(99, 2)], vec![(101, 3)]));
    // A snapshot older than the kept updates leaves the gap.
    let old = snapshot(6, &[(99, 2)], &[(101, 3)]);
    assert_eq!(book.resync(&old), Err(Gap { symbol: 3, expected: 7, got: 8 }));
    assert!(!book.is_synced());
    // A snapshot at 8 includes 7 and 8: 8 is dropped, 9 and 10 applied.
    let fresh = snapshot(8, &[(99, 2), (95, 5)], &[(101, 1)]);
    assert_eq!(book.resync(&fresh), Ok(()));
    assert!(book.is_synced());
    assert_eq!(book.buffered(), 0);
    assert_eq!(book.seq(), 10);
    assert_eq!(levels(&book), (vec![(99, 2), (97, 1), (95, 5)], vec![(101, 1), (102, 9)]));
    // A snapshot newer than every kept update is just the book.
    book.apply(&l2_update(12, BUY, 1, 1)).unwrap_err();
    book.resync(&snapshot(15, &[], &[(50, 1)])).unwrap();
    assert_eq!(levels(&book), (vec![], vec![(50, 1)]));
    assert_eq!(book.seq(), 15);
}

#[test]
fn a_new_l2_book_buffers_until_its_first_snapshot() {
    let mut book = L2Book::new(3);
    assert_eq!(book.apply(&l2_update(3, BUY, 10, 1)), Err(Gap { symbol: 3, expected: 1, got: 3 }));
    book.apply(&l2_update(4, BUY, 11, 1)).unwrap_err();
    assert!(!book.is_synced());
    book.resync(&snapshot(3, &[(10, 1)], &[])).unwrap();
    assert_eq!(levels(&book), (vec![(11, 1), (10, 1)], vec![]));
    assert_eq!(book.resync(&proto::L2Snapshot { symbol: 4, ..Default::default() }).unwrap_err().symbol, 3);
}

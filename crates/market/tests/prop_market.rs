//! Property tests: random command streams on a real engine, through the node's
//! [`FeedBuilder`], into [`MarketState`] and its subscribers.
//!
//! After every log entry (one to four commands), for every symbol:
//! - the L3 books of the state equal the engine's (`book_orders`: ids, prices,
//!   displayed quantities, priority), and so does its image (symbols, last trades);
//! - its L2 depth and BBO equal the engine's;
//! - the entry's updates are right: order events are the feed's with consecutive
//!   per-symbol `symbol_seq`; trades are the engine's with `(log_index, trade_seq)`;
//!   one L2 update per changed level with the engine's quantity and consecutive
//!   per-symbol seqs; a BBO exactly when the top changed; stats of exactly the symbols
//!   that traded, equal to the engine's trades summed up;
//! - subscribers that apply those updates (L2 books from the first snapshot, an L3 book
//!   from CHANNEL_ORDERS) equal the engine; one that loses L2 updates notices the gap and
//!   a delayed snapshot brings it back;
//! - a state started from an image taken mid-stream, and one that lost part of the feed
//!   and rebased onto a newer image (its subscribers following without a gap), equal
//!   the one that saw everything.
//!
//! Streams come from the engine's fuzzing generator (every order kind, cancels,
//! reduces, moves, bad input, four accounts, a FIFO and a pro-rata symbol and two margin
//! contracts, liquidations among their trades), mixed with plain and iceberg limit orders
//! so books get deep, and a fifth symbol created mid-stream.

use bourse_engine::command::{CommandBody, MatchPolicy, OrderRequest, Stp, SymbolSpec, Tif};
use bourse_engine::fuzzing::{body_from_bytes, Bytes, Differential, ACCOUNTS, CLIENTS};
use bourse_engine::{AccountId, Amount, AssetId, Engine, Event, Px, Qty, Side, SymbolId};
use bourse_market::proto::market_data_update::Update;
use bourse_market::proto::order_event::Event as Kind;
use bourse_market::{channel, proto, symbol, L2Book, MarketState};
use bourse_protocol::convert;
use bourse_protocol::feed::FeedBuilder;
use proptest::prelude::*;
use proptest::test_runner::RngSeed;

/// Per symbol of the stream: (mid, tick, lot). The first four are the fuzzing fixture's
/// (two spot pairs, two margin contracts), the last the one created mid-stream.
const SYMBOLS: [(i64, i64, i64); 5] = [(1_000, 1, 1), (1_000, 5, 10), (1_000, 1, 1), (1_000, 5, 10), (1_000, 1, 1)];

fn resting_order(bytes: &mut Bytes<'_>, engine: &Engine) -> CommandBody {
    let sym = bytes.below(engine.symbols_len() as u8);
    let (mid, tick, lot) = SYMBOLS[usize::from(sym)];
    let side = if bytes.below(2) == 0 { Side::Buy } else { Side::Sell };
    // Mostly on its own side of the mid, sometimes a little across.
    let offset = (i64::from(bytes.below(14)) - 2) * tick;
    let px = match side {
        Side::Buy => Px(mid - offset),
        Side::Sell => Px(mid + offset),
    };
    let qty = Qty(lot * i64::from(1 + bytes.below(6)));
    let display_qty = (bytes.below(4) == 0).then(|| Qty(lot * i64::from(1 + bytes.below(2))));
    let stp = [Stp::CancelResting, Stp::CancelIncoming, Stp::Allow][usize::from(bytes.below(3))];
    let account = AccountId(u32::from(bytes.below(ACCOUNTS as u8)));
    let request = OrderRequest {
        display_qty,
        stp,
        ..OrderRequest::limit(account, SymbolId(sym.into()), side, px, qty, Tif::Gtc)
    };
    CommandBody::Place(request)
}

fn next_body(bytes: &mut Bytes<'_>, engine: &Engine) -> CommandBody {
    match bytes.below(16) {
        0 if engine.symbols_len() < SYMBOLS.len() && bytes.below(4) == 0 => {
            CommandBody::CreateSymbol(Box::new(SymbolSpec {
                name: "GAMMA/USD".into(),
                base: AssetId(1),
                quote: AssetId(0),
                tick: Px(1),
                lot: Qty(1),
                px_min: Px(500),
                px_max: Px(5_000),
                fee_maker: Amount(0),
                fee_taker: Amount(1),
                policy: MatchPolicy::Fifo,
            }))
        }
        0..=5 => resting_order(bytes, engine),
        _ => body_from_bytes(bytes, engine),
    }
}

type Levels = Vec<(i64, i64)>;

fn engine_depth(engine: &Engine, s: u32, levels_max: usize) -> (Levels, Levels) {
    let depth = engine.depth(SymbolId(s), levels_max).expect("symbol exists");
    let levels = |l: &[(Px, Qty)]| l.iter().map(|(px, qty)| (px.0, qty.0)).collect();
    (levels(&depth.bids), levels(&depth.asks))
}

fn snapshot_levels(snapshot: &proto::L2Snapshot) -> (Levels, Levels) {
    let levels = |l: &[proto::Level]| l.iter().map(|l| (l.px, l.qty)).collect();
    (levels(&snapshot.bids), levels(&snapshot.asks))
}

fn book_levels(book: &L2Book) -> (Levels, Levels) {
    (book.bids().collect(), book.asks().collect())
}

fn engine_l3(engine: &Engine, s: u32, side: Side) -> Vec<(u64, i64, i64)> {
    engine.book_orders(SymbolId(s), side, usize::MAX).iter().map(|o| (o.id.0, o.px.0, o.qty_visible.0)).collect()
}

fn state_l3(state: &MarketState, s: u32, side: proto::Side) -> Vec<(u64, i64, i64)> {
    state.orders(s, side).iter().map(|o| (o.order, o.px, o.qty)).collect()
}

/// A subscriber of every channel of one state: L2 books (each from an empty snapshot
/// when its symbol appears, or from the state's snapshot when it starts) and an L3 book
/// built from CHANNEL_ORDERS.
struct Subscriber {
    l2: Vec<L2Book>,
    l3: MarketState,
}

impl Subscriber {
    fn new(state: &MarketState) -> Self {
        let l2 = (0..state.symbols_len() as u32)
            .map(|s| L2Book::from_snapshot(&state.l2_snapshot(s, usize::MAX).expect("symbol")))
            .collect();
        let mut l3 = state.image();
        l3.orders.clear();
        let mut l3 = MarketState::from_image(&l3).expect("an empty image");
        let image: Vec<proto::OrderEvent> = (0..state.symbols_len() as u32).flat_map(|s| state.l3_image(s)).collect();
        let entry =
            proto::FeedEntry { log_index: l3.log_index() + 1, ts: 0, events: image, from_index: 0, release_ts: 0 };
        l3.apply_entry(&entry, &mut Vec::new()).expect("the L3 image applies");
        Subscriber { l2, l3 }
    }

    fn follow(&mut self, out: &[proto::MarketDataUpdate]) {
        let mut events = Vec::new();
        for u in out {
            match &u.update {
                Some(Update::L2Update(update)) => {
                    let book = &mut self.l2[update.symbol as usize];
                    book.apply(update).unwrap_or_else(|gap| panic!("{gap}"));
                }
                Some(Update::Order(event)) => {
                    if let Some(Kind::SymbolAdded(info)) = &event.event {
                        assert_eq!(info.id as usize, self.l2.len());
                        self.l2
                            .push(L2Book::from_snapshot(&proto::L2Snapshot { symbol: info.id, ..Default::default() }));
                    }
                    events.push(event.clone());
                }
                _ => {}
            }
        }
        let entry =
            proto::FeedEntry { log_index: self.l3.log_index() + 1, ts: 0, events, from_index: 0, release_ts: 0 };
        self.l3.apply_entry(&entry, &mut Vec::new()).expect("CHANNEL_ORDERS applies");
    }

    fn check(&self, engine: &Engine, what: &str) {
        assert_eq!(self.l2.len(), engine.symbols_len(), "{what}: symbols");
        for (s, book) in self.l2.iter().enumerate() {
            assert_eq!(book_levels(book), engine_depth(engine, s as u32, usize::MAX), "{what}: L2 of symbol {s}");
            let s = s as u32;
            assert_eq!(state_l3(&self.l3, s, proto::Side::Buy), engine_l3(engine, s, Side::Buy), "{what}: L3 bids {s}");
            assert_eq!(
                state_l3(&self.l3, s, proto::Side::Sell),
                engine_l3(engine, s, Side::Sell),
                "{what}: L3 asks {s}"
            );
        }
    }
}

/// An L2 subscriber that loses updates, notices the gap, asks for a snapshot and gets
/// it one entry later.
struct Lossy {
    book: L2Book,
    /// An update was lost since the last resync (not necessarily noticed yet).
    lost: bool,
    /// The snapshot asked for, delivered after the next entry.
    snapshot: Option<proto::L2Snapshot>,
    gaps: usize,
}

/// The expected stats of a symbol, summed up from the engine's trades.
fn add_trade(stats: &mut proto::SymbolStats, px: i64, qty: i64) {
    if stats.trades == 0 {
        (stats.open, stats.high, stats.low) = (px, px, px);
    }
    stats.high = stats.high.max(px);
    stats.low = stats.low.min(px);
    stats.last = px;
    stats.volume += qty;
    stats.trades += 1;
}

#[derive(Default)]
struct Coverage {
    entries: usize,
    trades: usize,
    refreshes: usize,
    replaced: usize,
    l2_updates: usize,
    bbo_updates: usize,
    gaps: usize,
    rebased: bool,
}

/// Drives one stream. `split`: the entry after which a state starts from an image;
/// `lose`: the entries a lagging state misses before it rebases; `drop_one_in`: how
/// often the lossy subscriber loses an L2 update.
fn run(data: &[u8], split: usize, lose: (usize, usize), drop_one_in: u8) -> Coverage {
    let mut bytes = Bytes::new(data);
    let mut d = Differential::new();
    let mut builder = FeedBuilder::from_engine(&d.fast);
    let mut log_index = 100;
    let image = builder.image(&d.fast, log_index, d.fast.ts_last());
    let mut full = MarketState::from_image(&image).expect("image");
    let mut subscriber = Subscriber::new(&full);
    let mut lossy: Vec<Lossy> = (0..full.symbols_len() as u32)
        .map(|s| Lossy {
            book: L2Book::from_snapshot(&full.l2_snapshot(s, usize::MAX).unwrap()),
            lost: false,
            snapshot: None,
            gaps: 0,
        })
        .collect();
    let mut late: Option<(MarketState, FeedBuilder)> = None;
    let mut lagging = (full.clone(), Subscriber::new(&full));
    let mut l2_seqs: Vec<u64> = vec![0; full.symbols_len()];
    let mut order_seqs: Vec<u64> = vec![0; full.symbols_len()];
    let mut bbos: Vec<proto::BboUpdate> = (0..full.symbols_len() as u32).map(|s| full.bbo(s).unwrap()).collect();
    let mut stats: Vec<proto::SymbolStats> =
        (0..full.symbols_len() as u32).map(|s| proto::SymbolStats { symbol: s, ..Default::default() }).collect();
    let mut coverage = Coverage::default();
    let mut drops = 0u64;
    let (mut events, mut out, mut late_events) = (Vec::new(), Vec::new(), Vec::new());
    let mut entry_number = 0;
    while !bytes.is_empty() {
        entry_number += 1;
        // One log entry: usually one command, sometimes several.
        let commands = if bytes.below(4) == 0 { 2 + usize::from(bytes.below(3)) } else { 1 };
        log_index += 1;
        events.clear();
        late_events.clear();
        let mut trade_seq = 0;
        let mut late_trade_seq = 0;
        let mut trades = Vec::new();
        let mut traded = Vec::new();
        for _ in 0..commands {
            if bytes.is_empty() {
                break;
            }
            let client = usize::from(bytes.below(CLIENTS as u8));
            let body = next_body(&mut bytes, &d.fast);
            d.apply_as(client, body);
            for event in d.events() {
                if let Event::Trade { symbol, px, qty, .. } = *event {
                    let seq = trades.len() as u32;
                    trades.push(convert::trade_update(event, log_index, seq).expect("a trade"));
                    add_trade(&mut stats[symbol.0 as usize], px.0, qty.0);
                    traded.push(symbol.0);
                }
                if let Event::SymbolCreated { symbol } = *event {
                    stats.push(proto::SymbolStats { symbol: symbol.0, ..Default::default() });
                    bbos.push(proto::BboUpdate { symbol: symbol.0, ..Default::default() });
                    l2_seqs.push(0);
                    order_seqs.push(0);
                }
                coverage.refreshes += usize::from(matches!(event, Event::Refreshed { .. }));
            }
            builder.command(&d.fast, d.events(), &mut trade_seq, &mut events);
            if let Some((_, late_builder)) = &mut late {
                late_builder.command(&d.fast, d.events(), &mut late_trade_seq, &mut late_events);
            }
        }
        assert_eq!(trade_seq as usize, trades.len());
        let ts = d.fast.ts_last();
        let entry = proto::FeedEntry { log_index, ts, events: events.clone(), from_index: 0, release_ts: 0 };
        if late.is_some() {
            assert_eq!(late_events, events, "a builder started mid-stream publishes the same events");
        }
        out.clear();
        full.apply_entry(&entry, &mut out).unwrap_or_else(|e| panic!("entry {log_index}: {e}"));
        let engine = &d.fast;
        let symbols = engine.symbols_len() as u32;
        coverage.entries += 1;
        coverage.trades += trades.len();

        // What the entry published.
        for u in &out {
            assert_eq!((u.seq, u.ts, u.release_ts), (0, ts, 0));
            assert!(symbol(u).is_some_and(|s| s < symbols));
        }
        let published: Vec<proto::OrderEvent> = out
            .iter()
            .filter(|u| channel(u) == proto::Channel::Orders)
            .map(|u| match &u.update {
                Some(Update::Order(event)) => {
                    let seq = &mut order_seqs[event.symbol as usize];
                    *seq += 1;
                    assert_eq!(event.symbol_seq, *seq, "order events of symbol {} numbered without gaps", event.symbol);
                    proto::OrderEvent { symbol_seq: 0, ..event.clone() }
                }
                other => panic!("{other:?} on CHANNEL_ORDERS"),
            })
            .collect();
        assert_eq!(published, events);
        coverage.replaced += events.iter().filter(|e| matches!(e.event, Some(Kind::Replaced(_)))).count();
        let published_trades: Vec<proto::TradeUpdate> = out
            .iter()
            .filter_map(|u| match &u.update {
                Some(Update::Trade(trade)) => Some(*trade),
                _ => None,
            })
            .collect();
        assert_eq!(published_trades, trades, "entry {log_index}: trades");
        let mut levels_seen = Vec::new();
        for u in &out {
            let Some(Update::L2Update(l2)) = &u.update else { continue };
            coverage.l2_updates += 1;
            let seq = &mut l2_seqs[l2.symbol as usize];
            *seq += 1;
            assert_eq!(l2.symbol_seq, *seq, "L2 updates of symbol {} numbered without gaps", l2.symbol);
            assert_eq!(l2.log_index, log_index);
            assert!(!levels_seen.contains(&(l2.symbol, l2.side, l2.px)), "one update per level per entry: {l2:?}");
            levels_seen.push((l2.symbol, l2.side, l2.px));
            let (bids, asks) = engine_depth(engine, l2.symbol, usize::MAX);
            let levels = if l2.side == proto::Side::Buy as i32 { bids } else { asks };
            let qty = levels.iter().find(|(px, _)| *px == l2.px).map_or(0, |(_, qty)| *qty);
            assert_eq!(l2.qty, qty, "L2 update {l2:?} has the level's new quantity");
        }
        let published_bbos: Vec<&proto::BboUpdate> = out
            .iter()
            .filter_map(|u| match &u.update {
                Some(Update::Bbo(bbo)) => Some(bbo),
                _ => None,
            })
            .collect();
        coverage.bbo_updates += published_bbos.len();
        for s in 0..symbols {
            let expected = convert::bbo_update(SymbolId(s), &engine.depth(SymbolId(s), 1).unwrap(), log_index);
            let changed = proto::BboUpdate { log_index, ..bbos[s as usize] } != expected;
            let sent: Vec<&&proto::BboUpdate> = published_bbos.iter().filter(|b| b.symbol == s).collect();
            assert_eq!(sent.len(), usize::from(changed), "entry {log_index}: BBO of {s} sent iff it changed");
            if changed {
                assert_eq!(**sent[0], expected);
                bbos[s as usize] = expected;
            }
            assert_eq!(full.bbo(s), Some(expected));
        }
        traded.sort_unstable();
        traded.dedup();
        let published_stats: Vec<proto::SymbolStats> = out
            .iter()
            .filter_map(|u| match &u.update {
                Some(Update::Stats(stats)) => Some(*stats),
                _ => None,
            })
            .collect();
        let expected_stats: Vec<proto::SymbolStats> = traded.iter().map(|&s| stats[s as usize]).collect();
        assert_eq!(published_stats, expected_stats, "entry {log_index}: stats");

        // The state equals the engine.
        assert_eq!(full.image(), builder.image(engine, log_index, ts), "entry {log_index}: the books");
        for s in 0..symbols {
            assert_eq!(state_l3(&full, s, proto::Side::Buy), engine_l3(engine, s, Side::Buy));
            assert_eq!(state_l3(&full, s, proto::Side::Sell), engine_l3(engine, s, Side::Sell));
            let snapshot = full.l2_snapshot(s, usize::MAX).unwrap();
            assert_eq!(snapshot_levels(&snapshot), engine_depth(engine, s, usize::MAX), "L2 of {s}");
            assert_eq!((snapshot.symbol_seq, snapshot.log_index), (l2_seqs[s as usize], log_index));
            assert_eq!(snapshot_levels(&full.l2_snapshot(s, 3).unwrap()), engine_depth(engine, s, 3));
            assert_eq!(full.stats(s).as_ref(), Some(&stats[s as usize]));
        }

        // Subscribers.
        subscriber.follow(&out);
        subscriber.check(engine, "subscriber");
        follow_lossy(&mut lossy, &full, &out, drop_one_in, &mut drops, engine);

        // A state from an image taken mid-stream.
        if let Some((state, _)) = &mut late {
            state.apply_entry(&entry, &mut Vec::new()).expect("the late state applies the entry");
            assert_eq!(state.image(), full.image(), "a late start converges");
        }
        if entry_number == split {
            let image = builder.image(engine, log_index, ts);
            late = Some((MarketState::from_image(&image).expect("image"), FeedBuilder::from_engine(engine)));
        }

        // A state that loses entries, then rebases onto the node's image.
        if entry_number == lose.1 && lose.0 < lose.1 {
            let mut rebased = Vec::new();
            lagging.0.rebase(&builder.image(engine, log_index, ts), &mut rebased).expect("rebase");
            assert!(rebased.iter().all(|u| u.ts == ts));
            lagging.1.follow(&rebased);
            coverage.rebased = true;
        } else if !(lose.0..lose.1).contains(&entry_number) {
            let mut lagging_out = Vec::new();
            lagging.0.apply_entry(&entry, &mut lagging_out).expect("the lagging state applies the entry");
            lagging.1.follow(&lagging_out);
        }
        if !(lose.0..lose.1).contains(&entry_number) {
            assert_eq!(lagging.0.image(), full.image(), "a rebased state converges");
            lagging.1.check(engine, "subscriber of the rebased state");
        } else if lose.0 < entry_number {
            assert!(lagging.0.apply_entry(&entry, &mut Vec::new()).is_err(), "a lost entry is noticed");
        }
    }
    // In the end every lossy subscriber resyncs to the truth.
    for (s, lossy) in lossy.iter_mut().enumerate() {
        coverage.gaps += lossy.gaps;
        let snapshot = full.l2_snapshot(s as u32, usize::MAX).unwrap();
        lossy.book.resync(&snapshot).expect("a current snapshot resyncs");
        assert_eq!(book_levels(&lossy.book), engine_depth(&d.fast, s as u32, usize::MAX));
    }
    d.assert_same_hash();
    coverage
}

fn follow_lossy(
    lossy: &mut Vec<Lossy>,
    full: &MarketState,
    out: &[proto::MarketDataUpdate],
    drop_one_in: u8,
    drops: &mut u64,
    engine: &Engine,
) {
    while lossy.len() < full.symbols_len() {
        let snapshot = proto::L2Snapshot { symbol: lossy.len() as u32, ..Default::default() };
        lossy.push(Lossy { book: L2Book::from_snapshot(&snapshot), lost: false, snapshot: None, gaps: 0 });
    }
    // The snapshot asked for after the previous entry arrives now, after this entry's
    // updates were kept.
    let pending: Vec<(usize, proto::L2Snapshot)> =
        lossy.iter_mut().enumerate().filter_map(|(s, l)| l.snapshot.take().map(|snap| (s, snap))).collect();
    for u in out {
        let Some(Update::L2Update(update)) = &u.update else { continue };
        let l = &mut lossy[update.symbol as usize];
        *drops += 1;
        if drop_one_in > 0 && ((drops.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8).is_multiple_of(drop_one_in) {
            l.lost = true;
            continue;
        }
        let was_synced = l.book.is_synced();
        match l.book.apply(update) {
            Ok(()) => assert!(!l.lost || !was_synced, "an update after a lost one is a gap"),
            Err(gap) => {
                assert!(l.lost, "a gap with nothing lost: {gap}");
                if was_synced {
                    l.gaps += 1;
                }
            }
        }
    }
    for (s, snapshot) in pending {
        let l = &mut lossy[s];
        if l.book.resync(&snapshot).is_ok() {
            // Unless an update after the snapshot was lost as well, the book is right.
            let kept_after_snapshot_lost = l.lost && l.book.seq() < full.l2_seq(s as u32).unwrap();
            if !kept_after_snapshot_lost {
                l.lost = false;
            }
        }
    }
    for (s, l) in lossy.iter_mut().enumerate() {
        if !l.book.is_synced() && l.snapshot.is_none() {
            l.snapshot = full.l2_snapshot(s as u32, usize::MAX);
        }
        if l.book.is_synced() && !l.lost {
            assert_eq!(book_levels(&l.book), engine_depth(engine, s as u32, usize::MAX), "lossy L2 of {s}");
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 48,
        rng_seed: RngSeed::Fixed(0xB0_2525),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn prop_market_data_equals_the_engine(
        data in prop::collection::vec(any::<u8>(), 0..5000),
        split in 0usize..200,
        lose_from in 0usize..200,
        lose_len in 0usize..40,
        drop_one_in in 0u8..12,
    ) {
        run(&data, split, (lose_from, lose_from + lose_len), drop_one_in);
    }
}

/// Long seeded streams, and proof that they reach what the properties are about.
#[test]
fn seeded_long_streams_equal_the_engine() {
    let mut total = Coverage::default();
    for seed in 0..4u64 {
        let c = run(&bourse_engine::fuzzing::seeded_bytes(seed, 30_000), 150 + seed as usize * 100, (300, 340), 8);
        total.entries += c.entries;
        total.trades += c.trades;
        total.refreshes += c.refreshes;
        total.replaced += c.replaced;
        total.l2_updates += c.l2_updates;
        total.bbo_updates += c.bbo_updates;
        total.gaps += c.gaps;
        assert!(c.rebased, "seed {seed}: the lagging state rebased");
    }
    eprintln!(
        "entries {} trades {} refreshes {} replaced {} l2 {} bbo {} gaps {}",
        total.entries, total.trades, total.refreshes, total.replaced, total.l2_updates, total.bbo_updates, total.gaps
    );
    assert!(total.trades > 500 && total.refreshes > 20 && total.replaced > 200 && total.gaps > 10);
}

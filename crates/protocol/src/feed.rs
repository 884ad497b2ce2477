//! The public order-level feed: engine events turned into [`proto::OrderEvent`]s.
//!
//! A node runs a [`FeedBuilder`] on its core thread next to the engine. For every applied
//! command it turns the command's events into the public events of the books (after
//! Nasdaq TotalView-ITCH): an order starts resting, a resting order trades, displayed
//! quantity leaves the book, an order takes a new price or a new iceberg slice, a symbol
//! is created. Applying the events of a [`proto::BookImage`] and then of every entry after
//! it reproduces the engine's books exactly: the same orders, prices, displayed
//! quantities and priority.
//!
//! Engine events → feed events (per command, in order):
//!
//! | engine events | feed events |
//! |---|---|
//! | `SymbolCreated` | `symbol_added` (the spec read from the engine) |
//! | `Rested` | `OrderAdded` (back of its level) |
//! | `Trade` | `OrderExecuted` of the maker, `remaining` = its displayed quantity left |
//! | `Trade` using up an iceberg slice, then `Refreshed` | `OrderExecuted` with `remaining` = the new slice, then `OrderReplaced` (same px, new slice, back of level) |
//! | `Reduced` | `OrderCancelled` of the displayed quantity it removed (none when only the hidden reserve shrank) |
//! | `Cancelled` of a resting order (request, reduce to zero, self-trade prevention) | `OrderCancelled`, `remaining` 0 |
//! | `Cancelled` of an order not in the book (IOC or market remainder, pending stop, FOK) | nothing |
//! | `Moved` then `Rested` (no cross) | `OrderReplaced` (new px, new displayed slice, back of level) |
//! | `Moved` that crosses | `OrderCancelled` (`remaining` 0) at once; its trades appear as `OrderExecuted` of the makers; a rest is `OrderAdded` with the same id |
//! | `Accepted`, `Triggered`, `Balance`, `Rejected`, accounts and assets | nothing |
//!
//! Only displayed quantity is public: an iceberg's reserve never appears.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bourse_engine::book::Book;
use bourse_engine::{Engine, Event, OrderId, Side, SymbolId};

use crate::proto;
use crate::proto::order_event::Event as Public;

/// A multiplicative hasher for order ids (the Fx hash): this crate does not depend on
/// `rustc-hash`, and order ids are sequential integers that need no DoS-resistant hash.
#[derive(Clone, Copy, Default)]
struct IdHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(SEED);
    }
}

type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// What the feed knows of a resting order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Resting {
    symbol: u32,
    side: Side,
    px: i64,
    /// Displayed quantity.
    qty: i64,
}

fn side_wire(side: Side) -> i32 {
    proto::Side::from(side) as i32
}

/// Turns engine events into the public order-level feed.
///
/// It remembers every resting order's symbol, side, price and displayed quantity, since
/// most engine events name only the order. It must see the events of every command the
/// engine applies after [`FeedBuilder::from_engine`], in order.
#[derive(Clone, Debug, Default)]
pub struct FeedBuilder {
    resting: IdMap<Resting>,
}

impl FeedBuilder {
    /// A builder that knows every order resting in `engine`'s books now.
    pub fn from_engine<B: Book>(engine: &Engine<B>) -> Self {
        let mut resting = IdMap::default();
        for symbol in 0..engine.symbols_len() as u32 {
            for side in [Side::Buy, Side::Sell] {
                for order in engine.book_orders(SymbolId(symbol), side, usize::MAX) {
                    let known = Resting { symbol, side, px: order.px.0, qty: order.qty_visible.0 };
                    resting.insert(order.id.0, known);
                }
            }
        }
        FeedBuilder { resting }
    }

    /// Resting orders the builder knows.
    pub fn len(&self) -> usize {
        self.resting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.resting.is_empty()
    }

    /// Every book of `engine` after log entry `log_index` (stamped `ts`): where a feed
    /// starts. Symbols by id; orders per symbol, bids best first then asks best first,
    /// each level in priority order, with their displayed quantity; the last trade price
    /// of every symbol that traded.
    ///
    /// The image is read from the engine, which must be in the state this builder
    /// follows (checked in debug builds).
    pub fn image<B: Book>(&self, engine: &Engine<B>, log_index: u64, ts: u64) -> proto::BookImage {
        let image = book_image(engine, log_index, ts);
        debug_assert_eq!(image.orders.len(), self.resting.len(), "the feed builder lost track of the books");
        debug_assert!(
            image.orders.iter().all(|o| self.resting.get(&o.order).is_some_and(|r| r.px == o.px && r.qty == o.qty)),
            "the feed builder lost track of the books"
        );
        image
    }

    /// Appends the public events of one applied command to `out`, in order. `engine` is
    /// the engine after the command (or after a later command of the same log entry):
    /// a new symbol's specification is read from it. `trade_seq` numbers the trades of
    /// the log entry from 0; pass the same counter for every command of one entry.
    ///
    /// Allocates nothing beyond the growth of `out` and of the order map.
    pub fn command<B: Book>(
        &mut self,
        engine: &Engine<B>,
        events: &[Event],
        trade_seq: &mut u32,
        out: &mut Vec<proto::OrderEvent>,
    ) {
        // The `Rested` a non-crossing move was published with.
        let mut consumed = None;
        for (i, event) in events.iter().enumerate() {
            if consumed == Some(i) {
                continue;
            }
            match *event {
                Event::SymbolCreated { symbol } => {
                    let spec = crate::convert::symbol_spec_wire(engine, symbol);
                    debug_assert!(spec.is_some(), "a created symbol has a spec");
                    let info = proto::SymbolInfo { id: symbol.0, spec };
                    out.push(public(symbol.0, Public::SymbolAdded(info)));
                }
                Event::Rested { order, symbol, side, px, qty_visible } => {
                    let known = Resting { symbol: symbol.0, side, px: px.0, qty: qty_visible.0 };
                    let previous = self.resting.insert(order.0, known);
                    debug_assert!(previous.is_none(), "order {order} rested twice");
                    let added =
                        proto::OrderAdded { order: order.0, side: side_wire(side), px: px.0, qty: qty_visible.0 };
                    out.push(public(symbol.0, Public::Added(added)));
                }
                Event::Trade { symbol, px, qty, taker_side, maker_order, taker_order, maker_done, .. } => {
                    let seq = *trade_seq;
                    *trade_seq = trade_seq.wrapping_add(1);
                    let shown = self.resting.get(&maker_order.0).map_or(qty.0, |r| r.qty);
                    debug_assert!(self.resting.contains_key(&maker_order.0), "maker {maker_order} not known");
                    let mut remaining = (shown - qty.0).max(0);
                    if remaining == 0 && !maker_done {
                        // The iceberg's slice is used up and a new one shows: the order
                        // stays in the book, so `remaining` is the new slice.
                        remaining = refreshed_slice(&events[i + 1..], maker_order).unwrap_or(0);
                        debug_assert!(remaining > 0, "a used-up slice of {maker_order} without a refresh");
                    }
                    if remaining == 0 {
                        self.resting.remove(&maker_order.0);
                    } else if let Some(known) = self.resting.get_mut(&maker_order.0) {
                        known.qty = remaining;
                    }
                    let executed = proto::OrderExecuted {
                        order: maker_order.0,
                        taker_order: taker_order.0,
                        taker_side: side_wire(taker_side),
                        px: px.0,
                        qty: qty.0,
                        remaining,
                        trade_seq: seq,
                    };
                    out.push(public(symbol.0, Public::Executed(executed)));
                }
                Event::Refreshed { order, qty_visible } => {
                    if let Some(known) = self.resting.get_mut(&order.0) {
                        known.qty = qty_visible.0;
                        let replaced = proto::OrderReplaced { order: order.0, px: known.px, qty: qty_visible.0 };
                        out.push(public(known.symbol, Public::Replaced(replaced)));
                    }
                }
                Event::Reduced { order, qty_remaining, .. } => {
                    // A reduce takes the hidden reserve first: what is shown shrinks only
                    // once the remainder is below it.
                    if let Some(known) = self.resting.get_mut(&order.0) {
                        let shown = known.qty.min(qty_remaining.0);
                        if shown < known.qty {
                            let cancelled =
                                proto::OrderCancelled { order: order.0, qty: known.qty - shown, remaining: shown };
                            known.qty = shown;
                            out.push(public(known.symbol, Public::Cancelled(cancelled)));
                        }
                    }
                }
                Event::Cancelled { order, .. } => {
                    // Orders not in the book (remainders of incoming orders, stops) have
                    // nothing public to cancel.
                    if let Some(known) = self.resting.remove(&order.0) {
                        let cancelled = proto::OrderCancelled { order: order.0, qty: known.qty, remaining: 0 };
                        out.push(public(known.symbol, Public::Cancelled(cancelled)));
                    }
                }
                Event::Moved { order, .. } => {
                    let Some(known) = self.resting.get(&order.0).copied() else { continue };
                    match rested_after_move(events, i + 1, order) {
                        Some((at, px, qty)) => {
                            // Repriced in place: a new level, a full slice, the back of
                            // the queue.
                            consumed = Some(at);
                            self.resting.insert(order.0, Resting { px, qty, ..known });
                            let replaced = proto::OrderReplaced { order: order.0, px, qty };
                            out.push(public(known.symbol, Public::Replaced(replaced)));
                        }
                        None => {
                            // It crosses: it leaves the book now, trades as the incoming
                            // order and may rest again (OrderAdded, same id).
                            self.resting.remove(&order.0);
                            let cancelled = proto::OrderCancelled { order: order.0, qty: known.qty, remaining: 0 };
                            out.push(public(known.symbol, Public::Cancelled(cancelled)));
                        }
                    }
                }
                Event::AssetCreated { .. }
                | Event::DayTrading(_)
                | Event::AccountCreated { .. }
                | Event::AccountSuspended { .. }
                | Event::AccountResumed { .. }
                | Event::Balance { .. }
                | Event::Rejected { .. }
                | Event::Accepted { .. }
                | Event::Triggered { .. }
                | Event::Position { .. }
                | Event::Mark { .. }
                | Event::Liquidated { .. }
                | Event::PositionTransferred { .. }
                | Event::Shortfall { .. }
                | Event::Settled { .. }
                | Event::Settlement { .. } => {}
            }
        }
    }
}

fn public(symbol: u32, event: Public) -> proto::OrderEvent {
    proto::OrderEvent { symbol, symbol_seq: 0, event: Some(event) }
}

/// The new slice of an iceberg whose slice a trade used up: its `Refreshed` follows the
/// trade, with only balance and (in a margin symbol) position changes between.
fn refreshed_slice(after: &[Event], order: OrderId) -> Option<i64> {
    let settlement = |e: &&Event| matches!(e, Event::Balance { .. } | Event::Position { .. } | Event::Shortfall { .. });
    after.iter().find(|e| !settlement(e)).and_then(|e| match *e {
        Event::Refreshed { order: o, qty_visible } if o == order => Some(qty_visible.0),
        _ => None,
    })
}

/// A move that does not cross is `Moved`, balance changes, then `Rested` of the same
/// order; one that crosses trades or cancels before anything rests. Returns the index
/// of that `Rested`, its price and displayed quantity.
fn rested_after_move(events: &[Event], from: usize, order: OrderId) -> Option<(usize, i64, i64)> {
    let at = from + events.get(from..)?.iter().position(|e| !matches!(e, Event::Balance { .. }))?;
    match events[at] {
        Event::Rested { order: o, px, qty_visible, .. } if o == order => Some((at, px.0, qty_visible.0)),
        _ => None,
    }
}

/// Every book of `engine` after log entry `log_index`: see [`FeedBuilder::image`].
pub fn book_image<B: Book>(engine: &Engine<B>, log_index: u64, ts: u64) -> proto::BookImage {
    let mut image = proto::BookImage { log_index, ts, ..Default::default() };
    for symbol in (0..engine.symbols_len() as u32).map(SymbolId) {
        let spec = crate::convert::symbol_spec_wire(engine, symbol);
        image.symbols.push(proto::SymbolInfo { id: symbol.0, spec });
        for side in [Side::Buy, Side::Sell] {
            image.orders.extend(engine.book_orders(symbol, side, usize::MAX).into_iter().map(|o| {
                proto::RestingOrder {
                    order: o.id.0,
                    symbol: symbol.0,
                    side: side_wire(side),
                    px: o.px.0,
                    qty: o.qty_visible.0,
                }
            }));
        }
        if let Some(px) = engine.last_px(symbol) {
            image.last_trades.push(proto::LastTrade { symbol: symbol.0, px: px.0 });
        }
    }
    image
}

#[cfg(test)]
mod tests {
    use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec, Tif};
    use bourse_engine::fuzzing::{body_from_bytes, Bytes, Differential, CLIENTS};
    use bourse_engine::{AccountId, Amount, AssetId, ClientId, Outcome, Px, Qty};

    use super::*;

    /// The books as a subscriber rebuilds them from the feed: orders in arrival order,
    /// so an order's place in its level is its place in this list.
    #[derive(Default)]
    struct Replica {
        orders: Vec<proto::RestingOrder>,
        symbols: Vec<proto::SymbolInfo>,
    }

    impl Replica {
        fn from_image(image: &proto::BookImage) -> Self {
            Replica { orders: image.orders.clone(), symbols: image.symbols.clone() }
        }

        fn position(&self, order: u64) -> usize {
            self.orders.iter().position(|o| o.order == order).unwrap_or_else(|| panic!("order {order} unknown"))
        }

        fn apply(&mut self, event: &proto::OrderEvent) {
            match event.event.as_ref().expect("an event") {
                Public::SymbolAdded(info) => {
                    assert_eq!(info.id as usize, self.symbols.len());
                    self.symbols.push(info.clone());
                }
                Public::Added(a) => {
                    assert!(self.orders.iter().all(|o| o.order != a.order), "order {} added twice", a.order);
                    assert!(a.qty > 0);
                    let (symbol, order, side, px, qty) = (event.symbol, a.order, a.side, a.px, a.qty);
                    self.orders.push(proto::RestingOrder { order, symbol, side, px, qty });
                }
                Public::Executed(e) => {
                    let at = self.position(e.order);
                    let order = &mut self.orders[at];
                    assert_eq!((order.symbol, order.px), (event.symbol, e.px));
                    assert_ne!(order.side, e.taker_side);
                    assert!(e.qty > 0 && e.qty <= order.qty, "executed {} of {}", e.qty, order.qty);
                    assert!(e.remaining == order.qty - e.qty || (e.qty == order.qty && e.remaining > 0));
                    order.qty = e.remaining;
                    if e.remaining == 0 {
                        self.orders.remove(at);
                    }
                }
                Public::Cancelled(c) => {
                    let at = self.position(c.order);
                    let order = &mut self.orders[at];
                    assert_eq!(order.symbol, event.symbol);
                    assert!(c.qty > 0 && c.remaining == order.qty - c.qty && c.remaining >= 0);
                    order.qty = c.remaining;
                    if c.remaining == 0 {
                        self.orders.remove(at);
                    }
                }
                Public::Replaced(r) => {
                    let at = self.position(r.order);
                    let mut order = self.orders.remove(at);
                    assert_eq!(order.symbol, event.symbol);
                    assert!(r.qty > 0);
                    (order.px, order.qty) = (r.px, r.qty);
                    self.orders.push(order);
                }
            }
        }

        /// One side of one book in priority order, as `(order, px, qty)`.
        fn side(&self, symbol: u32, side: Side) -> Vec<(u64, i64, i64)> {
            let mut orders: Vec<&proto::RestingOrder> =
                self.orders.iter().filter(|o| o.symbol == symbol && o.side == side_wire(side)).collect();
            // Stable: within a price, arrival order is priority order.
            match side {
                Side::Buy => orders.sort_by_key(|o| std::cmp::Reverse(o.px)),
                Side::Sell => orders.sort_by_key(|o| o.px),
            }
            orders.into_iter().map(|o| (o.order, o.px, o.qty)).collect()
        }

        fn assert_matches<B: Book>(&self, engine: &Engine<B>) {
            assert_eq!(self.symbols.len(), engine.symbols_len());
            for symbol in 0..engine.symbols_len() as u32 {
                for side in [Side::Buy, Side::Sell] {
                    let expected: Vec<(u64, i64, i64)> = engine
                        .book_orders(SymbolId(symbol), side, usize::MAX)
                        .iter()
                        .map(|o| (o.id.0, o.px.0, o.qty_visible.0))
                        .collect();
                    assert_eq!(self.side(symbol, side), expected, "symbol {symbol} {side:?}");
                }
            }
        }
    }

    /// An engine, its feed and a replica of the books built from the feed.
    struct Fixture {
        engine: Engine,
        builder: FeedBuilder,
        replica: Replica,
        seq: u64,
        events: Vec<Event>,
        trade_seq: u32,
    }

    const A: AccountId = AccountId(0);
    const B: AccountId = AccountId(1);
    const SYM: SymbolId = SymbolId(0);

    impl Fixture {
        /// Assets USD and ACME, two funded accounts; no symbol yet.
        fn new() -> Self {
            let engine = Engine::default();
            let builder = FeedBuilder::from_engine(&engine);
            let replica = Replica::from_image(&builder.image(&engine, 0, 0));
            let mut f = Fixture { engine, builder, replica, seq: 0, events: Vec::new(), trade_seq: 0 };
            f.run(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
            f.run(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 });
            for account in [A, B] {
                f.run(CommandBody::CreateAccount);
                f.run(CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(100_000_000) });
                f.run(CommandBody::Credit { account, asset: AssetId(1), amount: Amount(100_000) });
            }
            f
        }

        fn with_symbol(policy: MatchPolicy) -> Self {
            let mut f = Fixture::new();
            let feed = f.run(CommandBody::CreateSymbol(Box::new(spec(policy))));
            assert_eq!(feed.len(), 1);
            f
        }

        /// Applies one command as its own log entry; returns its feed events, which the
        /// replica has applied and checked against the engine.
        fn run(&mut self, body: CommandBody) -> Vec<proto::OrderEvent> {
            self.seq += 1;
            self.events.clear();
            let command = Command { client: ClientId(1), seq: self.seq, ts: self.seq * 10, body };
            let applied = self.engine.apply(&command, &mut self.events);
            assert!(matches!(applied.outcome, Outcome::Ok { .. }), "{command:?}: {applied:?}");
            let mut out = Vec::new();
            self.trade_seq = 0;
            self.builder.command(&self.engine, &self.events, &mut self.trade_seq, &mut out);
            for event in &out {
                self.replica.apply(event);
            }
            self.replica.assert_matches(&self.engine);
            assert_eq!(self.builder.len(), self.replica.orders.len());
            out
        }

        fn place(&mut self, request: OrderRequest) -> (u64, Vec<proto::OrderEvent>) {
            let id = self.engine.next_order_id().0;
            (id, self.run(CommandBody::Place(request)))
        }

        fn limit(&mut self, account: AccountId, side: Side, px: i64, qty: i64) -> (u64, Vec<proto::OrderEvent>) {
            self.place(OrderRequest::limit(account, SYM, side, Px(px), Qty(qty), Tif::Gtc))
        }
    }

    fn spec(policy: MatchPolicy) -> SymbolSpec {
        SymbolSpec {
            name: "ACME/USD".into(),
            base: AssetId(1),
            quote: AssetId(0),
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(100_000),
            fee_maker: Amount(0),
            fee_taker: Amount(0),
            policy,
        }
    }

    fn added(symbol: u32, order: u64, side: Side, px: i64, qty: i64) -> proto::OrderEvent {
        public(symbol, Public::Added(proto::OrderAdded { order, side: side_wire(side), px, qty }))
    }

    fn executed(
        order: u64,
        taker: u64,
        taker_side: Side,
        px: i64,
        qty: i64,
        remaining: i64,
        seq: u32,
    ) -> proto::OrderEvent {
        let e = proto::OrderExecuted {
            order,
            taker_order: taker,
            taker_side: side_wire(taker_side),
            px,
            qty,
            remaining,
            trade_seq: seq,
        };
        public(0, Public::Executed(e))
    }

    fn cancelled(order: u64, qty: i64, remaining: i64) -> proto::OrderEvent {
        public(0, Public::Cancelled(proto::OrderCancelled { order, qty, remaining }))
    }

    fn replaced(order: u64, px: i64, qty: i64) -> proto::OrderEvent {
        public(0, Public::Replaced(proto::OrderReplaced { order, px, qty }))
    }

    #[test]
    fn a_new_symbol_is_announced_with_its_spec() {
        let mut f = Fixture::new();
        let feed = f.run(CommandBody::CreateSymbol(Box::new(spec(MatchPolicy::ProRata))));
        let info = proto::SymbolInfo { id: 0, spec: Some((&spec(MatchPolicy::ProRata)).into()) };
        assert_eq!(feed, vec![public(0, Public::SymbolAdded(info))]);
        // Accounts, assets and balances are not public.
        assert!(f.run(CommandBody::CreateAccount).is_empty());
        assert!(f.run(CommandBody::Deposit { account: A, asset: AssetId(0), amount: Amount(5) }).is_empty());
    }

    #[test]
    fn rests_and_trades_are_added_and_executed_with_trade_seq_per_entry() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let (s1, feed) = f.limit(A, Side::Sell, 100, 5);
        assert_eq!(feed, vec![added(0, s1, Side::Sell, 100, 5)]);
        let (s2, _) = f.limit(A, Side::Sell, 101, 5);
        // A buy that takes all of s1, part of s2, and rests the rest.
        let (b, feed) = f.limit(B, Side::Buy, 101, 12);
        assert_eq!(
            feed,
            vec![
                executed(s1, b, Side::Buy, 100, 5, 0, 0),
                executed(s2, b, Side::Buy, 101, 5, 0, 1),
                added(0, b, Side::Buy, 101, 2),
            ]
        );
        // A second command of the same entry continues the numbering.
        f.events.clear();
        let command = Command {
            client: ClientId(1),
            seq: f.seq + 1,
            ts: 1,
            body: CommandBody::Place(OrderRequest::limit(A, SYM, Side::Sell, Px(101), Qty(1), Tif::Ioc)),
        };
        f.seq += 1;
        f.engine.apply(&command, &mut f.events);
        let mut out = Vec::new();
        let mut trade_seq = 2;
        f.builder.command(&f.engine, &f.events, &mut trade_seq, &mut out);
        assert_eq!(out, vec![executed(b, b + 1, Side::Sell, 101, 1, 1, 2)]);
        assert_eq!(trade_seq, 3);
    }

    #[test]
    fn an_unfilled_remainder_that_never_rested_is_not_published() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let (s1, _) = f.limit(A, Side::Sell, 100, 5);
        let (b, feed) = f.place(OrderRequest::market(B, SYM, Side::Buy, Qty(8), Some(Amount(10_000))));
        assert_eq!(feed, vec![executed(s1, b, Side::Buy, 100, 5, 0, 0)]);
        let (_, feed) = f.place(OrderRequest::limit(B, SYM, Side::Buy, Px(99), Qty(8), Tif::Ioc));
        assert!(feed.is_empty());
    }

    #[test]
    fn an_iceberg_shows_its_slice_and_refreshes_to_the_back() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let iceberg = OrderRequest {
            display_qty: Some(Qty(4)),
            ..OrderRequest::limit(A, SYM, Side::Sell, Px(100), Qty(10), Tif::Gtc)
        };
        let (ice, feed) = f.place(iceberg);
        assert_eq!(feed, vec![added(0, ice, Side::Sell, 100, 4)]);
        let (other, _) = f.limit(A, Side::Sell, 100, 3);
        // Takes the slice (the order stays, showing 4 more, behind `other`), then 2 of `other`.
        let (b, feed) = f.limit(B, Side::Buy, 100, 6);
        assert_eq!(
            feed,
            vec![
                executed(ice, b, Side::Buy, 100, 4, 4, 0),
                replaced(ice, 100, 4),
                executed(other, b, Side::Buy, 100, 2, 1, 1),
            ]
        );
        // Reducing the reserve shows nothing; reducing into the slice cancels displayed qty.
        assert!(f.run(CommandBody::Reduce { account: A, symbol: SYM, order: OrderId(ice), qty_by: Qty(2) }).is_empty());
        let feed = f.run(CommandBody::Reduce { account: A, symbol: SYM, order: OrderId(ice), qty_by: Qty(1) });
        assert_eq!(feed, vec![cancelled(ice, 1, 3)]);
        // The last slice: no refresh, the order leaves.
        let (b, feed) = f.limit(B, Side::Buy, 100, 4);
        assert_eq!(feed, vec![executed(other, b, Side::Buy, 100, 1, 0, 0), executed(ice, b, Side::Buy, 100, 3, 0, 1)]);
    }

    #[test]
    fn cancels_and_reduces_remove_displayed_quantity() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let (o, _) = f.limit(A, Side::Buy, 90, 10);
        let feed = f.run(CommandBody::Reduce { account: A, symbol: SYM, order: OrderId(o), qty_by: Qty(4) });
        assert_eq!(feed, vec![cancelled(o, 4, 6)]);
        let feed = f.run(CommandBody::Reduce { account: A, symbol: SYM, order: OrderId(o), qty_by: Qty(40) });
        assert_eq!(feed, vec![cancelled(o, 6, 0)]);
        let (o, _) = f.limit(A, Side::Buy, 90, 10);
        let feed = f.run(CommandBody::Cancel { account: A, symbol: SYM, order: OrderId(o) });
        assert_eq!(feed, vec![cancelled(o, 10, 0)]);
        // A pending stop was never in the book.
        let stop = OrderRequest {
            kind: OrderKind::StopLimit { trigger: Px(200), px: Px(200) },
            ..OrderRequest::limit(A, SYM, Side::Buy, Px(200), Qty(1), Tif::Gtc)
        };
        let (stop, feed) = f.place(stop);
        assert!(feed.is_empty());
        assert!(f.run(CommandBody::Cancel { account: A, symbol: SYM, order: OrderId(stop) }).is_empty());
    }

    #[test]
    fn a_move_that_does_not_cross_replaces_with_a_full_slice() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let iceberg = OrderRequest {
            display_qty: Some(Qty(4)),
            ..OrderRequest::limit(A, SYM, Side::Buy, Px(90), Qty(10), Tif::Gtc)
        };
        let (ice, _) = f.place(iceberg);
        let (_, _) = f.limit(B, Side::Buy, 91, 1);
        let (s, _) = f.limit(B, Side::Sell, 95, 5);
        // Trade 1 of 91, then 3 of the iceberg's slice.
        let (_, _) = f.place(OrderRequest::limit(B, SYM, Side::Sell, Px(90), Qty(4), Tif::Ioc));
        let feed = f.run(CommandBody::Move { account: A, symbol: SYM, order: OrderId(ice), px: Px(92) });
        assert_eq!(feed, vec![replaced(ice, 92, 4)]);
        // Same price: back of the level.
        let feed = f.run(CommandBody::Move { account: B, symbol: SYM, order: OrderId(s), px: Px(95) });
        assert_eq!(feed, vec![replaced(s, 95, 5)]);
    }

    #[test]
    fn a_move_that_crosses_leaves_trades_and_rests_again() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let (s, _) = f.limit(A, Side::Sell, 100, 3);
        let (b, _) = f.limit(B, Side::Buy, 95, 5);
        let feed = f.run(CommandBody::Move { account: B, symbol: SYM, order: OrderId(b), px: Px(100) });
        assert_eq!(
            feed,
            vec![cancelled(b, 5, 0), executed(s, b, Side::Buy, 100, 3, 0, 0), added(0, b, Side::Buy, 100, 2)]
        );
        // Crossing and filling completely: it just leaves.
        let (s, _) = f.limit(A, Side::Sell, 101, 5);
        let feed = f.run(CommandBody::Move { account: B, symbol: SYM, order: OrderId(b), px: Px(101) });
        assert_eq!(feed, vec![cancelled(b, 2, 0), executed(s, b, Side::Buy, 101, 2, 3, 0)]);
    }

    #[test]
    fn self_trade_prevention_cancels_the_resting_order() {
        let mut f = Fixture::with_symbol(MatchPolicy::ProRata);
        let (own, _) = f.limit(A, Side::Sell, 100, 3);
        let (theirs, _) = f.limit(B, Side::Sell, 101, 3);
        let request = OrderRequest {
            stp: Stp::CancelResting,
            ..OrderRequest::limit(A, SYM, Side::Buy, Px(101), Qty(4), Tif::Gtc)
        };
        let (b, feed) = f.place(request);
        assert_eq!(
            feed,
            vec![cancelled(own, 3, 0), executed(theirs, b, Side::Buy, 101, 3, 0, 0), added(0, b, Side::Buy, 101, 1)]
        );
    }

    #[test]
    fn a_triggered_stop_trades_and_rests() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        let (s1, _) = f.limit(A, Side::Sell, 100, 1);
        let (s2, _) = f.limit(A, Side::Sell, 105, 1);
        let stop = OrderRequest {
            kind: OrderKind::StopLimit { trigger: Px(100), px: Px(105) },
            ..OrderRequest::limit(B, SYM, Side::Buy, Px(105), Qty(3), Tif::Gtc)
        };
        let (stop, feed) = f.place(stop);
        assert!(feed.is_empty());
        let (b, feed) = f.limit(B, Side::Buy, 100, 1);
        assert_eq!(
            feed,
            vec![
                executed(s1, b, Side::Buy, 100, 1, 0, 0),
                executed(s2, stop, Side::Buy, 105, 1, 0, 1),
                added(0, stop, Side::Buy, 105, 2),
            ]
        );
    }

    #[test]
    fn an_image_taken_mid_stream_matches_the_books() {
        let mut f = Fixture::with_symbol(MatchPolicy::Fifo);
        f.limit(A, Side::Sell, 100, 3);
        f.limit(A, Side::Sell, 100, 2);
        f.limit(B, Side::Buy, 99, 7);
        f.limit(B, Side::Buy, 100, 1);
        let image = f.builder.image(&f.engine, 42, 7);
        assert_eq!((image.log_index, image.ts, image.symbols.len()), (42, 7, 1));
        assert_eq!(image.last_trades, vec![proto::LastTrade { symbol: 0, px: 100 }]);
        let orders: Vec<(u64, i64, i64)> = image.orders.iter().map(|o| (o.order, o.px, o.qty)).collect();
        assert_eq!(orders, vec![(3, 99, 7), (1, 100, 2), (2, 100, 2)]);
        let rebuilt = FeedBuilder::from_engine(&f.engine);
        assert_eq!(rebuilt.resting, f.builder.resting);
    }

    /// Random streams over the engine's fuzzing fixture (two symbols, one pro-rata; every
    /// order kind, cancels, reduces, moves, several accounts): after every command the
    /// books rebuilt from the feed equal the engine's, and a builder started mid-stream
    /// from the engine agrees with the one that saw everything.
    #[test]
    fn seeded_streams_rebuild_the_books_exactly() {
        for seed in 0..6u64 {
            let data = bourse_engine::fuzzing::seeded_bytes(seed, 24_000);
            let mut bytes = Bytes::new(&data);
            let mut d = Differential::new();
            let mut builder = FeedBuilder::from_engine(&d.fast);
            let mut replica = Replica::from_image(&builder.image(&d.fast, 0, 0));
            let mut late: Option<FeedBuilder> = None;
            let mut out = Vec::new();
            let mut out_late = Vec::new();
            let mut commands = 0;
            while !bytes.is_empty() {
                let client = usize::from(bytes.below(CLIENTS as u8));
                let body = body_from_bytes(&mut bytes, &d.fast);
                d.apply_as(client, body);
                out.clear();
                let mut trade_seq = 0;
                builder.command(&d.fast, d.events(), &mut trade_seq, &mut out);
                let trades = d.events().iter().filter(|e| matches!(e, Event::Trade { .. })).count();
                assert_eq!(trade_seq as usize, trades);
                for event in &out {
                    replica.apply(event);
                }
                replica.assert_matches(&d.fast);
                if let Some(late) = &mut late {
                    out_late.clear();
                    late.command(&d.fast, d.events(), &mut 0, &mut out_late);
                    assert_eq!(out_late, out);
                }
                commands += 1;
                if commands == 300 {
                    late = Some(FeedBuilder::from_engine(&d.fast));
                }
            }
        }
    }
}

//! [`MarketState`]: the L3 books a gateway keeps from the feed, and the market data
//! updates each feed entry produces.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;

use crate::proto;
use proto::market_data_update::Update;
use proto::order_event::Event as Kind;

const BID: usize = 0;
const ASK: usize = 1;

fn side_index(wire: i32) -> Option<usize> {
    match proto::Side::try_from(wire) {
        Ok(proto::Side::Buy) => Some(BID),
        Ok(proto::Side::Sell) => Some(ASK),
        _ => None,
    }
}

fn side_wire(side: usize) -> i32 {
    if side == BID {
        proto::Side::Buy as i32
    } else {
        proto::Side::Sell as i32
    }
}

fn update(ts: u64, update: Update) -> proto::MarketDataUpdate {
    proto::MarketDataUpdate { seq: 0, ts, update: Some(update), release_ts: 0 }
}

/// Feed input that does not fit the state: the feed and this state disagree, so the
/// state can no longer be trusted. Rebuild it from a new image
/// ([`MarketState::rebase`] keeps subscribers' sequence numbers going).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FeedError {
    /// An entry whose log index is not the one after the state's.
    LogIndex {
        expected: u64,
        got: u64,
    },
    UnknownSymbol {
        log_index: u64,
        symbol: u32,
    },
    UnknownOrder {
        log_index: u64,
        order: u64,
    },
    /// An order added while one with its id rests.
    DuplicateOrder {
        log_index: u64,
        order: u64,
    },
    /// An event that contradicts the state or is malformed: a missing event or side, a
    /// quantity that is not positive or does not add up, an execution at another price
    /// or from the wrong side, an event naming the wrong symbol, a symbol id out of
    /// order.
    Invalid {
        log_index: u64,
        order: u64,
        reason: &'static str,
    },
    /// An earlier entry failed; only [`MarketState::rebase`] brings the state back.
    Poisoned,
}

impl std::fmt::Display for FeedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FeedError::LogIndex { expected, got } => write!(f, "feed entry {got} where {expected} was expected"),
            FeedError::UnknownSymbol { log_index, symbol } => write!(f, "entry {log_index}: unknown symbol {symbol}"),
            FeedError::UnknownOrder { log_index, order } => write!(f, "entry {log_index}: unknown order {order}"),
            FeedError::DuplicateOrder { log_index, order } => {
                write!(f, "entry {log_index}: order {order} added twice")
            }
            FeedError::Invalid { log_index, order, reason } => write!(f, "entry {log_index}, order {order}: {reason}"),
            FeedError::Poisoned => f.write_str("an earlier feed entry failed; rebase from a new image"),
        }
    }
}

impl std::error::Error for FeedError {}

/// One price level: its displayed total and its orders by priority (a per-state
/// counter that grows with every insertion, so the back of the level is the largest).
#[derive(Clone, Debug, Default)]
struct Level {
    qty: i64,
    queue: BTreeMap<u64, u64>,
}

/// Where a resting order is.
#[derive(Clone, Copy, Debug)]
struct Slot {
    symbol: u32,
    side: usize,
    px: i64,
    qty: i64,
    priority: u64,
}

/// Best bid and offer as (px, qty).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Top {
    bid: Option<(i64, i64)>,
    ask: Option<(i64, i64)>,
}

#[derive(Clone, Debug)]
struct SymbolBook {
    info: proto::SymbolInfo,
    /// Per side, price → level.
    sides: [BTreeMap<i64, Level>; 2],
    /// The symbol_seq of the last L2 update.
    l2_seq: u64,
    /// The symbol_seq of the last order event.
    orders_seq: u64,
    /// As last published.
    top: Top,
    /// Trades seen by this state; `trades` 0 before the first.
    stats: proto::SymbolStats,
    last_px: Option<i64>,
}

impl SymbolBook {
    fn new(info: proto::SymbolInfo) -> Self {
        let stats = proto::SymbolStats { symbol: info.id, ..Default::default() };
        SymbolBook {
            info,
            sides: Default::default(),
            l2_seq: 0,
            orders_seq: 0,
            top: Top::default(),
            stats,
            last_px: None,
        }
    }

    fn level_qty(&self, side: usize, px: i64) -> i64 {
        self.sides[side].get(&px).map_or(0, |l| l.qty)
    }

    fn insert(&mut self, side: usize, px: i64, qty: i64, priority: u64, order: u64) {
        let level = self.sides[side].entry(px).or_default();
        level.qty += qty;
        level.queue.insert(priority, order);
    }

    fn remove(&mut self, slot: &Slot) {
        let levels = &mut self.sides[slot.side];
        if let Some(level) = levels.get_mut(&slot.px) {
            level.qty -= slot.qty;
            level.queue.remove(&slot.priority);
            if level.queue.is_empty() {
                levels.remove(&slot.px);
            }
        }
    }

    fn top(&self) -> Top {
        Top {
            bid: self.sides[BID].last_key_value().map(|(&px, l)| (px, l.qty)),
            ask: self.sides[ASK].first_key_value().map(|(&px, l)| (px, l.qty)),
        }
    }

    /// Levels of a side, best first.
    fn levels(&self, side: usize) -> Box<dyn Iterator<Item = (i64, &Level)> + '_> {
        let levels = self.sides[side].iter().map(|(&px, level)| (px, level));
        if side == BID {
            Box::new(levels.rev())
        } else {
            Box::new(levels)
        }
    }

    fn depth(&self, side: usize, levels_max: usize) -> Vec<proto::Level> {
        self.levels(side).take(levels_max).map(|(px, level)| proto::Level { px, qty: level.qty }).collect()
    }

    /// Every resting order, bids best first then asks best first, each level in
    /// priority order, as (order, side, px).
    fn orders(&self) -> impl Iterator<Item = (u64, usize, i64)> + '_ {
        [BID, ASK].into_iter().flat_map(move |side| {
            self.levels(side).flat_map(move |(px, level)| level.queue.values().map(move |&order| (order, side, px)))
        })
    }

    fn bbo(&self, log_index: u64) -> proto::BboUpdate {
        proto::BboUpdate {
            symbol: self.info.id,
            bid_px: self.top.bid.map(|(px, _)| px),
            bid_qty: self.top.bid.map_or(0, |(_, qty)| qty),
            ask_px: self.top.ask.map(|(px, _)| px),
            ask_qty: self.top.ask.map_or(0, |(_, qty)| qty),
            log_index,
        }
    }

    fn record_trade(&mut self, px: i64, qty: i64) {
        let stats = &mut self.stats;
        if stats.trades == 0 {
            (stats.open, stats.high, stats.low) = (px, px, px);
        }
        stats.high = stats.high.max(px);
        stats.low = stats.low.min(px);
        stats.last = px;
        stats.volume = stats.volume.saturating_add(qty);
        stats.trades += 1;
        self.last_px = Some(px);
    }
}

/// A price level an entry changed, with its quantity before the change.
#[derive(Clone, Copy, Debug)]
struct Touch {
    symbol: u32,
    side: usize,
    px: i64,
    before: i64,
}

/// The books of every symbol as the feed describes them (L3: every resting order with
/// its displayed quantity, in priority order), the sequence numbers of the channels,
/// and the statistics of the trades seen since the state started.
#[derive(Clone, Debug)]
pub struct MarketState {
    log_index: u64,
    ts: u64,
    books: Vec<SymbolBook>,
    orders: FxHashMap<u64, Slot>,
    priority_next: u64,
    poisoned: bool,
    /// Levels changed by the entry being applied.
    touched: Vec<Touch>,
    /// Symbols that traded in the entry being applied.
    traded: Vec<u32>,
}

impl MarketState {
    /// The state an image describes. Channel sequence numbers start at 0 and
    /// statistics are empty.
    pub fn from_image(image: &proto::BookImage) -> Result<MarketState, FeedError> {
        let log_index = image.log_index;
        let invalid = |order, reason| FeedError::Invalid { log_index, order, reason };
        let mut state = MarketState {
            log_index,
            ts: image.ts,
            books: Vec::with_capacity(image.symbols.len()),
            orders: FxHashMap::default(),
            priority_next: 0,
            poisoned: false,
            touched: Vec::new(),
            traded: Vec::new(),
        };
        for info in &image.symbols {
            if info.id as usize != state.books.len() {
                return Err(invalid(0, "image symbols are not numbered 0, 1, 2, ..."));
            }
            state.books.push(SymbolBook::new(info.clone()));
        }
        for order in &image.orders {
            let side = side_index(order.side).ok_or(invalid(order.order, "side unspecified"))?;
            if order.qty <= 0 {
                return Err(invalid(order.order, "quantity not positive"));
            }
            let symbol = order.symbol;
            let book = state.books.get_mut(symbol as usize).ok_or(FeedError::UnknownSymbol { log_index, symbol })?;
            let priority = state.priority_next;
            let slot = Slot { symbol, side, px: order.px, qty: order.qty, priority };
            if state.orders.insert(order.order, slot).is_some() {
                return Err(FeedError::DuplicateOrder { log_index, order: order.order });
            }
            state.priority_next += 1;
            book.insert(side, order.px, order.qty, priority, order.order);
        }
        for last in &image.last_trades {
            let symbol = last.symbol;
            let book = state.books.get_mut(symbol as usize).ok_or(FeedError::UnknownSymbol { log_index, symbol })?;
            book.last_px = Some(last.px);
        }
        for book in &mut state.books {
            book.top = book.top();
        }
        Ok(state)
    }

    /// Applies one feed entry and appends what it publishes to `out`: per event, in
    /// order, the stamped `OrderEvent` (CHANNEL_ORDERS) and for an execution its
    /// `TradeUpdate`; then an `L2Update` per changed level, a `BboUpdate` per symbol
    /// whose best bid or offer changed, and `SymbolStats` per symbol that traded. Every
    /// update carries the entry's `ts`; `seq` and `release_ts` are left 0.
    ///
    /// On an error the events before the bad one stay applied and their updates are in
    /// `out` (so what subscribers saw matches the state), and the state is poisoned:
    /// every later entry fails until [`MarketState::rebase`]. An entry at or below the
    /// state's log index is refused without poisoning (it was applied already).
    pub fn apply_entry(
        &mut self,
        entry: &proto::FeedEntry,
        out: &mut Vec<proto::MarketDataUpdate>,
    ) -> Result<(), FeedError> {
        if self.poisoned {
            return Err(FeedError::Poisoned);
        }
        // A message may account for entries without order events before its own.
        let expected = self.log_index + 1;
        let first = if entry.from_index == 0 { entry.log_index } else { entry.from_index };
        if first != expected || entry.log_index < first {
            self.poisoned = first > expected;
            return Err(FeedError::LogIndex { expected, got: first });
        }
        let mut result = Ok(());
        for event in &entry.events {
            if let Err(error) = self.apply_event(entry.log_index, entry.ts, event, out) {
                result = Err(error);
                break;
            }
        }
        self.flush(entry.log_index, entry.ts, out);
        match result {
            Ok(()) => (self.log_index, self.ts) = (entry.log_index, entry.ts),
            Err(_) => self.poisoned = true,
        }
        result
    }

    fn slot(&self, log_index: u64, symbol: u32, order: u64) -> Result<Slot, FeedError> {
        let slot = *self.orders.get(&order).ok_or(FeedError::UnknownOrder { log_index, order })?;
        if slot.symbol != symbol {
            return Err(FeedError::Invalid { log_index, order, reason: "the event names another symbol" });
        }
        Ok(slot)
    }

    fn touch(&mut self, symbol: u32, side: usize, px: i64) {
        let before = self.books[symbol as usize].level_qty(side, px);
        self.touched.push(Touch { symbol, side, px, before });
    }

    /// Sets a resting order's displayed quantity in place; 0 takes it out.
    fn set_qty(&mut self, order: u64, slot: Slot, qty: i64) {
        self.touch(slot.symbol, slot.side, slot.px);
        let book = &mut self.books[slot.symbol as usize];
        if qty == 0 {
            book.remove(&slot);
            self.orders.remove(&order);
            return;
        }
        if let Some(level) = book.sides[slot.side].get_mut(&slot.px) {
            level.qty += qty - slot.qty;
        }
        if let Some(known) = self.orders.get_mut(&order) {
            known.qty = qty;
        }
    }

    fn apply_event(
        &mut self,
        log_index: u64,
        ts: u64,
        event: &proto::OrderEvent,
        out: &mut Vec<proto::MarketDataUpdate>,
    ) -> Result<(), FeedError> {
        let invalid = |order, reason| FeedError::Invalid { log_index, order, reason };
        let symbol = event.symbol;
        let mut trade = None;
        match event.event.as_ref().ok_or(invalid(0, "event missing"))? {
            Kind::SymbolAdded(info) => {
                if info.id != symbol {
                    return Err(invalid(0, "symbol_added names another symbol"));
                }
                if symbol as usize != self.books.len() {
                    return Err(invalid(0, "symbol ids are not consecutive"));
                }
                self.books.push(SymbolBook::new(info.clone()));
            }
            Kind::Added(added) => {
                let order = added.order;
                let side = side_index(added.side).ok_or(invalid(order, "side unspecified"))?;
                if added.qty <= 0 {
                    return Err(invalid(order, "quantity not positive"));
                }
                if symbol as usize >= self.books.len() {
                    return Err(FeedError::UnknownSymbol { log_index, symbol });
                }
                if self.orders.contains_key(&order) {
                    return Err(FeedError::DuplicateOrder { log_index, order });
                }
                self.touch(symbol, side, added.px);
                let priority = self.priority_next;
                self.priority_next += 1;
                self.books[symbol as usize].insert(side, added.px, added.qty, priority, order);
                self.orders.insert(order, Slot { symbol, side, px: added.px, qty: added.qty, priority });
            }
            Kind::Executed(executed) => {
                let order = executed.order;
                let slot = self.slot(log_index, symbol, order)?;
                if executed.px != slot.px {
                    return Err(invalid(order, "executed at a price the order does not rest at"));
                }
                if side_index(executed.taker_side) != Some(1 - slot.side) {
                    return Err(invalid(order, "the taker is on the maker's side"));
                }
                if executed.qty <= 0 || executed.qty > slot.qty {
                    return Err(invalid(order, "executed quantity not within the displayed quantity"));
                }
                // An iceberg whose slice was used up reports the new slice it shows.
                let refreshed = executed.qty == slot.qty && executed.remaining > 0;
                if executed.remaining != slot.qty - executed.qty && !refreshed {
                    return Err(invalid(order, "remaining quantity does not add up"));
                }
                self.set_qty(order, slot, executed.remaining);
                self.books[symbol as usize].record_trade(executed.px, executed.qty);
                self.traded.push(symbol);
                trade = Some(proto::TradeUpdate {
                    symbol,
                    px: executed.px,
                    qty: executed.qty,
                    taker_side: executed.taker_side,
                    log_index,
                    trade_seq: executed.trade_seq,
                });
            }
            Kind::Cancelled(cancelled) => {
                let order = cancelled.order;
                let slot = self.slot(log_index, symbol, order)?;
                if cancelled.qty <= 0 || cancelled.remaining < 0 || cancelled.remaining != slot.qty - cancelled.qty {
                    return Err(invalid(order, "cancelled quantities do not add up"));
                }
                self.set_qty(order, slot, cancelled.remaining);
            }
            Kind::Replaced(replaced) => {
                let order = replaced.order;
                let slot = self.slot(log_index, symbol, order)?;
                if replaced.qty <= 0 {
                    return Err(invalid(order, "quantity not positive"));
                }
                self.touch(symbol, slot.side, slot.px);
                self.touch(symbol, slot.side, replaced.px);
                let priority = self.priority_next;
                self.priority_next += 1;
                let book = &mut self.books[symbol as usize];
                book.remove(&slot);
                book.insert(slot.side, replaced.px, replaced.qty, priority, order);
                self.orders.insert(order, Slot { px: replaced.px, qty: replaced.qty, priority, ..slot });
            }
        }
        let book = &mut self.books[symbol as usize];
        book.orders_seq += 1;
        let stamped = proto::OrderEvent { symbol_seq: book.orders_seq, ..event.clone() };
        out.push(update(ts, Update::Order(stamped)));
        if let Some(trade) = trade {
            out.push(update(ts, Update::Trade(trade)));
        }
        Ok(())
    }

    /// The end of an entry: one L2 update per changed level, BBO and statistics.
    fn flush(&mut self, log_index: u64, ts: u64, out: &mut Vec<proto::MarketDataUpdate>) {
        let mut touched = std::mem::take(&mut self.touched);
        // Stable: the first touch of a level, which holds its quantity before the
        // entry, stays first.
        touched.sort_by_key(|t| (t.symbol, t.side, t.px));
        touched.dedup_by_key(|t| (t.symbol, t.side, t.px));
        for t in &touched {
            let book = &mut self.books[t.symbol as usize];
            let qty = book.level_qty(t.side, t.px);
            if qty != t.before {
                book.l2_seq += 1;
                let side = side_wire(t.side);
                let l2 = proto::L2Update { symbol: t.symbol, symbol_seq: book.l2_seq, side, px: t.px, qty, log_index };
                out.push(update(ts, Update::L2Update(l2)));
            }
        }
        touched.dedup_by_key(|t| t.symbol);
        for t in &touched {
            let book = &mut self.books[t.symbol as usize];
            let top = book.top();
            if top != book.top {
                book.top = top;
                out.push(update(ts, Update::Bbo(book.bbo(log_index))));
            }
        }
        touched.clear();
        self.touched = touched;
        self.traded.sort_unstable();
        self.traded.dedup();
        for &symbol in &self.traded {
            out.push(update(ts, Update::Stats(self.books[symbol as usize].stats)));
        }
        self.traded.clear();
    }

    /// Replaces the books with those of a newer image (after the feed was lost or the
    /// state poisoned), keeping the channels' sequence numbers and the statistics, and
    /// appends to `out` what subscribers need to follow: for each symbol the image adds,
    /// its `symbol_added`; for each symbol whose orders differ, `OrderCancelled` of every
    /// order it had, then `OrderAdded` of every order it has, in priority order; an
    /// `L2Update` per level that differs; a `BboUpdate` where the best bid or offer
    /// differs. Updates carry the image's log index and `ts`.
    ///
    /// Nothing changes if the image is malformed or lacks a symbol the state knows.
    pub fn rebase(
        &mut self,
        image: &proto::BookImage,
        out: &mut Vec<proto::MarketDataUpdate>,
    ) -> Result<(), FeedError> {
        let mut next = MarketState::from_image(image)?;
        let (log_index, ts) = (image.log_index, image.ts);
        if next.books.len() < self.books.len() {
            let reason = "the image lacks symbols the state knows";
            return Err(FeedError::Invalid { log_index, order: 0, reason });
        }
        for (id, book) in next.books.iter_mut().enumerate() {
            let Some(old) = self.books.get(id) else {
                book.orders_seq = 1;
                let event = proto::OrderEvent {
                    symbol: book.info.id,
                    symbol_seq: 1,
                    event: Some(Kind::SymbolAdded(book.info.clone())),
                };
                out.push(update(ts, Update::Order(event)));
                let empty = SymbolBook::new(book.info.clone());
                book.top = Top::default();
                rebase_book(&empty, &self.orders, book, &next.orders, log_index, ts, out);
                continue;
            };
            (book.l2_seq, book.orders_seq, book.stats) = (old.l2_seq, old.orders_seq, old.stats);
            book.top = old.top;
            rebase_book(old, &self.orders, book, &next.orders, log_index, ts, out);
        }
        next.priority_next = next.priority_next.max(self.priority_next);
        *self = next;
        Ok(())
    }

    /// The log index of the last entry applied (or of the image).
    pub fn log_index(&self) -> u64 {
        self.log_index
    }

    /// The timestamp of the last entry applied (or of the image).
    pub fn ts(&self) -> u64 {
        self.ts
    }

    /// True once an entry failed: see [`MarketState::apply_entry`].
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Every symbol, by id.
    pub fn symbols(&self) -> impl Iterator<Item = &proto::SymbolInfo> + '_ {
        self.books.iter().map(|b| &b.info)
    }

    pub fn symbols_len(&self) -> usize {
        self.books.len()
    }

    /// Resting orders in every book.
    pub fn orders_len(&self) -> usize {
        self.orders.len()
    }

    /// The L2 book of a symbol: up to `levels_max` levels a side, best first, with the
    /// symbol_seq of the last L2 update it includes.
    pub fn l2_snapshot(&self, symbol: u32, levels_max: usize) -> Option<proto::L2Snapshot> {
        let book = self.books.get(symbol as usize)?;
        Some(proto::L2Snapshot {
            symbol,
            symbol_seq: book.l2_seq,
            bids: book.depth(BID, levels_max),
            asks: book.depth(ASK, levels_max),
            log_index: self.log_index,
        })
    }

    /// The L3 image of a symbol for a new CHANNEL_ORDERS subscriber: an `OrderAdded` per
    /// resting order, bids best first then asks best first, each level in priority
    /// order. Each carries the symbol_seq of the last order event it includes; the
    /// live events that follow continue from there. Empty for an unknown symbol.
    pub fn l3_image(&self, symbol: u32) -> Vec<proto::OrderEvent> {
        let Some(book) = self.books.get(symbol as usize) else { return Vec::new() };
        book.orders()
            .map(|(order, side, px)| {
                let qty = self.orders.get(&order).map_or(0, |slot| slot.qty);
                let added = proto::OrderAdded { order, side: side_wire(side), px, qty };
                proto::OrderEvent { symbol, symbol_seq: book.orders_seq, event: Some(Kind::Added(added)) }
            })
            .collect()
    }

    /// The resting orders of one side of a book in priority order.
    pub fn orders(&self, symbol: u32, side: proto::Side) -> Vec<proto::RestingOrder> {
        let (Some(book), Some(wanted)) = (self.books.get(symbol as usize), side_index(side as i32)) else {
            return Vec::new();
        };
        book.levels(wanted)
            .flat_map(|(px, level)| level.queue.values().map(move |&order| (order, px)))
            .map(|(order, px)| {
                let qty = self.orders.get(&order).map_or(0, |slot| slot.qty);
                proto::RestingOrder { order, symbol, side: side as i32, px, qty }
            })
            .collect()
    }

    /// Every book as a [`proto::BookImage`] at the state's log index: what a feed that
    /// started here would send first.
    pub fn image(&self) -> proto::BookImage {
        let mut image = proto::BookImage { log_index: self.log_index, ts: self.ts, ..Default::default() };
        for book in &self.books {
            image.symbols.push(book.info.clone());
            let symbol = book.info.id;
            image.orders.extend(book.orders().map(|(order, side, px)| {
                let qty = self.orders.get(&order).map_or(0, |slot| slot.qty);
                proto::RestingOrder { order, symbol, side: side_wire(side), px, qty }
            }));
            if let Some(px) = book.last_px {
                image.last_trades.push(proto::LastTrade { symbol, px });
            }
        }
        image
    }

    /// The best bid and offer of a symbol now.
    pub fn bbo(&self, symbol: u32) -> Option<proto::BboUpdate> {
        Some(self.books.get(symbol as usize)?.bbo(self.log_index))
    }

    /// The trades of a symbol since the state started (`trades` 0: none yet).
    pub fn stats(&self, symbol: u32) -> Option<proto::SymbolStats> {
        Some(self.books.get(symbol as usize)?.stats)
    }

    /// The last trade price of a symbol: from the image, then from the feed.
    pub fn last_px(&self, symbol: u32) -> Option<i64> {
        self.books.get(symbol as usize)?.last_px
    }

    /// The symbol_seq of a symbol's last L2 update.
    pub fn l2_seq(&self, symbol: u32) -> Option<u64> {
        Some(self.books.get(symbol as usize)?.l2_seq)
    }

    /// The symbol_seq of a symbol's last order event.
    pub fn orders_seq(&self, symbol: u32) -> Option<u64> {
        Some(self.books.get(symbol as usize)?.orders_seq)
    }
}

/// The updates that take subscribers of one symbol from `old` to `new` (whose sequence
/// numbers continue `old`'s and are advanced here).
fn rebase_book(
    old: &SymbolBook,
    old_orders: &FxHashMap<u64, Slot>,
    new: &mut SymbolBook,
    new_orders: &FxHashMap<u64, Slot>,
    log_index: u64,
    ts: u64,
    out: &mut Vec<proto::MarketDataUpdate>,
) {
    let symbol = new.info.id;
    let qty_of = |orders: &FxHashMap<u64, Slot>, order: u64| orders.get(&order).map_or(0, |slot| slot.qty);
    let same_orders = old
        .orders()
        .map(|(order, side, px)| (order, side, px, qty_of(old_orders, order)))
        .eq(new.orders().map(|(order, side, px)| (order, side, px, qty_of(new_orders, order))));
    if !same_orders {
        let mut seq = new.orders_seq;
        let mut stamp = |event: Kind| {
            seq += 1;
            update(ts, Update::Order(proto::OrderEvent { symbol, symbol_seq: seq, event: Some(event) }))
        };
        for (order, _, _) in old.orders() {
            let cancelled = proto::OrderCancelled { order, qty: qty_of(old_orders, order), remaining: 0 };
            out.push(stamp(Kind::Cancelled(cancelled)));
        }
        for (order, side, px) in new.orders() {
            let added = proto::OrderAdded { order, side: side_wire(side), px, qty: qty_of(new_orders, order) };
            out.push(stamp(Kind::Added(added)));
        }
        new.orders_seq = seq;
    }
    for side in [BID, ASK] {
        let prices: std::collections::BTreeSet<i64> =
            old.sides[side].keys().chain(new.sides[side].keys()).copied().collect();
        for px in prices {
            let qty = new.level_qty(side, px);
            if qty != old.level_qty(side, px) {
                new.l2_seq += 1;
                let side = side_wire(side);
                let l2 = proto::L2Update { symbol, symbol_seq: new.l2_seq, side, px, qty, log_index };
                out.push(update(ts, Update::L2Update(l2)));
            }
        }
    }
    let top = new.top();
    if top != new.top {
        new.top = top;
        out.push(update(ts, Update::Bbo(new.bbo(log_index))));
    }
}

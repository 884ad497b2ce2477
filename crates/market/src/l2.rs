//! [`L2Book`]: a subscriber's L2 book of one symbol, kept by `L2Update`s, with gap
//! detection and recovery from a snapshot (the local order book procedure of Binance:
//! buffer the updates, fetch a snapshot, drop the updates it already includes, apply
//! the rest).

use std::collections::{BTreeMap, VecDeque};

use crate::proto;

/// Updates a book out of sync keeps for its next [`L2Book::resync`]; past this the
/// oldest are dropped (the resync then finds a gap and needs a newer snapshot).
const BUFFERED_MAX: usize = 1 << 16;

/// The book is not in sync: an update is missing (or no snapshot was applied yet).
/// Fetch a snapshot (`MarketData.GetL2`) and pass it to [`L2Book::resync`]; updates
/// that arrive meanwhile are kept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gap {
    pub symbol: u32,
    /// The symbol_seq the book needs next.
    pub expected: u64,
    /// The symbol_seq it got instead.
    pub got: u64,
}

impl std::fmt::Display for Gap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "symbol {}: L2 update {} where {} was expected", self.symbol, self.got, self.expected)
    }
}

impl std::error::Error for Gap {}

/// The L2 book of one symbol on the subscriber's side.
#[derive(Clone, Debug)]
pub struct L2Book {
    symbol: u32,
    /// The symbol_seq of the last update applied (or of the snapshot).
    seq: u64,
    log_index: u64,
    synced: bool,
    bids: BTreeMap<i64, i64>,
    asks: BTreeMap<i64, i64>,
    /// Updates received while out of sync, in arrival order.
    buffered: VecDeque<proto::L2Update>,
}

impl L2Book {
    /// A book with no snapshot yet: updates are buffered until [`L2Book::resync`].
    /// (Subscribe first, then fetch the snapshot, and nothing is missed.)
    pub fn new(symbol: u32) -> Self {
        L2Book {
            symbol,
            seq: 0,
            log_index: 0,
            synced: false,
            bids: BTreeMap::new(),
            asks: BTreeMap::new(),
            buffered: VecDeque::new(),
        }
    }

    /// The book a snapshot describes, in sync.
    pub fn from_snapshot(snapshot: &proto::L2Snapshot) -> Self {
        let mut book = L2Book::new(snapshot.symbol);
        book.load(snapshot);
        book
    }

    fn load(&mut self, snapshot: &proto::L2Snapshot) {
        self.seq = snapshot.symbol_seq;
        self.log_index = snapshot.log_index;
        self.synced = true;
        self.bids = snapshot.bids.iter().filter(|l| l.qty > 0).map(|l| (l.px, l.qty)).collect();
        self.asks = snapshot.asks.iter().filter(|l| l.qty > 0).map(|l| (l.px, l.qty)).collect();
    }

    /// Applies the next update. An update of another symbol, or at or below the book's
    /// symbol_seq (already included), is ignored. An update past the next one is a
    /// gap: it is kept, the book is out of sync, and every update until
    /// [`L2Book::resync`] is kept and answered with the gap.
    pub fn apply(&mut self, update: &proto::L2Update) -> Result<(), Gap> {
        if update.symbol != self.symbol {
            return Ok(());
        }
        let gap = Gap { symbol: self.symbol, expected: self.seq + 1, got: update.symbol_seq };
        if !self.synced {
            self.buffer(update);
            return Err(gap);
        }
        if update.symbol_seq <= self.seq {
            return Ok(());
        }
        if update.symbol_seq != self.seq + 1 {
            self.synced = false;
            self.buffer(update);
            return Err(gap);
        }
        self.set(update);
        Ok(())
    }

    fn buffer(&mut self, update: &proto::L2Update) {
        if self.buffered.len() == BUFFERED_MAX {
            self.buffered.pop_front();
        }
        self.buffered.push_back(*update);
    }

    fn set(&mut self, update: &proto::L2Update) {
        self.seq = update.symbol_seq;
        self.log_index = update.log_index;
        let levels = match proto::Side::try_from(update.side) {
            Ok(proto::Side::Buy) => &mut self.bids,
            Ok(proto::Side::Sell) => &mut self.asks,
            _ => return,
        };
        if update.qty > 0 {
            levels.insert(update.px, update.qty);
        } else {
            levels.remove(&update.px);
        }
    }

    /// Takes the book from a snapshot of its symbol, drops the kept updates it already
    /// includes and applies the rest. Still a gap when the kept updates do not follow
    /// on from the snapshot (it is too old: fetch another); the book then stays out of
    /// sync. A snapshot of another symbol changes nothing and answers the gap.
    pub fn resync(&mut self, snapshot: &proto::L2Snapshot) -> Result<(), Gap> {
        if snapshot.symbol != self.symbol {
            return Err(Gap { symbol: self.symbol, expected: self.seq + 1, got: snapshot.symbol_seq });
        }
        self.load(snapshot);
        while let Some(update) = self.buffered.pop_front() {
            if update.symbol_seq <= self.seq {
                continue;
            }
            if update.symbol_seq != self.seq + 1 {
                let gap = Gap { symbol: self.symbol, expected: self.seq + 1, got: update.symbol_seq };
                self.buffered.push_front(update);
                self.synced = false;
                return Err(gap);
            }
            self.set(&update);
        }
        Ok(())
    }

    pub fn symbol(&self) -> u32 {
        self.symbol
    }

    /// The symbol_seq of the last update applied (or of the snapshot).
    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// The log index of the last update applied (or of the snapshot).
    pub fn log_index(&self) -> u64 {
        self.log_index
    }

    /// False between a gap (or [`L2Book::new`]) and a successful resync.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    /// Updates kept for the next resync.
    pub fn buffered(&self) -> usize {
        self.buffered.len()
    }

    /// Bid levels as (px, qty), best (highest) first.
    pub fn bids(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.bids.iter().rev().map(|(&px, &qty)| (px, qty))
    }

    /// Ask levels as (px, qty), best (lowest) first.
    pub fn asks(&self) -> impl Iterator<Item = (i64, i64)> + '_ {
        self.asks.iter().map(|(&px, &qty)| (px, qty))
    }

    pub fn best_bid(&self) -> Option<(i64, i64)> {
        self.bids().next()
    }

    pub fn best_ask(&self) -> Option<(i64, i64)> {
        self.asks().next()
    }
}

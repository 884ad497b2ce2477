//! What a generated flow actually contained: the mix of command kinds, how many
//! commands traded or were refused, and the size of the books while it ran.
//!
//! These are statistics for reports, so shares are `f64` percentages; the commands
//! themselves never see a float.

use std::collections::BTreeMap;

use bourse_engine::{Applied, Event, Outcome};

/// The kinds of command a generator sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// A limit order that rests (placed without crossing).
    Gtc,
    /// A limit order through the spread; its remainder is cancelled.
    Ioc,
    Cancel,
    /// A new price for a resting order.
    Move,
    /// Takes part of a resting order's quantity off.
    Reduce,
    /// A market order, fill-or-kill, bounded by a budget (exchange-core's FOK_BUDGET).
    FokBudget,
}

impl Kind {
    pub const ALL: [Kind; 6] = [Kind::Gtc, Kind::Ioc, Kind::Cancel, Kind::Move, Kind::Reduce, Kind::FokBudget];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Gtc => "gtc",
            Kind::Ioc => "ioc",
            Kind::Cancel => "cancel",
            Kind::Move => "move",
            Kind::Reduce => "reduce",
            Kind::FokBudget => "fok_budget",
        }
    }
}

/// Counts of a generated flow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MixStats {
    pub commands: u64,
    pub by_kind: [u64; 6],
    /// Commands that produced at least one trade.
    pub traded: u64,
    /// Trades (fills) in all.
    pub trades: u64,
    pub rejected: u64,
    /// Refusals by reason name.
    pub rejects: BTreeMap<&'static str, u64>,
    /// Net change in resting orders caused by each kind (GTC adds, cancels remove,
    /// trades remove makers): where the book's inflow and outflow come from.
    pub resting_delta_by_kind: [i64; 6],
}

impl MixStats {
    /// Counts one applied command and its events; `resting_delta` is how many resting
    /// orders it added (negative: removed).
    pub fn record(&mut self, kind: Kind, applied: &Applied, events: &[Event], resting_delta: i64) {
        self.commands += 1;
        self.resting_delta_by_kind[kind.index()] += resting_delta;
        self.by_kind[kind.index()] += 1;
        let trades = events.iter().filter(|e| matches!(e, Event::Trade { .. })).count() as u64;
        self.trades += trades;
        self.traded += u64::from(trades > 0);
        if let Outcome::Rejected(reject) = applied.outcome {
            self.rejected += 1;
            *self.rejects.entry(reject.name()).or_default() += 1;
        }
    }

    fn pct(&self, count: u64) -> f64 {
        if self.commands == 0 {
            return 0.0;
        }
        count as f64 * 100.0 / self.commands as f64
    }

    /// The share of commands of one kind, in percent.
    pub fn share_pct(&self, kind: Kind) -> f64 {
        self.pct(self.by_kind[kind.index()])
    }

    pub fn traded_pct(&self) -> f64 {
        self.pct(self.traded)
    }

    pub fn rejected_pct(&self) -> f64 {
        self.pct(self.rejected)
    }
}

/// Book size sampled while a flow ran.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BookStats {
    pub samples: u64,
    /// Sums over samples of the resting orders and price levels of all books.
    pub orders_sum: u64,
    pub levels_sum: u64,
    pub orders_min: u64,
    pub orders_max: u64,
    pub levels_min: u64,
    pub levels_max: u64,
    /// Books the totals are spread over.
    pub books: u64,
}

impl BookStats {
    pub fn new(books: u64) -> Self {
        BookStats { orders_min: u64::MAX, levels_min: u64::MAX, books, ..BookStats::default() }
    }

    pub fn record(&mut self, orders: u64, levels: u64) {
        self.samples += 1;
        self.orders_sum += orders;
        self.levels_sum += levels;
        self.orders_min = self.orders_min.min(orders);
        self.orders_max = self.orders_max.max(orders);
        self.levels_min = self.levels_min.min(levels);
        self.levels_max = self.levels_max.max(levels);
    }

    /// Average resting orders per book.
    pub fn orders_avg(&self) -> f64 {
        self.orders_sum as f64 / (self.samples.max(1) * self.books.max(1)) as f64
    }

    /// Average price levels (both sides) per book.
    pub fn levels_avg(&self) -> f64 {
        self.levels_sum as f64 / (self.samples.max(1) * self.books.max(1)) as f64
    }
}

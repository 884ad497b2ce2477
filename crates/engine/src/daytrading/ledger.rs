//! The ledger's records: users with cash and whole-share holdings, their pending
//! orders, triggers and recent history, and the shared quote cache (spec section 1).
//!
//! Maps are `BTreeMap`s keyed by symbol: summaries list by symbol, snapshots encode in
//! that order, and no hash-map order can reach an output.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use super::event::DtReturn;
use super::grammar::{DtError, DtKind, Sym};

/// Cash or shares: spendable and held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub available: i64,
    pub reserved: i64,
}

impl Held {
    /// Available plus reserved (never overflows: the ledger keeps it within i64).
    pub fn total(&self) -> i64 {
        self.available + self.reserved
    }

    /// Moves `amount` from available to reserved; the caller checked it is there.
    pub fn reserve(&mut self, amount: i64) {
        assert!(amount >= 0 && self.available >= amount, "reserve beyond available");
        self.available -= amount;
        self.reserved += amount;
    }

    /// Moves `amount` from reserved back to available.
    pub fn release(&mut self, amount: i64) {
        assert!(amount >= 0 && self.reserved >= amount, "release beyond reserved");
        self.reserved -= amount;
        self.available += amount;
    }

    /// Takes `amount` out of reserved (spent or sold).
    pub fn spend_reserved(&mut self, amount: i64) {
        assert!(amount >= 0 && self.reserved >= amount, "spend beyond reserved");
        self.reserved -= amount;
    }
}

/// A pending `BUY` or `SELL`: locked price and quantities, and when it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub symbol: Sym,
    /// Cents per share.
    pub price: i64,
    pub shares: i64,
    /// Cost (buy) or proceeds (sell): shares × price.
    pub money: i64,
    /// The log stamp (ms) of the command that made it.
    pub stamp_ms: u64,
}

/// A buy trigger: the whole amount is reserved from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuyTrigger {
    pub reserve: i64,
    pub price: Option<i64>,
    /// Position in arming order: the ledger's counter at the command that last set its
    /// amount or price.
    pub arm_seq: u64,
    /// That command's transactionNum: firing records carry it.
    pub txn: u64,
}

/// A sell trigger: once it has a price, ⌊amount / price⌋ shares are reserved.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SellTrigger {
    pub amount: i64,
    pub price: Option<i64>,
    pub shares_reserved: i64,
    pub arm_seq: u64,
    pub txn: u64,
}

/// One command in a user's recent history: what `DISPLAY_SUMMARY` lists, and what a
/// retried command (exactly-once duplicate) is answered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryItem {
    pub txn: u64,
    pub stamp_ms: u64,
    pub kind: DtKind,
    pub error: Option<DtError>,
    pub ret: DtReturn,
}

/// One retail user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DtUser {
    pub name: String,
    pub cash: Held,
    /// Whole shares per symbol; an entry with nothing available or reserved is removed.
    pub holdings: BTreeMap<Sym, Held>,
    pub pending_buy: Option<Pending>,
    pub pending_sell: Option<Pending>,
    pub buy_triggers: BTreeMap<Sym, BuyTrigger>,
    pub sell_triggers: BTreeMap<Sym, SellTrigger>,
    /// Every command of this user applied so far.
    pub commands_total: u64,
    /// The last `summary_history + 1` of them (a summary shows those before itself),
    /// oldest first.
    pub history: VecDeque<HistoryItem>,
}

impl DtUser {
    pub fn new(name: &str) -> DtUser {
        DtUser {
            name: name.to_owned(),
            cash: Held::default(),
            holdings: BTreeMap::new(),
            pending_buy: None,
            pending_sell: None,
            buy_triggers: BTreeMap::new(),
            sell_triggers: BTreeMap::new(),
            commands_total: 0,
            history: VecDeque::new(),
        }
    }

    /// The holding of `symbol` (zero when none).
    pub fn holding(&self, symbol: Sym) -> Held {
        self.holdings.get(&symbol).copied().unwrap_or_default()
    }

    /// Changes the holding of `symbol` and drops it when it becomes empty.
    pub fn holding_update(&mut self, symbol: Sym, change: impl FnOnce(&mut Held)) {
        let held = self.holdings.entry(symbol).or_default();
        change(held);
        if *held == Held::default() {
            self.holdings.remove(&symbol);
        }
    }

    /// Records a command in the bounded history.
    pub fn history_push(&mut self, item: HistoryItem, kept_max: usize) {
        self.commands_total += 1;
        if kept_max == 0 {
            return;
        }
        if self.history.len() == kept_max {
            self.history.pop_front();
        }
        self.history.push_back(item);
    }
}

/// The cache entry of one symbol: the last real hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CachedQuote {
    pub price: i64,
    /// The log stamp (ms) of the entry that brought it: validity runs from here.
    pub arrival_ms: u64,
    /// The source's time, kept for answers and audit only.
    pub quote_server_time: u64,
}

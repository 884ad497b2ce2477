//! A book handed from one engine to another: what a symbol moving between groups of the
//! partitioned exchange (`bourse-shard`) takes with it.
//!
//! [`Engine::detach_book`] takes a spot symbol's resting orders (in priority order), its
//! waiting stops, their records and its last price out of an engine, with the holds
//! they reserve: each holder's reserved balance and the asset's supply fall by them, so
//! the engine's invariants hold after as before, with an empty book. [`Engine::attach_book`]
//! puts the same into another engine whose book of that symbol is empty: the orders
//! keep their ids, places in the queue, stamps and holds, so the book goes on matching
//! exactly as it would have where it was. Order ids must not meet: engines that hand
//! books to each other number their orders in spaces of their own
//! ([`Engine::number_orders_from`]).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::book::{Book, RestingOrder};
use crate::engine::{Engine, OrderRecord, StopOrder, Stops};
use crate::order::{hold_request, hold_resting};
use crate::types::{AccountId, Amount, AssetId, Px, Side, SymbolId};

/// A symbol's book on its way from one engine to another.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BookHandoff {
    pub symbol: SymbolId,
    pub last_px: Option<Px>,
    /// Bids best first, then asks best first, each level in time priority.
    pub orders: Vec<RestingOrder>,
    pub stops: Vec<StopOrder>,
    /// The open and pending orders' records, by id.
    pub records: Vec<OrderRecord>,
    /// What the orders and stops reserve, by (account, asset).
    pub holds: Vec<(AccountId, AssetId, Amount)>,
}

impl BookHandoff {
    /// The amounts it carries, by asset (what left one engine's supply for the other's).
    pub fn funds(&self) -> impl Iterator<Item = (AssetId, Amount)> + '_ {
        self.holds.iter().map(|&(_, asset, amount)| (asset, amount))
    }
}

/// Why a book cannot be detached or attached.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandoffError {
    SymbolUnknown(SymbolId),
    /// Margin symbols keep positions with their accounts: not handed over.
    Margin(SymbolId),
    /// The receiving engine's book of the symbol is not empty.
    BookNotEmpty(SymbolId),
    /// An order of the handoff has an id the receiving engine knows, or names an account
    /// it does not.
    Inconsistent(&'static str),
}

impl std::fmt::Display for HandoffError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandoffError::SymbolUnknown(symbol) => write!(f, "no symbol {symbol}"),
            HandoffError::Margin(symbol) => write!(f, "symbol {symbol} is a margin symbol"),
            HandoffError::BookNotEmpty(symbol) => write!(f, "the book of symbol {symbol} is not empty"),
            HandoffError::Inconsistent(what) => write!(f, "the handoff is inconsistent: {what}"),
        }
    }
}

impl std::error::Error for HandoffError {}

impl<B: Book> Engine<B> {
    /// Numbers this engine's orders from `first` on: engines that hand books to each
    /// other ([`Engine::attach_book`]) number theirs in spaces that never meet. Only
    /// before the first order.
    pub fn number_orders_from(&mut self, first: u64) {
        assert!(self.orders.is_empty() && self.orders_closed.is_empty(), "orders were numbered already");
        self.next_order_id = first.max(1);
    }

    /// Takes `symbol`'s book out of this engine (see the module's docs).
    pub fn detach_book(&mut self, symbol: SymbolId) -> Result<BookHandoff, HandoffError> {
        let entry = self.symbols.get_mut(symbol.0 as usize).ok_or(HandoffError::SymbolUnknown(symbol))?;
        if entry.margin.is_some() {
            return Err(HandoffError::Margin(symbol));
        }
        let mut orders = Vec::with_capacity(entry.book.len());
        for side in [Side::Buy, Side::Sell] {
            entry.book.visit(side, |order| {
                orders.push(*order);
                true
            });
        }
        let tick = entry.spec.tick;
        entry.book = B::new(tick);
        let stops: Vec<StopOrder> = std::mem::take(&mut entry.stops).by_id.into_values().collect();
        let last_px = entry.last_px.take();
        let spec = entry.spec.clone();
        let mut holds: BTreeMap<(AccountId, AssetId), i64> = BTreeMap::new();
        let mut holders: Vec<AccountId> = Vec::with_capacity(orders.len() + stops.len());
        for order in &orders {
            let (asset, amount) = hold_resting(&spec, None, order);
            *holds.entry((order.account, asset)).or_default() += amount.0;
            holders.push(order.account);
        }
        for stop in &stops {
            let (asset, amount) = hold_request(&spec, None, &stop.request).expect("hold fitted when placed");
            *holds.entry((stop.request.account, asset)).or_default() += amount.0;
            holders.push(stop.request.account);
        }
        let mut records: Vec<OrderRecord> = orders
            .iter()
            .map(|order| order.id)
            .chain(stops.iter().map(|stop| stop.id))
            .map(|id| self.orders.remove(&id).expect("an open order has a record"))
            .collect();
        records.sort_unstable_by_key(|record| record.id);
        for account in holders {
            self.accounts[account.0 as usize].open_orders -= 1;
        }
        for (&(account, asset), &amount) in &holds {
            self.accounts[account.0 as usize].balance_mut(asset).reserved.0 -= amount;
            self.assets[asset.0 as usize].supply.0 -= amount;
        }
        let holds = holds.into_iter().map(|((account, asset), amount)| (account, asset, Amount(amount))).collect();
        Ok(BookHandoff { symbol, last_px, orders, stops, records, holds })
    }

    /// Puts a book [`Engine::detach_book`] took out of another engine into this one,
    /// whose book of that symbol must be empty (see the module's docs). Nothing changes
    /// when it is refused.
    pub fn attach_book(&mut self, handoff: BookHandoff) -> Result<(), HandoffError> {
        let BookHandoff { symbol, last_px, orders, stops, records, holds } = handoff;
        let entry = self.symbols.get(symbol.0 as usize).ok_or(HandoffError::SymbolUnknown(symbol))?;
        if entry.margin.is_some() {
            return Err(HandoffError::Margin(symbol));
        }
        if !entry.book.is_empty() || !entry.stops.by_id.is_empty() {
            return Err(HandoffError::BookNotEmpty(symbol));
        }
        let known = |account: AccountId| (account.0 as usize) < self.accounts.len();
        if !orders.iter().map(|o| o.account).chain(stops.iter().map(|s| s.request.account)).all(known)
            || !holds.iter().all(|&(account, _, _)| known(account))
        {
            return Err(HandoffError::Inconsistent("an account this engine does not know"));
        }
        if records.iter().any(|record| self.orders.contains_key(&record.id) || record.symbol != symbol)
            || records.len() != orders.len() + stops.len()
        {
            return Err(HandoffError::Inconsistent(
                "an order id this engine knows, or records that are not the book's",
            ));
        }
        if holds.iter().any(|&(_, asset, amount)| asset.0 as usize >= self.assets.len() || amount.0 < 0) {
            return Err(HandoffError::Inconsistent("a hold in an unknown asset, or negative"));
        }
        let mut supply: BTreeMap<AssetId, i128> = BTreeMap::new();
        for &(_, asset, amount) in &holds {
            *supply.entry(asset).or_insert_with(|| i128::from(self.assets[asset.0 as usize].supply.0)) +=
                i128::from(amount.0);
        }
        if supply.values().any(|&total| total > i128::from(i64::MAX)) {
            return Err(HandoffError::Inconsistent("an asset's supply past i64::MAX"));
        }
        let entry = &mut self.symbols[symbol.0 as usize];
        entry.last_px = last_px;
        let mut holders: Vec<AccountId> = Vec::with_capacity(orders.len() + stops.len());
        for order in orders {
            holders.push(order.account);
            entry.book.insert(order);
        }
        let mut filed = Stops::default();
        for stop in stops {
            holders.push(stop.request.account);
            filed.insert(stop);
        }
        entry.stops = filed;
        for record in records {
            // The engine's log time is never before an order it holds was accepted: a
            // record it closes later must not read a closing time before its own.
            self.ts_last = self.ts_last.max(record.ts);
            self.orders.insert(record.id, record);
        }
        for account in holders {
            self.accounts[account.0 as usize].open_orders += 1;
        }
        for (account, asset, amount) in holds {
            self.accounts[account.0 as usize].balance_mut(asset).reserved.0 += amount.0;
            self.assets[asset.0 as usize].supply.0 += amount.0;
        }
        Ok(())
    }
}

//! Read-only queries. They change nothing and need no log entry.
//!
//! Known limits: `open_orders` scans the open order records, so it costs O(open
//! orders); an account-to-orders index would make it O(k) at the price of work on
//! every placement. A closed order is found by scanning the bounded ring of recently
//! closed orders (O(`orders_closed_max`)): queries are rare next to commands, and the
//! full history belongs to the history store.

use crate::account::Balance;
use crate::book::{Book, RestingOrder};
use crate::command::SymbolSpec;
use crate::engine::{Asset, Engine, OrderRecord, OrderStatus};
use crate::types::{AccountId, AssetId, ClientId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// An order's status: its record plus what is still live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderView {
    pub record: OrderRecord,
    /// Price the order rests at (limit orders in the book only).
    pub px_resting: Option<Px>,
    /// Quantity still open: resting in the book or waiting as a stop.
    pub qty_open: Qty,
    pub qty_visible: Qty,
    /// Quantity the cancellation took (the remainder a cancel, an expiry or self-trade
    /// prevention removed), 0 unless the order is cancelled. Reduces are not in it:
    /// they are in `record.qty_reduced`.
    pub qty_cancelled: Qty,
}

/// L2 depth of one book, best levels first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Depth {
    pub bids: Vec<(Px, Qty)>,
    pub asks: Vec<(Px, Qty)>,
}

impl<B: Book> Engine<B> {
    /// The status of an open order or of one of the most recently closed orders.
    pub fn order(&self, id: OrderId) -> Option<OrderView> {
        let record = match self.orders.get(&id) {
            Some(record) => record.clone(),
            None => self.orders_closed.iter().rev().find(|r| r.id == id)?.clone(),
        };
        let symbol = &self.symbols[record.symbol.0 as usize];
        let (px_resting, qty_open, qty_visible) = match record.status {
            OrderStatus::Open => match symbol.book.get(id) {
                Some(order) => (Some(order.px), order.qty_remaining(), order.qty_visible),
                None => (None, Qty::ZERO, Qty::ZERO),
            },
            OrderStatus::Pending => (None, record.qty, Qty::ZERO),
            OrderStatus::Filled | OrderStatus::Cancelled | OrderStatus::Expired => (None, Qty::ZERO, Qty::ZERO),
        };
        let qty_cancelled = match record.status {
            OrderStatus::Cancelled | OrderStatus::Expired => {
                Qty(record.qty.0 - record.qty_filled.0 - record.qty_reduced.0)
            }
            _ => Qty::ZERO,
        };
        Some(OrderView { record, px_resting, qty_open, qty_visible, qty_cancelled })
    }

    /// The highest sequence number of `client` applied, if the engine remembers the client
    /// (every command up to it was applied once, in order: see [`crate::session`]).
    pub fn client_seq_applied(&self, client: ClientId) -> Option<u64> {
        let slot = *self.session_slots.get(&client)?;
        Some(self.sessions[slot as usize].1.seq_applied)
    }

    /// The account created with this external id (`CreateAccountWithId`), if any.
    pub fn account_by_external_id(&self, external_id: u64) -> Option<AccountId> {
        self.accounts_by_external.get(&external_id).copied()
    }

    /// The external id an account was created with, if it was.
    pub fn account_external_id(&self, account: AccountId) -> Option<u64> {
        self.accounts.get(account.0 as usize)?.external_id
    }

    /// Whether an account is suspended (`SuspendAccount`): `None` when it does not exist.
    pub fn account_suspended(&self, account: AccountId) -> Option<bool> {
        Some(self.accounts.get(account.0 as usize)?.suspended)
    }

    /// Every balance of an account, by asset.
    pub fn balances(&self, account: AccountId) -> Option<&[(AssetId, Balance)]> {
        Some(&self.accounts.get(account.0 as usize)?.balances)
    }

    /// One balance (zero when the account never held the asset).
    pub fn balance(&self, account: AccountId, asset: AssetId) -> Option<Balance> {
        Some(self.accounts.get(account.0 as usize)?.balance(asset))
    }

    /// Just the status of an order, without copying its record; `None` when unknown or
    /// closed and forgotten.
    pub fn order_status(&self, id: OrderId) -> Option<OrderStatus> {
        match self.orders.get(&id) {
            Some(record) => Some(record.status),
            None => self.orders_closed.iter().rev().find(|r| r.id == id).map(|r| r.status),
        }
    }

    /// The latest timestamp of any applied command (0 before the first).
    pub fn ts_last(&self) -> Timestamp {
        self.ts_last
    }

    /// Trading days closed so far: the day trading now is number `days_closed() + 1`,
    /// and the `n`-th [`CommandBody::CloseDay`](crate::command::CommandBody::CloseDay)
    /// closes day `n`.
    pub fn days_closed(&self) -> u64 {
        self.days_closed
    }

    /// The records of every open order (resting, or waiting as a stop), by account then
    /// order id: one pass over the open orders, where [`Engine::open_orders`] for each
    /// account passes over all of them once per account.
    pub fn open_order_records(&self) -> Vec<&OrderRecord> {
        let mut records: Vec<&OrderRecord> =
            self.orders.values().filter(|r| matches!(r.status, OrderStatus::Open | OrderStatus::Pending)).collect();
        records.sort_unstable_by_key(|r| (r.account, r.id));
        records
    }

    /// The records of the closed orders still kept (the last
    /// [`EngineConfig::orders_closed_max`](crate::EngineConfig)), oldest first.
    pub fn closed_order_records(&self) -> impl Iterator<Item = &OrderRecord> + '_ {
        self.orders_closed.iter()
    }

    /// Resting orders and pending stops of an account, by order id.
    pub fn open_orders(&self, account: AccountId) -> Vec<OrderView> {
        let mut ids: Vec<OrderId> = self
            .orders
            .values()
            .filter(|r| r.account == account && matches!(r.status, OrderStatus::Open | OrderStatus::Pending))
            .map(|r| r.id)
            .collect();
        ids.sort_unstable();
        ids.into_iter().filter_map(|id| self.order(id)).collect()
    }

    /// Up to `orders_max` resting orders of one side, in priority order (an L3 view).
    pub fn book_orders(&self, symbol: SymbolId, side: Side, orders_max: usize) -> Vec<RestingOrder> {
        let mut orders = Vec::new();
        if let Some(symbol) = self.symbols.get(symbol.0 as usize) {
            symbol.book.visit(side, |order| {
                orders.push(*order);
                orders.len() < orders_max
            });
        }
        orders
    }

    /// Order `id` if it rests in `symbol`'s book.
    pub fn resting(&self, symbol: SymbolId, id: OrderId) -> Option<RestingOrder> {
        self.symbols.get(symbol.0 as usize)?.book.get(id).copied()
    }

    /// The request of a stop order of `symbol` still waiting for its trigger.
    pub fn stop_waiting(&self, symbol: SymbolId, id: OrderId) -> Option<&crate::command::OrderRequest> {
        self.symbols.get(symbol.0 as usize)?.stops.by_id.get(&id).map(|stop| &stop.request)
    }

    /// Up to `levels_max` price levels a side.
    pub fn depth(&self, symbol: SymbolId, levels_max: usize) -> Option<Depth> {
        let book = &self.symbols.get(symbol.0 as usize)?.book;
        Some(Depth { bids: book.depth(Side::Buy, levels_max), asks: book.depth(Side::Sell, levels_max) })
    }

    pub fn best(&self, symbol: SymbolId, side: Side) -> Option<Px> {
        self.symbols.get(symbol.0 as usize)?.book.best(side)
    }

    pub fn last_px(&self, symbol: SymbolId) -> Option<Px> {
        self.symbols.get(symbol.0 as usize)?.last_px
    }

    pub fn symbol_spec(&self, symbol: SymbolId) -> Option<&SymbolSpec> {
        Some(&self.symbols.get(symbol.0 as usize)?.spec)
    }

    /// The margin rules of a margin symbol; `None` for a spot pair or an unknown symbol.
    pub fn symbol_margin(&self, symbol: SymbolId) -> Option<&crate::command::MarginSpec> {
        Some(&self.symbols.get(symbol.0 as usize)?.margin.as_ref()?.spec)
    }

    /// An account's margin positions, by symbol: (symbol, position).
    pub fn positions(&self, account: AccountId) -> &[(SymbolId, crate::account::Position)] {
        self.accounts.get(account.0 as usize).map_or(&[], |a| a.positions.as_slice())
    }

    pub fn asset_info(&self, asset: AssetId) -> Option<&Asset> {
        self.assets.get(asset.0 as usize)
    }

    pub fn asset_by_name(&self, name: &str) -> Option<AssetId> {
        self.asset_names.get(name).copied()
    }

    pub fn symbol_by_name(&self, name: &str) -> Option<SymbolId> {
        self.symbol_names.get(name).copied()
    }

    pub fn accounts_len(&self) -> usize {
        self.accounts.len()
    }

    pub fn assets_len(&self) -> usize {
        self.assets.len()
    }

    pub fn symbols_len(&self) -> usize {
        self.symbols.len()
    }

    /// Resting orders in one book.
    pub fn book_len(&self, symbol: SymbolId) -> usize {
        self.symbols.get(symbol.0 as usize).map_or(0, |s| s.book.len())
    }

    /// Distinct price levels of one book (both sides).
    pub fn book_levels(&self, symbol: SymbolId) -> usize {
        self.symbols
            .get(symbol.0 as usize)
            .map_or(0, |s| s.book.depth(Side::Buy, usize::MAX).len() + s.book.depth(Side::Sell, usize::MAX).len())
    }

    /// Total resting orders across all books.
    pub fn orders_resting(&self) -> usize {
        self.symbols.iter().map(|s| s.book.len()).sum()
    }

    /// The next order id the engine will assign.
    pub fn next_order_id(&self) -> OrderId {
        OrderId(self.next_order_id)
    }
}

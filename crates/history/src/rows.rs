//! The rows of the history tables, as plain values, collected per batch of log entries.
//!
//! Every row carries the log index of the entry that produced it, its position among
//! the rows of that entry (`pos`, counted across all tables from 0) and the log
//! timestamp of its command. `(log_index, pos)` is unique across every table and ends
//! every table's primary key (`schema::primary_key`): the same log always produces the
//! same rows with the same keys. A write skips the rows of entries at or below the
//! progress row read in its own transaction, so no row is written twice, and a key
//! written twice anyway would be refused by the primary key, never duplicated.
//!
//! Integers are stored as signed 64-bit (ids and indexes stay far below 2^63).

/// Where a row came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RowKey {
    pub log_index: i64,
    pub pos: i64,
    /// The command's log timestamp, nanoseconds since the Unix epoch.
    pub ts: i64,
}

/// An order as accepted (one row per order, written when it is accepted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderRow {
    pub key: RowKey,
    pub order_id: i64,
    pub account: i64,
    pub symbol: i64,
    pub side: &'static str,
    /// `limit`, `market`, `stop_limit` or `stop_market`.
    pub kind: &'static str,
    pub px: Option<i64>,
    pub trigger_px: Option<i64>,
    pub budget: Option<i64>,
    pub qty: i64,
    pub tif: &'static str,
    pub post_only: bool,
    pub display_qty: Option<i64>,
    pub stp: &'static str,
    pub client: i64,
    pub seq: i64,
}

/// One state change of an order: `accepted`, `rested`, `triggered`, `refreshed`,
/// `moved`, `reduced`, `fill`, `cancelled`, `done`. A move that rests at once at its
/// new price (nothing traded) is one `moved` row with the quantity it shows, not a
/// `moved` and a `rested` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderEventRow {
    pub key: RowKey,
    pub order_id: i64,
    pub event: &'static str,
    /// The price of a fill, a rest or a move, the last trade price of a trigger.
    pub px: Option<i64>,
    /// The quantity of a fill, the quantity shown by a rest, a refresh or a move that
    /// rested at once, the quantity taken by a reduce or a cancel, the quantity of an
    /// acceptance.
    pub qty: Option<i64>,
    /// After a reduce: what is left.
    pub qty_remaining: Option<i64>,
    /// A cancel's reason; a `done` row's final status (`filled` or `cancelled`).
    pub reason: Option<&'static str>,
}

/// One trade, both legs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExecutionRow {
    pub key: RowKey,
    pub symbol: i64,
    pub px: i64,
    pub qty: i64,
    pub taker_side: &'static str,
    pub maker_order: i64,
    pub taker_order: i64,
    pub maker_account: i64,
    pub taker_account: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    pub maker_done: bool,
}

/// A balance after a change, with the change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BalanceRow {
    pub key: RowKey,
    pub account: i64,
    pub asset: i64,
    pub delta_available: i64,
    pub delta_reserved: i64,
    pub available: i64,
    pub reserved: i64,
    /// What moved it: `deposit`, `withdraw`, `credit`, or the order event it followed
    /// (`accepted`, `trade`, `cancelled`, `reduced`, `moved`, `triggered`, `refreshed`).
    pub cause: &'static str,
    /// The account's order behind the movement, if any.
    pub order_id: Option<i64>,
}

/// An account was created, suspended or resumed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AccountRow {
    pub key: RowKey,
    pub account: i64,
    /// `created`, `suspended` or `resumed`.
    pub event: &'static str,
    /// The id its owner chose, for an account created with one (`CreateAccountWithId`,
    /// the XML front end's accounts), as a signed 64-bit integer.
    pub external_id: Option<i64>,
}

/// A new asset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AssetRow {
    pub key: RowKey,
    pub asset: i64,
    pub name: String,
    pub decimals: i64,
}

/// A new symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolRow {
    pub key: RowKey,
    pub symbol: i64,
    pub name: String,
    pub base: i64,
    pub quote: i64,
    pub tick: i64,
    pub lot: i64,
    pub px_min: i64,
    pub px_max: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    /// `fifo` or `pro_rata`.
    pub policy: &'static str,
    /// A margin contract's rules (`None`: a spot pair).
    pub margin: Option<MarginRules>,
}

/// A margin contract's rules, as `CreateMarginSymbol` set them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarginRules {
    pub multiplier: i64,
    pub initial_bp: i64,
    pub maintenance_bp: i64,
    pub position_limit: i64,
    /// `operator` or `last_trade`.
    pub mark: &'static str,
    pub insurance: i64,
}

/// One margin event (`margin_events`), its columns by event:
///
/// | event | columns |
/// |---|---|
/// | `position` | account, symbol; after the change `qty` (signed size), `cost`, `realized` (the position's realised P&L so far); `amount` the P&L this change realised |
/// | `mark` | symbol, `px` |
/// | `liquidated` | account, asset |
/// | `transferred` | symbol, account (from), `counterparty` (to), `qty` (signed, as the counterparty receives it), `px` |
/// | `settled` | account, symbol, `px` (the settle price), `amount` (the variation margin paid in), `qty` (size) and `cost` after it |
/// | `settlement` | symbol, `px` (the settle price), `qty` (open interest) |
/// | `shortfall` | account, asset, `counterparty` (the insurance account), `amount` (what it covered), `bad_debt` |
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MarginEventRow {
    pub key: RowKey,
    pub event: &'static str,
    pub account: Option<i64>,
    pub symbol: Option<i64>,
    pub asset: Option<i64>,
    pub px: Option<i64>,
    pub qty: Option<i64>,
    pub cost: Option<i64>,
    pub realized: Option<i64>,
    pub amount: Option<i64>,
    pub bad_debt: Option<i64>,
    pub counterparty: Option<i64>,
}

/// The close of a trading day: the `day`-th `CloseDay`, keyed after every row of its
/// command (the day's expiries and settlements), and how many Day orders it expired.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TradingDayRow {
    pub key: RowKey,
    pub day: i64,
    pub expired: i64,
}

/// One day-trading audit record (spec 9.2): `userCommand`, `quoteServer`,
/// `accountTransaction`, `systemEvent` or `errorEvent`, with the columns its kind has.
/// Money is in cents, times in ms; `stamp` is the entry's log stamp.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRow {
    pub key: RowKey,
    /// The record's number in the ledger's audit sequence (from 1, no gaps).
    pub audit_seq: i64,
    pub record: &'static str,
    pub stamp: i64,
    pub transaction_num: i64,
    pub command: Option<&'static str>,
    pub username: Option<String>,
    pub symbol: Option<String>,
    pub filename: Option<String>,
    pub funds: Option<i64>,
    pub price: Option<i64>,
    pub quote_server_time: Option<i64>,
    pub cryptokey: Option<String>,
    pub action: Option<&'static str>,
    pub error_message: Option<&'static str>,
}

/// The `dt_audit` row of one log entry: its audit records (one or more [`AuditRow`]s,
/// numbered from `audit_seq` on) encoded together by `audit::audit_entry`, and the user
/// they all name (`None` when they name several or none). Keyed by its first record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditEntryRow {
    pub key: RowKey,
    pub audit_seq: i64,
    pub username: Option<String>,
    pub records: Vec<u8>,
}

/// The rows of a run of log entries, per table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    pub orders: Vec<OrderRow>,
    pub order_events: Vec<OrderEventRow>,
    pub executions: Vec<ExecutionRow>,
    pub balances: Vec<BalanceRow>,
    pub accounts: Vec<AccountRow>,
    pub assets: Vec<AssetRow>,
    pub symbols: Vec<SymbolRow>,
    pub audit: Vec<AuditEntryRow>,
    pub margin: Vec<MarginEventRow>,
    pub days: Vec<TradingDayRow>,
}

impl Rows {
    /// Rows of every table together.
    pub fn len(&self) -> usize {
        self.orders.len()
            + self.order_events.len()
            + self.executions.len()
            + self.balances.len()
            + self.accounts.len()
            + self.assets.len()
            + self.symbols.len()
            + self.audit.len()
            + self.margin.len()
            + self.days.len()
    }

    /// Each table's name and row count, in `schema::TABLES` order.
    pub fn table_lens(&self) -> Vec<(&'static str, usize)> {
        vec![
            ("orders", self.orders.len()),
            ("order_events", self.order_events.len()),
            ("executions", self.executions.len()),
            ("balance_movements", self.balances.len()),
            ("account_events", self.accounts.len()),
            ("assets", self.assets.len()),
            ("symbols", self.symbols.len()),
            ("dt_audit", self.audit.len()),
            ("margin_events", self.margin.len()),
            ("trading_days", self.days.len()),
        ]
    }

    /// One table's row count (0 for an unknown name).
    pub fn table_len(&self, table: &str) -> usize {
        self.table_lens().into_iter().find(|(name, _)| *name == table).map_or(0, |(_, len)| len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn clear(&mut self) {
        *self = Rows::default();
    }

    /// Appends `other`'s rows.
    pub fn extend(&mut self, other: Rows) {
        self.orders.extend(other.orders);
        self.order_events.extend(other.order_events);
        self.executions.extend(other.executions);
        self.balances.extend(other.balances);
        self.accounts.extend(other.accounts);
        self.assets.extend(other.assets);
        self.symbols.extend(other.symbols);
        self.audit.extend(other.audit);
        self.margin.extend(other.margin);
        self.days.extend(other.days);
    }
}

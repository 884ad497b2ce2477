//! The JSON shapes of the API, with their OpenAPI schemas.
//!
//! Units are the gRPC contract's (see the header of `exchange.proto`): every number is
//! an integer. `px`, `trigger`, `tick`, `px_min`, `px_max` are minor units of the
//! symbol's quote asset per one unit of its base asset; `qty`, `lot`, `display_qty` are
//! units of the base asset; `amount`, `budget`, `fee`, `available`, `reserved` are minor
//! units of one asset; `ts` is nanoseconds since the Unix epoch, stamped by the leader.
//! An asset's `decimals` says how to show its minor units.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// Buy or sell.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    Buy,
    Sell,
}

/// The price behaviour of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderType {
    /// Trades at `px` or better; the rest rests (GTC, Day) or is cancelled (IOC, FOK).
    Limit,
    /// Trades at any price; a buy needs a `budget`.
    Market,
    /// Becomes a limit order at `px` when the last trade reaches `trigger`.
    StopLimit,
    /// Becomes a market order (IOC) when the last trade reaches `trigger`.
    StopMarket,
}

/// Time in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum TimeInForce {
    /// Good till cancelled.
    Gtc,
    /// Immediate or cancel.
    Ioc,
    /// Fill or kill.
    Fok,
    /// Like GTC until the trading day closes (`POST /v1/admin/close-day`), which expires
    /// what is left.
    Day,
}

/// Self-trade prevention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SelfTrade {
    CancelResting,
    CancelIncoming,
    Allow,
}

/// Where an order is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// A stop order waiting for its trigger.
    Pending,
    /// Resting in the book, possibly partly filled.
    Open,
    Filled,
    Cancelled,
    /// A Day order, or what was left of it, that the close of the trading day ended.
    Expired,
}

/// How a symbol shares an incoming order among the orders at one price.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MatchPolicy {
    Fifo,
    ProRata,
}

/// Why an order left the book unfilled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CancelReason {
    Requested,
    Unfilled,
    BudgetExhausted,
    SelfTrade,
    ReducedToZero,
    /// A Day order still open when the trading day closed.
    Expired,
    /// Its account was liquidated, or a liquidation order's rest passed to the
    /// insurance account.
    Liquidation,
}

/// A new order.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PlaceOrder {
    /// The account the order is for; the key must own it.
    #[schema(minimum = 0, maximum = 4294967295_u64)]
    pub account: u32,
    /// The symbol's name (`ACME/USD`) or id.
    pub symbol: String,
    pub side: Side,
    #[serde(rename = "type")]
    pub order_type: OrderType,
    /// Quantity in base units; a positive multiple of the symbol's lot.
    pub qty: i64,
    /// Limit price (limit and stop-limit orders).
    #[serde(default)]
    pub px: Option<i64>,
    /// Trigger price (stop orders).
    #[serde(default)]
    pub trigger: Option<i64>,
    /// Market buys: the most quote to spend, fees included. FOK market sells: the
    /// least to receive.
    #[serde(default)]
    pub budget: Option<i64>,
    /// Default: GTC for limit and stop-limit orders, IOC for market and stop-market.
    #[serde(default)]
    pub tif: Option<TimeInForce>,
    /// Refuse the order rather than take liquidity (GTC or Day limit only).
    #[serde(default)]
    pub post_only: bool,
    /// Iceberg: show at most this much at a time (GTC or Day limit only).
    #[serde(default)]
    pub display_qty: Option<i64>,
    /// Default: cancel_resting.
    #[serde(default)]
    pub stp: Option<SelfTrade>,
}

/// A command was committed and applied.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Accepted {
    /// The new order, account, asset or symbol id (0 for commands that create nothing).
    pub id: u64,
    /// The log entry that carried the command.
    pub log_index: u64,
    /// True when the exchange had applied this command before (a retry).
    pub duplicate: bool,
}

/// The trading day was closed: committed and applied.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct DayClosed {
    /// How many Day orders expired (resting ones and pending stops).
    pub expired: u64,
    /// The log entry that carried the close.
    pub log_index: u64,
    /// True when the exchange had applied this command before (a retry).
    pub duplicate: bool,
}

/// A new price for a resting order; it loses time priority and may trade.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveOrder {
    pub px: i64,
}

/// Takes quantity off a resting order, keeping its time priority.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReduceOrder {
    pub qty_by: i64,
}

/// One fill of an order.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Fill {
    pub px: i64,
    pub qty: i64,
    /// The fee this order paid; negative is a rebate.
    pub fee: i64,
    /// True when this order was resting in the book.
    pub maker: bool,
    pub counter_order: u64,
    pub ts: u64,
}

/// An order as the exchange remembers it.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Order {
    pub id: u64,
    pub account: u32,
    pub symbol: u32,
    pub side: Side,
    #[serde(rename = "type")]
    pub order_type: OrderType,
    /// Limit price, when the order has one.
    pub px: Option<i64>,
    pub trigger: Option<i64>,
    pub budget: Option<i64>,
    pub tif: TimeInForce,
    pub qty: i64,
    pub qty_filled: i64,
    pub qty_reduced: i64,
    /// Resting in the book or waiting as a stop.
    pub qty_open: i64,
    /// Shown in the book (less than qty_open for an iceberg).
    pub qty_visible: i64,
    /// The price it rests at, for a limit order in the book.
    pub px_resting: Option<i64>,
    pub status: OrderStatus,
    /// When it was accepted.
    pub ts: u64,
    /// Oldest first.
    pub fills: Vec<Fill>,
    /// The log index the state was read at.
    pub log_index: u64,
}

/// The open orders of an account.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Orders {
    pub log_index: u64,
    pub orders: Vec<Order>,
}

/// The fills of one order.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Fills {
    pub order: u64,
    pub log_index: u64,
    pub fills: Vec<Fill>,
}

/// One asset's balance.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Balance {
    pub asset: u32,
    pub asset_name: String,
    /// Free to trade or withdraw.
    pub available: i64,
    /// Held by open orders.
    pub reserved: i64,
}

/// Every balance of an account.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Balances {
    pub account: u32,
    pub log_index: u64,
    pub balances: Vec<Balance>,
}

/// Money or units entering or leaving an account.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BalanceChange {
    /// The asset's name or id.
    pub asset: String,
    /// Minor units; must be positive.
    pub amount: i64,
}

/// A new asset.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateAsset {
    /// 1 to 16 characters of A-Z, a-z, 0-9 and . _ - /
    pub name: String,
    /// Minor units per major unit, as a power of ten (display only; at most 18).
    #[schema(minimum = 0, maximum = 18)]
    pub decimals: u32,
}

/// A new tradable pair.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSymbol {
    pub name: String,
    /// The base asset's name or id (what is traded).
    pub base: String,
    /// The quote asset's name or id (what prices are in).
    pub quote: String,
    pub tick: i64,
    pub lot: i64,
    pub px_min: i64,
    pub px_max: i64,
    #[serde(default)]
    pub fee_maker: i64,
    #[serde(default)]
    pub fee_taker: i64,
    #[serde(default = "fifo")]
    pub policy: MatchPolicy,
    /// Margin rules: present, the symbol is a margin contract (a future) whose base
    /// asset is the contract (no balance of it ever moves) and whose quote asset is the
    /// settlement currency; absent or null, a spot pair.
    #[serde(default)]
    pub margin: Option<MarginSpec>,
}

fn fifo() -> MatchPolicy {
    MatchPolicy::Fifo
}

/// Where a margin symbol's mark price comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MarkSource {
    /// The operator's (`POST /v1/admin/symbols/{symbol}/mark`); the last trade until
    /// the operator first sets one.
    Operator,
    /// The price of the latest trade.
    LastTrade,
}

/// The margin rules of a margin symbol (a future). A position of signed size `s`
/// (contracts) has the notional `|s| × mark × multiplier` in minor units of the quote
/// asset; opening or adding needs `initial_bp` of it free, and an account whose equity
/// (cash plus unrealised P&L) falls below `maintenance_bp` of its notionals is
/// liquidated. `px_max × position_limit × multiplier` is at most 2^53.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MarginSpec {
    /// Initial margin in basis points of the notional, 1 to 10000.
    #[schema(minimum = 1, maximum = 10000)]
    pub initial_bp: u32,
    /// Maintenance margin in basis points, 1 to `initial_bp` and below 10000.
    #[schema(minimum = 1, maximum = 9999)]
    pub maintenance_bp: u32,
    /// Quote minor units per (price unit × contract), at least 1.
    #[schema(minimum = 1)]
    pub multiplier: i64,
    /// The largest position of either sign, counting open orders as filled; a
    /// positive multiple of the lot.
    #[schema(minimum = 1)]
    pub position_limit: i64,
    pub mark: MarkSource,
    /// The insurance account: it takes what the book cannot take from a liquidated
    /// account, at that account's bankruptcy price, and pays losses beyond an
    /// account's cash. It is never liquidated.
    #[schema(minimum = 0, maximum = 4294967295_u64)]
    pub insurance: u32,
}

/// An asset.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Asset {
    pub id: u32,
    pub name: String,
    pub decimals: u32,
    /// Deposited plus credited minus withdrawn.
    pub supply: i64,
    pub fees_collected: i64,
}

/// A tradable pair and its rules.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Symbol {
    pub id: u32,
    pub name: String,
    pub base: u32,
    pub base_name: String,
    pub quote: u32,
    pub quote_name: String,
    pub tick: i64,
    pub lot: i64,
    pub px_min: i64,
    pub px_max: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    pub policy: MatchPolicy,
    /// The margin rules of a margin symbol (a future); null for a spot pair.
    pub margin: Option<MarginSpec>,
}

/// One aggregated price level.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Level {
    pub px: i64,
    pub qty: i64,
}

/// The aggregated book of one symbol.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Book {
    pub symbol: u32,
    pub log_index: u64,
    /// Best (highest) first.
    pub bids: Vec<Level>,
    /// Best (lowest) first.
    pub asks: Vec<Level>,
    /// The latest trade's price, absent before the first.
    pub last_px: Option<i64>,
}

/// A public trade.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Trade {
    pub symbol: u32,
    pub px: i64,
    pub qty: i64,
    /// The side of the incoming order.
    pub taker_side: Side,
    /// With trade_seq, identifies the trade.
    pub log_index: u64,
    pub trade_seq: u32,
    pub ts: u64,
}

/// Recent trades of a symbol, newest last.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Trades {
    pub symbol: u32,
    pub trades: Vec<Trade>,
}

/// A margin symbol's new mark price (a multiple of its tick, within its bounds).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetMark {
    pub px: i64,
}

/// One margin position of an account. Amounts are minor units of the symbol's quote
/// asset; the average open price is `cost / (size × multiplier)`.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Position {
    pub symbol: u32,
    pub symbol_name: String,
    /// Contracts: positive long, negative short, 0 for a closed position that keeps
    /// its realised P&L.
    pub size: i64,
    /// Sum of signed qty × px × multiplier of the open size (reset to size × settle
    /// price × multiplier by each close of the day).
    pub cost: i64,
    /// P&L realised by reducing trades.
    pub realized: i64,
    /// Open buy and sell orders' remaining quantities.
    pub buying: i64,
    pub selling: i64,
    /// The symbol's mark; null before its first trade or mark.
    pub mark: Option<i64>,
    /// size × mark × multiplier − cost.
    pub unrealized: i64,
    /// Initial and maintenance margin of the position at the mark (rounded up).
    pub initial_margin: i64,
    pub maintenance_margin: i64,
    /// The mark at which the account is liquidated, the other marks held: a long when
    /// the mark falls below it, a short when it reaches it. Null when flat, for the
    /// insurance account, for a long that no positive mark liquidates, or outside int64.
    pub liquidation_px: Option<i64>,
}

/// An account's margin figures in one settlement asset (minor units of it).
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct MarginSummary {
    pub asset: u32,
    pub asset_name: String,
    /// Available plus reserved.
    pub cash: i64,
    pub unrealized: i64,
    /// cash + unrealized: the account is liquidated when it falls below
    /// `maintenance_margin`.
    pub equity: i64,
    pub initial_margin: i64,
    pub maintenance_margin: i64,
    /// available + unrealized − initial_margin: what new orders may still hold.
    pub free_margin: i64,
}

/// One account's report: balances, margin positions valued at their marks, margin
/// figures per settlement asset, open orders, all read at one log index.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AccountReport {
    pub account: u32,
    pub log_index: u64,
    pub balances: Vec<Balance>,
    /// By symbol id: open positions, and closed ones with realised P&L.
    pub positions: Vec<Position>,
    /// Per settlement asset the account has positions in, by asset id.
    pub margin: Vec<MarginSummary>,
    /// The resting orders and pending stops, as `GET /v1/accounts/{account}/orders`.
    pub open_orders: Vec<Order>,
}

/// One asset's totals over every account: available + reserved + fees − bad_debt −
/// open_cost = supply, which `balanced` states.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct AssetTotals {
    pub asset: u32,
    pub asset_name: String,
    /// Deposited and credited minus withdrawn.
    pub supply: i64,
    pub available: i64,
    pub reserved: i64,
    /// Collected by the exchange.
    pub fees: i64,
    /// Losses beyond an account's cash that the insurance account could not pay.
    pub bad_debt: i64,
    /// Sum of the open margin positions' costs in symbols settled in this asset (0
    /// after a day's settlement).
    pub open_cost: i64,
    pub balanced: bool,
}

/// A margin symbol's open interest.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct OpenInterest {
    pub symbol: u32,
    pub symbol_name: String,
    /// Null before its first trade or mark.
    pub mark: Option<i64>,
    /// The sum of the long positions (that of the shorts is the same).
    pub open_interest: i64,
    /// Accounts long and short.
    pub longs: u32,
    pub shorts: u32,
}

/// The exchange's report: per-asset totals (the conservation check) and the open
/// interest of every margin symbol, read at one log index.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ExchangeReport {
    pub log_index: u64,
    /// Trading days closed so far (`close-day`); the day trading now is the next.
    pub days_closed: u64,
    /// Every asset, by id.
    pub assets: Vec<AssetTotals>,
    /// Every margin symbol, by id.
    pub symbols: Vec<OpenInterest>,
}

/// The body of every error reply.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// What went wrong: `code` and `name` are the exchange's stable rejection code and name
/// when the engine or the gateway refused (codes below 1000 from the engine, 1000 and
/// up from a node or gateway before the log), or this API's own from 2000 up.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct ErrorDetail {
    pub code: u32,
    pub name: String,
    pub message: String,
}

/// `?levels=` on a book.
#[derive(Clone, Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BookParams {
    /// Price levels a side at most (default 20, at most 1000).
    pub levels: Option<u32>,
}

/// `?limit=` on recent trades.
#[derive(Clone, Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TradesParams {
    /// How many of the newest trades (default 100).
    pub limit: Option<u32>,
}

/// Liveness and where requests go.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
pub struct Health {
    pub status: String,
    pub upstream: Vec<String>,
}

//! Commands: the only way to change the engine's state.
//!
//! Every command is wrapped in a [`Command`] envelope that carries the client's
//! exactly-once key `(client, seq)` and the leader's timestamp. The engine reads no
//! clock: times come from `ts` only.

use serde::{Deserialize, Serialize};

use crate::types::{AccountId, Amount, AssetId, ClientId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// One sequenced command as it appears in the log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Command {
    /// The session that sent the command.
    pub client: ClientId,
    /// The client's sequence number: 1, 2, 3, … without gaps.
    pub seq: u64,
    /// The leader's timestamp, in nanoseconds since the Unix epoch.
    pub ts: Timestamp,
    pub body: CommandBody,
}

/// What a command asks for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandBody {
    /// A new asset; `decimals` says how many minor units make one major unit (display only).
    CreateAsset { name: String, decimals: u8 },
    /// A new tradable pair.
    CreateSymbol(Box<SymbolSpec>),
    /// A new account with no balances.
    CreateAccount,
    /// Money enters an account from outside the exchange.
    Deposit { account: AccountId, asset: AssetId, amount: Amount },
    /// Money leaves an account; only `available` can be withdrawn.
    Withdraw { account: AccountId, asset: AssetId, amount: Amount },
    /// Units of an asset (shares) are issued to an account.
    Credit { account: AccountId, asset: AssetId, amount: Amount },
    /// The account may no longer place, move or withdraw; it may still cancel and reduce.
    SuspendAccount { account: AccountId },
    /// Lifts a suspension.
    ResumeAccount { account: AccountId },
    /// A new order.
    Place(OrderRequest),
    /// Cancels a resting or pending stop order.
    Cancel { account: AccountId, symbol: SymbolId, order: OrderId },
    /// Takes `qty_by` off a resting order, keeping its priority; reducing by the whole
    /// remaining quantity or more cancels it.
    Reduce { account: AccountId, symbol: SymbolId, order: OrderId, qty_by: Qty },
    /// Gives a resting order a new price: it loses time priority and may trade.
    Move { account: AccountId, symbol: SymbolId, order: OrderId, px: Px },
    /// A new account known by an id its owner chose (`external_id`, unique for ever)
    /// that holds `deposit` of `asset` from the start: one step, so no account is ever
    /// seen without its opening balance. A deposit of 0 opens it empty. Front ends
    /// whose protocol names accounts (the XML protocol) create accounts this way.
    CreateAccountWithId { external_id: u64, asset: AssetId, deposit: Amount },
    /// Ends the trading day: every open Day order (resting in any book, or a pending
    /// Day stop) expires, its hold released as a cancel would. The outcome's id is the
    /// number of orders that expired. The operator sends it at the session's close; the
    /// engine reads no clock.
    CloseDay,
    /// A day-trading entry: one of the retail service's commands with its arguments
    /// verbatim, or a poller's quote (`crate::daytrading`). Boxed: rare next to orders,
    /// and the order path's commands stay small.
    DayTrading(Box<crate::daytrading::DtRequest>),
    /// The fairness delays from this command on: the hold of market data (an entry
    /// stamped `t_m` is released by every gateway at `t_m + hold_ns`) and the
    /// sequencer's window. Part of the state, so every replica and every replay holds
    /// the same value at the same index. The leader's controller sends it (under
    /// [`ClientId::SYSTEM`](crate::types::ClientId::SYSTEM)) when the observed delays
    /// change; an operator's admin key may pin a value. Each at most [`FAIRNESS_NS_MAX`].
    SetFairness(FairnessSetting),
    /// A new margin contract (a future): like [`CommandBody::CreateSymbol`], with the
    /// margin rules of [`MarginSpec`]. Its base asset is the contract (no balance of it
    /// ever moves); its quote asset is the settlement currency.
    CreateMarginSymbol(Box<MarginSymbol>),
    /// The operator's mark price of a margin symbol whose mark is
    /// [`MarkSource::Operator`]: positions are valued and liquidated against it.
    SetMark { symbol: SymbolId, px: Px },
}

/// A margin symbol's definition: the pair's rules and its margin rules.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MarginSymbol {
    pub spec: SymbolSpec,
    pub margin: MarginSpec,
}

/// Where a margin symbol's mark price comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MarkSource {
    /// [`CommandBody::SetMark`]; the last trade until the operator first sets one.
    Operator,
    /// The price of the latest trade.
    LastTrade,
}

/// Basis points in one: margin rates are in basis points of a position's notional.
pub const BP_ONE: u32 = 10_000;

/// The largest notional one margin position may reach (`px_max × position_limit ×
/// multiplier`): 2^53 minor units, so every sum of a few of them, and the products with
/// basis points the margin arithmetic forms, stay far inside `i64` and `i128`.
pub const MARGIN_NOTIONAL_MAX: i64 = 1 << 53;

/// The margin rules of a margin symbol.
///
/// A position of signed size `s` (contracts, a multiple of the lot) has the notional
/// `|s| × mark × multiplier` in minor units of the quote asset. Opening or adding needs
/// the initial margin (`initial_bp` of the notional) free; an account whose equity
/// (cash plus unrealised P&L) falls below the maintenance margin (`maintenance_bp` of
/// its positions' notionals) is liquidated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MarginSpec {
    /// 1 ..= 10,000.
    pub initial_bp: u32,
    /// 1 ..= `initial_bp`, below 10,000.
    pub maintenance_bp: u32,
    /// Quote minor units per (price unit × contract); at least 1.
    pub multiplier: i64,
    /// The largest position (either sign) an account may reach, counting its open
    /// orders as filled; a positive multiple of the lot.
    pub position_limit: Qty,
    pub mark: MarkSource,
    /// The operator's insurance account: it takes over what the book cannot take from a
    /// liquidated account, at that account's bankruptcy price, and pays the shortfalls
    /// of accounts whose losses passed their cash. It is never liquidated.
    pub insurance: AccountId,
}

/// The largest hold or window [`CommandBody::SetFairness`] accepts: 10 s.
pub const FAIRNESS_NS_MAX: u64 = 10_000_000_000;

/// The fairness delays set through the log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FairnessSetting {
    /// d_h: how long after its stamp every gateway releases a market data entry.
    pub hold_ns: u64,
    /// d_s: how long the leader's sequencer holds a stamped batch.
    pub window_ns: u64,
}

/// How a symbol matches at a price level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MatchPolicy {
    /// Price-time priority: first come, first filled.
    Fifo,
    /// Pro-rata by displayed quantity, rounded down to lots; the remainder goes FIFO.
    ProRata,
}

/// The definition of a tradable pair.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SymbolSpec {
    pub name: String,
    pub base: AssetId,
    pub quote: AssetId,
    /// Prices must be multiples of this (quote minor units per base unit).
    pub tick: Px,
    /// Quantities must be multiples of this (base units).
    pub lot: Qty,
    pub px_min: Px,
    pub px_max: Px,
    /// Fee per lot charged to the resting side, in quote minor units; negative is a rebate.
    pub fee_maker: Amount,
    /// Fee per lot charged to the incoming side, in quote minor units.
    pub fee_taker: Amount,
    pub policy: MatchPolicy,
}

/// Time in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tif {
    /// Good till cancelled: the remainder rests.
    Gtc,
    /// Immediate or cancel: the remainder is cancelled.
    Ioc,
    /// Fill or kill: the whole quantity trades at once or nothing happens.
    Fok,
    /// Day: like GTC (the remainder rests) until the trading day closes
    /// ([`CommandBody::CloseDay`]), which expires whatever is left.
    Day,
}

impl Tif {
    /// Whether an order with this time in force may rest in the book (GTC and Day);
    /// only such limit orders may be post-only or icebergs.
    pub fn rests(self) -> bool {
        matches!(self, Tif::Gtc | Tif::Day)
    }
}

/// Self-trade prevention: what happens when an order would trade with its own account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Stp {
    /// Cancel the resting order of the same account and keep matching.
    #[default]
    CancelResting,
    /// Cancel the rest of the incoming order.
    CancelIncoming,
    /// Let the account trade with itself.
    Allow,
}

/// The price behaviour of an order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum OrderKind {
    Limit {
        px: Px,
    },
    /// A market order. A buy must carry a `budget`: the most quote it may spend,
    /// fees included. A sell may carry one only with FOK: the least it must receive,
    /// net of fees (exchange-core's FOK_BUDGET).
    Market {
        budget: Option<Amount>,
    },
    /// Becomes `Limit { px }` when the last trade price reaches `trigger`
    /// (at or above for a buy, at or below for a sell).
    StopLimit {
        trigger: Px,
        px: Px,
    },
    /// Becomes `Market { budget }` with IOC when the last trade reaches `trigger`.
    StopMarket {
        trigger: Px,
        budget: Option<Amount>,
    },
}

impl OrderKind {
    /// The stop trigger, for stop orders.
    pub fn trigger(&self) -> Option<Px> {
        match *self {
            OrderKind::StopLimit { trigger, .. } | OrderKind::StopMarket { trigger, .. } => Some(trigger),
            OrderKind::Limit { .. } | OrderKind::Market { .. } => None,
        }
    }

    /// The limit price (`None` for market orders) and the budget (market orders only).
    pub fn limit_and_budget(&self) -> (Option<Px>, Option<Amount>) {
        match *self {
            OrderKind::Limit { px } | OrderKind::StopLimit { px, .. } => (Some(px), None),
            OrderKind::Market { budget } | OrderKind::StopMarket { budget, .. } => (None, budget),
        }
    }
}

/// A new order as the client asked for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OrderRequest {
    pub account: AccountId,
    pub symbol: SymbolId,
    pub side: Side,
    pub kind: OrderKind,
    pub qty: Qty,
    pub tif: Tif,
    /// Refuse the order rather than let it take liquidity.
    pub post_only: bool,
    /// Iceberg: show at most this much; `None` shows everything.
    pub display_qty: Option<Qty>,
    pub stp: Stp,
}

impl OrderRequest {
    /// A plain limit order with the default flags.
    pub fn limit(account: AccountId, symbol: SymbolId, side: Side, px: Px, qty: Qty, tif: Tif) -> Self {
        OrderRequest {
            account,
            symbol,
            side,
            kind: OrderKind::Limit { px },
            qty,
            tif,
            post_only: false,
            display_qty: None,
            stp: Stp::default(),
        }
    }

    /// A market order (IOC) with an optional budget.
    pub fn market(account: AccountId, symbol: SymbolId, side: Side, qty: Qty, budget: Option<Amount>) -> Self {
        OrderRequest {
            account,
            symbol,
            side,
            kind: OrderKind::Market { budget },
            qty,
            tif: Tif::Ioc,
            post_only: false,
            display_qty: None,
            stp: Stp::default(),
        }
    }
}

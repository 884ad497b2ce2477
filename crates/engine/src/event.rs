//! Events: everything the engine did, as values.
//!
//! Applying a command appends events to a caller-owned buffer; the runtime around the
//! engine turns them into acknowledgements, fills, market data and audit records. Tests
//! compare event lists exactly, so their order is part of the contract: within one
//! command, events appear in the order the changes happened.

use serde::{Deserialize, Serialize};

use crate::command::OrderKind;
use crate::reject::Reject;
use crate::types::{AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// Why an order left the book without being filled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CancelReason {
    /// The owner asked.
    Requested,
    /// IOC or market remainder that found no more liquidity.
    Unfilled,
    /// A market buy ran out of budget.
    BudgetExhausted,
    /// Self-trade prevention cancelled this order.
    SelfTrade,
    /// A reduce took the whole remaining quantity.
    ReducedToZero,
    /// A Day order was still open when the trading day closed.
    Expired,
    /// Its account was liquidated (orders in the margin symbols of the settlement asset
    /// are cancelled first), or a liquidation order's rest passed to the insurance account.
    Liquidation,
}

impl CancelReason {
    /// The stable snake_case name every API shows (`budget_exhausted`).
    pub fn name(self) -> &'static str {
        match self {
            CancelReason::Requested => "requested",
            CancelReason::Unfilled => "unfilled",
            CancelReason::BudgetExhausted => "budget_exhausted",
            CancelReason::SelfTrade => "self_trade",
            CancelReason::ReducedToZero => "reduced_to_zero",
            CancelReason::Expired => "expired",
            CancelReason::Liquidation => "liquidation",
        }
    }
}

/// The first answer to a command, remembered for exactly-once replies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Outcome {
    /// Done; `id` is the new asset, symbol, account or order id, or 0.
    Ok {
        id: u64,
    },
    Rejected(Reject),
}

/// The result of [`crate::Engine::apply`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    pub outcome: Outcome,
    /// True when `(client, seq)` had been applied before: nothing changed and
    /// `outcome` is the original one.
    pub duplicate: bool,
}

/// Something that happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    AssetCreated {
        asset: AssetId,
    },
    SymbolCreated {
        symbol: SymbolId,
    },
    AccountCreated {
        account: AccountId,
    },
    AccountSuspended {
        account: AccountId,
    },
    AccountResumed {
        account: AccountId,
    },
    /// A balance after a change.
    Balance {
        account: AccountId,
        asset: AssetId,
        available: Amount,
        reserved: Amount,
    },
    /// The command was refused and changed nothing.
    Rejected {
        reject: Reject,
    },
    /// An order was accepted (it may trade, rest, or wait for its trigger).
    Accepted {
        order: OrderId,
        account: AccountId,
        symbol: SymbolId,
        side: Side,
        kind: OrderKind,
        qty: Qty,
        ts: Timestamp,
    },
    /// A resting order was placed in the book (after any immediate trading), with the
    /// quantity it shows.
    Rested {
        order: OrderId,
        symbol: SymbolId,
        side: Side,
        px: Px,
        qty_visible: Qty,
    },
    Trade {
        symbol: SymbolId,
        px: Px,
        qty: Qty,
        /// The side of the incoming order.
        taker_side: Side,
        maker_order: OrderId,
        taker_order: OrderId,
        maker_account: AccountId,
        taker_account: AccountId,
        fee_maker: Amount,
        fee_taker: Amount,
        /// True when this fill completed the maker order.
        maker_done: bool,
    },
    /// An iceberg showed a new slice from its reserve and went to the back of its level.
    Refreshed {
        order: OrderId,
        qty_visible: Qty,
    },
    Reduced {
        order: OrderId,
        qty_by: Qty,
        qty_remaining: Qty,
    },
    Moved {
        order: OrderId,
        px: Px,
    },
    Cancelled {
        order: OrderId,
        qty_cancelled: Qty,
        reason: CancelReason,
    },
    /// A stop order's trigger was reached; it now acts as its limit or market order.
    Triggered {
        order: OrderId,
        last_px: Px,
    },
    /// A day-trading audit record or a day-trading command's result
    /// (`crate::daytrading::DtEvent`): users by ledger index, the rest from the command.
    DayTrading(crate::daytrading::DtEvent),
    /// A margin position after a change: signed size, its cost (`Σ signed qty × px ×
    /// multiplier` of the open size, so the average open price is `cost / (size ×
    /// multiplier)`), and the P&L realised so far.
    Position {
        account: AccountId,
        symbol: SymbolId,
        size: Qty,
        cost: Amount,
        realized: Amount,
    },
    /// A margin symbol's mark price changed.
    Mark {
        symbol: SymbolId,
        px: Px,
    },
    /// The account's equity in `asset` fell below its maintenance margin: its orders
    /// in that asset's margin symbols are cancelled and its positions closed.
    Liquidated {
        account: AccountId,
        asset: AssetId,
    },
    /// What the book did not take of a liquidated position passed to the insurance
    /// account at the bankruptcy-bound price.
    PositionTransferred {
        symbol: SymbolId,
        from: AccountId,
        to: AccountId,
        /// Signed, as `to` receives it (positive: `to` is long more).
        qty: Qty,
        px: Px,
    },
    /// The close of the trading day settled a position's variation margin at the mark:
    /// `variation` (`size × px × multiplier − cost`) was paid into (or out of) the
    /// account's available cash, and the position's cost is now `size × px × multiplier`.
    Settled {
        account: AccountId,
        symbol: SymbolId,
        px: Px,
        variation: Amount,
    },
    /// A margin symbol's settlement at the close of the trading day: the settle price
    /// (its mark) and the open interest (the sum of its long positions).
    Settlement {
        symbol: SymbolId,
        px: Px,
        open_interest: Qty,
    },
    /// A loss passed an account's available cash: the insurance account paid
    /// `covered`, and what it could not pay is the asset's bad debt.
    Shortfall {
        account: AccountId,
        asset: AssetId,
        covered: Amount,
        bad_debt: Amount,
    },
}

#[cfg(test)]
mod tests {
    /// Events are copied around the matching path: the day-trading variant must not
    /// make them any bigger than the largest order event (a trade) already does.
    #[test]
    fn events_stay_the_size_of_a_trade() {
        assert_eq!(std::mem::size_of::<super::Event>(), 64);
        assert!(std::mem::size_of::<crate::daytrading::DtEvent>() <= 56);
        assert_eq!(std::mem::size_of::<crate::command::CommandBody>(), 64);
    }
}

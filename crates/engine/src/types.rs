//! Identifiers and integer units.
//!
//! Every quantity the engine handles is an integer with a unit in its type:
//! - [`Px`]: a price in minor units of the quote asset per one unit of the base asset
//!   (for `ACME/USD` with cents as the minor unit, `Px(10_050)` is $100.50 a share);
//!   it must be a multiple of the symbol's tick.
//! - [`Qty`]: a quantity in units of the base asset; it must be a multiple of the
//!   symbol's lot.
//! - [`Amount`]: a balance or a notional in minor units of some asset.
//!
//! `px × qty` is computed in `i128` and converted back to [`Amount`] only when it fits;
//! an overflow is a rejection, never a wrap.

use serde::{Deserialize, Serialize};

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $inner:ty) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        pub struct $name(pub $inner);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

id_type!(
    /// An asset (a currency or a stock), numbered from 0 in creation order.
    AssetId,
    u32
);
id_type!(
    /// A tradable pair (base, quote), numbered from 0 in creation order.
    SymbolId,
    u32
);
id_type!(
    /// An account holding a balance per asset, numbered from 0 in creation order.
    AccountId,
    u32
);
id_type!(
    /// An order, numbered from 1 in acceptance order across all symbols.
    OrderId,
    u64
);
id_type!(
    /// A client session for exactly-once delivery (a gateway session, a tool).
    ClientId,
    u64
);
impl ClientId {
    /// The exchange itself: the leader's fairness controller sends
    /// [`CommandBody::SetFairness`](crate::command::CommandBody::SetFairness) under it,
    /// outside exactly-once (a setting applied twice is applied once). No session
    /// record is kept for it.
    pub const SYSTEM: ClientId = ClientId(u64::MAX);
}

id_type!(
    /// A price in quote minor units per base unit.
    Px,
    i64
);
id_type!(
    /// A quantity in base units.
    Qty,
    i64
);
id_type!(
    /// An amount of some asset in its minor units.
    Amount,
    i64
);

/// Nanoseconds since the Unix epoch, stamped by the leader on every command.
pub type Timestamp = u64;

impl Qty {
    pub const ZERO: Qty = Qty(0);

    pub fn min(self, other: Qty) -> Qty {
        Qty(self.0.min(other.0))
    }
}

impl Amount {
    pub const ZERO: Amount = Amount(0);
}

/// `px × qty` as an exact 128-bit product.
pub fn notional(px: Px, qty: Qty) -> i128 {
    i128::from(px.0) * i128::from(qty.0)
}

/// Converts an `i128` amount to [`Amount`] when it fits.
pub fn amount_from_i128(value: i128) -> Option<Amount> {
    i64::try_from(value).ok().map(Amount)
}

/// Which side of the book an order is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Side {
    Buy,
    Sell,
}

impl Side {
    pub fn opposite(self) -> Side {
        match self {
            Side::Buy => Side::Sell,
            Side::Sell => Side::Buy,
        }
    }

    /// Index for per-side arrays: bids 0, asks 1.
    pub fn index(self) -> usize {
        match self {
            Side::Buy => 0,
            Side::Sell => 1,
        }
    }

    /// True when a resting order at `maker_px` on the opposite side is reachable by a
    /// taker of this side with limit `limit_px`.
    pub fn crosses(self, limit_px: Px, maker_px: Px) -> bool {
        // One comparison of the pair in the side's order, which compiles without a
        // branch on the side: an order flow's moves come from either side at random.
        let (low, high) = match self {
            Side::Buy => (maker_px, limit_px),
            Side::Sell => (limit_px, maker_px),
        };
        low <= high
    }

    /// True when `a` has better price priority than `b` for resting orders of this side.
    pub fn better(self, a: Px, b: Px) -> bool {
        match self {
            Side::Buy => a > b,
            Side::Sell => a < b,
        }
    }
}

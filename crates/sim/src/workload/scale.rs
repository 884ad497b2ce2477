//! The scale workload: a million accounts over a hundred thousand books.
//!
//! 100,000 symbols (each its own base asset against USD), 1,000,000 accounts (ten homed
//! on each symbol, each holding USD and its symbol's base), and a pre-fill of 5 orders a
//! side in every book: 1,000,000 resting orders. Setup and pre-fill are plain commands
//! ([`Market::next_setup`]) that a benchmark applies in chunks and times. The mixed run
//! that follows uses exchange-core 2018's mix over books picked uniformly at random, each
//! book kept near its 10 orders; prices stay within a few dozen ticks of the centre so a
//! book's ladder spans one or two blocks.
//!
//! The point is memory and cache behaviour at size, not one hot book: resident memory
//! should stay well under 4 GiB.

use bourse_engine::{Amount, Px};

use super::ec::EC2018;
use super::generator::Profile;
use super::market::MarketSpec;

pub const SCALE_ACCOUNTS: u32 = 1_000_000;
pub const SCALE_SYMBOLS: u32 = 100_000;
/// 5 a side in 100,000 books: 1,000,000 resting orders.
pub const SCALE_ORDERS_PER_SIDE: u32 = 5;
/// Mixed commands per run.
pub const SCALE_COMMANDS_DEFAULT: u64 = 1_000_000;

/// exchange-core 2018's mix, spread over many books.
pub const SCALE_PROFILE: Profile = Profile { name: "scale", ..EC2018 };

/// `accounts` accounts over `symbols` books with `orders_per_side` resting a side.
pub fn scale_market_spec(accounts: u32, symbols: u32, orders_per_side: u32) -> MarketSpec {
    MarketSpec {
        accounts,
        symbols,
        px_center: Px(100_000),
        px_min: Px(1_000),
        px_max: Px(10_000_000),
        fee_maker: Amount(1),
        fee_taker: Amount(2),
        quote_deposit: Amount(1_000_000_000_000),
        base_credit: Amount(1_000_000_000),
        orders_per_side,
        px_spread_ticks: 24,
        margin: None,
    }
}

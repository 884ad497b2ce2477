//! Workload generators.
//!
//! - [`market`]: a market laid out for a benchmark (assets, symbols, funded accounts)
//!   and its pre-filled books, as commands with predictable ids.
//! - [`tracker`]: the generator's view of which orders rest, where, and who owns them,
//!   kept current from the engine's events.
//! - [`generator`]: the order flow itself (GTC, IOC, cancel, move, reduce, FOK by
//!   budget) with a target mix, a book kept near its target size, and a target share
//!   of commands that trade.
//! - [`ec`]: exchange-core's single-book benchmark mixes, 2018 and 2020.
//! - [`sweep`]: a deep one-sided book and the one order that sweeps it.
//! - [`scale`]: a million accounts over a hundred thousand books.
//! - [`stats`]: what a generated flow actually contained.
//!
//! Every generator runs its own engine while it generates (as exchange-core's generator
//! does), so it knows each command's outcome and the ids the engine assigned; the
//! commands it returns are therefore valid for an engine in the same starting state.

pub mod ec;
pub mod generator;
pub mod market;
pub mod scale;
pub mod stats;
pub mod sweep;
pub mod tracker;

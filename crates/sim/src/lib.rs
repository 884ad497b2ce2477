//! # bourse-sim
//!
//! Simulated order flow for Bourse: seeded workload generators that produce valid,
//! sequenced engine commands, for benchmarks (`bourse bench engine`), and simulated
//! traders ([`agents`]: market maker, noise, mean-reversion, momentum, pairs and value
//! traders, the scenarios `bourse demo` runs, and an in-process arena to run them on).
//!
//! Everything here is deterministic given a seed: the same seed gives the same commands,
//! byte for byte, so a benchmark or a failure reproduces from seed plus commit.
//! Floating point appears only in statistics about the flow and inside the traders'
//! own arithmetic (averages, estimates), never in a command: prices are rounded to the
//! tick before they leave a strategy.

pub mod agents;
pub mod workload;

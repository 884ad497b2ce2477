//! The workload driver (`bourse workload FILE|DIR`, spec 10.3): replays a workload
//! against a running day-trading service and reports throughput, per-command latency
//! percentiles and errors.
//!
//! - `per-user` (default): each user's commands in number order with one outstanding
//!   per user; users run concurrently, at most `concurrency` at once (all by default),
//!   spread over `streams` `DayTrading.Session` streams whose requests and responses
//!   travel in batches.
//! - `sequential`: one command at a time in number order (reproducible logs).
//!
//! In both, the global `DUMPLOG` goes only after every other command was answered. The
//! clock of a measurement runs from the first send to the last answer before the dump;
//! latency is from a command's send to its answer. Progress goes to stderr once a
//! second.

pub mod parse;
pub mod run;
pub mod wire;

pub use parse::{load, parse_split, parse_standard, Line, Workload};
pub use run::{run, Latency, Mode, Report, RunConfig};

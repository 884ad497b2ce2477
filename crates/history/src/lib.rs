//! # bourse-history
//!
//! The history and audit store of Bourse: every order with every state change, every
//! execution, every balance movement, account and symbol changes, keyed by the log
//! index that produced them, in SQLite (a file, the default) or PostgreSQL.
//!
//! - [`recorder`]: the sink's own engine, fed with the committed log; its events become
//!   [`rows`]. Same log in, same rows out.
//! - [`sink`]: source → recorder thread → writer thread, bounded queues, exactly once
//!   (the progress is written in the same transaction as the rows), lag as metrics.
//! - [`follow`]: the source for a running node or cluster (`Log.Follow` over gRPC, any
//!   member, failover); [`files`]: the source for a stopped node's journal.
//! - [`store`]: the two backends, one [`schema`]; [`query`]: the queries, one SQL text
//!   each for both.
//! - [`clearing`]: a trading day's clearing report (per account and symbol, per
//!   account and asset, per symbol, the conservation line per asset) from the rows.
//! - [`testing`]: a throwaway PostgreSQL server (initdb into a temporary directory, a
//!   free port) for tests and benchmarks, and made-up rows for the stores' tests.

pub mod audit;
pub mod clearing;
pub mod files;
pub mod follow;
pub mod pace;
pub mod query;
pub mod recorder;
pub mod rows;
pub mod schema;
pub mod sink;
pub mod store;
pub mod testing;

pub use follow::{Following, LocalLog};
pub use pace::Yield;
pub use recorder::{LogEntry, Recorder};
pub use sink::{Feed, Opened, Sink, SinkConfig, SinkError, SinkStatus};
pub use store::{Progress, Store};

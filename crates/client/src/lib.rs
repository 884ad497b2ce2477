//! # bourse-client
//!
//! An async Rust client for Bourse nodes, speaking the gRPC contract of
//! `proto/bourse/v1/exchange.proto` (through [`bourse_protocol`]), and a load driver.
//!
//! - [`Client`]: an order entry session on the `OrderEntry.Session` stream. It numbers
//!   commands itself, keeps every unanswered one in a bounded window
//!   ([`ClientOptions::inflight_max`], at most the engine's 128-command outcome window),
//!   and after a broken stream connects again (to the same node or the next of its list,
//!   with backoff) and resends them in seq order with their original seqs, so each is
//!   applied exactly once. `submit` waits for one answer, `submit_batch` pipelines many,
//!   and `send`/[`Permit::send`] with the [`Events`] stream make an open-loop sender
//!   and receiver. Fills and cancellations of the client's orders arrive on [`Events`].
//! - [`AdminSession`]: one command at a time through `Admin.Submit`, with the same
//!   exactly-once rules, for tools.
//! - [`QueryClient`]: the `Query` service and the `MarketData.Subscribe` stream.
//! - [`random_client_id`]: every process is a new client with an id from the OS.
//! - [`load`]: a multi-connection load driver with open-loop latency measurement.
//!
//! The retry rules live in [`window`], a pure state machine tested without a server.
//! What they need from a node (the `.proto` and `bourse_protocol` say the same):
//! - a command is answered only once it is durable, and its answer is final: the engine
//!   outcome, or `sequence_gap` (not recorded), or a refusal before the log (code 1000 or
//!   more, log index 0, seq not used up, and decided from the command's shape alone so a
//!   resend is refused again);
//! - the commands of one stream are sequenced in the order they were sent, and answers
//!   to them come back on that stream in that order;
//! - a duplicate seq within the last 128 of a client is answered with its original
//!   outcome;
//! - nothing acknowledged is forgotten (after a restart or failover, the client's
//!   high-water mark is at least every seq that was answered).

pub mod admin;
pub mod client;
pub mod client_id;
mod endpoints;
pub mod error;
pub mod load;
pub mod local;
pub mod options;
pub mod query;
pub mod query_pool;
pub mod reply;
pub mod window;

pub use admin::AdminSession;
pub use client::{Client, ClientStats, Events, Permit, SessionEvent};
pub use client_id::random_client_id;
pub use endpoints::same_address;
pub use error::{Error, Result};
pub use local::{KeyRights, LocalGateway, LocalMarketData, LocalOrderEntry};
pub use options::{ApiKey, ClientOptions, ClientTls};
pub use query::{MarketDataStream, QueryClient};
pub use query_pool::QueryPool;
pub use reply::Reply;

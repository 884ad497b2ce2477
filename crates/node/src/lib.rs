//! # bourse-node
//!
//! A single durable exchange node: the engine behind a write-ahead journal, served
//! over gRPC (`proto/bourse/v1/exchange.proto`), with Prometheus metrics.
//!
//! The path of a command: a gRPC task converts it and queues it for the core thread
//! (bounded queue: backpressure); the core stamps, numbers, logs and applies it, and
//! parks the outputs; the journal's writer makes the batch durable with one fdatasync
//! and releases the outputs (acks, fills, cancels, market data, query answers). See
//! `core.rs` for the invariants.

pub mod auth;
pub mod config;
mod core;
mod fair;
mod link;
mod log;
pub mod metrics;
mod node;
mod outbox;
pub mod ports;
mod query;
mod replica;
mod service;

pub use config::{FairnessToml, NodeConfig, VirtualClock};
pub use core::{committed_command, Request};
pub use fair::InForce;
pub use link::{LocalLink, LINK_SILENT_MAX};
pub use log::LocalLog;
pub use node::{journal_dir, recover, recover_member, run_until_signal, Node, NodeError, Recovered, SimulatedNode};
pub use replica::CoreMachine;
pub use service::{BoxStream, LocalSessions};

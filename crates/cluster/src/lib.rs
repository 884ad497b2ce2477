//! # bourse-cluster
//!
//! Replication of the exchange with Raft ([openraft], pinned to one pre-release; see
//! `docs/ARCHITECTURE.md` for why). This crate is the only one that names openraft, so
//! an upgrade touches one place.
//!
//! - [`types`]: the Raft type configuration: a log entry carries a [`Batch`] of encoded
//!   engine commands stamped by the leader; a member is a [`Peer`] (its client API and
//!   its Raft address).

pub mod fault;
pub mod fuzzing;
pub mod log_store;
pub mod member;
pub mod network;
pub mod replay;
pub mod runtime;
pub mod sim;
pub mod snapshot_store;
pub mod state_machine;
pub mod tls;
pub mod transport;
pub mod types;

pub use types::{Batch, NodeId, Peer, TypeConfig};

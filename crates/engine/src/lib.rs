//! # bourse-engine
//!
//! The exchange as a pure, deterministic state machine over integers:
//! `(state, command) -> (state, events)`. No clock, no I/O, no randomness, no
//! hash-map order in any output. Every replica that applies the same commands reaches
//! the same state, and [`Engine::state_hash`] proves it.
//!
//! Start at [`Engine::apply`]; commands are in [`command`], events in [`event`],
//! rejections in [`Reject`]. Two order books implement [`book::Book`]: the
//! [`book::FastBook`] the exchange runs and the [`book::ReferenceBook`] it is tested
//! against.

pub mod account;
pub mod book;
pub mod codec;
pub mod command;
pub mod daytrading;
mod engine;
pub mod event;
pub mod fuzzing;
mod handoff;
mod invariants;
pub mod margin;
mod matching;
mod order;
pub use order::spot_hold;
mod query;
pub mod reject;
mod session;
mod snapshot;
pub mod types;

pub use engine::{
    Asset, Engine, EngineConfig, Fill, OrderRecord, OrderStatus, StopOrder, NAME_LEN_MAX, SYMBOL_NAME_LEN_MAX,
};
pub use event::{Applied, CancelReason, Event, Outcome};
pub use handoff::{BookHandoff, HandoffError};
pub use matching::allocate_pro_rata;
pub use query::{Depth, OrderView};
pub use reject::Reject;
pub use snapshot::{hex, SnapshotError, SNAPSHOT_VERSION};
pub use types::*;

/// The engine with the reference book, for tests and differential checks.
pub type ReferenceEngine = Engine<book::ReferenceBook>;

//! # bourse-model
//!
//! Bourse's protocol as finite models, checked exhaustively with
//! [stateright](https://www.stateright.rs): every state reachable within the stated bounds
//! is visited (breadth first), every safety property is checked in each, and a violation
//! comes back as the shortest path of actions that reaches it.
//!
//! - [`replication`]: a replicated log with leader election by terms and majorities, the
//!   leader's commit rule, snapshot installation, and clients with exactly-once sessions
//!   (`(client, seq)` numbered commands, retried to whichever replica leads, answered at
//!   most once by the state machine's session check). Properties: no acknowledged command
//!   lost across leader changes, no command's effects emitted twice, every replica applies
//!   the same commands in the same order.
//! - [`fairness`]: gateways stamping orders that reach the leader's fair sequencer after a
//!   bounded, nondeterministic delay (FIFO per gateway), heartbeats carrying watermarks, and
//!   the sequenced entries' market data held by each gateway until `t_m + d_h`. The models
//!   drive the production [`bourse_fairness::Resequencer`] and [`bourse_fairness::HoldQueue`]
//!   themselves, not a re-statement of them. Properties: orders that arrive within the
//!   window leave in stamp order; no market data leaves a gateway before its release time,
//!   and data that arrives in time leaves every gateway at that same instant.
//!
//! Each model takes a [`replication::Bugs`] or [`fairness::Bugs`] value whose switches
//! plant a known mistake (acknowledging before commit, skipping the duplicate check,
//! installing a snapshot older than the replica's state, releasing market data early);
//! the tests show the checker finds each one. The switches are part of the model, never
//! of the production code. docs/ARCHITECTURE.md ("Model checking") states the properties
//! and the bounds checked in `make test`.

pub mod fairness;
pub mod replication;

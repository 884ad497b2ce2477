//! # bourse-protocol
//!
//! The public gRPC contract of a Bourse node, `proto/bourse/v1/exchange.proto`, as Rust
//! types ([`proto`]), and the conversions between them and the engine's types
//! ([`convert`]).
//!
//! Code generation needs no system `protoc`: `build.rs` compiles the `.proto` with
//! protox (pure Rust) and hands the descriptor set to `tonic-prost-build`. The versions
//! move together: tonic, tonic-prost and tonic-prost-build 0.14, prost 0.14, protox 0.10
//! (which builds prost-types 0.14 descriptors). tonic 0.14 needs Rust 1.88, so this
//! crate says so rather than inherit the workspace's 1.85.
//!
//! Rules of the contract that a server must keep (the `.proto` says them to clients):
//! - A command whose shape is wrong ([`convert::ConvertError`]) is answered with
//!   [`convert::ack_refused`] (code 1000 or more, `log_index` 0) and never logged, so its
//!   `seq` is not used up.
//! - The leader's timestamp is not on the wire: [`convert::command_from_proto`] takes it.
//! - An Ack for a duplicate carries the log index of the retry, not of the original.
//! - Every trade is reported to both owners; `(log_index, trade_seq)` names it, with
//!   `trade_seq` counting the trades of one log entry from 0.
//! - Unknown ids in queries are the gRPC status `NOT_FOUND`; replies carry the log index
//!   they were read at.

pub mod convert;
pub mod daytrading;
pub mod feed;
pub mod fuzzing;
pub mod refusal;

/// The generated messages, enums, clients (`*_client`) and servers (`*_server`) of
/// package `bourse.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("bourse.v1");

    /// The encoded `FileDescriptorSet` of `bourse.v1`, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bourse_v1_descriptor.bin"));
}

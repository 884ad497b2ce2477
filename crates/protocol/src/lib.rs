//! # bourse-protocol
//!
//! The public gRPC contract of a Bourse node, `proto/bourse/v1/exchange.proto`, as Rust
//! types ([`proto`]), and the conversions between them and the engine's types
//! ([`convert`]).

pub mod convert;

/// The generated messages, enums, clients (`*_client`) and servers (`*_server`) of
/// package `bourse.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod proto {
    tonic::include_proto!("bourse.v1");

    /// The encoded `FileDescriptorSet` of `bourse.v1`, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/bourse_v1_descriptor.bin"));
}

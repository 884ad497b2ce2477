//! Compiles `proto/bourse/v1/exchange.proto` with protox (a protobuf compiler in pure
//! Rust, so a fresh machine needs no system `protoc`), then generates the prost messages
//! and the tonic clients and servers from the resulting descriptor set. The encoded
//! descriptor set is written beside them for gRPC reflection.

use std::path::PathBuf;

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let proto_root = manifest_dir.join("../../proto");
    let proto_file = proto_root.join("bourse/v1/exchange.proto");
    println!("cargo:rerun-if-changed={}", proto_file.display());

    let descriptors = protox::compile([&proto_file], [&proto_root])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(out_dir.join("bourse_v1_descriptor.bin"), descriptors.encode_to_vec())?;

    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Every ack travels the order path: a day-trading result rides in a box so an
        // order's ack stays as small as before.
        .boxed(".bourse.v1.Ack.day_trading")
        .compile_fds(descriptors)?;
    Ok(())
}

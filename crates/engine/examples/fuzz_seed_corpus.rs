//! Writes the seed corpus of the fuzz targets: `cargo run --example fuzz_seed_corpus`.
//! `apply/` gets seeded random streams; `decode/` gets encodings of commands of every
//! kind built by the fuzzing generators.

use bourse_engine::codec;
use bourse_engine::command::Command;
use bourse_engine::fuzzing::{body_from_bytes, rare_body_from_bytes, Bytes, Differential};
use bourse_engine::ClientId;
use std::path::Path;

fn stream(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus");
    std::fs::create_dir_all(root.join("apply"))?;
    std::fs::create_dir_all(root.join("decode"))?;
    for seed in 0..24u64 {
        std::fs::write(root.join("apply").join(format!("seed-{seed:02}")), stream(seed, 512 + 128 * seed as usize))?;
    }
    let data = stream(99, 4_000);
    let mut bytes = Bytes::new(&data);
    let d = Differential::new();
    for i in 0..48u64 {
        let body = body_from_bytes(&mut bytes, &d.fast);
        let command = Command { client: ClientId(i % 3), seq: i + 1, ts: 1_000 * i, body };
        std::fs::write(root.join("decode").join(format!("command-{i:02}")), codec::encode(&command))?;
    }
    // New symbols and day-trading entries.
    for i in 0..16u64 {
        let body = rare_body_from_bytes(&mut bytes);
        let command = Command { client: ClientId(i % 3), seq: i + 1, ts: 1_000 * i, body };
        std::fs::write(root.join("decode").join(format!("rare-{i:02}")), codec::encode(&command))?;
    }
    println!("corpus written under {}", root.display());
    Ok(())
}

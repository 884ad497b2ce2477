//! Runs the fuzz targets' corpus on stable Rust, so CI exercises every input the
//! fuzzer has kept (`make fuzz` runs the real fuzzer with cargo-fuzz on nightly).

use bourse_engine::codec;
use std::path::Path;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus").join(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("readable corpus entry").path();
            (path.display().to_string(), std::fs::read(&path).expect("readable corpus file"))
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "corpus {target} is empty");
    files
}

#[test]
fn apply_corpus_runs_clean() {
    for (name, data) in corpus("apply") {
        eprintln!("{name}");
        bourse_engine::fuzzing::run(&data);
    }
}

#[test]
fn decode_corpus_round_trips() {
    let mut decoded = 0;
    for (name, data) in corpus("decode") {
        if let Ok(command) = codec::decode(&data) {
            assert_eq!(codec::decode(&codec::encode(&command)).as_ref(), Ok(&command), "{name}");
            decoded += 1;
        }
    }
    assert!(decoded > 0, "no corpus entry decodes: the corpus is stale");
}

#[test]
fn decode_rejects_garbage_and_oversize() {
    assert!(codec::decode(&[]).is_err());
    assert!(codec::decode(&[0xff; 16]).is_err());
    assert!(matches!(codec::decode(&vec![0u8; codec::COMMAND_BYTES_MAX + 1]), Err(codec::DecodeError::TooLong(_))));
}

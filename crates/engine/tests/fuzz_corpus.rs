//! Runs the fuzz targets' corpus on stable Rust, so CI exercises every input the
//! fuzzer has kept (`make fuzz` runs the real fuzzer with cargo-fuzz on nightly), plus
//! seeded pseudo-random streams, and checks that the apply target's generators make
//! every kind of command.

use bourse_engine::codec;
use bourse_engine::command::CommandBody;
use bourse_engine::daytrading::{DtKind, DtRequest};

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    bourse_testkit::corpus(env!("CARGO_MANIFEST_DIR"), target, 1)
}

#[test]
fn apply_corpus_runs_clean() {
    for (name, data) in corpus("apply") {
        eprintln!("{name}");
        bourse_engine::fuzzing::run(&data);
    }
}

#[test]
fn seeded_random_streams_run_clean() {
    // SplitMix64 (`fuzzing::seeded_bytes`), so a failure reproduces from the printed seed.
    for seed in 0..24u64 {
        eprintln!("seed {seed}");
        bourse_engine::fuzzing::run(&bourse_engine::fuzzing::seeded_bytes(seed, 1_500));
    }
}

#[test]
fn the_generators_make_every_kind_of_command() {
    use bourse_engine::fuzzing::{body_from_bytes, body_kind, rare_body_from_bytes, Bytes, Differential, BODY_KINDS};
    let d = Differential::new();
    let data = bourse_engine::fuzzing::seeded_bytes(7, 40_000);
    let mut bytes = Bytes::new(&data);
    let mut seen = [0u32; BODY_KINDS];
    let mut day_trading = std::collections::BTreeSet::new();
    while !bytes.is_empty() {
        for body in [body_from_bytes(&mut bytes, &d.fast), rare_body_from_bytes(&mut bytes)] {
            seen[body_kind(&body)] += 1;
            if let CommandBody::DayTrading(request) = &body {
                day_trading.insert(match request.as_ref() {
                    DtRequest::Command(command) => command.kind.name(),
                    DtRequest::Quote(_) => "quote",
                });
            }
        }
    }
    assert!(seen.iter().all(|&n| n > 0), "kinds never generated: {seen:?}");
    assert_eq!(day_trading.len(), DtKind::ALL.len() + 1, "day-trading entries generated: {day_trading:?}");
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

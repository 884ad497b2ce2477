//! The fuzz target's corpus (crates/daytrading/fuzz/corpus/workload) on stable, plus
//! seeded random inputs: every input is parsed as a standard workload file and as the
//! per-user split (`bourse_daytrading::fuzzing::parse_workload`) without a panic.

use bourse_daytrading::fuzzing::parse_workload;
use bourse_testkit::{corpus, SplitMix64};

#[test]
fn the_fuzz_corpus_parses_without_panicking() {
    for (path, bytes) in corpus(env!("CARGO_MANIFEST_DIR"), "workload", 10) {
        eprintln!("{path}");
        parse_workload(&bytes);
    }
}

#[test]
fn seeded_random_workloads_parse_without_panicking() {
    // Pieces of workload lines, so random text is mostly lines that almost parse.
    const PIECES: &[&str] = &[
        "[",
        "]",
        "] ",
        "1",
        "42",
        "0",
        "+",
        "\n",
        "\r\n",
        "\r",
        " ",
        ",",
        "$ ",
        "\0",
        "finalLOG",
        "ADD",
        "QUOTE",
        "BUY",
        "COMMIT_BUY",
        "CANCEL_SET_SELL",
        "DUMPLOG",
        "./testLOG",
        "alice",
        "S",
        "100.00",
        "-5",
        "é",
        "\u{fffd}",
    ];
    // SplitMix64, so a failure reproduces from the printed seed.
    for seed in 0..1_000u64 {
        let mut rng = SplitMix64(seed);
        let mut next = || rng.next();
        let mut bytes = Vec::new();
        for _ in 0..next() % 80 {
            match next() % 16 {
                0 => bytes.push(next() as u8),
                _ => bytes.extend_from_slice(PIECES[(next() % PIECES.len() as u64) as usize].as_bytes()),
            }
        }
        eprintln!("seed {seed}");
        parse_workload(&bytes);
    }
}

//! The fuzz target's corpus (crates/daytrading/fuzz/corpus/workload) on stable, plus
//! seeded random inputs: every input is parsed as a standard workload file and as the
//! per-user split (`bourse_daytrading::fuzzing::parse_workload`) without a panic.

use bourse_daytrading::fuzzing::parse_workload;

#[test]
fn the_fuzz_corpus_parses_without_panicking() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/workload");
    let mut files = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        eprintln!("{}", path.display());
        parse_workload(&std::fs::read(&path).unwrap());
        files += 1;
    }
    assert!(files >= 10, "the corpus has {files} files");
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
        let mut state = seed;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
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

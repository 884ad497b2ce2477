//! The `session` and `store` fuzz targets' corpora (crates/fix/fuzz/corpus) on stable,
//! and seeded random inputs for each (SplitMix64, so a failure reproduces from the
//! printed seed). The `decode` target's corpus runs in `tests/decoder.rs`.

use bourse_fix::codec::Message;
use bourse_fix::fuzzing::{session, store_file};
use bourse_fix::store::Store;
use bourse_testkit::SplitMix64 as Rng;

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    bourse_testkit::corpus(env!("CARGO_MANIFEST_DIR"), target, 10)
}

#[test]
fn the_session_corpus_runs_without_panicking() {
    let mut messages = 0;
    for (name, bytes) in corpus("session") {
        eprintln!("{name}");
        messages += session(&bytes);
    }
    assert!(messages >= 50, "the corpus holds sessions: {messages} messages");
}

/// A session's worth of message bodies: a Logon, then messages whose fields are drawn
/// from the ones the session reads, with values right, wrong and extreme, and now and
/// then a byte changed.
fn random_session(rng: &mut Rng) -> Vec<u8> {
    const TYPES: &[&str] = &["D", "D", "F", "G", "V", "AN", "0", "1", "2", "4", "5", "A", "Z", "8"];
    const FIELDS: &[(u32, &[&str])] = &[
        (1, &["1", "2", "x", "4294967296"]),
        (11, &["o1", "o2", "o3", "c1"]),
        (41, &["o1", "o2", "o3", "nope"]),
        (37, &["1001", "1002", "x"]),
        (55, &["ACME/USD", "BETA/USD", "FUT/USD", "NOPE/USD", "1"]),
        (54, &["1", "2", "3"]),
        (38, &["10", "6", "0", "-5", "1.5", "9223372036854775807", "99999999999999999999"]),
        (40, &["1", "2", "3", "4", "9"]),
        (44, &["100", "101", "0", "-1", "100.00", "9223372036854775807"]),
        (99, &["90", "110", "x"]),
        (152, &["5000", "-1"]),
        (59, &["0", "1", "3", "4", "6"]),
        (18, &["6", "6 6", "1"]),
        (111, &["5", "0", "x"]),
        (262, &["md1", "md2"]),
        (263, &["0", "1", "2", "3"]),
        (264, &["0", "1", "18446744073709551615"]),
        (265, &["0", "1"]),
        (267, &["1", "2", "0"]),
        (269, &["0", "1", "2", "7"]),
        (146, &["1", "2"]),
        (7, &["1", "0", "3"]),
        (16, &["0", "2", "999"]),
        (36, &["1", "5", "100"]),
        (123, &["Y", "N"]),
        (43, &["Y"]),
        (112, &["T1"]),
        (710, &["p1", "p2"]),
        (724, &["0", "0", "1", "99", "x"]),
        (581, &["1", "2"]),
        (715, &["20260102", "20261340", "2026"]),
        (60, &["20260102-10:00:00.000"]),
    ];
    let mut lines = vec!["35=A|49=CLIENT|56=BOURSE|34=1|98=0|108=30|554=key|".to_owned()];
    let mut seq = 1u64;
    for _ in 0..rng.below(12) {
        seq = match rng.below(10) {
            0 => seq.saturating_sub(1),
            1 => seq + 3,
            _ => seq + 1,
        };
        let mut line = format!("35={}|49=CLIENT|56=BOURSE|34={seq}|", rng.pick(TYPES));
        for _ in 0..rng.below(12) {
            let (tag, values) = rng.pick(FIELDS);
            line.push_str(&format!("{tag}={}|", rng.pick(values)));
        }
        lines.push(line);
    }
    let mut bytes = lines.join("\n").replace('|', "\x01").into_bytes();
    for _ in 0..rng.below(3) {
        let at = rng.below(bytes.len());
        bytes[at] = rng.next() as u8;
    }
    bytes
}

#[test]
fn seeded_random_sessions_run_without_panicking() {
    for seed in 0..300u64 {
        eprintln!("seed {seed}");
        session(&random_session(&mut Rng(seed)));
    }
}

#[test]
fn the_store_corpus_opens_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in corpus("store") {
        eprintln!("{name}");
        store_file(dir.path(), &bytes);
    }
}

#[test]
fn seeded_damaged_stores_open_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    for seed in 0..40u64 {
        eprintln!("seed {seed}");
        let mut rng = Rng(seed);
        // A store as a session writes it, then damaged: cut, bytes changed, a length
        // field made huge.
        let source = tempfile::tempdir().unwrap();
        let mut store = Store::open(source.path(), "C", "S").unwrap();
        for seq in 1..=rng.below(8) as u64 + 1 {
            let mut report = Message::new("8");
            report.push_display(37, 1000 + rng.below(3)).push(11, format!("o{}", rng.below(3)));
            report.push(150, *rng.pick(&["0", "F", "4", "5", "8"])).push(39, "0").push(55, "ACME/USD");
            report.push_display(32, rng.next() as i64).push_display(31, rng.next() as i64 % 1000);
            let keep = rng.below(3) > 0;
            store.record_sent(seq, keep.then(|| report.encode()).as_deref()).unwrap();
            store.set_next_target(seq + rng.below(2) as u64).unwrap();
        }
        let path = store.path().to_path_buf();
        drop(store);
        let mut bytes = std::fs::read(path).unwrap();
        match rng.below(4) {
            0 => bytes.truncate(rng.below(bytes.len() + 1)),
            1 => {
                for _ in 0..1 + rng.below(4) {
                    let at = rng.below(bytes.len());
                    bytes[at] = rng.next() as u8;
                }
            }
            2 => {
                let at = rng.below(bytes.len().saturating_sub(4) + 1);
                let end = (at + 4).min(bytes.len());
                bytes[at..end].fill(0xff);
            }
            _ => bytes.extend((0..rng.below(40)).map(|_| rng.next() as u8)),
        }
        store_file(dir.path(), &bytes);
    }
}

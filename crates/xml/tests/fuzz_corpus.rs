//! The fuzz targets' corpora (crates/xml/fuzz/corpus/{parse,framing,execute}) on stable:
//! every input parsed and answered with a well-formed reply, read by the framing
//! reader as the spec's grammar says, and checked as execution checks it, without a
//! panic; and seeded random inputs for each (SplitMix64, so a failure reproduces from
//! the printed seed).

use bourse_testkit::SplitMix64 as Rng;
use bourse_xml::fuzzing::{execute_checks, frames, parse_and_answer};

fn corpus(target: &str) -> Vec<(String, Vec<u8>)> {
    bourse_testkit::corpus(env!("CARGO_MANIFEST_DIR"), target, 10)
}

#[test]
fn the_fuzz_corpus_is_answered_without_panicking() {
    for (_, bytes) in corpus("parse") {
        parse_and_answer(&bytes);
    }
}

#[test]
fn seeded_random_bytes_are_answered_without_panicking() {
    for seed in 0..200u64 {
        let mut rng = Rng(seed);
        // Mostly markup characters, so the parser gets past the first byte.
        const ALPHABET: &[u8] = b"<>/=\"' ab&;#x1!-?[]CDATA\n";
        let bytes: Vec<u8> =
            (0..(seed as usize * 7) % 600).map(|_| ALPHABET[(rng.next() % ALPHABET.len() as u64) as usize]).collect();
        eprintln!("seed {seed}");
        parse_and_answer(&bytes);
    }
}

#[test]
fn the_framing_corpus_reads_as_the_grammar_says() {
    let mut requests = 0;
    for (path, bytes) in corpus("framing") {
        eprintln!("{path}");
        requests += frames(&bytes);
    }
    assert!(requests >= 10, "the corpus holds requests: {requests}");
}

#[test]
fn seeded_random_streams_read_as_the_grammar_says() {
    for seed in 0..300u64 {
        let mut rng = Rng(seed);
        // Length lines right and wrong, then bodies of about their length.
        let mut bytes = vec![rng.next() as u8];
        for _ in 0..rng.next() % 6 {
            let length = rng.next() % 12;
            let line = match rng.next() % 8 {
                0 => format!("{length}\r\n"),
                1 => format!("{:0>19}\n", length),
                2 => format!("{:0>20}\n", length),
                3 => format!("{length}\r"),
                4 => rng.pick(&["\n", "x\n", "-1\n", " 1\n", "99999999999999999999\n"]).to_string(),
                _ => format!("{length}\n"),
            };
            bytes.extend_from_slice(line.as_bytes());
            let body = (length + rng.next() % 3).saturating_sub(1);
            bytes.extend((0..body).map(|_| b"<a/>\n\r0123456789"[(rng.next() % 16) as usize]));
        }
        eprintln!("seed {seed}");
        frames(&bytes);
    }
}

#[test]
fn the_execute_corpus_is_checked_without_panicking() {
    let mut passed = 0;
    for (path, bytes) in corpus("execute") {
        eprintln!("{path}");
        passed += execute_checks(&bytes);
    }
    assert!(passed >= 20, "children of the corpus pass their checks: {passed}");
}

#[test]
fn seeded_random_requests_are_checked_without_panicking() {
    const VALUES: &[&str] = &[
        "1",
        "0",
        "-1",
        "007",
        "1.5",
        "0.0001",
        "0.00001",
        "-0.0001",
        "922337203685477.5807",
        "-922337203685477.5808",
        "99999999999999999999",
        "1234567890123456789",
        "SPY",
        "A",
        "BRK.B",
        "",
        " 2 ",
        "1e3",
        "&#45;1",
    ];
    for seed in 0..300u64 {
        let mut rng = Rng(seed);
        let mut body = String::new();
        if rng.next().is_multiple_of(2) {
            body.push_str("<create>");
            for _ in 0..rng.next() % 5 {
                if rng.next().is_multiple_of(2) {
                    body.push_str(&format!("<account id=\"{}\" balance=\"{}\"/>", rng.pick(VALUES), rng.pick(VALUES)));
                } else {
                    body.push_str(&format!("<symbol sym=\"{}\">", rng.pick(VALUES)));
                    for _ in 0..rng.next() % 3 {
                        body.push_str(&format!("<account id=\"{}\">{}</account>", rng.pick(VALUES), rng.pick(VALUES)));
                    }
                    body.push_str("</symbol>");
                }
            }
            body.push_str("</create>");
        } else {
            body.push_str(&format!("<transactions id=\"{}\">", rng.pick(VALUES)));
            for _ in 0..rng.next() % 5 {
                body.push_str(&match rng.next() % 3 {
                    0 => format!("<query id=\"{}\"/>", rng.pick(VALUES)),
                    1 => format!("<cancel id=\"{}\"/>", rng.pick(VALUES)),
                    _ => format!(
                        "<order sym=\"{}\" amount=\"{}\" limit=\"{}\"/>",
                        rng.pick(VALUES),
                        rng.pick(VALUES),
                        rng.pick(VALUES)
                    ),
                });
            }
            body.push_str("</transactions>");
        }
        eprintln!("seed {seed}");
        execute_checks(body.as_bytes());
    }
}

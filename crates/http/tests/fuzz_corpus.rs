//! The `body` fuzz target's corpus (crates/http/fuzz/corpus/body) on stable, and seeded
//! random inputs (SplitMix64, so a failure reproduces from the printed seed): every
//! input read as each route's JSON body, a WebSocket request and a query string, and
//! converted, without a panic.

use bourse_http::fuzzing::request_body;
use bourse_testkit::{corpus, SplitMix64 as Rng};

#[test]
fn the_fuzz_corpus_is_read_without_panicking() {
    let mut bodies = 0;
    for (path, bytes) in corpus(env!("CARGO_MANIFEST_DIR"), "body", 10) {
        eprintln!("{path}");
        bodies += request_body(&bytes);
    }
    assert!(bodies >= 15, "the corpus holds bodies the routes take: {bodies}");
}

/// A JSON object of fields the bodies take, with values of the right and wrong types.
fn random_body(rng: &mut Rng) -> Vec<u8> {
    const KEYS: &[&str] = &[
        "account",
        "symbol",
        "side",
        "type",
        "qty",
        "px",
        "trigger",
        "budget",
        "tif",
        "post_only",
        "display_qty",
        "stp",
        "qty_by",
        "asset",
        "amount",
        "name",
        "decimals",
        "base",
        "quote",
        "tick",
        "lot",
        "px_min",
        "px_max",
        "fee_maker",
        "fee_taker",
        "policy",
        "margin",
        "price",
        "filename",
        "op",
        "channels",
        "symbols",
        "extra",
    ];
    const VALUES: &[&str] = &[
        "1",
        "0",
        "-1",
        "10",
        "4294967296",
        "9223372036854775807",
        "-9223372036854775808",
        "1e400",
        "1.5",
        "true",
        "null",
        "\"ACME/USD\"",
        "\"1\"",
        "\"USD\"",
        "\"ACME\"",
        "\"buy\"",
        "\"sell\"",
        "\"limit\"",
        "\"market\"",
        "\"stop_limit\"",
        "\"stop_market\"",
        "\"gtc\"",
        "\"ioc\"",
        "\"fok\"",
        "\"day\"",
        "\"allow\"",
        "\"cancel_resting\"",
        "\"fifo\"",
        "\"pro_rata\"",
        "\"subscribe\"",
        "\"unsubscribe\"",
        "[\"l2\",\"orders\"]",
        "[\"ACME/USD\",\"NOPE\"]",
        "\"150.00\"",
        "\"\\u0000\"",
        "\"\\ud800\"",
        "[]",
        "{}",
        "{\"initial_bp\":1000,\"maintenance_bp\":500,\"multiplier\":10,\"position_limit\":100,\"mark\":\"operator\",\"insurance\":3}",
        "{\"initial_bp\":1000,\"mark\":\"foo\"}",
    ];
    let mut body = String::from("{");
    for i in 0..rng.next() % 10 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!("\"{}\":{}", rng.pick(KEYS), rng.pick(VALUES)));
    }
    body.push('}');
    let mut bytes = body.into_bytes();
    if rng.next().is_multiple_of(4) {
        let at = (rng.next() % bytes.len() as u64) as usize;
        bytes[at] = rng.next() as u8;
    }
    bytes
}

#[test]
fn seeded_random_bodies_are_read_without_panicking() {
    for seed in 0..300u64 {
        eprintln!("seed {seed}");
        request_body(&random_body(&mut Rng(seed)));
    }
}

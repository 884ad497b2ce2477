//! The fuzz target's corpus (crates/protocol/fuzz/corpus/convert) on stable, plus seeded
//! random inputs: every input is decoded as the message its first byte names and
//! converted without a panic, by `bourse_protocol::fuzzing::decode_and_convert`.

use bourse_protocol::fuzzing::{decode_and_convert, MESSAGES};
use bourse_testkit::{corpus, SplitMix64};

#[test]
fn the_fuzz_corpus_converts_without_panicking() {
    let mut messages = [0u32; MESSAGES as usize];
    for (path, data) in corpus(env!("CARGO_MANIFEST_DIR"), "convert", 10) {
        eprintln!("{path}");
        if let Some(&which) = data.first() {
            messages[usize::from(which % MESSAGES)] += 1;
        }
        decode_and_convert(&data);
    }
    assert!(messages.iter().all(|&n| n > 0), "messages without a corpus file: {messages:?}");
}

#[test]
fn seeded_random_bytes_convert_without_panicking() {
    // SplitMix64, so a failure reproduces from the printed seed.
    for seed in 0..2_000u64 {
        let mut rng = SplitMix64(seed);
        let mut next = || rng.next();
        let len = (next() % 200) as usize;
        let mut bytes: Vec<u8> = (0..len)
            .map(|_| {
                // Mostly small field numbers with valid wire types and short lengths, so
                // prost gets past the first tag and reaches nested messages.
                let z = next();
                match z % 4 {
                    0 => ((((z >> 8) % 18) << 3) | [0, 2][(z >> 16) as usize % 2]) as u8,
                    1 => ((z >> 8) % 16) as u8,
                    _ => (z >> 8) as u8,
                }
            })
            .collect();
        if let Some(first) = bytes.first_mut() {
            *first = (seed % u64::from(MESSAGES)) as u8;
        }
        eprintln!("seed {seed}");
        decode_and_convert(&bytes);
    }
}

#[test]
fn a_command_too_big_for_the_log_is_refused_before_it() {
    use bourse_engine::codec::COMMAND_BYTES_MAX;
    use bourse_protocol::convert::{self, ConvertError};
    use bourse_protocol::proto;
    use bourse_protocol::proto::client_command::Body;

    let name = "X".repeat(COMMAND_BYTES_MAX);
    let command =
        proto::ClientCommand { seq: 1, body: Some(Body::CreateAsset(proto::CreateAsset { name, decimals: 2 })) };
    let error = convert::command_from_proto(bourse_engine::ClientId(1), 0, &command).unwrap_err();
    assert!(matches!(error, ConvertError::ValueOutOfRange { field: "ClientCommand.body", .. }), "{error:?}");
    let args = (0..8).map(|_| "a".repeat(512)).collect();
    let day_trading = proto::DayTradingCommand { command: 1, args, ..Default::default() };
    let command = proto::ClientCommand { seq: 1, body: Some(Body::DayTrading(day_trading)) };
    assert!(convert::command_from_proto(bourse_engine::ClientId(1), 0, &command).is_err());
    // Just below the bound, a name converts (the engine then refuses it as too long).
    let name = "X".repeat(COMMAND_BYTES_MAX - 64);
    let command =
        proto::ClientCommand { seq: 1, body: Some(Body::CreateAsset(proto::CreateAsset { name, decimals: 2 })) };
    assert!(convert::command_from_proto(bourse_engine::ClientId(1), 0, &command).is_ok());
}

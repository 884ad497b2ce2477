//! The decoder never panics and round-trips: the fuzz corpus (crates/fix/fuzz/corpus)
//! on stable, and seeded property tests over random messages, their mutations, and
//! random bytes.

use bourse_fix::codec::{Message, SOH};
use bourse_fix::fuzzing::{decode_stream, round_trip};
use proptest::prelude::*;

#[test]
fn the_fuzz_corpus_decodes_without_panicking() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/fuzz/corpus/decode");
    let mut files = 0;
    let mut messages = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let bytes = std::fs::read(entry.unwrap().path()).unwrap();
        messages += decode_stream(&bytes);
        files += 1;
    }
    assert!(files >= 8, "the corpus has {files} files");
    assert!(messages >= 8, "the corpus holds whole messages: {messages}");
}

/// A message of printable fields with a data field now and then.
fn message() -> impl Strategy<Value = Message> {
    let value = proptest::collection::vec(0x20u8..0x7f, 1..24);
    // Tags the codec treats specially: its own (8, 9, 10), data lengths, header tags
    // allowed once.
    const SPECIAL: &[u32] = &[
        8, 9, 10, 35, 49, 56, 34, 52, 43, 97, 122, 115, 128, 90, 93, 95, 96, 212, 348, 350, 352, 354, 356, 358, 360,
        362, 364, 445, 618, 621,
    ];
    let field = (1u32..2_000, value).prop_filter("not a special tag", |(tag, _)| !SPECIAL.contains(tag));
    let data = proptest::option::of(proptest::collection::vec(any::<u8>(), 1..40));
    ("[A-Za-z0-9]{1,2}", proptest::collection::vec(field, 0..20), data).prop_map(|(msg_type, fields, data)| {
        let mut message = Message::new(&msg_type);
        for (tag, value) in fields {
            message.push(tag, value);
        }
        if let Some(data) = data {
            message.push_display(95, data.len()).push(96, data);
        }
        message
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn prop_messages_round_trip(message in message()) {
        round_trip(&message);
    }

    #[test]
    fn prop_mutated_messages_never_panic(message in message(), cuts in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..6)) {
        let mut bytes = message.encode();
        for (at, byte) in cuts {
            let i = at.index(bytes.len());
            bytes[i] = byte;
        }
        decode_stream(&bytes);
        let mut twice = message.encode();
        twice.extend_from_slice(&bytes);
        twice.extend_from_slice(&message.encode());
        // The first is always read; the last too unless the garbled one's BodyLength now
        // claims more bytes than follow (a reader then waits for them, as FIX framing must).
        prop_assert!(decode_stream(&twice) >= 1, "a whole message before a garbled one is read");
    }

    #[test]
    fn prop_random_bytes_never_panic(bytes in proptest::collection::vec(prop_oneof![Just(SOH), Just(b'='), any::<u8>(), 0x30u8..0x3a], 0..300)) {
        let mut prefixed = b"8=FIX.4.4\x019=".to_vec();
        prefixed.extend_from_slice(&bytes);
        decode_stream(&bytes);
        decode_stream(&prefixed);
    }
}

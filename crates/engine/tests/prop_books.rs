//! Property tests: the fast book and the reference book, driven by the same random
//! command streams, give identical outcomes, events and state hashes; every invariant
//! (including conservation of every asset) holds after every command; and a snapshot
//! restored mid-stream, into either book, continues exactly like the original.
//!
//! Streams come from bytes through `fuzzing::body_from_bytes`, the same generator the
//! fuzz target uses. Proptest keeps failing inputs in `proptest-regressions/`.

use bourse_engine::fuzzing::{body_from_bytes, Bytes, Differential, CLIENTS};
use proptest::prelude::*;

fn drive(d: &mut Differential, bytes: &mut Bytes<'_>, commands_max: usize) {
    for _ in 0..commands_max {
        if bytes.is_empty() {
            return;
        }
        let client = usize::from(bytes.below(CLIENTS as u8));
        let body = body_from_bytes(bytes, &d.fast);
        d.apply_as(client, body);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn prop_books_agree_on_random_streams(data in prop::collection::vec(any::<u8>(), 0..6000)) {
        let mut d = Differential::new();
        drive(&mut d, &mut Bytes::new(&data), usize::MAX);
        d.assert_same_hash();
    }

    #[test]
    fn prop_snapshot_restore_continues_identically(
        data in prop::collection::vec(any::<u8>(), 0..6000),
        split in 0usize..400,
    ) {
        let mut original = Differential::new();
        let mut bytes = Bytes::new(&data);
        drive(&mut original, &mut bytes, split);
        let mut restored = original.restored();
        prop_assert_eq!(restored.fast.state_hash(), original.fast.state_hash());
        prop_assert_eq!(restored.reference.state_hash(), original.fast.state_hash());
        while !bytes.is_empty() {
            let client = usize::from(bytes.below(CLIENTS as u8));
            let body = body_from_bytes(&mut bytes, &original.fast);
            let a = original.apply_as(client, body.clone());
            let b = restored.apply_as(client, body);
            prop_assert_eq!(a, b);
            prop_assert_eq!(original.events(), restored.events());
        }
        prop_assert_eq!(original.fast.state_hash(), restored.fast.state_hash());
    }
}

#[test]
fn seeded_long_streams_agree() {
    for seed in 0..12u64 {
        eprintln!("seeded stream: seed {seed}");
        let data = bourse_engine::fuzzing::seeded_bytes(seed, 60_000);
        let mut d = Differential::new();
        drive(&mut d, &mut Bytes::new(&data), usize::MAX);
        d.assert_same_hash();
    }
}

#[test]
fn fuzz_entry_point_survives_seeded_input() {
    for seed in 100..140u64 {
        eprintln!("fuzz input: seed {seed}");
        bourse_engine::fuzzing::run(&bourse_engine::fuzzing::seeded_bytes(seed, 4_000));
    }
}

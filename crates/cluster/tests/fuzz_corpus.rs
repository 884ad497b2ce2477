//! The fuzz target's corpus (crates/cluster/fuzz/corpus/frames) on stable, plus seeded
//! random inputs: every input is read as a peer's bytes on a Raft transport connection,
//! frame by frame, and each payload decoded, without a panic and with buffers that grow
//! only with the bytes that arrived (`bourse_cluster::fuzzing::read_frames`).

use bourse_cluster::fuzzing::read_frames;
use bourse_cluster::transport::FrameKind;
use bourse_testkit::{corpus, SplitMix64};

#[test]
fn the_fuzz_corpus_reads_without_panicking() {
    for (path, bytes) in corpus(env!("CARGO_MANIFEST_DIR"), "frames", 10) {
        eprintln!("{path}");
        read_frames(&bytes);
    }
}

#[test]
fn seeded_random_frames_read_without_panicking() {
    const KINDS: [FrameKind; 15] = [
        FrameKind::Append,
        FrameKind::Vote,
        FrameKind::PreVote,
        FrameKind::TransferLeader,
        FrameKind::Snapshot,
        FrameKind::StreamAppend,
        FrameKind::StreamEnd,
        FrameKind::AppendReply,
        FrameKind::VoteReply,
        FrameKind::PreVoteReply,
        FrameKind::TransferLeaderReply,
        FrameKind::SnapshotReply,
        FrameKind::StreamReply,
        FrameKind::StreamEndAck,
        FrameKind::Error,
    ];
    // SplitMix64, so a failure reproduces from the printed seed.
    for seed in 0..1_000u64 {
        let mut rng = SplitMix64(seed);
        let mut next = || rng.next();
        // A few frames whose length fields are mostly right (sometimes off by a little,
        // sometimes huge) around payloads of small random bytes.
        let mut bytes = Vec::new();
        for _ in 0..1 + next() % 4 {
            let payload: Vec<u8> = (0..next() % 48).map(|_| (next() % 8) as u8).collect();
            let kind = KINDS[(next() % KINDS.len() as u64) as usize] as u8;
            let len = match next() % 8 {
                0 => next() as u32,
                1 => (payload.len() as u32).saturating_sub(1),
                2 => payload.len() as u32 + 2,
                _ => payload.len() as u32 + 1,
            };
            bytes.extend_from_slice(&len.to_le_bytes());
            bytes.push(if next() % 16 == 0 { next() as u8 } else { kind });
            bytes.extend_from_slice(&payload);
        }
        eprintln!("seed {seed}");
        read_frames(&bytes);
    }
}

//! The fuzz entry point (`crates/cluster/fuzz`, `make fuzz`), also run over its corpus
//! on stable by `tests/fuzz_corpus.rs`: any bytes, as a peer's side of a Raft transport
//! connection, read frame after frame with the server's reader, and each frame's payload
//! decoded as its kind says (requests, replies, the snapshot header, the commands of every
//! batch). Never a panic and never an allocation bigger than the bytes justify: each
//! frame takes exactly the bytes its length field says, its buffers hold at most about
//! twice the bytes that arrived, and (checked by the fuzz target's allocator) no single
//! allocation exceeds [`allocation_bound`] of the input. What decodes is encoded again
//! and reads back the same.

use futures_util::FutureExt;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::transport::{
    encode_frame, encode_snapshot_head, read_frame, read_frame_within, Frame, FrameError, FrameKind,
};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, EntryPayload, SnapshotMeta, SnapshotResponse, TransferLeaderRequest,
    TransferLeaderResponse, TypeConfig, VoteRequest, VoteResponse,
};

/// The snapshot limit the reader is given, as a server's configured `snapshot_bytes_max`
/// would be; a longer snapshot frame is read again without it, as a stream session reads.
pub const SNAPSHOT_MAX: u32 = 1 << 10;

/// The largest buffer reading and decoding `len` input bytes may take: a frame buffer
/// starts at up to 64 KiB and then grows with the bytes that arrive (at most doubling),
/// and serde reserves at most 1 MiB for a sequence, whatever its length prefix claims.
pub fn allocation_bound(len: usize) -> usize {
    (1 << 20) + 2 * len + 64
}

/// Reads `data` as a stream of frames until it ends or a frame is refused (where the
/// server would close the connection); panics on any broken rule.
pub fn read_frames(data: &[u8]) {
    let mut rest = data;
    loop {
        let mut reader = rest;
        let read = match now(read_frame_within(&mut reader, SNAPSHOT_MAX)) {
            Err(FrameError::TooLarge { kind: FrameKind::Snapshot, len, max }) => {
                assert!(len > u64::from(max) && max == SNAPSHOT_MAX);
                // A stream session reads with no snapshot limit.
                reader = rest;
                now(read_frame(&mut reader))
            }
            other => other,
        };
        let frame = match read {
            Ok(Some(frame)) => frame,
            Ok(None) => {
                assert!(rest.is_empty(), "a clean end with {} bytes left", rest.len());
                return;
            }
            Err(error) => {
                assert!(!error.to_string().is_empty());
                return;
            }
        };
        let taken = rest.len() - reader.len();
        let header = if frame.kind == FrameKind::Snapshot { 9 } else { 5 };
        assert_eq!(frame.payload.len() + frame.data.len() + header, taken, "a {:?} frame's bytes", frame.kind);
        let length = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        assert_eq!(length + 4, taken, "a {:?} frame took other bytes than its length says", frame.kind);
        // Buffers grow with the bytes that arrived, never with what a length field claims.
        for (buffer, what) in [(&frame.payload, "payload"), (&frame.data, "data")] {
            assert!(
                buffer.capacity() <= 2 * buffer.len() + 64,
                "a {:?} frame's {what} of {} bytes holds {}",
                frame.kind,
                buffer.len(),
                buffer.capacity()
            );
        }
        check_frame(&frame);
        rest = reader;
    }
}

/// A future on a byte slice never waits.
fn now<T>(future: impl std::future::Future<Output = T>) -> T {
    future.now_or_never().expect("reading a byte slice never waits")
}

/// Decodes the payload as the peer on the other end would.
fn check_frame(frame: &Frame) {
    use FrameKind::*;
    match frame.kind {
        Append | StreamAppend => {
            if let Some(request) = decoded::<AppendEntriesRequest>(frame) {
                for entry in &request.entries {
                    if let EntryPayload::Normal(batch) = &entry.payload {
                        // What the state machine does with a committed batch.
                        for command in batch.iter() {
                            let _ = bourse_engine::codec::decode(command);
                        }
                    }
                }
            }
        }
        Vote | PreVote => {
            decoded::<VoteRequest>(frame);
        }
        TransferLeader => {
            decoded::<TransferLeaderRequest>(frame);
        }
        Snapshot => {
            let Ok((vote, meta)) = frame.decode::<(crate::types::Vote, SnapshotMeta)>() else { return };
            let mut wire = encode_snapshot_head(&vote, &meta, frame.data.len()).expect("a snapshot head encodes");
            wire.extend_from_slice(&frame.data);
            let mut reader = wire.as_slice();
            let again = now(read_frame(&mut reader)).expect("own frame reads").expect("a frame");
            assert!(reader.is_empty());
            assert_eq!(again.data, frame.data, "snapshot bytes differ");
            let (vote_again, meta_again): (crate::types::Vote, SnapshotMeta) =
                again.decode().expect("own head decodes");
            assert_eq!((vote_again, meta_again), (vote, meta), "a snapshot head does not read back");
        }
        StreamEnd | StreamEndAck => {
            decoded::<()>(frame);
        }
        AppendReply => {
            decoded::<Result<AppendEntriesResponse, String>>(frame);
        }
        VoteReply | PreVoteReply => {
            decoded::<Result<VoteResponse, String>>(frame);
        }
        TransferLeaderReply => {
            decoded::<Result<TransferLeaderResponse, String>>(frame);
        }
        SnapshotReply => {
            decoded::<Result<SnapshotResponse, String>>(frame);
        }
        StreamReply => {
            decoded::<Result<openraft::raft::StreamAppendResult<TypeConfig>, String>>(frame);
        }
        Error => {
            decoded::<String>(frame);
        }
    }
}

/// The payload as a `T`, if it is one; then encoded again as a frame of the same kind,
/// it reads back to the same encoding (openraft's messages do not all compare).
fn decoded<T: Serialize + DeserializeOwned>(frame: &Frame) -> Option<T> {
    let value: T = match frame.decode() {
        Ok(value) => value,
        Err(error) => {
            assert!(matches!(error, FrameError::Codec(_)), "{error:?}");
            return None;
        }
    };
    let wire = encode_frame(frame.kind, &value).expect("a decoded value encodes");
    let mut reader = wire.as_slice();
    let again = now(read_frame(&mut reader)).expect("own frame reads").expect("a frame");
    assert!(reader.is_empty() && again.kind == frame.kind);
    let value_again: T = again.decode().expect("own frame decodes");
    let wire_again = encode_frame(frame.kind, &value_again).expect("encodes");
    assert_eq!(wire_again, wire, "a {:?} payload does not read back", frame.kind);
    Some(value)
}

//! The Raft type configuration.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A member's id in the cluster: unique, never reused after removal.
pub type NodeId = u64;

/// A batch of client commands as the leader proposed them: each is one engine
/// [`bourse_engine::command::Command`] in its postcard encoding, already carrying the
/// leader's timestamp. One Raft entry carries a batch, so the log's per-entry cost is
/// paid once per batch.
///
/// The commands lie back to back in one buffer, each as a little-endian `u32` length and
/// its bytes: one allocation per batch, and one byte string (copied, not walked byte by
/// byte) when the batch is encoded for the log or the network.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    #[serde(with = "serde_bytes")]
    bytes: Vec<u8>,
    len: u32,
}

impl Batch {
    pub fn with_capacity(bytes: usize) -> Batch {
        Batch { bytes: Vec::with_capacity(bytes), len: 0 }
    }

    /// A batch of these commands' bytes.
    pub fn from_commands<B: AsRef<[u8]>>(commands: impl IntoIterator<Item = B>) -> Batch {
        let mut batch = Batch::default();
        for command in commands {
            batch.push(command.as_ref());
        }
        batch
    }

    /// Appends one command's bytes.
    pub fn push(&mut self, command: &[u8]) {
        self.push_with(|buffer| buffer.extend_from_slice(command));
    }

    /// Appends one command that `encode` writes at the end of the buffer (so it is
    /// encoded in place, without a buffer of its own).
    pub fn push_with(&mut self, encode: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(&[0; 4]);
        encode(&mut self.bytes);
        let written = (self.bytes.len() - start - 4) as u32;
        self.bytes[start..start + 4].copy_from_slice(&written.to_le_bytes());
        self.len += 1;
    }

    /// Commands in the batch.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes of all commands with their length prefixes.
    pub fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// The commands' bytes in order. A batch that does not frame up (a length running
    /// past the end: only a corrupt or foreign batch) yields its unframed rest as a last
    /// item, which then fails to decode as a command.
    pub fn iter(&self) -> BatchIter<'_> {
        BatchIter { rest: &self.bytes }
    }
}

/// The commands of a [`Batch`], in order.
pub struct BatchIter<'a> {
    rest: &'a [u8],
}

impl<'a> Iterator for BatchIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.rest.is_empty() {
            return None;
        }
        let Some((len, body)) = self.rest.split_first_chunk::<4>() else {
            return Some(std::mem::take(&mut self.rest));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > body.len() {
            return Some(std::mem::take(&mut self.rest));
        }
        let (command, rest) = body.split_at(len);
        self.rest = rest;
        Some(command)
    }
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch of {} commands", self.len)
    }
}

/// Where a member listens: its client API (gRPC) and its Raft transport.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Peer {
    pub api: String,
    pub raft: String,
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "api={} raft={}", self.api, self.raft)
    }
}

/// What applying an entry returns to the proposer: how many commands it held. Clients
/// get their outcomes through the node's session routing, not through this value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Applied {
    pub commands: u32,
}

openraft::declare_raft_types!(
    /// Bourse's Raft types: entries carry command batches, members are [`Peer`]s.
    pub TypeConfig:
        D = Batch,
        R = Applied,
        Node = Peer,
        AsyncRuntime = crate::runtime::Runtime,
);

/// The snapshot bytes moved between state machine, store and network.
pub type SnapshotData = std::io::Cursor<Vec<u8>>;

pub type Raft<SM> = openraft::Raft<TypeConfig, SM>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Vote = <TypeConfig as openraft::RaftTypeConfig>::Vote;
pub type Entry = <TypeConfig as openraft::RaftTypeConfig>::Entry;
pub type EntryPayload = openraft::alias::EntryPayloadOf<TypeConfig>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;
pub type Snapshot = openraft::alias::SnapshotOf<TypeConfig, SnapshotData>;
pub type LogState = openraft::storage::LogState<TypeConfig>;
pub type IoFlushed = openraft::storage::IOFlushed<TypeConfig>;
pub type RaftMetrics = openraft::RaftMetrics<TypeConfig>;
pub type RpcError = openraft::errors::RPCError<TypeConfig>;
pub type RaftError<E = openraft::errors::Infallible> = openraft::errors::RaftError<TypeConfig, E>;
pub type StreamingError = openraft::errors::StreamingError<TypeConfig>;
pub type VoteRequest = openraft::raft::VoteRequest<TypeConfig>;
pub type VoteResponse = openraft::raft::VoteResponse<TypeConfig>;
pub type AppendEntriesRequest = openraft::raft::AppendEntriesRequest<TypeConfig>;
pub type AppendEntriesResponse = openraft::raft::AppendEntriesResponse<TypeConfig>;
pub type SnapshotResponse = openraft::raft::SnapshotResponse<TypeConfig>;
pub type TransferLeaderRequest = openraft::raft::TransferLeaderRequest<TypeConfig>;
pub type TransferLeaderResponse = openraft::raft::TransferLeaderResponse<TypeConfig>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_batch_gives_back_its_commands_in_order_and_round_trips_as_one_byte_string() {
        let mut batch = Batch::from_commands([b"one".as_slice(), b"", b"three"]);
        batch.push_with(|buffer| buffer.extend_from_slice(&[7; 300]));
        assert_eq!(batch.len(), 4);
        let commands: Vec<&[u8]> = batch.iter().collect();
        assert_eq!(commands, [b"one".as_slice(), b"", b"three", &[7; 300]]);
        let encoded = postcard::to_allocvec(&batch).unwrap();
        // One length prefix and the bytes as they are, not one varint per byte (300
        // bytes of 7 would each take one byte anyway; 0xff bytes would take two).
        assert!(encoded.len() <= batch.bytes_len() + 8, "{} > {}", encoded.len(), batch.bytes_len() + 8);
        let back: Batch = postcard::from_bytes(&encoded).unwrap();
        assert_eq!(back, batch);
    }

    #[test]
    fn a_batch_that_does_not_frame_up_yields_its_rest_once() {
        let mut batch = Batch::from_commands([b"ok".as_slice()]);
        batch.bytes.extend_from_slice(&[200, 0, 0, 0, 1, 2]);
        let items: Vec<&[u8]> = batch.iter().collect();
        assert_eq!(items, [b"ok".as_slice(), &[200, 0, 0, 0, 1, 2]]);
        batch.bytes.truncate(batch.bytes.len() - 4);
        let items: Vec<&[u8]> = batch.iter().collect();
        assert_eq!(items, [b"ok".as_slice(), &[200, 0]]);
    }
}

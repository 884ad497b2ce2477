//! The Raft type configuration.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A member's id in the cluster: unique, never reused after removal.
pub type NodeId = u64;

/// A batch of client commands as the leader proposed them: each item is one engine
/// [`bourse_engine::command::Command`] in its postcard encoding
/// ([`bourse_engine::codec::encode`]), already carrying the leader's timestamp. One Raft
/// entry carries a batch, so the log's per-entry cost is paid once per batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Batch {
    pub commands: Vec<Vec<u8>>,
}

impl fmt::Display for Batch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "batch of {} commands", self.commands.len())
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

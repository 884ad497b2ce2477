//! The engine as openraft's state machine.
//!
//! The engine itself lives on the node's core thread (one owner, no lock on the hot
//! path); this state machine is the Raft-facing half. It hands committed entries to the
//! core in order through a [`Machine`] and waits until they are applied, so what it
//! reports as applied is what the engine holds. It remembers the last applied log id and
//! membership, which openraft needs, and keeps snapshots on disk ([`SnapshotStore`]).
//!
//! Invariants:
//! - entries reach the machine exactly in log order, each once per process lifetime
//!   (openraft re-applies from the last snapshot after a restart, and the engine starts
//!   from that snapshot, so the engine sees every entry once);
//! - a snapshot's bytes are taken by the core between two batches, at exactly the
//!   `last_log_id` in its meta: [`StateMachine::apply`] and the snapshot builder
//!   serialize on one lock;
//! - an installed snapshot is on disk before the engine is replaced.

use std::io;
use std::sync::Arc;

use futures_util::{Stream, TryStreamExt};
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::{EntryPayload, RaftSnapshotBuilder};
use tokio::sync::{oneshot, Mutex};

use crate::snapshot_store::SnapshotStore;
use crate::types::{Applied, Batch, LogId, Snapshot, SnapshotData, SnapshotMeta, StoredMembership, TypeConfig};

/// One committed entry for the engine: its position, and its commands (none for the
/// blank entry a new leader writes and for membership changes).
#[derive(Debug)]
pub struct Committed {
    pub index: u64,
    pub term: u64,
    pub batch: Option<Batch>,
}

/// What the state machine asks of the engine's owner.
pub enum MachineRequest {
    /// Apply these entries in order; answer `done` when the engine holds them.
    Apply { entries: Vec<Committed>, done: oneshot::Sender<()> },
    /// The engine's snapshot bytes, as of the last applied entry.
    Snapshot { reply: oneshot::Sender<Vec<u8>> },
    /// Replace the engine with this snapshot, taken at `index`.
    Install { index: u64, bytes: Vec<u8>, reply: oneshot::Sender<Result<(), String>> },
}

/// The owner of the engine, as the state machine sees it.
pub trait Machine: Clone + Send + Sync + 'static {
    /// Queues a request; false when the owner is gone (the node is stopping).
    fn submit(&self, request: MachineRequest) -> impl std::future::Future<Output = bool> + Send;
}

struct Inner {
    last_applied: Option<LogId>,
    membership: StoredMembership,
    /// The meta of the newest snapshot on disk.
    current: Option<SnapshotMeta>,
}

/// The Raft state machine: see the module documentation.
pub struct StateMachine<M: Machine> {
    inner: Arc<Mutex<Inner>>,
    machine: M,
    snapshots: SnapshotStore,
}

impl<M: Machine> Clone for StateMachine<M> {
    fn clone(&self) -> Self {
        StateMachine {
            inner: Arc::clone(&self.inner),
            machine: self.machine.clone(),
            snapshots: self.snapshots.clone(),
        }
    }
}

/// What start-up found on disk: the snapshot the engine must start from, if any.
pub struct Restored {
    pub meta: Option<SnapshotMeta>,
    pub engine_bytes: Option<Vec<u8>>,
}

fn gone() -> io::Error {
    io::Error::other("the engine's core thread is gone")
}

impl<M: Machine> StateMachine<M> {
    /// Opens the snapshot directory. The caller starts its engine from
    /// [`Restored::engine_bytes`] (or empty) before handing the machine to Raft.
    pub fn open(snapshots: SnapshotStore, machine: M) -> io::Result<(StateMachine<M>, Restored)> {
        let latest = snapshots.latest()?;
        let (meta, engine_bytes) = match latest {
            Some((meta, bytes)) => (Some(meta), Some(bytes)),
            None => (None, None),
        };
        let inner = Inner {
            last_applied: meta.as_ref().and_then(|m| m.last_log_id),
            membership: meta.as_ref().map(|m| m.last_membership.clone()).unwrap_or_default(),
            current: meta.clone(),
        };
        let sm = StateMachine { inner: Arc::new(Mutex::new(inner)), machine, snapshots };
        Ok((sm, Restored { meta, engine_bytes }))
    }
}

impl<M: Machine> RaftSnapshotBuilder<TypeConfig> for StateMachine<M> {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let (meta, bytes) = {
            // Hold the lock while the core copies the engine, so no apply slips between
            // the bytes and the log id they are labelled with.
            let inner = self.inner.lock().await;
            let (reply, answer) = oneshot::channel();
            if !self.machine.submit(MachineRequest::Snapshot { reply }).await {
                return Err(gone());
            }
            let bytes = answer.await.map_err(|_| gone())?;
            let meta = SnapshotMeta { last_log_id: inner.last_applied, last_membership: inner.membership.clone() };
            (meta, bytes)
        };
        let (meta, bytes) = self.snapshots.save_async(meta, bytes).await?;
        tracing::info!(index = ?meta.last_log_id.as_ref().map(|id| id.index), bytes = bytes.len(), "snapshot built");
        self.inner.lock().await.current = Some(meta.clone());
        Ok(Snapshot { meta, snapshot: std::io::Cursor::new(bytes) })
    }
}

impl<M: Machine> RaftStateMachine<TypeConfig> for StateMachine<M> {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.inner.lock().await;
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + openraft::OptionalSend,
    {
        let mut inner = self.inner.lock().await;
        let mut committed = Vec::new();
        let mut responders = Vec::new();
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id;
            let batch = match entry.payload {
                EntryPayload::Blank => None,
                EntryPayload::Normal(batch) => Some(batch),
                EntryPayload::Membership(membership) => {
                    inner.membership = StoredMembership::new(Some(log_id), membership);
                    None
                }
            };
            let commands = batch.as_ref().map_or(0, |b| b.len() as u32);
            committed.push(Committed { index: log_id.index, term: log_id.leader_id.term, batch });
            responders.push((responder, commands));
            inner.last_applied = Some(log_id);
        }
        if committed.is_empty() {
            return Ok(());
        }
        let (done, applied) = oneshot::channel();
        if !self.machine.submit(MachineRequest::Apply { entries: committed, done }).await {
            return Err(gone());
        }
        applied.await.map_err(|_| gone())?;
        for (responder, commands) in responders {
            if let Some(responder) = responder {
                responder.send(Applied { commands });
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let bytes = snapshot.into_inner();
        let (saved_meta, bytes) = self.snapshots.save_async(meta.clone(), bytes).await?;
        let mut inner = self.inner.lock().await;
        let index = saved_meta.last_log_id.as_ref().map_or(0, |id| id.index);
        let (reply, answer) = oneshot::channel();
        if !self.machine.submit(MachineRequest::Install { index, bytes, reply }).await {
            return Err(gone());
        }
        answer.await.map_err(|_| gone())?.map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        inner.last_applied = saved_meta.last_log_id;
        inner.membership = saved_meta.last_membership.clone();
        inner.current = Some(saved_meta);
        tracing::info!(index, "snapshot installed");
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let latest = self.snapshots.latest_async().await?;
        Ok(latest.map(|(meta, bytes)| Snapshot { meta, snapshot: std::io::Cursor::new(bytes) }))
    }
}

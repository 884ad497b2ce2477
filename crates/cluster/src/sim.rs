//! Shells for the deterministic simulator (`crates/simulator`, `bourse sim`): openraft's
//! network over a simulated fabric and its log storage over a simulated disk, so that a
//! whole cluster runs on one thread in virtual time.
//!
//! Production uses [`crate::network`] (TCP frames) and [`crate::log_store`] (the journal,
//! a writer thread, `fdatasync`); everything above them — openraft with the member's
//! configuration ([`crate::member`]), the state machine ([`crate::state_machine`]) and
//! its snapshots ([`SnapshotStore::memory`]), the engine behind it — is the same code.
//! The shells keep the contracts of the real ones:
//!
//! - **Network.** A request and its reply are postcard-encoded as on the wire and each
//!   meets its own [`Fate`]: delivered after a delay (so concurrent messages reorder),
//!   delivered twice, lost (the caller waits out its RPC deadline), or unreachable (the
//!   target is down or cut off: a refused connection, reported after a delay). A reply
//!   never outlives its request's deadline, as on a connection that is dropped when its
//!   caller gives up.
//! - **Disk.** Every write (append, vote, truncate, purge, committed) is queued in the
//!   order openraft issues it and made durable by one writer per process, a run of queued
//!   writes at a time (group commit), after the latency the fabric gives it. No append is
//!   acknowledged and no vote returns before its write is durable. A failed `fsync` fails
//!   that write and every later one (the process must restart, as the real store
//!   demands). A crash ([`SimDisk::crash`]) keeps what was durable and, of the run being
//!   written, a prefix the simulator chooses (a torn write: the journal cuts a torn
//!   record, so a prefix of records is what survives); everything queued after it is
//!   lost.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::future::Future;
use std::io;
use std::ops::RangeBounds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use openraft::errors::{ReplicationClosed, Timeout, Unreachable};
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory};
use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{EntryPayload, OptionalSend};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::member::{raft_config, MemberConfig, MemberError};
use crate::state_machine::{Machine, StateMachine};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, Entry, IoFlushed, LogId, LogState, NodeId, Peer, Raft, RpcError,
    Snapshot, SnapshotMeta, SnapshotResponse, StreamingError, TypeConfig, Vote, VoteRequest, VoteResponse,
};

/// What becomes of one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// The target is down or cut off: the sender learns so after `after`.
    Unreachable { after: Duration },
    /// Lost on the way: the sender waits for a reply until its deadline.
    Lost,
    /// Delivered after `delay`; with `copy`, a second copy is delivered after that.
    Delivered { delay: Duration, copy: Option<Duration> },
}

/// The simulator's side: the fate of every message and disk write. Called on the one
/// simulation thread, in an order the seed decides.
pub trait Fabric: Send + Sync + 'static {
    /// A message of `bytes` from `from` to `to`.
    fn fate(&self, from: NodeId, to: NodeId, bytes: usize) -> Fate;
    /// A write of `bytes` to `node`'s disk: how long until it is durable, or that its
    /// `fsync` fails.
    fn disk_write(&self, node: NodeId, bytes: usize) -> DiskWrite;

    /// `node` appended log entries, named by (index, term), to its log (not yet
    /// durable): the first to append an entry is the leader that proposed it, at the
    /// instant it did. For the simulator's checks; nothing by default.
    fn appended(&self, node: NodeId, entries: &[(u64, u64)]) {
        let _ = (node, entries);
    }
}

/// What becomes of one disk write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskWrite {
    /// Durable after this long.
    After(Duration),
    /// Its `fsync` fails.
    Fails,
}

/// The members that are up, by id: where the network delivers.
pub type Rafts<M> = Arc<Mutex<BTreeMap<NodeId, Raft<StateMachine<M>>>>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The simulator's shells for one member process ([`crate::member::Member::start_simulated`]).
pub struct SimShells<M: Machine> {
    /// The node's disk, which outlives the process.
    pub disk: SimDisk,
    /// The fate of every message and disk write.
    pub fabric: Arc<dyn Fabric>,
    /// Where the network delivers: the members up now.
    pub rafts: Rafts<M>,
}

/// openraft with the member's configuration on the simulated network and log storage;
/// and the flag that, once cleared, keeps the process from sending anything more.
pub(crate) async fn raft<M: Machine>(
    config: &MemberConfig,
    shells: SimShells<M>,
    state_machine: StateMachine<M>,
) -> Result<(Raft<StateMachine<M>>, Arc<AtomicBool>), MemberError> {
    let SimShells { disk, fabric, rafts } = shells;
    let log = SimLog::open(config.id, &disk, Arc::clone(&fabric));
    let alive = Arc::new(AtomicBool::new(true));
    let network = SimNetwork { id: config.id, fabric, rafts, alive: Arc::clone(&alive) };
    let raft = openraft::Raft::new(config.id, raft_config(config)?, network, log, state_machine)
        .await
        .map_err(|e| MemberError::Raft(e.to_string()))?;
    Ok((raft, alive))
}

/// Makes a started member reachable by the others.
pub(crate) fn register<M: Machine>(rafts: &Rafts<M>, id: NodeId, raft: Raft<StateMachine<M>>) {
    lock(rafts).insert(id, raft);
}

// ---------------------------------------------------------------------------------------
// Network

struct SimNetwork<M: Machine> {
    id: NodeId,
    fabric: Arc<dyn Fabric>,
    rafts: Rafts<M>,
    alive: Arc<AtomicBool>,
}

impl<M: Machine> RaftNetworkFactory<TypeConfig> for SimNetwork<M> {
    type Network = SimPeer<M>;

    async fn new_client(&mut self, target: NodeId, _node: &Peer) -> SimPeer<M> {
        SimPeer {
            from: self.id,
            to: target,
            fabric: Arc::clone(&self.fabric),
            rafts: Arc::clone(&self.rafts),
            alive: Arc::clone(&self.alive),
        }
    }
}

struct SimPeer<M: Machine> {
    from: NodeId,
    to: NodeId,
    fabric: Arc<dyn Fabric>,
    rafts: Rafts<M>,
    alive: Arc<AtomicBool>,
}

enum Fail {
    Unreachable(String),
    Timeout,
}

impl<M: Machine> SimPeer<M> {
    fn target(&self) -> Option<Raft<StateMachine<M>>> {
        lock(&self.rafts).get(&self.to).cloned()
    }

    /// One request and its reply through the fabric, within `ttl`.
    async fn call<Q, A, H, F>(&self, request: &Q, ttl: Duration, handle: H) -> Result<A, Fail>
    where
        Q: Serialize + DeserializeOwned + Send + 'static,
        A: Serialize + DeserializeOwned,
        H: Fn(Raft<StateMachine<M>>, Q) -> F + Clone + Send + 'static,
        F: Future<Output = Result<A, String>> + Send + 'static,
    {
        if !self.alive.load(Ordering::Acquire) {
            // A stopped process sends nothing; what it sent before still arrives.
            return std::future::pending().await;
        }
        let bytes = postcard::to_allocvec(request).expect("a Raft message encodes");
        let exchange = async {
            let delay = match self.fabric.fate(self.from, self.to, bytes.len()) {
                Fate::Unreachable { after } => {
                    tokio::time::sleep(after).await;
                    return Err(Fail::Unreachable(format!("node {} is unreachable", self.to)));
                }
                Fate::Lost => std::future::pending().await,
                Fate::Delivered { delay, copy } => {
                    if let Some(copy) = copy {
                        // The copy's reply goes nowhere: a connection reads one reply.
                        let (rafts, to, bytes, handle) =
                            (Arc::clone(&self.rafts), self.to, bytes.clone(), handle.clone());
                        tokio::spawn(async move {
                            tokio::time::sleep(delay + copy).await;
                            let target = lock(&rafts).get(&to).cloned();
                            if let Some(raft) = target {
                                let request: Q = postcard::from_bytes(&bytes).expect("a Raft message decodes");
                                let _ = handle(raft, request).await;
                            }
                        });
                    }
                    delay
                }
            };
            tokio::time::sleep(delay).await;
            let Some(raft) = self.target() else {
                return Err(Fail::Unreachable(format!("node {} went down", self.to)));
            };
            let request: Q = postcard::from_bytes(&bytes).expect("a Raft message decodes");
            let reply = handle(raft, request).await.map_err(Fail::Unreachable)?;
            let reply = postcard::to_allocvec(&reply).expect("a Raft reply encodes");
            match self.fabric.fate(self.to, self.from, reply.len()) {
                Fate::Delivered { delay, .. } => tokio::time::sleep(delay).await,
                Fate::Lost => std::future::pending().await,
                Fate::Unreachable { after } => {
                    tokio::time::sleep(after).await;
                    return Err(Fail::Unreachable(format!("the connection to node {} broke", self.to)));
                }
            }
            Ok(postcard::from_bytes(&reply).expect("a Raft reply decodes"))
        };
        tokio::time::timeout(ttl, exchange).await.unwrap_or(Err(Fail::Timeout))
    }

    fn rpc_error(&self, fail: Fail, action: RPCTypes, timeout: Duration) -> RpcError {
        match fail {
            Fail::Unreachable(why) => RpcError::Unreachable(Unreachable::from_string(why)),
            Fail::Timeout => RpcError::Timeout(Timeout { action, id: self.from, target: self.to, timeout }),
        }
    }
}

impl<M: Machine> RaftNetworkV2<TypeConfig> for SimPeer<M> {
    type SnapshotData = crate::types::SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let ttl = option.hard_ttl();
        let handle =
            |raft: Raft<StateMachine<M>>, rpc| async move { raft.append_entries(rpc).await.map_err(|e| e.to_string()) };
        self.call(&rpc, ttl, handle).await.map_err(|fail| self.rpc_error(fail, RPCTypes::AppendEntries, ttl))
    }

    async fn vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        let ttl = option.soft_ttl();
        let handle = |raft: Raft<StateMachine<M>>, rpc| async move { raft.vote(rpc).await.map_err(|e| e.to_string()) };
        self.call(&rpc, ttl, handle).await.map_err(|fail| self.rpc_error(fail, RPCTypes::Vote, ttl))
    }

    async fn pre_vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        let ttl = option.soft_ttl();
        let handle =
            |raft: Raft<StateMachine<M>>, rpc| async move { raft.pre_vote(rpc).await.map_err(|e| e.to_string()) };
        self.call(&rpc, ttl, handle).await.map_err(|fail| self.rpc_error(fail, RPCTypes::Vote, ttl))
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError> {
        let ttl = option.hard_ttl();
        let request = (vote, snapshot.meta, snapshot.snapshot.into_inner());
        let handle = |raft: Raft<StateMachine<M>>, (vote, meta, data): (Vote, SnapshotMeta, Vec<u8>)| async move {
            let snapshot = Snapshot { meta, snapshot: std::io::Cursor::new(data) };
            raft.install_full_snapshot(vote, snapshot).await.map_err(|e| e.to_string())
        };
        tokio::select! {
            biased;
            closed = cancel => Err(StreamingError::Closed(closed)),
            result = self.call(&request, ttl, handle) => {
                result.map_err(|fail| self.rpc_error(fail, RPCTypes::InstallSnapshot, ttl).into())
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Disk

/// What a log store holds.
#[derive(Clone, Debug, Default)]
struct Stored {
    vote: Option<Vote>,
    log: BTreeMap<u64, Entry>,
    purged: Option<LogId>,
    committed: Option<LogId>,
}

impl Stored {
    fn last(&self) -> Option<LogId> {
        self.log.values().next_back().map(|entry| entry.log_id).or(self.purged)
    }

    fn apply(&mut self, write: &Op) {
        match write {
            Op::Append(entries) => {
                for entry in entries {
                    self.log.insert(entry.log_id.index, entry.clone());
                }
            }
            Op::Vote(vote) => self.vote = Some(*vote),
            Op::Truncate(keep_end) => {
                self.log.split_off(keep_end);
            }
            Op::Purge(log_id) => {
                self.log = self.log.split_off(&(log_id.index + 1));
                self.purged = Some(*log_id);
            }
            Op::Committed(committed) => self.committed = *committed,
        }
    }
}

/// One write, as the disk sees it.
#[derive(Clone, Debug)]
enum Op {
    Append(Vec<Entry>),
    Vote(Vote),
    Truncate(u64),
    Purge(LogId),
    Committed(Option<LogId>),
}

impl Op {
    fn bytes(&self) -> usize {
        match self {
            Op::Append(entries) => entries
                .iter()
                .map(|e| 32 + if let EntryPayload::Normal(batch) = &e.payload { batch.bytes_len() } else { 0 })
                .sum(),
            _ => 64,
        }
    }
}

/// What a write's submitter waits for.
enum Done {
    Flushed(IoFlushed),
    Replied(oneshot::Sender<io::Result<()>>),
    Nothing,
}

impl Done {
    fn complete(self, result: io::Result<()>) {
        match self {
            Done::Flushed(callback) => callback.io_completed(result),
            Done::Replied(reply) => {
                let _ = reply.send(result);
            }
            Done::Nothing => {}
        }
    }
}

#[derive(Debug, Default)]
struct DiskInner {
    durable: Stored,
    /// The process whose writes land; a crash starts the next, so the old one's
    /// writes still queued are lost.
    incarnation: u64,
    /// The run being written now, in order: a crash keeps a prefix of it.
    in_flight: Vec<Op>,
}

/// A node's disk, which outlives its processes: what is durable survives a crash.
#[derive(Clone, Debug, Default)]
pub struct SimDisk(Arc<Mutex<DiskInner>>);

impl SimDisk {
    /// The process on this disk ends: what was durable stays, and of the run being
    /// written the first `keep(len)` writes (a torn write keeps a prefix); later writes
    /// of that process never land.
    pub fn crash(&self, keep: impl FnOnce(usize) -> usize) {
        let mut inner = lock(&self.0);
        let run = std::mem::take(&mut inner.in_flight);
        let kept = keep(run.len()).min(run.len());
        for op in &run[..kept] {
            inner.durable.apply(op);
        }
        inner.incarnation += 1;
    }
}

/// openraft's log storage on a [`SimDisk`], for one process.
#[derive(Clone)]
struct SimLog {
    node: NodeId,
    fabric: Arc<dyn Fabric>,
    /// What readers see: every write as submitted.
    visible: Arc<Mutex<Stored>>,
    queue: mpsc::UnboundedSender<(Op, Done)>,
    failed: Arc<Mutex<Option<String>>>,
}

impl SimLog {
    fn open(node: NodeId, disk: &SimDisk, fabric: Arc<dyn Fabric>) -> SimLog {
        let (visible, incarnation) = {
            let inner = lock(&disk.0);
            (inner.durable.clone(), inner.incarnation)
        };
        let (queue, writes) = mpsc::unbounded_channel();
        let failed = Arc::new(Mutex::new(None));
        tokio::spawn(write(node, disk.clone(), incarnation, Arc::clone(&fabric), writes, Arc::clone(&failed)));
        SimLog { node, fabric, visible: Arc::new(Mutex::new(visible)), queue, failed }
    }

    fn usable(&self) -> io::Result<()> {
        match &*lock(&self.failed) {
            Some(why) => Err(io::Error::other(why.clone())),
            None => Ok(()),
        }
    }

    fn submit(&self, op: Op, done: Done) -> io::Result<()> {
        self.usable()?;
        lock(&self.visible).apply(&op);
        self.queue.send((op, done)).map_err(|_| io::Error::other("the disk writer stopped"))
    }
}

/// The writer: takes what is queued as one run, waits the disk's latency, makes the run
/// durable unless the process crashed meanwhile, then completes it in order.
async fn write(
    node: NodeId,
    disk: SimDisk,
    incarnation: u64,
    fabric: Arc<dyn Fabric>,
    mut queue: mpsc::UnboundedReceiver<(Op, Done)>,
    failed: Arc<Mutex<Option<String>>>,
) {
    while let Some(first) = queue.recv().await {
        let mut run = vec![first];
        while let Ok(next) = queue.try_recv() {
            run.push(next);
        }
        let bytes = run.iter().map(|(op, _)| op.bytes()).sum();
        let latency = fabric.disk_write(node, bytes);
        {
            let mut inner = lock(&disk.0);
            if inner.incarnation != incarnation {
                return;
            }
            inner.in_flight = run.iter().map(|(op, _)| op.clone()).collect();
        }
        let latency = match latency {
            DiskWrite::After(latency) => latency,
            DiskWrite::Fails => {
                // fsyncgate: the pages may be gone; fail this run and everything after.
                let why = format!("node {node}: fsync failed");
                *lock(&failed) = Some(why.clone());
                lock(&disk.0).in_flight.clear();
                for (_, done) in run {
                    done.complete(Err(io::Error::other(why.clone())));
                }
                queue.close();
                while let Some((_, done)) = queue.recv().await {
                    done.complete(Err(io::Error::other(why.clone())));
                }
                return;
            }
        };
        tokio::time::sleep(latency).await;
        {
            let mut inner = lock(&disk.0);
            if inner.incarnation != incarnation {
                return;
            }
            inner.in_flight.clear();
            for (op, _) in &run {
                inner.durable.apply(op);
            }
        }
        for (_, done) in run {
            done.complete(Ok(()));
        }
    }
}

impl RaftLogReader<TypeConfig> for SimLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.usable()?;
        Ok(lock(&self.visible).log.range(range).map(|(_, entry)| entry.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(lock(&self.visible).vote)
    }
}

impl RaftLogStorage<TypeConfig> for SimLog {
    type LogReader = SimLog;

    async fn get_log_state(&mut self) -> Result<LogState, io::Error> {
        self.usable()?;
        let visible = lock(&self.visible);
        Ok(LogState { last_purged_log_id: visible.purged, last_log_id: visible.last() })
    }

    async fn get_log_reader(&mut self) -> SimLog {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        let (reply, done) = oneshot::channel();
        self.submit(Op::Vote(*vote), Done::Replied(reply))?;
        done.await.map_err(|_| io::Error::other("the disk writer stopped"))?
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.submit(Op::Committed(committed), Done::Nothing)
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(lock(&self.visible).committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IoFlushed) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<Entry> = entries.into_iter().collect();
        let ids: Vec<(u64, u64)> = entries.iter().map(|e| (e.log_id.index, e.log_id.leader_id.term)).collect();
        self.submit(Op::Append(entries), Done::Flushed(callback))?;
        self.fabric.appended(self.node, &ids);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let keep_end = last_log_id.as_ref().map_or(0, |id| id.index + 1);
        self.submit(Op::Truncate(keep_end), Done::Nothing)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.submit(Op::Purge(log_id), Done::Nothing)
    }
}

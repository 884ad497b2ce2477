//! One member of a cluster: openraft wired to the journal-backed log store, the engine
//! state machine and the TCP transport, behind a small API the node uses (propose,
//! leadership, linearizable reads, membership, status). Nothing outside this crate
//! names an openraft type.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use openraft::type_config::async_runtime::WatchReceiver;
use openraft::Instant as _;
use openraft::{ChangeMembers, ReadPolicy, ServerState, SnapshotPolicy};
use tokio::sync::{mpsc, watch};

use crate::log_store::LogStore;
use crate::network::{Network, NetworkConfig};
use crate::state_machine::{Machine, StateMachine};
use crate::types::{Batch, NodeId, Peer, Raft};

/// Everything a member needs to start.
#[derive(Clone, Debug)]
pub struct MemberConfig {
    pub id: NodeId,
    /// Holds `raft-log/` (the log store) and `snapshots/` (state machine snapshots).
    pub dir: PathBuf,
    /// Where the Raft transport listens.
    pub listen: SocketAddr,
    /// How other members and clients reach this one.
    pub advertise: Peer,
    pub bind_ip: Option<IpAddr>,
    /// Members to initialize a new cluster with (empty: join by being added).
    pub bootstrap: Vec<(NodeId, Peer)>,
    pub heartbeat_ms: u64,
    pub election_min_ms: u64,
    pub election_max_ms: u64,
    pub snapshot_every_entries: u64,
    pub log_kept_after_snapshot: u64,
    /// Mutual TLS on the Raft transport, both ways (`None`: plaintext).
    pub tls: Option<crate::tls::MemberTls>,
    /// The largest snapshot this member accepts from its leader, in bytes (at most the
    /// frame's `u32` length field allows); a longer one is refused from its length.
    pub snapshot_bytes_max: u32,
}

/// Why a member could not start or a request failed.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("raft: {0}")]
    Raft(String),
    #[error("not the leader; the leader is {leader:?}")]
    NotLeader { leader: Option<(NodeId, Peer)> },
}

/// A member's view of itself, for `bourse cluster status`.
#[derive(Clone, Debug)]
pub struct MemberStatus {
    pub id: NodeId,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: &'static str,
    pub term: u64,
    pub leader: Option<(NodeId, Peer)>,
    pub last_log_index: u64,
    pub committed: u64,
    pub last_applied: u64,
    pub snapshot: u64,
    /// Members: id, addresses, voter or learner.
    pub members: Vec<(NodeId, Peer, bool)>,
}

/// Leadership as the node needs it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leadership {
    pub is_leader: bool,
    pub term: u64,
    pub leader: Option<(NodeId, Peer)>,
}

/// A running member.
pub struct Member<M: Machine> {
    raft: Raft<StateMachine<M>>,
    /// Reads the log for the history's log stream (the journal's; none simulated).
    log: Option<crate::log_store::LogReader>,
    /// Replication timings of the transport, both sides.
    stats: Arc<crate::transport::TransportStats>,
    id: NodeId,
    leadership: watch::Receiver<Leadership>,
    stop: watch::Sender<bool>,
    /// Simulated: cleared at shutdown, so the stopped process sends nothing more.
    alive: Option<Arc<AtomicBool>>,
    tasks: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// What differs between a member on the machine and one in the simulator.
struct Shells {
    log: Option<crate::log_store::LogReader>,
    stats: Arc<crate::transport::TransportStats>,
    alive: Option<Arc<AtomicBool>>,
    /// The transport's listener, on the machine.
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

fn raft_error(e: impl std::fmt::Display) -> MemberError {
    MemberError::Raft(e.to_string())
}

/// openraft's configuration for a member: the same for a real member and a simulated one.
pub(crate) fn raft_config(config: &MemberConfig) -> Result<Arc<openraft::Config>, MemberError> {
    let raft_config = openraft::Config {
        cluster_name: "bourse".into(),
        heartbeat_interval: config.heartbeat_ms,
        election_timeout_min: config.election_min_ms,
        election_timeout_max: config.election_max_ms,
        enable_pre_vote: Some(true),
        api_batch_linger_ms: 0,
        snapshot_policy: SnapshotPolicy::LogsSinceLast(config.snapshot_every_entries),
        max_in_snapshot_log_to_keep: config.log_kept_after_snapshot,
        install_snapshot_timeout: 10_000,
        // Replicate an entry as soon as the leader's append returns, so the leader's
        // fsync overlaps the followers' (docs/BENCHMARKS.md: 4–24 % more durable
        // commands per second on 3 nodes, measured A/B in one session).
        broadcast_submitted_on_append: Some(true),
        // A leader that restarts runs an election like any node: openraft's default
        // would resume its old term at once, and with entries sent before its own write
        // was durable (above), a restart after a machine crash that lost that write
        // would write a different entry under a (term, index) a follower already holds
        // — two replicas applying different commands at one index. Found by the
        // deterministic simulator (crates/simulator; docs/ARCHITECTURE.md).
        enable_leader_restore: Some(false),
        ..Default::default()
    };
    Ok(Arc::new(raft_config.validate().map_err(raft_error)?))
}

/// Leadership as the node sees it in openraft's metrics.
///
/// A new leader takes commands once an entry of its own term is applied: its blank
/// entry committed by a quorum, so its lease is confirmed and every earlier entry is
/// applied before new ones. A leader cut off from its quorum keeps its role in openraft
/// until it hears a higher term, which an isolated node never does. It counts as leading
/// only while a quorum acknowledged it within `quorum_stale` (two election timeouts: by
/// then the majority side has elected another), so its clients are sent away instead of
/// waiting on it.
pub(crate) fn leadership_of(m: &crate::types::RaftMetrics, quorum_stale: Duration) -> Leadership {
    let own_term_applied = m.last_applied.as_ref().is_some_and(|id| id.leader_id.term == m.current_term);
    let quorum_fresh = m.last_quorum_acked.as_ref().is_some_and(|at| at.elapsed() < quorum_stale);
    let single = m.membership_config.membership().voter_ids().count() == 1;
    let is_leader = m.state == ServerState::Leader && own_term_applied && (quorum_fresh || single);
    let leader = m
        .current_leader
        .filter(|&lid| lid != m.id || is_leader)
        .and_then(|lid| m.membership_config.membership().get_node(&lid).map(|peer| (lid, peer.clone())));
    Leadership { is_leader, term: m.current_term, leader }
}

impl<M: Machine> Member<M> {
    /// Opens the log, starts Raft and the transport, initializes a new cluster when
    /// this is the first bootstrap member and its log is empty, and proposes every
    /// batch that arrives on `proposals`, in order.
    pub async fn start(
        config: MemberConfig,
        state_machine: StateMachine<M>,
        proposals: mpsc::UnboundedReceiver<Batch>,
        on_refused: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Self, MemberError> {
        let raft_config = raft_config(&config)?;
        let log_store = LogStore::open(&config.dir.join("raft-log")).map_err(raft_error)?;
        let log = log_store.reader();
        let client_tls = config.tls.clone();
        let stats = Arc::new(crate::transport::TransportStats::default());
        let network_config = NetworkConfig {
            bind_ip: config.bind_ip,
            tls: client_tls,
            stats: Arc::clone(&stats),
            ..NetworkConfig::default()
        };
        let network = Network::new(config.id, network_config);
        let raft =
            openraft::Raft::new(config.id, raft_config, network, log_store, state_machine).await.map_err(raft_error)?;
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let (stop, stopping) = watch::channel(false);
        let mut transport_stop = stopping.clone();
        let transport_stopping = async move {
            let _ = transport_stop.wait_for(|stop| *stop).await;
        };
        let server_tls = config.tls.clone();
        let transport = tokio::spawn(crate::transport::serve(
            listener,
            raft.clone(),
            server_tls,
            config.snapshot_bytes_max,
            Arc::clone(&stats),
            transport_stopping,
        ));
        let shells = Shells { log: Some(log), stats, alive: None, tasks: vec![transport] };
        Member::run(&config, raft, shells, (stop, stopping), proposals, on_refused).await
    }

    /// Starts a member on the simulator's shells ([`crate::sim`]): its log on `disk`,
    /// its Raft messages through `fabric` to the members registered in `rafts` (where
    /// it registers itself once started). Everything above the shells — openraft with
    /// this configuration, the proposer, leadership, reads — is what [`Member::start`]
    /// runs.
    pub async fn start_simulated(
        config: MemberConfig,
        shells: crate::sim::SimShells<M>,
        state_machine: StateMachine<M>,
        proposals: mpsc::UnboundedReceiver<Batch>,
        on_refused: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Self, MemberError> {
        let rafts = Arc::clone(&shells.rafts);
        let (raft, alive) = crate::sim::raft(&config, shells, state_machine).await?;
        let shells = Shells {
            log: None,
            stats: Arc::new(crate::transport::TransportStats::default()),
            alive: Some(alive),
            tasks: Vec::new(),
        };
        let member = Member::run(&config, raft.clone(), shells, watch::channel(false), proposals, on_refused).await?;
        crate::sim::register(&rafts, config.id, raft);
        Ok(member)
    }

    /// What every member runs above its shells: a new cluster initialized by its first
    /// bootstrap member, the proposer, and the leadership watch.
    async fn run(
        config: &MemberConfig,
        raft: Raft<StateMachine<M>>,
        shells: Shells,
        (stop, stopping): (watch::Sender<bool>, watch::Receiver<bool>),
        mut proposals: mpsc::UnboundedReceiver<Batch>,
        on_refused: impl Fn(usize) + Send + Sync + 'static,
    ) -> Result<Self, MemberError> {
        let Shells { log, stats, alive, mut tasks } = shells;
        if config.bootstrap.first().is_some_and(|(id, _)| *id == config.id) {
            let initialized = raft.is_initialized().await.map_err(raft_error)?;
            if !initialized {
                let members: BTreeMap<NodeId, Peer> = config.bootstrap.iter().cloned().collect();
                tracing::info!(members = members.len(), "initializing a new cluster");
                raft.initialize(members).await.map_err(raft_error)?;
            }
        }

        // Diagnostics (feature `raft-stages`): openraft's per-stage latency of the
        // entries (proposed, received, submitted, persisted, committed, applied) every N
        // seconds in the log.
        #[cfg(feature = "raft-stages")]
        if let Some(secs) = std::env::var("BOURSE_RAFT_STAGES_SECS").ok().and_then(|v| v.parse::<u64>().ok()) {
            let observed = raft.clone();
            let mut stop = stopping.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(secs.max(1))) => {}
                        _ = stop.wait_for(|stop| *stop) => return,
                    }
                    if let Ok(stats) = observed.runtime_stats().await {
                        let stages = stats.log_stage.compute_histograms();
                        tracing::info!("raft entry stages:\n{stages}");
                    }
                }
            }));
        }

        let proposing = raft.clone();
        let on_refused = Arc::new(on_refused);
        tasks.push(tokio::spawn(async move {
            while let Some(batch) = proposals.recv().await {
                // The outcome reaches clients when the entry is applied. A batch Raft
                // refuses never reaches the log; that happens only while leadership
                // moves (a node proposes only while it leads with a confirmed lease), so
                // the node is told and sends its clients to resend where the leader is
                // (exactly-once makes that safe even if the batch did reach the log).
                let commands = batch.len();
                let (responder, outcome) = openraft::impls::ProgressResponder::complete_only();
                if let Err(error) = proposing.client_write_ff(batch, Some(responder)).await {
                    tracing::error!(%error, "raft stopped; proposals dropped");
                    on_refused(commands);
                    break;
                }
                let on_refused = Arc::clone(&on_refused);
                tokio::spawn(async move {
                    match outcome.await {
                        Ok(Ok(_)) => {}
                        Ok(Err(error)) => {
                            tracing::info!(%error, commands, "proposal refused");
                            on_refused(commands);
                        }
                        Err(_) => on_refused(commands),
                    }
                });
            }
        }));

        let (leadership_tx, leadership) = watch::channel(Leadership::default());
        let mut metrics = raft.metrics();
        let mut stopping_watch = stopping.clone();
        // See `leadership_of` for why two election timeouts.
        let quorum_stale = Duration::from_millis(2 * config.election_max_ms);
        let mut tick = tokio::time::interval(Duration::from_millis(config.heartbeat_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tasks.push(tokio::spawn(async move {
            loop {
                let now = leadership_of(&metrics.borrow_and_update(), quorum_stale);
                leadership_tx.send_if_modified(|old| {
                    if *old != now {
                        *old = now.clone();
                        true
                    } else {
                        false
                    }
                });
                tokio::select! {
                    changed = metrics.changed() => if changed.is_err() { break },
                    _ = tick.tick() => {}
                    _ = stopping_watch.changed() => break,
                }
            }
        }));
        Ok(Member { raft, log, stats, id: config.id, leadership, stop, alive, tasks: std::sync::Mutex::new(tasks) })
    }

    /// A reader of this member's log (the history's log stream reads committed
    /// entries); none on the simulator's disk.
    pub fn log_reader(&self) -> Option<crate::log_store::LogReader> {
        self.log.clone()
    }

    /// Replication timings of the transport (`bourse_raft_*` in the node's metrics).
    pub fn transport_stats(&self) -> Arc<crate::transport::TransportStats> {
        Arc::clone(&self.stats)
    }

    pub fn id(&self) -> NodeId {
        self.id
    }

    /// Leadership now, and a receiver that sees every change.
    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.leadership.clone()
    }

    /// Confirms leadership with a quorum (read index) and waits until the state machine
    /// has applied everything committed before the read: a query answered after this
    /// sees every acknowledged command. Returns the read index.
    pub async fn linearizable_read(&self) -> Result<u64, MemberError> {
        match self.raft.ensure_linearizable(ReadPolicy::ReadIndex).await {
            Ok(read) => Ok(read.index()),
            Err(error) => match error.forward_to_leader() {
                Some(forward) => {
                    Err(MemberError::NotLeader { leader: forward.leader_id.zip(forward.leader_node.clone()) })
                }
                None => Err(raft_error(error)),
            },
        }
    }

    /// Adds a node: first as a learner (it catches up from the log or a snapshot),
    /// then as a voter.
    pub async fn add_node(&self, id: NodeId, peer: Peer) -> Result<(), MemberError> {
        self.raft.add_learner(id, peer, true).await.map_err(|e| self.write_error(e))?;
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(|e| self.write_error(e))?;
        Ok(())
    }

    /// Removes a node from the cluster altogether.
    pub async fn remove_node(&self, id: NodeId) -> Result<(), MemberError> {
        self.raft
            .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
            .map_err(|e| self.write_error(e))?;
        Ok(())
    }

    /// Asks the leader to hand leadership to `to`, which campaigns at once.
    pub async fn transfer_leader(&self, to: NodeId) -> Result<(), MemberError> {
        if !self.raft.is_leader() {
            return Err(MemberError::NotLeader { leader: self.leadership.borrow().leader.clone() });
        }
        if !self.raft.voter_ids().any(|id| id == to) {
            return Err(MemberError::Raft(format!("node {to} is not a voter")));
        }
        self.raft.trigger().transfer_leader(to).await.map_err(raft_error)?;
        // Answer once the cluster has a leader again: `to`, unless an election went
        // another way meanwhile.
        let mut leadership = self.leadership.clone();
        let me = self.id;
        let moved = tokio::time::timeout(LEADER_WAIT_DEFAULT, async move {
            leadership.wait_for(|now| now.leader.as_ref().is_some_and(|(id, _)| *id != me)).await.is_ok()
        });
        match moved.await {
            Ok(true) => Ok(()),
            _ => Err(MemberError::Raft(format!("leadership did not move within {LEADER_WAIT_DEFAULT:?}"))),
        }
    }

    fn write_error(
        &self,
        error: openraft::errors::RaftError<crate::TypeConfig, openraft::errors::ClientWriteError<crate::TypeConfig>>,
    ) -> MemberError {
        match error.forward_to_leader() {
            Some(forward) => MemberError::NotLeader { leader: forward.leader_id.zip(forward.leader_node.clone()) },
            None => raft_error(error),
        }
    }

    pub fn status(&self) -> MemberStatus {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        let members = membership.nodes().map(|(id, peer)| (*id, peer.clone(), voters.contains(id))).collect();
        let role = match m.state {
            ServerState::Leader => "leader",
            ServerState::Follower => "follower",
            ServerState::Candidate => "candidate",
            ServerState::Learner => "learner",
            ServerState::Shutdown => "shutdown",
        };
        let leader = m.current_leader.and_then(|lid| membership.get_node(&lid).map(|p| (lid, p.clone())));
        MemberStatus {
            id: self.id,
            role,
            term: m.current_term,
            leader,
            last_log_index: m.last_log_index.unwrap_or(0),
            committed: m.local_committed.as_ref().map_or(0, |id| id.index),
            last_applied: m.last_applied.as_ref().map_or(0, |id| id.index),
            snapshot: m.snapshot.as_ref().map_or(0, |id| id.index),
            members,
        }
    }

    /// The last applied and the committed log index.
    pub fn progress(&self) -> (u64, u64) {
        let metrics = self.raft.metrics();
        let m = metrics.borrow_watched();
        (m.last_applied.map_or(0, |id| id.index), m.local_committed.map_or(0, |id| id.index))
    }

    /// Whether openraft has stopped (a storage failure stops it: the process must
    /// restart).
    pub fn stopped(&self) -> bool {
        self.raft.metrics().borrow_watched().running_state.is_err()
    }

    /// Stops Raft and the transport.
    pub async fn shutdown(&self) {
        if let Some(alive) = &self.alive {
            alive.store(false, std::sync::atomic::Ordering::Release);
        }
        let _ = self.stop.send(true);
        if let Err(error) = self.raft.shutdown().await {
            tracing::warn!(%error, "raft shutdown");
        }
        for task in self.tasks.lock().expect("tasks lock").drain(..) {
            task.abort();
        }
    }
}

/// A boxed future of a [`Membership`] call.
pub type MemberFuture<'a, T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'a>>;

/// A running member as its node's services use it, whatever machine Raft hands its
/// entries to (the node's core, or the simulator's observer in front of it).
pub trait Membership: Send + Sync + 'static {
    fn id(&self) -> NodeId;
    fn status(&self) -> MemberStatus;
    /// [`Member::linearizable_read`].
    fn linearizable_read(&self) -> MemberFuture<'_, Result<u64, MemberError>>;
    fn add_node(&self, id: NodeId, peer: Peer) -> MemberFuture<'_, Result<(), MemberError>>;
    fn remove_node(&self, id: NodeId) -> MemberFuture<'_, Result<(), MemberError>>;
    fn transfer_leader(&self, to: NodeId) -> MemberFuture<'_, Result<(), MemberError>>;
    fn shutdown(&self) -> MemberFuture<'_, ()>;
}

impl<M: Machine> Membership for Member<M> {
    fn id(&self) -> NodeId {
        Member::id(self)
    }

    fn status(&self) -> MemberStatus {
        Member::status(self)
    }

    fn linearizable_read(&self) -> MemberFuture<'_, Result<u64, MemberError>> {
        Box::pin(Member::linearizable_read(self))
    }

    fn add_node(&self, id: NodeId, peer: Peer) -> MemberFuture<'_, Result<(), MemberError>> {
        Box::pin(Member::add_node(self, id, peer))
    }

    fn remove_node(&self, id: NodeId) -> MemberFuture<'_, Result<(), MemberError>> {
        Box::pin(Member::remove_node(self, id))
    }

    fn transfer_leader(&self, to: NodeId) -> MemberFuture<'_, Result<(), MemberError>> {
        Box::pin(Member::transfer_leader(self, to))
    }

    fn shutdown(&self) -> MemberFuture<'_, ()> {
        Box::pin(Member::shutdown(self))
    }
}

/// How long a caller should wait for a leader before giving up, by default.
pub const LEADER_WAIT_DEFAULT: Duration = Duration::from_secs(10);

//! Starting, recovering, replaying and stopping a node.
//!
//! Start-up: open the journal (which cuts a torn tail with a warning, or refuses a log
//! corrupt in the middle), restore the newest valid snapshot, replay the records after
//! it, then start the group commit, the core thread, the gRPC server and `/metrics`.
//! Shutdown: ask the core to finish its batch, stop the group commit (which makes
//! everything durable and releases the last acks), then stop serving.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_engine::{codec, Engine, Event};
use bourse_journal::{GroupCommit, GroupCommitConfig, Journal, JournalConfig};
use bourse_protocol::proto;
use tokio::sync::{broadcast, mpsc};

use bourse_cluster::member::{Member, MemberConfig, Membership};
use bourse_cluster::sim::SimShells;
use bourse_cluster::snapshot_store::SnapshotStore;
use bourse_cluster::state_machine::{Machine, StateMachine};
use bourse_cluster::Peer;

use crate::config::{NodeConfig, RaftConfig};
use crate::core::{Core, Replica, Request, Sequencer};
use crate::fair::{FairConfig, FairSequencer};
use crate::link::{GatewayLinkService, LocalLink};
use crate::log::{LocalLog, LogService, LogSource};
use crate::metrics::Metrics;
use crate::outbox::{Broadcasts, FeedItem, Pending, Sessions};
use crate::replica::{CoreMachine, Replication};
use crate::service::{
    AdminService, ClusterService, LocalSessions, MarketDataService, OrderEntryService, QueryService, Shared,
};

/// Why a node could not start or stop cleanly.
#[derive(Debug)]
pub enum NodeError {
    Config(String),
    Journal(bourse_journal::Error),
    Snapshot(bourse_engine::SnapshotError),
    /// A logged command that does not decode: the log was written by something else.
    Decode {
        index: u64,
        error: codec::DecodeError,
    },
    Io(std::io::Error),
    Cluster(bourse_cluster::member::MemberError),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Config(e) => write!(f, "configuration: {e}"),
            NodeError::Journal(e) => write!(f, "journal: {e}"),
            NodeError::Snapshot(e) => write!(f, "snapshot: {e}"),
            NodeError::Decode { index, error } => write!(f, "log record {index} does not decode: {error}"),
            NodeError::Io(e) => write!(f, "{e}"),
            NodeError::Cluster(e) => write!(f, "cluster: {e}"),
        }
    }
}

impl std::error::Error for NodeError {}

impl From<bourse_journal::Error> for NodeError {
    fn from(e: bourse_journal::Error) -> Self {
        NodeError::Journal(e)
    }
}

impl From<std::io::Error> for NodeError {
    fn from(e: std::io::Error) -> Self {
        NodeError::Io(e)
    }
}

/// What recovery found and did.
#[derive(Clone, Debug)]
pub struct Recovered {
    /// The index of the last command applied.
    pub index: u64,
    pub snapshot_index: Option<u64>,
    pub entries_replayed: u64,
    pub elapsed: Duration,
    pub state_hash: [u8; 32],
}

/// The journal directory inside a data directory.
pub fn journal_dir(data: &Path) -> PathBuf {
    data.join("journal")
}

/// Opens the journal of `data` and rebuilds the engine from it.
pub fn recover(data: &Path, config: &NodeConfig) -> Result<(Engine, Journal, Recovered), NodeError> {
    let started = Instant::now();
    let journal_config = JournalConfig { segment_bytes_max: config.segment_bytes_max, ..JournalConfig::default() };
    let (journal, recovery) = Journal::open(journal_dir(data), journal_config)?;
    if let Some(cut) = &recovery.tail_cut {
        tracing::warn!(path = %cut.path.display(), offset = cut.offset, bytes = cut.bytes_cut, "cut a torn journal tail");
    }
    let snapshot_index = recovery.snapshot.as_ref().map(|s| s.index);
    let mut engine = match &recovery.snapshot {
        Some(snapshot) => Engine::restore(&snapshot.bytes).map_err(NodeError::Snapshot)?,
        None => Engine::new(config.engine_config()),
    };
    let mut index = snapshot_index.unwrap_or(0);
    let mut events: Vec<Event> = Vec::new();
    let mut replayed = 0u64;
    for entry in recovery.entries {
        let entry = entry?;
        assert_eq!(entry.index, index + 1, "the journal yields consecutive records");
        let command = codec::decode(&entry.payload).map_err(|error| NodeError::Decode { index: entry.index, error })?;
        events.clear();
        engine.apply(&command, &mut events);
        index = entry.index;
        replayed += 1;
    }
    let recovered = Recovered {
        index,
        snapshot_index,
        entries_replayed: replayed,
        elapsed: started.elapsed(),
        state_hash: engine.state_hash(),
    };
    Ok((engine, journal, recovered))
}

/// `config` with the engine's settings as `engine` has them. They are part of its state:
/// a snapshot restores the ones it was taken with, whatever the configuration says now
/// (the log before it was applied under them), so a configuration that differs is
/// overruled, with a warning; what the node then reports (`Query.GetDayTradingConfig`,
/// the engine settings `Log.Follow` hands to history sinks) is what it applies.
fn engine_as_restored(mut config: NodeConfig, engine: &Engine) -> NodeConfig {
    if *engine.config() != config.engine_config() {
        tracing::warn!(
            configured = ?config.engine_config(),
            restored = ?engine.config(),
            "the engine's settings are the snapshot's: a data directory keeps those it was started with"
        );
        config.set_engine_config(*engine.config());
    }
    config
}

/// Rebuilds the engine of a cluster member from its data directory (the member must
/// not be running): the newest state machine snapshot, then the committed log after it,
/// applied as a running member applies it.
pub async fn recover_member(data: &Path, config: &NodeConfig) -> Result<(Engine, Recovered), NodeError> {
    let started = Instant::now();
    let engine = std::cell::RefCell::new(Engine::new(config.engine_config()));
    let snapshot_index = std::cell::Cell::new(None);
    let mut replayed = 0u64;
    let mut events: Vec<Event> = Vec::new();
    let start = |start: &bourse_cluster::replay::ReplayStart| -> Result<(), String> {
        if let Some((index, bytes)) = &start.snapshot {
            *engine.borrow_mut() = Engine::restore(bytes).map_err(|e| format!("snapshot at {index}: {e}"))?;
            snapshot_index.set(Some(*index));
        }
        Ok(())
    };
    let apply = |entry: bourse_cluster::state_machine::Committed| -> Result<(), String> {
        let Some(batch) = entry.batch else { return Ok(()) };
        let mut engine = engine.borrow_mut();
        for bytes in batch.iter() {
            let command = crate::core::committed_command(&engine, bytes)
                .map_err(|e| format!("entry {}: a command does not decode: {e}", entry.index))?;
            events.clear();
            engine.apply(&command, &mut events);
            replayed += 1;
        }
        Ok(())
    };
    let last = bourse_cluster::replay::replay_member(&data.join("raft"), start, apply).await?;
    let engine = engine.into_inner();
    let recovered = Recovered {
        index: last.unwrap_or(0),
        snapshot_index: snapshot_index.get(),
        entries_replayed: replayed,
        elapsed: started.elapsed(),
        state_hash: engine.state_hash(),
    };
    Ok((engine, recovered))
}

/// A running node.
pub struct Node {
    /// The gRPC address it listens on.
    pub addr: SocketAddr,
    pub metrics_addr: Option<SocketAddr>,
    pub recovered: Recovered,
    pub metrics: Arc<Metrics>,
    core_sender: mpsc::Sender<Request>,
    core: CoreRun,
    /// Single node: the journal's writer.
    group: Option<GroupCommit>,
    /// Replicated: the Raft member.
    replication: Option<Arc<Replication>>,
    sessions: Arc<Sessions>,
    shutdown: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    server_stop: tokio::sync::oneshot::Sender<()>,
    log: LocalLog,
    link: LocalLink,
    tls: Option<NodeTls>,
    client_keys: Arc<crate::auth::ClientKeys>,
}

/// A node's mutual TLS: its certificate for the Raft transport and for the gRPC port.
#[derive(Clone)]
struct NodeTls {
    /// The Raft transport's configurations and the reload count that both ports'
    /// connections watch.
    member: bourse_cluster::tls::MemberTls,
    /// The gRPC port's server configuration (the same files, with ALPN h2).
    grpc: Arc<bourse_pki::ReloadableServerConfig>,
}

impl NodeTls {
    fn server(&self) -> bourse_pki::grpc::ServerTls {
        bourse_pki::grpc::ServerTls { config: Arc::clone(&self.grpc), reloads: self.member.reloads() }
    }

    /// Re-reads both configurations, then ends the connections made before (in that
    /// order, so the reconnections meet the new ones).
    fn reload(&self) -> Result<(), bourse_pki::PkiError> {
        self.grpc.reload()?;
        self.member.reload()
    }
}

/// How long a stopping node waits for its connections to take their last replies.
const SHUTDOWN_FLUSH_MAX: Duration = Duration::from_secs(3);

impl Node {
    /// `Log.Follow` without the network, for a history sink in this process.
    pub fn local_log(&self) -> LocalLog {
        self.log.clone()
    }

    /// Re-reads the node's certificate, key, CA and revocation list and ends the open
    /// connections of both its ports, so every member, gateway and client comes back
    /// through a new handshake, which a revoked one no longer passes; and re-reads the
    /// client key file (what `bourse node` does on SIGHUP). False when the node has no
    /// TLS.
    pub fn reload_tls(&self) -> Result<bool, NodeError> {
        self.client_keys.reload().map_err(|e| NodeError::Config(format!("reloading the client keys: {e}")))?;
        let Some(tls) = &self.tls else { return Ok(false) };
        tls.reload().map_err(|e| NodeError::Config(format!("reloading the node's certificates: {e}")))?;
        Ok(true)
    }

    /// `GatewayLink` without the network, for a gateway in this process.
    pub fn local_link(&self) -> LocalLink {
        self.link.clone()
    }

    /// Recovers from `config.data` and starts serving. Must run inside a tokio runtime.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        config.validate().map_err(|e| NodeError::Config(e.0))?;
        if config.clock.is_simulated() {
            return Err(NodeError::Config("a simulated clock runs only in Node::start_simulated".into()));
        }
        std::fs::create_dir_all(&config.data)?;
        if let Some(raft) = config.raft.clone() {
            return Node::start_replicated(config, raft).await;
        }
        let (engine, journal, recovered) = recover(&config.data, &config)?;
        let config = engine_as_restored(config, &engine);
        tracing::info!(
            index = recovered.index,
            snapshot = ?recovered.snapshot_index,
            replayed = recovered.entries_replayed,
            ms = recovered.elapsed.as_millis() as u64,
            "recovered"
        );
        let metrics = Arc::new(Metrics::default());
        let sessions = Arc::new(Sessions::default());
        let (market, _) = broadcast::channel::<proto::MarketDataUpdate>(config.market_data_buffer_max);
        let (feed, _) = broadcast::channel::<Arc<FeedItem>>(config.market_data_buffer_max);
        let pending = Arc::new(Pending::new(
            recovered.index,
            Arc::clone(&sessions),
            market.clone(),
            feed.clone(),
            Arc::clone(&metrics),
        ));
        let release = Arc::clone(&pending);
        let group_config =
            GroupCommitConfig { batch_entries_max: config.batch_commands_max.max(1), ..GroupCommitConfig::default() };
        let group = GroupCommit::start(journal, group_config, move |entries| {
            if let Some(last) = entries.last() {
                release.release_through(last.index);
            }
        })?;
        let (core_sender, core_receiver) = mpsc::channel(config.queue_requests_max);
        let core = Core::new(
            engine,
            recovered.index,
            Sequencer::Journal(group.handle()),
            pending,
            Arc::clone(&metrics),
            Broadcasts { market: market.clone(), feed },
            config.clone(),
        );
        let core =
            CoreRun::Thread(std::thread::Builder::new().name("core".into()).spawn(move || core.run(core_receiver))?);
        let tls = node_tls(&config)?;
        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let shared = Shared::new(
            &config,
            core_sender.clone(),
            &sessions,
            market,
            &metrics,
            None,
            addr.to_string(),
            Some(LogSource::Journal { dir: journal_dir(&config.data), group: group.handle() }),
        )?;
        let client_keys = Arc::clone(&shared.0.client_keys);
        let Serving { shutdown, server, server_stop, metrics_addr, log, link } =
            Serving::start(listener, &config, shared, Some(group.handle()), tls.as_ref().map(NodeTls::server)).await?;
        tracing::info!(%addr, ?metrics_addr, data = %config.data.display(), "serving");
        Ok(Node {
            addr,
            metrics_addr,
            recovered,
            metrics,
            core_sender,
            core,
            group: Some(group),
            replication: None,
            sessions,
            shutdown,
            server,
            server_stop,
            log,
            link,
            tls,
            client_keys,
        })
    }

    /// Starts a member of a replicated cluster: the engine from the newest state
    /// machine snapshot (Raft re-applies the committed log after it), the core in
    /// replicated mode, the Raft member, the leadership watcher and the services.
    async fn start_replicated(config: NodeConfig, raft: RaftConfig) -> Result<Node, NodeError> {
        let dir = config.data.join("raft");
        let store = SnapshotStore::open(dir.join("snapshots"))?;
        let (mut parts, state_machine) = Replicated::start(config, store, |core| core)?;
        let config = parts.config.clone();

        let listener = tokio::net::TcpListener::bind(config.listen).await?;
        let addr = listener.local_addr()?;
        let advertise = Peer {
            api: raft.advertise_api.clone().unwrap_or_else(|| addr.to_string()),
            raft: raft.advertise.clone().unwrap_or_else(|| raft.listen.to_string()),
        };
        let bootstrap = raft
            .members()
            .map_err(|e| NodeError::Config(e.0))?
            .into_iter()
            .map(|(id, api, raft)| (id, Peer { api, raft }))
            .collect();
        let node_tls = node_tls(&config)?;
        let tls = node_tls.as_ref().map(|t| t.member.clone());
        let member_config = MemberConfig {
            id: raft.id,
            dir,
            listen: raft.listen,
            advertise: advertise.clone(),
            bind_ip: raft.bind_ip,
            bootstrap,
            heartbeat_ms: raft.heartbeat_ms,
            election_min_ms: raft.election_min_ms,
            election_max_ms: raft.election_max_ms,
            snapshot_every_entries: raft.snapshot_every_entries,
            log_kept_after_snapshot: raft.log_kept_after_snapshot,
            tls,
            snapshot_bytes_max: u32::try_from(raft.snapshot_bytes_max).unwrap_or(u32::MAX),
        };
        let (proposals, on_refused) = parts.proposals();
        let member =
            Member::start(member_config, state_machine, proposals, on_refused).await.map_err(NodeError::Cluster)?;
        let reader = member.log_reader().expect("a member on the machine reads its journal");
        let _ = parts.metrics.raft_log.set(reader.clone());
        let _ = parts.metrics.raft_transport.set(member.transport_stats());
        let log = LogSource::Raft { reader, snapshots: config.data.join("raft").join("snapshots") };
        let leadership = member.leadership();
        let (core_sender, core, sessions, metrics, recovered) = (
            parts.core_sender.clone(),
            parts.core.take().expect("started"),
            Arc::clone(&parts.sessions),
            Arc::clone(&parts.metrics),
            parts.recovered.clone(),
        );
        let (shared, replication) = parts.serve(Arc::new(member), leadership, advertise, Some(log))?;
        let client_keys = Arc::clone(&shared.0.client_keys);
        let Serving { shutdown, server, server_stop, metrics_addr, log, link } =
            Serving::start(listener, &config, shared, None, node_tls.as_ref().map(NodeTls::server)).await?;
        tracing::info!(%addr, raft = %raft.listen, id = raft.id, data = %config.data.display(), "serving");
        Ok(Node {
            addr,
            metrics_addr,
            recovered,
            metrics,
            core_sender,
            core,
            group: None,
            replication: Some(replication),
            sessions,
            shutdown,
            server,
            server_stop,
            log,
            link,
            tls: node_tls,
            client_keys,
        })
    }

    /// Starts a cluster member in the deterministic simulator (`crates/simulator`): the
    /// same core, sequencer, sessions, links and Raft member as
    /// [`Node::start`], on the simulator's shells — its log on a simulated disk, its
    /// Raft messages through the simulated network, its snapshots in `snapshots`, its
    /// time `config.clock` (which must be simulated: the core and the sequencer then run
    /// as tasks of the current runtime) — and without a listener: clients and gateways
    /// reach it through [`SimulatedNode::local_sessions`] and
    /// [`SimulatedNode::local_link`]. `wrap` puts the simulator's observer between Raft
    /// and the core.
    pub async fn start_simulated<M: Machine>(
        config: NodeConfig,
        member: MemberConfig,
        shells: SimShells<M>,
        snapshots: SnapshotStore,
        wrap: impl FnOnce(CoreMachine) -> M,
    ) -> Result<SimulatedNode, NodeError> {
        config.validate().map_err(|e| NodeError::Config(e.0))?;
        if !config.clock.is_simulated() {
            return Err(NodeError::Config("a simulated node needs a simulated clock (NodeConfig::clock)".into()));
        }
        let (mut parts, state_machine) = Replicated::start(config, snapshots, wrap)?;
        let (proposals, on_refused) = parts.proposals();
        let advertise = member.advertise.clone();
        let member = Arc::new(
            Member::start_simulated(member, shells, state_machine, proposals, on_refused)
                .await
                .map_err(NodeError::Cluster)?,
        );
        let leadership = member.leadership();
        let core = parts.core_sender.clone();
        let Some(CoreRun::Task(task)) = parts.core.take() else {
            unreachable!("a simulated clock runs the core as a task")
        };
        let (metrics, recovered) = (Arc::clone(&parts.metrics), parts.recovered.clone());
        let (shared, replication) =
            parts.serve(Arc::clone(&member) as Arc<dyn Membership>, leadership, advertise, None)?;
        let (shared, shutdown) = shared;
        Ok(SimulatedNode { recovered, metrics, core, task, member, replication, shared, shutdown })
    }

    /// Finishes the current batch, makes everything durable, answers what is owed, and
    /// stops serving: sessions stop being read, their streams end after the last acks,
    /// and connections get up to `SHUTDOWN_FLUSH_MAX` to take them.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        let _ = self.shutdown.send(true);
        if let Some(replication) = self.replication {
            // Raft first: nothing more is applied once the core stops.
            replication.member.shutdown().await;
        }
        let _ = self.core_sender.send(Request::Shutdown).await;
        drop(self.core_sender);
        self.core.join().await;
        if let Some(group) = self.group {
            let journal = tokio::task::spawn_blocking(move || group.shutdown()).await.expect("join task")?;
            tracing::info!(durable = journal.durable_index(), "journal closed");
        }
        self.sessions.end_all();
        let _ = self.server_stop.send(());
        let mut server = self.server;
        if tokio::time::timeout(SHUTDOWN_FLUSH_MAX, &mut server).await.is_err() {
            tracing::warn!("connections still open after the flush window; closing them");
            server.abort();
        }
        Ok(())
    }
}

/// Where the core runs: its own thread, or (under a simulated clock) a task.
enum CoreRun {
    Thread(std::thread::JoinHandle<()>),
    Task(tokio::task::JoinHandle<()>),
}

impl CoreRun {
    fn spawn(
        clock: &bourse_fairness::Clock,
        core: Core,
        requests: mpsc::Receiver<Request>,
    ) -> std::io::Result<CoreRun> {
        if clock.is_simulated() {
            return Ok(CoreRun::Task(tokio::spawn(core.run_task(requests))));
        }
        let thread = std::thread::Builder::new().name("core".into()).spawn(move || core.run(requests))?;
        Ok(CoreRun::Thread(thread))
    }

    /// Waits for the core to stop (it was asked to).
    async fn join(self) {
        match self {
            CoreRun::Thread(thread) => {
                tokio::task::spawn_blocking(move || thread.join())
                    .await
                    .expect("join task")
                    .expect("core thread panicked");
            }
            CoreRun::Task(task) => task.await.expect("core task panicked"),
        }
    }
}

/// What the services share, and the sender of their shutdown signal.
type Serviced = (Shared, tokio::sync::watch::Sender<bool>);

/// A replicated node's parts that are the same on the machine and in the simulator:
/// the core started from the newest snapshot, and what the services will share.
struct Replicated {
    config: NodeConfig,
    recovered: Recovered,
    metrics: Arc<Metrics>,
    sessions: Arc<Sessions>,
    market: broadcast::Sender<proto::MarketDataUpdate>,
    core_sender: mpsc::Sender<Request>,
    /// Taken by the node that holds it.
    core: Option<CoreRun>,
    leader: Arc<AtomicBool>,
    proposals: Option<mpsc::UnboundedReceiver<bourse_cluster::Batch>>,
}

impl Replicated {
    /// Restores the engine from the newest snapshot in `store` and starts the core in
    /// replicated mode; the state machine hands the core what Raft commits, through
    /// `wrap`'s machine.
    fn start<M: Machine>(
        config: NodeConfig,
        store: SnapshotStore,
        wrap: impl FnOnce(CoreMachine) -> M,
    ) -> Result<(Replicated, StateMachine<M>), NodeError> {
        let started = Instant::now();
        let (core_sender, core_receiver) = mpsc::channel(config.queue_requests_max);
        let (state_machine, restored) = StateMachine::open(store, wrap(CoreMachine(core_sender.clone())))?;
        let snapshot_index = restored.meta.as_ref().and_then(|m| m.last_log_id.as_ref()).map(|id| id.index);
        let engine = match &restored.engine_bytes {
            Some(bytes) => Engine::restore(bytes).map_err(NodeError::Snapshot)?,
            None => Engine::new(config.engine_config()),
        };
        let config = engine_as_restored(config, &engine);
        let index = snapshot_index.unwrap_or(0);
        let recovered = Recovered {
            index,
            snapshot_index,
            entries_replayed: 0,
            elapsed: started.elapsed(),
            state_hash: engine.state_hash(),
        };
        tracing::info!(snapshot = ?snapshot_index, "starting a cluster member");
        let metrics = Arc::new(Metrics::default());
        let sessions = Arc::new(Sessions::default());
        let (market, _) = broadcast::channel::<proto::MarketDataUpdate>(config.market_data_buffer_max);
        let (feed, _) = broadcast::channel::<Arc<FeedItem>>(config.market_data_buffer_max);
        // Applied entries are committed, so their outputs go out at once.
        let pending =
            Arc::new(Pending::new(u64::MAX, Arc::clone(&sessions), market.clone(), feed.clone(), Arc::clone(&metrics)));
        let leader = Arc::new(AtomicBool::new(false));
        let (proposer, proposals) = mpsc::unbounded_channel();
        let replica = Replica { proposer, leader: Arc::clone(&leader) };
        let core = Core::new(
            engine,
            index,
            Sequencer::Raft(replica),
            pending,
            Arc::clone(&metrics),
            Broadcasts { market: market.clone(), feed },
            config.clone(),
        );
        let core = CoreRun::spawn(&config.clock, core, core_receiver)?;
        let parts = Replicated {
            config,
            recovered,
            metrics,
            sessions,
            market,
            core_sender,
            core: Some(core),
            leader,
            proposals: Some(proposals),
        };
        Ok((parts, state_machine))
    }

    /// What the member proposes (the core's batches), and what it does with a batch
    /// Raft refuses: leadership is moving, so the clients resend where the leader is.
    fn proposals(
        &mut self,
    ) -> (mpsc::UnboundedReceiver<bourse_cluster::Batch>, impl Fn(usize) + Send + Sync + 'static) {
        let proposals = self.proposals.take().expect("taken once");
        let (core, sessions) = (self.core_sender.clone(), Arc::clone(&self.sessions));
        let on_refused = move |_commands: usize| {
            sessions.kill_all(|| crate::replica::not_leader(None));
            let core = core.clone();
            tokio::spawn(async move { core.send(Request::Deposed).await });
        };
        (proposals, on_refused)
    }

    /// Starts the leadership watcher and the sequencer, and returns what the services
    /// share (with its shutdown signal) and the node's handle on its membership.
    fn serve(
        self,
        member: Arc<dyn Membership>,
        leadership: tokio::sync::watch::Receiver<bourse_cluster::member::Leadership>,
        advertise: Peer,
        log: Option<LogSource>,
    ) -> Result<(Serviced, Arc<Replication>), NodeError> {
        tokio::spawn(crate::replica::watch_leadership(
            leadership.clone(),
            self.leader,
            Arc::clone(&self.sessions),
            self.core_sender.clone(),
        ));
        let replication = Arc::new(Replication { member, leadership, advertise: advertise.clone() });
        let shared = Shared::new(
            &self.config,
            self.core_sender,
            &self.sessions,
            self.market,
            &self.metrics,
            Some(Arc::clone(&replication)),
            advertise.api,
            log,
        )?;
        Ok((shared, replication))
    }
}

/// A cluster member in the deterministic simulator ([`Node::start_simulated`]).
pub struct SimulatedNode {
    pub recovered: Recovered,
    pub metrics: Arc<Metrics>,
    core: mpsc::Sender<Request>,
    task: tokio::task::JoinHandle<()>,
    member: Arc<dyn MemberProgress>,
    replication: Arc<Replication>,
    shared: Shared,
    shutdown: tokio::sync::watch::Sender<bool>,
}

/// What the simulator reads of a member besides what the services use.
trait MemberProgress: Membership {
    fn progress(&self) -> (u64, u64);
    fn stopped(&self) -> bool;
}

impl<M: Machine> MemberProgress for Member<M> {
    fn progress(&self) -> (u64, u64) {
        Member::progress(self)
    }

    fn stopped(&self) -> bool {
        Member::stopped(self)
    }
}

impl SimulatedNode {
    /// `OrderEntry.Session` in process.
    pub fn local_sessions(&self) -> LocalSessions {
        LocalSessions(self.shared.clone())
    }

    /// `GatewayLink` in process.
    pub fn local_link(&self) -> LocalLink {
        LocalLink(self.shared.clone())
    }

    /// Leadership as the services see it.
    pub fn leadership(&self) -> bourse_cluster::member::Leadership {
        self.replication.leadership.borrow().clone()
    }

    /// The last applied and the committed log index.
    pub fn progress(&self) -> (u64, u64) {
        self.member.progress()
    }

    /// Whether Raft stopped (a failed `fsync` stops it: the process must restart).
    pub fn stopped(&self) -> bool {
        self.member.stopped()
    }

    /// Runs `inspect` on the engine as applied so far, with its last applied index,
    /// after everything queued for the core before it; none if the core is gone.
    pub async fn inspect<T: Send + 'static>(
        &self,
        inspect: impl FnOnce(&Engine, u64) -> T + Send + 'static,
    ) -> Option<T> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let request = Request::Inspect(Box::new(move |engine, index| {
            let _ = reply.send(inspect(engine, index));
        }));
        self.core.send(request).await.ok()?;
        answer.await.ok()
    }

    /// The process dies: Raft stops at once (nothing more leaves it), the core and what
    /// it holds are gone, and the services stop reading.
    pub async fn crash(&self) {
        let _ = self.shutdown.send(true);
        self.member.shutdown().await;
        self.task.abort();
    }
}

/// The gRPC server and `/metrics` of a started node, and how to stop them.
struct Serving {
    shutdown: tokio::sync::watch::Sender<bool>,
    server: tokio::task::JoinHandle<()>,
    server_stop: tokio::sync::oneshot::Sender<()>,
    metrics_addr: Option<SocketAddr>,
    log: LocalLog,
    link: LocalLink,
}

impl Serving {
    /// Serves gRPC on `listener` (the services see `shared`, whose shutdown signal this
    /// owns) and, when configured, `/metrics` (with the journal's counters, if any).
    async fn start(
        listener: tokio::net::TcpListener,
        config: &NodeConfig,
        shared: (Shared, tokio::sync::watch::Sender<bool>),
        journal: Option<bourse_journal::GroupCommitHandle>,
        tls: Option<bourse_pki::grpc::ServerTls>,
    ) -> std::io::Result<Serving> {
        let (shared, shutdown) = shared;
        let metrics = Arc::clone(&shared.metrics);
        let log = LocalLog(LogService(shared.clone()));
        let link = LocalLink(shared.clone());
        let (server_stop, server_stopping) = tokio::sync::oneshot::channel();
        let server = tokio::spawn(serve(listener, shared, config.grpc_message_bytes_max, tls, server_stopping));
        let metrics_addr = match config.metrics_listen {
            Some(listen) => Some(crate::metrics::serve(listen, metrics, journal).await?),
            None => None,
        };
        Ok(Serving { shutdown, server, server_stop, metrics_addr, log, link })
    }
}

impl Shared {
    /// What the services share, and the sender of its shutdown signal.
    #[allow(clippy::too_many_arguments)] // the parts of a starting node, each made by the caller
    fn new(
        config: &NodeConfig,
        core: mpsc::Sender<Request>,
        sessions: &Arc<Sessions>,
        market: broadcast::Sender<proto::MarketDataUpdate>,
        metrics: &Arc<Metrics>,
        replication: Option<Arc<Replication>>,
        advertise: String,
        log: Option<LogSource>,
    ) -> std::io::Result<(Shared, tokio::sync::watch::Sender<bool>)> {
        let (shutdown, shutdown_seen) = tokio::sync::watch::channel(false);
        let fair = FairConfig {
            window_ns: config.sequencer_window_us.saturating_mul(1_000),
            capacity: config.sequencer_capacity,
            adaptive: config.fairness.adaptive_configs(),
            clock: config.clock.clone(),
        };
        let fair = FairSequencer::start(fair, core.clone(), Arc::clone(metrics))?;
        let shared = Shared {
            core,
            sessions: Arc::clone(sessions),
            shutdown: shutdown_seen,
            market,
            metrics: Arc::clone(metrics),
            client_batch_commands_max: config.client_batch_commands_max,
            session_outbox_max: config.session_outbox_max,
            session_ids: Arc::new(AtomicU64::new(1)),
            replication,
            advertise,
            fair,
            link_outbox_max: config.link_outbox_max,
            log,
            engine: config.engine_config(),
            stamp_bound_ns: config.link_stamp_bound_ms.saturating_mul(1_000_000),
            admin_gateways: config.admin_gateways.clone().into(),
            clock: config.clock.clone(),
            client_keys: Arc::new(
                crate::auth::ClientKeys::load(config.client_keys.as_deref())
                    .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))?,
            ),
        };
        Ok((shared, shutdown))
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    shared: Shared,
    message_bytes_max: usize,
    tls: Option<bourse_pki::grpc::ServerTls>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    use bourse_protocol::proto::{
        admin_server, cluster_server, gateway_link_server, log_server, market_data_server, order_entry_server,
        query_server,
    };
    let order_entry = order_entry_server::OrderEntryServer::new(OrderEntryService(shared.clone()))
        .max_decoding_message_size(message_bytes_max);
    let admin =
        admin_server::AdminServer::new(AdminService(shared.clone())).max_decoding_message_size(message_bytes_max);
    let query =
        query_server::QueryServer::new(QueryService(shared.clone())).max_decoding_message_size(message_bytes_max);
    let cluster = cluster_server::ClusterServer::new(ClusterService(shared.clone()));
    let link = gateway_link_server::GatewayLinkServer::new(GatewayLinkService(shared.clone()))
        .max_decoding_message_size(message_bytes_max);
    let log = log_server::LogServer::new(LogService(shared.clone()));
    let authorize = crate::auth::AuthorizeLayer { refused: Arc::clone(&shared.metrics.calls_refused) };
    let incoming = bourse_pki::grpc::incoming(listener, tls, Arc::clone(&shared.metrics.handshakes_failed));
    let market = market_data_server::MarketDataServer::new(MarketDataService(shared));
    let result = tonic::transport::Server::builder()
        .layer(authorize)
        .add_service(order_entry)
        .add_service(admin)
        .add_service(query)
        .add_service(cluster)
        .add_service(market)
        .add_service(link)
        .add_service(log)
        // incoming() sets TCP_NODELAY: an ack batch must not wait for the peer's
        // delayed ACK (40 ms).
        .serve_with_incoming_shutdown(incoming, async {
            let _ = stop.await;
        })
        .await;
    if let Err(error) = result {
        tracing::error!(%error, "gRPC server stopped");
    }
}

/// Runs a node until SIGINT or SIGTERM, then shuts it down cleanly.
pub async fn run_until_signal(config: NodeConfig) -> Result<(), NodeError> {
    let node = Node::start(config).await?;
    println!("bourse node listening on {}", node.addr);
    if let Some(metrics) = node.metrics_addr {
        println!("metrics on http://{metrics}/metrics");
    }
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
        _ = terminate.recv() => tracing::info!("SIGTERM: shutting down"),
    }
    node.shutdown().await
}

/// This node's mutual TLS, when it has a CA directory: the certificate `bourse pki`
/// issued to `node ID` there, for the Raft transport and the gRPC port.
fn node_tls(config: &NodeConfig) -> Result<Option<NodeTls>, NodeError> {
    let Some(dir) = config.pki_dir() else { return Ok(None) };
    let id = config.node_id();
    let identity = bourse_pki::Identity::new(bourse_pki::Role::Node, id.to_string())
        .map_err(|e| NodeError::Config(e.to_string()))?;
    let files = bourse_pki::TlsFiles::issued(dir, &identity);
    let fail = |e: bourse_pki::PkiError| {
        NodeError::Config(format!(
            "pki {}: {e} (issue it with: bourse pki issue --dir {} --role node --id {id} --host HOST)",
            dir.display(),
            dir.display()
        ))
    };
    let member = bourse_cluster::tls::MemberTls::load(&files).map_err(fail)?;
    let grpc = Arc::new(bourse_pki::ReloadableServerConfig::grpc_server(files).map_err(fail)?);
    Ok(Some(NodeTls { member, grpc }))
}

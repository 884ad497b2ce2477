//! A simulated node: the real node — its core, fair sequencer, client sessions,
//! gateway links, feed, leadership watch and Raft member — started by
//! [`bourse_node::Node::start_simulated`] on the simulator's shells (disk, network,
//! clock), with the checks' observer ([`Tap`]) between Raft and the core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_cluster::member::MemberConfig;
use bourse_cluster::sim::{Rafts, SimDisk, SimShells};
use bourse_cluster::snapshot_store::SnapshotStore;
use bourse_cluster::state_machine::{Committed, Machine, MachineRequest};
use bourse_cluster::{Batch, NodeId, Peer};
use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{codec, ClientId};
use bourse_fairness::{Clock, TimeSource};
use bourse_node::{CoreMachine, NodeConfig, SimulatedNode};
use tokio::sync::oneshot;

use crate::world::{lock, World};
use crate::Plant;

/// Where a planted duplicate is applied again: a twin of the original client (its id
/// with these bits flipped).
const TWIN: u64 = 0x7a11_0000_0000_0000;

/// Engine snapshots a node produced or installed, by index, oldest first.
type Snapshots = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// The fair sequencer's window d_s.
pub const WINDOW_US: u64 = 2_000;

/// A node's clock: virtual time, plus the node's offset (which jumps under faults).
struct NodeTime {
    world: Arc<World>,
    node: NodeId,
}

impl TimeSource for NodeTime {
    fn now_ns(&self) -> u64 {
        self.world.node_now_ns(self.node)
    }
}

/// What stands between Raft and the node's core in the simulator: every committed
/// entry is shown to the checks ([`World::observe`]) before the core applies it, and
/// the planted bugs that live at this seam act here.
#[derive(Clone)]
pub struct Tap {
    core: CoreMachine,
    node: NodeId,
    world: Arc<World>,
    /// Every snapshot this node's engine produced or installed (for the planted stale
    /// snapshot).
    history: Snapshots,
    /// The last index this process's engine holds.
    applied: Arc<AtomicU64>,
}

impl Machine for Tap {
    async fn submit(&self, request: MachineRequest) -> bool {
        match request {
            MachineRequest::Apply { mut entries, done } => {
                for entry in &entries {
                    self.world.observe(self.node, entry);
                }
                if let Some(last) = entries.last() {
                    self.applied.store(last.index, Ordering::Relaxed);
                }
                if self.world.options.plant == Some(Plant::SkipDuplicateCheck) && !self.twin(&mut entries).await {
                    return false;
                }
                self.core.submit(MachineRequest::Apply { entries, done }).await
            }
            MachineRequest::Snapshot { reply } => {
                let (taken, bytes) = oneshot::channel();
                if !self.core.submit(MachineRequest::Snapshot { reply: taken }).await {
                    return false;
                }
                let Ok(bytes) = bytes.await else { return false };
                lock(&self.history).push((self.applied.load(Ordering::Relaxed), bytes.clone()));
                let _ = reply.send(bytes);
                true
            }
            MachineRequest::Install { index, bytes, reply } => {
                self.world.count(|c| c.snapshots_installed += 1);
                self.world.trace(&[21, self.node, index]);
                let planted = self.world.options.plant == Some(Plant::StaleSnapshot);
                let bytes = match lock(&self.history).first() {
                    // Planted: the oldest snapshot this node holds, as if it were the new one.
                    Some((old, stale)) if planted && *old < index => stale.clone(),
                    _ => bytes,
                };
                lock(&self.history).push((index, bytes.clone()));
                self.applied.store(index, Ordering::Relaxed);
                self.core.submit(MachineRequest::Install { index, bytes, reply }).await
            }
        }
    }
}

impl Tap {
    /// Planted: every command the engine's session record already holds is applied
    /// again, under a twin client whose next number every replica derives alike from
    /// the state (asked of the core before it applies the entries). False when the
    /// core is gone.
    async fn twin(&self, entries: &mut [Committed]) -> bool {
        let mut commands: Vec<Vec<Command>> = Vec::new();
        for entry in entries.iter() {
            let batch = entry.batch.iter().flat_map(|batch| batch.iter());
            commands.push(batch.filter_map(|bytes| codec::decode(bytes).ok()).collect());
        }
        let clients: Vec<ClientId> = commands.iter().flatten().map(|c| c.client).collect();
        let (reply, seen) = oneshot::channel();
        let inspect = Box::new(move |engine: &bourse_engine::Engine, _: u64| {
            let applied: Vec<(ClientId, u64, u64)> = clients
                .iter()
                .map(|&client| {
                    let twin = ClientId(client.0 ^ TWIN);
                    let of = |c| engine.client_seq_applied(c).unwrap_or(0);
                    (client, of(client), of(twin))
                })
                .collect();
            let _ = reply.send(applied);
        });
        if self.core.0.send(bourse_node::Request::Inspect(inspect)).await.is_err() {
            return false;
        }
        let Ok(seen) = seen.await else { return false };
        let mut applied: std::collections::BTreeMap<ClientId, (u64, u64)> =
            seen.into_iter().map(|(client, own, twin)| (client, (own, twin))).collect();
        for (entry, commands) in entries.iter_mut().zip(commands) {
            if entry.batch.is_none() {
                continue;
            }
            let mut batch = Batch::with_capacity(64 * commands.len());
            for mut command in commands {
                let (own, twin) = applied.entry(command.client).or_default();
                if command.seq <= *own && command.client != ClientId::SYSTEM {
                    *twin += 1;
                    command = Command { client: ClientId(command.client.0 ^ TWIN), seq: *twin, ..command };
                } else if command.seq == *own + 1 {
                    *own += 1;
                }
                batch.push_with(|buffer| codec::encode_into(&command, buffer));
            }
            entry.batch = Some(batch);
        }
        true
    }
}

/// A node: its disk and snapshots outlive its processes.
pub struct Node {
    pub id: NodeId,
    pub disk: SimDisk,
    snapshots: SnapshotStore,
    history: Snapshots,
    pub process: Option<Arc<SimulatedNode>>,
}

pub fn member_config(id: NodeId, nodes: u64) -> MemberConfig {
    let peer = |id: NodeId| Peer { api: format!("node-{id}"), raft: format!("node-{id}-raft") };
    MemberConfig {
        id,
        dir: std::path::PathBuf::new(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        advertise: peer(id),
        bind_ip: None,
        bootstrap: (1..=nodes).map(|id| (id, peer(id))).collect(),
        // The node's defaults (crates/node/src/config.rs), but snapshots far more often,
        // so that runs of seconds take, send and install them.
        heartbeat_ms: 20,
        election_min_ms: 40,
        election_max_ms: 100,
        snapshot_every_entries: 150,
        log_kept_after_snapshot: 30,
        tls: None,
        snapshot_bytes_max: u32::MAX,
    }
}

impl Node {
    pub fn new(id: NodeId) -> Node {
        Node {
            id,
            disk: SimDisk::default(),
            snapshots: SnapshotStore::memory(),
            history: Arc::default(),
            process: None,
        }
    }

    /// Starts a process on this node's disk and snapshots.
    pub async fn start(&mut self, world: &Arc<World>, rafts: &Rafts<Tap>) -> Result<(), String> {
        if world.options.plant == Some(Plant::StaleSnapshot) {
            // Planted: the process restarts from the oldest snapshot it holds, under the
            // newest one's name.
            let newest = self.snapshots.latest().map_err(|e| e.to_string())?;
            if let (Some((meta, _)), Some((_, stale))) = (newest, lock(&self.history).first()) {
                self.snapshots.save(&meta, stale).map_err(|e| e.to_string())?;
            }
        }
        let config = NodeConfig {
            sequencer_window_us: WINDOW_US,
            // Smaller buffers than a node's defaults (each process start allocates them,
            // and a run starts dozens): the run's market data is a few thousand updates.
            market_data_buffer_max: 1_024,
            sequencer_capacity: 4_096,
            clock: Clock::simulated(Arc::new(NodeTime { world: Arc::clone(world), node: self.id })),
            ..NodeConfig::default()
        };
        let shells = SimShells { disk: self.disk.clone(), fabric: world.clone(), rafts: Arc::clone(rafts) };
        let (node, history) = (self.id, Arc::clone(&self.history));
        let wrap = |core| Tap { core, node, world: Arc::clone(world), history, applied: Arc::default() };
        let member = member_config(self.id, world.options.nodes);
        let process = bourse_node::Node::start_simulated(config, member, shells, self.snapshots.clone(), wrap)
            .await
            .map_err(|e| e.to_string())?;
        let process = Arc::new(process);
        lock(&world.up).insert(self.id);
        lock(&world.processes).insert(self.id, Arc::clone(&process));
        self.process = Some(process);
        world.trace(&[30, self.id]);
        Ok(())
    }

    /// The process dies: the network stops reaching it and its connections break, its
    /// disk keeps what was durable (and maybe a torn prefix of the write in flight),
    /// everything else is gone.
    pub async fn crash(&mut self, world: &Arc<World>, rafts: &Rafts<Tap>) {
        let Some(process) = self.process.take() else { return };
        lock(&world.up).remove(&self.id);
        lock(&world.processes).remove(&self.id);
        lock(rafts).remove(&self.id);
        world.crash_disk(self.id, &self.disk);
        world.break_connections(self.id);
        if tokio::time::timeout(Duration::from_secs(5), process.crash()).await.is_err() {
            world.violation(format!("node {}: openraft did not stop within 5 s", self.id));
        }
    }
}

/// Whether a command changes what exists (money, shares) outside the engine's own moves.
pub fn supply_change(body: &CommandBody) -> Option<(bourse_engine::AssetId, i128)> {
    match body {
        CommandBody::Deposit { asset, amount, .. } | CommandBody::Credit { asset, amount, .. } => {
            Some((*asset, i128::from(amount.0)))
        }
        CommandBody::Withdraw { asset, amount, .. } => Some((*asset, -i128::from(amount.0))),
        _ => None,
    }
}

//! A simulated node: the real Raft member (openraft with the member's configuration, the
//! Raft state machine, snapshots) on the simulated shells, the engine as its machine,
//! and a small front that takes clients' commands, proposes them while it leads, and
//! answers clients as their commands are applied.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_cluster::member::MemberConfig;
use bourse_cluster::sim::{Rafts, SimDisk, SimMember};
use bourse_cluster::snapshot_store::SnapshotStore;
use bourse_cluster::state_machine::{Committed, Machine, MachineRequest, StateMachine};
use bourse_cluster::{Batch, NodeId, Peer};
use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{codec, ClientId, Engine, EngineConfig, Outcome, Reject};
use bourse_fairness::{Resequencer, Stamp};
use bourse_protocol::{convert, proto};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::world::{lock, GatewayMsg, NodeMsg, ToClient, ToNode, World};
use crate::Plant;

/// Client ids in the engine: the fabric's client number plus this.
pub const ENGINE_CLIENT_BASE: u64 = 1;

/// Where a planted duplicate is applied again: a twin client of the original.
const TWIN: u64 = 1 << 40;

/// Engine snapshots a node produced or installed, by index, oldest first.
type Snapshots = Arc<Mutex<Vec<(u64, Vec<u8>)>>>;

/// The engine and what the node's front needs from it.
pub struct Replica {
    node: NodeId,
    pub engine: Engine,
    next_index: u64,
    /// Clients whose commands came in through this process, and where from (the
    /// client's or its gateway's fabric id): they get the answers.
    sessions: Arc<Mutex<BTreeMap<u64, (u64, u64)>>>,
    /// Whether this process leads (as its front last saw): it publishes market data.
    leading: Arc<AtomicBool>,
    events: Vec<bourse_engine::Event>,
}

impl Replica {
    fn apply_entry(&mut self, world: &Arc<World>, entry: Committed) {
        if entry.index == 0 {
            return;
        }
        if entry.index != self.next_index {
            world.violation(format!(
                "node {}: entry {} applied when {} was next",
                self.node, entry.index, self.next_index
            ));
        }
        self.next_index = entry.index + 1;
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            if let Some(batch) = &entry.batch {
                batch.iter().for_each(|command| command.hash(&mut hasher));
            }
            hasher.finish()
        };
        {
            let mut ledger = lock(&world.ledger);
            let first = *ledger.entries.entry(entry.index).or_insert((entry.term, self.node, digest));
            if (first.0, first.2) != (entry.term, digest) {
                ledger.violations.push(crate::world::Violation(format!(
                    "node {} applied entry {} of term {}; node {} applied one of term {} there{}",
                    self.node,
                    entry.index,
                    entry.term,
                    first.1,
                    first.0,
                    if first.0 == entry.term { " with other commands" } else { "" }
                )));
            }
        }
        let Some(batch) = entry.batch else { return };
        let mut log_ts = 0;
        for bytes in batch.iter() {
            let command = match codec::decode(bytes) {
                Ok(command) => command,
                Err(error) => {
                    world.violation(format!("node {}: entry {} does not decode: {error}", self.node, entry.index));
                    continue;
                }
            };
            self.events.clear();
            log_ts = log_ts.max(command.ts);
            let applied = self.engine.apply(&command, &mut self.events);
            if applied.duplicate && world.options.plant == Some(Plant::SkipDuplicateCheck) {
                // Planted: the duplicate is executed again (under a twin session, whose
                // next number every replica derives alike from the state).
                let twin = ClientId(command.client.0 | TWIN);
                let seq = self.engine.client_seq_applied(twin).unwrap_or(0) + 1;
                let again = Command { client: twin, seq, ts: command.ts, body: command.body.clone() };
                self.engine.apply(&again, &mut self.events);
            }
            let client = command.client.0 - ENGINE_CLIENT_BASE;
            world.trace(&[20, self.node, entry.index, client, command.seq, u64::from(applied.duplicate)]);
            // A number ahead of the next is refused unrecorded (the client sends it again
            // once the ones before are in): not an application.
            let unrecorded = matches!(applied.outcome, Outcome::Rejected(Reject::SequenceGap | Reject::SequenceTooOld));
            if !applied.duplicate && !unrecorded {
                world.count(|c| c.commands_applied += 1);
                let mut ledger = lock(&world.ledger);
                let first = *ledger.outcomes.entry((client, command.seq)).or_insert(applied.outcome);
                if first != applied.outcome {
                    ledger.violations.push(crate::world::Violation(format!(
                        "node {}: client {client} command {} applied with {:?}, elsewhere {first:?}",
                        self.node, command.seq, applied.outcome
                    )));
                }
            }
            // Only the leader answers: a node that stops leading ends its sessions (as
            // `bourse_node::replica::watch_leadership` does), so its clients go elsewhere.
            let session = lock(&self.sessions).get(&client).copied().filter(|_| self.leading.load(Ordering::Relaxed));
            if let Some((via, stream)) = session {
                world.answer(
                    self.node,
                    via,
                    client,
                    ToClient::Ack(convert::ack(command.seq, entry.index, &applied), stream),
                );
            }
        }
        if self.leading.load(Ordering::Relaxed) {
            // Market data of this entry, released by every gateway at log time + hold.
            let release_ts = log_ts.max(self.engine.ts_last()) + crate::gateway::HOLD_NS;
            for gateway in 0..world.options.gateways {
                world.to_gateway(self.node, gateway, GatewayMsg::Feed { index: entry.index, release_ts });
            }
        }
    }
}

/// The engine's owner as the Raft state machine sees it: requests are served at once,
/// on the simulation's one thread.
#[derive(Clone)]
pub struct SimMachine {
    pub replica: Arc<Mutex<Replica>>,
    /// False once the process crashed: the engine is gone with it.
    alive: Arc<AtomicBool>,
    world: Arc<World>,
    /// Every snapshot this node's engine produced or installed, oldest first (for the
    /// planted stale-snapshot bug).
    history: Snapshots,
}

impl Machine for SimMachine {
    async fn submit(&self, request: MachineRequest) -> bool {
        if !self.alive.load(Ordering::Acquire) {
            return false;
        }
        match request {
            MachineRequest::Apply { entries, done } => {
                let mut replica = lock(&self.replica);
                for entry in entries {
                    replica.apply_entry(&self.world, entry);
                }
                drop(replica);
                let _ = done.send(());
            }
            MachineRequest::Snapshot { reply } => {
                let (index, bytes) = {
                    let replica = lock(&self.replica);
                    (replica.next_index - 1, replica.engine.snapshot())
                };
                lock(&self.history).push((index, bytes.clone()));
                let _ = reply.send(bytes);
            }
            MachineRequest::Install { index, bytes, reply } => {
                self.world.count(|c| c.snapshots_installed += 1);
                self.world.trace(&[21, lock(&self.replica).node, index]);
                let planted = self.world.options.plant == Some(Plant::StaleSnapshot);
                let bytes = match lock(&self.history).first() {
                    // Planted: the oldest snapshot this node holds, as if it were the new one.
                    Some((old, stale)) if planted && *old < index => stale.clone(),
                    _ => bytes,
                };
                lock(&self.history).push((index, bytes.clone()));
                match Engine::restore(&bytes) {
                    Ok(engine) => {
                        let mut replica = lock(&self.replica);
                        replica.engine = engine;
                        replica.next_index = index + 1;
                        let _ = reply.send(Ok(()));
                    }
                    Err(error) => {
                        let _ = reply.send(Err(format!("snapshot at {index} does not restore: {error}")));
                    }
                }
            }
        }
        true
    }
}

/// A node's process while it runs.
pub struct Process {
    pub member: Arc<SimMember<SimMachine>>,
    pub machine: SimMachine,
    front: JoinHandle<()>,
}

/// A node: its disk and snapshots outlive its processes.
pub struct Node {
    pub id: NodeId,
    pub disk: SimDisk,
    snapshots: SnapshotStore,
    history: Snapshots,
    pub process: Option<Process>,
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
    pub async fn start(&mut self, world: &Arc<World>, rafts: &Rafts<SimMachine>) -> Result<(), String> {
        let config = member_config(self.id, world.options.nodes);
        let (engine, next_index) = match self.snapshots.latest().map_err(|e| e.to_string())? {
            Some((meta, bytes)) => {
                let planted = world.options.plant == Some(Plant::StaleSnapshot);
                let bytes = match lock(&self.history).first() {
                    Some((_, stale)) if planted => stale.clone(),
                    _ => bytes,
                };
                let next_index = meta.last_log_id.map_or(1, |id| id.index + 1);
                (Engine::restore(&bytes).map_err(|e| e.to_string())?, next_index)
            }
            None => (Engine::new(EngineConfig::default()), 1),
        };
        let sessions = Arc::new(Mutex::new(BTreeMap::new()));
        let leading = Arc::new(AtomicBool::new(false));
        let replica = Replica {
            node: self.id,
            engine,
            next_index,
            sessions: Arc::clone(&sessions),
            leading: Arc::clone(&leading),
            events: Vec::new(),
        };
        let machine = SimMachine {
            replica: Arc::new(Mutex::new(replica)),
            alive: Arc::new(AtomicBool::new(true)),
            world: Arc::clone(world),
            history: Arc::clone(&self.history),
        };
        let (state_machine, _) =
            StateMachine::open(self.snapshots.clone(), machine.clone()).map_err(|e| e.to_string())?;
        let fabric: Arc<dyn bourse_cluster::sim::Fabric> = world.clone();
        let member = SimMember::start(&config, &self.disk, state_machine, fabric, Arc::clone(rafts))
            .await
            .map_err(|e| e.to_string())?;
        let member = Arc::new(member);
        let (inbox_tx, inbox) = mpsc::unbounded_channel();
        lock(&world.nodes).insert(self.id, inbox_tx);
        let front = Front {
            node: self.id,
            world: Arc::clone(world),
            member: Arc::clone(&member),
            sessions,
            leading,
            sequencer: Resequencer::new(crate::gateway::WINDOW_NS, 100_000),
            arrivals: 0,
            released: Vec::new(),
        };
        let front = tokio::spawn(front.run(inbox));
        self.process = Some(Process { member, machine, front });
        world.trace(&[30, self.id]);
        Ok(())
    }

    /// The process dies: the network stops reaching it, its disk keeps what was durable
    /// (and maybe a torn prefix of the write in flight), everything else is gone.
    pub async fn crash(&mut self, world: &Arc<World>, rafts: &Rafts<SimMachine>) {
        let Some(process) = self.process.take() else { return };
        lock(&world.nodes).remove(&self.id);
        lock(rafts).remove(&self.id);
        world.crash_disk(self.id, &self.disk);
        process.machine.alive.store(false, Ordering::Release);
        process.front.abort();
        if tokio::time::timeout(Duration::from_secs(5), process.member.stop()).await.is_err() {
            world.violation(format!("node {}: openraft did not stop within 5 s", self.id));
        }
    }
}

/// The node's front: takes the commands that arrived, proposes them as one batch while
/// the node leads, and sends them back when it does not. Commands stamped by a gateway
/// wait in the fair sequencer (the real [`Resequencer`]) and are proposed in the order
/// it releases them, as the node's sequencer thread does (`crates/node/src/fair.rs`).
struct Front {
    node: NodeId,
    world: Arc<World>,
    member: Arc<SimMember<SimMachine>>,
    sessions: Arc<Mutex<BTreeMap<u64, (u64, u64)>>>,
    leading: Arc<AtomicBool>,
    /// Commands waiting, with their arrival number and where they came from.
    sequencer: Resequencer<(u64, u64, ToNode)>,
    /// Commands pushed into the sequencer so far (numbers arrivals).
    arrivals: u64,
    /// This process's releases so far, in release order: stamp, arrival number, and
    /// how many had arrived when it was released.
    released: Vec<(Stamp, u64, u64)>,
}

impl Front {
    async fn run(mut self, mut inbox: mpsc::UnboundedReceiver<(u64, NodeMsg)>) {
        loop {
            // Wake for the next message or when the sequencer's head is due.
            let next = match self.sequencer.next_deadline() {
                Some(due) => {
                    let wait = due.saturating_sub(self.world.node_now_ns(self.node));
                    match tokio::time::timeout(Duration::from_nanos(wait.max(1)), inbox.recv()).await {
                        Ok(message) => message,
                        Err(_) => {
                            self.release(Vec::new()).await;
                            continue;
                        }
                    }
                }
                None => inbox.recv().await,
            };
            let Some(first) = next else { return };
            let mut arrived = vec![first];
            while let Ok(next) = inbox.try_recv() {
                arrived.push(next);
            }
            let now = self.world.node_now_ns(self.node);
            let mut direct = Vec::new();
            for (from, message) in arrived {
                match message {
                    NodeMsg::Heartbeat { gateway, watermark } => {
                        self.sequencer.connect(gateway);
                        self.sequencer.heartbeat(gateway, watermark);
                    }
                    NodeMsg::Command(command) => match command.stamp {
                        Some(stamp) => {
                            self.sequencer.connect(stamp.gateway);
                            match self.sequencer.push(now, stamp, (self.arrivals, from, *command)) {
                                Ok(()) => self.arrivals += 1,
                                Err(full) => {
                                    let (_, from, command) = full.item;
                                    self.refuse(from, command);
                                }
                            }
                        }
                        None => direct.push((from, *command)),
                    },
                }
            }
            if !self.release(direct).await {
                return;
            }
        }
    }

    fn refuse(&self, from: u64, command: ToNode) {
        let hint = self.member.leadership().leader.map(|(id, _)| id);
        if from >= crate::world::CLIENT_BASE {
            self.world.to_client(self.node, command.client, ToClient::NotLeader { hint, stream: command.stream });
        } else {
            self.world.to_gateway(self.node, from - crate::world::GATEWAY_BASE, GatewayMsg::Refused { hint, command });
        }
    }

    /// Proposes `direct` and whatever the sequencer releases now; false when Raft stopped.
    async fn release(&mut self, direct: Vec<(u64, ToNode)>) -> bool {
        let leadership = self.member.leadership();
        if self.leading.swap(leadership.is_leader, Ordering::Relaxed) && !leadership.is_leader {
            lock(&self.sessions).clear();
        }
        let now = self.world.node_now_ns(self.node);
        let mut batch_items = direct;
        while let Some(released) = self.sequencer.pop_ready(now) {
            let (arrival, from, command) = released.item;
            self.check_order(released.stamp, arrival);
            self.released.push((released.stamp, arrival, self.arrivals));
            batch_items.push((from, command));
        }
        if batch_items.is_empty() {
            return true;
        }
        if !leadership.is_leader {
            for (from, command) in batch_items {
                self.refuse(from, command);
            }
            return true;
        }
        let mut batch = Batch::with_capacity(batch_items.len() * 64);
        for (from, ToNode { client, command, stream, .. }) in &batch_items {
            lock(&self.sessions).insert(*client, (*from, *stream));
            // The node service's conversion: a command of the wrong shape is refused
            // before the log, its seq not used up.
            match convert::command_from_proto(ClientId(client + ENGINE_CLIENT_BASE), now, command) {
                Ok(command) => batch.push_with(|buffer| codec::encode_into(&command, buffer)),
                Err(error) => {
                    let ack = ToClient::Ack(convert::ack_refused(command.seq, &error), *stream);
                    self.world.answer(self.node, *from, *client, ack);
                }
            }
        }
        self.world.trace(&[22, self.node, batch_items.len() as u64, now]);
        if self.world.options.plant == Some(Plant::AckBeforeCommit) && self.world.trading.load(Ordering::Relaxed) {
            // Planted: answered as soon as it is handed to Raft.
            for (from, ToNode { client, command, stream, .. }) in &batch_items {
                let ack = proto::Ack { seq: command.seq, ..proto::Ack::default() };
                self.world.answer(self.node, *from, *client, ToClient::Ack(ack, *stream));
            }
        }
        self.member.propose(batch).await
    }

    /// The sequencer's promise: an order is released after one stamped later only if it
    /// had not yet arrived when that one was released (it came later than the window).
    fn check_order(&mut self, stamp: Stamp, arrival: u64) {
        for &(earlier, _, arrived_by_then) in &self.released {
            if stamp < earlier && arrival < arrived_by_then {
                self.world.violation(format!(
                    "node {}: the order stamped {} by gateway {} was released after one stamped {} by gateway {}, \
                     though it arrived before that one was released",
                    self.node, stamp.ts, stamp.gateway, earlier.ts, earlier.gateway
                ));
            }
        }
        if self.released.len() > 4096 {
            self.released.drain(..2048);
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

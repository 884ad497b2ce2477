//! `bourse sim --groups G`: the partitioned exchange (`bourse-shard`) with every group a
//! Raft group of its own, simulated on one thread as `bourse sim` simulates one group.
//!
//! **What runs.** Each group has `--nodes` members: openraft with the member's
//! configuration, the Raft state machine of `bourse-cluster`, and behind it the group's
//! [`GroupMachine`], all on the simulated network and disks of [`bourse_cluster::sim`]
//! (the same shells, the same fault rates as `bourse sim`). A log entry's batch carries
//! postcard-encoded [`Entry`]s. Every member process runs a front that, while its member
//! leads, proposes:
//!
//! - the client commands and ticks that reached it, as one [`Entry::Clients`];
//! - for every other group, that group's outputs addressed to this one, read from any
//!   live replica of it from this group's cursor on (or from what this leader already
//!   proposed in its term), as an [`Entry::Ingest`]: one at a time per source, proposed
//!   again from the cursor when it has not applied within 50 ms (a deposed leader's
//!   entry may still commit), and with faults on one in eight starts up to eight
//!   outputs before the cursor, as a leader that lost track would; the machine skips
//!   what it applied;
//! - every 50 ms, for every other group, an [`Entry::Trim`] of the outputs that group's
//!   cursor has passed by more than 32 (read from a live replica of it).
//!
//! A gateway stamps the clients' commands with its clock (each client up to [`WINDOW`]
//! in flight), sends each to the leader of its account's group, sends every leader a
//! tick each millisecond, and resends what is unanswered after 300 ms (to the leader of
//! the day: a command applied already is answered from its session's memory with the
//! outcome it got), and what was refused for a gap in its client's numbers (it
//! overtook an earlier one) after 20 ms. Clients place
//! limit and IOC orders on four books, cancel their own orders, deposit and withdraw,
//! suspend and resume their accounts; an operator creates accounts (half with an
//! external id and a deposit) through the catalog's group, which passes them on to
//! every other group.
//!
//! **Faults** (`--faults`, as `bourse sim`): lost, duplicated, delayed and reordered
//! messages, failing and slow `fsync`s, crashes with torn writes (a member restarts
//! from its newest snapshot and the log after it), and partitions, struck in every
//! group. Members snapshot every 150 entries (a snapshot is the encoded
//! [`GroupMachine`], outputs not yet trimmed included) and install a leader's snapshot
//! when they lag behind its compacted log.
//!
//! **Checks.** Every replica of a group applies the same entry at every index; no
//! replica applies a command twice; every replica gives a command the same outcome (and
//! a resend the outcome it first gave); after the heal every command is answered
//! within [`crate::LIVENESS`], every group's replicas converge to the same state, every
//! output is ingested, and then every asset is conserved across the groups, every
//! answered command is in its client's session record on every replica of its group,
//! every group applied the same catalog commands and knows the same accounts, and
//! every book's engine keeps its invariants.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_cluster::member::{Leadership, Member, MemberConfig};
use bourse_cluster::sim::{Fabric, Fate, Rafts, SimDisk, SimShells};
use bourse_cluster::snapshot_store::SnapshotStore;
use bourse_cluster::state_machine::{Committed, Machine, MachineRequest, StateMachine};
use bourse_cluster::{Batch, NodeId, Peer};
use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, AssetId, ClientId, EngineConfig, OrderId, OrderRecord, OrderStatus, Outcome, Px, Qty, Reject,
    Side, SymbolId,
};
use bourse_shard::machine::{conservation, Entry, GroupMachine, Output};
use bourse_shard::{Ack, Replicated, ShardMap, CATALOG_GROUP};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tokio::task::JoinHandle;

use crate::world::{lock, Counts, World, EPOCH_NS, GATEWAY_BASE};
use crate::{Options, Profile, LIVENESS};

const SYMBOLS: u32 = 4;
const CASH: AssetId = AssetId(0);
/// The client id the operator creates accounts as (past the traders').
const OPERATOR_CLIENT: u64 = 1_000_000;
/// The gateway's id on the fabric.
const GATEWAY: NodeId = GATEWAY_BASE - 1;
const ADMIN: ClientId = ClientId(0);
/// Commands a client keeps unanswered at most. An account part numbers each client's
/// session with it (a trader's account lives in one group, so its own numbers are that
/// session's) and refuses a command that overtook an earlier one on the way for the
/// gap; the gateway sends it again after [`GAP_RETRY`].
const WINDOW: usize = 4;
/// How soon a command refused for a gap goes again (its predecessor, which it
/// overtook, is on its way or will be resent).
const GAP_RETRY: Duration = Duration::from_millis(20);
const RESEND_AFTER: Duration = Duration::from_millis(300);

#[derive(Clone, Debug)]
pub struct ShardOptions {
    pub seed: u64,
    /// Every group, a meta group included.
    pub groups: u32,
    /// Group 0 a meta group of its own: the catalog, the books' placement, the moves
    /// and the cuts, and no account or book ([`ShardMap::with_meta_group`]).
    pub meta_group: bool,
    pub nodes: u64,
    pub clients: u64,
    pub faults: Profile,
    pub seconds: u64,
}

impl ShardOptions {
    /// Where the accounts and books live.
    pub fn map(&self) -> ShardMap {
        if self.meta_group {
            ShardMap::with_meta_group(self.groups)
        } else {
            ShardMap::new(self.groups)
        }
    }
}

impl Default for ShardOptions {
    fn default() -> Self {
        ShardOptions { seed: 1, groups: 2, meta_group: false, nodes: 3, clients: 8, faults: Profile::All, seconds: 10 }
    }
}

/// What the groups did, beyond the fabric's counts.
#[derive(Clone, Debug, Default)]
pub struct ShardCounts {
    pub entries: u64,
    pub commands: u64,
    pub answered: u64,
    /// Answers to resent commands from their session's memory (the first answer was
    /// lost, or went to a leader that fell).
    pub repeats: u64,
    pub resends: u64,
    pub ingests: u64,
    /// Outputs an ingest carried that the group had applied already (skipped).
    pub outputs_skipped: u64,
    pub outputs_applied: u64,
    pub gaps_refused: u64,
    /// Client commands refused for a gap in their client's numbers (they overtook an
    /// earlier one), sent again.
    pub overtaken: u64,
    pub trims: u64,
    pub leader_changes: u64,
    /// Moves of a book the operator sent (some lost, some refused: already there, or
    /// moving), and the books that moved.
    pub moves_sent: u64,
    pub books_moved: u64,
    /// Orders that crossed a move's cut the slow way: relayed with the book (sent to
    /// the old group, stamped past the cut) and sent to the old group by a group that
    /// had applied the move (stamped at or below it).
    pub relayed: u64,
    pub behind_cut: u64,
    /// Closes of the day the operator had answered, and the Day orders they expired.
    pub days_closed: u64,
    pub day_orders_expired: u64,
    /// The stamps of the closes answered (first answers: a repeat's stamp is its
    /// resend's).
    pub closes: Vec<u64>,
}

#[derive(Clone, Debug)]
pub struct ShardReport {
    pub options: ShardOptions,
    pub trace_hash: u64,
    pub simulated: Duration,
    pub counts: Counts,
    pub shard: ShardCounts,
    pub violations: Vec<String>,
}

impl ShardReport {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for ShardReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (c, s) = (&self.counts, &self.shard);
        write!(
            f,
            "seed {} ({} groups of {}{}): {} — trace {:016x}, {:.1} s simulated, {}; {} entries, {} commands ({} answered, \
             {} of them to resends from the session's memory, {} resends, {} refused for overtaking), {} ingests ({} outputs applied, {} skipped as applied, {} refused for a gap), \
             {} trims, {} leader changes, {} snapshots installed, {} books moved ({} moves sent; {} orders relayed with a book, {} sent behind a cut), {} days closed ({} Day orders expired)",
            self.options.seed,
            self.options.groups,
            self.options.nodes,
            if self.options.meta_group { ", group 0 the meta group" } else { "" },
            if self.passed() { "ok" } else { "FAILED" },
            self.trace_hash,
            self.simulated.as_secs_f64(),
            c.fabric(),
            s.entries,
            s.commands,
            s.answered,
            s.repeats,
            s.resends,
            s.overtaken,
            s.ingests,
            s.outputs_applied,
            s.outputs_skipped,
            s.gaps_refused,
            s.trims,
            s.leader_changes,
            c.snapshots_installed,
            s.books_moved,
            s.moves_sent,
            s.relayed,
            s.behind_cut,
            s.days_closed,
            s.day_orders_expired,
        )?;
        crate::world::write_violations(f, &self.violations)
    }
}

fn node_id(group: usize, index: u64) -> NodeId {
    group as u64 * 10 + index + 1
}

/// A member's state machine and what the checks need of it.
struct Replica {
    group: usize,
    node: NodeId,
    machine: GroupMachine,
    next_index: u64,
    /// Commands this process answered (it replays its log from the start after a
    /// restart, as a new process).
    answered: BTreeSet<(ClientId, u64)>,
    leading: bool,
}

/// What every task shares: the live processes, the fronts' inboxes, answers on their
/// way to the gateway, and the ledger the checks read.
#[derive(Default)]
struct Shared {
    replicas: Mutex<BTreeMap<NodeId, Arc<Mutex<Replica>>>>,
    members: Mutex<BTreeMap<NodeId, Arc<ShardMember>>>,
    inboxes: Mutex<BTreeMap<NodeId, VecDeque<Inbound>>>,
    answers: Mutex<VecDeque<Ack>>,
    /// The outcome of each command as first applied.
    outcomes: Mutex<BTreeMap<(ClientId, u64), Outcome>>,
    /// Per (group, index): what was applied there first.
    entries: Mutex<BTreeMap<(usize, u64), FirstApplied>>,
    counts: Mutex<ShardCounts>,
}

/// (term, node, digest of the batch).
type FirstApplied = (u64, NodeId, u64);

enum Inbound {
    Command(Command),
    Tick(u64),
    /// The operator's move of a book to another group (to the catalog's group).
    Move {
        symbol: SymbolId,
        to: usize,
    },
}

#[derive(Clone)]
struct ShardMachine {
    replica: Arc<Mutex<Replica>>,
    alive: Arc<AtomicBool>,
    world: Arc<World>,
    shared: Arc<Shared>,
}

impl ShardMachine {
    fn apply(&self, entry: Committed) {
        let mut replica = lock(&self.replica);
        if entry.index == 0 {
            return;
        }
        let (group, node) = (replica.group, replica.node);
        if entry.index != replica.next_index {
            self.world
                .violation(format!("node {node}: entry {} applied when {} was next", entry.index, replica.next_index));
        }
        replica.next_index = entry.index + 1;
        let digest = {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::hash::DefaultHasher::new();
            if let Some(batch) = &entry.batch {
                batch.iter().for_each(|bytes| bytes.hash(&mut hasher));
            }
            hasher.finish()
        };
        let first = *lock(&self.shared.entries).entry((group, entry.index)).or_insert((entry.term, node, digest));
        if (first.0, first.2) != (entry.term, digest) {
            self.world.violation(format!(
                "group {group}: node {node} applied entry {} of term {}; node {} applied another of term {} there",
                entry.index, entry.term, first.1, first.0
            ));
        }
        self.world.trace(&[80, node, entry.index, digest]);
        let Some(batch) = entry.batch else { return };
        let mut acks = Vec::new();
        for bytes in batch.iter() {
            let decoded: Entry = match postcard::from_bytes(bytes) {
                Ok(decoded) => decoded,
                Err(error) => {
                    self.world.violation(format!("node {node}: entry {} does not decode: {error}", entry.index));
                    continue;
                }
            };
            if let Entry::Ingest { source, from, outputs } = &decoded {
                let cursor = replica.machine.cursor(*source);
                let skipped = (cursor + 1).saturating_sub(*from).min(outputs.len() as u64);
                if replica.leading {
                    let mut counts = lock(&self.shared.counts);
                    counts.outputs_skipped += skipped;
                    counts.outputs_applied += outputs.len() as u64 - skipped.min(outputs.len() as u64);
                }
            }
            if replica.machine.apply(&decoded, &mut acks).is_err() && replica.leading {
                lock(&self.shared.counts).gaps_refused += 1;
            }
        }
        for ack in acks {
            // A refusal for a gap applied nothing: the command comes again.
            let gap = ack.outcome == Outcome::Rejected(Reject::SequenceGap);
            if gap {
                if replica.leading {
                    lock(&self.shared.counts).overtaken += 1;
                }
            } else if !ack.repeat && !replica.answered.insert((ack.client, ack.seq)) {
                self.world
                    .violation(format!("node {node}: command {} of client {} answered twice", ack.seq, ack.client));
            }
            let first = if gap {
                ack.outcome
            } else {
                *lock(&self.shared.outcomes).entry((ack.client, ack.seq)).or_insert(ack.outcome)
            };
            if first != ack.outcome {
                self.world.violation(format!(
                    "node {node}: command {} of client {} applied with {:?}, elsewhere {first:?}",
                    ack.seq, ack.client, ack.outcome
                ));
            }
            // The leader answers; the answer may be lost on its way.
            if replica.leading {
                if let Fate::Delivered { .. } = self.world.fate(node, GATEWAY, 64) {
                    lock(&self.shared.answers).push_back(ack);
                }
            }
        }
    }
}

impl Machine for ShardMachine {
    async fn submit(&self, request: MachineRequest) -> bool {
        if !self.alive.load(Ordering::Acquire) {
            return false;
        }
        match request {
            MachineRequest::Apply { entries, done } => {
                for entry in entries {
                    self.apply(entry);
                }
                let _ = done.send(());
            }
            MachineRequest::Snapshot { reply } => {
                let bytes = postcard::to_allocvec(&lock(&self.replica).machine).expect("a group machine encodes");
                let _ = reply.send(bytes);
            }
            MachineRequest::Install { index, bytes, reply } => {
                self.world.count(|c| c.snapshots_installed += 1);
                let mut replica = lock(&self.replica);
                self.world.trace(&[21, replica.node, index]);
                match postcard::from_bytes::<GroupMachine>(&bytes) {
                    Ok(machine) => {
                        replica.machine = machine;
                        replica.next_index = index + 1;
                        let _ = reply.send(Ok(()));
                    }
                    Err(error) => {
                        let _ = reply.send(Err(format!("snapshot at {index} does not decode: {error}")));
                    }
                }
            }
        }
        true
    }
}

fn member_config(group: usize, index: u64, nodes: u64) -> MemberConfig {
    let peer = |id: NodeId| Peer { api: format!("node-{id}"), raft: format!("node-{id}-raft") };
    let id = node_id(group, index);
    MemberConfig {
        id,
        dir: std::path::PathBuf::new(),
        listen: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        advertise: peer(id),
        bind_ip: None,
        bootstrap: (0..nodes).map(|i| (node_id(group, i), peer(node_id(group, i)))).collect(),
        heartbeat_ms: 20,
        election_min_ms: 40,
        election_max_ms: 100,
        // Snapshots far more often than the node's defaults, so that runs of seconds
        // take, send and install them.
        snapshot_every_entries: 150,
        log_kept_after_snapshot: 30,
        tls: None,
        snapshot_bytes_max: u32::MAX,
    }
}

/// A member: its disk outlives its processes.
struct ShardNode {
    group: usize,
    index: u64,
    id: NodeId,
    disk: SimDisk,
    snapshots: SnapshotStore,
    process: Option<(Arc<ShardMember>, ShardMachine, JoinHandle<()>)>,
}

struct Sim {
    world: Arc<World>,
    shared: Arc<Shared>,
    rafts: Rafts<ShardMachine>,
    nodes: Vec<ShardNode>,
    genesis: Vec<GroupMachine>,
    options: ShardOptions,
}

impl Sim {
    async fn start(&mut self, at: usize) {
        let node = &mut self.nodes[at];
        // From the newest snapshot on this member's disk, or from genesis.
        let (machine, next_index) = match node.snapshots.latest() {
            Ok(Some((meta, bytes))) => match postcard::from_bytes::<GroupMachine>(&bytes) {
                Ok(machine) => (machine, meta.last_log_id.map_or(1, |id| id.index + 1)),
                Err(error) => return self.world.violation(format!("node {}: its snapshot: {error}", node.id)),
            },
            Ok(None) => (self.genesis[node.group].clone(), 1),
            Err(error) => return self.world.violation(format!("node {}: its snapshots: {error}", node.id)),
        };
        let replica = Replica {
            group: node.group,
            node: node.id,
            machine,
            next_index,
            answered: BTreeSet::new(),
            leading: false,
        };
        let replica = Arc::new(Mutex::new(replica));
        let machine = ShardMachine {
            replica: Arc::clone(&replica),
            alive: Arc::new(AtomicBool::new(true)),
            world: Arc::clone(&self.world),
            shared: Arc::clone(&self.shared),
        };
        let config = member_config(node.group, node.index, self.options.nodes);
        let opened = StateMachine::open(node.snapshots.clone(), machine.clone());
        let state_machine = match opened {
            Ok((state_machine, _)) => state_machine,
            Err(error) => return self.world.violation(format!("node {}: {error}", node.id)),
        };
        let fabric: Arc<dyn Fabric> = self.world.clone();
        let shells = SimShells { disk: node.disk.clone(), fabric, rafts: Arc::clone(&self.rafts) };
        let (proposer, proposals) = tokio::sync::mpsc::unbounded_channel();
        // A batch Raft refuses is proposed again by the front, from the cursors.
        let started = Member::start_simulated(config, shells, state_machine, proposals, |_| {}).await;
        let member = match started {
            Ok(member) => Arc::new(ShardMember { member, proposer }),
            Err(error) => return self.world.violation(format!("node {} does not start: {error}", node.id)),
        };
        // Up, for the fabric.
        lock(&self.world.up).insert(node.id);
        lock(&self.shared.replicas).insert(node.id, Arc::clone(&replica));
        lock(&self.shared.members).insert(node.id, Arc::clone(&member));
        lock(&self.shared.inboxes).insert(node.id, VecDeque::new());
        let front = Front {
            resends: self.options.faults != Profile::Calm,
            group: node.group,
            node: node.id,
            groups: self.options.groups as usize,
            member: Arc::clone(&member),
            replica,
            world: Arc::clone(&self.world),
            shared: Arc::clone(&self.shared),
        };
        let front = tokio::spawn(front.run());
        node.process = Some((member, machine, front));
        self.world.trace(&[30, node.id]);
    }

    /// Members whose disk failed have stopped: each crashes and starts again at once.
    async fn restart_stopped(&mut self) {
        for at in 0..self.nodes.len() {
            if self.nodes[at].process.as_ref().is_some_and(|(member, _, _)| member.stopped()) {
                self.crash(at).await;
                self.start(at).await;
            }
        }
    }

    async fn crash(&mut self, at: usize) {
        let node = &mut self.nodes[at];
        let Some((member, machine, front)) = node.process.take() else { return };
        lock(&self.world.up).remove(&node.id);
        lock(&self.rafts).remove(&node.id);
        lock(&self.shared.replicas).remove(&node.id);
        lock(&self.shared.members).remove(&node.id);
        lock(&self.shared.inboxes).remove(&node.id);
        let world = &self.world;
        world.crash_disk(node.id, &node.disk);
        machine.alive.store(false, Ordering::Release);
        front.abort();
        if tokio::time::timeout(Duration::from_secs(5), member.stop()).await.is_err() {
            world.violation(format!("node {}: openraft did not stop within 5 s", node.id));
        }
    }
}

/// A member process's Raft member, and the way to propose to it.
struct ShardMember {
    member: Member<ShardMachine>,
    proposer: tokio::sync::mpsc::UnboundedSender<Batch>,
}

impl ShardMember {
    fn leadership(&self) -> Leadership {
        self.member.leadership().borrow().clone()
    }

    fn propose(&self, batch: Batch) {
        // Gone only with the member, whose front is aborted with it.
        let _ = self.proposer.send(batch);
    }

    fn stopped(&self) -> bool {
        self.member.stopped()
    }

    fn progress(&self) -> (u64, u64) {
        self.member.progress()
    }

    async fn stop(&self) {
        self.member.shutdown().await;
    }
}

/// A member process's front (see the module's docs).
struct Front {
    /// Some ingests start before the cursor (with faults on).
    resends: bool,
    group: usize,
    node: NodeId,
    groups: usize,
    member: Arc<ShardMember>,
    replica: Arc<Mutex<Replica>>,
    world: Arc<World>,
    shared: Arc<Shared>,
}

impl Front {
    async fn run(self) {
        // Per source: the last output of the ingest in flight, and when it was proposed.
        let mut proposed: Vec<Option<(u64, Duration)>> = vec![None; self.groups];
        let mut term = 0;
        let mut last_trim = Duration::ZERO;
        loop {
            tokio::time::sleep(Duration::from_millis(1)).await;
            let leadership = self.member.leadership();
            lock(&self.replica).leading = leadership.is_leader;
            if !leadership.is_leader {
                // Commands sent here wait for no one: their clients resend to the leader.
                if let Some(inbox) = lock(&self.shared.inboxes).get_mut(&self.node) {
                    inbox.clear();
                }
                continue;
            }
            if leadership.term != term {
                term = leadership.term;
                proposed.fill(None);
                lock(&self.shared.counts).leader_changes += 1;
                self.world.trace(&[32, self.node, term]);
            }
            let mut batch = Batch::default();
            let mut push = |entry: &Entry| batch.push(&postcard::to_allocvec(entry).expect("entries encode"));
            let inbound: Vec<Inbound> = lock(&self.shared.inboxes)
                .get_mut(&self.node)
                .map(|inbox| inbox.drain(..).collect())
                .unwrap_or_default();
            if !inbound.is_empty() {
                let (mut commands, mut tick, mut moves) = (Vec::new(), 0, Vec::new());
                for item in inbound {
                    match item {
                        Inbound::Command(command) => {
                            tick = tick.max(command.ts);
                            commands.push(command);
                        }
                        Inbound::Tick(stamp) => tick = tick.max(stamp),
                        Inbound::Move { symbol, to } => moves.push(Entry::MoveSymbol { symbol, to }),
                    }
                }
                commands.sort_by_key(|command| command.ts);
                push(&Entry::Clients { commands, tick });
                for entry in &moves {
                    push(entry);
                }
            }
            let cursors: Vec<u64> = {
                let replica = lock(&self.replica);
                (0..self.groups).map(|source| replica.machine.cursor(source)).collect()
            };
            let trimming = self.world.elapsed() >= last_trim + Duration::from_millis(50);
            if trimming {
                last_trim = self.world.elapsed();
            }
            for other in (0..self.groups).filter(|&g| g != self.group) {
                // A live replica of the other group, reachable from here.
                let Some(source) = self.reachable(other) else { continue };
                let source = lock(&source);
                // One ingest per source in flight; one that has not applied within
                // 50 ms (its entry lost with a deposed leader's log, say) is proposed
                // again from the cursor, and what was applied meanwhile is skipped.
                let now = self.world.elapsed();
                let waiting = proposed[other]
                    .is_some_and(|(upto, since)| cursors[other] < upto && now < since + Duration::from_millis(50));
                let mut from = cursors[other] + 1;
                if self.resends && self.world.rng(|rng| rng.gen_range(0..8)) == 0 {
                    // As a leader that lost track would: from before the cursor.
                    let back = self.world.rng(|rng| rng.gen_range(1..=8));
                    from = from.saturating_sub(back).max(source.machine.kept_from(self.group));
                }
                let (start, outputs) = source.machine.outputs(self.group, from, 256);
                if !waiting && start == from && outputs.len() as u64 > cursors[other] + 1 - from {
                    proposed[other] = Some((start + outputs.len() as u64 - 1, now));
                    lock(&self.shared.counts).ingests += 1;
                    push(&Entry::Ingest { source: other, from: start, outputs });
                }
                if trimming {
                    // Outputs a little behind the consumer's cursor are kept too, so
                    // that the resends above reach back over applied ones.
                    let upto = source.machine.cursor(self.group).saturating_sub(32);
                    let kept = lock(&self.replica).machine.kept_from(other);
                    if upto >= kept {
                        lock(&self.shared.counts).trims += 1;
                        push(&Entry::Trim { to: other, upto });
                    }
                }
            }
            if !batch.is_empty() {
                lock(&self.shared.counts).entries += 1;
                self.member.propose(batch);
            }
        }
    }

    /// A live replica of `group` this member can reach now, drawn at random.
    fn reachable(&self, group: usize) -> Option<Arc<Mutex<Replica>>> {
        let live: Vec<(NodeId, Arc<Mutex<Replica>>)> = lock(&self.shared.replicas)
            .iter()
            .filter(|(_, replica)| lock(replica).group == group)
            .map(|(id, replica)| (*id, Arc::clone(replica)))
            .collect();
        if live.is_empty() {
            return None;
        }
        let (id, replica) = live[self.world.rng(|rng| rng.gen_range(0..live.len()))].clone();
        match self.world.fate(self.node, id, 256) {
            Fate::Delivered { .. } => Some(replica),
            _ => None,
        }
    }
}

/// One client's state at the gateway.
struct Trader {
    client: ClientId,
    account: AccountId,
    /// The operator: creates accounts on the running groups (through the catalog's
    /// group), some with an external id and a deposit; it trades nothing.
    catalog: bool,
    seq: u64,
    /// Unanswered: seq → (command, when last sent).
    pending: BTreeMap<u64, (Command, Duration)>,
    /// Its orders that may rest.
    orders: Vec<(SymbolId, OrderId)>,
    /// Commands answered.
    done: Vec<u64>,
}

/// The gateway and its clients: see the module's docs.
struct Gateway {
    world: Arc<World>,
    shared: Arc<Shared>,
    map: ShardMap,
    groups: usize,
    traders: Vec<Trader>,
}

impl Gateway {
    fn now_stamp(&self) -> u64 {
        EPOCH_NS + self.world.elapsed().as_nanos() as u64
    }

    fn leader(&self, group: usize) -> Option<NodeId> {
        lock(&self.shared.members)
            .iter()
            .find(|(id, member)| (**id / 10) as usize == group && member.leadership().is_leader)
            .map(|(id, _)| *id)
    }

    fn send(&self, node: NodeId, item: Inbound) {
        let Fate::Delivered { delay, .. } = self.world.fate(GATEWAY, node, 64) else { return };
        let shared = Arc::clone(&self.shared);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if let Some(inbox) = lock(&shared.inboxes).get_mut(&node) {
                inbox.push_back(item);
            }
        });
    }

    fn new_command(&mut self, t: usize) -> Command {
        let stamp = self.now_stamp();
        let world = Arc::clone(&self.world);
        let trader = &mut self.traders[t];
        let account = trader.account;
        if trader.catalog {
            trader.seq += 1;
            let seq = trader.seq;
            // Now and then the operator closes the day: a cut across the groups.
            let body = world.rng(|rng| match rng.gen_range(0..6) {
                0 => CommandBody::CloseDay,
                1 | 2 => CommandBody::CreateAccount,
                _ => CommandBody::CreateAccountWithId {
                    external_id: 7_000_000 + seq,
                    asset: CASH,
                    deposit: Amount(rng.gen_range(0..10_000)),
                },
            });
            return Command { client: trader.client, seq, ts: stamp, body };
        }
        let body = world.rng(|rng| match rng.gen_range(0..100) {
            0..=4 => CommandBody::Deposit { account, asset: CASH, amount: Amount(rng.gen_range(1..10_000)) },
            5..=7 => CommandBody::Withdraw { account, asset: CASH, amount: Amount(rng.gen_range(1..1_000)) },
            8..=29 if !trader.orders.is_empty() => {
                let (symbol, order) = trader.orders.swap_remove(rng.gen_range(0..trader.orders.len()));
                CommandBody::Cancel { account, symbol, order }
            }
            // Now and then the account is suspended (its places and withdrawals refused
            // until it is resumed, which comes five times as often).
            30 => CommandBody::SuspendAccount { account },
            31..=35 => CommandBody::ResumeAccount { account },
            _ => {
                let symbol = SymbolId(rng.gen_range(0..SYMBOLS));
                let side = if rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
                let tif = match rng.gen_range(0..4) {
                    0 => Tif::Ioc,
                    1 => Tif::Day,
                    _ => Tif::Gtc,
                };
                let px = Px(rng.gen_range(95..=105));
                CommandBody::Place(OrderRequest::limit(account, symbol, side, px, Qty(rng.gen_range(1..10)), tif))
            }
        });
        trader.seq += 1;
        Command { client: trader.client, seq: trader.seq, ts: stamp, body }
    }

    /// The group trader `t`'s commands go to.
    fn group_of(&self, t: usize) -> usize {
        let trader = &self.traders[t];
        if trader.catalog {
            CATALOG_GROUP
        } else {
            self.map.account_group(trader.account)
        }
    }

    /// Takes in the answers that arrived.
    fn answers(&mut self) {
        let now = self.world.elapsed();
        let answers: Vec<Ack> = lock(&self.shared.answers).drain(..).collect();
        for ack in answers {
            let Some(trader) = self.traders.iter_mut().find(|t| t.client == ack.client) else { continue };
            if ack.outcome == Outcome::Rejected(Reject::SequenceGap) {
                // Not applied: it goes again soon, with its number.
                if let Some((_, sent)) = trader.pending.get_mut(&ack.seq) {
                    *sent = now.saturating_sub(RESEND_AFTER) + GAP_RETRY;
                }
                continue;
            }
            let Some((command, _)) = trader.pending.remove(&ack.seq) else { continue };
            if let (CommandBody::Place(request), Outcome::Ok { id }) = (&command.body, ack.outcome) {
                trader.orders.push((request.symbol, OrderId(id)));
            }
            trader.done.push(ack.seq);
            let mut counts = lock(&self.shared.counts);
            if let (CommandBody::CloseDay, Outcome::Ok { id }) = (&command.body, ack.outcome) {
                counts.days_closed += 1;
                counts.day_orders_expired += id;
                if !ack.repeat {
                    counts.closes.push(ack.stamp);
                }
            }
            counts.answered += 1;
            counts.repeats += u64::from(ack.repeat);
        }
    }

    /// One millisecond of the gateway: answers, new commands while `trading`, resends,
    /// ticks. Returns how many commands are unanswered.
    fn tick(&mut self, trading: bool) -> usize {
        self.answers();
        let now = self.world.elapsed();
        if trading {
            let t = self.world.rng(|rng| rng.gen_range(0..self.traders.len()));
            // The operator sends one command in eight of its turns.
            let turn = !self.traders[t].catalog || self.world.rng(|rng| rng.gen_range(0..8) == 0);
            if turn && self.traders[t].pending.len() < WINDOW {
                let command = self.new_command(t);
                let group = self.group_of(t);
                self.traders[t].pending.insert(command.seq, (command.clone(), now));
                lock(&self.shared.counts).commands += 1;
                if let Some(leader) = self.leader(group) {
                    self.send(leader, Inbound::Command(command));
                }
            }
        }
        for t in 0..self.traders.len() {
            let group = self.group_of(t);
            let stale: Vec<u64> = self.traders[t]
                .pending
                .iter()
                .filter(|(_, (_, sent))| now >= *sent + RESEND_AFTER)
                .map(|(&seq, _)| seq)
                .collect();
            for seq in stale {
                let entry = self.traders[t].pending.get_mut(&seq).expect("stale");
                entry.1 = now;
                let command = entry.0.clone();
                lock(&self.shared.counts).resends += 1;
                if let Some(leader) = self.leader(group) {
                    self.send(leader, Inbound::Command(command));
                }
            }
        }
        // Now and then (every two seconds or so) the operator moves a book to another
        // group, while the traders trade it.
        let first = usize::from(self.map.meta_group());
        if trading && self.groups > first + 1 && self.world.rng(|rng| rng.gen_range(0..2_000) == 0) {
            let (symbol, to) =
                self.world.rng(|rng| (SymbolId(rng.gen_range(0..SYMBOLS)), rng.gen_range(first..self.groups)));
            lock(&self.shared.counts).moves_sent += 1;
            if let Some(leader) = self.leader(CATALOG_GROUP) {
                self.send(leader, Inbound::Move { symbol, to });
            }
        }
        let stamp = self.now_stamp();
        for group in 0..self.groups {
            if let Some(leader) = self.leader(group) {
                self.send(leader, Inbound::Tick(stamp));
            }
        }
        self.traders.iter().map(|t| t.pending.len()).sum()
    }
}

/// Every group's state before its log: the catalog, the accounts and their funds, as a
/// metadata group's config stream and the operator's deposits would leave them (built
/// through [`Replicated`], the same for every replica).
fn genesis(map: ShardMap, clients: u64) -> (Vec<GroupMachine>, Vec<AccountId>) {
    let mut replicated = Replicated::with_map(map, EngineConfig::default(), 0, false);
    let mut seq = 0;
    let mut ts = EPOCH_NS - 1_000_000_000;
    let mut submit = |replicated: &mut Replicated, body: CommandBody| {
        seq += 1;
        ts += 1_000;
        let outcome = replicated.submit(Command { client: ADMIN, seq, ts, body }).expect("a supported command");
        replicated.drain();
        outcome
    };
    for (name, decimals) in std::iter::once(("USD".to_string(), 2)).chain((0..SYMBOLS).map(|s| (format!("S{s}"), 0))) {
        let created = submit(&mut replicated, CommandBody::CreateAsset { name: name.clone(), decimals });
        assert!(matches!(created, Some(Outcome::Ok { .. })), "genesis: asset {name}: {created:?}");
    }
    for s in 0..SYMBOLS {
        let spec = SymbolSpec {
            name: format!("S{s}/USD"),
            base: AssetId(1 + s),
            quote: CASH,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(10),
            px_max: Px(1_000_000),
            fee_maker: Amount(1),
            fee_taker: Amount(2),
            policy: MatchPolicy::Fifo,
        };
        let created = submit(&mut replicated, CommandBody::CreateSymbol(Box::new(spec)));
        assert!(matches!(created, Some(Outcome::Ok { .. })), "genesis: symbol {s}: {created:?}");
    }
    let mut accounts = Vec::new();
    for _ in 0..clients {
        let Some(Outcome::Ok { id }) = submit(&mut replicated, CommandBody::CreateAccount) else {
            panic!("genesis: an account was not created")
        };
        let account = AccountId(id as u32);
        accounts.push(account);
        submit(&mut replicated, CommandBody::Deposit { account, asset: CASH, amount: Amount(100_000_000) });
        for s in 0..SYMBOLS {
            submit(&mut replicated, CommandBody::Credit { account, asset: AssetId(1 + s), amount: Amount(100_000) });
        }
    }
    (replicated.machines().cloned().collect(), accounts)
}

/// Runs one sharded simulation on this thread.
pub fn run(options: ShardOptions) -> ShardReport {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&options.seed.to_le_bytes()));
    let runtime = builder.build().expect("a current-thread runtime builds");
    crate::world::watch_panics();
    bourse_cluster::runtime::seed_thread_rng(options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed);
    let world_options = Options {
        seed: options.seed,
        nodes: u64::from(options.groups) * options.nodes,
        gateways: 0,
        clients: options.clients,
        faults: options.faults,
        seconds: options.seconds,
        plant: None,
        print_trace: false,
    };
    let world =
        runtime.block_on(async { Arc::new(World::new(world_options, ChaCha8Rng::seed_from_u64(options.seed))) });
    let shared = Arc::new(Shared::default());
    let simulated = runtime.block_on(simulate(Arc::clone(&world), Arc::clone(&shared), options.clone()));
    drop(runtime);
    crate::world::report_panics(&world);
    let counts = lock(&world.counts).clone();
    let violations = lock(&world.ledger).violations.iter().map(|v| v.0.clone()).collect();
    let shard = lock(&shared.counts).clone();
    ShardReport { options, trace_hash: world.trace_hash(), simulated, counts, shard, violations }
}

async fn simulate(world: Arc<World>, shared: Arc<Shared>, options: ShardOptions) -> Duration {
    let (genesis, accounts) = genesis(options.map(), options.clients);
    let groups = options.groups as usize;
    let mut sim = Sim {
        world: Arc::clone(&world),
        shared: Arc::clone(&shared),
        rafts: Arc::default(),
        nodes: (0..groups)
            .flat_map(|group| {
                (0..options.nodes).map(move |index| ShardNode {
                    group,
                    index,
                    id: node_id(group, index),
                    disk: SimDisk::default(),
                    snapshots: SnapshotStore::memory(),
                    process: None,
                })
            })
            .collect(),
        genesis,
        options: options.clone(),
    };
    for at in 0..sim.nodes.len() {
        sim.start(at).await;
    }
    // The gateway is up for the fabric.
    lock(&world.up).insert(GATEWAY);
    let trader = |client, account, catalog| Trader {
        client: ClientId(client),
        account,
        catalog,
        seq: 0,
        pending: BTreeMap::new(),
        orders: Vec::new(),
        done: Vec::new(),
    };
    let mut traders: Vec<Trader> =
        accounts.iter().enumerate().map(|(n, &account)| trader(n as u64 + 1, account, false)).collect();
    traders.push(trader(OPERATOR_CLIENT, AccountId(0), true));
    let mut gateway =
        Gateway { world: Arc::clone(&world), shared: Arc::clone(&shared), map: options.map(), groups, traders };

    // Trading under faults, then the heal.
    world.trading.store(true, Ordering::Relaxed);
    let until = world.elapsed() + Duration::from_secs(options.seconds);
    lock(&world.conditions).rates = crate::rates(options.faults);
    let mut restarts: Vec<(Duration, usize)> = Vec::new();
    let mut heals: Vec<(Duration, Vec<(u64, u64)>)> = Vec::new();
    let mut next_fault = world.elapsed() + Duration::from_millis(world.rng(|rng| rng.gen_range(100..600)));
    let network = matches!(options.faults, Profile::Network | Profile::All);
    let disk = matches!(options.faults, Profile::Disk | Profile::All);
    while world.elapsed() < until {
        tokio::time::sleep(Duration::from_millis(1)).await;
        gateway.tick(true);
        let now = world.elapsed();
        for at in 0..sim.nodes.len() {
            if sim.nodes[at].process.as_ref().is_some_and(|(member, _, _)| member.stopped()) {
                sim.crash(at).await;
                restarts.push((now + Duration::from_millis(world.rng(|rng| rng.gen_range(20..1_000))), at));
            }
        }
        for at in world.due(now, &mut restarts, &mut heals) {
            if sim.nodes[at].process.is_none() {
                sim.start(at).await;
            }
        }
        if options.faults == Profile::Calm || now < next_fault {
            continue;
        }
        next_fault = now + Duration::from_millis(world.rng(|rng| rng.gen_range(100..900)));
        world.count(|c| c.faults += 1);
        let at = world.rng(|rng| rng.gen_range(0..sim.nodes.len()));
        if disk && (!network || world.rng(|rng| rng.gen_bool(0.5))) {
            if sim.nodes[at].process.is_some() {
                sim.crash(at).await;
                restarts.push((now + Duration::from_millis(world.rng(|rng| rng.gen_range(20..2_000))), at));
            }
        } else if network {
            // Cut one member off from the rest of its group.
            let (group, id) = (sim.nodes[at].group, sim.nodes[at].id);
            let links: Vec<(u64, u64)> = (0..options.nodes)
                .map(|i| node_id(group, i))
                .filter(|&other| other != id)
                .map(|other| (id.min(other), id.max(other)))
                .collect();
            lock(&world.conditions).cut.extend(links.iter().copied());
            world.count(|c| c.partitions += 1);
            world.trace(&[60, id]);
            heals.push((now + Duration::from_millis(world.rng(|rng| rng.gen_range(50..2_000))), links));
        }
    }

    // Heal: every link, every disk, every process; then every command is answered.
    *lock(&world.conditions) = Default::default();
    sim.restart_stopped().await;
    for at in 0..sim.nodes.len() {
        if sim.nodes[at].process.is_none() {
            sim.start(at).await;
        }
    }
    let healed = world.elapsed();
    world.trace(&[50, healed.as_nanos() as u64]);
    loop {
        tokio::time::sleep(Duration::from_millis(1)).await;
        // An fsync that failed as the disks healed stopped its member after the look
        // above.
        sim.restart_stopped().await;
        if gateway.tick(false) == 0 {
            break;
        }
        if world.elapsed() > healed + LIVENESS {
            world.violation(format!("liveness: commands unanswered {LIVENESS:?} after the heal"));
            break;
        }
    }
    converge(&mut sim, &mut gateway).await;
    check(&sim, &gateway);
    let simulated = world.elapsed();
    for at in 0..sim.nodes.len() {
        if let Some((member, _, front)) = sim.nodes[at].process.take() {
            front.abort();
            let _ = tokio::time::timeout(Duration::from_secs(5), member.stop()).await;
        }
    }
    simulated
}

/// Waits until every group's replicas have applied all that is committed and every
/// output has been ingested.
async fn converge(sim: &mut Sim, gateway: &mut Gateway) {
    let world = Arc::clone(&sim.world);
    let deadline = world.elapsed() + Duration::from_secs(20);
    let mut ticking = true;
    loop {
        sim.restart_stopped().await;
        // The gateway's ticks go on until no forward or settlement is left on its way
        // or in a merge (a forward waits until every source's watermark has passed
        // it); then they stop, so the logs stop growing and the replicas can be
        // compared once the last watermarks are ingested.
        for _ in 0..20 {
            tokio::time::sleep(Duration::from_millis(1)).await;
            if ticking {
                gateway.tick(false);
            }
        }
        let progress: Vec<(usize, (u64, u64))> = sim
            .nodes
            .iter()
            .filter_map(|node| node.process.as_ref().map(|(member, _, _)| (node.group, member.progress())))
            .collect();
        let applied = progress.len() == sim.nodes.len()
            && (0..sim.options.groups as usize).all(|g| {
                let of: Vec<(u64, u64)> = progress.iter().filter(|(group, _)| *group == g).map(|(_, p)| *p).collect();
                of.windows(2).all(|w| w[0] == w[1]) && of.first().is_some_and(|(a, c)| a == c)
            });
        let machines = leaders_machines(sim);
        let all = machines.len() == sim.options.groups as usize;
        let pending = |only_watermarks: bool| {
            machines.iter().enumerate().any(|(g, machine)| {
                machines.iter().enumerate().filter(|&(c, _)| c != g).any(|(c, consumer)| {
                    machine
                        .outputs_past(c, consumer.cursor(g))
                        .any(|output| !only_watermarks || !matches!(output, Output::Watermark(_)))
                })
            })
        };
        let merged = machines.iter().all(|machine| machine.symbol.merge.waiting() == 0);
        if all && merged && !pending(true) {
            ticking = false;
        }
        if !ticking && applied && !pending(false) {
            return;
        }
        if world.elapsed() > deadline {
            world.violation(format!("the groups did not converge within 20 s of the answers: {progress:?}"));
            return;
        }
    }
}

/// A copy of one replica's machine per group (the first live one).
fn leaders_machines(sim: &Sim) -> Vec<GroupMachine> {
    (0..sim.options.groups as usize)
        .filter_map(|g| {
            sim.nodes.iter().filter(|node| node.group == g).find_map(|node| {
                let (_, machine, _) = node.process.as_ref()?;
                Some(lock(&machine.replica).machine.clone())
            })
        })
        .collect()
}

fn check(sim: &Sim, gateway: &Gateway) {
    let world = &sim.world;
    // Every group's replicas hold one state.
    for g in 0..sim.options.groups as usize {
        let machines: Vec<(NodeId, GroupMachine)> = sim
            .nodes
            .iter()
            .filter(|node| node.group == g)
            .filter_map(|node| Some((node.id, lock(&node.process.as_ref()?.1.replica).machine.clone())))
            .collect();
        for (id, machine) in &machines[1..] {
            if !machine.same_state(&machines[0].1) {
                world.violation(format!("group {g}: node {id}'s state differs from node {}'s", machines[0].0));
            }
        }
        for (_, machine) in &machines {
            machine.symbol.engine().check_invariants();
        }
    }
    let machines = leaders_machines(sim);
    let refs: Vec<&GroupMachine> = machines.iter().collect();
    if let Err(broken) = conservation(&refs) {
        world.violation(format!("conservation across the groups: {broken}"));
    }
    // A meta group held no account's funds and no order, ever.
    if let Some(meta) = machines.first().filter(|_| sim.options.meta_group) {
        let engine = meta.symbol.engine();
        let orders = engine.open_order_records().len() + engine.closed_order_records().count();
        if meta.account.balances().next().is_some() || orders > 0 {
            world.violation(format!("the meta group holds balances or {orders} orders"));
        }
    }
    // Every command its client counts done was applied (an outcome was recorded when a
    // replica applied it), and is in its client's session record on every replica.
    let outcomes = lock(&sim.shared.outcomes);
    // Every move that started ended: the book came where it went, every group routes
    // its orders there, and none is still on its way or waiting to leave.
    if let Some(catalog) = machines.get(CATALOG_GROUP) {
        let moving: Vec<SymbolId> = catalog.moving().collect();
        if !moving.is_empty() {
            world.violation(format!("books still moving after the heal: {moving:?}"));
        }
    }
    for machine in &machines {
        if !machine.symbol.leaving.is_empty() || !machine.symbol.arriving.is_empty() {
            world.violation(format!(
                "group {}: books leaving {:?}, arriving {:?}",
                machine.group(),
                machine.symbol.leaving.keys().collect::<Vec<_>>(),
                machine.symbol.arriving
            ));
        }
    }
    for s in 0..SYMBOLS {
        let placed: Vec<usize> = machines.iter().map(|m| m.account.symbol_group(SymbolId(s))).collect();
        if placed.windows(2).any(|pair| pair[0] != pair[1]) {
            world.violation(format!("the groups place symbol {s}'s book apart: {placed:?}"));
        }
    }
    {
        let mut counts = lock(&sim.shared.counts);
        counts.books_moved = machines.iter().map(|m| m.books_received()).sum();
        counts.relayed = machines.iter().map(|m| m.cut_crossings().0).sum();
        counts.behind_cut = machines.iter().map(|m| m.cut_crossings().1).sum();
    }
    // Every close of the day was a cut at its stamp in every group: a Day order stamped
    // before a cut was closed by then (expired there, or filled or cancelled before).
    // The cuts: the stamps of the closes answered, and the close stamp of every order
    // one expired.
    let mut cuts: BTreeSet<u64> = lock(&sim.shared.counts).closes.iter().copied().collect();
    for machine in &machines {
        let engine = machine.symbol.engine();
        cuts.extend(engine.closed_order_records().filter(|r| r.status == OrderStatus::Expired).map(|r| r.ts_closed));
    }
    for machine in &machines {
        let engine = machine.symbol.engine();
        let records = engine.open_order_records().into_iter().chain(engine.closed_order_records());
        let open_past = |record: &OrderRecord| {
            let closed = if matches!(record.status, OrderStatus::Open | OrderStatus::Pending) {
                u64::MAX
            } else {
                record.ts_closed
            };
            (record.ts + 1 < closed).then(|| cuts.range(record.ts + 1..closed).next().copied()).flatten()
        };
        let escaped: Vec<(OrderId, u64)> = records
            .filter(|record| record.tif == Tif::Day)
            .filter_map(|record| open_past(record).map(|cut| (record.id, cut)))
            .collect();
        if let Some((order, cut)) = escaped.first() {
            world.violation(format!(
                "group {}: {} Day orders outlived a close of the day stamped after them (order {order}, the cut at {cut})",
                machine.group(),
                escaped.len()
            ));
        }
    }
    // Every group applied the same catalog commands (the genesis's and the operator's),
    // so each knows every account.
    let catalogs: Vec<(u64, usize)> = machines.iter().map(|m| (m.catalog(), m.account.accounts_known())).collect();
    if catalogs.windows(2).any(|pair| pair[0] != pair[1]) {
        world.violation(format!("the groups' (catalog commands, accounts) differ: {catalogs:?}"));
    }
    for (t, trader) in gateway.traders.iter().enumerate() {
        for seq in &trader.done {
            if !outcomes.contains_key(&(trader.client, *seq)) {
                world.violation(format!(
                    "client {}: command {seq} counted done, but no replica applied it",
                    trader.client
                ));
            }
        }
        let group = gateway.group_of(t);
        let last = trader.done.iter().max().copied().unwrap_or(0);
        for node in sim.nodes.iter().filter(|node| node.group == group) {
            let Some((_, machine, _)) = &node.process else { continue };
            let recorded = lock(&machine.replica).machine.account.session(trader.client);
            if recorded < last {
                world.violation(format!(
                    "client {}: command {last} was answered, but node {} records {recorded} as its last",
                    trader.client, node.id
                ));
            }
        }
    }
}

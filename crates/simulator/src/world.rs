//! The simulated world: one random source, virtual time, the network's and disks'
//! faults, the mailboxes of nodes and clients, and the trace every run is hashed by.
//!
//! Everything runs on one thread (a current-thread tokio runtime with its clock
//! paused: virtual time moves only when every task waits), and every random choice is
//! drawn from one generator seeded by the run's seed, in the order the tasks run, which
//! that same seed decides. So a seed is a run.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{DefaultHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard, Once};
use std::time::Duration;

use bourse_cluster::sim::{DiskWrite, Fabric, Fate, SimDisk};
use bourse_cluster::NodeId;
use bourse_engine::event::Outcome;
use bourse_fairness::Stamp;
use bourse_protocol::proto;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::Options;

/// Clients' ids on the fabric start here (nodes are 1..=n).
pub const CLIENT_BASE: u64 = 1_000;
/// Gateways' ids on the fabric start here.
pub const GATEWAY_BASE: u64 = 500;

/// Engine time at virtual time zero (2026-01-01T00:00:00Z), in nanoseconds.
pub const EPOCH_NS: u64 = 1_767_225_600_000_000_000;

pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A client's command on its way to a node, directly or through a gateway, in its wire
/// form (the client library's window makes it; the node converts it as its service does).
#[derive(Clone, Debug)]
pub struct ToNode {
    pub client: u64,
    pub command: proto::ClientCommand,
    /// The client's stream (connection) it was sent on: answers go back on it, and a
    /// client that has opened a new stream hears nothing more from the old one.
    pub stream: u64,
    /// The gateway's stamp, when it came through one.
    pub stamp: Option<Stamp>,
}

/// What reaches a node's front.
#[derive(Clone, Debug)]
pub enum NodeMsg {
    Command(Box<ToNode>),
    /// A gateway's watermark: it stamps nothing earlier from now on.
    Heartbeat {
        gateway: u32,
        watermark: u64,
    },
}

/// What reaches a gateway.
#[derive(Clone, Debug)]
pub enum GatewayMsg {
    /// A client's command, to stamp and forward.
    Command { client: u64, stream: u64, command: proto::ClientCommand },
    /// A node's answer for a client.
    Reply { client: u64, message: ToClient },
    /// A node that does not lead gives a command back.
    Refused { hint: Option<NodeId>, command: ToNode },
    /// Market data: the entry at `index`, to release at `release_ts` (gateway clock).
    Feed { index: u64, release_ts: u64 },
}

/// A node's message to a client.
#[derive(Clone, Debug)]
pub enum ToClient {
    /// The node's answer to one command, as the node sends it, on the client's stream.
    Ack(proto::Ack, u64),
    /// Not the leader; the leader, if known.
    NotLeader { hint: Option<NodeId>, stream: u64 },
}

/// How often each kind of fault strikes while faults are on.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rates {
    /// Share of messages lost, duplicated (per mille).
    pub loss: u32,
    pub duplicate: u32,
    /// Share of messages delayed by up to 50 ms instead of up to 2 ms (per mille).
    pub slow: u32,
    /// Share of disk writes whose fsync fails (per hundred thousand).
    pub fsync_fail: u32,
    /// Share of disk writes that take up to 30 ms (per mille).
    pub disk_slow: u32,
}

/// The network and disks as they are now.
#[derive(Debug, Default)]
pub struct Conditions {
    pub rates: Rates,
    /// Links cut both ways (pairs with the smaller id first).
    pub cut: BTreeSet<(NodeId, NodeId)>,
}

impl Conditions {
    fn is_cut(&self, a: NodeId, b: NodeId) -> bool {
        self.cut.contains(&(a.min(b), a.max(b)))
    }
}

/// What the run counted.
#[derive(Clone, Debug, Default)]
pub struct Counts {
    pub messages: u64,
    pub lost: u64,
    pub duplicated: u64,
    pub unreachable: u64,
    pub disk_writes: u64,
    pub fsync_failures: u64,
    pub crashes: u64,
    pub torn: u64,
    pub partitions: u64,
    pub faults: u64,
    pub commands_applied: u64,
    pub acks: u64,
    pub resends: u64,
    pub snapshots_installed: u64,
    pub market_data: u64,
    pub clock_jumps: u64,
}

impl Counts {
    /// The faults and the messages' fates, as a report line shows them.
    pub fn fabric(&self) -> String {
        format!(
            "{} faults ({} crashes, {} torn writes, {} fsync failures, {} partitions), {} messages ({} lost, {} duplicated)",
            self.faults, self.crashes, self.torn, self.fsync_failures, self.partitions, self.messages, self.lost, self.duplicated
        )
    }
}

/// Writes up to ten violations, one a line, and how many more there were.
pub fn write_violations(f: &mut std::fmt::Formatter<'_>, violations: &[String]) -> std::fmt::Result {
    for violation in violations.iter().take(10) {
        write!(f, "\n  violation: {violation}")?;
    }
    if violations.len() > 10 {
        write!(f, "\n  … and {} more violations", violations.len() - 10)?;
    }
    Ok(())
}

/// A rule the run broke.
#[derive(Clone, Debug)]
pub struct Violation(pub String);

/// What replicas applied, for the checks.
#[derive(Debug, Default)]
pub struct Ledger {
    /// The outcome of each `(client, seq)`'s one application, as the first replica saw it.
    pub outcomes: BTreeMap<(u64, u64), Outcome>,
    /// What was applied at each log index, first seen: (term, node, hash of the
    /// commands). Every replica must apply the same entry at an index.
    pub entries: BTreeMap<u64, (u64, u64, u64)>,
    /// Violations seen while the run went on.
    pub violations: Vec<Violation>,
}

pub struct World {
    pub options: Options,
    rng: Mutex<ChaCha8Rng>,
    trace: Mutex<DefaultHasher>,
    pub conditions: Mutex<Conditions>,
    pub counts: Mutex<Counts>,
    pub ledger: Mutex<Ledger>,
    /// Mailboxes of the nodes that are up, of the gateways and of the clients.
    pub nodes: Mutex<BTreeMap<NodeId, mpsc::UnboundedSender<(u64, NodeMsg)>>>,
    pub gateways: Mutex<BTreeMap<u64, mpsc::UnboundedSender<GatewayMsg>>>,
    pub clients: Mutex<BTreeMap<u64, mpsc::UnboundedSender<ToClient>>>,
    /// The connections between clients, gateways and node fronts, by (from, to).
    links: Mutex<BTreeMap<(u64, u64), Link>>,
    /// Set once setup is done and trading under faults begins.
    pub trading: std::sync::atomic::AtomicBool,
    /// Each gateway's clock: offset from true time (ns) and drift (parts per million).
    pub gateway_clock: Mutex<BTreeMap<u64, (i64, i64)>>,
    /// Each node's clock offset from true time, in nanoseconds.
    pub clock_offset_ns: Mutex<BTreeMap<NodeId, i64>>,
    start: Instant,
}

impl World {
    pub fn new(options: Options, rng: ChaCha8Rng) -> World {
        World {
            options,
            rng: Mutex::new(rng),
            trace: Mutex::new(DefaultHasher::new()),
            conditions: Mutex::default(),
            counts: Mutex::default(),
            ledger: Mutex::default(),
            nodes: Mutex::default(),
            gateways: Mutex::default(),
            clients: Mutex::default(),
            links: Mutex::default(),
            trading: Default::default(),
            clock_offset_ns: Mutex::default(),
            gateway_clock: Mutex::default(),
            start: Instant::now(),
        }
    }

    /// Runs `f` with the run's random source.
    pub fn rng<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        f(&mut lock(&self.rng))
    }

    /// Adds values to the trace.
    pub fn trace(&self, values: &[u64]) {
        let mut trace = lock(&self.trace);
        if self.options.print_trace {
            eprintln!("{:?} {values:?}", self.elapsed());
        }
        for value in values {
            trace.write_u64(*value);
        }
    }

    /// A process on `node` dies: its disk keeps what was durable and, half the time, a
    /// torn prefix of the write in flight (counted and traced).
    pub fn crash_disk(&self, node: NodeId, disk: &SimDisk) {
        let torn = self.rng(|rng| rng.gen_bool(0.5));
        let mut kept = 0;
        disk.crash(|len| {
            kept = if torn && len > 0 { self.rng(|rng| rng.gen_range(0..=len)) } else { 0 };
            kept
        });
        self.count(|c| {
            c.crashes += 1;
            if kept > 0 {
                c.torn += 1;
            }
        });
        self.trace(&[31, node, kept as u64]);
    }

    /// Restarts due by `now`, taken out of `restarts` ((when, which) pairs), and every cut
    /// whose heal is due mended.
    pub fn due(
        &self,
        now: Duration,
        restarts: &mut Vec<(Duration, usize)>,
        heals: &mut Vec<(Duration, Vec<(u64, u64)>)>,
    ) -> Vec<usize> {
        let due: Vec<usize> = restarts.iter().filter(|(at, _)| *at <= now).map(|(_, i)| *i).collect();
        restarts.retain(|(at, _)| *at > now);
        for (_, links) in heals.iter().filter(|(at, _)| *at <= now) {
            let mut conditions = lock(&self.conditions);
            for link in links {
                conditions.cut.remove(link);
            }
        }
        heals.retain(|(at, _)| *at > now);
        due
    }

    pub fn trace_hash(&self) -> u64 {
        lock(&self.trace).finish()
    }

    pub fn count(&self, f: impl FnOnce(&mut Counts)) {
        f(&mut lock(&self.counts));
    }

    pub fn violation(&self, why: String) {
        lock(&self.ledger).violations.push(Violation(why));
    }

    /// Virtual time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// A node's clock, as engine time: true time plus its offset.
    pub fn node_now_ns(&self, node: NodeId) -> u64 {
        let offset = lock(&self.clock_offset_ns).get(&node).copied().unwrap_or(0);
        let true_ns = EPOCH_NS + self.elapsed().as_nanos() as u64;
        true_ns.saturating_add_signed(offset)
    }

    /// A gateway's clock: true time plus its offset and drift.
    pub fn gateway_now_ns(&self, gateway: u64) -> u64 {
        let (offset, drift_ppm) = lock(&self.gateway_clock).get(&gateway).copied().unwrap_or((0, 0));
        let elapsed = self.elapsed().as_nanos() as i64;
        let true_ns = EPOCH_NS + elapsed as u64;
        true_ns.saturating_add_signed(offset + elapsed / 1_000_000 * drift_ppm)
    }

    /// The fate of one message; `stream`: on a connection (no duplicates).
    fn fate_of(&self, from: NodeId, to: NodeId, bytes: usize, to_up: bool, stream: bool) -> Fate {
        let conditions = lock(&self.conditions);
        let rates = conditions.rates;
        let nodes_cut = from < GATEWAY_BASE && to < GATEWAY_BASE && conditions.is_cut(from, to);
        drop(conditions);
        let fate = self.rng(|rng| {
            if !to_up || (nodes_cut && rng.gen_bool(0.5)) {
                return Fate::Unreachable { after: Duration::from_micros(rng.gen_range(100..5_000)) };
            }
            if nodes_cut || rng.gen_range(0..1000) < rates.loss {
                return Fate::Lost;
            }
            let slow = rng.gen_range(0..1000) < rates.slow;
            let delay =
                Duration::from_micros(if slow { rng.gen_range(2_000..50_000) } else { rng.gen_range(50..2_000) });
            let copy = (!stream && rng.gen_range(0..1000) < rates.duplicate)
                .then(|| Duration::from_micros(rng.gen_range(0..5_000)));
            Fate::Delivered { delay, copy }
        });
        let (kind, ns) = match fate {
            Fate::Unreachable { after } => (1, after.as_nanos() as u64),
            Fate::Lost => (2, 0),
            Fate::Delivered { delay, copy } => (3 + u64::from(copy.is_some()), delay.as_nanos() as u64),
        };
        self.trace(&[10, from, to, bytes as u64, kind, ns]);
        self.count(|c| {
            c.messages += 1;
            match kind {
                1 => c.unreachable += 1,
                2 => c.lost += 1,
                4 => c.duplicated += 1,
                _ => {}
            }
        });
        fate
    }

    /// Sends a message to a node through the fabric (`from`: a fabric id).
    pub fn to_node(self: &Arc<Self>, from: u64, node: NodeId, message: NodeMsg) {
        let up = lock(&self.nodes).contains_key(&node);
        let fate = self.fate_of(from, node, 64, up, true);
        self.deliver(from, node, fate, move |world| {
            if let Some(inbox) = lock(&world.nodes).get(&node) {
                let _ = inbox.send((from, message));
            }
        });
    }

    /// Sends a message to a gateway (by number) through the fabric.
    pub fn to_gateway(self: &Arc<Self>, from: u64, gateway: u64, message: GatewayMsg) {
        let fate = self.fate_of(from, GATEWAY_BASE + gateway, 64, true, true);
        self.deliver(from, GATEWAY_BASE + gateway, fate, move |world| {
            if let Some(inbox) = lock(&world.gateways).get(&gateway) {
                let _ = inbox.send(message);
            }
        });
    }

    /// Sends an answer to a client (by number) through the fabric (`from`: a fabric id).
    pub fn to_client(self: &Arc<Self>, from: u64, client: u64, message: ToClient) {
        let fate = self.fate_of(from, CLIENT_BASE + client, 32, true, true);
        self.deliver(from, CLIENT_BASE + client, fate, move |world| {
            if let Some(inbox) = lock(&world.clients).get(&client) {
                let _ = inbox.send(message);
            }
        });
    }

    /// Answers a client where its command came from: to the client, or to its gateway.
    pub fn answer(self: &Arc<Self>, node: NodeId, via: u64, client: u64, message: ToClient) {
        if via >= CLIENT_BASE {
            self.to_client(node, client, message);
        } else {
            self.to_gateway(node, via - GATEWAY_BASE, GatewayMsg::Reply { client, message });
        }
    }

    /// Delivers on the link `from → to` as a TCP connection does: in the order sent
    /// (each message after its own delay, but never before the one sent ahead of it)
    /// and never twice. A lost message is gone; those behind it still arrive.
    fn deliver(self: &Arc<Self>, from: u64, to: u64, fate: Fate, put: impl FnOnce(&World) + Send + 'static) {
        let Fate::Delivered { delay, .. } = fate else { return };
        let mut links = lock(&self.links);
        let link = links.entry((from, to)).or_default();
        let arrival = (self.elapsed() + delay).max(link.last_arrival);
        link.last_arrival = arrival;
        link.queue.push_back((arrival, Box::new(put)));
        if link.busy {
            return;
        }
        link.busy = true;
        drop(links);
        let world = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let next = {
                    let mut links = lock(&world.links);
                    let link = links.get_mut(&(from, to)).expect("the link exists");
                    match link.queue.pop_front() {
                        Some(next) => next,
                        None => {
                            link.busy = false;
                            return;
                        }
                    }
                };
                let (arrival, put) = next;
                tokio::time::sleep(arrival.saturating_sub(world.elapsed())).await;
                put(&world);
            }
        });
    }
}

/// What a message does when it arrives.
type Delivery = Box<dyn FnOnce(&World) + Send>;

/// One direction of a client's, gateway's or node front's connection.
#[derive(Default)]
pub struct Link {
    queue: std::collections::VecDeque<(Duration, Delivery)>,
    last_arrival: Duration,
    busy: bool,
}

impl Fabric for World {
    fn fate(&self, from: NodeId, to: NodeId, bytes: usize) -> Fate {
        let up = lock(&self.nodes).contains_key(&to);
        self.fate_of(from, to, bytes, up, false)
    }

    fn disk_write(&self, node: NodeId, bytes: usize) -> DiskWrite {
        let rates = lock(&self.conditions).rates;
        let write = self.rng(|rng| {
            if rng.gen_range(0..100_000) < rates.fsync_fail {
                return DiskWrite::Fails;
            }
            let slow = rng.gen_range(0..1000) < rates.disk_slow;
            DiskWrite::After(Duration::from_micros(if slow {
                rng.gen_range(2_000..30_000)
            } else {
                rng.gen_range(200..1_500)
            }))
        });
        let ns = match write {
            DiskWrite::After(latency) => latency.as_nanos() as u64,
            DiskWrite::Fails => u64::MAX,
        };
        self.trace(&[11, node, bytes as u64, ns]);
        self.count(|c| {
            c.disk_writes += 1;
            if write == DiskWrite::Fails {
                c.fsync_failures += 1;
            }
        });
        write
    }
}

thread_local! {
    /// Panics on this thread since [`watch_panics`]: a run is one thread, and a panic in
    /// one of its tasks (a member's Raft core, say) ends that task only.
    static PANICS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
}

/// Starts recording this thread's panics (the process's panic hook is chained once):
/// tokio ends a task that panics and runs on, so a run would otherwise pass with a
/// member's core dead, its panic only printed.
pub fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|panics| panics.borrow_mut().push(info.to_string().replace('\n', " ")));
            previous(info);
        }));
    });
    PANICS.with(|panics| panics.borrow_mut().clear());
}

/// The panics on this thread since [`watch_panics`], as violations of `world`.
pub fn report_panics(world: &World) {
    for panic in PANICS.with(|panics| std::mem::take(&mut *panics.borrow_mut())) {
        world.violation(format!("a task panicked: {panic}"));
    }
}

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
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tokio::time::Instant;

use crate::oracle::Oracle;
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
    /// Messages on client, gateway and node connections lost and sent again, and
    /// connections reset.
    pub retransmitted: u64,
    pub resets: u64,
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
    /// The node processes that are up (where the fabric delivers).
    pub up: Mutex<BTreeSet<NodeId>>,
    /// Each node's running process, where clients and gateways reach its services.
    pub processes: Mutex<BTreeMap<NodeId, Arc<bourse_node::SimulatedNode>>>,
    /// The log as the checks know it ([`Oracle`]).
    pub oracle: Mutex<Oracle>,
    /// When, and by whom, each log entry, by (index, term), was first appended: by its
    /// leader, the instant it proposed the entry (the sequencer released its commands
    /// then).
    pub appends: Mutex<BTreeMap<(u64, u64), (Duration, NodeId)>>,
    /// Each entry's release time t_R, as its node's feed carried it (before a planted
    /// bug could change it).
    pub release_times: Mutex<BTreeMap<u64, u64>>,
    /// The open connections between clients, gateways and nodes ([`crate::net`]).
    pub connections: Mutex<Vec<std::sync::Weak<crate::net::Conn>>>,
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
            up: Mutex::default(),
            processes: Mutex::default(),
            oracle: Mutex::new(Oracle::new(bourse_engine::Engine::new(
                bourse_node::NodeConfig::default().engine_config(),
            ))),
            appends: Mutex::default(),
            release_times: Mutex::default(),
            connections: Mutex::default(),
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

    /// A committed entry `node` is about to apply: compared with what others applied
    /// there, and replayed by the oracle the first time.
    pub fn observe(&self, node: NodeId, entry: &bourse_cluster::state_machine::Committed) {
        self.trace(&[20, node, entry.index, entry.term, entry.batch.as_ref().map_or(0, |b| b.len() as u64)]);
        let proposed = lock(&self.appends).get(&(entry.index, entry.term)).copied();
        let mut ledger = lock(&self.ledger);
        let (found, applied) = lock(&self.oracle).observe(node, entry, proposed, &mut ledger.entries);
        ledger.violations.extend(found.into_iter().map(Violation));
        drop(ledger);
        self.count(|c| c.commands_applied += applied);
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
    pub fn fate_of(&self, from: NodeId, to: NodeId, bytes: usize, to_up: bool, stream: bool) -> Fate {
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
}

impl Fabric for World {
    fn fate(&self, from: NodeId, to: NodeId, bytes: usize) -> Fate {
        let up = lock(&self.up).contains(&to);
        self.fate_of(from, to, bytes, up, false)
    }

    fn appended(&self, node: NodeId, entries: &[(u64, u64)]) {
        let now = self.elapsed();
        let mut appends = lock(&self.appends);
        for entry in entries {
            appends.entry(*entry).or_insert((now, node));
        }
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

//! # bourse-simulator
//!
//! A whole cluster in one thread, from a seed: `bourse sim --seed S`.
//!
//! The real nodes run here — core, fair sequencer, sessions, gateway links, feed, Raft
//! member (openraft with the node's configuration, the Raft state machine with its
//! snapshots) and the engine, started by `bourse_node::Node::start_simulated` — and the
//! real gateways (`bourse_gateway::Gateway::start_in_process`: sessions, stamps, link,
//! feed, market data hold-and-release); clients keep commands in flight in the client
//! library's own `Window` and speak `OrderEntry.Session` to them. Only what touches the
//! machine is simulated: the Raft network and disks ([`bourse_cluster::sim`]: delays,
//! losses, duplicates, reordering, cut links, latency, failing `fsync`s, torn writes),
//! the connections between clients, gateways and nodes (`net.rs`), the processes that
//! crash and restart, and every clock (`bourse_fairness::Clock`: each node's and
//! gateway's skewed, drifting and jumping). Time is virtual (a current-thread tokio
//! runtime whose clock only moves when every task waits) and every random choice,
//! openraft's election timeouts and tokio's own included
//! ([`bourse_cluster::runtime`], `Builder::rng_seed`), comes from the seed: the same
//! seed is the same run, and prints the same trace hash.
//!
//! Checks, as the run goes and after the faults heal, against the simulator's own
//! replay of the log (`oracle.rs`): every replica applies the same entry at each index
//! and ends with the replay's state hash; no acknowledged command is lost and none
//! applied twice (each client's answers against the replay's session record and
//! outcomes, and money and shares against what the clients' applied deposits, issues
//! and withdrawals add up to); the engine's invariants on every replica; every node's
//! queue-depth gauge at 0 at rest; the sequencer releases in stamp order what was
//! waiting; no gateway releases market data before its release time; and liveness —
//! every client's command in flight is answered within [`LIVENESS`] of the heal.

mod client;
mod gateway;
mod net;
mod node;
mod oracle;
pub mod shards;
mod world;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use bourse_cluster::sim::Rafts;
use bourse_engine::command::{CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::event::Outcome;
use bourse_engine::{AccountId, Amount, AssetId, ClientId, Px, Qty, SymbolId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::client::{Client, ClientLog, Market, Via};
use crate::node::{Node, Tap};
pub use crate::world::Counts;
use crate::world::{lock, Rates, World};

/// How long after the faults heal every client's command in flight must be answered.
pub const LIVENESS: Duration = Duration::from_secs(30);

/// Which faults strike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// None: the happy path.
    Calm,
    /// Message loss, duplication, slow links and partitions (and clock jumps).
    Network,
    /// Slow disks, failing fsyncs, crashes with torn writes (and clock jumps).
    Disk,
    /// All of them.
    All,
}

impl Profile {
    /// Each profile with its name on the command line.
    const NAMES: [(Profile, &'static str); 4] =
        [(Profile::Calm, "calm"), (Profile::Network, "network"), (Profile::Disk, "disk"), (Profile::All, "all")];
}

impl Plant {
    /// Each planted bug with its name on the command line.
    const NAMES: [(Plant, &'static str); 4] = [
        (Plant::AckBeforeCommit, "ack-before-commit"),
        (Plant::SkipDuplicateCheck, "skip-duplicate-check"),
        (Plant::StaleSnapshot, "stale-snapshot"),
        (Plant::EarlyMarketData, "early-market-data"),
    ];
}

/// Parses and prints an enum by its table of names.
macro_rules! named {
    ($type:ty, $what:literal) => {
        impl FromStr for $type {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                let found = <$type>::NAMES.iter().find(|(_, name)| *name == s);
                found.map(|(value, _)| *value).ok_or_else(|| {
                    let names: Vec<&str> = <$type>::NAMES.iter().map(|(_, name)| *name).collect();
                    format!("unknown {} `{s}` ({})", $what, names.join(", "))
                })
            }
        }

        impl fmt::Display for $type {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let name = <$type>::NAMES.iter().find(|(value, _)| value == self).map_or("?", |(_, name)| *name);
                f.write_str(name)
            }
        }
    };
}

named!(Profile, "fault profile");
named!(Plant, "planted bug");

/// A bug planted on purpose, to show that the checks find it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plant {
    /// The node answers a command when it hands it to Raft, before it is committed.
    AckBeforeCommit,
    /// A command the session record knows is executed again.
    SkipDuplicateCheck,
    /// A node installs (or restarts from) the oldest snapshot it has instead of the one
    /// it was given: a state older than the log it claims.
    StaleSnapshot,
    /// Gateways release market data as it arrives, not at its release time.
    EarlyMarketData,
}

/// One run's settings.
#[derive(Clone, Debug)]
pub struct Options {
    pub seed: u64,
    pub nodes: u64,
    /// Gateways the clients send through (0: straight to the nodes).
    pub gateways: u64,
    pub clients: u64,
    pub faults: Profile,
    /// Virtual seconds of trading under faults.
    pub seconds: u64,
    pub plant: Option<Plant>,
    /// Prints every trace event (virtual time and values) to stderr as it happens: two
    /// runs of a seed print the same lines, and a failure can be followed step by step.
    pub print_trace: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            seed: 1,
            nodes: 3,
            gateways: 2,
            clients: 4,
            faults: Profile::All,
            seconds: 10,
            plant: None,
            print_trace: false,
        }
    }
}

/// What a run did and found.
#[derive(Clone, Debug)]
pub struct Report {
    pub options: Options,
    pub trace_hash: u64,
    /// The replicas' common state hash (hex), when they agree.
    pub state_hash: Option<String>,
    pub simulated: Duration,
    pub counts: Counts,
    pub violations: Vec<String>,
}

impl Report {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.counts;
        write!(
            f,
            "seed {}: {} — trace {:016x}, {:.1} s simulated, {}, {} commands applied, {} answers, {} resends, \
             {} snapshots installed, {} market data releases",
            self.options.seed,
            if self.passed() { "ok" } else { "FAILED" },
            self.trace_hash,
            self.simulated.as_secs_f64(),
            c.fabric(),
            c.commands_applied,
            c.acks,
            c.resends,
            c.snapshots_installed,
            c.market_data,
        )?;
        world::write_violations(f, &self.violations)
    }
}

/// Whether this build replays a seed exactly: tokio's internal random source is seeded
/// only in builds with `--cfg tokio_unstable` (set in `.cargo/config.toml`).
pub const REPRODUCIBLE: bool = cfg!(tokio_unstable);

/// Runs one simulation on this thread.
pub fn run(options: Options) -> Report {
    let mut builder = tokio::runtime::Builder::new_current_thread();
    builder.enable_time().start_paused(true);
    // tokio's own random choices (which notifier a watch channel's waiter joins, and so
    // the order waiters wake in) from the seed too: see .cargo/config.toml.
    #[cfg(tokio_unstable)]
    builder.rng_seed(tokio::runtime::RngSeed::from_bytes(&options.seed.to_le_bytes()));
    let runtime = builder.build().expect("a current-thread runtime builds");
    crate::world::watch_panics();
    // openraft's election timeouts come from this thread's generator: seeded by the run.
    bourse_cluster::runtime::seed_thread_rng(options.seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x5eed);
    // Made inside the runtime, so that its start is virtual time's zero.
    let world =
        runtime.block_on(async { Arc::new(World::new(options.clone(), ChaCha8Rng::seed_from_u64(options.seed))) });
    let (state_hash, simulated) = runtime.block_on(simulate(Arc::clone(&world)));
    drop(runtime);
    crate::world::report_panics(&world);
    let counts = lock(&world.counts).clone();
    let violations = lock(&world.ledger).violations.iter().map(|v| v.0.clone()).collect();
    Report { options, trace_hash: world.trace_hash(), state_hash, simulated, counts, violations }
}

struct Cluster {
    world: Arc<World>,
    rafts: Rafts<Tap>,
    nodes: Vec<Node>,
}

impl Cluster {
    async fn crash(&mut self, index: usize) {
        self.nodes[index].crash(&self.world, &self.rafts).await;
    }

    async fn start(&mut self, index: usize) {
        if let Err(error) = self.nodes[index].start(&self.world, &self.rafts).await {
            self.world.violation(format!("node {} does not restart: {error}", self.nodes[index].id));
        }
    }

    fn stopped(&self, index: usize) -> bool {
        self.nodes[index].process.as_ref().is_some_and(|p| p.stopped())
    }
}

async fn simulate(world: Arc<World>) -> (Option<String>, Duration) {
    let options = world.options.clone();
    for id in 1..=options.nodes {
        let offset = world.rng(|rng| rng.gen_range(-2_000_000..=2_000_000));
        lock(&world.clock_offset_ns).insert(id, offset);
    }
    let mut gateways = Vec::new();
    for number in 0..options.gateways {
        let clock = world.rng(|rng| (rng.gen_range(-1_000_000..=1_000_000), rng.gen_range(-100..=100)));
        lock(&world.gateway_clock).insert(number, clock);
        match gateway::start(number, &world).await {
            Ok(gateway) => gateways.push(gateway),
            Err(error) => {
                world.violation(format!("gateway {number} does not start: {error}"));
                return (None, world.elapsed());
            }
        }
    }
    let mut cluster = Cluster {
        world: Arc::clone(&world),
        rafts: Arc::default(),
        nodes: (1..=options.nodes).map(Node::new).collect(),
    };
    for index in 0..cluster.nodes.len() {
        cluster.start(index).await;
    }

    // Setup, without faults: the market and one account per client.
    let mut admin = Client::new(0, Via::Nodes, &world);
    let asset = |outcome: Option<Outcome>| match outcome {
        Some(Outcome::Ok { id }) => Some(id),
        _ => None,
    };
    let cash = asset(admin.call(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await);
    let shares = asset(admin.call(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }).await);
    let (Some(cash), Some(shares)) = (cash, shares) else {
        world.violation("setup: the assets were not created".into());
        return (None, world.elapsed());
    };
    let (cash, shares) = (AssetId(cash as u32), AssetId(shares as u32));
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: shares,
        quote: cash,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    };
    let Some(symbol) = asset(admin.call(CommandBody::CreateSymbol(Box::new(spec))).await) else {
        world.violation("setup: the symbol was not created".into());
        return (None, world.elapsed());
    };
    let market = Market { cash, shares, symbol: SymbolId(symbol as u32) };
    let mut accounts = Vec::new();
    for _ in 0..options.clients {
        match asset(admin.call(CommandBody::CreateAccount).await) {
            Some(id) => accounts.push(AccountId(id as u32)),
            None => {
                world.violation("setup: an account was not created".into());
                return (None, world.elapsed());
            }
        }
    }

    // Trading under faults.
    world.trading.store(true, std::sync::atomic::Ordering::Relaxed);
    let until = world.elapsed() + Duration::from_secs(options.seconds);
    let mut traders = Vec::new();
    for (n, account) in accounts.iter().enumerate() {
        let via = match options.gateways {
            0 => Via::Nodes,
            g => {
                let number = n as u64 % g;
                client::via_gateway(number, &gateways[number as usize])
            }
        };
        let mut client = Client::new(n as u64 + 1, via, &world);
        let account = *account;
        traders.push(tokio::spawn(async move {
            client.trade(account, market, until).await;
            (client.engine_id, client.id, client.log)
        }));
    }
    inject_faults(&mut cluster, until).await;

    // Heal: every link, every disk, every process (one whose disk failed since the
    // last look has stopped: it crashes and starts again at once).
    *lock(&world.conditions) = Default::default();
    for index in 0..cluster.nodes.len() {
        if cluster.stopped(index) {
            cluster.crash(index).await;
        }
        if cluster.nodes[index].process.is_none() {
            cluster.start(index).await;
        }
    }
    let healed = world.elapsed();
    world.trace(&[50, healed.as_nanos() as u64]);
    let mut logs = vec![(admin.engine_id, 0, admin.log)];
    for trader in traders {
        match tokio::time::timeout_at(tokio::time::Instant::now() + LIVENESS, trader).await {
            Ok(Ok(log)) => logs.push(log),
            Ok(Err(error)) => world.violation(format!("a client task failed: {error}")),
            Err(_) => {
                world.violation(format!("liveness: a client's command is unanswered {LIVENESS:?} after the heal"))
            }
        }
    }

    let state_hash = converge(&cluster).await;
    check(&cluster, &logs, market, &accounts, state_hash.is_some()).await;
    for (number, gateway) in gateways.iter().enumerate() {
        gateway::check_releases(&world, number as u64, gateway);
    }
    let simulated = world.elapsed();
    for gateway in gateways {
        gateway.shutdown().await;
    }
    for node in &mut cluster.nodes {
        if let Some(process) = node.process.take() {
            let _ = tokio::time::timeout(Duration::from_secs(5), process.crash()).await;
        }
    }
    (state_hash, simulated)
}

/// The network's and disks' fault rates under a profile.
fn rates(profile: Profile) -> Rates {
    let network = matches!(profile, Profile::Network | Profile::All);
    let disk = matches!(profile, Profile::Disk | Profile::All);
    Rates {
        loss: if network { 20 } else { 0 },
        duplicate: if network { 20 } else { 0 },
        slow: if network { 30 } else { 0 },
        fsync_fail: if disk { 100 } else { 0 },
        disk_slow: if disk { 20 } else { 0 },
    }
}

/// Strikes faults at random until `until`, each healed after a while.
async fn inject_faults(cluster: &mut Cluster, until: Duration) {
    let world = Arc::clone(&cluster.world);
    let profile = world.options.faults;
    let network = matches!(profile, Profile::Network | Profile::All);
    let disk = matches!(profile, Profile::Disk | Profile::All);
    lock(&world.conditions).rates = rates(profile);
    let n = cluster.nodes.len();
    // (when, node index) restarts and (when, link) heals due.
    let mut restarts: Vec<(Duration, usize)> = Vec::new();
    let mut heals: Vec<(Duration, Vec<(u64, u64)>)> = Vec::new();
    let mut next_fault = world.elapsed() + Duration::from_millis(world.rng(|rng| rng.gen_range(100..600)));
    while world.elapsed() < until {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = world.elapsed();
        // A process whose disk failed has stopped: it crashes, and restarts later.
        for index in 0..n {
            if cluster.stopped(index) {
                cluster.crash(index).await;
                let after = Duration::from_millis(world.rng(|rng| rng.gen_range(20..1_000)));
                restarts.push((now + after, index));
            }
        }
        for index in world.due(now, &mut restarts, &mut heals) {
            if cluster.nodes[index].process.is_none() {
                cluster.start(index).await;
            }
        }
        if profile == Profile::Calm || now < next_fault {
            continue;
        }
        next_fault = now + Duration::from_millis(world.rng(|rng| rng.gen_range(100..900)));
        let kind = world.rng(|rng| rng.gen_range(0..4));
        world.count(|c| c.faults += 1);
        match kind {
            // Crash a node; it restarts after a while.
            0 | 1 if disk => {
                let index = world.rng(|rng| rng.gen_range(0..n));
                if cluster.nodes[index].process.is_some() {
                    cluster.crash(index).await;
                    let after = Duration::from_millis(world.rng(|rng| rng.gen_range(20..2_000)));
                    restarts.push((now + after, index));
                }
            }
            // Cut one node off, or split the cluster in two.
            0..=2 if network => {
                let (mut links, isolate) = (Vec::new(), world.rng(|rng| rng.gen_bool(0.5)));
                let side: Vec<bool> = world.rng(|rng| {
                    let lone = rng.gen_range(0..n);
                    (0..n).map(|i| if isolate { i == lone } else { rng.gen_bool(0.5) }).collect()
                });
                for a in 0..n {
                    for b in a + 1..n {
                        if side[a] != side[b] {
                            links.push((a as u64 + 1, b as u64 + 1));
                        }
                    }
                }
                lock(&world.conditions).cut.extend(links.iter().copied());
                world.count(|c| c.partitions += 1);
                world.trace(&[60, links.len() as u64]);
                let after = Duration::from_millis(world.rng(|rng| rng.gen_range(50..2_000)));
                heals.push((now + after, links));
            }
            // A node's or a gateway's clock jumps (and a gateway's drift changes).
            _ => {
                let gateways = world.options.gateways;
                let (which, offset, drift) = world.rng(|rng| {
                    let which = rng.gen_range(0..n as u64 + gateways);
                    (which, rng.gen_range(-50_000_000i64..=50_000_000), rng.gen_range(-200..=200))
                });
                if which < n as u64 {
                    lock(&world.clock_offset_ns).insert(which + 1, offset);
                } else {
                    lock(&world.gateway_clock).insert(which - n as u64, (offset, drift));
                }
                world.count(|c| c.clock_jumps += 1);
                world.trace(&[61, which, offset as u64]);
            }
        }
    }
}

/// Waits until every replica has applied the same log, then compares their state
/// hashes with each other and with the oracle's replay of the log; returns the common
/// hash.
async fn converge(cluster: &Cluster) -> Option<String> {
    let world = &cluster.world;
    let deadline = world.elapsed() + Duration::from_secs(20);
    loop {
        let applied: Vec<(u64, u64)> =
            cluster.nodes.iter().filter_map(|node| node.process.as_ref().map(|p| p.progress())).collect();
        let settled = applied.len() == cluster.nodes.len()
            && applied.windows(2).all(|w| w[0] == w[1])
            && applied.first().is_some_and(|(applied, committed)| applied == committed);
        if settled {
            break;
        }
        if world.elapsed() > deadline {
            world.violation(format!(
                "the replicas did not converge within 20 s of the heal: (applied, committed) {applied:?}"
            ));
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut states = Vec::new();
    for node in &cluster.nodes {
        let Some(process) = &node.process else { continue };
        // At rest nothing waits for the core: its queue-depth gauge reads 0.
        let depth = process.metrics.queue_depth.0.load(std::sync::atomic::Ordering::Relaxed);
        if depth != 0 {
            world.violation(format!("node {}: at rest, its queue depth reads {depth}", node.id));
        }
        let summary = |engine: &bourse_engine::Engine, index: u64| {
            (
                index,
                bourse_engine::hex(&engine.state_hash()),
                format!(
                    "applied {index}, last time {}, next order {}, resting {}, clients {}",
                    engine.ts_last(),
                    engine.next_order_id().0,
                    engine.orders_resting(),
                    engine.clients()
                ),
            )
        };
        match process.inspect(summary).await {
            Some(state) => states.push((node.id, state)),
            None => world.violation(format!("node {}: its core is gone", node.id)),
        }
    }
    let (index, replayed) = {
        let oracle = lock(&world.oracle);
        (oracle.applied(), bourse_engine::hex(&oracle.engine().state_hash()))
    };
    let hash = states.first().map(|(_, (_, hash, _))| hash.clone())?;
    world.trace(&[70, u64::from_str_radix(&hash[..16], 16).unwrap_or(0)]);
    let differ = states.iter().any(|(_, (at, state, _))| *state != replayed || *at != index);
    if differ {
        let summaries: Vec<String> = states
            .iter()
            .map(|(id, (_, hash, summary))| format!("node {id}: hash {}…, {summary}", &hash[..12]))
            .collect();
        world.violation(format!(
            "replicas' states differ from the log's replay (applied {index}, hash {}…): {}",
            &replayed[..12],
            summaries.join("; ")
        ));
        return None;
    }
    Some(hash)
}

/// The checks on the converged state.
async fn check(
    cluster: &Cluster,
    logs: &[(u64, u64, ClientLog)],
    market: Market,
    accounts: &[AccountId],
    converged: bool,
) {
    let world = &cluster.world;
    for node in &cluster.nodes {
        let Some(process) = &node.process else { continue };
        let invariants = |engine: &bourse_engine::Engine, _: u64| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| engine.check_invariants())).err().map(|panic| {
                panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            })
        };
        if let Some(Some(why)) = process.inspect(invariants).await {
            world.violation(format!("node {}: the engine's invariants fail: {why}", node.id));
        }
    }
    if !converged {
        return;
    }
    let Some(process) = cluster.nodes.iter().find_map(|node| node.process.as_ref()) else { return };
    let mut found = Vec::new();
    let mut expected = [0i128; 2];
    {
        let oracle = lock(&world.oracle);
        for (engine_id, client, log) in logs {
            let applied = oracle.engine().client_seq_applied(ClientId(*engine_id)).unwrap_or(0);
            for (seq, outcome) in &log.acked {
                if *seq > applied {
                    found.push(format!(
                        "client {client}: command {seq} was acknowledged but is not in the state (applied up to {applied})"
                    ));
                }
                let recorded = oracle.outcomes.get(&(*engine_id, *seq));
                if let (Some(told), Some(recorded)) = (outcome, recorded) {
                    if told != recorded {
                        found
                            .push(format!("client {client}: command {seq} answered {told:?}, applied as {recorded:?}"));
                    }
                }
            }
            for (seq, body) in log.sent.range(..=applied) {
                let Some((asset, change)) = node::supply_change(body) else { continue };
                if matches!(oracle.outcomes.get(&(*engine_id, *seq)), Some(Outcome::Ok { .. })) {
                    expected[usize::from(asset != market.cash)] += change;
                }
            }
        }
    }
    for violation in found {
        world.violation(violation);
    }
    let accounts = accounts.to_vec();
    let held = process
        .inspect(move |engine, _| {
            [market.cash, market.shares].map(|asset| {
                accounts
                    .iter()
                    .filter_map(|account| engine.balance(*account, asset))
                    .map(|b| i128::from(b.available.0) + i128::from(b.reserved.0))
                    .sum::<i128>()
            })
        })
        .await;
    let Some(held) = held else { return };
    for (slot, asset) in [market.cash, market.shares].into_iter().enumerate() {
        if held[slot] != expected[slot] {
            world.violation(format!(
                "asset {}: accounts hold {}, but the applied deposits, issues and withdrawals add up to {}",
                asset.0, held[slot], expected[slot]
            ));
        }
    }
}

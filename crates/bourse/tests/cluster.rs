//! Fault tests of a replicated Bourse: real `bourse node` processes on this machine, a
//! fault proxy per node on loopback (owned by the test), and clients running load with
//! retries throughout.
//!
//! Faults: SIGKILL of the leader, of a follower, of two of five; SIGSTOP/SIGCONT
//! pauses; isolating the leader, splitting the cluster 2/3, healing; restarts on the
//! kept data; a node removed, wiped and added back under a new id (it must catch up by
//! snapshot).
//!
//! Checks (see `support/cluster.rs`):
//! - progress: in every phase where a majority can talk, the counters' acknowledged
//!   deposits rise within [`PROGRESS_MAX`] (the time is printed);
//! - a minority makes none: its committed index stays where it was while cut off;
//! - after each heal or restart, with the load paused: every replica reports the same
//!   state hash at the same applied index, and reads the same balances there;
//! - exactly once: each counter account's balance equals the deposits it sent, every one
//!   acknowledged; no balance negative; every asset conserved (balances plus fees equal
//!   the supply, which equals what the test deposited and credited).
//!
//! `chaos_long` (ignored; `make chaos`) injects random faults for `BOURSE_CHAOS_SECS`
//! (default 120) from `BOURSE_CHAOS_SEED` (printed) and checks all of it after each heal.

#[macro_use]
#[path = "support/cluster.rs"]
mod harness;

use std::time::{Duration, Instant};

use harness::{check_state, ClusterHarness, HarnessOptions, Workload, WorkloadOptions};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// How long the cluster may go without acknowledging deposits while a majority can talk.
const PROGRESS_MAX: Duration = Duration::from_secs(5);
/// Acknowledged deposits that count as progress.
const PROGRESS_DELTA: u64 = 20;
/// How long replicas may take to reach the same state once healed.
const CONVERGE_MAX: Duration = Duration::from_secs(30);
/// How long the load may take to answer what it sent once paused.
const PAUSE_MAX: Duration = Duration::from_secs(30);
const LEADER_MAX: Duration = Duration::from_secs(10);

/// One scenario at a time: a few node processes of a debug build already keep the two
/// cores of a development machine busy, and clusters starved of CPU by each other miss
/// their Raft deadlines and keep electing leaders instead of making progress.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The API addresses of some slots.
fn endpoints_of(h: &ClusterHarness, slots: &[usize]) -> Vec<String> {
    slots.iter().map(|&i| h.slots[i].api.to_string()).collect()
}

fn others(all: &[usize], except: &[usize]) -> Vec<usize> {
    all.iter().copied().filter(|i| !except.contains(i)).collect()
}

/// Pauses the load, waits until `slots` converge, checks the state on them, resumes.
async fn converge_and_check(h: &ClusterHarness, w: &Workload, slots: &[usize]) -> (u64, String) {
    w.pause(h, PAUSE_MAX).await;
    let (index, hash) = h.wait_converged(slots, CONVERGE_MAX).await;
    check_state(h, w, slots, index).await;
    w.resume();
    (index, hash)
}

/// Stops the load (every command answered), waits for every live node to converge and
/// checks the state on all of them.
async fn finish(h: &ClusterHarness, mut w: Workload) {
    if let Err(error) = w.finish(Duration::from_secs(60)).await {
        h.fail(&format!("the workload failed: {error}")).await;
    }
    let live = h.live();
    let (index, hash) = h.wait_converged(&live, CONVERGE_MAX).await;
    check_state(h, &w, &live, index).await;
    if !w.history.ops.lock().expect("history").is_empty() {
        match w.history.check(h.dir()) {
            Ok(verdict) => say!(h.name, "historians' operations: {verdict}"),
            Err(error) => h.fail(&format!("the historians' operations: {error}")).await,
        }
    }
    say!(
        h.name,
        "done: {} deposits and {} trading commands acknowledged; final index {index} hash {}…",
        w.counter_acked(),
        w.trader_acked(),
        &hash[..16.min(hash.len())]
    );
}

/// The committed index of a node that is cut off (it must not move).
async fn committed(h: &ClusterHarness, slot: usize) -> u64 {
    match h.status(slot).await {
        Ok(status) => status.committed_index,
        Err(error) => h.fail(&format!("status of cut-off slot {slot}: {error}")).await,
    }
}

async fn minority_committed(h: &ClusterHarness, minority: &[usize]) -> Vec<u64> {
    let mut out = Vec::new();
    for &slot in minority {
        out.push(committed(h, slot).await);
    }
    out
}

/// Fails when a cut-off node committed anything after `before` was read.
async fn check_minority_still(h: &ClusterHarness, minority: &[usize], before: &[u64], what: &str) {
    let after = minority_committed(h, minority).await;
    if after != before {
        h.fail(&format!("{what}: the minority {minority:?} committed entries while cut off: {before:?} -> {after:?}"))
            .await;
    }
    say!(h.name, "check: the minority (slots {minority:?}) committed nothing while cut off (committed {after:?})");
}

/// Lets a cut settle (entries in flight when it came may still land) before the
/// minority's committed index is read.
const CUT_SETTLE: Duration = Duration::from_millis(400);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_kill_pause_isolate() {
    let _one = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let mut h = ClusterHarness::start("three", 3, HarnessOptions::default()).await;
    let options = WorkloadOptions { seed: 0x3_0001, tls: h.tls(), historians: 3, ..WorkloadOptions::default() };
    let w = Workload::start("three", h.endpoints(), options).await;
    w.wait_progress(&h, "the start", PROGRESS_DELTA, PROGRESS_MAX).await;
    let all = h.all();

    // SIGKILL of the leader; the others elect and go on; it restarts on its data.
    let (leader, status) = h.leader().await;
    h.kill(leader);
    w.wait_progress(&h, "SIGKILL of the leader", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (_, new) = h.wait_for_leader(&others(&all, &[leader]), status.term, LEADER_MAX).await;
    say!(h.name, "new leader node {} in term {}", new.id, new.term);
    h.restart(leader).await;
    converge_and_check(&h, &w, &all).await;

    // SIGKILL of a follower.
    let (leader, _) = h.leader().await;
    let follower = others(&all, &[leader])[0];
    h.kill(follower);
    w.wait_progress(&h, "SIGKILL of a follower", PROGRESS_DELTA, PROGRESS_MAX).await;
    h.restart(follower).await;
    converge_and_check(&h, &w, &all).await;

    // SIGSTOP of the leader for about 2 s: the others elect and go on meanwhile.
    let (leader, status) = h.leader().await;
    h.stop(leader);
    let paused_at = Instant::now();
    w.wait_progress(&h, "SIGSTOP of the leader", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (_, new) = h.wait_for_leader(&others(&all, &[leader]), status.term, LEADER_MAX).await;
    say!(h.name, "new leader node {} in term {}", new.id, new.term);
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(paused_at.elapsed())).await;
    h.cont(leader);
    w.wait_progress(&h, "SIGCONT of the old leader", PROGRESS_DELTA, PROGRESS_MAX).await;
    converge_and_check(&h, &w, &all).await;

    // Isolating the leader: the majority elects and goes on, the old leader commits nothing.
    let (leader, status) = h.leader().await;
    h.isolate(leader);
    let cut_at = Instant::now();
    tokio::time::sleep(CUT_SETTLE).await;
    let before = minority_committed(&h, &[leader]).await;
    let counters_before = w.counter_acked();
    let majority = others(&all, &[leader]);
    w.probe_progress(&h, endpoints_of(&h, &majority), "isolation of the leader", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (_, new) = h.wait_for_leader(&majority, status.term, LEADER_MAX).await;
    say!(h.name, "counters (all endpoints) meanwhile: +{} deposits", w.counter_acked() - counters_before);
    say!(h.name, "new leader node {} in term {}", new.id, new.term);
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(cut_at.elapsed())).await;
    check_minority_still(&h, &[leader], &before, "isolated leader").await;
    h.heal();
    w.wait_progress(&h, "the healed network", PROGRESS_DELTA, PROGRESS_MAX).await;
    converge_and_check(&h, &w, &all).await;

    finish(&h, w).await;
    say!(h.name, "three_nodes_kill_pause_isolate took {:.1} s", started.elapsed().as_secs_f64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_nodes_kill_two_and_split() {
    let _one = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let mut h = ClusterHarness::start("five", 5, HarnessOptions::default()).await;
    let options = WorkloadOptions { seed: 0x5_0001, tls: h.tls(), historians: 3, ..WorkloadOptions::default() };
    let w = Workload::start("five", h.endpoints(), options).await;
    w.wait_progress(&h, "the start", PROGRESS_DELTA, PROGRESS_MAX).await;
    let all = h.all();

    // SIGKILL of two of five (the leader and a follower): three go on.
    let (leader, status) = h.leader().await;
    let follower = others(&all, &[leader])[0];
    h.kill(leader);
    h.kill(follower);
    w.wait_progress(&h, "SIGKILL of the leader and a follower (3 of 5 left)", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (_, new) = h.wait_for_leader(&others(&all, &[leader, follower]), status.term, LEADER_MAX).await;
    say!(h.name, "new leader node {} in term {}", new.id, new.term);
    h.restart(leader).await;
    h.restart(follower).await;
    converge_and_check(&h, &w, &all).await;

    // A 2/3 split with the leader in the minority.
    let (leader, status) = h.leader().await;
    let minority = vec![leader, others(&all, &[leader])[0]];
    let majority = others(&all, &minority);
    h.split(&[&minority, &majority]);
    let cut_at = Instant::now();
    tokio::time::sleep(CUT_SETTLE).await;
    let before = minority_committed(&h, &minority).await;
    let counters_before = w.counter_acked();
    w.probe_progress(&h, endpoints_of(&h, &majority), "the 2/3 split (majority side)", PROGRESS_DELTA, PROGRESS_MAX)
        .await;
    let (_, new) = h.wait_for_leader(&majority, status.term, LEADER_MAX).await;
    say!(h.name, "counters (all endpoints) meanwhile: +{} deposits", w.counter_acked() - counters_before);
    say!(h.name, "the majority elected node {} in term {}", new.id, new.term);
    tokio::time::sleep(Duration::from_secs(2).saturating_sub(cut_at.elapsed())).await;
    check_minority_still(&h, &minority, &before, "2/3 split").await;
    h.heal();
    w.wait_progress(&h, "the healed network", PROGRESS_DELTA, PROGRESS_MAX).await;
    converge_and_check(&h, &w, &all).await;

    finish(&h, w).await;
    say!(h.name, "five_nodes_kill_two_and_split took {:.1} s", started.elapsed().as_secs_f64());
}

/// Snapshots every few entries, keeping few entries behind them, so a new node cannot
/// catch up from the log.
const SNAPSHOT_CONFIG: &str = "[raft]\nsnapshot_every_entries = 64\nlog_kept_after_snapshot = 8\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wiped_node_rejoins_by_snapshot() {
    let _one = ONE_AT_A_TIME.lock().await;
    let started = Instant::now();
    let options = HarnessOptions { config_toml: Some(SNAPSHOT_CONFIG.into()), ..HarnessOptions::default() };
    let mut h = ClusterHarness::start("snapshot", 3, options).await;
    let options = WorkloadOptions { seed: 0x5_4a9, tls: h.tls(), ..WorkloadOptions::default() };
    let w = Workload::start("snapshot", h.endpoints(), options).await;
    let all = h.all();

    // Enough load that the leader snapshots (and drops the log behind) a few times.
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader_snapshot = loop {
        let (_, status) = h.leader().await;
        if status.snapshot_index > 4 * 64 {
            break status.snapshot_index;
        }
        if Instant::now() > deadline {
            h.fail("the leader took no snapshot within 30 s").await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    say!(h.name, "the leader has a snapshot at index {leader_snapshot}");

    // Remove a follower, wipe it, start it empty under a new id, add it back.
    let (leader, _) = h.leader().await;
    let follower = others(&all, &[leader])[0];
    h.remove_member(follower).await;
    h.kill(follower);
    h.wipe(follower);
    w.wait_progress(&h, "two members, one removed and wiped", PROGRESS_DELTA, PROGRESS_MAX).await;
    let id = h.start_fresh(follower).await;
    h.add_member(follower, Duration::from_secs(60)).await;
    w.wait_progress(&h, "the new member's catch-up", PROGRESS_DELTA, PROGRESS_MAX).await;
    converge_and_check(&h, &w, &all).await;

    let status = match h.status(follower).await {
        Ok(status) => status,
        Err(error) => h.fail(&format!("status of the new node: {error}")).await,
    };
    let segments = h.segment_first_indexes(follower);
    say!(h.name, "new node {id}: snapshot index {}, log segments start at {segments:?}", status.snapshot_index);
    if status.snapshot_index == 0 || segments.first().is_none_or(|&first| first <= 1) {
        h.fail(&format!(
            "node {id} did not come by snapshot: snapshot index {}, segments {segments:?}",
            status.snapshot_index
        ))
        .await;
    }
    say!(h.name, "check: node {id} came by snapshot (its log starts at {} > 1)", segments[0]);

    finish(&h, w).await;
    say!(h.name, "wiped_node_rejoins_by_snapshot took {:.1} s", started.elapsed().as_secs_f64());
}

/// Clients given every endpoint make progress while the leader is isolated: the
/// isolated leader stops counting itself leader once no quorum has acknowledged it for
/// two election timeouts and ends its sessions, and a client whose stream goes silent
/// tries the next endpoint first. (The other scenarios measure the majority's progress
/// with a client given only the majority's endpoints.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn isolated_leader_clients_fail_over() {
    let _one = ONE_AT_A_TIME.lock().await;
    let h = ClusterHarness::start("strict", 3, HarnessOptions::default()).await;
    let options = WorkloadOptions { seed: 0x5_7121, traders: 0, tls: h.tls(), ..WorkloadOptions::default() };
    let w = Workload::start("strict", h.endpoints(), options).await;
    w.wait_progress(&h, "the start", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (leader, _) = h.leader().await;
    h.isolate(leader);
    w.wait_progress(
        &h,
        "isolation of the leader (clients with every endpoint)",
        PROGRESS_DELTA,
        Duration::from_secs(15),
    )
    .await;
    h.heal();
    finish(&h, w).await;
}

/// Clients that reach the exchange only through a gateway: the gateway's one link
/// follows the leader through a SIGKILL and a SIGSTOP, resending what was unanswered
/// with its original stamps, and every check holds (exactly once included: the
/// resends of the gateway and of the clients meet the engine's record).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_follows_the_leader() {
    let _one = ONE_AT_A_TIME.lock().await;
    let mut h = ClusterHarness::start("gateway", 3, HarnessOptions::default()).await;
    let mut config = bourse_gateway::GatewayConfig::new(1, "127.0.0.1:0".parse().expect("an address"), h.endpoints());
    config.open = true;
    config.tls = Some(h.client_tls("gateway:1"));
    let gateway = bourse_gateway::Gateway::start(config, bourse_gateway::KeyStore::default()).await.expect("a gateway");
    let options = WorkloadOptions { seed: 0x6_a7e1, ..WorkloadOptions::default() };
    let w = Workload::start("gateway", vec![gateway.addr().to_string()], options).await;
    w.wait_progress(&h, "the start, through the gateway", PROGRESS_DELTA, PROGRESS_MAX).await;
    let all = h.all();

    let (leader, status) = h.leader().await;
    h.kill(leader);
    w.wait_progress(&h, "SIGKILL of the leader, through the gateway", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (_, new) = h.wait_for_leader(&others(&all, &[leader]), status.term, LEADER_MAX).await;
    say!(h.name, "new leader node {} in term {}", new.id, new.term);
    h.restart(leader).await;
    converge_and_check(&h, &w, &all).await;

    let (leader, status) = h.leader().await;
    h.stop(leader);
    w.wait_progress(&h, "SIGSTOP of the leader, through the gateway", PROGRESS_DELTA, PROGRESS_MAX).await;
    h.wait_for_leader(&others(&all, &[leader]), status.term, LEADER_MAX).await;
    h.cont(leader);
    converge_and_check(&h, &w, &all).await;
    finish(&h, w).await;
    gateway.shutdown().await;
}

/// The outside checker has teeth: a read that misses a deposit that returned before the
/// read was called is not linearizable; the same read overlapping the deposit is.
#[test]
fn porcupine_refuses_a_stale_read() {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |name: &str, read_call: u64| {
        let path = dir.path().join(name);
        let deposit =
            serde_json::json!({"client": 0, "account": 7, "op": "deposit", "amount": 2, "call": 0, "return": 10});
        let read =
            serde_json::json!({"client": 1, "account": 7, "op": "read", "balance": 0, "call": read_call, "return": 30});
        let text = format!("{deposit}\n{read}\n");
        std::fs::write(&path, text).expect("write history");
        path
    };
    let html = dir.path().join("stale.html");
    let verdict = harness::lincheck(&write("stale.jsonl", 20), &html).expect_err("a stale read");
    assert!(verdict.contains("NOT linearizable"), "{verdict}");
    assert!(html.exists(), "the visualization of the failure");
    let verdict = harness::lincheck(&write("overlap.jsonl", 5), &html).expect("an overlapping read");
    assert!(verdict.starts_with("linearizable: 2 operations"), "{verdict}");
}

// ---------------------------------------------------------------------------------------
// The long form
// ---------------------------------------------------------------------------------------

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// Random faults for `BOURSE_CHAOS_SECS` (default 120) from `BOURSE_CHAOS_SEED`, on
/// `BOURSE_CHAOS_NODES` nodes (default 5). One fault at a time, each healed (restart,
/// SIGCONT, heal, rejoin) before the next; after each: progress was seen while a majority
/// could talk, the replicas converge, and every state check passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "minutes long: make chaos"]
async fn chaos_long() {
    let _one = ONE_AT_A_TIME.lock().await;
    let seconds = env_u64("BOURSE_CHAOS_SECS").unwrap_or(120);
    let seed = env_u64("BOURSE_CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("clock").as_nanos() as u64 % 1_000_000
    });
    let count = env_u64("BOURSE_CHAOS_NODES").unwrap_or(5).clamp(3, 9) as usize;
    // Below the 30 ms AppendEntries deadline of the harness's 40 ms heartbeat; a larger
    // delay stops all commits (a known liveness problem, not what this test looks for).
    let delay_max_ms = env_u64("BOURSE_CHAOS_DELAY_MAX_MS").unwrap_or(20).max(2);
    println!("chaos: {count} nodes, {seconds} s, seed {seed} (BOURSE_CHAOS_SEED={seed} to repeat the choices)");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let options = HarnessOptions {
        config_toml: Some("[raft]\nsnapshot_every_entries = 500\nlog_kept_after_snapshot = 50\n".into()),
        ..HarnessOptions::default()
    };
    let mut h = ClusterHarness::start("chaos", count, options).await;
    let fast = !cfg!(debug_assertions);
    let workload = WorkloadOptions {
        seed,
        counters: 4,
        counter_rate: if fast { 400.0 } else { 150.0 },
        counter_depth: 16,
        traders: 3,
        trader_accounts: 6,
        trader_rate: if fast { 1500.0 } else { 250.0 },
        tls: h.tls(),
        historians: 4,
    };
    let w = Workload::start("chaos", h.endpoints(), workload).await;
    w.wait_progress(&h, "the start", PROGRESS_DELTA, PROGRESS_MAX).await;
    let all = h.all();
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut injected: Vec<String> = Vec::new();
    let mut progress_ms: Vec<u128> = Vec::new();
    let mut round = 0;
    while Instant::now() < deadline {
        round += 1;
        let (leader, status) = h.leader().await;
        let hold = Duration::from_millis(rng.gen_range(300..3000));
        let pick = |rng: &mut ChaCha8Rng, from: &[usize]| from[rng.gen_range(0..from.len())];
        let fault = rng.gen_range(0..8);
        let what = match fault {
            0 | 1 => {
                let victim = if fault == 0 { leader } else { pick(&mut rng, &others(&all, &[leader])) };
                let role = if victim == leader { "leader" } else { "follower" };
                h.kill(victim);
                let took = w.wait_progress(&h, &format!("SIGKILL of the {role}"), PROGRESS_DELTA, PROGRESS_MAX).await;
                progress_ms.push(took.as_millis());
                tokio::time::sleep(hold).await;
                h.restart(victim).await;
                format!("SIGKILL {role} node {} for {hold:?}, restarted on its data", h.slots[victim].id)
            }
            2 if count >= 5 => {
                let follower = pick(&mut rng, &others(&all, &[leader]));
                h.kill(leader);
                h.kill(follower);
                let took = w.wait_progress(&h, "SIGKILL of two", PROGRESS_DELTA, PROGRESS_MAX).await;
                progress_ms.push(took.as_millis());
                tokio::time::sleep(hold).await;
                h.restart(leader).await;
                h.restart(follower).await;
                format!("SIGKILL leader and a follower (slots {leader}, {follower}) for {hold:?}, both restarted")
            }
            3 => {
                let victim = if rng.gen_bool(0.5) { leader } else { pick(&mut rng, &all) };
                h.stop(victim);
                let took = w.wait_progress(&h, "SIGSTOP", PROGRESS_DELTA, PROGRESS_MAX).await;
                progress_ms.push(took.as_millis());
                tokio::time::sleep(hold).await;
                h.cont(victim);
                format!("SIGSTOP slot {victim} (leader: {}) for {hold:?}, then SIGCONT", victim == leader)
            }
            4 => {
                let victim = if rng.gen_bool(0.5) { leader } else { pick(&mut rng, &all) };
                h.isolate(victim);
                tokio::time::sleep(CUT_SETTLE).await;
                let before = minority_committed(&h, &[victim]).await;
                let majority = endpoints_of(&h, &others(&all, &[victim]));
                let took = w.probe_progress(&h, majority, "isolation", PROGRESS_DELTA, PROGRESS_MAX).await;
                progress_ms.push(took.as_millis());
                tokio::time::sleep(hold).await;
                check_minority_still(&h, &[victim], &before, "isolation").await;
                h.heal();
                format!("isolated slot {victim} (leader: {}) for {hold:?}, healed", victim == leader)
            }
            5 => {
                let mut shuffled = all.clone();
                for i in (1..shuffled.len()).rev() {
                    shuffled.swap(i, rng.gen_range(0..=i));
                }
                let minority: Vec<usize> = shuffled[..(count - 1) / 2].to_vec();
                let majority = others(&all, &minority);
                h.split(&[&minority, &majority]);
                tokio::time::sleep(CUT_SETTLE).await;
                let before = minority_committed(&h, &minority).await;
                let took = w
                    .probe_progress(
                        &h,
                        endpoints_of(&h, &majority),
                        "a split (majority side)",
                        PROGRESS_DELTA,
                        PROGRESS_MAX,
                    )
                    .await;
                progress_ms.push(took.as_millis());
                h.wait_for_leader(&majority, 0, LEADER_MAX).await;
                tokio::time::sleep(hold).await;
                check_minority_still(&h, &minority, &before, "split").await;
                h.heal();
                format!("split minority {minority:?} / majority {majority:?} (old leader slot {leader}) for {hold:?}, healed")
            }
            6 => {
                let victim = pick(&mut rng, &others(&all, &[leader]));
                let old = h.slots[victim].id;
                h.remove_member(victim).await;
                h.kill(victim);
                h.wipe(victim);
                let id = h.start_fresh(victim).await;
                h.add_member(victim, Duration::from_secs(120)).await;
                format!("removed node {old}, wiped it, added it back as node {id}")
            }
            _ => {
                // A one-way delay above 3/4 of the heartbeat (openraft's AppendEntries
                // deadline) stops every commit: see the report of `BOURSE_CHAOS_DELAY_MAX_MS`.
                let delay = Duration::from_millis(rng.gen_range(2..=delay_max_ms));
                for slot in &h.slots {
                    slot.proxy.set_delay(delay);
                }
                say!(h.name, "delay {delay:?} on every Raft link");
                let took = w.wait_progress(&h, "delayed links", PROGRESS_DELTA, PROGRESS_MAX).await;
                progress_ms.push(took.as_millis());
                tokio::time::sleep(hold).await;
                for slot in &h.slots {
                    slot.proxy.set_delay(Duration::ZERO);
                }
                format!("{delay:?} delay on every Raft link for {hold:?}, removed")
            }
        };
        let _ = status;
        say!(h.name, "round {round}: injected: {what}");
        injected.push(what);
        w.wait_progress(&h, "after healing", PROGRESS_DELTA, PROGRESS_MAX).await;
        converge_and_check(&h, &w, &all).await;
    }
    finish(&h, w).await;
    println!("chaos: seed {seed}, {} faults injected:", injected.len());
    for (i, what) in injected.iter().enumerate() {
        println!("  {:>3}. {what}", i + 1);
    }
    progress_ms.sort_unstable();
    if let (Some(first), Some(last)) = (progress_ms.first(), progress_ms.last()) {
        println!(
            "chaos: progress under faults within {first}..{last} ms (median {} ms, bound {PROGRESS_MAX:?})",
            progress_ms[progress_ms.len() / 2]
        );
    }
}

/// Entries of a node's feed (`GatewayLink.Feed`, as gateway 9), by log index: their
/// stamp and release time, read for `read_for`.
async fn feed_releases(
    h: &ClusterHarness,
    slot: usize,
    read_for: Duration,
) -> std::collections::BTreeMap<u64, (u64, u64)> {
    use bourse_protocol::proto;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", h.slots[slot].api))
        .expect("uri")
        .connect_with_connector(h.client_tls("gateway:9").0)
        .await
        .expect("a channel to the node");
    let mut feed = proto::gateway_link_client::GatewayLinkClient::new(channel)
        .max_decoding_message_size(64 << 20)
        .feed(proto::FeedRequest {})
        .await
        .expect("the feed")
        .into_inner();
    let mut entries = std::collections::BTreeMap::new();
    let until = Instant::now() + read_for;
    while let Ok(message) = tokio::time::timeout_at(until.into(), feed.message()).await {
        if let Some(proto::feed_message::Body::Entry(entry)) = message.expect("the feed").expect("open").body {
            entries.insert(entry.log_index, (entry.ts, entry.release_ts));
        }
    }
    entries
}

/// The adaptive hold (`[fairness] adaptive`) is set through the log: every member's
/// feed — the leader's too, whose core stamps commands it has not applied yet — gives
/// every entry the same log time and release time, the hold moved (it starts at the
/// maximum and comes down once a quiet horizon passed), and a node that replays its log
/// after a SIGKILL reaches the same index and state hash as the others (the setting is
/// part of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_adaptive_hold_is_the_same_on_every_replica_and_after_a_replay() {
    let _one = ONE_AT_A_TIME.lock().await;
    let toml = "[fairness]\nadaptive = true\nhold_min_us = 2000\nhold_max_us = 200000\nhorizon_secs = 1\n";
    let options = HarnessOptions { config_toml: Some(toml.to_string()), ..HarnessOptions::default() };
    let mut h = ClusterHarness::start("adaptive", 3, options).await;
    let mut config = bourse_gateway::GatewayConfig::new(1, "127.0.0.1:0".parse().expect("an address"), h.endpoints());
    config.open = true;
    config.tls = Some(h.client_tls("gateway:1"));
    let gateway = bourse_gateway::Gateway::start(config, bourse_gateway::KeyStore::default()).await.expect("a gateway");
    let options = WorkloadOptions { seed: 0xada_971e, ..WorkloadOptions::default() };
    let w = Workload::start("adaptive", vec![gateway.addr().to_string()], options).await;
    w.wait_progress(&h, "the start, through the gateway", PROGRESS_DELTA, PROGRESS_MAX).await;
    let (leader, _) = h.leader().await;
    let followers = others(&h.all(), &[leader]);
    let (a, b, led) = tokio::join!(
        feed_releases(&h, followers[0], Duration::from_secs(4)),
        feed_releases(&h, followers[1], Duration::from_secs(4)),
        feed_releases(&h, leader, Duration::from_secs(4))
    );
    let common: Vec<u64> = a.keys().filter(|index| b.contains_key(index) && led.contains_key(index)).copied().collect();
    assert!(common.len() > 20, "the members' feeds share {} entries", common.len());
    let mut holds = std::collections::BTreeSet::new();
    for index in &common {
        assert_eq!(a[index], b[index], "entry {index}: (stamp, release) differ between the followers");
        assert_eq!(a[index], led[index], "entry {index}: (stamp, release) differ between a follower and the leader");
        let (ts, release_ts) = a[index];
        assert!(release_ts > 0, "entry {index} has no release time from the log");
        holds.insert(release_ts - ts);
    }
    let (least, most) = (*holds.first().expect("a hold"), *holds.last().expect("a hold"));
    say!("adaptive", "holds seen on {} entries: {least}..={most} ns", common.len());
    // A lowered hold keeps entries behind the old one's last release: between the two.
    assert!((2_000_000..=200_000_000).contains(&least), "hold {least} ns outside the bounds");
    assert!(most <= 200_000_000, "hold {most} ns above the maximum");
    assert!(least < 200_000_000, "the hold never came down from the maximum");
    // A replay: a follower killed and restarted rebuilds the same state from its log.
    // (Only the state hash is compared, not balances read one by one: the leader's own
    // settings keep committing while the load is paused, so reads at one index would
    // race them; `wait_converged` waits for every node at one index and hash.)
    h.kill(followers[0]);
    w.wait_progress(&h, "a follower down", PROGRESS_DELTA, PROGRESS_MAX).await;
    h.restart(followers[0]).await;
    let mut w = w;
    if let Err(error) = w.finish(Duration::from_secs(60)).await {
        h.fail(&format!("the workload failed: {error}")).await;
    }
    h.wait_converged(&h.all(), CONVERGE_MAX).await;
    gateway.shutdown().await;
}

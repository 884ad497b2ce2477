//! A real `bourse serve` killed with SIGKILL under load from concurrent sessions, then
//! restarted on the same directory and port while the clients resend what they never
//! heard about.
//!
//! What must hold afterwards, checked against an independent replay of the journal:
//! - every acknowledged command is in the log at the index its ack named, including
//!   every ack seen before the kill (an ack promises durability);
//! - every command a client sent is applied exactly once, whether its first copy
//!   reached the log before the kill or only its resend did; the resend of a logged one
//!   is answered as a duplicate with the original outcome;
//! - every ack equals the ack the replay computes for its record (seq, index,
//!   duplicate flag, outcome);
//! - the node, restarted and stopped with SIGTERM (exit 0), leaves a directory whose
//!   `bourse replay --json` state hash equals the independent replay's.
//!
//! Seeds are printed; `BOURSE_CRASH_SEED=<n>` runs one seed. The moment of the kill
//! is seeded too but lands wherever the node happens to be, so a failure reproduces in
//! kind, not byte for byte. Odd seeds roll 16 KiB segments, so the snapshots taken
//! every few hundred commands also prune the log; the replay then starts from the
//! oldest snapshot the log still reaches and checks the acks after it.
//!
//! A second test stops a node with SIGTERM under load and expects every logged command
//! of the session to have been acknowledged before its stream ended.

mod support;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_engine::command::{Command, CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, ClientId, OrderId, Outcome, Px, Qty, Reject, Side, SymbolId};
use bourse_protocol::convert;
use bourse_protocol::proto;
use bourse_protocol::proto::order_entry_client::OrderEntryClient;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use support::{NodeProcess, Replay};
use tokio::sync::mpsc;
use tokio_stream::StreamExt;

const SEEDS: [u64; 4] = [0x5eed_0000, 0x5eed_0001, 0x5eed_0002, 0x5eed_0003];
/// Order-entry clients running at once, each with its own client id and accounts.
const CLIENTS_LEN: u64 = 3;
const ACCOUNTS_PER_CLIENT: usize = 2;
/// Commands a client may have sent without an ack. Below the engine's exactly-once
/// window (128 outcomes per client), so every resend is answered from the record
/// rather than refused as too old.
const IN_FLIGHT_MAX: usize = 64;
const BATCH_COMMANDS_MAX: usize = 16;
/// Acks to see before the kill may come, so some acks always precede it.
const ACKS_BEFORE_KILL_MIN: u64 = 150;
/// The longest the kill waits after that, in milliseconds (seeded).
const KILL_DELAY_MS_MAX: u64 = 400;
/// A bound on the first phase, in case the kill never comes.
const COMMANDS_BEFORE_KILL_MAX: u64 = 100_000;
/// New commands per client after the restart, on top of the resends.
const COMMANDS_AFTER_RESTART: u64 = 150;
const SNAPSHOT_EVERY_COMMANDS: u64 = 500;
/// Segment size for odd seeds: small, so that snapshots prune whole segments.
const SEGMENT_BYTES_PRUNED: u64 = 16 * 1024;
/// Client ids of the load sessions are this plus 1, 2, ….
const CLIENT_ID_BASE: u64 = 100;

#[test]
fn sigkill_under_load_loses_no_acked_command_and_applies_each_exactly_once() {
    let seeds: Vec<u64> = match std::env::var("BOURSE_CRASH_SEED") {
        Ok(seed) => vec![seed.parse().expect("BOURSE_CRASH_SEED is a u64")],
        Err(_) => SEEDS.to_vec(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    for seed in seeds {
        println!("crash seed {seed} (BOURSE_CRASH_SEED={seed} reruns it)");
        runtime.block_on(crash_run(seed));
    }
}

/// One acknowledgement a client received.
#[derive(Clone, Debug)]
struct AckSeen {
    client: u64,
    ack: proto::Ack,
    before_kill: bool,
}

/// A load client: its exactly-once numbering, what it still waits to hear about, and
/// everything it heard.
struct LoadClient {
    id: u64,
    accounts: Vec<AccountId>,
    symbol: SymbolId,
    rng: ChaCha8Rng,
    seq_next: u64,
    /// Sent and not yet acknowledged, by seq.
    unacked: BTreeMap<u64, CommandBody>,
    acks: Vec<AckSeen>,
    /// Own orders learned from acks, to cancel and move.
    orders: Vec<(OrderId, AccountId)>,
    before_kill: bool,
}

/// Orders a client remembers for cancels and moves.
const ORDERS_REMEMBERED_MAX: usize = 32;

impl LoadClient {
    fn command_next(&mut self) -> CommandBody {
        let roll = self.rng.gen_range(0..100);
        if roll < 40 && !self.orders.is_empty() {
            let pick = self.rng.gen_range(0..self.orders.len());
            let (order, account) = self.orders[pick];
            if roll < 25 {
                self.orders.swap_remove(pick);
                return CommandBody::Cancel { account, symbol: self.symbol, order };
            }
            return CommandBody::Move { account, symbol: self.symbol, order, px: Px(self.rng.gen_range(990..=1010)) };
        }
        let account = self.accounts[self.rng.gen_range(0..self.accounts.len())];
        let side = if self.rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
        let px = match side {
            Side::Buy => self.rng.gen_range(985..=1005),
            Side::Sell => self.rng.gen_range(995..=1015),
        };
        let tif = if self.rng.gen_bool(0.15) { Tif::Ioc } else { Tif::Gtc };
        let qty = Qty(self.rng.gen_range(1..=20));
        CommandBody::Place(OrderRequest::limit(account, self.symbol, side, Px(px), qty, tif))
    }

    fn wire(&self, seq: u64, body: &CommandBody) -> proto::ClientCommand {
        proto::ClientCommand::from(&Command { client: ClientId(self.id), seq, ts: 0, body: body.clone() })
    }

    /// A batch of new commands, recorded as unacknowledged before it is sent.
    fn batch_new(&mut self, len: usize) -> proto::ClientBatch {
        let mut commands = Vec::with_capacity(len);
        for _ in 0..len {
            let seq = self.seq_next;
            self.seq_next += 1;
            let body = self.command_next();
            commands.push(self.wire(seq, &body));
            self.unacked.insert(seq, body);
        }
        proto::ClientBatch { client_id: self.id, commands }
    }

    /// Every unacknowledged command again, same seq, in seq order.
    fn batches_resend(&self) -> Vec<proto::ClientBatch> {
        let commands: Vec<proto::ClientCommand> =
            self.unacked.iter().map(|(&seq, body)| self.wire(seq, body)).collect();
        commands
            .chunks(BATCH_COMMANDS_MAX)
            .map(|chunk| proto::ClientBatch { client_id: self.id, commands: chunk.to_vec() })
            .collect()
    }

    fn ack_record(&mut self, ack: proto::Ack) {
        let body = self
            .unacked
            .remove(&ack.seq)
            .unwrap_or_else(|| panic!("client {}: ack for seq {} that is not outstanding: {ack:?}", self.id, ack.seq));
        if let (CommandBody::Place(order), Some(proto::ack::Outcome::OkId(id))) = (&body, &ack.outcome) {
            if self.orders.len() == ORDERS_REMEMBERED_MAX {
                self.orders.remove(0);
            }
            self.orders.push((OrderId(*id), order.account));
        }
        self.acks.push(AckSeen { client: self.id, ack, before_kill: self.before_kill });
    }
}

/// Runs one session of `client` against the node at `url`: resends everything
/// unacknowledged, then sends up to `commands_new_max` new commands, keeping at most
/// [`IN_FLIGHT_MAX`] outstanding, until all are acknowledged. An error is how the
/// session ended (the node died, or broke the stream).
async fn session_drive(
    client: &mut LoadClient,
    url: &str,
    commands_new_max: u64,
    acked_total: &AtomicU64,
) -> Result<(), String> {
    let mut order_entry = support::bounded("connect", OrderEntryClient::connect(url.to_string()))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    // Room for every batch that can be outstanding, so sending never waits.
    let (sender, receiver) = mpsc::channel::<proto::ClientBatch>(IN_FLIGHT_MAX + 1);
    let mut replies =
        support::bounded("open session", order_entry.session(tokio_stream::wrappers::ReceiverStream::new(receiver)))
            .await
            .map_err(|status| format!("open session: {status}"))?
            .into_inner();
    for batch in client.batches_resend() {
        sender.try_send(batch).map_err(|e| format!("send: {e}"))?;
    }
    let seq_end = client.seq_next + commands_new_max;
    loop {
        let room = IN_FLIGHT_MAX - client.unacked.len();
        let left = (seq_end - client.seq_next) as usize;
        if room > 0 && left > 0 {
            let len = client.rng.gen_range(1..=BATCH_COMMANDS_MAX).min(room).min(left);
            let batch = client.batch_new(len);
            sender.try_send(batch).map_err(|e| format!("send: {e}"))?;
            continue;
        }
        if client.unacked.is_empty() {
            return Ok(());
        }
        let batch = match tokio::time::timeout(support::RPC_WAIT_MAX, replies.next()).await {
            Err(_) => return Err(format!("no reply within {:?}", support::RPC_WAIT_MAX)),
            Ok(None) => return Err("the node ended the stream".into()),
            Ok(Some(Err(status))) => return Err(format!("stream: {status}")),
            Ok(Some(Ok(batch))) => batch,
        };
        acked_total.fetch_add(batch.acks.len() as u64, Ordering::Relaxed);
        for ack in batch.acks {
            client.ack_record(ack);
        }
    }
}

/// Runs every client's session concurrently; returns the clients and how each ended.
async fn sessions_run(
    clients: Vec<LoadClient>,
    url: &str,
    commands_new_max: u64,
    acked_total: &Arc<AtomicU64>,
) -> Vec<tokio::task::JoinHandle<(LoadClient, Result<(), String>)>> {
    clients
        .into_iter()
        .map(|mut client| {
            let url = url.to_string();
            let acked_total = Arc::clone(acked_total);
            tokio::spawn(async move {
                let result = session_drive(&mut client, &url, commands_new_max, &acked_total).await;
                (client, result)
            })
        })
        .collect()
}

async fn sessions_join(
    tasks: Vec<tokio::task::JoinHandle<(LoadClient, Result<(), String>)>>,
) -> Vec<(LoadClient, Result<(), String>)> {
    let mut ended = Vec::new();
    for task in tasks {
        ended.push(support::bounded("session task", task).await.expect("session task panicked"));
    }
    ended
}

fn serve_args(seed: u64, config_dir: &std::path::Path) -> Vec<String> {
    let mut args = vec!["--snapshot-every-commands".to_string(), SNAPSHOT_EVERY_COMMANDS.to_string()];
    if seed % 2 == 1 {
        let path = config_dir.join("node.toml");
        std::fs::write(&path, format!("segment_bytes_max = {SEGMENT_BYTES_PRUNED}\n")).unwrap();
        args.extend(["--config".to_string(), path.to_str().unwrap().to_string()]);
    }
    args
}

async fn crash_run(seed: u64) {
    let started = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let args = serve_args(seed, dir.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &args);
    let addr = node.addr;
    let url = node.url();
    let mut admin = support::admin_connect(&url).await;
    let market = support::market_setup(&mut admin, CLIENTS_LEN as usize * ACCOUNTS_PER_CLIENT).await;
    drop(admin);
    let clients = (0..CLIENTS_LEN).map(|i| LoadClient::new(seed, i, &market)).collect();

    // Load, then SIGKILL at a seeded moment once some acks are in.
    let acked_total = Arc::new(AtomicU64::new(0));
    let tasks = sessions_run(clients, &url, COMMANDS_BEFORE_KILL_MAX, &acked_total).await;
    let waiting = Instant::now();
    while acked_total.load(Ordering::Relaxed) < ACKS_BEFORE_KILL_MIN {
        assert!(waiting.elapsed() < support::RPC_WAIT_MAX, "seed {seed}: no load acks:\n{}", node.stderr());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    tokio::time::sleep(Duration::from_millis(rng.gen_range(0..=KILL_DELAY_MS_MAX))).await;
    node.kill();
    let mut clients = Vec::new();
    for (mut client, ended) in sessions_join(tasks).await {
        let (acks, unacked) = (client.acks.len(), client.unacked.len());
        println!("  client {}: {acks} acks, {unacked} unacked at the kill ({})", client.id, ended.unwrap_err());
        // Acks read after the kill were still sent by the first node: they count as before.
        client.before_kill = false;
        clients.push(client);
    }
    // The directory exactly as the kill left it: every ack seen so far is in it.
    let crashed = support::replay_journal(&data, None);
    crashed_check(seed, &clients, &crashed);

    // Restart on the same directory and port; resend, continue, stop cleanly.
    let node = NodeProcess::start(&data, addr, &args);
    let tasks = sessions_run(clients, &url, COMMANDS_AFTER_RESTART, &acked_total).await;
    let mut clients = Vec::new();
    for (client, ended) in sessions_join(tasks).await {
        if let Err(error) = ended {
            panic!("seed {seed}: client {} after the restart: {error}\n{}", client.id, node.stderr());
        }
        clients.push(client);
    }
    let (status, stderr) = node.terminate();
    assert!(status.success(), "seed {seed}: SIGTERM exit {status}:\n{stderr}");

    let (summary, _) = support::bourse_replay(&data).unwrap_or_else(|f| panic!("replay failed: {}", f.stderr));
    let replay = support::replay_journal(&data, None);
    assert!(replay.tail_cut.is_none(), "seed {seed}: a cleanly stopped node left a torn tail: {:?}", replay.tail_cut);
    assert_eq!(summary.index, replay.index_last, "seed {seed}: bourse replay and the log disagree on the last index");
    assert_eq!(summary.state_hash, replay.state_hash_hex(), "seed {seed}: bourse replay and a fresh engine disagree");
    prefix_check(seed, &crashed, &replay);
    final_check(seed, &clients, &replay);
    println!("  seed {seed} done in {:.2} s", started.elapsed().as_secs_f64());
}

impl LoadClient {
    /// The `i`-th load client, trading its own slice of the market's accounts.
    fn new(seed: u64, i: u64, market: &support::Market) -> LoadClient {
        let first = i as usize * ACCOUNTS_PER_CLIENT;
        LoadClient {
            id: CLIENT_ID_BASE + 1 + i,
            accounts: market.accounts[first..first + ACCOUNTS_PER_CLIENT].to_vec(),
            symbol: SymbolId(market.symbol),
            rng: ChaCha8Rng::seed_from_u64(seed ^ (0x1000 + i)),
            seq_next: 1,
            unacked: BTreeMap::new(),
            acks: Vec::new(),
            orders: Vec::new(),
            before_kill: true,
        }
    }
}

/// What checking acks against a replay found.
#[derive(Default)]
struct AcksChecked {
    checked: u64,
    duplicates: u64,
    /// Acks at or below the snapshot the replay started from: not visible record by record.
    under_snapshot: u64,
}

/// Each ack in `acks` names a record of `replay` holding its `(client, seq)`, and equals
/// the ack the replay computes for that record.
fn acks_check<'a>(seed: u64, acks: impl Iterator<Item = &'a AckSeen>, replay: &Replay) -> AcksChecked {
    let mut found = AcksChecked::default();
    for seen in acks {
        let ack = &seen.ack;
        if ack.log_index <= replay.snapshot_index {
            found.under_snapshot += 1;
            continue;
        }
        let record = replay.records.get(&ack.log_index).unwrap_or_else(|| {
            panic!("seed {seed}: {ack:?} of client {} is past the log's end {}", seen.client, replay.index_last)
        });
        assert_eq!(
            (record.command.client.0, record.command.seq),
            (seen.client, ack.seq),
            "seed {seed}: index {} holds another command than its ack says (ack before the kill: {})",
            ack.log_index,
            seen.before_kill
        );
        assert_eq!(ack, &convert::ack(ack.seq, ack.log_index, &record.applied), "seed {seed}: ack differs from replay");
        found.checked += 1;
        found.duplicates += u64::from(ack.duplicate);
    }
    found
}

/// (c) Every ack seen before the kill is in the log the kill left behind.
fn crashed_check(seed: u64, clients: &[LoadClient], crashed: &Replay) {
    let acks = clients.iter().flat_map(|client| client.acks.iter());
    let found = acks_check(seed, acks, crashed);
    println!(
        "  after the kill: log ends at {} (torn tail: {:?}); {} acks found at their index, {} under snapshot {}",
        crashed.index_last,
        crashed.tail_cut.as_ref().map(|cut| cut.bytes_cut),
        found.checked,
        found.under_snapshot,
        crashed.snapshot_index
    );
    assert!(found.checked > 0, "seed {seed}: the log after the kill reaches back to no ack");
}

/// The restart kept every record the killed node had written, at the same index.
fn prefix_check(seed: u64, crashed: &Replay, replay: &Replay) {
    assert!(crashed.index_last <= replay.index_last, "seed {seed}: the log shrank after the restart");
    for (index, before) in crashed.records.range(replay.snapshot_index + 1..) {
        let after = &replay.records[index];
        assert_eq!(before.command, after.command, "seed {seed}: record {index} changed across the restart");
    }
}

/// (a) and (b) after the restart: every ack is at its index with the replay's outcome,
/// a duplicate's outcome is the original's, and every command sent was applied once.
fn final_check(seed: u64, clients: &[LoadClient], replay: &Replay) {
    let originals = originals_find(replay);
    let found = acks_check(seed, clients.iter().flat_map(|client| client.acks.iter()), replay);
    for client in clients {
        assert!(client.unacked.is_empty(), "client {} still waits for {:?}", client.id, client.unacked.keys());
        for seen in client.acks.iter().filter(|seen| seen.ack.log_index > replay.snapshot_index) {
            let ack = &seen.ack;
            let original = originals.get(&(client.id, ack.seq));
            if !ack.duplicate {
                assert_eq!(original.map(|o| o.0), Some(ack.log_index), "seed {seed}: first application of {ack:?}");
            } else if let Some(&(_, outcome)) = original {
                assert_eq!(Some(proto::ack::Outcome::from(outcome)), ack.outcome, "seed {seed}: duplicate {ack:?}");
            }
        }
        applied_once_check(seed, client, replay, &originals);
    }
    println!(
        "  after the restart: log ends at {}; {} acks checked ({} answered as duplicates), {} under snapshot {}",
        replay.index_last, found.checked, found.duplicates, found.under_snapshot, replay.snapshot_index
    );
}

/// The first application of each `(client, seq)` in the replayed records: its index and
/// outcome. A second non-duplicate application of the same pair fails the test, and so
/// does a load client's command refused for its sequence number.
fn originals_find(replay: &Replay) -> HashMap<(u64, u64), (u64, Outcome)> {
    let mut originals = HashMap::new();
    for (&index, record) in &replay.records {
        let key = (record.command.client.0, record.command.seq);
        if record.applied.duplicate {
            continue;
        }
        if let Outcome::Rejected(Reject::SequenceGap | Reject::SequenceTooOld) = record.applied.outcome {
            assert!(key.0 <= CLIENT_ID_BASE, "load client {key:?} refused at {index}: {:?}", record.applied);
            continue;
        }
        if let Some((first, _)) = originals.insert(key, (index, record.applied.outcome)) {
            panic!("(client, seq) {key:?} applied twice: at {first} and at {index}");
        }
    }
    originals
}

/// Every seq the client used is applied exactly once. A pruned log shows only the
/// latest seqs: those must run without a hole up to the last one.
fn applied_once_check(
    seed: u64,
    client: &LoadClient,
    replay: &Replay,
    originals: &HashMap<(u64, u64), (u64, Outcome)>,
) {
    let seq_last = client.seq_next - 1;
    let seq_first = if replay.snapshot_index == 0 {
        1
    } else {
        (1..=seq_last).find(|&seq| originals.contains_key(&(client.id, seq))).unwrap_or(seq_last + 1)
    };
    for seq in seq_first..=seq_last {
        assert!(
            originals.contains_key(&(client.id, seq)),
            "seed {seed}: client {} seq {seq} was sent but never applied (log from {})",
            client.id,
            replay.snapshot_index + 1
        );
    }
}

/// SIGTERM under load: the node finishes its batch, makes it durable and releases the
/// last acks before it stops serving (node.rs), so every command of a session that
/// reached the log was acknowledged on that session before its stream ended.
#[test]
fn sigterm_under_load_acks_every_logged_command() {
    const CLIENT: u64 = CLIENT_ID_BASE + 50;
    /// Acks to see before the SIGTERM, so the shutdown lands in full flow.
    const ACKS_BEFORE_TERM_MIN: usize = 1500;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (node, acked, ended) = runtime.block_on(async move {
        let mut order_entry = OrderEntryClient::connect(node.url()).await.unwrap();
        // Deep pipelining, so that the shutdown lands with batches in every stage.
        let (sender, receiver) = mpsc::channel::<proto::ClientBatch>(256);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let mut replies = order_entry.session(stream).await.unwrap().into_inner();
        let feeder = tokio::spawn(async move {
            for first in (1..=COMMANDS_BEFORE_KILL_MAX).step_by(BATCH_COMMANDS_MAX) {
                let commands = (first..first + BATCH_COMMANDS_MAX as u64)
                    .map(|seq| Command { client: ClientId(CLIENT), seq, ts: 0, body: CommandBody::CreateAccount })
                    .map(|command| proto::ClientCommand::from(&command))
                    .collect();
                if sender.send(proto::ClientBatch { client_id: CLIENT, commands }).await.is_err() {
                    break;
                }
            }
        });
        let mut acked = std::collections::HashSet::new();
        let mut termed = false;
        let ended = loop {
            if !termed && acked.len() >= ACKS_BEFORE_TERM_MIN {
                node.term();
                termed = true;
            }
            match support::bounded("session reply", replies.next()).await {
                Some(Ok(batch)) => acked.extend(batch.acks.iter().map(|ack| ack.log_index)),
                Some(Err(status)) => break format!("{status}"),
                None => break "ended without a status".to_string(),
            }
        };
        feeder.abort();
        (node, acked, ended)
    });
    let (status, stderr) = node.wait();
    assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
    let replay = support::replay_journal(&data, None);
    let logged: Vec<u64> = replay.records.keys().copied().collect();
    let unanswered: Vec<u64> = logged.iter().copied().filter(|index| !acked.contains(index)).collect();
    assert!(
        unanswered.is_empty(),
        "{} of {} logged commands never acked (indexes {}..={}); the stream ended with: {ended}",
        unanswered.len(),
        logged.len(),
        unanswered[0],
        unanswered[unanswered.len() - 1]
    );
}

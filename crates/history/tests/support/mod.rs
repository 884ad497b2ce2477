//! Shared by the history tests: a seeded log with its events computed by an engine of
//! the test's own, table dumps, and sinks over both backends.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use bourse_engine::command::{Command, CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::fuzzing::{body_from_bytes, seeded_bytes, Bytes};
use bourse_engine::{codec, AccountId, Amount, AssetId, ClientId, Engine, EngineConfig, Event, Px, Qty};
use bourse_history::store::Value;
use bourse_history::{Feed, LogEntry, Opened, Sink, SinkConfig, Store};

/// One command of the log with what the test's engine made of it.
pub struct Applied {
    pub index: u64,
    pub ts: u64,
    pub command: Command,
    pub events: Vec<Event>,
}

/// A seeded log and its events.
pub struct Workload {
    pub entries: Vec<LogEntry>,
    pub applied: Vec<Applied>,
    /// The engine after the whole log.
    pub engine: Engine,
}

/// The fuzzing fixture's market (three assets, a FIFO and a pro-rata symbol, four
/// funded accounts), then `commands` commands built from seeded bytes (orders of every
/// kind, stops, icebergs, self trades, cancels, moves, reduces, bad input), grouped
/// into entries of 1 to `entry_commands_max` commands (a cluster's batches), indexes
/// from `first_index`.
pub fn workload(seed: u64, commands: usize, entry_commands_max: usize, first_index: u64) -> Workload {
    scripted_workload(seed, commands, entry_commands_max, first_index, Vec::new())
}

/// [`workload`] on the fuzzing fixture's whole market: its two margin contracts too
/// (`fuzzing::margin_market`), so the stream has positions, marks, liquidations and
/// the close of the day's settlements.
pub fn margin_workload(seed: u64, commands: usize, entry_commands_max: usize) -> Workload {
    scripted_workload(seed, commands, entry_commands_max, 1, bourse_engine::fuzzing::margin_market())
}

/// [`workload`] with `script` (commands of client 1) after the market's setup and before
/// the seeded commands.
pub fn scripted_workload(
    seed: u64,
    commands: usize,
    entry_commands_max: usize,
    first_index: u64,
    script: Vec<CommandBody>,
) -> Workload {
    let mut engine = Engine::new(EngineConfig::default());
    let mut seqs = [0u64; 3];
    let mut ts = 1_700_000_000_000_000_000u64;
    let mut bodies: Vec<(usize, CommandBody)> = Vec::new();
    for name in ["USD", "ACME", "BETA"] {
        bodies.push((0, CommandBody::CreateAsset { name: name.into(), decimals: 2 }));
    }
    for (name, base, policy, fee_maker, fee_taker, tick, lot) in
        [("ACME/USD", 1, MatchPolicy::Fifo, -1, 2, 1, 1), ("BETA/USD", 2, MatchPolicy::ProRata, 0, 3, 5, 10)]
    {
        bodies.push((
            0,
            CommandBody::CreateSymbol(Box::new(SymbolSpec {
                name: name.into(),
                base: AssetId(base),
                quote: AssetId(0),
                tick: Px(tick),
                lot: Qty(lot),
                px_min: Px(500),
                px_max: Px(5_000),
                fee_maker: Amount(fee_maker),
                fee_taker: Amount(fee_taker),
                policy,
            })),
        ));
    }
    for _ in 0..4 {
        bodies.push((0, CommandBody::CreateAccount));
    }
    for account in 0..4 {
        let account = AccountId(account);
        bodies.push((0, CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(50_000_000) }));
        for asset in [1, 2] {
            bodies.push((0, CommandBody::Credit { account, asset: AssetId(asset), amount: Amount(20_000) }));
        }
    }
    bodies.extend(script.into_iter().map(|body| (0, body)));
    let bytes = seeded_bytes(seed, commands * 24);
    let mut bytes = Bytes::new(&bytes);
    let mut applied = Vec::new();
    let mut events = Vec::new();
    let mut setup = bodies.into_iter();
    let mut made = 0;
    let mut rng = seed | 1;
    let mut next_rand = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    loop {
        let (client, body) = match setup.next() {
            Some(b) => b,
            None if made < commands => {
                made += 1;
                let client = (next_rand() % 3) as usize;
                let body = body_from_bytes(&mut bytes, &engine);
                // Now and then a suspension or a withdrawal, which the fixture lacks.
                let body = match next_rand() % 200 {
                    0 => CommandBody::SuspendAccount { account: AccountId((next_rand() % 4) as u32) },
                    1 => CommandBody::ResumeAccount { account: AccountId((next_rand() % 4) as u32) },
                    2 => CommandBody::Withdraw {
                        account: AccountId((next_rand() % 4) as u32),
                        asset: AssetId(0),
                        amount: Amount(1_000),
                    },
                    _ => body,
                };
                (client, body)
            }
            None => break,
        };
        seqs[client] += 1;
        // Times step forward, with a few steps back (a new leader's clock behind): the
        // engine applies those at its last time, and so must the sink.
        ts = if next_rand() % 50 == 0 { ts - 5_000 } else { ts + 1_000 + next_rand() % 1_000 };
        let command = Command { client: ClientId(client as u64 + 1), seq: seqs[client], ts, body };
        let mut clamped = command.clone();
        clamped.ts = clamped.ts.max(engine.ts_last());
        events.clear();
        engine.apply(&clamped, &mut events);
        applied.push(Applied { index: 0, ts: clamped.ts, command, events: events.clone() });
    }
    // Entries of 1..=entry_commands_max commands.
    let mut entries = Vec::new();
    let mut i = 0;
    let mut index = first_index;
    while i < applied.len() {
        let n = (1 + (next_rand() as usize) % entry_commands_max).min(applied.len() - i);
        let commands = applied[i..i + n].iter().map(|a| codec::encode(&a.command)).collect();
        for a in &mut applied[i..i + n] {
            a.index = index;
        }
        entries.push(LogEntry { index, commands });
        index += 1;
        i += n;
    }
    Workload { entries, applied, engine }
}

/// A sink configuration that cuts small batches and snapshots often, so tests cross
/// every boundary.
pub fn small_config() -> SinkConfig {
    SinkConfig {
        queue_chunks_max: 4,
        queue_batches_max: 2,
        batch_rows_max: 300,
        transaction_rows_max: 600,
        snapshot_every_entries: 250,
        snapshot_every_secs: 3600,
        commit_every_ms: 0,
        background: false,
        yield_to: None,
    }
}

/// Feeds `entries` (in chunks of up to 37) into a sink on `url` and waits until written.
pub fn run_sink(url: &str, entries: &[LogEntry], config: SinkConfig) -> Sink {
    let opened = Opened::open(url).expect("open the store");
    let from = opened.from_index();
    let sink = Sink::start(opened, EngineConfig::default(), config).expect("start the sink");
    let sender = sink.sender();
    let head = entries.last().map_or(0, |e| e.index);
    for chunk in entries.iter().filter(|e| e.index >= from).collect::<Vec<_>>().chunks(37) {
        let entries = chunk.iter().map(|e| (*e).clone()).collect();
        sender.blocking_send(Feed::Entries { entries, head_index: head, head_ts: 0 }).expect("the sink takes entries");
    }
    drop(sender);
    sink
}

/// Runs a sink over all of `entries` to the end.
pub fn sink_all(url: &str, entries: &[LogEntry]) {
    let sink = run_sink(url, entries, small_config());
    let status = std::sync::Arc::clone(&sink.status);
    sink.finish().expect("the sink finishes");
    assert_eq!(status.written_index.load(Ordering::Relaxed), entries.last().unwrap().index);
}

/// Every row of every table, by key.
pub fn dump(url: &str) -> BTreeMap<&'static str, Vec<Vec<Value>>> {
    let mut store = Store::open(url).expect("open the store");
    let mut out = BTreeMap::new();
    for (table, _) in bourse_history::schema::TABLES {
        let rows = store.query(&format!("SELECT * FROM {table} ORDER BY log_index, pos"), &[]).expect("dump");
        out.insert(*table, rows);
    }
    out
}

/// A fresh SQLite file URL in `dir`.
pub fn sqlite_url(dir: &std::path::Path, name: &str) -> String {
    format!("sqlite:{}", dir.join(name).display())
}

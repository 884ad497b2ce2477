//! `bourse bench recovery`: how long a node takes to come back from its journal.
//!
//! Builds a journal of `--commands` ec2020 commands (the exchange-core 2020 mix on one
//! book, after the market's setup and pre-fill) in a scratch directory, then times
//! `bourse_node::recover` twice: from the log alone, and from a snapshot taken
//! `--snapshot-tail` commands before the end plus the records after it. Both must reach
//! the same index and state hash as the generator's own engine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use bourse_engine::command::Command;
use bourse_engine::{codec, hex, Engine, Event};
use bourse_journal::{Entry, Journal, JournalConfig};
use bourse_node::NodeConfig;
use bourse_sim::workload::ec::{ec_market_spec, EC2020};
use bourse_sim::workload::generator::Generator;
use bourse_sim::workload::market::Market;
use clap::Args;
use serde_json::json;

use super::report::{progress, round3, Report};

#[derive(Args, Debug)]
pub struct RecoveryArgs {
    /// Commands in the journal after setup and pre-fill.
    #[arg(long, default_value_t = 10_000_000)]
    pub commands: u64,
    /// Commands logged after the snapshot in the snapshot case.
    #[arg(long, default_value_t = 100_000)]
    pub snapshot_tail: u64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Scratch directory (two data directories are made inside; removed afterwards).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    #[arg(long)]
    pub json: bool,
}

const CHUNK: u64 = 100_000;

fn entry(index: u64, command: &Command) -> Entry {
    Entry { index, timestamp_ns: command.ts, payload: codec::encode(command) }
}

/// What [`build`] wrote.
struct Built {
    /// The engine snapshot `snapshot_tail` commands before the end, and its index.
    snapshot_index: u64,
    snapshot: Vec<u8>,
    /// The generator's state hash after the last command.
    hash: [u8; 32],
    last_index: u64,
}

/// Writes setup, pre-fill and `commands` generated commands into `data/journal`.
fn build(data: &Path, args: &RecoveryArgs) -> Result<Built, String> {
    let journal_dir = bourse_node::journal_dir(data);
    let (mut journal, _) = Journal::open(&journal_dir, JournalConfig::default()).map_err(|e| e.to_string())?;
    let mut market = Market::new(ec_market_spec(), args.seed);
    let mut engine = Engine::default();
    let mut events: Vec<Event> = Vec::new();
    let mut entries = Vec::new();
    let mut index = 0u64;
    while let Some(command) = market.next_setup() {
        events.clear();
        engine.apply(&command, &mut events);
        index += 1;
        entries.push(entry(index, &command));
    }
    journal.append(&entries).map_err(|e| e.to_string())?;
    let mut generator = Generator::new(market, engine, EC2020, u64::MAX);
    let snapshot_at = args.commands.saturating_sub(args.snapshot_tail);
    let mut snapshot = (index, generator.engine().snapshot());
    let mut written = 0u64;
    while written < args.commands {
        let chunk = CHUNK.min(args.commands - written).min(if written < snapshot_at {
            snapshot_at - written
        } else {
            u64::MAX
        });
        let commands = generator.generate(chunk);
        let entries: Vec<Entry> = commands
            .iter()
            .map(|c| {
                index += 1;
                entry(index, c)
            })
            .collect();
        journal.append(&entries).map_err(|e| e.to_string())?;
        written += chunk;
        if written == snapshot_at {
            snapshot = (index, generator.engine().snapshot());
        }
        if written % 1_000_000 < CHUNK {
            progress(format!("  journal: {written} of {} commands written", args.commands));
        }
    }
    journal.sync().map_err(|e| e.to_string())?;
    let (snapshot_index, snapshot) = snapshot;
    Ok(Built { snapshot_index, snapshot, hash: generator.engine().state_hash(), last_index: index })
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

pub fn run(args: &RecoveryArgs) -> Result<(), String> {
    let scratch = match &args.dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("bourse-bench-recovery-{}", std::process::id())),
    };
    let (log_only, with_snapshot) = (scratch.join("log-only"), scratch.join("with-snapshot"));
    let _ = std::fs::remove_dir_all(&scratch);
    let mut report = Report::new(args.json);
    report.say(format!(
        "bourse bench recovery: {} ec2020 commands (seed {}), snapshot {} commands before the end",
        args.commands, args.seed, args.snapshot_tail
    ));
    let started = Instant::now();
    let Built { snapshot_index, snapshot, hash, last_index } = build(&log_only, args)?;
    let bytes_on_disk = dir_bytes(&bourse_node::journal_dir(&log_only));
    report.say(format!(
        "  journal of {last_index} records ({:.0} MiB) built in {:.1} s",
        bytes_on_disk as f64 / (1 << 20) as f64,
        started.elapsed().as_secs_f64()
    ));
    copy_dir(&log_only, &with_snapshot).map_err(|e| e.to_string())?;
    {
        let (mut journal, _) = Journal::open(bourse_node::journal_dir(&with_snapshot), JournalConfig::default())
            .map_err(|e| e.to_string())?;
        journal.write_snapshot(snapshot_index, &snapshot).map_err(|e| e.to_string())?;
    }
    let mut cases = Vec::new();
    for (name, data) in [("log_only", &log_only), ("with_snapshot", &with_snapshot)] {
        let (_, _, recovered) = bourse_node::recover(data, &NodeConfig::default()).map_err(|e| e.to_string())?;
        if recovered.index != last_index || recovered.state_hash != hash {
            return Err(format!(
                "{name}: recovered index {} hash {} != {last_index} {}",
                recovered.index,
                hex(&recovered.state_hash),
                hex(&hash)
            ));
        }
        let seconds = recovered.elapsed.as_secs_f64();
        report.say(format!(
            "  {name}: recovered index {} (snapshot {:?}, {} records replayed) in {seconds:.3} s = {:.2} M records/s",
            recovered.index,
            recovered.snapshot_index,
            recovered.entries_replayed,
            recovered.entries_replayed as f64 / seconds / 1e6
        ));
        cases.push(json!({"case": name, "seconds": round3(seconds), "snapshot_index": recovered.snapshot_index, "records_replayed": recovered.entries_replayed}));
    }
    let _ = std::fs::remove_dir_all(&scratch);
    report.set("workload", "recovery");
    report.set("seed", args.seed);
    report.set("commands", args.commands);
    report.set("index", last_index);
    report.set("journal_bytes", bytes_on_disk);
    report.set("state_hash", hex(&hash));
    report.set("cases", cases);
    report.finish();
    Ok(())
}

fn dir_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir).map_or(0, |entries| entries.filter_map(|e| e.ok()?.metadata().ok()).map(|m| m.len()).sum())
}

//! The phases shared by the flow workloads: throughput cycles, then latency runs, each
//! on a fresh copy of the starting engine and each checked against the end state the
//! generator reached (a replay that diverged would measure something else).

use bourse_engine::command::Command;
use bourse_engine::{hex, Engine, OrderId};
use serde_json::Value;

use super::measure::{median, mops, run_closed_loop, run_open_loop, RunCounts};
use super::report::{latency_json, latency_line, progress, round3, Report};

/// The end state a replay must reach.
pub struct Expected {
    pub next_order_id: OrderId,
    pub orders_resting: usize,
    pub rejected: u64,
    /// The full state hash, when it is cheap enough to compute per run.
    pub state_hash: Option<[u8; 32]>,
}

impl Expected {
    pub fn of(engine: &Engine, rejected: u64, with_hash: bool) -> Self {
        Expected {
            next_order_id: engine.next_order_id(),
            orders_resting: engine.orders_resting(),
            rejected,
            state_hash: with_hash.then(|| engine.state_hash()),
        }
    }

    pub fn check(&self, engine: &Engine, counts: RunCounts, run: &str) -> Result<(), String> {
        let got = (engine.next_order_id(), engine.orders_resting(), counts.rejected);
        let want = (self.next_order_id, self.orders_resting, self.rejected);
        if got != want {
            return Err(format!("{run}: replay diverged: (next id, resting, rejected) {got:?}, generator {want:?}"));
        }
        if let Some(want) = self.state_hash {
            let got = engine.state_hash();
            if got != want {
                return Err(format!("{run}: replay state hash {} differs from generator's {}", hex(&got), hex(&want)));
            }
        }
        Ok(())
    }
}

/// Closed-loop throughput over `cycles` cycles; sets `cycles`, `seconds` (median cycle),
/// `mops` (commands / median) and `mops_cycles`.
pub fn throughput(
    report: &mut Report,
    start: &Engine,
    commands: &[Command],
    cycles: u32,
    expected: &Expected,
) -> Result<(), String> {
    report.say("throughput (one thread, each cycle on a fresh copy of the starting engine):");
    let mut durations = Vec::new();
    for cycle in 1..=cycles {
        let mut engine = start.clone();
        let (elapsed, counts) = run_closed_loop(&mut engine, commands);
        expected.check(&engine, counts, &format!("cycle {cycle}"))?;
        let line = format!(
            "cycle {cycle}/{cycles}: {} commands in {:.3} s = {:.3} M commands/s",
            counts.commands,
            elapsed.as_secs_f64(),
            mops(counts.commands, elapsed)
        );
        progress(&line);
        report.say(format!("  {line}"));
        durations.push(elapsed);
    }
    let median = median(&durations);
    let commands_len = commands.len() as u64;
    report.say(format!(
        "  median: {:.3} M commands/s ({:.3} s a cycle)",
        mops(commands_len, median),
        median.as_secs_f64()
    ));
    report.set("cycles", cycles);
    report.set("seconds", median.as_secs_f64());
    report.set("mops", round3(mops(commands_len, median)));
    let per_cycle: Vec<Value> = durations.iter().map(|d| round3(mops(commands_len, *d)).into()).collect();
    report.set("mops_cycles", per_cycle);
    Ok(())
}

/// A latency run stops after this many seconds of scheduled sends, so that a low rate
/// does not keep the benchmark running for hours; it then covers the first commands only.
const LATENCY_SCHEDULE_SECONDS_MAX: u64 = 10;

/// Open-loop latency at each rate; sets `latency_ns` (first rate) and `latency` (all).
pub fn latency(
    report: &mut Report,
    start: &Engine,
    commands: &[Command],
    rates: &[u64],
    expected: &Expected,
) -> Result<(), String> {
    report.say("latency (open loop, from each command's intended send time, one thread):");
    let mut runs = Vec::new();
    for &rate in rates {
        let scheduled_max = rate.saturating_mul(LATENCY_SCHEDULE_SECONDS_MAX);
        let run = &commands[..commands.len().min(usize::try_from(scheduled_max).unwrap_or(usize::MAX))];
        let mut engine = start.clone();
        let (latency, counts) = run_open_loop(&mut engine, run, rate);
        // A shortened run ends elsewhere than the generator did; only a whole one is checked.
        if run.len() == commands.len() {
            expected.check(&engine, counts, &format!("rate {rate}"))?;
        }
        let line = latency_line(&latency);
        progress(format!("latency {}", line.trim_start()));
        report.say(line);
        runs.push(latency_json(&latency));
    }
    report.set("latency_ns", runs[0].clone());
    report.set("latency", runs);
    Ok(())
}

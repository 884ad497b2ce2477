//! `--workload sweep`: one IOC buy trades with 100,000 resting sells over 10,000 levels.
//!
//! Each cycle copies the prepared engine, applies the one sweeping order and times that
//! call alone. The event buffer is allocated and touched beforehand at the size the
//! sweep needs, as a long-running engine's reused buffer would be. The "latency" figures are those of
//! the sweep command itself over the cycles.

use std::time::{Duration, Instant};

use bourse_engine::{AccountId, Event, Outcome};
use bourse_sim::workload::sweep::{SweepWorkload, SWEEP_ACCOUNTS, SWEEP_LEVELS, SWEEP_ORDERS};
use serde_json::{json, Value};

use super::engine::EngineArgs;
use super::measure::{median, mops, new_histogram, Latency};
use super::report::{latency_json, progress, round3, Report};

/// Events per fill: the trade and four balances; plus a few for the order itself.
const EVENTS_PER_FILL: usize = 5;

pub fn run(args: &EngineArgs) -> Result<(), String> {
    let mut report = Report::new(args.json);
    report.say(format!(
        "bourse bench engine: workload sweep, seed {}: {SWEEP_ORDERS} sells from {SWEEP_ACCOUNTS} accounts \
         over {SWEEP_LEVELS} levels, swept by one IOC buy; {} cycles",
        args.seed, args.cycles
    ));
    progress(format!("building the {SWEEP_ORDERS}-order book, seed {}", args.seed));
    let workload = SweepWorkload::build(args.seed, SWEEP_ORDERS, SWEEP_LEVELS, SWEEP_ACCOUNTS);
    let mut histogram = new_histogram();
    let mut durations = Vec::new();
    let mut fills = 0;
    let mut events_len = 0;
    for cycle in 1..=args.cycles {
        let (elapsed, cycle_fills, cycle_events) = sweep_once(&workload)?;
        let line = format!(
            "cycle {cycle}/{}: {cycle_fills} fills in {:.3} ms = {:.3} M fills/s",
            args.cycles,
            elapsed.as_secs_f64() * 1e3,
            mops(cycle_fills, elapsed)
        );
        progress(&line);
        report.say(format!("  {line}"));
        histogram.saturating_record(elapsed.as_nanos() as u64);
        durations.push(elapsed);
        (fills, events_len) = (cycle_fills, cycle_events);
    }
    let median = median(&durations);
    report.say(format!(
        "  median: sweep of {fills} fills ({events_len} events) in {:.3} ms = {:.3} M fills/s",
        median.as_secs_f64() * 1e3,
        mops(fills, median)
    ));
    let latency = Latency::from_histogram(&histogram, 0, durations.iter().sum());
    let mut latency_ns = latency_json(&latency);
    latency_ns["what"] = "the sweep command, over the cycles".into();
    report.set("workload", "sweep");
    report.set("seed", args.seed);
    report.set("commands", 1);
    report.set("cycles", args.cycles);
    report.set("seconds", median.as_secs_f64());
    report.set("mops", mops(1, median));
    report.set("orders", workload.orders);
    report.set("levels", workload.levels);
    report.set("qty_total", workload.qty_total);
    report.set("fills", fills);
    report.set("events", events_len as u64);
    report.set("fills_per_second", round3(fills as f64 / median.as_secs_f64()));
    report.set("fills_mps", round3(mops(fills, median)));
    let per_cycle: Vec<Value> = durations.iter().map(|d| json!(d.as_secs_f64())).collect();
    report.set("seconds_cycles", per_cycle);
    report.set("latency_ns", latency_ns.clone());
    report.set("latency", vec![latency_ns]);
    report.finish();
    Ok(())
}

/// One timed sweep on a fresh copy; returns its time, fills and events.
fn sweep_once(workload: &SweepWorkload) -> Result<(Duration, u64, usize), String> {
    let mut engine = workload.start.clone();
    let mut events: Vec<Event> = Vec::with_capacity(workload.orders as usize * EVENTS_PER_FILL + 64);
    // Touch the buffer's pages now, as a reused buffer's would be.
    events.resize(events.capacity(), Event::AccountCreated { account: AccountId(0) });
    events.clear();
    let started = Instant::now();
    let applied = engine.apply(&workload.sweep, &mut events);
    let elapsed = started.elapsed();
    if !matches!(applied.outcome, Outcome::Ok { .. }) {
        return Err(format!("the sweep was refused: {applied:?}"));
    }
    let fills = events.iter().filter(|e| matches!(e, Event::Trade { .. })).count() as u64;
    if fills != u64::from(workload.orders) || engine.orders_resting() != 0 {
        return Err(format!("the sweep made {fills} fills and left {} orders", engine.orders_resting()));
    }
    Ok((elapsed, fills, events.len()))
}

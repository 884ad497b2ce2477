//! `--workload groups`: the exchange partitioned over G groups in one process, a
//! thread per group (`bourse-shard`), against one engine on one thread.
//!
//! Market: 100,000 accounts over 10,000 books by default (`--accounts`, `--symbols`;
//! the scale layout, smaller: every
//! group's symbol part mirrors every account), 5 orders a side pre-filled, then the
//! scale mix (exchange-core 2018's) over books picked at random. Accounts live in
//! groups by a hash of their id and symbols by id modulo G, so about (G-1)/G of the
//! orders cross from one group to another and back.
//!
//! Phases, per G: the setup and the mixed commands go through the groups in one thread
//! once, untimed (the groups number orders themselves, so the commands that name one
//! are rewritten with its id there, and each records which placement it waits for);
//! then each cycle runs the mixed commands on a fresh copy of the set-up groups, a
//! thread per group and the driver on the calling thread, and is checked to end with
//! one engine's balances, books, fees and supply. Measured: wall time, each thread's
//! CPU time (from `/proc/thread-self/schedstat`), messages between threads.
//! Projected (and said so): throughput with a core per group, as commands over the
//! busiest group's CPU time.

use std::time::{Duration, Instant};

use bourse_engine::command::Command;
use bourse_engine::{Engine, EngineConfig};
use bourse_shard::threads::{self, thread_cpu};
use bourse_shard::{Replicated, ShardMap, Summary, Translator};
use bourse_sim::workload::generator::Generator;
use bourse_sim::workload::market::Market;
use bourse_sim::workload::scale::{scale_market_spec, SCALE_PROFILE};
use serde_json::json;

use super::engine::EngineArgs;
use super::measure::{median, mops, run_closed_loop};
use super::report::{mix_json, mix_lines, progress, round3, Report};

const ACCOUNTS: u32 = 100_000;
const SYMBOLS: u32 = 10_000;
const ORDERS_PER_SIDE: u32 = 5;
const COMMANDS_DEFAULT: u64 = 1_000_000;
/// Commands the driver sends to the groups at a time, and at most unacknowledged.
const BATCH: usize = 256;
const WINDOW: usize = 16_384;

pub fn run(args: &EngineArgs) -> Result<(), String> {
    let groups_list = if args.groups.is_empty() { vec![1, 2, 4] } else { args.groups.clone() };
    if groups_list.iter().any(|&g| g == 0 || g > 64) {
        return Err("--groups takes group counts from 1 to 64".into());
    }
    let commands_len = args.commands.unwrap_or(COMMANDS_DEFAULT);
    let accounts = args.accounts.unwrap_or(ACCOUNTS);
    let symbols = args.symbols.unwrap_or(SYMBOLS);
    if symbols == 0 || accounts < symbols {
        return Err("--symbols must be at least 1 and --accounts at least --symbols (every book needs a trader)".into());
    }
    let mut report = Report::new(args.json);
    report.say(format!(
        "bourse bench engine: workload groups, seed {}: {accounts} accounts, {symbols} books, {} resting orders; \
         {commands_len} mixed commands a cycle ({} mix), groups {:?}, {} cycles",
        args.seed,
        2 * u64::from(symbols) * u64::from(ORDERS_PER_SIDE),
        SCALE_PROFILE.name,
        groups_list,
        args.cycles
    ));
    report.set("workload", "groups");
    report.set("seed", args.seed);
    report.set("commands", commands_len);
    report.set("accounts", accounts);
    report.set("symbols", symbols);

    progress("setting up one engine and generating the mixed commands (not timed)");
    let mut market = Market::new(scale_market_spec(accounts, symbols, ORDERS_PER_SIDE), args.seed);
    let mut setup: Vec<Command> = Vec::with_capacity((market.spec.setup_len() + market.spec.prefill_len()) as usize);
    while let Some(command) = market.next_setup() {
        setup.push(command);
    }
    let config = EngineConfig::default();
    let mut start: Engine = Engine::new(config);
    let (_, counts) = run_closed_loop(&mut start, &setup);
    if counts.rejected != 0 {
        return Err(format!("setup: {} commands refused", counts.rejected));
    }
    let mut generator = Generator::new(market, start.clone(), SCALE_PROFILE, commands_len.max(1));
    let commands = generator.generate(commands_len);
    let expected = Summary::of_engine(generator.engine());
    let rejected = generator.mix().rejected;
    for line in mix_lines(generator.mix(), &SCALE_PROFILE) {
        report.say(line);
    }
    report.set("mix", mix_json(generator.mix(), &SCALE_PROFILE));
    drop(generator);

    // One engine, one thread: the baseline.
    report.say("one engine on one thread (each cycle on a fresh copy of the set-up engine):");
    let mut times = Vec::new();
    let mut cpus = Vec::new();
    for cycle in 1..=args.cycles {
        let mut engine = start.clone();
        let cpu = thread_cpu();
        let (elapsed, counts) = run_closed_loop(&mut engine, &commands);
        let cpu = thread_cpu().saturating_sub(cpu);
        if counts.rejected != rejected || Summary::of_engine(&engine) != expected {
            return Err(format!("one engine, cycle {cycle}: the replay diverged from the generator"));
        }
        progress(format!("one engine, cycle {cycle}/{}: {:.3} M commands/s", args.cycles, mops(commands_len, elapsed)));
        times.push(elapsed);
        cpus.push(cpu);
    }
    let engine_cpu_per_m = per_million(median(&cpus), commands_len);
    let engine_mops = mops(commands_len, median(&times));
    report.say(format!(
        "  {engine_mops:.3} M commands/s (median of {}), {engine_cpu_per_m:.3} CPU s per million commands",
        args.cycles
    ));
    report.set("engine", json!({ "mops": round3(engine_mops), "cpu_s_per_m": round3(engine_cpu_per_m) }));

    let mut rows = Vec::new();
    for &g in &groups_list {
        rows.push(run_groups(&mut report, g, args, &setup, &start, &commands, &expected, engine_cpu_per_m)?);
    }
    report.set("groups", rows);
    report.finish();
    Ok(())
}

/// CPU seconds per million commands.
fn per_million(cpu: Duration, commands: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / commands as f64
}

#[allow(clippy::too_many_arguments)]
fn run_groups(
    report: &mut Report,
    g: u32,
    args: &EngineArgs,
    setup: &[Command],
    start: &Engine,
    commands: &[Command],
    expected: &Summary,
    engine_cpu_per_m: f64,
) -> Result<serde_json::Value, String> {
    let n = commands.len() as u64;
    progress(format!("{g} groups: setting up and rewriting order ids in one thread (not timed)"));
    let started = Instant::now();
    let config = EngineConfig::default();
    let mut replicated = Replicated::new(g, config, args.seed, false);
    let mut translator = Translator::default();
    let mut reference = Engine::new(config);
    translator.translate(&mut reference, &mut replicated, setup);
    if Summary::of_engine(&reference) != Summary::of_engine(start) {
        return Err(format!("{g} groups: the set-up reference differs from the benchmark's engine"));
    }
    let set_up = replicated.groups();
    let translated = translator.translate(&mut reference, &mut replicated, commands);
    if replicated.summary() != *expected {
        return Err(format!("{g} groups: the one-thread run ended apart from one engine"));
    }
    drop(replicated);
    let map = ShardMap::new(g);
    let orders = commands.iter().filter(|c| map.order_groups(&c.body).is_some()).count() as u64;
    let crossing = commands.iter().filter(|c| map.order_groups(&c.body).is_some_and(|(a, s)| a != s)).count() as u64;
    progress(format!("{g} groups: prepared in {:.1} s", started.elapsed().as_secs_f64()));

    report.say(format!(
        "{g} groups, a thread each, the driver on another ({:.0}% of the orders cross groups):",
        100.0 * crossing as f64 / orders.max(1) as f64
    ));
    let mut times = Vec::new();
    let mut sums = Vec::new();
    let mut busiest = Vec::new();
    let mut drivers = Vec::new();
    let mut messages = 0;
    for cycle in 1..=args.cycles {
        let (end, run) = threads::run(set_up.clone(), &translated.commands, &translated.deps, BATCH, WINDOW);
        if run.acked != n || Summary::of_groups(&end) != *expected {
            return Err(format!("{g} groups, cycle {cycle}: the threaded run ended apart from one engine"));
        }
        let sum: Duration = run.group_cpu.iter().sum();
        let max = run.group_cpu.iter().max().copied().unwrap_or_default();
        progress(format!(
            "{g} groups, cycle {cycle}/{}: {:.3} M commands/s; group CPU {:?} s, driver {:.2} s",
            args.cycles,
            mops(n, run.elapsed),
            run.group_cpu.iter().map(|c| round3(c.as_secs_f64())).collect::<Vec<_>>(),
            run.driver_cpu.as_secs_f64()
        ));
        times.push(run.elapsed);
        sums.push(sum);
        busiest.push(max);
        drivers.push(run.driver_cpu);
        messages = run.messages;
    }
    let wall_mops = mops(n, median(&times));
    let cpu_per_m = per_million(median(&sums), n);
    let busiest_per_m = per_million(median(&busiest), n);
    let driver_per_m = per_million(median(&drivers), n);
    let overhead = cpu_per_m / engine_cpu_per_m - 1.0;
    let projected = 1.0 / busiest_per_m;
    report.say(format!(
        "  measured: {wall_mops:.3} M commands/s on this host (median); groups' CPU {cpu_per_m:.3} s per million \
         commands ({:.3} per group), {:+.0}% against one engine; driver {driver_per_m:.3} s per million; \
         {:.2} messages a command",
        cpu_per_m / f64::from(g),
        overhead * 100.0,
        messages as f64 / n as f64
    ));
    report.say(format!(
        "  projected with a core per group (commands / the busiest group's CPU time): {projected:.3} M commands/s"
    ));
    Ok(json!({
        "groups": g,
        "mops": round3(wall_mops),
        "cpu_s_per_m": round3(cpu_per_m),
        "cpu_s_per_m_per_group": round3(cpu_per_m / f64::from(g)),
        "busiest_cpu_s_per_m": round3(busiest_per_m),
        "driver_cpu_s_per_m": round3(driver_per_m),
        "overhead_vs_engine": round3(overhead),
        "projected_mops": round3(projected),
        "crossing_share": round3(crossing as f64 / orders.max(1) as f64),
        "messages_per_command": round3(messages as f64 / n as f64),
    }))
}

//! `--workload scale`: 1,000,000 accounts, 100,000 symbols, 1,000,000 resting orders.
//!
//! Phases:
//! 1. setup, timed: assets, symbols, accounts, deposits and the pre-fill, generated in
//!    chunks (untimed) and applied chunk by chunk (timed) to a fresh engine;
//! 2. generation, untimed: the flow generator runs on a copy of that engine;
//! 3. throughput cycles and latency runs of the mixed commands, each on a fresh copy.
//!
//! Memory: `VmRSS` after setup is mostly the engine; the peak (`VmHWM`) also holds the
//! generator's copy, or a run's copy, and the pre-generated commands.

use std::time::{Duration, Instant};

use bourse_engine::command::Command;
use bourse_engine::{Engine, EngineConfig};
use bourse_sim::workload::generator::Generator;
use bourse_sim::workload::market::Market;
use bourse_sim::workload::scale::{
    scale_market_spec, SCALE_ACCOUNTS, SCALE_COMMANDS_DEFAULT, SCALE_ORDERS_PER_SIDE, SCALE_PROFILE, SCALE_SYMBOLS,
};
use serde_json::json;

use super::engine::EngineArgs;
use super::measure::{mops, run_closed_loop};
use super::memory::{mib, resident, Resident};
use super::phases::{latency, throughput, Expected};
use super::report::{book_json, book_line, mix_json, mix_lines, progress, round3, Report};

/// Setup commands generated and applied per chunk.
const SETUP_CHUNK: usize = 1 << 16;
/// Book samples per mixed run (each sample walks every book).
const BOOK_SAMPLES: u64 = 16;
/// Memory the workload should stay under.
const RSS_TARGET_BYTES: u64 = 4 << 30;

pub fn run(args: &EngineArgs) -> Result<(), String> {
    let commands_len = args.commands.unwrap_or(SCALE_COMMANDS_DEFAULT);
    let mut report = Report::new(args.json);
    report.say(format!(
        "bourse bench engine: workload scale, seed {}: {SCALE_ACCOUNTS} accounts, {SCALE_SYMBOLS} symbols, \
         {} resting orders; {commands_len} mixed commands a cycle ({} mix over random books), {} cycles",
        args.seed,
        2 * u64::from(SCALE_SYMBOLS) * u64::from(SCALE_ORDERS_PER_SIDE),
        SCALE_PROFILE.name,
        args.cycles
    ));
    report.set("workload", "scale");
    report.set("seed", args.seed);
    report.set("commands", commands_len);
    report.set("accounts", SCALE_ACCOUNTS);
    report.set("symbols", SCALE_SYMBOLS);
    let resident_start = resident();
    let mut market = Market::new(scale_market_spec(SCALE_ACCOUNTS, SCALE_SYMBOLS, SCALE_ORDERS_PER_SIDE), args.seed);
    let mut engine = Engine::new(EngineConfig::default());
    setup_phase(&mut report, &mut market, &mut engine)?;
    let (commands, expected) = generate_phase(&mut report, market, &engine, commands_len);
    throughput(&mut report, &engine, &commands, args.cycles, &expected)?;
    latency(&mut report, &engine, &commands, &args.rates, &expected)?;
    memory_phase(&mut report, resident_start);
    report.finish();
    Ok(())
}

fn setup_phase(report: &mut Report, market: &mut Market, engine: &mut Engine) -> Result<(), String> {
    let (setup_commands, setup_elapsed) = setup(market, engine)?;
    let resident_setup = resident();
    report.say(format!(
        "  setup: {setup_commands} commands in {:.2} s = {:.3} M commands/s (timed apply; generation not timed)",
        setup_elapsed.as_secs_f64(),
        mops(setup_commands, setup_elapsed)
    ));
    report.say(format!("  resident after setup: {}", mib(resident_setup.rss_bytes)));
    report.set(
        "setup",
        json!({
            "commands": setup_commands,
            "seconds": setup_elapsed.as_secs_f64(),
            "mops": round3(mops(setup_commands, setup_elapsed)),
        }),
    );
    report.set("orders_resting_start", engine.orders_resting());
    report.set("rss_after_setup_bytes", resident_setup.rss_bytes);
    Ok(())
}

/// Runs the generator on a copy of `engine`; returns the commands and the end state
/// every replay must reach. The generator's copy is dropped before anything is timed.
fn generate_phase(report: &mut Report, market: Market, engine: &Engine, commands_len: u64) -> (Vec<Command>, Expected) {
    let sample_every = (commands_len / BOOK_SAMPLES).max(1);
    progress(format!("generating {commands_len} mixed commands"));
    let started = Instant::now();
    let mut generator = Generator::new(market, engine.clone(), SCALE_PROFILE, sample_every);
    let commands: Vec<Command> = generator.generate(commands_len);
    let generate_seconds = started.elapsed().as_secs_f64();
    let expected = Expected::of(generator.engine(), generator.mix().rejected, false);
    report.say(format!("  generated in {generate_seconds:.2} s (not timed)"));
    for line in mix_lines(generator.mix(), &SCALE_PROFILE) {
        report.say(line);
    }
    report.say(book_line(generator.book(), sample_every));
    report.set("generate_seconds", round3(generate_seconds));
    report.set("mix", mix_json(generator.mix(), &SCALE_PROFILE));
    report.set("book", book_json(generator.book(), sample_every));
    (commands, expected)
}

fn memory_phase(report: &mut Report, resident_start: Resident) {
    let resident_end = resident();
    report.say(format!(
        "memory: resident {} at the end, peak {} (target under {}); {} before setup",
        mib(resident_end.rss_bytes),
        mib(resident_end.hwm_bytes),
        mib(Some(RSS_TARGET_BYTES)),
        mib(resident_start.rss_bytes)
    ));
    report.set("rss_bytes", resident_end.rss_bytes);
    report.set("hwm_bytes", resident_end.hwm_bytes);
    report.set("rss_target_bytes", RSS_TARGET_BYTES);
}

/// Generates and applies setup and pre-fill in chunks; only the applying is timed.
fn setup(market: &mut Market, engine: &mut Engine) -> Result<(u64, Duration), String> {
    let total = market.spec.setup_len() + market.spec.prefill_len();
    progress(format!("setup: {total} commands"));
    let mut chunk: Vec<Command> = Vec::with_capacity(SETUP_CHUNK);
    let (mut applied, mut rejected, mut elapsed) = (0u64, 0u64, Duration::ZERO);
    let mut next_progress = total / 4;
    loop {
        chunk.clear();
        if market.fill_setup(&mut chunk, SETUP_CHUNK) == 0 {
            break;
        }
        let (chunk_elapsed, counts) = run_closed_loop(engine, &chunk);
        (applied, rejected, elapsed) = (applied + counts.commands, rejected + counts.rejected, elapsed + chunk_elapsed);
        if applied >= next_progress {
            progress(format!("setup: {applied}/{total} commands, {:.3} M commands/s", mops(applied, elapsed)));
            next_progress += total / 4;
        }
    }
    if rejected != 0 || engine.next_order_id() != market.next_order_id() {
        return Err(format!("setup: {rejected} commands refused; next order id {}", engine.next_order_id()));
    }
    Ok((applied, elapsed))
}

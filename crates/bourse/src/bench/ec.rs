//! `--workload ec2020` and `ec2018`: exchange-core's single-book mixes.
//!
//! Generation (untimed) runs the generator's own engine over the whole stream and
//! samples the book every `BOOK_SAMPLE_EVERY` commands; that engine passes through
//! exactly the states the timed runs do, so its samples describe the book during the
//! run. Then throughput cycles and latency runs, each on a fresh copy of the pre-filled
//! engine, each checked to end in the generator's end state (same state hash).

use std::time::Instant;

use bourse_engine::SymbolId;
use bourse_sim::workload::ec::{
    ec_margin_market_spec, ec_market_spec, EcConfig, EcWorkload, EC2018, EC2020, EC_COMMANDS_DEFAULT,
};
use serde_json::json;

use super::engine::{EngineArgs, Workload};
use super::phases::{latency, throughput, Expected};
use super::report::{book_json, book_line, mix_json, mix_lines, progress, round3, Report};

/// Book sampling interval during generation.
const BOOK_SAMPLE_EVERY: u64 = 1_024;

pub fn run(args: &EngineArgs) -> Result<(), String> {
    let profile = if args.workload == Workload::Ec2018 { EC2018 } else { EC2020 };
    let commands = args.commands.unwrap_or(EC_COMMANDS_DEFAULT);
    let mut report = Report::new(args.json);
    let spec = if args.margin { ec_margin_market_spec() } else { ec_market_spec() };
    report.say(format!(
        "bourse bench engine: workload {} (exchange-core {} mix{}), seed {}, {} commands a cycle, {} cycles",
        profile.name,
        &profile.name[2..],
        if args.margin { ", on a margin contract" } else { "" },
        args.seed,
        commands,
        args.cycles
    ));
    progress(format!("generating {commands} {} commands, seed {}", profile.name, args.seed));
    let started = Instant::now();
    let config = EcConfig { margin: args.margin, profile, seed: args.seed, commands, sample_every: BOOK_SAMPLE_EVERY };
    let workload = EcWorkload::generate(&config);
    let generate_seconds = started.elapsed().as_secs_f64();
    report.say(format!(
        "  market: 1 symbol, {} accounts each holding 2 assets, pre-filled with {} orders ({} a side) over {} levels",
        spec.accounts, workload.prefill_orders, spec.orders_per_side, workload.prefill_levels
    ));
    report.say(format!("  generated in {generate_seconds:.2} s (not timed), applying them on the generator's engine"));
    for line in mix_lines(&workload.mix, &profile) {
        report.say(line);
    }
    report.say(book_line(&workload.book, BOOK_SAMPLE_EVERY));
    report.set("workload", profile.name);
    report.set("margin", args.margin);
    report.set("seed", args.seed);
    report.set("commands", commands);
    report.set("accounts", spec.accounts);
    report.set("symbols", 1);
    report.set(
        "prefill",
        json!({ "orders": workload.prefill_orders, "levels": workload.start.book_levels(SymbolId(0)) }),
    );
    report.set("generate_seconds", round3(generate_seconds));
    report.set("mix", mix_json(&workload.mix, &profile));
    report.set("book", book_json(&workload.book, BOOK_SAMPLE_EVERY));

    let expected = Expected::of(&workload.end, workload.mix.rejected, true);
    throughput(&mut report, &workload.start, &workload.commands, args.cycles, &expected)?;
    latency(&mut report, &workload.start, &workload.commands, &args.rates, &expected)?;
    report.finish();
    Ok(())
}

//! `--workload ec2020` and `ec2018`: exchange-core's single-book mixes.
//!
//! Generation (untimed) runs the generator's own engine over the whole stream and
//! samples the book every `BOOK_SAMPLE_EVERY` commands; that engine passes through
//! exactly the states the timed runs do, so its samples describe the book during the
//! run. Then throughput cycles and latency runs, each on a fresh copy of the pre-filled
//! engine, each checked to end in the generator's end state (same state hash).

use std::time::{Duration, Instant};

use bourse_engine::SymbolId;
use bourse_sim::workload::ec::{
    ec_margin_market_spec, ec_market_spec, EcConfig, EcWorkload, EC2018, EC2020, EC_COMMANDS_DEFAULT,
};
use serde_json::json;

use super::engine::{EngineArgs, Workload};
use super::measure::{median, mops, run_closed_loop};
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
    if args.against_spot {
        progress(format!("generating the same {commands} commands on the spot contract"));
        let spot = EcWorkload::generate(&EcConfig { margin: false, ..config });
        let spot_expected = Expected::of(&spot.end, spot.mix.rejected, true);
        paired(&mut report, (&spot, &spot_expected), (&workload, &expected), args.cycles)?;
        report.finish();
        return Ok(());
    }
    throughput(&mut report, &workload.start, &workload.commands, args.cycles, &expected)?;
    latency(&mut report, &workload.start, &workload.commands, &args.rates, &expected)?;
    report.finish();
    Ok(())
}

/// Spot and margin cycles alternated; sets `spot_mops`, `mops` (margin), `ratio` (the
/// median of the pairs' margin/spot throughput ratios) and `ratios`.
fn paired(
    report: &mut Report,
    spot: (&EcWorkload, &Expected),
    margin: (&EcWorkload, &Expected),
    cycles: u32,
) -> Result<(), String> {
    report.say("throughput, spot and margin cycles alternated (one thread, each cycle on a fresh copy):");
    let (mut spot_times, mut margin_times, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for cycle in 1..=cycles {
        let mut times = [Duration::ZERO; 2];
        // Which contract runs first alternates, so neither always follows the other
        // (a cache or frequency state one run leaves behind favours neither side).
        let order = if cycle % 2 == 1 { [0, 1] } else { [1, 0] };
        for i in order {
            let (workload, expected) = [spot, margin][i];
            let mut engine = workload.start.clone();
            let (elapsed, counts) = run_closed_loop(&mut engine, &workload.commands);
            expected.check(&engine, counts, &format!("cycle {cycle}"))?;
            times[i] = elapsed;
        }
        let n = spot.0.commands.len() as u64;
        let ratio = times[0].as_secs_f64() / times[1].as_secs_f64();
        let line = format!(
            "pair {cycle}/{cycles}: spot {:.3}, margin {:.3} M commands/s: {:.1}%",
            mops(n, times[0]),
            mops(n, times[1]),
            ratio * 100.0
        );
        progress(&line);
        report.say(format!("  {line}"));
        spot_times.push(times[0]);
        margin_times.push(times[1]);
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    let ratio = ratios[ratios.len() / 2];
    let n = spot.0.commands.len() as u64;
    let (spot_mops, margin_mops) = (mops(n, median(&spot_times)), mops(n, median(&margin_times)));
    report.say(format!(
        "  median: spot {spot_mops:.3}, margin {margin_mops:.3} M commands/s; median pair ratio {:.1}% (pairs {:.1}%–{:.1}%)",
        ratio * 100.0,
        ratios[0] * 100.0,
        ratios[ratios.len() - 1] * 100.0
    ));
    report.set("cycles", cycles);
    report.set("spot_mops", round3(spot_mops));
    report.set("mops", round3(margin_mops));
    report.set("ratio", round3(ratio));
    report.set("ratios", ratios.iter().map(|r| round3(*r)).collect::<Vec<_>>());
    Ok(())
}

//! `bourse sim`: the deterministic simulator (`bourse_simulator`) from the command line.
//! One seed is one run; `--seeds N` runs N seeds from `--seed` on and stops at the first
//! that fails, printing the command that replays it.

use std::cell::Cell;
use std::time::Instant;

use bourse_simulator::{Options, Plant, Profile, Report};
use clap::Args;

#[derive(Args, Debug)]
pub struct SimArgs {
    /// The run's seed: the same seed is the same run (and prints the same trace hash).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Runs this many seeds, from `--seed` on, and stops at the first failure.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Cluster members (3 or 5 as clusters are run; any from 1 to 9).
    #[arg(long = "nodes", id = "node_count", default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    nodes: u64,
    /// Gateways the clients send through, each with its own skewed and drifting clock
    /// (0: clients send straight to the nodes).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(0..=16))]
    gateways: u64,
    /// Clients, each trading in its own account.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=64))]
    clients: u64,
    /// Which faults strike: calm (none), network (loss, duplication, delay, partitions),
    /// disk (slow disks, failing fsyncs, crashes with torn writes) or all; clock jumps
    /// in all but calm.
    #[arg(long, default_value = "all")]
    faults: Profile,
    /// Virtual seconds of trading under faults (then everything heals).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    seconds: u64,
    /// Plants a bug, to see the checks catch it: ack-before-commit, skip-duplicate-check,
    /// stale-snapshot or early-market-data.
    #[arg(long)]
    plant: Option<Plant>,
    /// Prints one line per seed even when it passes (default: one line per 10 seeds).
    #[arg(long)]
    verbose: bool,
    /// Simulates the partitioned exchange instead: this many groups (1 to 8), each a Raft
    /// group of `--nodes` members whose state machine is the group's account and symbol
    /// parts, exchanging numbered outputs as ingest entries (docs/ARCHITECTURE.md,
    /// "Scale-out"). Gateways, clock faults and planted bugs are the single group's.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=8), conflicts_with_all = ["plant", "gateways"])]
    groups: Option<u32>,
    /// Prints every event the trace hash covers (message fates, disk writes, applied
    /// entries, answers, faults) with its virtual time, to stderr.
    #[arg(long)]
    print_trace: bool,
}

thread_local! {
    static RUNNING: Cell<u64> = const { Cell::new(0) };
}

pub fn run(args: SimArgs) -> Result<(), String> {
    if !bourse_simulator::REPRODUCIBLE {
        eprintln!(
            "bourse sim: built without `--cfg tokio_unstable` (.cargo/config.toml sets it): \
             tokio's own random source is unseeded, so a seed may not replay the same run"
        );
    }
    if let Some(groups) = args.groups {
        return run_groups(&args, groups);
    }
    let replay = |seed: u64| {
        let mut command = format!(
            "bourse sim --seed {seed} --nodes {} --gateways {} --clients {} --faults {} --seconds {}",
            args.nodes, args.gateways, args.clients, args.faults, args.seconds
        );
        if let Some(plant) = args.plant {
            command.push_str(&format!(" --plant {plant}"));
        }
        command
    };
    // A panic (an engine assertion, say) ends the process in a release build: say
    // which seed it was first.
    let hook = std::panic::take_hook();
    let replay_line = replay(0);
    std::panic::set_hook(Box::new(move |info| {
        let seed = RUNNING.with(Cell::get);
        eprintln!(
            "bourse sim: seed {seed} panicked; replay with: {}",
            replay_line.replace("--seed 0", &format!("--seed {seed}"))
        );
        hook(info);
    }));
    let started = Instant::now();
    let (mut simulated, mut faults, mut commands, mut messages_hit, mut crashes) = (0.0, 0, 0, 0, 0);
    for (n, seed) in (args.seed..args.seed.saturating_add(args.seeds)).enumerate() {
        RUNNING.with(|running| running.set(seed));
        let options = Options {
            seed,
            nodes: args.nodes,
            gateways: args.gateways,
            clients: args.clients,
            faults: args.faults,
            seconds: args.seconds,
            plant: args.plant,
            print_trace: args.print_trace,
        };
        let report: Report = bourse_simulator::run(options);
        simulated += report.simulated.as_secs_f64();
        faults += report.counts.faults + report.counts.fsync_failures;
        commands += report.counts.acks;
        messages_hit += report.counts.lost + report.counts.duplicated;
        crashes += report.counts.crashes;
        if !report.passed() {
            println!("{report}");
            return Err(format!("seed {seed} failed; replay with: {}", replay(seed)));
        }
        if args.verbose || args.seeds == 1 {
            println!("{report}");
        } else if (n + 1) % 10 == 0 {
            println!("{} seeds passed ({:.0} s)", n + 1, started.elapsed().as_secs_f64());
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{} seed(s) passed: {simulated:.0} simulated seconds in {wall:.1} s ({:.1} simulated s per s), \
         {faults} faults ({:.0} per minute; {crashes} crashes), {messages_hit} messages lost or duplicated \
         ({:.0} per minute), {commands} commands answered",
        args.seeds,
        simulated / wall,
        faults as f64 * 60.0 / wall,
        messages_hit as f64 * 60.0 / wall
    );
    Ok(())
}

/// `--groups G`: the sharded simulation, seed after seed.
fn run_groups(args: &SimArgs, groups: u32) -> Result<(), String> {
    use bourse_simulator::shards::{self, ShardOptions};
    let replay = |seed: u64| {
        format!(
            "bourse sim --groups {groups} --seed {seed} --nodes {} --clients {} --faults {} --seconds {}",
            args.nodes, args.clients, args.faults, args.seconds
        )
    };
    let started = Instant::now();
    let (mut simulated, mut faults, mut commands, mut crashes, mut skipped) = (0.0, 0, 0, 0, 0);
    for (n, seed) in (args.seed..args.seed.saturating_add(args.seeds)).enumerate() {
        RUNNING.with(|running| running.set(seed));
        let options = ShardOptions {
            seed,
            groups,
            nodes: args.nodes,
            clients: args.clients,
            faults: args.faults,
            seconds: args.seconds,
        };
        let report = shards::run(options);
        simulated += report.simulated.as_secs_f64();
        faults += report.counts.faults + report.counts.fsync_failures;
        crashes += report.counts.crashes;
        commands += report.shard.answered + report.shard.confirmed;
        skipped += report.shard.outputs_skipped;
        if !report.passed() {
            println!("{report}");
            return Err(format!("seed {seed} failed; replay with: {}", replay(seed)));
        }
        if args.verbose || args.seeds == 1 {
            println!("{report}");
        } else if (n + 1) % 10 == 0 {
            println!("{} seeds passed ({:.0} s)", n + 1, started.elapsed().as_secs_f64());
        }
    }
    let wall = started.elapsed().as_secs_f64();
    println!(
        "{} seed(s) of {groups} groups passed: {simulated:.0} simulated seconds in {wall:.1} s ({:.1} simulated s per s), \
         {faults} faults ({:.0} per minute; {crashes} crashes), {commands} commands answered, \
         {skipped} outputs ingested again and skipped",
        args.seeds,
        simulated / wall,
        faults as f64 * 60.0 / wall,
    );
    Ok(())
}

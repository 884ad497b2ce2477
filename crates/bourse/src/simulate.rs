//! `bourse sim`: the deterministic simulator (`bourse_simulator`) from the command line.
//! One seed is one run; `--seeds N` runs N seeds from `--seed` on and stops at the first
//! that fails, printing the command that replays it.

use std::cell::Cell;
use std::time::Instant;

use bourse_simulator::shards::ShardOptions;
use bourse_simulator::{Counts, Options, Plant, Profile, Report};
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
    /// With --groups G: group 0 is a meta group of its own (the catalog, the books'
    /// placement, the moves and the closes; no account, no book) beside G-1 data groups.
    #[arg(long, requires = "groups")]
    meta_group: bool,
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
    if args.meta_group && args.groups.is_some_and(|groups| groups < 2) {
        return Err("--meta-group needs --groups 2 or more (the meta group and a data group)".into());
    }
    let replay = {
        let mut command = format!("bourse sim --seed {{seed}} --nodes {}", args.nodes);
        match args.groups {
            Some(groups) => {
                command.push_str(&format!(" --groups {groups}"));
                if args.meta_group {
                    command.push_str(" --meta-group");
                }
            }
            None => command.push_str(&format!(" --gateways {}", args.gateways)),
        }
        command.push_str(&format!(" --clients {} --faults {} --seconds {}", args.clients, args.faults, args.seconds));
        if let Some(plant) = args.plant {
            command.push_str(&format!(" --plant {plant}"));
        }
        command
    };
    let replay = move |seed: u64| replay.replace("{seed}", &seed.to_string());
    // A panic (an engine assertion, say) ends the process in a release build: say
    // which seed it was first.
    let hook = std::panic::take_hook();
    let replay_line = replay.clone();
    std::panic::set_hook(Box::new(move |info| {
        let seed = RUNNING.with(Cell::get);
        eprintln!("bourse sim: seed {seed} panicked; replay with: {}", replay_line(seed));
        hook(info);
    }));
    let started = Instant::now();
    let mut total = Run::default();
    for (n, seed) in (args.seed..args.seed.saturating_add(args.seeds)).enumerate() {
        RUNNING.with(|running| running.set(seed));
        let run = match args.groups {
            None => {
                let report: Report = bourse_simulator::run(Options {
                    seed,
                    nodes: args.nodes,
                    gateways: args.gateways,
                    clients: args.clients,
                    faults: args.faults,
                    seconds: args.seconds,
                    plant: args.plant,
                    print_trace: args.print_trace,
                });
                Run::of(report.passed(), report.to_string(), report.simulated, &report.counts, report.counts.acks, 0)
            }
            Some(groups) => {
                let report = bourse_simulator::shards::run(ShardOptions {
                    seed,
                    groups,
                    meta_group: args.meta_group,
                    nodes: args.nodes,
                    clients: args.clients,
                    faults: args.faults,
                    seconds: args.seconds,
                });
                let answered = report.shard.answered;
                let skipped = report.shard.outputs_skipped;
                let shown = report.to_string();
                let run = Run::of(report.passed(), shown, report.simulated, &report.counts, answered, skipped);
                Run { moved: report.shard.books_moved, closed: report.shard.days_closed, ..run }
            }
        };
        if !run.passed {
            println!("{}", run.shown);
            return Err(format!("seed {seed} failed; replay with: {}", replay(seed)));
        }
        if args.verbose || args.seeds == 1 {
            println!("{}", run.shown);
        } else if (n + 1) % 10 == 0 {
            println!("{} seeds passed ({:.0} s)", n + 1, started.elapsed().as_secs_f64());
        }
        total.add(&run);
    }
    let wall = started.elapsed().as_secs_f64();
    let Run { simulated, faults, crashes, messages_hit, commands, skipped, moved, closed, .. } = total;
    let of = args.groups.map(|groups| format!(" of {groups} groups")).unwrap_or_default();
    let resent = if args.groups.is_some() {
        format!(", {skipped} outputs ingested again and skipped, {moved} books moved between groups, {closed} days closed across them")
    } else {
        String::new()
    };
    println!(
        "{} seed(s){of} passed: {simulated:.0} simulated seconds in {wall:.1} s ({:.1} simulated s per s), \
         {faults} faults ({:.0} per minute; {crashes} crashes), {messages_hit} messages lost or duplicated \
         ({:.0} per minute), {commands} commands answered{resent}",
        args.seeds,
        simulated / wall,
        faults as f64 * 60.0 / wall,
        messages_hit as f64 * 60.0 / wall
    );
    Ok(())
}

/// One seed's run, and the totals over seeds.
#[derive(Default)]
struct Run {
    passed: bool,
    shown: String,
    simulated: f64,
    faults: u64,
    crashes: u64,
    messages_hit: u64,
    commands: u64,
    skipped: u64,
    /// Books moved between groups.
    moved: u64,
    /// Closes of the day answered (cuts across the groups).
    closed: u64,
}

impl Run {
    fn of(
        passed: bool,
        shown: String,
        simulated: std::time::Duration,
        counts: &Counts,
        commands: u64,
        skipped: u64,
    ) -> Run {
        Run {
            passed,
            shown,
            simulated: simulated.as_secs_f64(),
            faults: counts.faults + counts.fsync_failures,
            crashes: counts.crashes,
            messages_hit: counts.lost + counts.duplicated,
            commands,
            skipped,
            moved: 0,
            closed: 0,
        }
    }

    fn add(&mut self, run: &Run) {
        self.simulated += run.simulated;
        self.faults += run.faults;
        self.crashes += run.crashes;
        self.messages_hit += run.messages_hit;
        self.commands += run.commands;
        self.skipped += run.skipped;
        self.moved += run.moved;
        self.closed += run.closed;
    }
}

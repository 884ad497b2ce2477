//! `bourse bench engine`: arguments and dispatch to the workloads.
//!
//! - `ec2020`, `ec2018`: exchange-core's single-book mixes; throughput over several
//!   cycles on fresh copies of the pre-filled engine, then open-loop latency per rate.
//! - `sweep`: one order trading with 100,000 resting orders.
//! - `scale`: a million accounts, 100,000 books, a million resting orders; setup
//!   throughput, mixed-run throughput and latency, resident memory.
//! - `mark`: 100,000 margin positions in one symbol; mark moves, a liquidating mark,
//!   the close of the day's settlement of every position.
//! - `groups`: the exchange partitioned over G groups, a thread per group, against one
//!   engine (`--groups 1,2,4`).
//! - `--margin` runs ec2020 or ec2018 on a margin contract (exchange-core's margin mode).

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Workload {
    /// exchange-core 2020: 71.1% move, 12.6% GTC, 7.2% reduce, 7.2% cancel, 1.8% IOC, 0.06% FOK budget.
    Ec2020,
    /// exchange-core 2018: 82% move, 9% GTC, 6% cancel, 3% IOC.
    Ec2018,
    /// One order sweeps a 100,000-order, 10,000-level book.
    Sweep,
    /// 1,000,000 accounts, 100,000 symbols, 1,000,000 resting orders.
    Scale,
    /// Mark-to-market of 100,000 margin positions in one symbol: mark moves, a
    /// liquidating mark, the close of the day's settlement.
    Mark,
    /// The exchange over G groups (account and symbol parts, a thread per group)
    /// against one engine: 100,000 accounts, 10,000 books, the scale mix.
    Groups,
}

#[derive(Args, Debug)]
pub struct EngineArgs {
    #[arg(long, value_enum, default_value_t = Workload::Ec2020)]
    pub workload: Workload,
    /// Seed of every random draw; the same seed gives the same commands.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Timed repetitions, each on a fresh copy of the starting engine; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub cycles: u32,
    /// Commands per cycle [default: 3,000,000 for ec2020/ec2018, 1,000,000 for scale; sweep: one order].
    #[arg(long)]
    pub commands: Option<u64>,
    /// Open-loop rates for the latency runs, in commands per second (a run covers at most
    /// 10 s of scheduled sends).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000_000u64, 2_000_000])]
    pub rates: Vec<u64>,
    /// ec2020/ec2018 on a margin contract (exchange-core's margin mode): the same
    /// market and mix, the symbol a futures contract with 10% initial margin and its
    /// mark at the last trade, every order's margin and every trade's position worked out.
    #[arg(long)]
    pub margin: bool,
    /// With --margin: time the spot contract too, its cycles alternating with the margin
    /// ones (spot then margin, margin then spot, …), and report the margin/spot ratio of
    /// each pair and their median — an A/B that a slow spell of a shared host shifts far
    /// less than two runs minutes apart (no latency runs).
    #[arg(long, requires = "margin")]
    pub against_spot: bool,
    /// With --workload groups: the group counts to run [default: 1,2,4].
    #[arg(long, value_delimiter = ',')]
    pub groups: Vec<u32>,
    /// With --workload groups: accounts in the market [default: 100,000].
    #[arg(long)]
    pub accounts: Option<u32>,
    /// With --workload groups: books in the market [default: 10,000].
    #[arg(long)]
    pub symbols: Option<u32>,
    /// Print one JSON object as the last line of stdout instead of the human report.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: &EngineArgs) -> Result<(), String> {
    if args.cycles == 0 {
        return Err("--cycles must be at least 1".into());
    }
    if args.rates.is_empty() || args.rates.contains(&0) {
        return Err("--rates needs one or more positive rates".into());
    }
    if args.commands == Some(0) {
        return Err("--commands must be at least 1".into());
    }
    if args.margin && !matches!(args.workload, Workload::Ec2020 | Workload::Ec2018) {
        return Err("--margin applies to --workload ec2020 or ec2018 (mark is margin already)".into());
    }
    let sized = !args.groups.is_empty() || args.accounts.is_some() || args.symbols.is_some();
    if sized && args.workload != Workload::Groups {
        return Err("--groups, --accounts and --symbols apply to --workload groups".into());
    }
    match args.workload {
        Workload::Groups => super::groups::run(args),
        Workload::Ec2020 | Workload::Ec2018 => super::ec::run(args),
        Workload::Sweep => super::sweep::run(args),
        Workload::Scale => super::scale::run(args),
        Workload::Mark => super::mark::run(args),
    }
}

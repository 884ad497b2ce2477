//! `bourse`: the one binary of the exchange.
//!
//! Subcommands group by purpose: `bench` runs benchmarks as programs (each prints its
//! workload, parameters and figures); `serve` runs a durable node; `replay` rebuilds a
//! node's state from its journal; `pki` keeps the cluster's certificate authority.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;
mod clearing;
mod cli;
mod cluster;
mod daytrading;
mod demo;
mod edge;
mod gateway;
mod groups;
mod history;
mod load;
mod pki;
mod scratch;
mod serve;
mod simulate;
mod xml;

#[derive(Parser)]
#[command(name = "bourse", version, about = "The Bourse exchange: serve, benchmark, administer.")]
struct Cli {
    #[command(subcommand)]
    command: TopCommand,
    #[command(flatten)]
    target: cli::Target,
}

#[derive(Subcommand)]
enum TopCommand {
    /// Run a benchmark and print its figures.
    Bench {
        #[command(subcommand)]
        target: bench::BenchCommand,
    },
    /// Run a durable exchange node (journal + engine + gRPC) until SIGINT/SIGTERM/SIGHUP.
    Serve(Box<serve::ServeCmd>),
    /// Run a member of a replicated cluster (Raft) until SIGINT/SIGTERM/SIGHUP.
    Node(Box<cluster::NodeArgs>),
    /// Run a member of one group of the partitioned exchange until SIGINT/SIGTERM.
    Group(Box<groups::GroupArgs>),
    /// Trade on the groups `cluster up --groups` started, then check them: one state per
    /// group, every asset conserved across the groups, no acknowledged command lost.
    GroupLoad(groups::GroupLoadArgs),
    /// Read a book, an order or an account of the groups `cluster up --groups` started.
    GroupQuery(groups::GroupQueryArgs),
    /// Move a symbol's book to another group while the groups run.
    GroupMove(groups::GroupMoveArgs),
    /// Close the trading day on the groups: every Day order expires, at one cut across
    /// the groups.
    GroupCloseDay(groups::GroupCloseDayArgs),
    /// Start a local cluster, show its members, change its membership.
    Cluster {
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Run a gateway (client sessions, fair sequencing stamps, market data), or make its keys.
    Gateway {
        #[command(subcommand)]
        command: gateway::GatewayCommand,
    },
    /// A living market to watch in a browser: a 3-node cluster, gateways, simulated
    /// traders and the dashboard (`make demo`).
    Demo(demo::DemoArgs),
    /// Rebuild the state from a node's data directory and print index and state hash.
    Replay(serve::ReplayArgs),
    /// Drive a live node with a seeded order flow and report throughput and ack latency.
    Load(load::LoadArgs),
    /// Replay a day-trading workload file against a running day-trading service and
    /// report transactions per second and per-command latency.
    Workload(daytrading::WorkloadArgs),
    /// The history store: follow a cluster into it, rebuild it from log files, query it.
    History {
        #[command(subcommand)]
        command: history::HistoryCommand,
    },
    /// End-of-day clearing from the history store: `clearing report --day D [--csv|--json]`.
    Clearing {
        #[command(subcommand)]
        command: clearing::ClearingCommand,
    },
    /// The cluster's certificate authority: create it, issue and revoke certificates, list them.
    Pki {
        #[command(subcommand)]
        command: pki::PkiCommand,
    },
    /// Deterministic simulation: a whole cluster on one thread in virtual time, with
    /// faults, from a seed; checks safety and liveness after each run.
    Sim(simulate::SimArgs),
    /// Trade and administer against a running node.
    #[command(flatten)]
    Verb(cli::Verb),
}

/// Records are allocated on one thread and freed on another all along the order path;
/// mimalloc's thread-local free lists serve that without glibc's arena consolidation.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The demo talks to a person on the terminal: only errors are logged (RUST_LOG=warn
    // shows the gateways' reconnections during a failover).
    let log_default = match &cli.command {
        TopCommand::Demo(_) => "error",
        // openraft narrates every election, timeout and failed fsync the faults cause;
        // the report says what matters (RUST_LOG=warn shows them).
        TopCommand::Sim(_) => "off",
        // Hundreds of client sessions open and close in each round: their lines would
        // bury the figures.
        TopCommand::Bench { target: bench::BenchCommand::OrderLatency(_) } => "warn",
        _ => "info",
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| log_default.into()))
        .init();
    // The verbs and `cluster`'s calls go to nodes as an operator, the load driver's as
    // a gateway (order entry is for gateways), unless --as says else.
    let identity = match &cli.command {
        // `cluster up` dials its new nodes with the CA it makes.
        TopCommand::Cluster { command: cluster::ClusterCommand::Up { .. } } => None,
        TopCommand::Verb(_) | TopCommand::Cluster { .. } => Some("operator:admin"),
        TopCommand::Load(_) => Some("gateway:load"),
        _ => None,
    };
    // With an API key the target is a gateway's client port, which takes keys, not
    // certificates: it is dialed over TLS trusting --ca (or --pki's CA), if given.
    let credentials = match (identity, cli.target.api_key.is_some()) {
        (Some(_), true) => cli.target.use_gateway_trust(),
        (Some(identity), false) => cli.target.use_credentials(identity),
        (None, _) => Ok(()),
    };
    if let Err(message) = credentials {
        eprintln!("bourse: {message}");
        return ExitCode::FAILURE;
    }
    let api_key = cli.target.api_key.is_some();
    let result = match cli.command {
        TopCommand::Bench { target } => bench::run(target),
        TopCommand::Serve(args) => serve::serve(*args, &cli.target),
        TopCommand::Replay(args) => serve::replay(args),
        TopCommand::Node(args) => cluster::node(*args, &cli.target),
        TopCommand::Cluster { command } => cluster::run(cli.target, command),
        TopCommand::Group(args) => groups::member(*args, &cli.target),
        TopCommand::GroupLoad(args) => groups::load(args, cli.target.json),
        TopCommand::GroupQuery(args) => groups::query(args, cli.target.json),
        TopCommand::GroupMove(args) => groups::move_book(args, cli.target.json),
        TopCommand::GroupCloseDay(args) => groups::close_day(args, cli.target.json),
        TopCommand::Load(args) => load::run(args, &cli.target),
        TopCommand::History { command } => history::run(command, &cli.target),
        TopCommand::Clearing { command } => clearing::run(command, cli.target.json),
        TopCommand::Workload(args) => daytrading::workload(args),
        TopCommand::Gateway { command } => gateway::run(command, &cli.target),
        TopCommand::Demo(args) => demo::run(args),
        TopCommand::Pki { command } => pki::run(command, cli.target.json),
        TopCommand::Sim(args) => simulate::run(args),
        TopCommand::Verb(verb) => cli::run(cli.target, verb),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bourse: {message}");
            let plaintext = cli::credentials().is_none() && message.contains("no node reachable");
            if plaintext && api_key {
                // A plaintext client meets a TLS gateway the same way.
                eprintln!("bourse: (a gateway serving TLS is dialed with --ca FILE, or --pki DIR, trusting its CA)");
            } else if plaintext {
                // A plaintext client meets a TLS node as a connection that breaks at once.
                eprintln!(
                    "bourse: (a node with the cluster's PKI takes mutual TLS only: give --pki DIR, or \
                     BOURSE_PKI, as `serve` and `cluster up` print)"
                );
            }
            ExitCode::FAILURE
        }
    }
}

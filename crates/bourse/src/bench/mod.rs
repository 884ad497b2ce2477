//! `bourse bench …`: benchmarks are programs, not timed tests.
//!
//! Each benchmark prints its workload, its parameters (seed included, so a run
//! reproduces) and its figures; with `--json` the last line of stdout is one JSON
//! object for scripts, and progress goes to stderr either way.

use clap::Subcommand;

mod closed_loop;
mod ec;
mod engine;
mod failover;
mod fairness;
mod fix;
mod groups;
mod history;
mod host;
mod http;
mod mark;
mod measure;
mod memory;
mod order_latency;
mod phases;
mod races;
mod recovery;
mod report;
mod scale;
mod sweep;
mod xml;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// The matching engine alone: one thread, commands pre-generated, no I/O.
    Engine(engine::EngineArgs),
    /// Recovery time of a node from a journal of ec2020 commands, with and without a snapshot.
    Recovery(recovery::RecoveryArgs),
    /// Time from killing a cluster's leader to the first command its successor acknowledges.
    Failover(failover::FailoverArgs),
    /// Inbound and outbound unfairness through several gateways with injected delays and
    /// clock error, over a sweep of the sequencing window d_s and hold time d_h.
    Fairness(fairness::FairnessArgs),
    /// How much of a CPU this machine gives one thread: the gaps a spinning thread sees
    /// (interrupts, other threads, the hypervisor) and the latency floor they set.
    Host(host::HostArgs),
    /// Orders per second and latency through the REST API with N concurrent clients.
    Http(http::HttpArgs),
    /// Orders per second and round-trip latency through FIX 4.4 with N sessions.
    Fix(fix::FixArgs),
    /// Requests per second and latency through the XML exchange protocol with N
    /// concurrent clients, length-prefixed and bare.
    Xml(xml::XmlArgs),
    /// The history sink: rows per second into SQLite and PostgreSQL, and its lag behind
    /// a node under load.
    History(history::HistoryArgs),
    /// One order at a time: N closed-loop clients with one order outstanding each, on a
    /// 3-node cluster, direct and through a gateway; orders/s, ack latency, CPU per order
    /// and the disk's fdatasync in the same run.
    OrderLatency(order_latency::OrderLatencyArgs),
}

pub fn run(command: BenchCommand) -> Result<(), String> {
    match command {
        BenchCommand::Engine(args) => engine::run(&args),
        BenchCommand::Recovery(args) => recovery::run(&args),
        BenchCommand::Failover(args) => failover::run(&args),
        BenchCommand::Fairness(args) => fairness::run(&args),
        BenchCommand::Host(args) => host::run(&args),
        BenchCommand::Http(args) => http::run(&args),
        BenchCommand::Fix(args) => fix::run(&args),
        BenchCommand::Xml(args) => xml::run(&args),
        BenchCommand::History(args) => history::run(&args),
        BenchCommand::OrderLatency(args) => order_latency::run(&args),
    }
}

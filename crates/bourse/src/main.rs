//! `bourse`: the one binary of the exchange.
//!
//! Subcommands group by purpose: `bench` runs benchmarks as programs (each prints its
//! workload, parameters and figures). Serving, replay and administration verbs join
//! this tree as they are built.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod bench;

#[derive(Parser)]
#[command(name = "bourse", version, about = "The Bourse exchange: serve, benchmark, administer.")]
struct Cli {
    #[command(subcommand)]
    command: TopCommand,
}

#[derive(Subcommand)]
enum TopCommand {
    /// Run a benchmark and print its figures.
    Bench {
        #[command(subcommand)]
        target: bench::BenchCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        TopCommand::Bench { target } => bench::run(target),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("bourse: {message}");
            ExitCode::FAILURE
        }
    }
}

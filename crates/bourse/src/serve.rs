//! `bourse serve` and `bourse replay`: run a durable node; rebuild state from a journal.

use std::net::SocketAddr;
use std::path::PathBuf;

use bourse_engine::hex;
use bourse_node::{NodeConfig, NodeError};
use clap::Args;

/// Flags of `bourse serve`; each overrides the TOML file given with `--config`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML file with any of the node's settings (see docs/OPERATIONS.md).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Data directory: journal segments and snapshots.
    #[arg(long)]
    data: Option<PathBuf>,
    /// gRPC address to listen on.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Address for the Prometheus /metrics endpoint.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// Take a snapshot after this many commands.
    #[arg(long)]
    snapshot_every_commands: Option<u64>,
    /// Take a snapshot after this many seconds (0: never by time).
    #[arg(long)]
    snapshot_every_secs: Option<u64>,
    /// Commands the core applies per batch (and per journal group at most).
    #[arg(long)]
    batch_commands_max: Option<usize>,
    /// d_s: how long the fair sequencer holds a gateway batch past its gateway stamp,
    /// in microseconds (0: gateway batches are sequenced as they arrive).
    #[arg(long)]
    sequencer_window_us: Option<u64>,
    /// Tests only: stamp log index i at T0_MS + i × STEP_MS instead of the wall clock
    /// (deterministic day-trading golden runs), e.g. 1732270000000,1000.
    #[arg(long, value_name = "T0_MS,STEP_MS")]
    virtual_clock: Option<bourse_node::VirtualClock>,
}

impl ServeArgs {
    pub(crate) fn config(&self) -> Result<NodeConfig, String> {
        let mut config = match &self.config {
            Some(path) => NodeConfig::from_toml_file(path).map_err(|e| e.to_string())?,
            None => NodeConfig::default(),
        };
        if let Some(data) = &self.data {
            config.data = data.clone();
        }
        if let Some(listen) = self.listen {
            config.listen = listen;
        }
        if self.metrics_listen.is_some() {
            config.metrics_listen = self.metrics_listen;
        }
        if let Some(n) = self.snapshot_every_commands {
            config.snapshot_every_commands = n;
        }
        if let Some(n) = self.snapshot_every_secs {
            config.snapshot_every_secs = n;
        }
        if let Some(n) = self.batch_commands_max {
            config.batch_commands_max = n;
        }
        if let Some(n) = self.sequencer_window_us {
            config.sequencer_window_us = n;
        }
        if self.virtual_clock.is_some() {
            config.virtual_clock = self.virtual_clock;
        }
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// `bourse serve`: a node's flags, and where its history goes.
#[derive(Args, Debug)]
pub struct ServeCmd {
    #[command(flatten)]
    node: ServeArgs,
    /// The history store this node's sink writes: a SQLite file (`sqlite:PATH` or a
    /// path), `postgres://…`, or `none`. Default: `DATA/history.sqlite`.
    #[arg(long)]
    history: Option<String>,
}

pub fn serve(args: ServeCmd) -> Result<(), String> {
    let config = args.node.config()?;
    let history = crate::history::serve_history_url(args.history.as_deref(), &config.data);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    match history {
        None => runtime.block_on(bourse_node::run_until_signal(config)).map_err(|e: NodeError| e.to_string()),
        Some(url) => runtime.block_on(crate::history::serve_with_history(config, url)),
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The data directory of a node or cluster member (or a copy of it); it must not be
    /// running. A member replays its snapshot and committed log.
    data: PathBuf,
    /// Print one JSON object as the last line: {"index": N, "state_hash": "<hex>"}.
    #[arg(long)]
    json: bool,
}

pub fn replay(args: ReplayArgs) -> Result<(), String> {
    let recovered = if args.data.join("raft").is_dir() {
        // A cluster member: its snapshot and committed log.
        let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
        let config = NodeConfig::default();
        runtime.block_on(bourse_node::recover_member(&args.data, &config)).map_err(|e| e.to_string())?.1
    } else if bourse_node::journal_dir(&args.data).is_dir() {
        bourse_node::recover(&args.data, &NodeConfig::default()).map_err(|e| e.to_string())?.2
    } else {
        return Err(format!(
            "{} has neither a journal (bourse serve) nor a raft directory (bourse node)",
            args.data.display()
        ));
    };
    let hash = hex(&recovered.state_hash);
    eprintln!(
        "replayed {}: snapshot at {:?}, {} commands after it, in {:.3} s",
        args.data.display(),
        recovered.snapshot_index,
        recovered.entries_replayed,
        recovered.elapsed.as_secs_f64()
    );
    if args.json {
        println!("{}", serde_json::json!({ "index": recovered.index, "state_hash": hash }));
    } else {
        println!("index {}\nstate_hash {hash}", recovered.index);
    }
    Ok(())
}

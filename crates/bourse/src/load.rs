//! `bourse load`: drive a live node with a seeded order flow over several connections.
//!
//! Open loop at `--rate` (latency from each command's intended send time, so a slow
//! node cannot hide its queue) or flat out without it. Progress each second on stderr;
//! the report at the end, or one JSON object as the last line of stdout with `--json`:
//! `{"acked", "seconds", "throughput", "latency_us": {"p50", "p99", "p999", "max"}, "errors"}`.

use bourse_client::load::{run_load, LoadConfig};
use bourse_client::ClientOptions;
use clap::Args;

#[derive(Args, Debug)]
pub struct LoadArgs {
    /// Node address(es); the load fails over among them.
    #[arg(long = "target", default_value = "127.0.0.1:7400", value_delimiter = ',')]
    targets: Vec<String>,
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Order entry sessions, each with its own client id and accounts.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Commands per second over all connections (open loop); leave out to send flat out.
    #[arg(long)]
    rate: Option<f64>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Commands in flight per connection (at most 128, the node's exactly-once window).
    #[arg(long, default_value_t = 128)]
    inflight: usize,
    /// Commands per wire batch.
    #[arg(long, default_value_t = 64)]
    batch: usize,
    #[arg(long)]
    json: bool,
}

/// With `--pki`: the market is set up as `operator:admin` (Admin calls are operators'),
/// while the flow runs as `--as` (default `gateway:load`: order entry is gateways').
fn setup_options(target: &crate::cli::Target) -> Result<Option<ClientOptions>, String> {
    let Some(dir) = target.pki.as_ref().filter(|_| target.api_key.is_none()) else { return Ok(None) };
    let tls = crate::cli::client_tls(dir, "operator:admin")?;
    Ok(Some(ClientOptions { tls: Some(tls), ..target.options() }))
}

/// `target` gives the global flags; its `--api-key` is sent when the target is a gateway.
pub fn run(args: LoadArgs, target: &crate::cli::Target) -> Result<(), String> {
    let config = LoadConfig {
        endpoints: args.targets,
        connections: args.connections,
        seconds: args.seconds,
        rate: args.rate,
        seed: args.seed,
        client: ClientOptions { inflight_max: args.inflight, batch_len_max: args.batch, ..target.options() },
        setup: setup_options(target)?,
        ..LoadConfig::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let report = runtime.block_on(run_load(config)).map_err(|e| e.to_string())?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        println!(
            "acked {} in {:.2} s = {:.0} commands/s; ack latency µs p50 {} p99 {} p99.9 {} max {}; errors {}, rejected {}",
            report.acked,
            report.seconds,
            report.throughput,
            report.latency_us.p50,
            report.latency_us.p99,
            report.latency_us.p999,
            report.latency_us.max,
            report.errors,
            report.rejected
        );
    }
    Ok(())
}

//! What the front-end benchmarks (`bench http`, `bench fix`, `bench xml`) share: a round
//! of N clients in a closed loop against a node + gateway + front end in this process,
//! its figures, their table on stderr and their JSON; and the scratch directory the
//! node's data goes in.

use std::path::Path;
use std::time::Duration;

use hdrhistogram::Histogram;

/// What a benchmark calls its clients and what they complete (`sessions` and `orders`
/// for FIX, `clients` and `requests` for XML …): the table's headings and JSON's keys.
pub struct Names {
    pub clients: &'static str,
    pub done: &'static str,
}

/// One round's figures; latency in µs.
pub struct Round {
    /// A first column (the XML benchmark's framing), if the benchmark has one.
    pub label: Option<&'static str>,
    pub clients: u32,
    pub done: u64,
    pub errors: u64,
    pub elapsed: Duration,
    pub latency: Histogram<u64>,
}

impl Round {
    pub fn new(label: Option<&'static str>, clients: u32) -> Round {
        Round { label, clients, done: 0, errors: 0, elapsed: Duration::ZERO, latency: super::measure::new_histogram() }
    }

    /// Adds one client's counts and latencies.
    pub fn add(&mut self, done: u64, errors: u64, latency: &Histogram<u64>) -> Result<(), String> {
        self.done += done;
        self.errors += errors;
        self.latency.add(latency).map_err(|e| e.to_string())
    }

    pub fn per_sec(&self) -> f64 {
        self.done as f64 / self.elapsed.as_secs_f64()
    }

    /// p50, p90, p99, p99.9 and max.
    fn quantiles(&self) -> [u64; 5] {
        let q = |p: f64| self.latency.value_at_quantile(p);
        [q(0.5), q(0.9), q(0.99), q(0.999), self.latency.max()]
    }

    fn json(&self, names: &Names, label_key: &str) -> String {
        let [p50, p90, p99, p999, max] = self.quantiles();
        let label = self.label.map(|l| format!("\"{label_key}\":\"{l}\",")).unwrap_or_default();
        format!(
            "{{{label}\"{}\":{},\"{}\":{},\"errors\":{},\"seconds\":{:.3},\"{}_per_sec\":{:.1},\"latency_us\":{{\"p50\":{p50},\"p90\":{p90},\"p99\":{p99},\"p999\":{p999},\"max\":{max}}}}}",
            names.clients,
            self.clients,
            names.done,
            self.done,
            self.errors,
            self.elapsed.as_secs_f64(),
            names.done,
            self.per_sec(),
        )
    }
}

/// The rounds as a table on stderr; `label_key` heads the label column when rounds have one.
pub fn print_table(names: &Names, label_key: &str, rounds: &[Round]) {
    let labelled = rounds.iter().any(|r| r.label.is_some());
    let head = if labelled { format!("{label_key:>9} ") } else { String::new() };
    let per_sec = format!("{}/s", names.done);
    eprintln!(
        "{head}{:>8} {:>10} {:>12} {:>8} {:>8} {:>8} {:>8} {:>8} {:>7}",
        names.clients, names.done, per_sec, "p50 µs", "p90 µs", "p99 µs", "p99.9", "max µs", "errors"
    );
    for round in rounds {
        let label = if labelled { format!("{:>9} ", round.label.unwrap_or("")) } else { String::new() };
        let [p50, p90, p99, p999, max] = round.quantiles();
        eprintln!(
            "{label}{:>8} {:>10} {:>12.0} {p50:>8} {p90:>8} {p99:>8} {p999:>8} {max:>8} {:>7}",
            round.clients,
            round.done,
            round.per_sec(),
            round.errors
        );
    }
}

/// The rounds as a JSON array.
pub fn json_rounds(names: &Names, label_key: &str, rounds: &[Round]) -> String {
    let rounds: Vec<String> = rounds.iter().map(|r| r.json(names, label_key)).collect();
    format!("[{}]", rounds.join(","))
}

/// A scratch directory for a benchmark's node data: under `parent`, else /dev/shm when
/// there is one (the disk's speed is not what these benchmarks measure), else the
/// system's temporary directory. Removed when dropped.
pub fn scratch_dir(prefix: &str, parent: Option<&Path>) -> Result<tempfile::TempDir, String> {
    let parent = match parent {
        Some(dir) => dir.to_path_buf(),
        None if Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    };
    tempfile::Builder::new().prefix(prefix).tempdir_in(&parent).map_err(|e| format!("{}: {e}", parent.display()))
}

/// How a bench's gateway reaches the node in its process.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Layout {
    /// As `bourse serve --gateway` runs them: the gateway's link and feed handed over in
    /// memory.
    Local,
    /// Over loopback gRPC, as a gateway on another machine links.
    Grpc,
}

/// `--layout`, the same for every front-end bench.
#[derive(clap::Args, Debug)]
pub struct LayoutArg {
    /// How the gateway reaches the node: in memory, as `bourse serve --gateway` runs
    /// them, or over loopback gRPC.
    #[arg(long, value_enum, default_value = "local")]
    pub layout: Layout,
}

/// The bench's gateway in front of `node`: open (no keys), no hold, no rate limit,
/// linked as `layout` says.
pub async fn gateway(node: &bourse_node::Node, layout: Layout) -> Result<bourse_gateway::Gateway, String> {
    let mut config =
        bourse_gateway::GatewayConfig::new(1, "127.0.0.1:0".parse().expect("an address"), vec![node.addr.to_string()]);
    config.open = true;
    config.hold_us = 0;
    config.rate_per_sec = u64::MAX / 2;
    config.burst = u64::MAX / 2;
    if layout == Layout::Local {
        config.local_nodes = vec![crate::serve::local_node(node)];
    }
    bourse_gateway::Gateway::start(config, bourse_gateway::KeyStore::default()).await.map_err(|e| e.to_string())
}

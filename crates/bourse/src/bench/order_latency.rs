//! `bourse bench order-latency`: one order at a time (issue 30).
//!
//! A 3-node cluster of `bourse node` processes on this machine (mutual TLS on both
//! ports, as `cluster up` runs them; data on disk, not in memory), and rounds of N
//! closed-loop clients, each with exactly one order outstanding (`inflight 1`, one
//! command per message): for each N, orders/s, ack latency p50/p99/p99.9 and the CPU
//! the nodes (and this process, the clients) spent per order; direct to the nodes and
//! through one gateway (in this process, linking as `gateway:1`, its clients on its
//! plaintext client port). Beside them, the disk's `fdatasync` p50, measured in the
//! same run on the same file system, which the one-client latency is held against.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bourse_client::load::{run_load, LoadConfig, LoadReport};
use bourse_client::ClientOptions;
use bourse_protocol::proto;
use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::cluster::{spawn_tethered_node, LocalNode};

#[derive(Args, Debug)]
pub struct OrderLatencyArgs {
    /// Closed-loop clients per round, comma separated.
    #[arg(long, value_delimiter = ',', default_value = "1,32,128,512")]
    clients: Vec<usize>,
    /// Seconds each round runs.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Which paths to measure.
    #[arg(long, value_enum, default_value_t = Via::Both)]
    via: Via,
    /// Client ports are base+id, Raft ports base+100+id (default 0: free ports picked
    /// at start).
    #[arg(long, default_value_t = 0)]
    base_port: u16,
    /// Put the cluster's data under this directory (default: a temporary directory in
    /// the current one: on disk, where fdatasync costs what it costs).
    #[arg(long)]
    data: Option<PathBuf>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Via {
    Nodes,
    Gateway,
    Both,
}

pub fn run(args: &OrderLatencyArgs) -> Result<(), String> {
    if args.clients.is_empty() || args.clients.iter().any(|&n| n == 0 || n > 4096) {
        return Err("--clients: each between 1 and 4096".into());
    }
    if !(args.seconds.is_finite() && args.seconds > 0.0) {
        return Err("--seconds must be positive".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(run_async(args))
}

/// The cluster: tethered node processes (they stop with this process, however it ends).
struct Cluster {
    children: Vec<std::process::Child>,
    addresses: Vec<String>,
}

impl Cluster {
    fn pids(&self) -> Vec<u32> {
        self.children.iter().map(std::process::Child::id).collect()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn run_async(args: &OrderLatencyArgs) -> Result<(), String> {
    let parent = args.data.clone().unwrap_or_else(|| PathBuf::from("."));
    std::fs::create_dir_all(&parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let scratch = tempfile::Builder::new()
        .prefix("bourse-bench-order-latency-")
        .tempdir_in(&parent)
        .map_err(|e| format!("{}: {e}", parent.display()))?;
    let data = scratch.path();
    let fsync = fdatasync_p50(data)?;
    eprintln!("order-latency: fdatasync p50 {} µs on {}", fsync.as_micros(), data.display());

    let pki = crate::cluster::member_certificates(&data.join("pki"), 1..=3, &["127.0.0.1".to_string()])?;
    crate::cluster::client_certificates(&pki, &["operator:admin", "gateway:1", "gateway:load"])?;
    let tls = |identity: &str| crate::cli::client_tls(&pki, identity);
    let cluster = start_cluster(data, &pki, args.base_port).await?;
    eprintln!("order-latency: 3 nodes up at {}", cluster.addresses.join(","));

    let mut rounds = Vec::new();
    let (operator, gateway_load) = (tls("operator:admin")?, tls("gateway:load")?);
    if args.via != Via::Gateway {
        for &clients in &args.clients {
            let flow = ClientOptions { tls: Some(gateway_load.clone()), ..one_at_a_time() };
            let setup = ClientOptions { tls: Some(operator.clone()), ..one_at_a_time() };
            let round = measure(args, &cluster, "nodes", clients, cluster.addresses.clone(), flow, Some(setup)).await?;
            rounds.push(round);
        }
    }
    if args.via != Via::Nodes {
        let mut config = bourse_gateway::GatewayConfig::new(
            1,
            "127.0.0.1:0".parse().expect("an address"),
            cluster.addresses.clone(),
        );
        config.open = true;
        config.hold_us = 0;
        config.in_flight_max = 1 << 16;
        config.rate_per_sec = u64::MAX / 2;
        config.burst = u64::MAX / 2;
        config.tls = Some(tls("gateway:1")?);
        config.admin_tls = Some(operator.clone());
        let gateway = bourse_gateway::Gateway::start(config, bourse_gateway::KeyStore::default())
            .await
            .map_err(|e| format!("the gateway: {e}"))?;
        let endpoints = vec![gateway.addr().to_string()];
        for &clients in &args.clients {
            let round = measure(args, &cluster, "gateway", clients, endpoints.clone(), one_at_a_time(), None).await?;
            rounds.push(round);
        }
        gateway.shutdown().await;
    }
    drop(cluster);

    println!("fdatasync p50 {} µs (the cluster's file system, this run)", fsync.as_micros());
    println!(
        "{:8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>7} {:>13} {:>13}",
        "via", "clients", "orders/s", "p50 µs", "p99 µs", "p99.9 µs", "p50/fs", "nodes µs CPU", "client µs CPU"
    );
    for r in &rounds {
        println!(
            "{:8} {:>7} {:>10.0} {:>9} {:>9} {:>9} {:>7.2} {:>13.1} {:>13.1}",
            r.via,
            r.clients,
            r.report.throughput,
            r.report.latency_us.p50,
            r.report.latency_us.p99,
            r.report.latency_us.p999,
            r.report.latency_us.p50 as f64 / fsync.as_micros().max(1) as f64,
            r.nodes_cpu_us_per_order,
            r.clients_cpu_us_per_order,
        );
    }
    if args.json {
        let rounds: Vec<Value> = rounds.iter().map(Round::json).collect();
        println!(
            "{}",
            json!({ "bench": "order-latency", "fdatasync_p50_us": fsync.as_micros() as u64,
                    "seconds": args.seconds, "seed": args.seed, "rounds": rounds })
        );
    }
    Ok(())
}

/// One command per message, one outstanding: a trader who sends an order and waits.
fn one_at_a_time() -> ClientOptions {
    ClientOptions { inflight_max: 1, batch_len_max: 1, ..ClientOptions::default() }
}

struct Round {
    via: &'static str,
    clients: usize,
    report: LoadReport,
    nodes_cpu_us_per_order: f64,
    clients_cpu_us_per_order: f64,
}

impl Round {
    fn json(&self) -> Value {
        let l = &self.report.latency_us;
        json!({
            "via": self.via, "clients": self.clients, "orders_per_s": self.report.throughput.round(),
            "acked": self.report.acked, "errors": self.report.errors,
            "latency_us": { "p50": l.p50, "p99": l.p99, "p999": l.p999, "max": l.max },
            "nodes_cpu_us_per_order": self.nodes_cpu_us_per_order,
            "clients_cpu_us_per_order": self.clients_cpu_us_per_order,
        })
    }
}

/// One round: `clients` closed-loop clients on `endpoints` for `--seconds`, and the CPU
/// time the node processes and this process spent meanwhile (the set-up included: the
/// accounts are few, two per client).
async fn measure(
    args: &OrderLatencyArgs,
    cluster: &Cluster,
    via: &'static str,
    clients: usize,
    endpoints: Vec<String>,
    flow: ClientOptions,
    setup: Option<ClientOptions>,
) -> Result<Round, String> {
    let config = LoadConfig {
        endpoints,
        connections: clients,
        seconds: args.seconds,
        rate: None,
        seed: args.seed,
        accounts_per_connection: 2,
        open_orders_per_connection: 20,
        client: flow,
        setup,
        progress: false,
        ..LoadConfig::default()
    };
    let nodes_before = cpu_seconds(&cluster.pids());
    let self_before = cpu_seconds(&[std::process::id()]);
    let report = run_load(config).await.map_err(|e| format!("{via}, {clients} clients: {e}"))?;
    let per_order = |seconds: f64| seconds * 1e6 / report.acked.max(1) as f64;
    let round = Round {
        via,
        clients,
        nodes_cpu_us_per_order: per_order(cpu_seconds(&cluster.pids()) - nodes_before),
        clients_cpu_us_per_order: per_order(cpu_seconds(&[std::process::id()]) - self_before),
        report,
    };
    eprintln!(
        "order-latency: via {via}, {clients} clients: {:.0} orders/s, p50 {} µs, p99 {} µs",
        round.report.throughput, round.report.latency_us.p50, round.report.latency_us.p99
    );
    Ok(round)
}

/// User plus system CPU seconds of the processes `pids` (from `/proc/PID/stat`).
fn cpu_seconds(pids: &[u32]) -> f64 {
    // Clock ticks per second: 100 on Linux for every architecture it runs on.
    const TICKS: f64 = 100.0;
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name, which is in parentheses and may hold spaces.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: f64 = fields.get(11)?.parse().ok()?;
            let stime: f64 = fields.get(12)?.parse().ok()?;
            Some((utime + stime) / TICKS)
        })
        .sum()
}

/// The median of 200 fdatasyncs of a 4 KiB append to a file in `dir`.
fn fdatasync_p50(dir: &Path) -> Result<Duration, String> {
    let path = dir.join("fdatasync-probe");
    let mut file = std::fs::File::create(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let block = [0x5au8; 4096];
    let mut times = Vec::with_capacity(200);
    for _ in 0..200 {
        file.write_all(&block).map_err(|e| e.to_string())?;
        let started = Instant::now();
        file.sync_data().map_err(|e| e.to_string())?;
        times.push(started.elapsed());
    }
    drop(file);
    let _ = std::fs::remove_file(&path);
    times.sort();
    Ok(times[times.len() / 2])
}

/// Three tethered nodes with the cluster's CA in `pki`, their data under `data`; returns
/// once one leads.
async fn start_cluster(data: &Path, pki: &Path, base_port: u16) -> Result<Cluster, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let port = |offset: u64| -> Result<String, String> {
        let port = match base_port {
            0 => bourse_node::ports::free_local_port().map_err(|e| format!("no free port: {e}"))?,
            base => u16::try_from(u64::from(base) + offset).map_err(|_| "--base-port too high".to_string())?,
        };
        Ok(format!("127.0.0.1:{port}"))
    };
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        nodes.push(LocalNode { id, api: port(id)?, raft: port(100 + id)?, dir: data.join(format!("node{id}")) });
    }
    let bootstrap = nodes.iter().map(|n| format!("{}={}/{}", n.id, n.api, n.raft)).collect::<Vec<_>>().join(",");
    let extra = vec!["--pki".to_string(), pki.display().to_string(), "--admin-gateways=1".to_string()];
    let mut cluster = Cluster { children: Vec::new(), addresses: nodes.iter().map(|n| n.api.clone()).collect() };
    for node in &nodes {
        cluster.children.push(spawn_tethered_node(&exe, node, &bootstrap, &extra)?);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for address in &cluster.addresses {
            if let Ok(mut client) = crate::cluster::connect(address).await {
                if let Ok(status) = client.status(proto::ClusterStatusRequest {}).await {
                    if status.get_ref().role == "leader" {
                        return Ok(cluster);
                    }
                }
            }
        }
        if Instant::now() > deadline {
            return Err(format!("no leader after 30 s; see {}/node*/node.log", data.display()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

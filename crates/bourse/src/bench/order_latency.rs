//! `bourse bench order-latency`: one order at a time (issue 30).
//!
//! A 3-node cluster of `bourse node` processes on this machine (mutual TLS on both
//! ports, as `cluster up` runs them; data on disk, not in memory), and rounds of N
//! closed-loop clients, each with exactly one order outstanding (`inflight 1`, one
//! command per message): for each N, orders/s, ack latency p50/p99/p99.9 and the CPU
//! the nodes (and this process, the clients) spent per order; direct to the nodes,
//! through one gateway (in this process, linking as `gateway:1`, its clients on its
//! plaintext client port), and through the REST front end on that gateway (in process,
//! its clients each on one keep-alive HTTP/1.1 connection sending `POST /v1/orders`, as
//! `bench http` does). Beside them, the disk's `fdatasync` p50, measured in the
//! same run on the same file system, which the one-client latency is held against, and
//! where an order's time goes, from the nodes' `/metrics` over the round: the mean
//! Raft-log fdatasync of the three nodes, and the leader's mean time from proposing a
//! batch to applying it (append, replication, both fdatasyncs, commit), within it the
//! leader's round trip of an AppendEntries request on the replication stream and the
//! follower's time serving one; the rest of an ack's latency is the hops between the
//! client and the leader's core.

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
    /// Which paths to measure, comma separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "nodes,gateway,rest")]
    via: Vec<Via>,
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
    /// Clients on the nodes' client port.
    Nodes,
    /// Clients on a gateway's client port (gRPC sessions).
    Gateway,
    /// Clients of the REST front end on that gateway.
    Rest,
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
    /// Each node's `/metrics` address.
    metrics: Vec<String>,
}

/// Sums and counts of the nodes' `commit_seconds` and `fsync_seconds` (all nodes).
#[derive(Clone, Copy, Debug, Default)]
struct Timings {
    commit_sum: f64,
    commit_count: f64,
    fsync_sum: f64,
    fsync_count: f64,
    round_trip_sum: f64,
    round_trip_count: f64,
    served_sum: f64,
    served_count: f64,
}

/// Mean µs of each part of a commit over a round (`None`: nothing recorded).
#[derive(Clone, Copy, Debug, Default)]
struct Breakdown {
    /// Leader: proposal to application.
    commit: Option<f64>,
    /// Every node's Raft-log fdatasync.
    fsync: Option<f64>,
    /// Leader: an AppendEntries request written to its reply read.
    round_trip: Option<f64>,
    /// Follower: an AppendEntries request read to its reply written.
    served: Option<f64>,
}

impl Timings {
    /// Scrapes every node (a node that does not answer adds nothing).
    async fn scrape(cluster: &Cluster) -> Timings {
        let mut sums = Timings::default();
        for address in &cluster.metrics {
            let Ok(text) = scrape(address).await else { continue };
            for line in text.lines() {
                let Some((name, value)) = line.split_once(' ') else { continue };
                let Ok(value) = value.trim().parse::<f64>() else { continue };
                match name {
                    "bourse_commit_seconds_sum" => sums.commit_sum += value,
                    "bourse_commit_seconds_count" => sums.commit_count += value,
                    "bourse_fsync_seconds_sum" => sums.fsync_sum += value,
                    "bourse_fsync_seconds_count" => sums.fsync_count += value,
                    "bourse_raft_append_round_trip_seconds_sum" => sums.round_trip_sum += value,
                    "bourse_raft_append_round_trip_seconds_count" => sums.round_trip_count += value,
                    "bourse_raft_append_served_seconds_sum" => sums.served_sum += value,
                    "bourse_raft_append_served_seconds_count" => sums.served_count += value,
                    _ => {}
                }
            }
        }
        sums
    }

    /// Mean times in µs between `before` and `self`.
    fn means_since(&self, before: &Timings) -> Breakdown {
        let mean = |sum: f64, count: f64| (count > 0.0).then(|| sum * 1e6 / count);
        Breakdown {
            commit: mean(self.commit_sum - before.commit_sum, self.commit_count - before.commit_count),
            fsync: mean(self.fsync_sum - before.fsync_sum, self.fsync_count - before.fsync_count),
            round_trip: mean(
                self.round_trip_sum - before.round_trip_sum,
                self.round_trip_count - before.round_trip_count,
            ),
            served: mean(self.served_sum - before.served_sum, self.served_count - before.served_count),
        }
    }
}

/// GET /metrics of `address` (plain HTTP/1.0): the body.
async fn scrape(address: &str) -> Result<String, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.map_err(|e| e.to_string())?;
        stream.write_all(b"GET /metrics HTTP/1.0\r\nHost: bench\r\n\r\n").await.map_err(|e| e.to_string())?;
        let mut text = String::new();
        stream.read_to_string(&mut text).await.map_err(|e| e.to_string())?;
        Ok::<_, String>(text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default())
    };
    tokio::time::timeout(Duration::from_secs(5), fetch).await.map_err(|_| "timed out".to_string())?
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
    if args.via.contains(&Via::Nodes) {
        for &clients in &args.clients {
            let flow = ClientOptions { tls: Some(gateway_load.clone()), ..one_at_a_time() };
            let setup = ClientOptions { tls: Some(operator.clone()), ..one_at_a_time() };
            let round = measure(args, &cluster, "nodes", clients, cluster.addresses.clone(), flow, Some(setup)).await?;
            rounds.push(round);
        }
    }
    if args.via.contains(&Via::Gateway) || args.via.contains(&Via::Rest) {
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
        if args.via.contains(&Via::Gateway) {
            for &clients in &args.clients {
                let round =
                    measure(args, &cluster, "gateway", clients, endpoints.clone(), one_at_a_time(), None).await?;
                rounds.push(round);
            }
        }
        if args.via.contains(&Via::Rest) {
            let operator = ClientOptions { tls: Some(operator.clone()), ..ClientOptions::default() };
            rounds.extend(rest_rounds(args, &cluster, &gateway, operator).await?);
        }
        gateway.shutdown().await;
    }
    drop(cluster);

    println!("fdatasync p50 {} µs (the cluster's file system, this run)", fsync.as_micros());
    println!(
        "{:8} {:>7} {:>10} {:>9} {:>9} {:>9} {:>7} {:>13} {:>13} {:>10} {:>10} {:>10} {:>10}",
        "via",
        "clients",
        "orders/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "p50/fs",
        "nodes µs CPU",
        "client µs CPU",
        "commit µs",
        "fsync µs",
        "r-trip µs",
        "served µs"
    );
    let shown = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
    for r in &rounds {
        println!(
            "{:8} {:>7} {:>10.0} {:>9} {:>9} {:>9} {:>7.2} {:>13.1} {:>13.1} {:>10} {:>10} {:>10} {:>10}",
            r.via,
            r.clients,
            r.report.throughput,
            r.report.latency_us.p50,
            r.report.latency_us.p99,
            r.report.latency_us.p999,
            r.report.latency_us.p50 as f64 / fsync.as_micros().max(1) as f64,
            r.nodes_cpu_us_per_order,
            r.clients_cpu_us_per_order,
            shown(r.breakdown.commit),
            shown(r.breakdown.fsync),
            shown(r.breakdown.round_trip),
            shown(r.breakdown.served),
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
    /// Where a commit's time went (means over the round).
    breakdown: Breakdown,
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
            "commit_mean_us": self.breakdown.commit, "fsync_mean_us": self.breakdown.fsync,
            "append_round_trip_mean_us": self.breakdown.round_trip,
            "append_served_mean_us": self.breakdown.served,
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
    let load = async { run_load(config).await.map_err(|e| format!("{via}, {clients} clients: {e}")) };
    measured(cluster, via, clients, load).await
}

/// Runs one round's `load` with the CPU time of the nodes and of this process, and the
/// nodes' timings, read before and after it.
async fn measured(
    cluster: &Cluster,
    via: &'static str,
    clients: usize,
    load: impl std::future::Future<Output = Result<LoadReport, String>>,
) -> Result<Round, String> {
    let nodes_before = cpu_seconds(&cluster.pids());
    let self_before = cpu_seconds(&[std::process::id()]);
    let timings_before = Timings::scrape(cluster).await;
    let report = load.await?;
    let breakdown = Timings::scrape(cluster).await.means_since(&timings_before);
    let per_order = |seconds: f64| seconds * 1e6 / report.acked.max(1) as f64;
    let round = Round {
        breakdown,
        via,
        clients,
        nodes_cpu_us_per_order: per_order(cpu_seconds(&cluster.pids()) - nodes_before),
        clients_cpu_us_per_order: per_order(cpu_seconds(&[std::process::id()]) - self_before),
        report,
    };
    eprintln!(
        "order-latency: via {via}, {clients} clients: {:.0} orders/s, p50 {} µs, p99 {} µs, {} errors",
        round.report.throughput, round.report.latency_us.p50, round.report.latency_us.p99, round.report.errors
    );
    Ok(round)
}

/// The REST rounds: a market and two funded accounts per client (set up on the nodes
/// as the operator), the REST front end on `gateway` in this process, then for each
/// client count closed-loop clients sending `POST /v1/orders` one at a time (a buy and a
/// sell in turn between their two accounts, as `bench http`).
async fn rest_rounds(
    args: &OrderLatencyArgs,
    cluster: &Cluster,
    gateway: &bourse_gateway::Gateway,
    operator: ClientOptions,
) -> Result<Vec<Round>, String> {
    use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
    let setup = SymbolSetup::default();
    let (market, assets) =
        setup_market(&cluster.addresses, &setup, &operator).await.map_err(|e| format!("rest: the market: {e}"))?;
    let clients_max = args.clients.iter().copied().max().expect("checked non-empty");
    let admin = bourse_client::Client::connect(cluster.addresses.clone(), bourse_client::random_client_id(), operator)
        .await
        .map_err(|e| format!("rest: {e}"))?;
    let count = u32::try_from(clients_max * 2).expect("at most 4096 clients");
    let accounts = funded_accounts(&admin, count, assets, &setup).await.map_err(|e| format!("rest: accounts: {e}"))?;
    admin.close().await.map_err(|e| format!("rest: {e}"))?;
    let mut config = bourse_http::HttpConfig::new("127.0.0.1:0".parse().expect("an address"), Vec::new());
    config.upstream = bourse_port::Upstream::InProcess(gateway.local());
    let http = bourse_http::HttpServer::start(config).await.map_err(|e| format!("the REST front end: {e}"))?;
    let mut rounds = Vec::new();
    for &clients in &args.clients {
        let load = async {
            let clients = u32::try_from(clients).expect("at most 4096 clients");
            let round =
                super::http::round(http.addr(), market.symbol.0, setup.px_mid, &accounts, clients, args.seconds)
                    .await?;
            Ok(LoadReport::new(round.done, round.elapsed.as_secs_f64(), &round.latency, round.errors, 0))
        };
        rounds.push(measured(cluster, "rest", clients, load).await?);
    }
    http.shutdown().await;
    Ok(rounds)
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
    let mut cluster =
        Cluster { children: Vec::new(), addresses: nodes.iter().map(|n| n.api.clone()).collect(), metrics: Vec::new() };
    for node in &nodes {
        let metrics = port(200 + node.id)?;
        let extra = [
            "--pki".to_string(),
            pki.display().to_string(),
            "--admin-gateways=1".to_string(),
            "--metrics-listen".to_string(),
            metrics.clone(),
        ];
        cluster.children.push(spawn_tethered_node(&exe, node, &bootstrap, &extra)?);
        cluster.metrics.push(metrics);
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

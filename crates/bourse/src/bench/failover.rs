//! `bourse bench failover`: how long a cluster is without a leader that takes commands
//! after its leader dies.
//!
//! A local cluster of `bourse node` processes; a prober submits one deposit at a time
//! (unary Admin.Submit, exactly-once seqs) to whichever member leads. Each trial waits
//! a random time within a heartbeat interval after the last acknowledged probe, kills
//! the leader with SIGKILL, and measures from the kill to the first probe the new
//! leader acknowledges (committed by a quorum and applied). The killed node is then
//! restarted on its data and must catch up before the next trial. This is the figure
//! of the Raft paper's figure 16 (there: time to elect a new leader), measured end to
//! end as a client sees it.

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

use bourse_engine::command::CommandBody;
use bourse_engine::{AccountId, Amount, AssetId};
use bourse_protocol::proto;
use bourse_protocol::proto::admin_client::AdminClient;
use clap::Args;
use rand::{Rng, SeedableRng};

use crate::cluster::{connect, spawn_node, LocalNode};

#[derive(Args, Debug)]
pub struct FailoverArgs {
    /// Members of the cluster (3 or 5 make sense).
    #[arg(long = "nodes", id = "node_count", default_value_t = 3)]
    nodes: u64,
    /// Leader kills to measure.
    #[arg(long, default_value_t = 100)]
    trials: u32,
    /// The low-latency timing profile (heartbeat 5 ms, election timeout 10–35 ms)
    /// instead of the default (20 ms, 40–100 ms).
    #[arg(long)]
    low_latency: bool,
    /// Client ports are base+id, Raft ports base+100+id.
    #[arg(long, default_value_t = 7950)]
    base_port: u16,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Keep the cluster's data here instead of a temporary directory.
    #[arg(long)]
    data: Option<PathBuf>,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// One deposit at a time into account 0, always the next seq once the previous one is
/// acknowledged, resent unchanged until it is.
struct Prober {
    addresses: Vec<String>,
    client_id: u64,
    seq: u64,
    preferred: usize,
}

const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

impl Prober {
    /// Submits the current command to `address`; true once acknowledged.
    async fn try_once(&mut self, address: usize, body: &CommandBody) -> Result<bool, Option<String>> {
        let Ok(mut admin) = connect_admin(&self.addresses[address]).await else { return Err(None) };
        let command = proto::ClientCommand { seq: self.seq, body: Some(body.into()) };
        let request = proto::SubmitRequest { client_id: self.client_id, command: Some(command) };
        match tokio::time::timeout(PROBE_TIMEOUT, admin.submit(request)).await {
            Ok(Ok(_ack)) => {
                self.seq += 1;
                self.preferred = address;
                Ok(true)
            }
            Ok(Err(status)) => {
                let hint = status.metadata().get("bourse-leader").and_then(|v| v.to_str().ok()).map(str::to_string);
                Err(hint)
            }
            Err(_) => Err(None),
        }
    }

    /// Submits until a live member acknowledges; `dead` is skipped. Returns the index
    /// of the member that acknowledged.
    async fn submit(&mut self, body: &CommandBody, dead: Option<usize>, give_up: Duration) -> Result<usize, String> {
        let started = Instant::now();
        let mut next = self.preferred;
        loop {
            if Some(next) != dead {
                match self.try_once(next, body).await {
                    Ok(true) => return Ok(next),
                    Ok(false) => {}
                    Err(Some(hint)) => {
                        if let Some(i) = self.addresses.iter().position(|a| *a == hint) {
                            if Some(i) != dead {
                                next = i;
                                continue;
                            }
                        }
                    }
                    Err(None) => {}
                }
            }
            if started.elapsed() > give_up {
                return Err(format!("no member acknowledged a command within {give_up:?}"));
            }
            next = (next + 1) % self.addresses.len();
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
    }
}

async fn connect_admin(address: &str) -> Result<AdminClient<tonic::transport::Channel>, String> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_millis(200))
        .tcp_nodelay(true);
    let channel = endpoint.connect().await.map_err(|e| e.to_string())?;
    Ok(AdminClient::new(channel))
}

struct Cluster {
    exe: PathBuf,
    nodes: Vec<LocalNode>,
    children: Vec<Option<Child>>,
    bootstrap: String,
    extra: Vec<String>,
}

impl Cluster {
    fn start(&mut self, i: usize) -> Result<(), String> {
        let child = spawn_node(&self.exe, &self.nodes[i], &self.bootstrap, &self.extra)?;
        self.children[i] = Some(child);
        Ok(())
    }

    fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.children[i].take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Index of the leader and its committed index, once every running member agrees.
    async fn settled(&self) -> Option<(usize, u64)> {
        let mut leader = None;
        let mut statuses = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if self.children[i].is_none() {
                continue;
            }
            let mut client = connect(&node.api).await.ok()?;
            let status = client.status(proto::ClusterStatusRequest {}).await.ok()?.into_inner();
            if status.role == "leader" {
                leader = Some((i, status.committed_index));
            }
            statuses.push(status);
        }
        let (i, committed) = leader?;
        let leader_id = self.nodes[i].id;
        let caught_up = statuses.iter().all(|s| s.leader_id == leader_id && s.applied_index + 2 >= committed);
        caught_up.then_some((i, committed))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for i in 0..self.children.len() {
            self.kill(i);
        }
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

pub fn run(args: &FailoverArgs) -> Result<(), String> {
    if !(3..=9).contains(&args.nodes) {
        return Err("--nodes must be between 3 and 9".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(run_async(args))
}

async fn run_async(args: &FailoverArgs) -> Result<(), String> {
    let temp;
    let data = match &args.data {
        Some(dir) => dir.clone(),
        None => {
            temp = std::env::temp_dir().join(format!("bourse-failover-{}", std::process::id()));
            temp
        }
    };
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    let (heartbeat_ms, election) = if args.low_latency { (5, "10-35 ms") } else { (20, "40-100 ms") };
    eprintln!(
        "failover: {} nodes, {} trials, heartbeat {heartbeat_ms} ms, election timeout {election}, seed {}, data {}",
        args.nodes,
        args.trials,
        args.seed,
        data.display()
    );
    let nodes: Vec<LocalNode> = (1..=args.nodes)
        .map(|id| LocalNode {
            id,
            api: format!("127.0.0.1:{}", args.base_port as u64 + id),
            raft: format!("127.0.0.1:{}", args.base_port as u64 + 100 + id),
            dir: data.join(format!("node{id}")),
        })
        .collect();
    let bootstrap = nodes.iter().map(|n| format!("{}={}/{}", n.id, n.api, n.raft)).collect::<Vec<_>>().join(",");
    let mut extra = Vec::new();
    if args.low_latency {
        extra.push("--low-latency".to_string());
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut cluster = Cluster { exe, children: (0..nodes.len()).map(|_| None).collect(), nodes, bootstrap, extra };
    for i in 0..cluster.nodes.len() {
        cluster.start(i)?;
    }
    let mut prober = Prober {
        addresses: cluster.nodes.iter().map(|n| n.api.clone()).collect(),
        client_id: 0xFA11_0000 + args.seed,
        seq: 1,
        preferred: 0,
    };
    let setup_wait = Duration::from_secs(30);
    prober.submit(&CommandBody::CreateAsset { name: "FAIL".into(), decimals: 0 }, None, setup_wait).await?;
    prober.submit(&CommandBody::CreateAccount, None, setup_wait).await?;
    let deposit = CommandBody::Deposit { account: AccountId(0), asset: AssetId(0), amount: Amount(1) };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(args.seed);
    let mut samples_ms: Vec<f64> = Vec::with_capacity(args.trials as usize);
    for trial in 1..=args.trials {
        // Everyone follows one leader and is caught up.
        let settle_started = Instant::now();
        let leader = loop {
            if let Some((leader, _)) = cluster.settled().await {
                break leader;
            }
            if settle_started.elapsed() > Duration::from_secs(60) {
                return Err(format!("trial {trial}: the cluster did not settle within 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        prober.preferred = leader;
        prober.submit(&deposit, None, setup_wait).await?;
        tokio::time::sleep(Duration::from_micros(rng.gen_range(0..heartbeat_ms * 1000))).await;
        let killed_at = Instant::now();
        cluster.kill(leader);
        prober.preferred = (leader + 1) % cluster.nodes.len();
        let new_leader = prober.submit(&deposit, Some(leader), Duration::from_secs(30)).await?;
        let elapsed = killed_at.elapsed().as_secs_f64() * 1000.0;
        samples_ms.push(elapsed);
        eprintln!(
            "trial {trial:>3}: killed node {}, node {} took a command after {elapsed:.1} ms",
            cluster.nodes[leader].id, cluster.nodes[new_leader].id
        );
        cluster.start(leader)?;
    }
    let mut sorted = samples_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let (p50, p90, p99, max, min) = (
        percentile(&sorted, 50.0),
        percentile(&sorted, 90.0),
        percentile(&sorted, 99.0),
        sorted.last().copied().unwrap_or(0.0),
        sorted.first().copied().unwrap_or(0.0),
    );
    println!(
        "failover ({} nodes, election timeout {election}): {} trials; kill → first command acknowledged by the new \
         leader: min {min:.1} ms, p50 {p50:.1} ms, p90 {p90:.1} ms, p99 {p99:.1} ms, max {max:.1} ms",
        args.nodes,
        sorted.len()
    );
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "nodes": args.nodes, "trials": sorted.len(), "low_latency": args.low_latency,
                "heartbeat_ms": heartbeat_ms, "election_timeout": election, "seed": args.seed,
                "failover_ms": {"min": min, "p50": p50, "p90": p90, "p99": p99, "max": max},
                "samples_ms": samples_ms,
            })
        );
    }
    drop(cluster);
    if args.data.is_none() {
        let _ = std::fs::remove_dir_all(&data);
    }
    Ok(())
}

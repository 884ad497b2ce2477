//! A cluster of real `bourse node` processes for fault tests, and the load that runs on
//! it while faults are injected.
//!
//! [`ClusterHarness`] owns N child processes, each with its own temporary data directory,
//! API and Raft ports, and a [`FaultProxy`] in front of its Raft listener (advertised as
//! its Raft address). Node in slot `i` binds its outgoing Raft connections to
//! `127.0.0.<10+i>`, so every proxy knows who is talking and partitions are per pair.
//! Processes are killed (SIGKILL), paused (SIGSTOP/SIGCONT), restarted on their data,
//! or wiped; the network is cut by [`ClusterHarness::isolate`] and
//! [`ClusterHarness::split`] and restored by [`ClusterHarness::heal`].
//!
//! Every wait is bounded and fails with the state of each node and the tail of its
//! stderr. Dropping the harness kills every child.
//!
//! [`Workload`] runs "counter" clients (deposits of one unit into their own account, so
//! the balance counts the deposits applied) and order-flow traders through
//! `bourse_client::Client` with every API endpoint; [`check_state`] reads every account
//! and asset on every replica and checks exactly-once, conservation and non-negativity.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use std::io::{BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::load::{FlowMarket, OrderFlow};
use bourse_client::{Client, ClientOptions, ClientTls, SessionEvent};
use bourse_cluster::fault::FaultProxy;
use bourse_engine::command::{CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, Outcome, Px, Qty, SymbolId};
use bourse_protocol::proto;
use bourse_protocol::proto::cluster_client::ClusterClient;
use bourse_protocol::proto::query_client::QueryClient as QueryService;
use tokio::sync::oneshot::error::TryRecvError;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tonic::transport::{Channel, Endpoint};

/// How long a node may take to print its address.
pub const START_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long a Status call may take before the node counts as unreachable.
const STATUS_WAIT_MAX: Duration = Duration::from_millis(800);
/// What a node prints once it serves.
const LISTENING_PREFIX: &str = "bourse node listening on ";
/// Stderr kept per node (the tail).
const STDERR_KEEP_BYTES: usize = 256 << 10;

/// Seconds since the test binary's first harness, for log lines.
pub fn elapsed_s() -> f64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_secs_f64()
}

/// Prints one line of the test's story, prefixed with the time and the cluster's name.
macro_rules! say {
    ($name:expr, $($arg:tt)*) => {
        println!("[{:7.2}s {}] {}", $crate::harness::elapsed_s(), $name, format!($($arg)*))
    };
}

/// Raft timing of every node: heartbeat 40 ms, election timeout 200–400 ms — slower than
/// the defaults, so that a debug build sharing two cores with four other nodes, the load
/// and the test does not stall long enough to start spurious elections. The scenarios
/// also pass with `BOURSE_CLUSTER_LOW_LATENCY=1`, which runs the nodes with
/// `--low-latency` (5 ms, 10–35 ms) instead.
pub fn timing_args() -> Vec<String> {
    if std::env::var("BOURSE_CLUSTER_LOW_LATENCY").is_ok_and(|v| v == "1") {
        return vec!["--low-latency".into()];
    }
    ["--heartbeat-ms", "40", "--election-min-ms", "200", "--election-max-ms", "400"].map(String::from).to_vec()
}

/// A port free now, below the kernel's ephemeral range (`bourse_node::ports`).
fn free_port() -> u16 {
    bourse_node::ports::free_local_port().expect("a free loopback port")
}

/// A `bourse node` child with its stderr collected (the tail) in the background.
struct NodeChild {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl NodeChild {
    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for NodeChild {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn drain_into(mut pipe: impl Read, sink: &Mutex<String>) {
    let mut buffer = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buffer) {
        if n == 0 {
            break;
        }
        let mut text = sink.lock().expect("stderr lock");
        text.push_str(&String::from_utf8_lossy(&buffer[..n]));
        if text.len() > 2 * STDERR_KEEP_BYTES {
            let mut cut = text.len() - STDERR_KEEP_BYTES;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            text.drain(..cut);
        }
    }
}

/// The last `lines` lines of `text`.
fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// What the harness knows of one place in the cluster.
pub struct Slot {
    /// The Raft id of the node now in this slot (a wiped node rejoins with a new one).
    pub id: u64,
    /// The source address of this node's Raft connections.
    pub ip: IpAddr,
    pub api: SocketAddr,
    pub raft_listen: SocketAddr,
    pub proxy: FaultProxy,
    pub data: PathBuf,
    child: Option<NodeChild>,
    pub paused: bool,
    /// Stderr of the earlier processes of this slot (their tails).
    earlier_stderr: String,
}

impl Slot {
    pub fn running(&self) -> bool {
        self.child.is_some()
    }

    /// Running and not paused: it should answer.
    pub fn live(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    pub fn member_string(&self) -> String {
        format!("{}={}/{}", self.id, self.api, self.proxy.addr())
    }

    fn stderr(&self) -> String {
        let now = self.child.as_ref().map(|c| c.stderr.lock().expect("stderr lock").clone()).unwrap_or_default();
        format!("{}{}", self.earlier_stderr, now)
    }
}

/// How to run the nodes.
#[derive(Clone, Debug, Default)]
pub struct HarnessOptions {
    /// Extra flags for every node.
    pub node_args: Vec<String>,
    /// A TOML config file every node reads (`--config`), e.g. a `[raft]` table.
    pub config_toml: Option<String>,
}

/// N `bourse node` processes behind fault proxies; see the module docs.
pub struct ClusterHarness {
    pub name: String,
    dir: tempfile::TempDir,
    pub slots: Vec<Slot>,
    bootstrap: Vec<String>,
    options: HarnessOptions,
    config_path: Option<PathBuf>,
    /// Raft ids handed out so far (a new id never reuses an old one).
    id_last: u64,
}

impl ClusterHarness {
    /// Starts `count` nodes that bootstrap one cluster, and waits for its leader.
    pub async fn start(name: &str, count: usize, options: HarnessOptions) -> ClusterHarness {
        assert!((1..=40).contains(&count));
        let dir = tempfile::Builder::new().prefix(&format!("bourse-{name}-")).tempdir().expect("temp dir");
        let config_path = options.config_toml.as_ref().map(|text| {
            let path = dir.path().join("node.toml");
            std::fs::write(&path, text).expect("write config");
            path
        });
        let mut slots = Vec::with_capacity(count);
        for i in 0..count {
            let raft_listen: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
            let api: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
            let proxy = FaultProxy::start("127.0.0.1:0".parse().expect("addr"), raft_listen).await.expect("proxy");
            let data = dir.path().join(format!("node{i}"));
            std::fs::create_dir_all(&data).expect("data dir");
            slots.push(Slot {
                id: i as u64 + 1,
                ip: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + i as u8)),
                api,
                raft_listen,
                proxy,
                data,
                child: None,
                paused: false,
                earlier_stderr: String::new(),
            });
        }
        let bootstrap = slots.iter().map(Slot::member_string).collect();
        let mut harness = ClusterHarness {
            name: name.to_string(),
            dir,
            slots,
            bootstrap,
            options,
            config_path,
            id_last: count as u64,
        };
        for i in 0..count {
            harness.spawn(i, true);
        }
        for i in 0..count {
            harness.wait_listening(i).await;
        }
        let (leader, status) = harness.wait_for_leader(&harness.all(), 0, Duration::from_secs(20)).await;
        say!(harness.name, "{count} nodes up; leader node {} (slot {leader}) term {}", status.id, status.term);
        harness
    }

    /// The harness's CA directory, with a member certificate for `id` (issued the
    /// first time a node of that id starts; valid for 127.0.0.1, where the proxies are).
    fn member_certificate(&self, id: u64) -> PathBuf {
        let dir = self.dir.path().join("pki");
        let ca = bourse_pki::Ca::open_or_init(&dir).expect("the harness's CA");
        let identity = bourse_pki::Identity::new(bourse_pki::Role::Node, id.to_string()).expect("identity");
        if !bourse_pki::TlsFiles::issued(&dir, &identity).cert.exists() {
            ca.issue(&identity, &["127.0.0.1".to_string()], &dir.join(bourse_pki::ISSUED_DIR)).expect("issue");
        }
        dir
    }

    /// A client certificate from the harness's CA for `identity` (ROLE:ID), issued the
    /// first time it is asked for.
    pub fn client_tls(&self, identity: &str) -> ClientTls {
        let dir = self.dir.path().join("pki");
        let (role, id) = identity.split_once(':').expect("ROLE:ID");
        let identity = bourse_pki::Identity::new(role.parse().expect("a role"), id).expect("identity");
        if !bourse_pki::TlsFiles::issued(&dir, &identity).cert.exists() {
            let ca = bourse_pki::Ca::open_or_init(&dir).expect("the harness's CA");
            ca.issue(&identity, &[], &dir.join(bourse_pki::ISSUED_DIR)).expect("issue");
        }
        ClientTls::issued(&dir, &identity).expect("the harness's client certificate")
    }

    /// The workload's clients' certificate: an operator's (its counters deposit, which
    /// gateways do only when the nodes name them in `--admin-gateways`).
    pub fn tls(&self) -> Option<ClientTls> {
        Some(self.client_tls("operator:workload"))
    }

    pub fn all(&self) -> Vec<usize> {
        (0..self.slots.len()).collect()
    }

    /// Slots whose node runs and is not paused.
    pub fn live(&self) -> Vec<usize> {
        (0..self.slots.len()).filter(|&i| self.slots[i].live()).collect()
    }

    /// Every API address (what clients are given).
    pub fn endpoints(&self) -> Vec<String> {
        self.slots.iter().map(|s| s.api.to_string()).collect()
    }

    /// The harness's temporary directory (removed at the end).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn data_dir(&self, slot: usize) -> &Path {
        &self.slots[slot].data
    }

    /// Spawns the node of `slot` (not waiting for it to listen).
    fn spawn(&mut self, slot: usize, bootstrap: bool) {
        let s = &self.slots[slot];
        assert!(s.child.is_none(), "slot {slot} already runs");
        let mut command = Process::new(env!("CARGO_BIN_EXE_bourse"));
        command
            .arg("node")
            .args(["--id", &s.id.to_string(), "--data"])
            .arg(&s.data)
            .args(["--listen", &s.api.to_string()])
            .args(["--raft-listen", &s.raft_listen.to_string()])
            .args(["--advertise-raft", &s.proxy.addr().to_string()])
            .args(["--bind-ip", &s.ip.to_string()])
            .args(timing_args());
        if bootstrap {
            command.args(["--bootstrap", &self.bootstrap.join(",")]);
        }
        // Mutual TLS between members, as `cluster up` runs them: a CA of the harness's own.
        command.arg("--pki").arg(self.member_certificate(s.id));
        // Gateway 1 (a_gateway_follows_the_leader's) relays administrative commands.
        command.arg("--admin-gateways=1");
        if let Some(path) = &self.config_path {
            command.arg("--config").arg(path);
        }
        command
            .args(&self.options.node_args)
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn bourse node");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || drain_into(stderr_pipe, &sink));
        // Stdout: the listening line goes into stderr's record too, so the wait can see it.
        let stdout_pipe = child.stdout.take().expect("piped stdout");
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout_pipe).lines() {
                let Ok(line) = line else { break };
                sink.lock().expect("stderr lock").push_str(&format!("[stdout] {line}\n"));
            }
        });
        let s = &mut self.slots[slot];
        s.child = Some(NodeChild { child, stderr });
        s.paused = false;
    }

    /// Waits until the node of `slot` printed that it listens.
    async fn wait_listening(&mut self, slot: usize) {
        let started = Instant::now();
        let wanted = format!("[stdout] {LISTENING_PREFIX}");
        loop {
            let s = &mut self.slots[slot];
            let child = s.child.as_mut().expect("running");
            if child.stderr.lock().expect("stderr lock").contains(&wanted) {
                return;
            }
            if let Some(status) = child.child.try_wait().expect("try_wait") {
                let stderr = s.stderr();
                panic!(
                    "[{}] node in slot {slot} exited with {status} before listening:\n{}",
                    self.name,
                    tail(&stderr, 60)
                );
            }
            if started.elapsed() > START_WAIT_MAX {
                panic!(
                    "[{}] node in slot {slot} did not listen within {START_WAIT_MAX:?}\n{}",
                    self.name,
                    self.diagnose()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn pid(&self, slot: usize) -> u32 {
        self.slots[slot].child.as_ref().unwrap_or_else(|| panic!("slot {slot} is not running")).pid()
    }

    fn signal(&self, slot: usize, signal: &str) {
        let pid = self.pid(slot);
        let sent = Process::new("kill").arg(format!("-{signal}")).arg(pid.to_string()).status().expect("run kill");
        assert!(sent.success(), "kill -{signal} {pid} failed");
    }

    /// SIGHUP to every running node: each re-reads its certificates and the CA's
    /// revocation list, and ends the connections made before.
    pub fn reload_certificates(&self) {
        for slot in self.all() {
            if self.slots[slot].running() {
                self.signal(slot, "HUP");
            }
        }
        say!(self.name, "SIGHUP to every node: certificates reloaded");
    }

    /// The harness's CA directory.
    pub fn pki_dir(&self) -> PathBuf {
        self.dir.path().join("pki")
    }

    /// SIGKILL: the node dies at once; its data directory stays.
    pub fn kill(&mut self, slot: usize) {
        let s = &mut self.slots[slot];
        let mut child = s.child.take().unwrap_or_else(|| panic!("slot {slot} is not running"));
        child.child.kill().expect("SIGKILL");
        child.child.wait().expect("reap");
        let stderr = child.stderr.lock().expect("stderr lock").clone();
        s.earlier_stderr = format!("{}--- node {} killed (SIGKILL) ---\n", tail(&stderr, 40), s.id);
        s.paused = false;
        say!(self.name, "SIGKILL node {} (slot {slot})", s.id);
    }

    /// SIGSTOP: the node keeps its sockets but does nothing.
    pub fn stop(&mut self, slot: usize) {
        self.signal(slot, "STOP");
        self.slots[slot].paused = true;
        say!(self.name, "SIGSTOP node {} (slot {slot})", self.slots[slot].id);
    }

    pub fn cont(&mut self, slot: usize) {
        self.signal(slot, "CONT");
        self.slots[slot].paused = false;
        say!(self.name, "SIGCONT node {} (slot {slot})", self.slots[slot].id);
    }

    /// Starts the node of `slot` again on its data directory (same id and addresses).
    pub async fn restart(&mut self, slot: usize) {
        // Only the original members are in the bootstrap list (it is ignored on a
        // non-empty log anyway).
        let original = self.slots[slot].id <= self.bootstrap.len() as u64;
        self.spawn(slot, original);
        self.wait_listening(slot).await;
        say!(self.name, "restarted node {} (slot {slot}) on its data", self.slots[slot].id);
    }

    /// Deletes the data directory of a stopped slot.
    pub fn wipe(&mut self, slot: usize) {
        assert!(!self.slots[slot].running(), "wipe a running node");
        let data = &self.slots[slot].data;
        std::fs::remove_dir_all(data).expect("remove data dir");
        std::fs::create_dir_all(data).expect("data dir");
        say!(self.name, "wiped the data of slot {slot}");
    }

    /// Starts an empty node in `slot` under a new id, without --bootstrap (it waits to be
    /// added); returns the id.
    pub async fn start_fresh(&mut self, slot: usize) -> u64 {
        self.id_last += 1;
        self.slots[slot].id = self.id_last;
        self.spawn(slot, false);
        self.wait_listening(slot).await;
        say!(self.name, "started an empty node {} in slot {slot} (no --bootstrap)", self.id_last);
        self.id_last
    }

    /// Cuts `slot` off from every other node, both ways.
    pub fn isolate(&self, slot: usize) {
        for (j, other) in self.slots.iter().enumerate() {
            if j != slot {
                other.proxy.block(self.slots[slot].ip);
            }
        }
        self.slots[slot].proxy.block_all();
        say!(self.name, "isolated node {} (slot {slot})", self.slots[slot].id);
    }

    /// Lets nodes talk only within their group.
    pub fn split(&self, groups: &[&[usize]]) {
        for (a, group_a) in groups.iter().enumerate() {
            for (b, group_b) in groups.iter().enumerate() {
                if a == b {
                    continue;
                }
                for &from in group_a.iter() {
                    for &to in group_b.iter() {
                        self.slots[to].proxy.block(self.slots[from].ip);
                    }
                }
            }
        }
        let ids: Vec<Vec<u64>> = groups.iter().map(|g| g.iter().map(|&i| self.slots[i].id).collect()).collect();
        say!(self.name, "split the network into {ids:?} (node ids)");
    }

    pub fn heal(&self) {
        for slot in &self.slots {
            slot.proxy.heal();
        }
        say!(self.name, "healed the network");
    }

    /// The Cluster.Status of one node, or why it did not answer (bounded).
    pub async fn status(&self, slot: usize) -> Result<proto::ClusterStatus, String> {
        let api = self.slots[slot].api;
        let call = async {
            let channel = connect_api(api, self.client_tls("operator:harness")).await?;
            ClusterClient::new(channel)
                .status(proto::ClusterStatusRequest {})
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
        };
        match tokio::time::timeout(STATUS_WAIT_MAX, call).await {
            Ok(result) => result,
            Err(_) => Err(format!("no answer within {STATUS_WAIT_MAX:?}")),
        }
    }

    /// Statuses of the given slots (skipping none: errors are values).
    pub async fn statuses(&self, slots: &[usize]) -> Vec<(usize, Result<proto::ClusterStatus, String>)> {
        let calls = slots.iter().map(|&i| async move { (i, self.status(i).await) });
        futures_util::future::join_all(calls).await
    }

    /// Each node's state and the tail of its stderr, for failure messages.
    pub async fn diagnose_async(&self) -> String {
        let statuses = self.statuses(&self.all()).await;
        let mut out = String::new();
        for (i, status) in statuses {
            let s = &self.slots[i];
            let state = if !s.running() {
                "down"
            } else if s.paused {
                "paused"
            } else {
                "running"
            };
            out.push_str(&format!("--- slot {i} node {} ({state}, api {}) ---\n", s.id, s.api));
            match status {
                Ok(st) => out.push_str(&format!("{}\n", status_line(&st))),
                Err(e) => out.push_str(&format!("status: {e}\n")),
            }
            out.push_str(&tail(&s.stderr(), 25));
            out.push('\n');
        }
        out
    }

    /// Like [`Self::diagnose_async`] without statuses (for places that cannot await).
    pub fn diagnose(&self) -> String {
        let mut out = String::new();
        for (i, s) in self.slots.iter().enumerate() {
            out.push_str(&format!("--- slot {i} node {} (running {}, paused {}) ---\n", s.id, s.running(), s.paused));
            out.push_str(&tail(&s.stderr(), 25));
            out.push('\n');
        }
        out
    }

    /// Fails the test with `what` and the state of every node.
    pub async fn fail(&self, what: &str) -> ! {
        let diagnosis = self.diagnose_async().await;
        panic!("[{}] {what}\n{diagnosis}", self.name)
    }

    /// Waits for a node among `among` that leads in a term above `term_above`, and that
    /// a majority of `among` follows. Returns its slot and status.
    pub async fn wait_for_leader(
        &self,
        among: &[usize],
        term_above: u64,
        bound: Duration,
    ) -> (usize, proto::ClusterStatus) {
        let started = Instant::now();
        loop {
            let live: Vec<usize> = among.iter().copied().filter(|&i| self.slots[i].live()).collect();
            let statuses = self.statuses(&live).await;
            let leader = statuses
                .iter()
                .filter_map(|(i, s)| match s {
                    Ok(s) if s.role == "leader" && s.term > term_above => Some((*i, s.clone())),
                    _ => None,
                })
                .max_by_key(|(_, s)| s.term);
            if let Some((slot, status)) = leader {
                // A majority of `among` follows it (a node not yet a member knows no leader).
                let followers = statuses.iter().filter(|(_, s)| s.as_ref().is_ok_and(|s| s.leader_id == status.id));
                if followers.count() > among.len() / 2 {
                    return (slot, status);
                }
            }
            if started.elapsed() > bound {
                let ids: Vec<u64> = among.iter().map(|&i| self.slots[i].id).collect();
                self.fail(&format!("no leader among nodes {ids:?} in a term above {term_above} within {bound:?}"))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The slot of the current leader (among every live node), waiting for one.
    pub async fn leader(&self) -> (usize, proto::ClusterStatus) {
        self.wait_for_leader(&self.live(), 0, Duration::from_secs(20)).await
    }

    /// Waits until every slot of `slots` answers with the same applied index and state
    /// hash, with everything committed applied. Returns (index, hash).
    pub async fn wait_converged(&self, slots: &[usize], bound: Duration) -> (u64, String) {
        let started = Instant::now();
        loop {
            let statuses = self.statuses(slots).await;
            let oks: Vec<&proto::ClusterStatus> = statuses.iter().filter_map(|(_, s)| s.as_ref().ok()).collect();
            if oks.len() == slots.len() {
                let first = oks[0];
                let same = oks.iter().all(|s| {
                    s.applied_index == first.applied_index
                        && s.state_hash == first.state_hash
                        && s.committed_index == s.applied_index
                });
                if same && first.applied_index > 0 {
                    let ids: Vec<u64> = slots.iter().map(|&i| self.slots[i].id).collect();
                    say!(
                        self.name,
                        "converged: nodes {ids:?} at index {} hash {}… ({} ms)",
                        first.applied_index,
                        &first.state_hash[..first.state_hash.len().min(16)],
                        started.elapsed().as_millis()
                    );
                    return (first.applied_index, first.state_hash.clone());
                }
            }
            if started.elapsed() > bound {
                let lines: Vec<String> = statuses
                    .iter()
                    .map(|(i, s)| match s {
                        Ok(s) => format!("slot {i}: {}", status_line(s)),
                        Err(e) => format!("slot {i}: {e}"),
                    })
                    .collect();
                self.fail(&format!("replicas did not converge within {bound:?}:\n{}", lines.join("\n"))).await;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A Cluster call on the leader (found by status; retried until `bound`).
    pub async fn on_leader<F, Fut>(&self, what: &str, bound: Duration, call: F) -> proto::MembershipReply
    where
        F: Fn(ClusterClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<proto::MembershipReply>, tonic::Status>>,
    {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < bound {
            let (slot, _) = self.leader().await;
            let api = self.slots[slot].api;
            let remaining = bound.saturating_sub(started.elapsed()).max(Duration::from_millis(100));
            let attempt = async {
                let channel = connect_api(api, self.client_tls("operator:harness")).await?;
                call(ClusterClient::new(channel)).await.map_err(|s| format!("{:?}: {}", s.code(), s.message()))
            };
            match tokio::time::timeout(remaining, attempt).await {
                Ok(Ok(reply)) => return reply.into_inner(),
                Ok(Err(error)) => last = error,
                Err(_) => last = format!("no answer within {remaining:?}"),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        self.fail(&format!("{what} on the leader failed within {bound:?}: {last}")).await
    }

    /// Removes the node of `slot` from the membership (through the leader).
    pub async fn remove_member(&self, slot: usize) {
        let id = self.slots[slot].id;
        let reply = self
            .on_leader("RemoveNode", Duration::from_secs(20), |mut c| async move {
                c.remove_node(proto::RemoveNodeRequest { id }).await
            })
            .await;
        let members: Vec<u64> = reply.status.map(|s| s.members.iter().map(|m| m.id).collect()).unwrap_or_default();
        say!(self.name, "removed node {id} (slot {slot}); members now {members:?}");
    }

    /// Adds the node running in `slot` (started with [`Self::start_fresh`]) to the cluster.
    pub async fn add_member(&self, slot: usize, bound: Duration) {
        let s = &self.slots[slot];
        let request = proto::AddNodeRequest { id: s.id, api: s.api.to_string(), raft: s.proxy.addr().to_string() };
        let started = Instant::now();
        let reply = self
            .on_leader("AddNode", bound, |mut c| {
                let request = request.clone();
                async move { c.add_node(request).await }
            })
            .await;
        let members: Vec<(u64, bool)> =
            reply.status.map(|s| s.members.iter().map(|m| (m.id, m.voter)).collect()).unwrap_or_default();
        say!(
            self.name,
            "added node {} (slot {slot}) in {} ms; members (id, voter) now {members:?}",
            s.id,
            started.elapsed().as_millis()
        );
    }

    /// The first index of every journal segment file under a node's data directory.
    pub fn segment_first_indexes(&self, slot: usize) -> Vec<u64> {
        let mut found = Vec::new();
        let mut dirs = vec![self.slots[slot].data.clone()];
        while let Some(dir) = dirs.pop() {
            let Ok(items) = std::fs::read_dir(&dir) else { continue };
            for item in items.flatten() {
                let path = item.path();
                if path.is_dir() {
                    dirs.push(path);
                } else if let Some(index) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(|n| n.strip_suffix(".log"))
                    .and_then(|stem| stem.parse::<u64>().ok())
                {
                    found.push(index);
                }
            }
        }
        found.sort_unstable();
        found
    }
}

impl Drop for ClusterHarness {
    fn drop(&mut self) {
        // SIGKILL reaches paused processes too; NodeChild's drop kills and reaps.
        for slot in &mut self.slots {
            slot.child = None;
        }
    }
}

/// A channel to a node's client address.
async fn connect_api(api: std::net::SocketAddr, tls: ClientTls) -> Result<tonic::transport::Channel, String> {
    Endpoint::from_shared(format!("http://{api}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(STATUS_WAIT_MAX)
        .connect_with_connector(tls.0)
        .await
        .map_err(|e| format!("connect: {e}"))
}

pub fn status_line(s: &proto::ClusterStatus) -> String {
    format!(
        "node {} {} term {} leader {} last_log {} committed {} applied {} snapshot {} hash {}",
        s.id,
        s.role,
        s.term,
        s.leader_id,
        s.last_log_index,
        s.committed_index,
        s.applied_index,
        s.snapshot_index,
        &s.state_hash[..s.state_hash.len().min(16)]
    )
}

// ---------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------

/// How much load to run.
#[derive(Clone, Debug)]
pub struct WorkloadOptions {
    pub seed: u64,
    /// Counter clients, each with its own account.
    pub counters: usize,
    /// Deposits per second per counter.
    pub counter_rate: f64,
    /// Deposits a counter keeps unanswered at most.
    pub counter_depth: usize,
    /// Order-flow traders, each a client with its own accounts.
    pub traders: usize,
    pub trader_accounts: u32,
    /// Commands per second per trader.
    pub trader_rate: f64,
    /// The clients' mutual TLS: a harness cluster's nodes take order entry from gateway
    /// certificates only ([`ClusterHarness::tls`]); none for a gateway's client port.
    pub tls: Option<ClientTls>,
    /// Clients whose every operation is recorded for the linearizability check (see
    /// [`History`]): one operation outstanding each, deposits and linearizable balance
    /// reads on [`HISTORY_ACCOUNTS`] accounts of their own.
    pub historians: usize,
}

impl Default for WorkloadOptions {
    fn default() -> Self {
        WorkloadOptions {
            seed: 1,
            counters: 3,
            counter_rate: 150.0,
            counter_depth: 8,
            traders: 2,
            trader_accounts: 4,
            trader_rate: 250.0,
            tls: None,
            historians: 0,
        }
    }
}

/// Deposited into every trader account (USD minor units) and credited (ACME).
const TRADER_USD: i64 = 1_000_000_000_000;
const TRADER_ACME: i64 = 1_000_000_000;

/// Client options of the workload: fail over quickly, never give up within a test.
pub fn client_options(inflight_max: usize, tls: &Option<ClientTls>) -> ClientOptions {
    ClientOptions {
        tls: tls.clone(),
        inflight_max,
        connect_timeout: Duration::from_millis(700),
        request_timeout: Duration::from_millis(1500),
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(200),
        unavailable_max: Duration::from_secs(120),
        keepalive_interval: Duration::from_secs(1),
        ..ClientOptions::default()
    }
}

/// What one counter client did.
#[derive(Default)]
pub struct CounterStats {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub duplicates: AtomicU64,
    /// Sent and unanswered now.
    pub inflight: AtomicU64,
}

/// Accounts the historians share (each a partition of the linearizability check).
pub const HISTORY_ACCOUNTS: usize = 2;

/// What the historians did: every operation with its call and return times (ns since
/// the workload started), and the USD they deposited (acknowledged).
#[derive(Default)]
pub struct History {
    pub ops: Mutex<Vec<HistoryOp>>,
    pub deposited: AtomicU64,
    pub inflight: AtomicU64,
}

/// One completed operation: a deposit of `amount`, or a read that returned `balance`.
#[derive(Clone, Debug)]
pub struct HistoryOp {
    pub client: usize,
    pub account: AccountId,
    pub deposit: Option<i64>,
    pub balance: i64,
    pub call_ns: u64,
    pub return_ns: u64,
}

impl History {
    /// Writes the history as JSON lines (tools/lincheck's input) and has Porcupine (a Go
    /// module, an outside checker) decide whether it is linearizable against a model of
    /// account balances. Returns its verdict line, or why not.
    pub fn check(&self, dir: &Path) -> Result<String, String> {
        let ops = self.ops.lock().expect("history").clone();
        let mut text = String::new();
        for op in &ops {
            let mut line = serde_json::json!({
                "client": op.client,
                "account": op.account.0,
                "call": op.call_ns,
                "return": op.return_ns,
            });
            match op.deposit {
                Some(amount) => {
                    line["op"] = "deposit".into();
                    line["amount"] = amount.into();
                }
                None => {
                    line["op"] = "read".into();
                    line["balance"] = op.balance.into();
                }
            }
            text.push_str(&line.to_string());
            text.push('\n');
        }
        let file = dir.join("history.jsonl");
        std::fs::write(&file, text).map_err(|e| format!("write {}: {e}", file.display()))?;
        lincheck(&file, &dir.join("history.html"))
    }
}

/// Runs tools/lincheck (built once per test binary) on `file`; Ok with its verdict when
/// the history is linearizable.
pub fn lincheck(file: &Path, html: &Path) -> Result<String, String> {
    static BUILT: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    let tool = BUILT
        .get_or_init(|| {
            let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tools/lincheck");
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("lincheck");
            let go = ["go", "/usr/local/go/bin/go"]
                .into_iter()
                .find(|go| Process::new(go).arg("version").output().is_ok_and(|o| o.status.success()))
                .ok_or("no Go toolchain (scripts/test-deps.sh installs one)")?;
            let built = Process::new(go)
                .args(["build", "-o"])
                .arg(&out)
                .arg(".")
                .current_dir(&source)
                .output()
                .map_err(|e| format!("go build: {e}"))?;
            if !built.status.success() {
                return Err(format!("go build of tools/lincheck: {}", String::from_utf8_lossy(&built.stderr)));
            }
            Ok(out)
        })
        .clone()?;
    let run = Process::new(&tool).arg(file).arg(html).output().map_err(|e| format!("lincheck: {e}"))?;
    let said = format!("{}{}", String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    if run.status.success() {
        Ok(said.trim().to_string())
    } else {
        Err(format!("{} (history {})", said.trim(), file.display()))
    }
}

#[derive(Default)]
pub struct TraderStats {
    pub sent: AtomicU64,
    pub acked: AtomicU64,
    pub rejected: AtomicU64,
    pub inflight: AtomicU64,
}

/// The market and accounts the workload set up, and what it deposited.
#[derive(Clone, Debug)]
pub struct Market {
    pub usd: AssetId,
    pub acme: AssetId,
    pub symbol: SymbolId,
    pub counter_accounts: Vec<AccountId>,
    /// Where probe clients deposit (see [`Workload::probe_progress`]).
    pub probe_account: AccountId,
    pub trader_accounts: Vec<Vec<AccountId>>,
    /// The historians' accounts (none without historians).
    pub history_accounts: Vec<AccountId>,
    /// Per asset id: deposits and credits the setup made (acknowledged).
    pub setup_supply: BTreeMap<u32, i128>,
}

/// Counters and traders running against a cluster; see the module docs.
pub struct Workload {
    pub market: Market,
    pub counters: Vec<Arc<CounterStats>>,
    pub traders: Vec<Arc<TraderStats>>,
    paused: watch::Sender<bool>,
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<Result<(), String>>>,
    name: String,
    seed: u64,
    /// Probe deposits acknowledged (all of them: a probe submits one at a time).
    pub probe_acked: AtomicU64,
    probes: AtomicU64,
    tls: Option<ClientTls>,
    pub history: Arc<History>,
}

/// Every task's error so far (the first wins).
fn check_answer(
    result: Result<bourse_client::Result<bourse_client::Reply>, tokio::sync::oneshot::error::RecvError>,
) -> Result<bourse_client::Reply, String> {
    match result {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(error)) => Err(format!("command failed: {error}")),
        Err(_) => Err("the client dropped an answer".into()),
    }
}

impl Workload {
    /// Sets up the market and accounts (before any fault), then starts the clients.
    pub async fn start(name: &str, endpoints: Vec<String>, options: WorkloadOptions) -> Workload {
        let setup_client =
            Client::connect(endpoints.clone(), ClientId(0xC0FF_EE00 ^ options.seed), client_options(64, &options.tls))
                .await
                .expect("setup client connects");
        let ok = |reply: bourse_client::Reply, what: &str| -> u64 {
            reply.ok_id().unwrap_or_else(|| panic!("setup: {what} refused: {:?}", reply.outcome))
        };
        let usd = AssetId(ok(setup_client.submit(asset("USD", 2)).await.expect("asset"), "USD") as u32);
        let acme = AssetId(ok(setup_client.submit(asset("ACME", 0)).await.expect("asset"), "ACME") as u32);
        let spec = SymbolSpec {
            name: "ACME/USD".into(),
            base: acme,
            quote: usd,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(1_000_000),
            fee_maker: Amount(0),
            fee_taker: Amount(1),
            policy: MatchPolicy::Fifo,
        };
        let symbol = SymbolId(ok(
            setup_client.submit(CommandBody::CreateSymbol(Box::new(spec))).await.expect("symbol"),
            "symbol",
        ) as u32);
        let create = |n: usize| {
            let client = setup_client.clone();
            async move {
                let replies =
                    client.submit_batch((0..n).map(|_| CommandBody::CreateAccount).collect()).await.expect("accounts");
                replies.into_iter().map(|r| AccountId(r.ok_id().expect("account created") as u32)).collect::<Vec<_>>()
            }
        };
        let counter_accounts = create(options.counters).await;
        let probe_account = create(1).await[0];
        let history_accounts = if options.historians > 0 { create(HISTORY_ACCOUNTS).await } else { Vec::new() };
        let mut trader_accounts = Vec::new();
        let mut setup_supply: BTreeMap<u32, i128> = BTreeMap::new();
        for _ in 0..options.traders {
            let accounts = create(options.trader_accounts as usize).await;
            let funding: Vec<CommandBody> = accounts
                .iter()
                .flat_map(|&account| {
                    [
                        CommandBody::Deposit { account, asset: usd, amount: Amount(TRADER_USD) },
                        CommandBody::Credit { account, asset: acme, amount: Amount(TRADER_ACME) },
                    ]
                })
                .collect();
            for reply in setup_client.submit_batch(funding).await.expect("funding") {
                assert!(matches!(reply.outcome, Outcome::Ok { .. }), "funding refused: {reply:?}");
            }
            *setup_supply.entry(usd.0).or_default() += i128::from(TRADER_USD) * accounts.len() as i128;
            *setup_supply.entry(acme.0).or_default() += i128::from(TRADER_ACME) * accounts.len() as i128;
            trader_accounts.push(accounts);
        }
        setup_client.close().await.expect("setup client closes");
        let market = Market {
            usd,
            acme,
            symbol,
            counter_accounts,
            probe_account,
            trader_accounts,
            history_accounts,
            setup_supply,
        };
        let (paused, _) = watch::channel(false);
        let stop = Arc::new(AtomicBool::new(false));
        let mut workload = Workload {
            market: market.clone(),
            counters: Vec::new(),
            traders: Vec::new(),
            paused,
            stop: Arc::clone(&stop),
            tasks: Vec::new(),
            name: name.to_string(),
            seed: options.seed,
            probe_acked: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            tls: options.tls.clone(),
            history: Arc::new(History::default()),
        };
        let started = Instant::now();
        for i in 0..options.historians {
            let client_id = ClientId(0xA0_0000_0000 + options.seed.wrapping_mul(1000) + i as u64);
            let client = Client::connect(endpoints.clone(), client_id, client_options(1, &options.tls))
                .await
                .expect("historian connects");
            let query = bourse_client::QueryClient::connect(endpoints.clone(), client_options(1, &options.tls))
                .await
                .expect("historian's reads connect")
                .linearizable(true);
            workload.tasks.push(tokio::spawn(history_run(
                (i, client, query),
                (market.history_accounts.clone(), usd),
                options.seed.wrapping_add(i as u64 * 104_729),
                (started, Arc::clone(&workload.history)),
                workload.paused.subscribe(),
                Arc::clone(&stop),
            )));
        }
        for (i, &account) in market.counter_accounts.iter().enumerate() {
            let stats = Arc::new(CounterStats::default());
            let client_id = ClientId(0xC0_0000_0000 + options.seed.wrapping_mul(1000) + i as u64);
            let client = Client::connect(
                endpoints.clone(),
                client_id,
                client_options(options.counter_depth.max(1) * 2, &options.tls),
            )
            .await
            .expect("counter connects");
            let task = tokio::spawn(counter_run(
                client,
                account,
                usd,
                options.clone(),
                workload.paused.subscribe(),
                Arc::clone(&stop),
                Arc::clone(&stats),
            ));
            workload.counters.push(stats);
            workload.tasks.push(task);
        }
        for (i, accounts) in market.trader_accounts.iter().enumerate() {
            let stats = Arc::new(TraderStats::default());
            let client_id = ClientId(0x7_0000_0000 + options.seed.wrapping_mul(1000) + i as u64);
            let client =
                Client::connect(endpoints.clone(), client_id, client_options(32, &options.tls)).await.expect("trader");
            let flow_market = FlowMarket { symbol, tick: 1, lot: 1, px_mid: 10_000, band_ticks: 200 };
            let flow = OrderFlow::new(options.seed.wrapping_add(i as u64 * 7919), flow_market, accounts.clone(), 100);
            let task = tokio::spawn(trader_run(
                client,
                flow,
                options.trader_rate,
                workload.paused.subscribe(),
                Arc::clone(&stop),
                Arc::clone(&stats),
            ));
            workload.traders.push(stats);
            workload.tasks.push(task);
        }
        say!(
            name,
            "workload: {} counters ({} deposits/s each), {} traders ({} commands/s each), seed {}",
            options.counters,
            options.counter_rate,
            options.traders,
            options.trader_rate,
            options.seed
        );
        workload
    }

    /// Deposits acknowledged so far, over every counter.
    pub fn counter_acked(&self) -> u64 {
        self.counters.iter().map(|c| c.acked.load(Ordering::Relaxed)).sum()
    }

    pub fn trader_acked(&self) -> u64 {
        self.traders.iter().map(|c| c.acked.load(Ordering::Relaxed)).sum()
    }

    fn inflight(&self) -> u64 {
        self.history.inflight.load(Ordering::Relaxed)
            + self.counters.iter().map(|c| c.inflight.load(Ordering::Relaxed)).sum::<u64>()
            + self.traders.iter().map(|c| c.inflight.load(Ordering::Relaxed)).sum::<u64>()
    }

    /// Fails at once if a client task ended early (with its error).
    fn check_tasks(&self) -> Result<(), String> {
        for task in &self.tasks {
            if task.is_finished() && !self.stop.load(Ordering::Relaxed) {
                return Err("a workload client ended early (see the error when the workload finishes)".into());
            }
        }
        Ok(())
    }

    /// Waits until the counters' acknowledged deposits rise by `delta` (bounded); returns
    /// how long it took. Fails the test with the cluster's state past `bound`.
    pub async fn wait_progress(&self, harness: &ClusterHarness, what: &str, delta: u64, bound: Duration) -> Duration {
        let started = Instant::now();
        let base = self.counter_acked();
        loop {
            let now = self.counter_acked();
            if now >= base + delta {
                let took = started.elapsed();
                say!(
                    self.name,
                    "progress during {what}: +{} deposits acknowledged in {} ms",
                    now - base,
                    took.as_millis()
                );
                return took;
            }
            if let Err(error) = self.check_tasks() {
                harness.fail(&format!("{what}: {error}")).await;
            }
            if started.elapsed() > bound {
                harness
                    .fail(&format!("no progress during {what}: +{} deposits acknowledged in {bound:?}", now - base))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Progress as a new client sees it through `endpoints` only (say, the majority side
    /// of a partition): a fresh client deposits one unit at a time into the probe account
    /// until `delta` are acknowledged. Returns how long it took; fails past `bound`.
    pub async fn probe_progress(
        &self,
        harness: &ClusterHarness,
        endpoints: Vec<String>,
        what: &str,
        delta: u64,
        bound: Duration,
    ) -> Duration {
        let started = Instant::now();
        let n = self.probes.fetch_add(1, Ordering::Relaxed);
        let client_id = ClientId(0xB0_0000_0000 + self.seed.wrapping_mul(100_000) + n);
        let body =
            CommandBody::Deposit { account: self.market.probe_account, asset: self.market.usd, amount: Amount(1) };
        let run = async {
            let client =
                Client::connect(endpoints, client_id, client_options(1, &self.tls)).await.map_err(|e| e.to_string())?;
            for _ in 0..delta {
                let reply = client.submit(body.clone()).await.map_err(|e| e.to_string())?;
                if !matches!(reply.outcome, Outcome::Ok { .. }) {
                    return Err(format!("probe deposit answered {:?}", reply.outcome));
                }
                self.probe_acked.fetch_add(1, Ordering::Relaxed);
            }
            client.close().await.map_err(|e| e.to_string())
        };
        match tokio::time::timeout(bound, run).await {
            Ok(Ok(())) => {
                let took = started.elapsed();
                say!(
                    self.name,
                    "progress during {what}: a new client's {delta} deposits acknowledged in {} ms",
                    took.as_millis()
                );
                took
            }
            Ok(Err(error)) => harness.fail(&format!("no progress during {what}: probe client: {error}")).await,
            Err(_) => {
                harness
                    .fail(&format!(
                        "no progress during {what}: the probe client's {delta} deposits took over {bound:?}"
                    ))
                    .await
            }
        }
    }

    /// Stops sending new commands and waits until everything sent is answered.
    pub async fn pause(&self, harness: &ClusterHarness, bound: Duration) {
        self.paused.send_replace(true);
        let started = Instant::now();
        while self.inflight() > 0 {
            if started.elapsed() > bound {
                harness
                    .fail(&format!("{} commands still unanswered {bound:?} after pausing the load", self.inflight()))
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Stops every client after its answers (bounded); returns the first error of any.
    pub async fn finish(&mut self, bound: Duration) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        self.paused.send_replace(false);
        let mut first_error = None;
        for task in self.tasks.drain(..) {
            let result = match tokio::time::timeout(bound, task).await {
                Ok(Ok(result)) => result,
                Ok(Err(join)) => Err(format!("a workload task panicked: {join}")),
                Err(_) => Err(format!("a workload client did not finish within {bound:?}")),
            };
            if let Err(error) = result {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            Some(error) => Err(error),
            None => Ok(()),
        }
    }

    /// Per asset: what the test put into the exchange (setup plus counter deposits).
    pub fn expected_supply(&self) -> BTreeMap<u32, i128> {
        let mut supply = self.market.setup_supply.clone();
        *supply.entry(self.market.usd.0).or_default() += i128::from(self.counter_acked())
            + i128::from(self.probe_acked.load(Ordering::Relaxed))
            + i128::from(self.history.deposited.load(Ordering::Relaxed));
        supply
    }
}

fn asset(name: &str, decimals: u8) -> CommandBody {
    CommandBody::CreateAsset { name: name.into(), decimals }
}

/// Waits while the load is paused; false once stopping.
async fn wait_unpaused(paused: &mut watch::Receiver<bool>, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        if !*paused.borrow_and_update() {
            return true;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), paused.changed()).await;
    }
}

/// One historian: one operation at a time, about every 5 ms, on a random one of
/// `accounts`: a deposit of 1–3 USD units (exactly-once, retried across failovers until
/// answered) or a linearizable read of the balance (retried until a node answers; a read
/// that failed changed nothing, so only the answered attempt is recorded, from its own
/// call). Each operation's call and return times go into `history`.
async fn history_run(
    (index, client, mut query): (usize, Client, bourse_client::QueryClient),
    (accounts, usd): (Vec<AccountId>, AssetId),
    seed: u64,
    (started, history): (Instant, Arc<History>),
    mut paused: watch::Receiver<bool>,
    stop: Arc<AtomicBool>,
) -> Result<(), String> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let now = || started.elapsed().as_nanos() as u64;
    while wait_unpaused(&mut paused, &stop).await {
        let account = accounts[rng.gen_range(0..accounts.len())];
        let op = if rng.gen_bool(0.5) {
            let amount = rng.gen_range(1..=3i64);
            history.inflight.fetch_add(1, Ordering::Relaxed);
            let call_ns = now();
            let reply = client
                .submit(CommandBody::Deposit { account, asset: usd, amount: Amount(amount) })
                .await
                .map_err(|e| format!("historian {index} deposit: {e}"))?;
            let return_ns = now();
            if !matches!(reply.outcome, Outcome::Ok { .. }) {
                return Err(format!("historian {index}: deposit answered {:?}", reply.outcome));
            }
            history.deposited.fetch_add(amount as u64, Ordering::Relaxed);
            history.inflight.fetch_sub(1, Ordering::Relaxed);
            HistoryOp { client: index, account, deposit: Some(amount), balance: 0, call_ns, return_ns }
        } else {
            loop {
                let call_ns = now();
                match query.balances(account).await {
                    Ok(reply) => {
                        let return_ns = now();
                        let balance =
                            reply.balances.iter().find(|b| b.asset == usd.0).map_or(0, |b| b.available + b.reserved);
                        break HistoryOp { client: index, account, deposit: None, balance, call_ns, return_ns };
                    }
                    Err(_) if stop.load(Ordering::Relaxed) => return client.close().await.map_err(|e| e.to_string()),
                    Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
                }
            }
        };
        history.ops.lock().expect("history").push(op);
        tokio::time::sleep(Duration::from_millis(rng.gen_range(1..10))).await;
    }
    client.close().await.map_err(|e| format!("historian {index} close: {e}"))
}

/// One counter: deposits of 1 USD unit into its own account, pipelined, at a rate.
async fn counter_run(
    client: Client,
    account: AccountId,
    usd: AssetId,
    options: WorkloadOptions,
    mut paused: watch::Receiver<bool>,
    stop: Arc<AtomicBool>,
    stats: Arc<CounterStats>,
) -> Result<(), String> {
    let body = CommandBody::Deposit { account, asset: usd, amount: Amount(1) };
    let mut pending = VecDeque::new();
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / options.counter_rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let on_answer = |answer| -> Result<(), String> {
        let reply = check_answer(answer)?;
        if !matches!(reply.outcome, Outcome::Ok { .. }) {
            return Err(format!("deposit seq {} answered {:?}", reply.seq, reply.outcome));
        }
        stats.acked.fetch_add(1, Ordering::Relaxed);
        stats.inflight.fetch_sub(1, Ordering::Relaxed);
        if reply.duplicate {
            stats.duplicates.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    };
    loop {
        let go = if *paused.borrow() || stop.load(Ordering::Relaxed) {
            // Answer everything sent before waiting.
            while let Some(receiver) = pending.pop_front() {
                on_answer(receiver.await)?;
            }
            wait_unpaused(&mut paused, &stop).await
        } else {
            true
        };
        if !go {
            break;
        }
        ticker.tick().await;
        let permit = client.reserve().await.map_err(|e| format!("counter reserve: {e}"))?;
        pending.push_back(permit.submit(&body).map_err(|e| format!("counter submit: {e}"))?);
        stats.sent.fetch_add(1, Ordering::Relaxed);
        stats.inflight.fetch_add(1, Ordering::Relaxed);
        // Count what is answered already; wait only when the pipeline is full.
        while let Some(front) = pending.front_mut() {
            match front.try_recv() {
                Ok(answer) => {
                    pending.pop_front();
                    on_answer(Ok(answer))?;
                }
                Err(TryRecvError::Closed) => return Err("the counter's client dropped an answer".into()),
                Err(TryRecvError::Empty) if pending.len() >= options.counter_depth => {
                    let receiver = pending.pop_front().expect("non-empty");
                    on_answer(receiver.await)?;
                }
                Err(TryRecvError::Empty) => break,
            }
        }
    }
    client.close().await.map_err(|e| format!("counter close: {e}"))
}

/// One trader: the load driver's order flow over its own accounts, at a rate.
async fn trader_run(
    client: Client,
    mut flow: OrderFlow,
    rate: f64,
    mut paused: watch::Receiver<bool>,
    stop: Arc<AtomicBool>,
    stats: Arc<TraderStats>,
) -> Result<(), String> {
    let mut events = client.events().expect("new client's events");
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failure = None;
    let mut on_event = |flow: &mut OrderFlow, event: SessionEvent| match event {
        SessionEvent::Reply(reply) => {
            flow.on_reply(&reply);
            stats.acked.fetch_add(1, Ordering::Relaxed);
            stats.inflight.fetch_sub(1, Ordering::Relaxed);
            if matches!(reply.outcome, Outcome::Rejected(_)) {
                stats.rejected.fetch_add(1, Ordering::Relaxed);
            }
        }
        SessionEvent::Failed { seq, error } => {
            flow.on_failed(seq);
            stats.inflight.fetch_sub(1, Ordering::Relaxed);
            failure.get_or_insert(format!("trader command {seq} failed: {error}"));
        }
        SessionEvent::Fill(fill) => flow.on_fill(&fill),
        SessionEvent::Cancel(cancel) => flow.on_cancel(&cancel),
    };
    loop {
        let sending = !*paused.borrow() && !stop.load(Ordering::Relaxed);
        if !sending && stats.inflight.load(Ordering::Relaxed) == 0 {
            if !wait_unpaused(&mut paused, &stop).await {
                break;
            }
            continue;
        }
        tokio::select! {
            biased;
            event = events.recv() => match event {
                Some(event) => on_event(&mut flow, event),
                None => return Err("the trader's session ended".into()),
            },
            _ = ticker.tick(), if sending => {
                let permit = client.reserve().await.map_err(|e| format!("trader reserve: {e}"))?;
                let (body, intent) = flow.next_command();
                let seq = permit.send(&body).map_err(|e| format!("trader send: {e}"))?;
                flow.on_sent(seq, intent);
                stats.sent.fetch_add(1, Ordering::Relaxed);
                stats.inflight.fetch_add(1, Ordering::Relaxed);
            }
            () = tokio::time::sleep(Duration::from_millis(50)), if !sending => {}
        }
    }
    if let Some(failure) = failure {
        return Err(failure);
    }
    client.close().await.map_err(|e| format!("trader close: {e}"))
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

/// One replica's view of every account and asset.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Books {
    log_index: u64,
    /// Account id → (asset, available, reserved).
    balances: Vec<Vec<(u32, i64, i64)>>,
    /// Asset id → (supply, fees collected).
    assets: BTreeMap<u32, (i64, i64)>,
}

async fn read_books(api: SocketAddr, tls: ClientTls) -> Result<Books, String> {
    let channel = Endpoint::from_shared(format!("http://{api}"))
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector(tls.0)
        .await
        .map_err(|e| format!("connect {api}: {e}"))?;
    let mut query = QueryService::new(channel);
    let assets_reply = query.get_assets(proto::GetAssetsRequest {}).await.map_err(|s| s.to_string())?.into_inner();
    let log_index = assets_reply.log_index;
    let assets = assets_reply.assets.iter().map(|a| (a.id, (a.supply, a.fees_collected))).collect();
    let mut balances = Vec::new();
    for account in 0u32.. {
        match query.get_balances(proto::GetBalancesRequest { account }).await {
            Ok(reply) => {
                let reply = reply.into_inner();
                if reply.log_index != log_index {
                    return Err(format!(
                        "{api}: account {account} read at {} but assets at {log_index}",
                        reply.log_index
                    ));
                }
                balances.push(reply.balances.iter().map(|b| (b.asset, b.available, b.reserved)).collect());
            }
            Err(status) if status.code() == tonic::Code::NotFound => break,
            Err(status) => return Err(format!("{api}: GetBalances {account}: {status}")),
        }
    }
    Ok(Books { log_index, balances, assets })
}

/// With the load paused (or finished) and the replicas converged at `index`: reads every
/// account and asset on every slot of `slots` and checks that
/// - every replica reads the same, at `index`;
/// - no available or reserved balance is negative;
/// - per asset, the balances plus the fees collected equal the supply, and the supply
///   equals what the test deposited and credited (setup plus acknowledged deposits);
/// - each counter's USD balance equals the deposits it sent, all of them acknowledged
///   (a duplicate would make it larger, a loss smaller).
///
/// Prints what it checked.
pub async fn check_state(harness: &ClusterHarness, workload: &Workload, slots: &[usize], index: u64) {
    let name = &harness.name;
    let mut first: Option<(usize, Books)> = None;
    for &slot in slots {
        let books = match read_books(harness.slots[slot].api, harness.client_tls("observer:harness")).await {
            Ok(books) => books,
            Err(error) => harness.fail(&format!("reading balances of slot {slot}: {error}")).await,
        };
        if books.log_index != index {
            harness.fail(&format!("slot {slot} reads at index {} after converging at {index}", books.log_index)).await;
        }
        match &first {
            None => first = Some((slot, books)),
            Some((first_slot, first_books)) => {
                if &books != first_books {
                    harness
                        .fail(&format!(
                            "slot {slot} and slot {first_slot} disagree at index {index}:\n{books:?}\n{first_books:?}"
                        ))
                        .await;
                }
            }
        }
    }
    let (_, books) = first.expect("at least one slot");
    say!(
        name,
        "check: {} replicas read identical balances of {} accounts at index {index}",
        slots.len(),
        books.balances.len()
    );
    let mut totals: BTreeMap<u32, i128> = BTreeMap::new();
    for (account, balances) in books.balances.iter().enumerate() {
        for &(asset, available, reserved) in balances {
            if available < 0 || reserved < 0 {
                harness
                    .fail(&format!("account {account} asset {asset}: available {available} reserved {reserved}"))
                    .await;
            }
            *totals.entry(asset).or_default() += i128::from(available) + i128::from(reserved);
        }
    }
    say!(name, "check: no available or reserved balance is negative");
    let expected = workload.expected_supply();
    for (&asset, &(supply, fees)) in &books.assets {
        let held = totals.get(&asset).copied().unwrap_or(0);
        let wanted = expected.get(&asset).copied().unwrap_or(0);
        if held + i128::from(fees) != i128::from(supply) || i128::from(supply) != wanted {
            harness
                .fail(&format!(
                    "asset {asset} not conserved: accounts hold {held}, fees {fees}, supply {supply}, the test put in {wanted}"
                ))
                .await;
        }
        say!(
            name,
            "check: asset {asset} conserved: accounts {held} + fees {fees} = supply {supply} = deposited {wanted}"
        );
    }
    let usd_of = |account: AccountId| -> i128 {
        books.balances[account.0 as usize]
            .iter()
            .filter(|b| b.0 == workload.market.usd.0)
            .map(|b| i128::from(b.1) + i128::from(b.2))
            .sum()
    };
    let probe_acked = workload.probe_acked.load(Ordering::Relaxed);
    if usd_of(workload.market.probe_account) != i128::from(probe_acked) {
        harness
            .fail(&format!(
                "probe account: {probe_acked} deposits acknowledged, balance {}",
                usd_of(workload.market.probe_account)
            ))
            .await;
    }
    for (i, stats) in workload.counters.iter().enumerate() {
        let account = workload.market.counter_accounts[i];
        let sent = stats.sent.load(Ordering::Relaxed);
        let acked = stats.acked.load(Ordering::Relaxed);
        let balance = usd_of(account);
        if acked != sent || balance != i128::from(sent) {
            harness
                .fail(&format!(
                    "counter {i} (account {}): sent {sent} deposits, {acked} acknowledged, balance {balance}",
                    account.0
                ))
                .await;
        }
        say!(
            name,
            "check: counter {i}: {sent} deposits sent, all acknowledged ({} as duplicates of resends), balance {balance}: exactly once",
            stats.duplicates.load(Ordering::Relaxed)
        );
    }
}

//! `bourse node` (a member of a replicated cluster) and `bourse cluster` (start a local
//! cluster, show its state, change its membership).

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Stdio};
use std::time::{Duration, Instant};

use bourse_protocol::proto;
use bourse_protocol::proto::cluster_client::ClusterClient;
use clap::{Args, Subcommand};
use serde_json::json;

use crate::serve::ServeArgs;

/// Flags of `bourse node`: those of `bourse serve`, and the member's place in a cluster.
#[derive(Args, Debug)]
pub struct NodeArgs {
    #[command(flatten)]
    serve: ServeArgs,
    /// This member's id (unique, never reused after removal).
    #[arg(long)]
    id: u64,
    /// Where the Raft transport listens.
    #[arg(long)]
    raft_listen: SocketAddr,
    /// The Raft address other members use (default: --raft-listen).
    #[arg(long)]
    advertise_raft: Option<String>,
    /// The client address other members give clients for this node (default: --listen).
    #[arg(long)]
    advertise_api: Option<String>,
    /// Source address for connections to other members.
    #[arg(long)]
    bind_ip: Option<IpAddr>,
    /// Initialize a new cluster with these members (id=api/raft, comma separated) when
    /// this node is the first of them and has an empty log.
    #[arg(long, value_delimiter = ',')]
    bootstrap: Vec<String>,
    /// Heartbeat 5 ms, election timeout 10–35 ms (a dead leader is replaced after about
    /// 45–70 ms) instead of 20 ms and 40–100 ms (140–200 ms).
    #[arg(long)]
    low_latency: bool,
    #[arg(long)]
    heartbeat_ms: Option<u64>,
    #[arg(long)]
    election_min_ms: Option<u64>,
    #[arg(long)]
    election_max_ms: Option<u64>,
    /// Take a state machine snapshot after this many log entries.
    #[arg(long)]
    snapshot_every_entries: Option<u64>,
    /// Stop cleanly, as on SIGTERM, when standard input reaches its end: the process that
    /// started this node holds the pipe's other end, and the kernel closes it when that
    /// process ends, however it ends (a SIGKILL included). `bourse demo` passes it;
    /// `bourse cluster up` does not (its nodes outlive it). With stdin /dev/null it stops
    /// at once: the flag is for a parent's pipe.
    #[arg(long)]
    exit_with_parent: bool,
    /// DIR, which holds --data, is a temporary directory shared with the process that
    /// started this node (which made DIR/holders.lock): the last of its holders to end
    /// removes it, data and all (see `scratch.rs`). `bourse demo` passes it for the data
    /// it keeps in /dev/shm.
    #[arg(long, value_name = "DIR")]
    temporary_dir: Option<PathBuf>,
}

/// `bourse node`: with `--pki DIR` (a global flag) both its ports are mutual TLS with the
/// certificate issued there to `node ID`; without, both are plaintext, refused on any
/// address but loopback.
pub fn node(args: NodeArgs, target: &crate::cli::Target) -> Result<(), String> {
    let mut config = args.serve.config()?;
    // Dropped last, after the runtime: the node's files are closed before the last
    // holder removes the directory.
    let mut temporary = match &args.temporary_dir {
        Some(dir) if !config.data.starts_with(dir) => {
            return Err(format!("--temporary-dir {}: --data must lie inside it", dir.display()));
        }
        Some(dir) => Some(crate::scratch::Holder::join(dir)?),
        None => None,
    };
    let mut raft = config.raft.clone().unwrap_or_default();
    if args.low_latency {
        raft = raft.low_latency();
    }
    raft.id = args.id;
    raft.listen = args.raft_listen;
    raft.advertise = args.advertise_raft.or(raft.advertise);
    raft.advertise_api = args.advertise_api.or(raft.advertise_api);
    raft.bind_ip = args.bind_ip.or(raft.bind_ip);
    raft.pki = target.pki.clone().or(raft.pki);
    if !args.bootstrap.is_empty() {
        raft.bootstrap = args.bootstrap;
    }
    for (field, value) in [
        (&mut raft.heartbeat_ms, args.heartbeat_ms),
        (&mut raft.election_min_ms, args.election_min_ms),
        (&mut raft.election_max_ms, args.election_max_ms),
        (&mut raft.snapshot_every_entries, args.snapshot_every_entries),
    ] {
        if let Some(value) = value {
            *field = value;
        }
    }
    config.raft = Some(raft);
    config.validate().map_err(|e| e.to_string())?;
    let parent_gone = if args.exit_with_parent { Some(watch_parent()?) } else { None };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let ended = runtime.block_on(run_node(config, parent_gone));
    if let (Some(holder), Ok(Stopped::ParentEnded)) = (temporary.as_mut(), &ended) {
        // The parent was killed, perhaps outright: its hold on the directory may outlast
        // the pipe whose end stopped this node by a moment (`scratch`).
        holder.linger(Duration::from_secs(5));
    }
    drop(runtime);
    drop(temporary);
    ended.map(|_| ())
}

/// Why a node stopped.
enum Stopped {
    Signal,
    ParentEnded,
}

/// Runs the node until SIGINT, SIGTERM, SIGHUP or, with `parent_gone`, its parent's end;
/// then shuts it down cleanly.
async fn run_node(
    config: bourse_node::NodeConfig,
    parent_gone: Option<tokio::sync::oneshot::Receiver<()>>,
) -> Result<Stopped, String> {
    // With the cluster's CA, SIGHUP re-reads the certificates and the revocation list
    // (a daemon's reload); without it, it stops the node like SIGTERM.
    let reloads = config.pki_dir().is_some();
    let node = bourse_node::Node::start(config).await.map_err(|e| e.to_string())?;
    let mut signals = crate::history::Signals::install_hangup(reloads)?;
    println!("bourse node listening on {}", node.addr);
    if let Some(metrics) = node.metrics_addr {
        println!("metrics on http://{metrics}/metrics");
    }
    let parent = async {
        match parent_gone {
            Some(gone) => {
                let _ = gone.await;
            }
            None => std::future::pending().await,
        }
    };
    let mut parent = std::pin::pin!(parent);
    let stopped = loop {
        tokio::select! {
            name = signals.recv() => {
                if name == "SIGHUP" && reloads {
                    match node.reload_tls() {
                        Ok(_) => tracing::info!("SIGHUP: the certificates, the CRL and the client key file reloaded"),
                        Err(error) => tracing::error!(%error, "SIGHUP: reload failed; the previous ones stay"),
                    }
                    continue;
                }
                tracing::info!("{name}: shutting down");
                break Stopped::Signal;
            }
            () = &mut parent => {
                tracing::info!("stdin closed (the parent process ended): shutting down");
                break Stopped::ParentEnded;
            }
        }
    };
    node.shutdown().await.map_err(|e| e.to_string())?;
    Ok(stopped)
}

/// A thread that reads stdin to its end (the parent's pipe closing) and then fires. A
/// plain thread, not tokio's stdin: a blocking read would hold up the runtime's shutdown.
fn watch_parent() -> Result<tokio::sync::oneshot::Receiver<()>, String> {
    use std::io::Read;
    let (gone, parent_gone) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("parent-watch".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buffer = [0u8; 64];
            loop {
                match stdin.read(&mut buffer) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let _ = gone.send(());
        })
        .map_err(|e| format!("the parent-watch thread: {e}"))?;
    Ok(parent_gone)
}

#[derive(Subcommand, Debug)]
pub enum ClusterCommand {
    /// Start a local cluster of separate `bourse node` processes, each with its own data
    /// directory under DIR, wait for a leader, and print the addresses.
    Up {
        #[arg(long = "nodes", id = "node_count", default_value_t = 3)]
        count: u64,
        #[arg(long)]
        data: PathBuf,
        /// The partitioned exchange: G Raft groups of --nodes `bourse group` members
        /// each (member ids 10g+1…; client ports base+id, Raft ports base+1000+id), on
        /// the market of a genesis file written to DIR/genesis.json; trade on it with
        /// `bourse group-load --data DIR`.
        #[arg(long)]
        groups: Option<u32>,
        /// With --groups G: a meta group of its own as group 0 (the catalog, the books'
        /// placement, the moves and the cuts; no account, no book) beside G data groups
        /// 1..=G.
        #[arg(long, requires = "groups")]
        meta_group: bool,
        /// Client ports are base+id, Raft ports base+100+id.
        #[arg(long, default_value_t = 7400)]
        base_port: u16,
        #[arg(long)]
        low_latency: bool,
        /// Run the Raft transport in plaintext, without the mutual TLS `cluster up` sets
        /// up by default (a CA in DATA/pki, a certificate per node): for loopback
        /// benchmarks only.
        #[arg(long)]
        plaintext: bool,
        /// Extra flags for every node (e.g. --snapshot-every-entries=1000), or with
        /// --groups for every `bourse group` member.
        #[arg(long, allow_hyphen_values = true, value_delimiter = ' ')]
        node_args: Vec<String>,
    },
    /// Start again, on its data, a node `cluster up` started in DIR (after it was
    /// killed or stopped).
    Restart {
        #[arg(long)]
        data: PathBuf,
        #[arg(long)]
        id: u64,
    },
    /// Send SIGHUP to the nodes `cluster up` started in DIR: each re-reads its
    /// certificates, the CRL and the API key file (DIR/keys.toml), e.g. after
    /// `bourse gateway key-add --keys DIR/keys.toml` or `bourse pki revoke`.
    Reload {
        #[arg(long)]
        data: PathBuf,
    },
    /// Stop the nodes `cluster up` started in DIR (SIGTERM, then wait).
    Down {
        #[arg(long)]
        data: PathBuf,
    },
    /// Each member's id, process, addresses, role, term, applied index and state hash.
    Status {
        /// Read the members from DIR/cluster.json instead of --node.
        #[arg(long)]
        data: Option<PathBuf>,
    },
    /// Add a running node (started without --bootstrap) to the cluster.
    Add {
        #[arg(long)]
        id: u64,
        #[arg(long)]
        api: String,
        #[arg(long)]
        raft: String,
    },
    /// Remove a node from the cluster.
    Remove {
        #[arg(long)]
        id: u64,
    },
    /// Hand leadership to another voter.
    TransferLeader {
        #[arg(long)]
        to: u64,
    },
}

/// A node of a local cluster on this machine.
pub(crate) struct LocalNode {
    pub id: u64,
    pub api: String,
    pub raft: String,
    pub dir: PathBuf,
}

/// Starts `bourse node` for `node` in its own process group (a terminal's Ctrl-C does
/// not reach it), with stdout and stderr appended to `DIR/node.log`. It outlives this
/// process (`cluster up`).
pub(crate) fn spawn_node(
    exe: &Path,
    node: &LocalNode,
    bootstrap: &str,
    extra: &[String],
) -> Result<std::process::Child, String> {
    spawn_node_with(exe, node, bootstrap, extra, false)
}

/// [`spawn_node`], tethered to this process (the demo's nodes): the node's stdin is a
/// pipe whose write end only this process holds (the returned `Child`'s stdin; std opens
/// it close-on-exec, so no other child inherits it) and the node runs with
/// `--exit-with-parent`: it stops when this process ends, however it ends, or when the
/// `Child` is dropped.
pub(crate) fn spawn_tethered_node(
    exe: &Path,
    node: &LocalNode,
    bootstrap: &str,
    extra: &[String],
) -> Result<std::process::Child, String> {
    spawn_node_with(exe, node, bootstrap, extra, true)
}

fn spawn_node_with(
    exe: &Path,
    node: &LocalNode,
    bootstrap: &str,
    extra: &[String],
    tethered: bool,
) -> Result<std::process::Child, String> {
    let mut command = detached(exe, &node.dir)?;
    command
        .args(["node", "--id", &node.id.to_string(), "--data"])
        .arg(&node.dir)
        .args(["--listen", &node.api, "--raft-listen", &node.raft, "--bootstrap", bootstrap])
        .args(extra);
    if tethered {
        command.stdin(Stdio::piped()).arg("--exit-with-parent");
    }
    command.spawn().map_err(|e| format!("starting node {}: {e}", node.id))
}

/// `exe` to be run in its own process group (a terminal's Ctrl-C does not reach it),
/// stdin from /dev/null, stdout and stderr appended to `dir/node.log` (`dir` made if
/// missing): a cluster member's process, arguments to be added.
pub(crate) fn detached(exe: &Path, dir: &Path) -> Result<Process, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let log_path = dir.join("node.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("{}: {e}", log_path.display()))?;
    let mut command = Process::new(exe);
    command.stdin(Stdio::null()).stdout(log.try_clone().map_err(|e| e.to_string())?).stderr(log);
    std::os::unix::process::CommandExt::process_group(&mut command, 0);
    Ok(command)
}

/// Opens the CA in `dir` (creating it the first time) and issues each of `ids` a
/// member's certificate valid for `hosts`, its Raft transport's mutual TLS; returns the
/// directory, absolute, for `bourse node --pki`.
pub(crate) fn member_certificates(
    dir: &Path,
    ids: impl IntoIterator<Item = u64>,
    hosts: &[String],
) -> Result<PathBuf, String> {
    let ca = bourse_pki::Ca::open_or_init(dir).map_err(|e| format!("the cluster's CA in {}: {e}", dir.display()))?;
    let issued = dir.join(bourse_pki::ISSUED_DIR);
    for id in ids {
        let identity = bourse_pki::Identity::new(bourse_pki::Role::Node, id.to_string()).map_err(|e| e.to_string())?;
        ca.issue(&identity, hosts, &issued).map_err(|e| format!("issuing {identity}'s certificate: {e}"))?;
    }
    std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))
}

/// The hosts a gateway's certificate is issued for where this machine's commands make
/// it: its client listeners (HTTPS, FIX and XML over TLS) present it on loopback.
const GATEWAY_HOSTS: [&str; 2] = ["127.0.0.1", "localhost"];

/// Issues each of `identities` (`role:id`) a client certificate from the CA in `dir`
/// (made by [`member_certificates`]), unless it has one already, and makes the first
/// this process's credentials. A gateway's is also valid for [`GATEWAY_HOSTS`] (one
/// issued before without hosts is issued again).
pub(crate) fn client_certificates(dir: &Path, identities: &[&str]) -> Result<(), String> {
    let ca = bourse_pki::Ca::open(dir).map_err(|e| format!("the cluster's CA in {}: {e}", dir.display()))?;
    let issued = dir.join(bourse_pki::ISSUED_DIR);
    for (n, text) in identities.iter().enumerate() {
        let identity = crate::cli::parse_identity(text)?;
        let cert = bourse_pki::TlsFiles::issued(dir, &identity).cert;
        let hosts: Vec<String> = match identity.role {
            bourse_pki::Role::Gateway => GATEWAY_HOSTS.map(String::from).to_vec(),
            _ => Vec::new(),
        };
        let hostless = || bourse_pki::certificate_hosts(&cert).map(|named| named.is_empty()).unwrap_or(true);
        if !cert.exists() || (!hosts.is_empty() && hostless()) {
            ca.issue(&identity, &hosts, &issued).map_err(|e| format!("issuing {identity}'s certificate: {e}"))?;
        }
        if n == 0 {
            crate::cli::set_credentials(dir, &identity)?;
        }
    }
    Ok(())
}

/// The file `cluster up` writes: who it started.
fn cluster_file(data: &Path) -> PathBuf {
    data.join("cluster.json")
}

pub fn run(target: crate::cli::Target, command: ClusterCommand) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        match command {
            ClusterCommand::Up {
                count,
                data,
                groups: Some(groups),
                meta_group,
                base_port,
                low_latency,
                plaintext,
                node_args,
            } => {
                let options = UpOptions { low_latency, plaintext, node_args };
                let shape = crate::groups::Shape { data_groups: groups, meta_group };
                crate::groups::up(shape, count, &data, base_port, &options, target.json).await
            }
            ClusterCommand::Up { count, data, groups: None, base_port, low_latency, plaintext, node_args, .. } => {
                let options = UpOptions { low_latency, plaintext, node_args };
                up(count, &data, base_port, &options, target.json).await
            }
            ClusterCommand::Down { data } => down(&data),
            ClusterCommand::Reload { data } => reload(&data),
            ClusterCommand::Restart { data, id } if crate::groups::is_groups(&data) => {
                crate::groups::restart(&data, id)
            }
            ClusterCommand::Restart { data, id } => restart(&data, id),
            ClusterCommand::Status { data: Some(data) } if crate::groups::is_groups(&data) => {
                crate::groups::status(&data, target.json).await
            }
            ClusterCommand::Status { data } => {
                let addresses = match data {
                    Some(data) => {
                        // The CA `cluster up` made, unless --pki named another.
                        let pki = data.join("pki");
                        if crate::cli::credentials().is_none() && pki.join(bourse_pki::CA_CERT_FILE).exists() {
                            let identity = target.identity_or("operator:admin")?;
                            crate::cli::set_credentials(&pki, &identity)?;
                        }
                        members_of(&data)?.into_iter().map(|m| m.1).collect()
                    }
                    None => target.nodes.clone(),
                };
                status(&addresses, target.json).await
            }
            ClusterCommand::Add { id, api, raft } => {
                let request = proto::AddNodeRequest { id, api, raft };
                let reply = on_leader(&target.nodes, |mut c| {
                    let r = request.clone();
                    async move { c.add_node(r).await }
                })
                .await?;
                print_membership(reply, target.json)
            }
            ClusterCommand::Remove { id } => {
                let reply =
                    on_leader(
                        &target.nodes,
                        |mut c| async move { c.remove_node(proto::RemoveNodeRequest { id }).await },
                    )
                    .await?;
                print_membership(reply, target.json)
            }
            ClusterCommand::TransferLeader { to } => {
                let reply = on_leader(&target.nodes, |mut c| async move {
                    c.transfer_leader(proto::TransferLeaderRequest { to }).await
                })
                .await?;
                print_membership(reply, target.json)
            }
        }
    })
}

/// (id, api address, pid) of each node `cluster up` started in `data`.
fn members_of(data: &Path) -> Result<Vec<(u64, String, u32)>, String> {
    let path = cluster_file(data);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let nodes = value["nodes"].as_array().ok_or_else(|| format!("{}: no nodes", path.display()))?;
    Ok(nodes
        .iter()
        .map(|n| {
            (
                n["id"].as_u64().unwrap_or(0),
                n["api"].as_str().unwrap_or_default().to_string(),
                n["pid"].as_u64().unwrap_or(0) as u32,
            )
        })
        .collect())
}

/// How `cluster up` runs its nodes.
pub(crate) struct UpOptions {
    pub low_latency: bool,
    pub plaintext: bool,
    pub node_args: Vec<String>,
}

async fn up(nodes: u64, data: &Path, base_port: u16, options: &UpOptions, as_json: bool) -> Result<(), String> {
    if !(1..=9).contains(&nodes) {
        return Err("--nodes must be between 1 and 9".into());
    }
    if cluster_file(data).exists() {
        return Err(format!(
            "{} exists: a cluster was started there (stop it with `bourse cluster down --data {}`, \
             or remove the directory for a new one)",
            cluster_file(data).display(),
            data.display()
        ));
    }
    std::fs::create_dir_all(data).map_err(|e| format!("{}: {e}", data.display()))?;
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let member = |id: u64| {
        (format!("127.0.0.1:{}", base_port as u64 + id), format!("127.0.0.1:{}", base_port as u64 + 100 + id))
    };
    let bootstrap: Vec<String> = (1..=nodes)
        .map(|id| {
            let (api, raft) = member(id);
            format!("{id}={api}/{raft}")
        })
        .collect();
    let mut started = Vec::new();
    let mut extra: Vec<String> = options.node_args.iter().filter(|a| !a.is_empty()).cloned().collect();
    if options.low_latency {
        extra.push("--low-latency".into());
    }
    if !options.plaintext {
        // Mutual TLS between the members, from a CA of the cluster's own.
        let pki = member_certificates(&data.join("pki"), 1..=nodes, &["127.0.0.1".to_string()])?;
        // An operator for the CLI (and this command's own calls), an observer for a
        // history sink, and gateways 1 to 3.
        client_certificates(
            &pki,
            &["operator:admin", "observer:history", "gateway:1", "gateway:2", "gateway:3", "gateway:load"],
        )?;
        extra.extend(["--pki".to_string(), pki.display().to_string()]);
        // The API key file of the gateways (`bourse gateway key-add --keys DATA/keys.toml`):
        // the nodes check every session a gateway claims for a key against it.
        if !extra.iter().any(|a| a.starts_with("--client-keys")) {
            extra.extend(["--client-keys".to_string(), data.join("keys.toml").display().to_string()]);
        }
        // Gateway 1 may relay its admin keys' commands (day trading, XML, REST admin).
        if !extra.iter().any(|a| a.starts_with("--admin-gateways")) {
            extra.push("--admin-gateways=1".to_string());
        }
    }
    for id in 1..=nodes {
        let (api, raft) = member(id);
        let node = LocalNode { id, api, raft, dir: data.join(format!("node{id}")) };
        let child = spawn_node(&exe, &node, &bootstrap.join(","), &extra)?;
        started.push(json!({ "id": id, "pid": child.id(), "api": node.api, "raft": node.raft, "data": node.dir }));
    }
    let record = json!({ "nodes": started, "bootstrap": bootstrap.join(","), "node_args": extra });
    let text = serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?;
    std::fs::write(cluster_file(data), text).map_err(|e| e.to_string())?;
    let addresses: Vec<String> = (1..=nodes).map(|id| member(id).0).collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let leader = loop {
        if let Some(leader) = find_leader(&addresses).await {
            break leader;
        }
        if Instant::now() > deadline {
            return Err(format!("no leader after 30 s; see {}/node*/node.log", data.display()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    if as_json {
        println!("{}", json!({ "nodes": started, "leader": leader.id, "addresses": addresses.join(",") }));
    } else {
        for node in &started {
            let field = |k: &str| node[k].as_str().map_or_else(|| node[k].to_string(), str::to_string);
            println!("node {} pid {} api {} raft {}", field("id"), field("pid"), field("api"), field("raft"));
        }
        println!("leader: node {} at {}", leader.id, leader.api);
        println!("addresses: {}", addresses.join(","));
        if !options.plaintext {
            let pki = data.join("pki");
            println!(
                "mutual TLS: certificates in {} (operator:admin, observer:history, gateway:1-3, gateway:load); e.g. \
                 bourse --pki {} --node {} cluster status",
                pki.display(),
                pki.display(),
                addresses.join(",")
            );
            println!(
                "API keys: bourse gateway key-add --keys {keys} …, then bourse cluster reload --data {data} \
                 (the nodes check gateways' sessions against that file); gateways run with --keys {keys}",
                keys = data.join("keys.toml").display(),
                data = data.display()
            );
        }
        println!("stop with: bourse cluster down --data {}", data.display());
    }
    Ok(())
}

fn restart(data: &Path, id: u64) -> Result<(), String> {
    let path = cluster_file(data);
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut record: serde_json::Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let bootstrap = record["bootstrap"].as_str().unwrap_or_default().to_string();
    let extra: Vec<String> =
        record["node_args"].as_array().into_iter().flatten().filter_map(|a| a.as_str().map(str::to_string)).collect();
    let nodes = record["nodes"].as_array_mut().ok_or_else(|| format!("{}: no nodes", path.display()))?;
    let entry = nodes.iter_mut().find(|n| n["id"].as_u64() == Some(id)).ok_or_else(|| format!("no node {id}"))?;
    let pid = entry["pid"].as_u64().unwrap_or(0) as u32;
    if pid != 0 && Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(pid) {
        return Err(format!("node {id} (pid {pid}) is still running"));
    }
    let node = LocalNode {
        id,
        api: entry["api"].as_str().unwrap_or_default().to_string(),
        raft: entry["raft"].as_str().unwrap_or_default().to_string(),
        dir: PathBuf::from(entry["data"].as_str().unwrap_or_default()),
    };
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let child = spawn_node(&exe, &node, &bootstrap, &extra)?;
    entry["pid"] = json!(child.id());
    println!("node {id} started again: pid {} api {}", child.id(), node.api);
    std::fs::write(&path, serde_json::to_string_pretty(&record).map_err(|e| e.to_string())?).map_err(|e| e.to_string())
}

fn reload(data: &Path) -> Result<(), String> {
    let members = members_of(data)?;
    let mut signalled = 0;
    for (id, _, pid) in &members {
        let sent = Process::new("kill").arg("-HUP").arg(pid.to_string()).stderr(Stdio::null()).status();
        if sent.is_ok_and(|s| s.success()) {
            signalled += 1;
        } else {
            eprintln!("node {id} (pid {pid}) is not running");
        }
    }
    println!(
        "sent SIGHUP to {signalled} of {} nodes: they re-read their certificates, CRL and key file",
        members.len()
    );
    if signalled < members.len() {
        return Err("some nodes are not running".into());
    }
    Ok(())
}

fn down(data: &Path) -> Result<(), String> {
    let members = members_of(data)?;
    for (id, _, pid) in &members {
        let sent = Process::new("kill").arg("-TERM").arg(pid.to_string()).stderr(Stdio::null()).status();
        if !sent.is_ok_and(|s| s.success()) {
            eprintln!("node {id} (pid {pid}) was not running");
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    for (id, _, pid) in &members {
        while Path::new(&format!("/proc/{pid}")).exists() && !is_zombie(*pid) {
            if Instant::now() > deadline {
                return Err(format!("node {id} (pid {pid}) still runs 15 s after SIGTERM"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    std::fs::remove_file(cluster_file(data)).map_err(|e| e.to_string())?;
    println!("stopped {} nodes", members.len());
    Ok(())
}

pub(crate) fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| s.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

pub(crate) async fn connect(address: &str) -> Result<ClusterClient<tonic::transport::Channel>, String> {
    let url = if address.contains("://") { address.to_string() } else { format!("http://{address}") };
    let endpoint = tonic::transport::Endpoint::from_shared(url.clone())
        .map_err(|e| format!("{address}: {e}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10));
    let tls = crate::cli::credentials();
    let channel = bourse_pki::grpc::connect(endpoint, tls.as_ref().map(|tls| &tls.0))
        .await
        .map_err(|e| format!("{address}: {e}"))?;
    Ok(ClusterClient::new(channel))
}

async fn find_leader(addresses: &[String]) -> Option<proto::ClusterStatus> {
    for address in addresses {
        if let Ok(mut client) = connect(address).await {
            if let Ok(status) = client.status(proto::ClusterStatusRequest {}).await {
                let status = status.into_inner();
                if status.role == "leader" {
                    return Some(status);
                }
            }
        }
    }
    None
}

/// Runs a membership call on the leader: tries each address, following the
/// `bourse-leader` hint of a member that is not the leader.
async fn on_leader<F, Fut>(addresses: &[String], call: F) -> Result<proto::MembershipReply, String>
where
    F: Fn(ClusterClient<tonic::transport::Channel>) -> Fut,
    Fut: std::future::Future<Output = Result<tonic::Response<proto::MembershipReply>, tonic::Status>>,
{
    let mut queue: Vec<String> = addresses.to_vec();
    let mut last = String::from("no address given");
    let mut tries = 0;
    while let Some(address) = queue.first().cloned() {
        queue.remove(0);
        tries += 1;
        if tries > 10 {
            break;
        }
        let client = match connect(&address).await {
            Ok(client) => client,
            Err(error) => {
                last = error;
                continue;
            }
        };
        match call(client).await {
            Ok(reply) => return Ok(reply.into_inner()),
            Err(status) => {
                last = format!("{address}: {}", status.message());
                if status.code() != tonic::Code::Unavailable {
                    return Err(last);
                }
                if let Some(leader) = status.metadata().get("bourse-leader").and_then(|v| v.to_str().ok()) {
                    queue.insert(0, leader.to_string());
                }
            }
        }
    }
    Err(last)
}

fn status_json(status: &proto::ClusterStatus) -> serde_json::Value {
    json!({
        "id": status.id,
        "pid": status.pid,
        "address": status.api,
        "raft": status.raft,
        "role": status.role,
        "term": status.term,
        "leader": status.leader_id,
        "last_log_index": status.last_log_index,
        "committed_index": status.committed_index,
        "applied_index": status.applied_index,
        "state_hash": status.state_hash,
        "snapshot_index": status.snapshot_index,
        "members": status.members.iter().map(|m| json!({"id": m.id, "api": m.api, "raft": m.raft, "voter": m.voter})).collect::<Vec<_>>(),
    })
}

async fn status(addresses: &[String], as_json: bool) -> Result<(), String> {
    let mut rows = Vec::new();
    for address in addresses {
        let answer = match connect(address).await {
            Ok(mut client) => client.status(proto::ClusterStatusRequest {}).await.map_err(|s| s.message().to_string()),
            Err(error) => Err(error),
        };
        rows.push((address.clone(), answer.map(|r| r.into_inner())));
    }
    if as_json {
        let nodes: Vec<serde_json::Value> = rows
            .iter()
            .map(|(address, answer)| match answer {
                Ok(status) => status_json(status),
                Err(error) => json!({ "address": address, "error": error }),
            })
            .collect();
        println!("{}", json!({ "nodes": nodes }));
        return Ok(());
    }
    println!(
        "{:>3} {:>8} {:<21} {:<10} {:>5} {:>10} {:>10}  state hash",
        "id", "pid", "address", "role", "term", "committed", "applied"
    );
    for (address, answer) in rows {
        match answer {
            Ok(s) => println!(
                "{:>3} {:>8} {:<21} {:<10} {:>5} {:>10} {:>10}  {}",
                s.id, s.pid, s.api, s.role, s.term, s.committed_index, s.applied_index, s.state_hash
            ),
            Err(error) => println!("  - {:>8} {:<21} unreachable: {error}", "-", address),
        }
    }
    Ok(())
}

fn print_membership(reply: proto::MembershipReply, as_json: bool) -> Result<(), String> {
    let status = reply.status.unwrap_or_default();
    if as_json {
        println!("{}", status_json(&status));
    } else {
        println!("done; leader is node {} at {}; members:", status.leader_id, status.leader_api);
        for m in &status.members {
            println!("  node {} api {} raft {} {}", m.id, m.api, m.raft, if m.voter { "voter" } else { "learner" });
        }
    }
    Ok(())
}

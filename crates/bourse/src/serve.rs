//! `bourse serve` and `bourse replay`: run a durable node; rebuild state from a journal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use bourse_client::ApiKey;
use bourse_daytrading::DayTradingServer;
use bourse_engine::hex;
use bourse_gateway::{Gateway, GatewayConfig, KeyStore, LocalNode};
use bourse_history::SinkConfig;
use bourse_node::{Node, NodeConfig, NodeError};
use clap::Args;

/// Flags of `bourse serve`; each overrides the TOML file given with `--config`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// A TOML file with any of the node's settings: top-level keys named as these flags
    /// (with `_`), and `[raft]` and `[day_trading]` tables (`NodeConfig` in crates/node).
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
    /// Adapt the hold d_h and the window d_s to the observed delays, through the log
    /// (`[fairness] adaptive`; bounds from the `[fairness]` table of --config, or its
    /// defaults: hold 0.5–100 ms, window 0.1–10 ms).
    #[arg(long)]
    fairness_adaptive: bool,
    /// With the PKI: the gateways (ids, comma separated) whose sessions and links may
    /// carry administrative commands (those hosting admin keys, a day-trading service or
    /// an XML front end); any other gateway's are refused before the log.
    #[arg(long, value_delimiter = ',', value_name = "ID,…")]
    admin_gateways: Option<Vec<u32>>,
    /// With the PKI: the gateways' API key file (`bourse gateway key-add`). A gateway
    /// may then carry a client of a key only with the key to prove it, so no gateway
    /// can take over a session of a key it was never shown. Re-read on SIGHUP.
    #[arg(long, value_name = "FILE")]
    client_keys: Option<PathBuf>,
    /// Tests only: stamp log index i at T0_MS + i × STEP_MS instead of the wall clock
    /// (deterministic day-trading golden runs), e.g. 1732270000000,1000.
    #[arg(long, value_name = "T0_MS,STEP_MS")]
    virtual_clock: Option<bourse_node::VirtualClock>,
    /// Day trading: a cached quote serves commands for this many ms after it arrived
    /// (`day_trading.quote_ttl_ms`, 60,000). The engine's rule: the day-trading service
    /// reads it from the node.
    #[arg(long)]
    dt_quote_ttl_ms: Option<u32>,
    /// Day trading: a pending BUY or SELL can be committed or cancelled for this many ms
    /// (`day_trading.pending_ttl_ms`, 60,000).
    #[arg(long)]
    dt_pending_ttl_ms: Option<u32>,
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
        if self.fairness_adaptive {
            config.fairness.adaptive = true;
        }
        if let Some(ids) = &self.admin_gateways {
            config.admin_gateways = ids.clone();
        }
        if self.client_keys.is_some() {
            config.client_keys.clone_from(&self.client_keys);
        }
        if self.virtual_clock.is_some() {
            config.virtual_clock = self.virtual_clock;
        }
        if let Some(ms) = self.dt_quote_ttl_ms {
            config.engine.day_trading.quote_ttl_ms = ms;
        }
        if let Some(ms) = self.dt_pending_ttl_ms {
            config.engine.day_trading.pending_ttl_ms = ms;
        }
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }
}

/// How the in-process history sink shares the CPU with the node.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistoryPriority {
    Idle,
    Normal,
}

/// `bourse serve`: a node's flags, where its history goes, and the front ends it may run
/// in its own process.
#[derive(Args, Debug)]
pub struct ServeCmd {
    #[command(flatten)]
    node: ServeArgs,
    /// Serve gRPC in plaintext, without the mutual TLS `serve` sets up by default (a CA
    /// in DATA/pki, unless --pki names one): for loopback benchmarks and tests only (a
    /// non-loopback --listen is refused).
    #[arg(long)]
    plaintext: bool,
    /// The history store this node's sink writes: a SQLite file (`sqlite:PATH` or a
    /// path), `postgres://…`, or `none`. Default: `DATA/history.sqlite`.
    #[arg(long)]
    history: Option<String>,
    /// The history sink's share of the machine: `idle` (SCHED_IDLE, and while the log
    /// grows faster than 20,000 entries a second it rests 49 parts in 50: it lags while
    /// trading is busy and catches up when load falls) or `normal` (it competes with the
    /// node for CPU, keeping the history current at the cost of throughput).
    #[arg(long, value_enum, default_value_t = HistoryPriority::Idle)]
    history_priority: HistoryPriority,
    /// Also run a gateway in this process, serving clients' gRPC here: the whole
    /// exchange in one process. Its link to this node and its market data feed are
    /// handed over in memory instead of through a socket.
    #[arg(long)]
    gateway: Option<SocketAddr>,
    /// With --gateway: the API key file (see `bourse gateway key-add`).
    #[arg(long, requires = "gateway")]
    keys: Option<PathBuf>,
    /// With --gateway: accept sessions without a key, each acting for every account
    /// (loopback tests only).
    #[arg(long, requires = "gateway", conflicts_with = "keys")]
    open: bool,
    /// With --gateway: d_h, hold market data until t_m plus this many µs.
    #[arg(long, requires = "gateway", default_value_t = 3_000)]
    hold_us: u64,
    /// With --gateway --day-trading: the service's flags as for `bourse gateway run`;
    /// DUMPLOG reads this node's history store unless --dt-history says otherwise. Its
    /// quote validity is the node's (--dt-quote-ttl-ms above).
    #[command(flatten)]
    day_trading: crate::daytrading::DayTradingArgs,
    /// With --gateway: its client port's TLS (the gateway's certificate from the node's
    /// CA, issued for 127.0.0.1 and localhost, unless --tls-cert), and the plaintext rule.
    #[command(flatten)]
    edge: crate::edge::EdgeArgs,
}

pub fn serve(args: ServeCmd, target: &crate::cli::Target) -> Result<(), String> {
    let mut config = args.node.config()?;
    if args.plaintext && target.pki.is_some() {
        return Err("--plaintext and --pki: choose one".into());
    }
    config.pki = target.pki.clone().or(config.pki);
    if config.pki.is_none() && !args.plaintext {
        // Secure by default: a CA of the node's own, its certificate for the listen
        // address, and the CLI's, the load driver's and the gateway's beside it.
        let mut hosts = vec!["127.0.0.1".to_string()];
        if !config.listen.ip().is_unspecified() && !config.listen.ip().is_loopback() {
            hosts.push(config.listen.ip().to_string());
        }
        let pki = crate::cluster::member_certificates(&config.data.join("pki"), [1], &hosts)?;
        crate::cluster::client_certificates(
            &pki,
            &["operator:admin", "observer:history", "gateway:1", "gateway:load"],
        )?;
        eprintln!(
            "mutual TLS on the node's gRPC port: certificates in {} (for the CLI: export BOURSE_PKI={})",
            pki.display(),
            pki.display()
        );
        config.pki = Some(pki);
    }
    let history = crate::history::serve_history_url(args.history.as_deref(), &config.data);
    if args.day_trading.wanted() && args.gateway.is_none() {
        return Err("--day-trading runs in the gateway: give --gateway ADDR too".into());
    }
    let gateway = match args.gateway {
        Some(listen) => Some(InProcessGateway::new(listen, &args, history.as_deref(), config.pki.as_deref())?),
        None => None,
    };
    // No --history: the node's own file, which it may set aside and write anew.
    let own_history = args.history.is_none().then(|| config.data.join("history.sqlite"));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let sink = SinkConfig { background: args.history_priority == HistoryPriority::Idle, ..SinkConfig::default() };
    runtime.block_on(run(config, history.map(|url| (url, sink)), own_history, gateway))
}

/// The node; its history sink, following its log in process; a gateway and its
/// day-trading service in process. On SIGINT/SIGTERM they stop in the other order: the
/// front ends, then the sink once it has written what it received, then the node.
async fn run(
    config: NodeConfig,
    history: Option<(String, SinkConfig)>,
    own_history: Option<PathBuf>,
    gateway: Option<InProcessGateway>,
) -> Result<(), String> {
    let node = Node::start(config).await.map_err(|e: NodeError| e.to_string())?;
    // Handlers first: the node serves already, and a SIGTERM must stop it cleanly even
    // while the rest is still starting.
    let signals = crate::history::Signals::install()?;
    println!("bourse node listening on {}", node.addr);
    if let Some(metrics) = node.metrics_addr {
        println!("metrics on http://{metrics}/metrics");
    }
    let following = match &history {
        Some((url, sink)) => {
            let mut sink = sink.clone();
            if sink.background {
                // Yield to trading: the pace of the node's own log says how busy it is.
                let metrics = Arc::clone(&node.metrics);
                let head = Arc::new(move || metrics.applied_index.load(std::sync::atomic::Ordering::Relaxed));
                sink.yield_to = Some(bourse_history::Yield::to(head));
            }
            crate::history::start_sink(&node, url, sink, own_history.as_deref()).await
        }
        None => None,
    };
    let front = match gateway {
        Some(gateway) => Some(gateway.start(&node).await?),
        None => None,
    };
    signals.wait().await;
    if let Some((gateway, day_trading)) = front {
        if let Some(server) = day_trading {
            server.shutdown().await;
        }
        gateway.shutdown().await;
    }
    crate::history::stop_sink(following).await;
    node.shutdown().await.map_err(|e| e.to_string())
}

/// `--gateway` and what runs in it.
struct InProcessGateway {
    listen: SocketAddr,
    keys: KeyStore,
    keys_path: Option<PathBuf>,
    open: bool,
    hold_us: u64,
    day_trading: crate::daytrading::DayTradingArgs,
    dt_key: Option<ApiKey>,
    /// The node's CA: the gateway reaches the node (its admin relay, its queries) as
    /// gateway 1, and relays admin keys' calls as operator admin.
    pki: Option<PathBuf>,
    /// The client port's certificate, if it serves TLS.
    edge_tls: Option<bourse_pki::EdgeTls>,
}

impl InProcessGateway {
    fn new(
        listen: SocketAddr,
        args: &ServeCmd,
        history: Option<&str>,
        pki: Option<&std::path::Path>,
    ) -> Result<InProcessGateway, String> {
        let mut keys = match (&args.keys, args.open) {
            (Some(path), _) => KeyStore::load(path).map_err(|e| e.to_string())?,
            (None, true) => KeyStore::default(),
            (None, false) => return Err("--gateway needs --keys FILE (or --open, for loopback tests)".into()),
        };
        if let Some((flag, addr)) =
            crate::cli::exposed([("--day-trading", args.day_trading.listen())]).filter(|_| args.open)
        {
            return Err(format!("--open serves without keys: {flag} must be a loopback address, not {addr}"));
        }
        // TLS on the client port with a certificate naming its hosts; a plaintext one
        // (and the day-trading port, which has no TLS of its own) only on loopback.
        let identity = crate::cli::parse_identity("gateway:1")?;
        let edge_tls = args.edge.load(pki.zip(Some(&identity)))?;
        let listen_on = |flag, addr, tls_capable| crate::edge::Listen { flag, addr, tls_capable };
        args.edge.check_plaintext(
            edge_tls.is_some(),
            [listen_on("--gateway", Some(listen), true), listen_on("--day-trading", args.day_trading.listen(), false)],
        )?;
        // The day-trading service vouches for its callers: its key is an admin's.
        let dt_key =
            (!args.open && args.day_trading.wanted()).then(|| ApiKey(keys.add_process_key("day-trading", true)));
        let mut day_trading = args.day_trading.clone();
        day_trading.history_default(history);
        Ok(InProcessGateway {
            listen,
            keys,
            keys_path: args.keys.clone(),
            open: args.open,
            hold_us: args.hold_us,
            day_trading,
            dt_key,
            pki: pki.map(std::path::Path::to_path_buf),
            edge_tls,
        })
    }

    async fn start(self, node: &Node) -> Result<(Gateway, Option<DayTradingServer>), String> {
        let mut config = GatewayConfig::new(1, self.listen, vec![node.addr.to_string()]);
        config.open = self.open;
        config.hold_us = self.hold_us;
        config.edge_tls = self.edge_tls.clone();
        if let Some(pki) = &self.pki {
            let tls = |identity: &str| crate::cli::client_tls(pki, identity).map_err(|e| format!("--gateway: {e}"));
            config.tls = Some(tls("gateway:1")?);
            config.admin_tls = Some(tls("operator:admin")?);
        }
        config.local_nodes = vec![local_node(node)];
        let gateway = Gateway::start(config, self.keys).await.map_err(|e| format!("--gateway: {e}"))?;
        let over = if self.edge_tls.is_some() { " (TLS)" } else { "" };
        println!("bourse gateway listening on {}{over}", gateway.addr());
        if let Some(path) = &self.keys_path {
            crate::gateway::watch_key_file(path.clone(), gateway.key_reloader());
        }
        let day_trading = self
            .day_trading
            .start(gateway.addr(), Some(gateway.local()), self.dt_key, self.keys_path.as_deref())
            .await?;
        Ok((gateway, day_trading))
    }
}

/// `node`, for a gateway in its process: the link to it and the feed from it handed over
/// in memory.
pub(crate) fn local_node(node: &Node) -> LocalNode {
    let link = node.local_link();
    let feed = link.clone();
    LocalNode {
        addr: node.addr.to_string(),
        link: Arc::new(move |up| link.link(up)),
        feed: Arc::new(move || {
            let feed = feed.clone();
            Box::pin(async move { feed.feed().await })
        }),
    }
}

#[derive(Args, Debug)]
pub struct ReplayArgs {
    /// The data directory of a node or cluster member (or a copy of it); it must not be
    /// running. A member replays its snapshot and committed log.
    data: PathBuf,
    /// The node's configuration file: the engine's settings (`[day_trading]`) a journal
    /// without a snapshot was written with (a snapshot carries its own).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Print one JSON object as the last line: {"index": N, "state_hash": "<hex>"}.
    #[arg(long)]
    json: bool,
}

pub fn replay(args: ReplayArgs) -> Result<(), String> {
    let config = match &args.config {
        Some(path) => NodeConfig::from_toml_file(path).map_err(|e| e.to_string())?,
        None => NodeConfig::default(),
    };
    let recovered = if args.data.join("raft").is_dir() {
        // A cluster member: its snapshot and committed log.
        let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
        runtime.block_on(bourse_node::recover_member(&args.data, &config)).map_err(|e| e.to_string())?.1
    } else if bourse_node::journal_dir(&args.data).is_dir() {
        bourse_node::recover(&args.data, &config).map_err(|e| e.to_string())?.2
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

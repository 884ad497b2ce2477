//! `bourse gateway …`: run a gateway, and make its API keys.

use std::net::SocketAddr;
use std::path::PathBuf;

use bourse_client::{ApiKey, ClientTls};
use bourse_fairness::{Profile, ProfileSpec};
use bourse_fix::{FixConfig, FixServer};
use bourse_gateway::keys::{append, entry_for, generate_key, remove};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_http::{HttpConfig, HttpServer};
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
#[allow(clippy::large_enum_variant)] // parsed once at start
pub enum GatewayCommand {
    /// Run a gateway in front of a cluster until SIGINT/SIGTERM.
    Run(Box<RunArgs>),
    /// Make a new API key, add its hash to a key file, and print the key (shown once).
    KeyAdd(KeyAddArgs),
    /// Remove a key from a key file by name: gateways reading the file refuse it within
    /// a second and end its sessions.
    KeyRemove(KeyRemoveArgs),
}

#[derive(Args, Debug)]
pub struct KeyRemoveArgs {
    /// The key file.
    #[arg(long)]
    keys: PathBuf,
    /// The name of the key to remove.
    #[arg(long)]
    name: String,
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// This gateway's id, unique among the exchange's gateways.
    #[arg(long)]
    id: u32,
    /// The client-facing gRPC address.
    #[arg(long, default_value = "127.0.0.1:7600")]
    listen: SocketAddr,
    /// Address for the Prometheus /metrics endpoint.
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
    /// The cluster's node addresses (comma separated); the link follows the leader.
    #[arg(long, value_delimiter = ',', required = true)]
    cluster: Vec<String>,
    /// Nodes to read the market data feed from, preferred first (default: the cluster's,
    /// last first).
    #[arg(long, value_delimiter = ',')]
    feed: Vec<String>,
    /// With --pki: the operator certificate (ROLE:ID, e.g. operator:ops) under which the
    /// gateway relays its admin keys' Admin.Submit calls. Nodes take Admin calls from
    /// operators only, so without it those calls are refused.
    #[arg(long, value_name = "ROLE:ID")]
    admin_as: Option<String>,
    /// The API key file (see `bourse gateway key-add`).
    #[arg(long)]
    keys: Option<PathBuf>,
    /// Accept sessions without a key, each acting for every account: loopback tests only.
    #[arg(long, conflicts_with = "keys")]
    open: bool,
    /// d_h: hold market data until t_m plus this many µs on the gateway clock. It must
    /// cover commit, apply and delivery to the slowest gateway (`bourse bench fairness`
    /// measures it).
    #[arg(long, default_value_t = 3_000)]
    hold_us: u64,
    /// Run the market data release thread under SCHED_FIFO at this priority (1–99), so
    /// it wakes at each release instant even when ordinary threads hold every CPU.
    /// Needs CAP_SYS_NICE; without it the gateway warns and runs at ordinary priority.
    #[arg(long)]
    release_priority: Option<u8>,
    /// A random speed bump on market data: each release put off by a pseudo-random 0
    /// to this many µs, drawn per entry and gateway from --release-jitter-seed (give
    /// every gateway the same seed). Randomizes which gateway's traders see an update
    /// first where gateways share CPUs; adds up to this much delivery spread.
    #[arg(long, default_value_t = 0)]
    release_jitter_us: u64,
    #[arg(long, default_value_t = 0)]
    release_jitter_seed: u64,
    /// How often the gateway sends its clock to the sequencer when idle, in µs.
    #[arg(long, default_value_t = 1_000)]
    heartbeat_us: u64,
    /// Commands per second per key on average, and in a burst (over all its sessions).
    #[arg(long, default_value_t = 100_000)]
    rate_per_sec: u64,
    #[arg(long, default_value_t = 10_000)]
    burst: u64,
    /// Unanswered commands per session, at most.
    #[arg(long, default_value_t = 1_024)]
    in_flight_max: usize,
    /// Order-entry sessions one key may hold open at once (front ends of this process
    /// are not held to it).
    #[arg(long, default_value_t = 256)]
    sessions_per_key_max: usize,
    /// Market data subscriptions one key may hold open at once, and all keys together.
    #[arg(long, default_value_t = 64)]
    subscriptions_per_key_max: usize,
    #[arg(long, default_value_t = 10_000)]
    subscriptions_max: usize,
    /// Injected delays and clock error (measurement only): none, cloudex, huygens, ntp,
    /// or keys such as in=100us,jitter=20us,spikes=0/400/200@6s,offset=1ms.
    #[arg(long, default_value = "none")]
    inject: String,
    /// Seed of the injection's draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also serve the REST + WebSocket API (OpenAPI document at /openapi.json) here.
    #[arg(long)]
    http: Option<SocketAddr>,
    /// With --http: serve the browser UI from this directory (web/dist after `npm run build`).
    #[arg(long, requires = "http")]
    web: Option<PathBuf>,
    /// Also accept FIX 4.4 sessions here (order entry and market data; the key goes in
    /// the Logon's Password (554) or RawData (96)).
    #[arg(long, requires = "data")]
    fix: Option<SocketAddr>,
    /// With --fix: the directory of the FIX session stores (sequence numbers, sent
    /// messages for resending).
    #[arg(long)]
    data: Option<PathBuf>,
    /// With --fix: this exchange's CompID (the clients' TargetCompID).
    #[arg(long, default_value = "BOURSE")]
    fix_comp_id: String,
    #[command(flatten)]
    edge: crate::edge::EdgeArgs,
    #[command(flatten)]
    edge_limits: crate::edge::EdgeLimits,
    #[command(flatten)]
    xml: crate::xml::XmlArgs,
    #[command(flatten)]
    day_trading: crate::daytrading::DayTradingArgs,
    /// With --http and/or --xml: the history store the history routes read, and the
    /// XML order query for orders the engine no longer remembers (a SQLite file, or
    /// `postgres://…`; written by `bourse serve` or `bourse history run`).
    #[arg(long)]
    history: Option<String>,
}

#[derive(Args, Debug)]
pub struct KeyAddArgs {
    /// The key file (created if absent).
    #[arg(long)]
    keys: PathBuf,
    /// A name for the key holder, unique in the file.
    #[arg(long)]
    name: String,
    /// Accounts the key trades for (comma separated).
    #[arg(long, value_delimiter = ',')]
    account: Vec<u32>,
    /// The key may create assets, symbols and accounts, move money and act for every
    /// account.
    #[arg(long)]
    admin: bool,
}

pub fn run(command: GatewayCommand, target: &crate::cli::Target) -> Result<(), String> {
    match command {
        GatewayCommand::Run(args) => run_gateway(*args, target),
        GatewayCommand::KeyAdd(args) => {
            let key = generate_key();
            append(&args.keys, entry_for(&key, &args.name, args.account, args.admin)).map_err(|e| e.to_string())?;
            eprintln!("added {:?} to {} (the file keeps only the key's hash)", args.name, args.keys.display());
            println!("{key}");
            Ok(())
        }
        GatewayCommand::KeyRemove(args) => {
            remove(&args.keys, &args.name).map_err(|e| e.to_string())?;
            eprintln!("removed {:?} from {}", args.name, args.keys.display());
            Ok(())
        }
    }
}

fn run_gateway(args: RunArgs, target: &crate::cli::Target) -> Result<(), String> {
    let keys = match (&args.keys, args.open) {
        (Some(path), _) => KeyStore::load(path).map_err(|e| e.to_string())?,
        (None, true) => KeyStore::default(),
        (None, false) => return Err("give --keys FILE (or --open, for loopback tests)".into()),
    };
    if args.open {
        // Without keys every session may do anything: nothing but this machine may reach
        // it (the gateway's own --listen is held to that by GatewayConfig::validate).
        let front_ends = [("--http", args.http), ("--fix", args.fix), ("--day-trading", args.day_trading.listen())];
        if let Some((flag, addr)) = crate::cli::exposed(front_ends.into_iter().chain(args.xml.listens())) {
            return Err(format!("--open serves without keys: {flag} must be a loopback address, not {addr}"));
        }
    }
    // TLS for the client listeners that have it, when there is a certificate; plaintext
    // ones (and every listener without one) bind loopback unless --allow-plaintext.
    let gateway_identity = match &target.pki {
        Some(_) => Some(target.identity_or(&format!("gateway:{}", args.id))?),
        None => None,
    };
    let edge_tls = args.edge.load(target.pki.as_deref().zip(gateway_identity.as_ref()))?;
    let listen = |flag, addr, tls_capable| crate::edge::Listen { flag, addr, tls_capable };
    let listens = [
        listen("--listen", Some(args.listen), true),
        listen("--day-trading", args.day_trading.listen(), false),
        listen("--http", args.http, true),
        listen("--fix", args.fix, true),
    ];
    let xml_listens = args.xml.listens_all().map(|(flag, addr, tls)| listen(flag, addr, tls));
    // XML carries no key at all: its own rule (loopback unless --xml-allow-remote) first.
    args.xml.check_exposure()?;
    args.edge.check_plaintext(edge_tls.is_some(), listens.into_iter().chain(xml_listens))?;
    let edge_limits = args.edge_limits.clone();
    edge_limits.apply(bourse_port::ListenerLimits::DEFAULT)?;
    let scheme = if edge_tls.is_some() { "https" } else { "http" };
    let spec: ProfileSpec = args.inject.parse().map_err(|e| format!("--inject: {e}"))?;
    let mut config = GatewayConfig::new(args.id, args.listen, args.cluster);
    config.feed = args.feed;
    config.metrics_listen = args.metrics_listen;
    config.open = args.open;
    config.hold_us = args.hold_us;
    config.release_priority = args.release_priority;
    config.release_jitter_us = args.release_jitter_us;
    config.release_jitter_seed = args.release_jitter_seed;
    config.heartbeat_us = args.heartbeat_us;
    config.rate_per_sec = args.rate_per_sec;
    config.burst = args.burst;
    config.in_flight_max = args.in_flight_max;
    config.sessions_per_key_max = args.sessions_per_key_max;
    config.subscriptions_per_key_max = args.subscriptions_per_key_max;
    config.subscriptions_max = args.subscriptions_max;
    config.inject = Profile::for_gateway(&spec, args.id.saturating_sub(1), args.seed);
    config.edge_tls = edge_tls.clone();
    if let Some(dir) = &target.pki {
        // Nodes with the cluster's PKI take this gateway's link under its own id only.
        let identity = gateway_identity.clone().expect("read with --pki");
        config.tls = Some(ClientTls::issued(dir, &identity).map_err(|e| format!("--pki: {e}"))?);
        if let Some(admin) = &args.admin_as {
            let identity = crate::cli::parse_identity(admin)?;
            config.admin_tls = Some(ClientTls::issued(dir, &identity).map_err(|e| format!("--admin-as: {e}"))?);
        }
    } else if args.admin_as.is_some() {
        return Err("--admin-as names a certificate in --pki DIR: give --pki too".into());
    }
    if args.history.is_some() && args.http.is_none() && !args.xml.wanted() {
        return Err("--history is read by --http or --xml: give one of them".into());
    }
    let (http, web, history) = (args.http, args.web, args.history);
    let xml_history = history.clone();
    let fix = args.fix.map(|listen| (listen, args.data.clone().unwrap_or_default(), args.fix_comp_id.clone()));
    let mut keys = keys;
    // The HTTP server reads market data for itself with a key of this process only.
    let service_key = (!args.open).then(|| ApiKey(keys.add_process_key("http-front-end", false)));
    // The XML protocol carries no key: its listeners act with the rights of the key the
    // operator names (`<create>` needs an admin's), and bind loopback unless told
    // (checked above).
    let xml_key = match (args.open, args.xml.wanted(), args.xml.acting_as()) {
        (false, true, Some(name)) => Some(ApiKey(
            keys.add_process_key_as("xml-front-end", name)
                .ok_or_else(|| format!("--xml-as {name}: the key file has no key of that name"))?,
        )),
        (false, true, None) => {
            return Err(
                "--xml: name the key whose rights XML clients act with: --xml-as NAME (an admin's for <create>)".into(),
            )
        }
        _ => None,
    };
    let xml = args.xml.clone();
    // The day-trading service vouches for its callers (caller, admin): its key is an
    // admin's, and it checks callers' keys against the same file.
    let dt_key = (!args.open && args.day_trading.wanted()).then(|| ApiKey(keys.add_process_key("day-trading", true)));
    let day_trading = args.day_trading.clone();
    let keys_path = args.keys.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    // SIGHUP re-reads the certificates (new connections to the nodes, and new client
    // handshakes, use the new ones) and the key file (keys added work at once, removed ones end their sessions);
    // with neither, it stops the gateway like SIGTERM.
    let configs: Vec<_> = [&config.tls, &config.admin_tls]
        .into_iter()
        .flatten()
        .filter_map(|tls| tls.0.config().map(std::sync::Arc::clone))
        .collect();
    let reloader: std::sync::Arc<std::sync::OnceLock<bourse_gateway::KeyReloader>> = Default::default();
    let key_file = keys_path.clone();
    let edge = edge_tls.clone();
    let reload = (!configs.is_empty() || key_file.is_some() || edge.is_some()).then(|| {
        let reloader = std::sync::Arc::clone(&reloader);
        Box::new(move || {
            configs.iter().try_for_each(|c| c.reload()).map_err(|e| e.to_string())?;
            // The client ports' certificate: new handshakes present the renewed one.
            if let Some(edge) = &edge {
                edge.reload().map_err(|e| format!("the client listeners' certificate: {e}"))?;
            }
            if let (Some(path), Some(reloader)) = (&key_file, reloader.get()) {
                let file = KeyStore::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
                let ended = reloader.reload(file);
                println!("keys reloaded from {} ({ended} sessions of removed keys ended)", path.display());
            }
            Ok(())
        }) as crate::history::Reload
    });
    runtime.block_on(async move {
        let signals = crate::history::Signals::install_reloading(reload)?;
        let gateway = Gateway::start(config, keys).await.map_err(|e| e.to_string())?;
        let _ = reloader.set(gateway.key_reloader());
        gateway.also_render(bourse_port::render_metrics);
        if let Some(path) = &keys_path {
            watch_key_file(path.clone(), gateway.key_reloader());
        }
        let over = if edge_tls.is_some() { " (TLS)" } else { "" };
        println!("bourse gateway listening on {}{over}", gateway.addr());
        if let Some(metrics) = gateway.metrics_addr() {
            println!("metrics on http://{metrics}/metrics");
        }
        // The day-trading service starts first: the HTTP server's day-trading routes call it.
        let day_trading =
            day_trading.start(gateway.addr(), Some(gateway.local()), dt_key, keys_path.as_deref()).await?;
        let http = match http {
            Some(listen) => {
                let mut config = HttpConfig::new(listen, Vec::new());
                config.upstream = bourse_port::Upstream::InProcess(gateway.local());
                config.service_key = service_key;
                config.web_dir = web;
                config.history = history;
                config.day_trading = day_trading.as_ref().map(|server| server.addr().to_string());
                config.tls = edge_tls.clone();
                config.limits = edge_limits.apply(config.limits.clone())?;
                let server = HttpServer::start(config).await.map_err(|e| format!("--http {listen}: {e}"))?;
                println!("REST + WebSocket API on {scheme}://{}/ (OpenAPI: /openapi.json)", server.addr());
                Some(server)
            }
            None => None,
        };
        let fix = match fix {
            Some((listen, data, comp_id)) => {
                let mut config = FixConfig::new(listen, Vec::new(), data);
                config.upstream = bourse_port::Upstream::InProcess(gateway.local());
                config.comp_id = comp_id;
                config.tls = edge_tls.clone();
                config.limits = edge_limits.apply(config.limits.clone())?;
                let server = FixServer::start(config).await.map_err(|e| format!("--fix {listen}: {e}"))?;
                let over = if edge_tls.is_some() { " (TLS)" } else { "" };
                println!("FIX 4.4 acceptor on {}{over}", server.addr());
                Some(server)
            }
            None => None,
        };
        let xml_servers = if xml.wanted() {
            let upstream = bourse_port::Upstream::InProcess(gateway.local());
            xml.start(upstream, xml_key, xml_history.as_deref(), edge_tls.clone()).await?
        } else {
            Vec::new()
        };
        signals.wait().await;
        if let Some(server) = day_trading {
            server.shutdown().await;
        }
        for server in xml_servers {
            server.shutdown().await;
        }
        if let Some(server) = fix {
            server.shutdown().await;
        }
        if let Some(server) = http {
            server.shutdown().await;
        }
        gateway.shutdown().await;
        Ok(())
    })
}

/// Re-reads the key file whenever it changes (another inode, length or modification
/// time), looking once a second: keys added work, and keys removed stop working (their
/// sessions end), within a second and without a signal. A file that does not load (an
/// edit half done) leaves the keys in force as they are.
pub(crate) fn watch_key_file(path: PathBuf, reloader: bourse_gateway::KeyReloader) {
    use std::os::unix::fs::MetadataExt;
    let stamp = |path: &std::path::Path| std::fs::metadata(path).ok().map(|m| (m.ino(), m.len(), m.modified().ok()));
    tokio::spawn(async move {
        let mut seen = stamp(&path);
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
        loop {
            tick.tick().await;
            let now = stamp(&path);
            if now == seen {
                continue;
            }
            seen = now;
            match KeyStore::load(&path) {
                Ok(file) => {
                    let ended = reloader.reload(file);
                    println!(
                        "keys reloaded from {} (it changed; {ended} sessions of removed keys ended)",
                        path.display()
                    );
                }
                Err(error) => eprintln!("bourse: {}: {error} (the keys in force stay)", path.display()),
            }
        }
    });
}

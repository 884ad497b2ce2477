//! `bourse demo`: a living market to watch in a browser.
//!
//! It starts a replicated exchange of three `bourse node` processes on loopback (data
//! in a temporary directory), several gateways in this process, each with its own
//! injected network delays and clock error (`--profile`, CloudEx's by default), the
//! REST + WebSocket API with the dashboard (`web/dist`) on the first gateway (with the
//! day-trading service behind its `/v1/daytrading` routes and page), and a
//! population of simulated traders (`bourse_sim::agents`, CloudEx's by default), each on
//! its own session with its own key, spread round-robin over the gateways. It prints the
//! address to open and runs until Ctrl-C, SIGTERM or SIGHUP (the terminal closed), or
//! `--seconds`. On the way out it stops the traders, waits until every node has applied
//! the same log, stops the nodes and replays each node's data: same index, same state
//! hash. However else it ends (a SIGKILL, a panic) its nodes stop too and its temporary
//! data goes (see `nodes.rs`); its gateways live in this process.
//!
//! A history sink (`bourse-history`) follows the cluster from its start into
//! `DATA/history.sqlite` (`--history`), failing over between members like `bourse
//! history run`, and the REST API serves the history routes from it: the trading page's
//! account statement, orders' histories, symbols' trades. A sink that fails is reported
//! and the demo trades on without history.
//!
//! Gateways and traders live in this process (the statistics read the gateways' release
//! records and the traders' stamps directly); nodes are separate processes so the kill
//! button is a real SIGKILL.

/// `println!` that ignores a failed write: after SIGHUP the terminal may be gone (a write
/// fails with EIO; into a closed pipe, EPIPE), and the demo must still stop its nodes
/// and replay their data rather than panic on its way out.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that ignores a failed write, as [`say!`].
macro_rules! say_error {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod control;
mod margin;
mod nodes;
mod stats;
mod traders;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::{random_client_id, ApiKey, Client, ClientOptions};
use bourse_engine::{AccountId, AssetId, Outcome, SymbolId};
use bourse_fairness::{Profile, ProfileSpec};
use bourse_gateway::keys::{entry_for, generate_key, KeyEntry};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_history::{Following, SinkConfig};
use bourse_http::control::{DemoGuest, GatewayView, TraderView};
use bourse_http::{HttpConfig, HttpServer};
use bourse_sim::agents::arena::{account_commands, setup_commands};
use bourse_sim::agents::scenario::{Scenario, SCENARIOS};
use clap::Args;
use tokio::sync::watch;

use self::nodes::Nodes;
use self::stats::{Collector, Stats};
use self::traders::{MarketView, Recorder, Shared, Trader};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// The population of traders: cloudex (1 market maker, 43 random, 4 mean-reversion
    /// traders over 10 symbols), mixed (plus value, momentum and pairs traders) or
    /// identical (plus four identical traders, one per gateway of four).
    #[arg(long, default_value = "cloudex")]
    scenario: String,
    /// Seed of the traders and the fundamental prices.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Gateways the traders are spread over.
    #[arg(long, default_value_t = 4)]
    gateways: u32,
    /// Injected delays and clock error of each gateway (see `bourse gateway run --inject`).
    #[arg(long, default_value = "cloudex")]
    profile: String,
    /// d_h of every gateway: market data is released at t_m plus this many µs — with
    /// --fixed-hold; otherwise only until the leader sets its adaptive hold.
    #[arg(long, default_value_t = 3_000)]
    hold_us: u64,
    /// Keep the hold (--hold-us) and the sequencer window fixed. By default the leader
    /// adapts both to the delays it observes, through the log (`[fairness] adaptive`).
    #[arg(long)]
    fixed_hold: bool,
    /// Release jitter of every gateway, µs (0: none): each market data release put off by
    /// a pseudo-random 0 to this, drawn per entry and gateway, so that gateways sharing
    /// this machine's cores take turns at going first (docs/ARCHITECTURE.md).
    #[arg(long, default_value_t = 50)]
    release_jitter_us: u64,
    /// Where the dashboard and the REST + WebSocket API listen (port 0: any free port),
    /// over HTTPS with a certificate from the demo's CA (DATA/pki/ca.pem).
    #[arg(long, default_value = "127.0.0.1:8080")]
    http: SocketAddr,
    /// Serve the dashboard and the API over plain HTTP instead (loopback only).
    #[arg(long)]
    plaintext_http: bool,
    /// The built browser UI (`npm run build` in web/).
    #[arg(long, default_value = "web/dist")]
    web: PathBuf,
    /// Stop after this many seconds of trading (default: run until Ctrl-C).
    #[arg(long)]
    seconds: Option<u64>,
    /// Keep the nodes' data here (default: a temporary directory under /dev/shm when it
    /// exists, removed at the end).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Seconds before a node killed from the dashboard is started again.
    #[arg(long, default_value_t = 5)]
    restart_after: u64,
    /// Flags for every node. The default election timing (heartbeat 50 ms, election
    /// timeout 300-600 ms: a dead leader is replaced in about a second) keeps a debug
    /// build on a busy two-core machine from starting elections by itself; `bourse node`'s
    /// own default replaces a leader in 140-200 ms.
    #[arg(
        long,
        allow_hyphen_values = true,
        value_delimiter = ' ',
        default_value = "--heartbeat-ms 50 --election-min-ms 300 --election-max-ms 600"
    )]
    node_args: Vec<String>,
    /// The history store a sink following the cluster writes and the REST API's history
    /// routes read: a SQLite file, `postgres://…`, or `none` (default:
    /// DATA/history.sqlite).
    #[arg(long)]
    history: Option<String>,
}

/// The keys of the demo: one per trader, the guest's, the market view's, the admin's.
struct Keys {
    admin: String,
    traders: Vec<String>,
    guest: String,
    viewer: String,
    entries: Vec<KeyEntry>,
}

fn make_keys(traders: usize) -> Keys {
    let admin = generate_key();
    let guest = generate_key();
    let viewer = generate_key();
    let mut entries = vec![
        entry_for(&admin, "demo-admin", Vec::new(), true),
        entry_for(&guest, "guest", vec![traders as u32], false),
        entry_for(&viewer, "market-view", Vec::new(), false),
    ];
    let keys: Vec<String> = (0..traders).map(|_| generate_key()).collect();
    for (k, key) in keys.iter().enumerate() {
        entries.push(entry_for(key, &format!("trader-{k}"), vec![k as u32], false));
    }
    Keys { admin, traders: keys, guest, viewer, entries }
}

pub fn run(args: DemoArgs) -> Result<(), String> {
    let scenario = Scenario::by_name(&args.scenario, args.seed)
        .ok_or_else(|| format!("--scenario {}: not one of {}", args.scenario, SCENARIOS.join(", ")))?;
    let spec: ProfileSpec = args.profile.parse().map_err(|e| format!("--profile: {e}"))?;
    if !(1..=16).contains(&args.gateways) {
        return Err("--gateways must be 1 to 16".into());
    }
    // In memory when the machine has /dev/shm: the demo's data is thrown away, and a
    // shared disk's fsync times would show as latency that is not the exchange's.
    let parent =
        if std::path::Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
    let temp = match &args.data {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("bourse-demo-").tempdir_in(parent).map_err(|e| e.to_string())?),
    };
    // Held until the end of this function, after the runtime and with it every node
    // (stopped, or killed by `Nodes`' drop): then the demo is the last holder and removes
    // the directory. Should the demo end first, the last node to stop removes it.
    let holder = temp.as_ref().map(|t| crate::scratch::Holder::create(t.path())).transpose()?;
    let data = args.data.clone().unwrap_or_else(|| temp.as_ref().expect("a temp dir").path().to_path_buf());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let result = runtime.block_on(demo(&args, scenario, &spec, data, holder.is_some()));
    runtime.shutdown_timeout(Duration::from_secs(2));
    result
}

async fn demo(
    args: &DemoArgs,
    mut scenario: Scenario,
    spec: &ProfileSpec,
    data: PathBuf,
    temporary: bool,
) -> Result<(), String> {
    // Caught from the start: a signal while the demo starts up stops it cleanly once it
    // runs, rather than killing it (and one sent just after "running for" is not lost).
    let signals = crate::history::Signals::install().ok();
    margin::add_to_agents(&mut scenario);
    say!(
        "Bourse demo: a replicated exchange on loopback, {} gateways and {} simulated traders",
        args.gateways,
        scenario.agents.len()
    );
    say!("  nodes' data in {}", data.display());
    // The keys' hashes go to the nodes too, which check every session a gateway claims.
    let keys = make_keys(scenario.agents.len());
    let keys_file = data.join("keys.toml");
    std::fs::create_dir_all(&data).map_err(|e| format!("{}: {e}", data.display()))?;
    // This run's keys only (a kept --data directory holds the last run's).
    let _ = std::fs::remove_file(&keys_file);
    for entry in &keys.entries {
        bourse_gateway::keys::append(&keys_file, entry.clone()).map_err(|e| e.to_string())?;
    }
    let mut node_args = args.node_args.clone();
    node_args.extend(["--client-keys".to_string(), keys_file.display().to_string()]);
    if !args.fixed_hold {
        node_args.push("--fairness-adaptive".to_string());
    }
    let nodes = Nodes::start(&data, temporary, 3, node_args, Duration::from_secs(args.restart_after))?;
    let leader = nodes.wait_leader(Duration::from_secs(60)).await?;
    say!("  3 nodes up (Raft), leader: node {leader}");
    let history = start_history(args, &data, &nodes).await;

    let (gateways, http_key) = start_gateways(args, spec, &nodes, &keys).await?;
    let addresses: Vec<String> = gateways.iter().map(|g| g.addr().to_string()).collect();
    say!("  {} gateways up (profile {}): {}", gateways.len(), args.profile, addresses.join(" "));

    let (guest_account, future) = setup(&scenario, &addresses[0], &keys.admin).await?;
    // The stocks, then the margin contract: the agents' symbol indexes.
    let mut rules = scenario.rules();
    rules.push(margin::RULES);
    let mut fundamentals = scenario.fundamental_processes();
    fundamentals.push(margin::fundamental(args.seed));
    let shared = Arc::new(Shared {
        symbols: (0..=future.symbol.0).map(SymbolId).collect(),
        assets: (0..scenario.symbols.len() as u32).map(|k| AssetId(1 + k)).collect(),
        future: Some(future),
        rules,
        fundamentals: Mutex::new(fundamentals),
        recorder: Mutex::new(Recorder::new(scenario.agents.len())),
        started: Instant::now(),
    });
    let (stop, stopped) = watch::channel(false);
    let views: Vec<Arc<MarketView>> = addresses
        .iter()
        .map(|a| MarketView::start(a.clone(), ApiKey(keys.viewer.clone()), shared.symbols.len(), stopped.clone()))
        .collect();

    let stats = Arc::new(Stats::new(
        scenario.name.clone(),
        trader_views(&scenario, args.gateways),
        gateway_views(args, &addresses, &scenario),
    ));
    let control = control::DemoControl {
        nodes: Arc::clone(&nodes),
        stats: Arc::clone(&stats),
        guest: DemoGuest { api_key: keys.guest.clone(), accounts: vec![guest_account] },
    };
    let history_url = history.as_ref().map(|(url, _)| url.clone());
    let day_trading = start_day_trading(&addresses[0], &keys.admin, &data, history_url).await?;
    let mut http_config = HttpConfig::new(args.http, Vec::new());
    http_config.upstream = bourse_port::Upstream::InProcess(gateways[0].local());
    http_config.service_key = Some(ApiKey(http_key));
    http_config.history = history.as_ref().map(|(url, _)| url.clone());
    http_config.day_trading = Some(day_trading.addr().to_string());
    if args.plaintext_http {
        if !args.http.ip().is_loopback() {
            return Err(format!("--plaintext-http: --http {} must be a loopback address", args.http));
        }
    } else {
        // HTTPS with the first gateway's certificate from the demo's CA (issued for
        // 127.0.0.1 and localhost).
        let identity = bourse_pki::Identity::new(bourse_pki::Role::Gateway, "1").expect("an identity");
        let files = bourse_pki::EdgeFiles::issued(&nodes.pki(), &identity);
        http_config.tls = Some(bourse_port::EdgeTls::load(files).map_err(|e| format!("--http: {e}"))?);
    }
    if args.web.join("index.html").is_file() {
        http_config.web_dir = Some(args.web.clone());
    } else {
        say!("  (no dashboard: {} has no index.html; build it with scripts/deps/web.sh)", args.web.display());
    }
    let http = HttpServer::start_with(http_config, Some(Arc::new(control)))
        .await
        .map_err(|e| format!("--http {}: {e} (another demo running? try --http 127.0.0.1:0)", args.http))?;

    let mut tasks = Vec::new();
    for (index, agent) in scenario.agents.iter().enumerate() {
        let g = index % addresses.len();
        let trader = Trader {
            index,
            account: AccountId(index as u32),
            gateway: addresses[g].clone(),
            key: ApiKey(keys.traders[index].clone()),
            strategy: agent.build(),
            view: Arc::clone(&views[g]),
            shared: Arc::clone(&shared),
        };
        tasks.push(tokio::spawn(trader.run(stopped.clone())));
    }
    let collector = Collector {
        stats: Arc::clone(&stats),
        shared: Arc::clone(&shared),
        probes: gateways.iter().map(|g| Arc::clone(g.probe())).collect(),
        view: Arc::clone(&views[0]),
        nodes: Arc::clone(&nodes),
        px_open: scenario.symbols.iter().map(|s| s.px_open).collect(),
        start: bourse_sim::agents::Portfolio::uniform(scenario.cash, scenario.shares, scenario.symbols.len()),
    };
    tasks.push(tokio::spawn(collector.run(stopped.clone())));

    say!("  {} traders trading ({} scenario, seed {})", scenario.agents.len(), scenario.name, args.seed);
    say!();
    let (scheme, at) = (if args.plaintext_http { "http" } else { "https" }, http.addr());
    say!("dashboard: {scheme}://{at}/");
    say!("trading page: {scheme}://{at}/trade.html");
    say!("day trading: {scheme}://{at}/daytrading.html (any user id, no key)");
    say!("REST API: {scheme}://{at}/openapi.json");
    if history.is_some() {
        say!("history: {scheme}://{at}/v1/accounts/{guest_account}/statement (the guest's statement)");
    }
    if !args.plaintext_http {
        let ca = bourse_pki::EdgeFiles::ca_of(&nodes.pki());
        say!("  (TLS: the certificate is from this demo's own CA, {}; a browser warns once unless", ca.display());
        say!("   told to trust it; curl --cacert that file; --plaintext-http serves plain HTTP instead)");
    }
    match args.seconds {
        Some(seconds) => say!("running for {seconds} s"),
        None => say!("running until Ctrl-C"),
    }
    wait(args.seconds, signals, &stats, &nodes).await;

    say!();
    say!("stopping: traders first, then the gateways, then the nodes");
    let _ = stop.send(true);
    // A trader waiting on an answer finishes its wake-up first; none waits past 10 s.
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    if tokio::time::timeout(Duration::from_secs(10), futures_util::future::join_all(tasks)).await.is_err() {
        aborts.iter().for_each(tokio::task::AbortHandle::abort);
    }
    http.shutdown().await;
    day_trading.shutdown().await;
    for gateway in gateways {
        gateway.shutdown().await;
    }
    let totals = stats.totals();
    say!(
        "  {} orders accepted, {} trades, {} commands rejected by the exchange, {} unanswered",
        totals.orders,
        totals.trades,
        totals.rejected,
        totals.failed
    );
    if let Some((url, following)) = history {
        stop_history(&url, following).await;
    }
    finish(&nodes).await
}

/// Starts the history sink following the cluster; `None` (said on the terminal) when
/// turned off or when it cannot start.
async fn start_history(args: &DemoArgs, data: &std::path::Path, nodes: &Nodes) -> Option<(String, Following)> {
    let url = crate::history::serve_history_url(args.history.as_deref(), data)?;
    // In the process of the gateways and traders: the sink takes only CPU time they leave.
    let config = SinkConfig { background: true, ..SinkConfig::default() };
    let pki = nodes.pki();
    let observer = bourse_pki::Identity::new(bourse_pki::Role::Observer, "history").expect("an identity");
    let tls = match bourse_pki::grpc::Connector::issued(&pki, &observer, bourse_pki::Role::Node) {
        Ok(tls) => tls,
        Err(error) => {
            say!("  (no history: no observer certificate: {error})");
            return None;
        }
    };
    match Following::start_tls(nodes.addresses(), Some(tls), &url, config).await {
        Ok(following) => {
            say!("  history sink following the cluster into {url}");
            Some((url, following))
        }
        Err(error) => {
            say!("  (no history: the sink did not start: {error})");
            None
        }
    }
}

/// Lets the sink catch up with the cluster's last entry (10 s at most), then stops it.
async fn stop_history(url: &str, following: Following) {
    use std::sync::atomic::Ordering::Relaxed;
    let status = Arc::clone(&following.status);
    let deadline = Instant::now() + Duration::from_secs(10);
    while status.lag_entries() > 0 && !following.is_finished() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let written = (status.written_index.load(Relaxed), status.rows_written.load(Relaxed));
    match following.stop().await {
        Ok(()) => say!("  history: {} rows written this run, through log index {} ({url})", written.1, written.0),
        Err(error) => say!("  history sink: {error}"),
    }
}

/// The gateways, and the key the HTTP server (on gateway 1) reads market data with.
async fn start_gateways(
    args: &DemoArgs,
    spec: &ProfileSpec,
    nodes: &Nodes,
    keys: &Keys,
) -> Result<(Vec<Gateway>, String), String> {
    let mut gateways = Vec::new();
    let mut http_key = String::new();
    for id in 1..=args.gateways {
        let mut config = GatewayConfig::new(id, "127.0.0.1:0".parse().expect("an address"), nodes.addresses());
        config.hold_us = args.hold_us;
        config.probe = true;
        config.inject = Profile::for_gateway(spec, id - 1, args.seed);
        config.release_jitter_us = args.release_jitter_us;
        config.release_jitter_seed = args.seed;
        // Each gateway links as itself; its admin key's calls (the market's set-up) go
        // to the nodes as the demo's operator.
        let pki = nodes.pki();
        config.tls = Some(crate::cli::client_tls(&pki, &format!("gateway:{id}"))?);
        config.admin_tls = Some(crate::cli::client_tls(&pki, "operator:admin")?);
        let mut store = KeyStore::from_entries(keys.entries.clone()).map_err(|e| e.to_string())?;
        if id == 1 {
            http_key = store.add_process_key("http-front-end", false);
        }
        gateways.push(Gateway::start(config, store).await.map_err(|e| format!("gateway {id}: {e}"))?);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !gateways.iter().all(Gateway::market_ready) {
        if Instant::now() > deadline {
            return Err("the gateways' market data feeds did not start within 30 s".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((gateways, http_key))
}

/// The day-trading service on the first gateway, for the day-trading page: emulated
/// quotes (the demo's symbols have four letters, the day-trading ledger's at most three),
/// every caller acting as the user it names (the demo is on loopback), submitting with
/// the admin's key.
async fn start_day_trading(
    gateway: &str,
    admin_key: &str,
    data: &std::path::Path,
    history: Option<String>,
) -> Result<bourse_daytrading::DayTradingServer, String> {
    use bourse_daytrading::quote::emulator::{EmulatorConfig, Latency};
    let mut service = bourse_daytrading::ServiceConfig::new(vec![gateway.to_owned()]);
    service.key = Some(ApiKey(admin_key.to_owned()));
    service.dump_dir = data.join("dumps");
    // DUMPLOG reads the audit log from the history store the demo's sink writes.
    service.history = history;
    service.sessions = 2;
    let config = bourse_daytrading::ServerConfig {
        listen: "127.0.0.1:0".parse().expect("an address"),
        service,
        source: bourse_daytrading::SourceConfig::Emulator(EmulatorConfig {
            seed: 1,
            price_min: 100,
            price_max: 50_000,
            latency: Latency::None,
        }),
        emulator_listen: None,
        auth: bourse_daytrading::Auth::Open,
    };
    let server = bourse_daytrading::DayTradingServer::start(config).await.map_err(|e| format!("day trading: {e}"))?;
    say!("  day-trading service on {} (emulated quotes)", server.addr());
    Ok(server)
}

/// Creates the scenario's assets, symbols and funded accounts, then the guest's account
/// (funded like a trader), then the margin contract and its insurance account; returns
/// the guest's account id and the contract.
async fn setup(scenario: &Scenario, gateway: &str, admin_key: &str) -> Result<(u32, margin::Future), String> {
    let options = ClientOptions { api_key: Some(ApiKey(admin_key.to_owned())), ..ClientOptions::default() };
    let client =
        Client::connect(vec![gateway.to_owned()], random_client_id(), options).await.map_err(|e| e.to_string())?;
    let guest = scenario.agents.len() as u32;
    let mut commands = setup_commands(scenario);
    commands.extend(account_commands(scenario, AccountId(guest)));
    let replies = client.submit_batch(commands.clone()).await.map_err(|e| format!("setting up the market: {e}"))?;
    for (command, reply) in commands.iter().zip(&replies) {
        if let Outcome::Rejected(reject) = reply.outcome {
            return Err(format!("setting up the market: {command:?} was rejected: {reject:?} (is the cluster new?)"));
        }
    }
    let accounts: Vec<u64> = commands
        .iter()
        .zip(&replies)
        .filter(|(c, _)| matches!(c, bourse_engine::command::CommandBody::CreateAccount))
        .filter_map(|(_, r)| r.ok_id())
        .collect();
    if accounts != (0..=u64::from(guest)).collect::<Vec<_>>() {
        return Err(format!("the accounts were numbered {accounts:?}, not 0 to {guest}: is the cluster new?"));
    }
    let future = margin::future(scenario, AccountId(guest));
    let commands = margin::setup_commands(scenario, &future);
    let replies =
        client.submit_batch(commands.clone()).await.map_err(|e| format!("setting up {}: {e}", margin::NAME))?;
    let ids: Vec<Option<u64>> = replies.iter().map(|r| r.ok_id()).collect();
    if ids != margin::expected_ids(&future).map(Some) {
        return Err(format!("setting up the margin contract: {commands:?} answered {ids:?} (is the cluster new?)"));
    }
    let _ = client.close().await;
    say!(
        "  market set up: {} symbols, {} accounts with ${} and {} shares of every symbol each",
        scenario.symbols.len(),
        guest + 1,
        scenario.cash / 100,
        scenario.shares
    );
    let (makers, random) = margin::traders(scenario);
    say!(
        "  margin contract {}/{} (a future; mark: the last trade): worth {} × its price, initial margin {} %, \
         maintenance {} %, position limit {}, insurance account {} with ${}; traded by {makers} market maker and \
         {random} random traders",
        margin::NAME,
        scenario.quote,
        margin::MULTIPLIER,
        margin::INITIAL_BP / 100,
        margin::MAINTENANCE_BP / 100,
        future.position_limit,
        future.insurance.0,
        margin::INSURANCE_CASH / 100
    );
    Ok((guest, future))
}

fn trader_views(scenario: &Scenario, gateways: u32) -> Vec<TraderView> {
    let opening: i64 = scenario.symbols.iter().map(|s| s.px_open * scenario.shares).sum();
    scenario
        .agents
        .iter()
        .enumerate()
        .map(|(index, agent)| TraderView {
            index: index as u32,
            name: agent.name.clone(),
            kind: agent.kind().name().to_owned(),
            gateway: 1 + index as u32 % gateways,
            account: index as u32,
            value_start: scenario.cash + opening,
        })
        .collect()
}

fn gateway_views(args: &DemoArgs, addresses: &[String], scenario: &Scenario) -> Vec<GatewayView> {
    addresses
        .iter()
        .enumerate()
        .map(|(g, address)| GatewayView {
            id: g as u32 + 1,
            address: address.clone(),
            profile: args.profile.clone(),
            traders: (0..scenario.agents.len()).filter(|i| i % addresses.len() == g).count() as u32,
        })
        .collect()
}

/// Runs until Ctrl-C, SIGTERM, SIGHUP or `seconds`, printing a line every ten seconds.
async fn wait(seconds: Option<u64>, mut signals: Option<crate::history::Signals>, stats: &Stats, nodes: &Nodes) {
    let deadline = seconds.map(|s| Instant::now() + Duration::from_secs(s));
    let mut report = tokio::time::interval(Duration::from_secs(10));
    let mut reported_through = 0u64;
    report.tick().await;
    loop {
        let until_deadline = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        let signalled = async {
            match signals.as_mut() {
                Some(signals) => signals.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = signalled => return,
            () = until_deadline => return,
            _ = report.tick() => {
                // Late deliveries over the whole interval since the last line.
                let points = stats.snapshot(reported_through).points;
                reported_through = points.last().map_or(reported_through, |p| p.seq);
                let items: u64 = points.iter().map(|p| p.market_data_items).sum();
                let late: f64 = points.iter().map(|p| p.outbound_unfairness_pct * p.market_data_items as f64).sum();
                let late_pct = if items == 0 { 0.0 } else { late / items as f64 };
                let totals = stats.totals();
                let view = nodes.status().await;
                let roles: Vec<String> = view.nodes.iter().map(|n| format!("{}:{}", n.id, n.role)).collect();
                let last = stats.last().unwrap_or_default();
                say!(
                    "  {} orders, {} trades so far; last second: ack p50 {:.0} µs, p99 {:.0} µs, inbound unfairness {:.2} %, hold {:.1} ms; since the last line: {:.3} % of {} market data items late; nodes {}",
                    totals.orders, totals.trades, last.latency_us_p50, last.latency_us_p99,
                    last.inbound_unfairness_pct, last.market_data_hold_us_mean / 1_000.0,
                    late_pct, items, roles.join(" ")
                );
            }
        }
    }
}

/// Brings back a node still down, waits until every node has applied the same log,
/// stops the nodes and replays each one's data.
async fn finish(nodes: &Arc<Nodes>) -> Result<(), String> {
    if nodes.any_down() {
        nodes.restart_now();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let view = nodes.status().await;
        let applied: Vec<u64> = view.nodes.iter().filter(|n| n.up).map(|n| n.applied_index).collect();
        if applied.len() == view.nodes.len() && applied.windows(2).all(|w| w[0] == w[1]) {
            break;
        }
        if Instant::now() > deadline {
            say!("  (the nodes did not reach the same applied index within 20 s: {applied:?})");
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    nodes.stop();
    say!("  nodes stopped; replaying each node's snapshot and committed log:");
    let mut seen = Vec::new();
    for (id, dir) in nodes.dirs() {
        match bourse_node::recover_member(&dir, &bourse_node::NodeConfig::default()).await {
            Ok((_, recovered)) => {
                let hash = bourse_engine::hex(&recovered.state_hash);
                say!("  node {id}: index {} state hash {hash}", recovered.index);
                seen.push((recovered.index, hash));
            }
            Err(error) => say!("  node {id}: {error}"),
        }
    }
    seen.dedup();
    if seen.len() == 1 {
        say!("  every replica: same index, same state hash");
        Ok(())
    } else {
        Err(format!("the replicas disagree: {seen:?}"))
    }
}

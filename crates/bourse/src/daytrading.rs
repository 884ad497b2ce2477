//! `bourse gateway run … --day-trading ADDR`: the day-trading service in the gateway's
//! process (`bourse-daytrading`), with the spec's settings (section 12) as `--dt-*`
//! flags; and `bourse workload FILE|DIR`, the workload driver.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::ApiKey;
use bourse_daytrading::grpc::KeyCheck;
use bourse_daytrading::quote::emulator::{EmulatorConfig, Latency};
use bourse_daytrading::quote::market::MarketPrice;
use bourse_daytrading::workload::{self, Mode, RunConfig};
use bourse_daytrading::{Auth, Clock, DayTradingServer, KeyHolder, ServerConfig, ServiceConfig, SourceConfig};
use bourse_gateway::KeyStore;
use clap::{Args, ValueEnum};

#[derive(Args, Debug, Clone)]
pub struct DayTradingArgs {
    /// Serve the day-trading service (gRPC `DayTrading`) here (with --http, also its REST
    /// routes under /v1/daytrading and the page /daytrading.html).
    #[arg(long)]
    day_trading: Option<SocketAddr>,
    /// Where quotes come from (quote.source).
    #[arg(long, value_enum, default_value_t = QuoteSourceArg::Emulator)]
    dt_quote_source: QuoteSourceArg,
    /// market: `last` (fallback mid) or `mid` (fallback last).
    #[arg(long, default_value = "last")]
    dt_market_price: MarketPrice,
    /// emulator: the seed of its prices.
    #[arg(long, default_value_t = 0)]
    dt_seed: u64,
    /// emulator: the lowest and highest price, in cents.
    #[arg(long, default_value_t = 100)]
    dt_price_min: i64,
    #[arg(long, default_value_t = 50_000)]
    dt_price_max: i64,
    /// emulator: none, fixed:MS or legacy (mostly 7–26 ms, a third 1–4 s).
    #[arg(long, default_value = "none")]
    dt_latency: Latency,
    /// emulator: also answer the legacy wire format (SYM,userid LF) on this address.
    #[arg(long)]
    dt_emulator_listen: Option<SocketAddr>,
    /// legacy-tcp: the quote server's host:port.
    #[arg(long)]
    dt_legacy_address: Option<String>,
    /// legacy-tcp: the first attempt's timeout (doubled per retry), and the attempts.
    #[arg(long, default_value_t = 20)]
    dt_quote_timeout_ms: u64,
    #[arg(long, default_value_t = 6)]
    dt_quote_attempts: u32,
    /// Fetch a fresh quote when the cached one has less than this left (the validity
    /// itself is the engine's, read from the node: `bourse serve --dt-quote-ttl-ms` or
    /// `[day_trading]` in its configuration file).
    #[arg(long, default_value_t = 2_000)]
    dt_refresh_margin_ms: u64,
    /// How often the trigger poller looks (0: no poller; golden runs).
    #[arg(long, default_value_t = 1_000)]
    dt_trigger_poll_ms: u64,
    /// Where the global DUMPLOG writes its file.
    #[arg(long, default_value = "dumps")]
    dt_dump_dir: PathBuf,
    /// The audit log's `server` (log_server_name).
    #[arg(long, default_value = "bourse-dt")]
    dt_server_name: String,
    /// The history store DUMPLOG reads (the sink's: DATA/history.sqlite of `bourse serve`,
    /// or postgres://…).
    #[arg(long)]
    dt_history: Option<String>,
    /// Upstream order-entry sessions (128 commands in flight each).
    #[arg(long, default_value_t = 64)]
    dt_sessions: usize,
    /// Tests only: the service's clock reads T0_MS + n × STEP_MS for a request numbered n
    /// (with `bourse serve --virtual-clock` and the same values: golden runs).
    #[arg(long, value_name = "T0_MS,STEP_MS")]
    dt_virtual_clock: Option<bourse_node::VirtualClock>,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum QuoteSourceArg {
    Emulator,
    Market,
    LegacyTcp,
}

impl DayTradingArgs {
    pub fn wanted(&self) -> bool {
        self.day_trading.is_some()
    }

    /// Where the service listens, if asked to.
    pub fn listen(&self) -> Option<SocketAddr> {
        self.day_trading
    }

    /// DUMPLOG reads `history` unless `--dt-history` names another store.
    pub fn history_default(&mut self, history: Option<&str>) {
        if self.dt_history.is_none() {
            self.dt_history = history.map(str::to_owned);
        }
    }

    /// Starts the service, submitting through the gateway at `upstream` (in this
    /// process: `local`) with `key`; the key file at `keys` (none: an `--open` gateway)
    /// authenticates its callers.
    pub async fn start(
        &self,
        upstream: SocketAddr,
        local: Option<bourse_client::LocalGateway>,
        key: Option<ApiKey>,
        keys: Option<&std::path::Path>,
    ) -> Result<Option<DayTradingServer>, String> {
        let Some(listen) = self.day_trading else { return Ok(None) };
        let mut service = ServiceConfig::new(vec![upstream.to_string()]);
        service.local = local.clone();
        service.key = key;
        service.clock = match self.dt_virtual_clock {
            Some(clock) => Clock::Virtual { t0_ms: clock.t0_ms, step_ms: clock.step_ms },
            None => Clock::Wall,
        };
        service.refresh_margin_ms = self.dt_refresh_margin_ms;
        service.trigger_poll_ms = self.dt_trigger_poll_ms;
        service.dump_dir = self.dt_dump_dir.clone();
        service.log_server_name = self.dt_server_name.clone();
        service.history = self.dt_history.clone();
        service.sessions = self.dt_sessions;
        let source = match self.dt_quote_source {
            QuoteSourceArg::Emulator => SourceConfig::Emulator(EmulatorConfig {
                seed: self.dt_seed,
                price_min: self.dt_price_min,
                price_max: self.dt_price_max,
                latency: self.dt_latency.clone(),
            }),
            QuoteSourceArg::Market => SourceConfig::Market(self.dt_market_price),
            QuoteSourceArg::LegacyTcp => SourceConfig::LegacyTcp {
                address: self
                    .dt_legacy_address
                    .clone()
                    .ok_or("--dt-quote-source legacy-tcp needs --dt-legacy-address")?,
                timeout: Duration::from_millis(self.dt_quote_timeout_ms),
                attempts: self.dt_quote_attempts,
            },
        };
        // Callers' keys are the gateway's own (re-read on SIGHUP and when the file
        // changes): a key removed from the file stops working here as it does there.
        let auth = match (keys, &local) {
            (None, _) => Auth::Open,
            (Some(_), Some(gateway)) => Auth::Keys(gateway_check(gateway.clone())),
            (Some(path), None) => Auth::Keys(key_check(path)?),
        };
        let config = ServerConfig { listen, service, source, emulator_listen: self.dt_emulator_listen, auth };
        let server = DayTradingServer::start(config).await.map_err(|e| format!("--day-trading {listen}: {e}"))?;
        println!("day-trading service on {}", server.addr());
        println!("day-trading quote validity {} ms (the node's)", server.service().quote_ttl_ms());
        if let Some(at) = server.emulator_addr() {
            println!("legacy quote server emulation on {at}");
        }
        Ok(Some(server))
    }
}

/// Callers' keys checked by the gateway of this process: its key store, the one truth
/// its key file's reloads update.
fn gateway_check(gateway: bourse_client::LocalGateway) -> KeyCheck {
    Arc::new(move |key: &str| {
        gateway.0.rights(Some(key)).map(|rights| KeyHolder { name: rights.name, admin: rights.admin })
    })
}

/// How often, at most, an unknown key makes the service read the key file again.
const KEYS_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// Callers' keys from the key file, for a service without a gateway in its process: an
/// administrator's acts for anyone, another acts as the user its entry is named after.
/// A key not in the file makes the service read the file again (at most once a
/// second), so a user's key made with `bourse gateway key-add --name USERID` logs in
/// without a restart.
fn key_check(path: &std::path::Path) -> Result<KeyCheck, String> {
    let store = KeyStore::load(path).map_err(|e| e.to_string())?;
    let state = Mutex::new((store, Instant::now()));
    let path = path.to_path_buf();
    Ok(Arc::new(move |key: &str| {
        let holder = |store: &KeyStore| store.verify(key).map(|p| KeyHolder { name: p.name.clone(), admin: p.admin });
        let mut state = state.lock().expect("key store lock");
        if let Some(found) = holder(&state.0) {
            return Some(found);
        }
        if state.1.elapsed() < KEYS_RELOAD_INTERVAL {
            return None;
        }
        state.1 = Instant::now();
        match KeyStore::load(&path) {
            Ok(store) => state.0 = store,
            Err(error) => tracing::warn!(%error, "day trading: the key file could not be read again"),
        }
        holder(&state.0)
    }))
}

/// `bourse workload FILE|DIR`.
#[derive(Args, Debug)]
pub struct WorkloadArgs {
    /// A workload file (`[n] COMMAND,…`), a directory of per-user files, or their .tar.gz.
    path: PathBuf,
    /// The day-trading service (`gateway run --day-trading ADDR`).
    #[arg(long, default_value = "127.0.0.1:7700")]
    target: String,
    /// per-user (users concurrent, one command outstanding each) or sequential.
    #[arg(long, default_value = "per-user")]
    mode: Mode,
    /// Users with a command outstanding at once, at most (0: all of them).
    #[arg(long = "users", alias = "concurrency", default_value_t = 0)]
    users: usize,
    /// Session streams to the service (per-user mode).
    #[arg(long, default_value_t = 4)]
    streams: usize,
    /// Commands of one user in flight at once (per-user mode): 1 is the spec's mode;
    /// more pipelines them (the service still applies each user's in order).
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// An administrator's API key (the driver runs as one).
    #[arg(long, env = "BOURSE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// One JSON object on stdout instead of text.
    #[arg(long)]
    json: bool,
    /// No progress lines on stderr.
    #[arg(long)]
    quiet: bool,
    /// Report lines that are not commands (or name an unknown command) and skip them,
    /// instead of refusing to run.
    #[arg(long)]
    skip_invalid: bool,
}

/// Bad lines listed in an error, at most.
const BAD_LINES_SHOWN: usize = 20;

pub fn workload(args: WorkloadArgs) -> Result<(), String> {
    let loaded = std::time::Instant::now();
    let workload = workload::load(&args.path)?;
    eprintln!(
        "{}: {} commands of {} users ({} numbering warnings, {} lines skipped) read in {:.2} s",
        args.path.display(),
        workload.lines.len(),
        workload.users().len(),
        workload.warnings.len(),
        workload.skipped.len(),
        loaded.elapsed().as_secs_f64()
    );
    if !workload.skipped.is_empty() && !args.skip_invalid {
        let mut message = format!(
            "{}: {} lines are not workload commands (--skip-invalid skips them):",
            args.path.display(),
            workload.skipped.len()
        );
        for line in workload.skipped.iter().take(BAD_LINES_SHOWN) {
            message.push_str("\n  ");
            message.push_str(line);
        }
        if workload.skipped.len() > BAD_LINES_SHOWN {
            message.push_str(&format!("\n  … and {} more", workload.skipped.len() - BAD_LINES_SHOWN));
        }
        return Err(message);
    }
    for line in workload.warnings.iter().chain(&workload.skipped).take(BAD_LINES_SHOWN) {
        eprintln!("  {line}");
    }
    let mut config = RunConfig::new(args.target.clone());
    config.key = args.api_key.clone().map(ApiKey);
    config.mode = args.mode;
    config.concurrency = args.users;
    config.streams = args.streams;
    config.window = args.window;
    config.progress = !args.quiet;
    // One thread: the driver needs a fraction of a core, and its streams and connection
    // then wake each other without crossing threads.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    let report = runtime.block_on(workload::run(&workload, &config))?;
    if args.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
    }
    Ok(())
}

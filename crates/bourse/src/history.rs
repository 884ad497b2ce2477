//! `bourse history …` and the history sink `bourse serve` runs in-process.
//!
//! - `run`: follow a node or cluster (any member, failover) into a store.
//! - `rebuild`: replay a data directory's log files into an empty store.
//! - `statement`, `order`, `trades`: the store's queries from the command line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bourse_engine::EngineConfig;
use bourse_history::{query, Feed, Following, LogEntry, Opened, Sink, SinkConfig, Store};
use bourse_node::{Node, NodeConfig};
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum HistoryCommand {
    /// Follow the committed log of a node or cluster into a history store until SIGINT/SIGTERM/SIGHUP.
    Run(RunArgs),
    /// Replay a stopped (or running single) node's log files into an empty history store.
    Rebuild(RebuildArgs),
    /// An account's balance movements between two log times.
    Statement(StatementArgs),
    /// An order with every state change and its executions.
    Order(OrderArgs),
    /// The executions of a symbol between two log times.
    Trades(TradesArgs),
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Members to follow (any of them; the next is tried when one fails).
    #[arg(long, value_delimiter = ',', required = true)]
    node: Vec<String>,
    /// The store: `postgres://…`, or a SQLite file (`sqlite:PATH` or a path).
    #[arg(long)]
    db: String,
    /// Address for the sink's Prometheus /metrics (lag, rows written).
    #[arg(long)]
    metrics_listen: Option<SocketAddr>,
}

#[derive(Args, Debug)]
pub struct RebuildArgs {
    /// The node's data directory (a single node's `journal/` or a member's `raft/`).
    #[arg(long)]
    data: PathBuf,
    /// The store to fill; it must hold no history yet.
    #[arg(long)]
    db: String,
    /// The node's TOML configuration, for its engine bounds (default: the defaults).
    #[arg(long)]
    config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub struct StatementArgs {
    #[arg(long)]
    db: String,
    account: i64,
    /// From this log time (nanoseconds since the Unix epoch, inclusive).
    #[arg(long, default_value_t = 0)]
    from: i64,
    /// To this log time (exclusive).
    #[arg(long, default_value_t = i64::MAX)]
    to: i64,
    #[arg(long, default_value_t = 1_000)]
    limit: usize,
}

#[derive(Args, Debug)]
pub struct OrderArgs {
    #[arg(long)]
    db: String,
    id: i64,
}

#[derive(Args, Debug)]
pub struct TradesArgs {
    #[arg(long)]
    db: String,
    /// Symbol name (`ACME/USD`) or id.
    symbol: String,
    #[arg(long, default_value_t = 0)]
    from: i64,
    #[arg(long, default_value_t = i64::MAX)]
    to: i64,
    #[arg(long, default_value_t = 1_000)]
    limit: usize,
}

pub fn run(command: HistoryCommand, target: &crate::cli::Target) -> Result<(), String> {
    match command {
        HistoryCommand::Run(args) => {
            // Nodes with the cluster's PKI serve their log to observers.
            let tls = match &target.pki {
                Some(dir) => {
                    let identity = target.identity_or("observer:history")?;
                    let connector = bourse_pki::grpc::Connector::issued(dir, &identity, bourse_pki::Role::Node)
                        .map_err(|e| format!("--pki {} as {identity}: {e}", dir.display()))?;
                    Some(connector)
                }
                None => None,
            };
            run_sink(args, tls)
        }
        HistoryCommand::Rebuild(args) => rebuild(args),
        HistoryCommand::Statement(args) => {
            let mut store = Store::open(&args.db).map_err(|e| e.to_string())?;
            let statement = query::account_statement(&mut store, args.account, args.from, args.to, args.limit)
                .map_err(|e| e.to_string())?;
            print_json(&statement)
        }
        HistoryCommand::Order(args) => {
            let mut store = Store::open(&args.db).map_err(|e| e.to_string())?;
            match query::order_history(&mut store, args.id).map_err(|e| e.to_string())? {
                Some(history) => print_json(&history),
                None => Err(format!("order {} is not in the history", args.id)),
            }
        }
        HistoryCommand::Trades(args) => {
            let mut store = Store::open(&args.db).map_err(|e| e.to_string())?;
            let symbol = match args.symbol.parse::<i64>() {
                Ok(id) => id,
                Err(_) => query::symbol_id(&mut store, &args.symbol)
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("no symbol {} in the history", args.symbol))?,
            };
            let (trades, truncated) =
                query::trades(&mut store, symbol, args.from, args.to, args.limit).map_err(|e| e.to_string())?;
            print_json(&serde_json::json!({ "symbol": symbol, "trades": trades, "truncated": truncated }))
        }
    }
}

fn print_json(value: &impl serde::Serialize) -> Result<(), String> {
    println!("{}", serde_json::to_string_pretty(value).map_err(|e| e.to_string())?);
    Ok(())
}

/// `--history` of `bourse serve`: `None` when turned off.
pub fn serve_history_url(flag: Option<&str>, data: &Path) -> Option<String> {
    match flag {
        Some("none") => None,
        Some(url) => Some(url.to_string()),
        None => Some(format!("sqlite:{}", data.join("history.sqlite").display())),
    }
}

/// `bourse serve`'s history sink: it follows the node's log in process (no socket, no
/// protobuf). A sink that cannot start logs why and shows `bourse_history_failed 1` on
/// /metrics; the exchange keeps running (history catches up from the log when
/// restarted). Stop it with [`stop_sink`] before the node, so it writes what it received.
///
/// `own_file` is the node's own history, `DATA/history.sqlite` (no `--history` given):
/// one written by a build of another schema version is set aside whole
/// (`history.sqlite.schema-N/`, where that build opens it) and a new one is written
/// from the log, as `bourse history rebuild` would; a store named by `--history` is
/// the operator's to rebuild, and is refused.
pub async fn start_sink(node: &Node, url: &str, config: SinkConfig, own_file: Option<&Path>) -> Option<Following> {
    let log = node.local_log();
    let local_log: bourse_history::LocalLog = Arc::new(move |request| {
        let log = log.clone();
        Box::pin(async move { log.follow(request).await })
    });
    let mut started = Following::start_local(Arc::clone(&local_log), url, config.clone()).await;
    if let (
        Err(bourse_history::SinkError::Store(bourse_history::store::StoreError::SchemaVersion { found, .. })),
        Some(path),
    ) = (&started, own_file)
    {
        match bourse_history::store::set_aside(path, *found) {
            Ok(directory) => {
                tracing::warn!(
                    version = found,
                    kept = %directory.display(),
                    "this node's history was written by a build of another schema version: it is kept aside, \
                     and a new one is written from the log"
                );
                started = Following::start_local(local_log, url, config).await;
            }
            Err(error) => tracing::error!(%error, "the history of another schema version could not be set aside"),
        }
    }
    match started {
        Ok(following) => {
            println!("history in {url}");
            let status = Arc::clone(&following.status);
            node.metrics.extra.add(move || status.render());
            Some(following)
        }
        Err(error) => {
            // The exchange runs on; the failure is on stderr and on /metrics.
            tracing::error!(%error, url, "the history sink did not start: this node runs without history");
            let status = Arc::new(bourse_history::SinkStatus::default());
            status.failed.store(true, std::sync::atomic::Ordering::Release);
            *status.error.lock().expect("status lock") = Some(error.to_string());
            node.metrics.extra.add(move || status.render());
            None
        }
    }
}

/// Stops a sink started by [`start_sink`] once it has written what it received.
pub async fn stop_sink(following: Option<Following>) {
    if let Some(Err(error)) = match following {
        Some(following) => Some(following.stop().await),
        None => None,
    } {
        tracing::error!(%error, "history sink stopped with an error");
    }
}

/// SIGINT, SIGTERM and SIGHUP, caught from the moment they are installed.
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    /// SIGHUP (the terminal closed, an SSH session dropped) stops like SIGTERM, unless
    /// it was ignored when the process started (`nohup`): then it stays ignored, as the
    /// user asked, instead of a handler replacing the inherited `SIG_IGN`. Where SIGHUP
    /// reloads instead (a daemon's reload), it is always caught: a reload keeps the
    /// process running, which is what `nohup` asked for, and an ignored SIGHUP would
    /// make `bourse cluster reload` a silent no-op on nodes started under `nohup`.
    hangup: Option<tokio::signal::unix::Signal>,
    /// What SIGHUP does instead of stopping (a client's certificates re-read).
    on_hangup: Option<Reload>,
}

/// A reload run on SIGHUP.
pub(crate) type Reload = Box<dyn Fn() -> Result<(), String> + Send + Sync>;

impl Signals {
    /// [`Signals::install`], where SIGHUP runs `reload` (a daemon's reload: new
    /// certificates, a new CRL) and [`Signals::wait`] goes on waiting.
    pub(crate) fn install_reloading(reload: Option<Reload>) -> Result<Signals, String> {
        let mut signals = Signals::install_hangup(reload.is_some())?;
        signals.on_hangup = reload;
        Ok(signals)
    }

    /// SIGINT, SIGTERM and SIGHUP, where SIGHUP stops the process.
    pub(crate) fn install() -> Result<Signals, String> {
        Signals::install_hangup(false)
    }

    /// SIGINT, SIGTERM and SIGHUP; `reloads`: the caller reloads on SIGHUP rather than
    /// stopping, so SIGHUP is caught even where the process inherited it ignored.
    pub(crate) fn install_hangup(reloads: bool) -> Result<Signals, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let hangup = if hangup_ignored() && !reloads {
            None
        } else {
            Some(signal(SignalKind::hangup()).map_err(|e| e.to_string())?)
        };
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt()).map_err(|e| e.to_string())?,
            terminate: signal(SignalKind::terminate()).map_err(|e| e.to_string())?,
            hangup,
            on_hangup: None,
        })
    }

    /// The next SIGINT, SIGTERM or SIGHUP, by name (cancel-safe: a `select!` branch).
    pub(crate) async fn recv(&mut self) -> &'static str {
        let Signals { interrupt, terminate, hangup, .. } = self;
        let hangup = async {
            match hangup.as_mut() {
                Some(signal) => {
                    signal.recv().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = interrupt.recv() => "SIGINT",
            _ = terminate.recv() => "SIGTERM",
            () = hangup => "SIGHUP",
        }
    }

    pub(crate) async fn wait(mut self) {
        loop {
            let name = self.recv().await;
            match (&self.on_hangup, name) {
                (Some(reload), "SIGHUP") => match reload() {
                    Ok(()) => tracing::info!("SIGHUP: reloaded"),
                    Err(error) => tracing::error!(%error, "SIGHUP: reload failed; what was loaded before stays"),
                },
                _ => {
                    tracing::info!("{name}: shutting down");
                    return;
                }
            }
        }
    }
}

/// Whether SIGHUP is ignored in this process (bit 0 of `SigIgn` in `/proc/self/status`,
/// read safely where `sigaction` would need unsafe code); false without `/proc`.
fn hangup_ignored() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status.lines().find_map(|line| line.strip_prefix("SigIgn:"));
    mask.and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok()).is_some_and(|bits| bits & 1 != 0)
}

fn run_sink(args: RunArgs, tls: Option<bourse_pki::grpc::Connector>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async move {
        // With certificates, SIGHUP re-reads them (the next connection uses the new ones).
        let reload = tls.as_ref().and_then(|tls| tls.config()).map(|config| {
            let config = std::sync::Arc::clone(config);
            Box::new(move || config.reload().map_err(|e| e.to_string())) as Reload
        });
        let signals = Signals::install_reloading(reload)?;
        let following =
            Following::start_tls(args.node, tls, &args.db, SinkConfig::default()).await.map_err(|e| e.to_string())?;
        println!("history sink writing {}", args.db);
        if let Some(listen) = args.metrics_listen {
            let status = Arc::clone(&following.status);
            let app = axum::Router::new().route(
                "/metrics",
                axum::routing::get(move || {
                    let status = Arc::clone(&status);
                    async move { status.render() }
                }),
            );
            let listener = tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("{listen}: {e}"))?;
            println!("metrics on http://{}/metrics", listener.local_addr().map_err(|e| e.to_string())?);
            tokio::spawn(async move { axum::serve(listener, app).await });
        }
        let status = Arc::clone(&following.status);
        let failed = async {
            while !status.failed.load(std::sync::atomic::Ordering::Acquire) {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        };
        tokio::select! {
            _ = signals.wait() => {}
            _ = failed => {}
        }
        following.stop().await.map_err(|e| e.to_string())
    })
}

fn engine_config(path: Option<&Path>) -> Result<EngineConfig, String> {
    match path {
        Some(path) => Ok(NodeConfig::from_toml_file(path).map_err(|e| e.to_string())?.engine),
        None => Ok(NodeConfig::default().engine),
    }
}

fn rebuild(args: RebuildArgs) -> Result<(), String> {
    let engine = engine_config(args.config.as_deref())?;
    let progress = if args.data.join("raft").is_dir() {
        rebuild_member(&args.data, &args.db, engine)?
    } else {
        let journal = bourse_node::journal_dir(&args.data);
        if !journal.is_dir() {
            return Err(format!("{} has neither a journal nor a raft directory", args.data.display()));
        }
        bourse_history::files::rebuild_from_journal(&journal, &args.db, engine, SinkConfig::default())
            .map_err(|e| e.to_string())?
    };
    println!(
        "history rebuilt through log index {} (rows from index {} on){}",
        progress.applied_index,
        progress.begins_at.max(1),
        if progress.begins_at > 1 { "; earlier entries were pruned from the log" } else { "" }
    );
    Ok(())
}

/// A stopped cluster member: its newest snapshot (where the history then begins) and
/// the committed log after it.
fn rebuild_member(data: &Path, url: &str, engine: EngineConfig) -> Result<bourse_history::Progress, String> {
    let opened = Opened::open(url).map_err(|e| e.to_string())?;
    if opened.saved.is_some() {
        return Err(format!("{url}: the database already holds history; rebuild needs an empty one"));
    }
    let opened = std::cell::RefCell::new(Some(opened));
    let sink: std::cell::RefCell<Option<Sink>> = std::cell::RefCell::new(None);
    let start = |start: &bourse_cluster::replay::ReplayStart| -> Result<(), String> {
        let mut opened = opened.borrow_mut().take().expect("started once");
        if let Some((index, bytes)) = &start.snapshot {
            tracing::warn!(begins_at = index + 1, "the member's log starts after a snapshot: history begins there");
            opened.begin_at_snapshot(*index, bytes.clone());
        }
        *sink.borrow_mut() = Some(Sink::start(opened, engine, SinkConfig::default()).map_err(|e| e.to_string())?);
        Ok(())
    };
    let apply = |entry: bourse_cluster::state_machine::Committed| -> Result<(), String> {
        let commands = entry.batch.map(|b| b.iter().map(<[u8]>::to_vec).collect()).unwrap_or_default();
        let mut feed = Feed::Entries {
            entries: vec![LogEntry { index: entry.index, commands }],
            head_index: entry.index,
            head_ts: 0,
        };
        let sender = sink.borrow().as_ref().expect("started").sender();
        // The replay runs on a runtime's thread: wait for room without blocking on it.
        loop {
            match sender.try_send(feed) {
                Ok(()) => return Ok(()),
                Err(tokio::sync::mpsc::error::TrySendError::Full(back)) => {
                    feed = back;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
                Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => return Err("the history sink stopped".into()),
            }
        }
    };
    let runtime = tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
    runtime
        .block_on(bourse_cluster::replay::replay_member(&data.join("raft"), start, apply))
        .map_err(|e| e.to_string())?;
    let sink = sink.into_inner().ok_or("the member's log could not be read")?;
    let status = Arc::clone(&sink.status);
    sink.finish().map_err(|e| e.to_string())?;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Acquire);
    Ok(bourse_history::Progress {
        applied_index: load(&status.written_index),
        applied_ts: load(&status.written_ts),
        begins_at: load(&status.begins_at),
    })
}

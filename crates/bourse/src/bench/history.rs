//! `bourse bench history`: how fast the history sink writes, and how far behind a node
//! it stays.
//!
//! 1. **Sink throughput**, per backend: an ec2020 log (the market's setup and pre-fill,
//!    then `--commands` commands of exchange-core's 2020 mix, one command per entry as a
//!    single node logs them) is generated in memory, then handed to a sink as fast as it
//!    takes it; the time runs from the first entry handed over to the last transaction
//!    committed. Also the recorder alone (engine + row mapping, no database), the
//!    ceiling any backend can reach.
//! 2. **Lag at a sustained rate**, per backend: a node in this process (data on
//!    /dev/shm when there is one), its sink following it over loopback (`Log.Follow`),
//!    and `bourse load`'s driver sending `--rate` commands a second for `--seconds`.
//!    The lag (entries and log time between the node's committed head and the sink's
//!    last transaction) is sampled every 100 ms; after the load stops, the time until
//!    the sink has everything.
//!
//! PostgreSQL is a temporary server this program starts (initdb into a temporary
//! directory, a free port) with its durable defaults (fsync, synchronous commit);
//! SQLite is a file in WAL mode with `synchronous=NORMAL` (the sink's setting).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_client::load::{run_load, LoadConfig};
use bourse_engine::command::Command;
use bourse_engine::{codec, Engine, EngineConfig, Event};
use bourse_history::rows::Rows;
use bourse_history::testing::{create_database, drop_database, TempPostgres};
use bourse_history::{Feed, Following, LogEntry, Opened, Recorder, Sink, SinkConfig};
use bourse_node::{Node, NodeConfig};
use bourse_sim::workload::ec::{ec_market_spec, EC2020};
use bourse_sim::workload::generator::Generator;
use bourse_sim::workload::market::Market;
use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Backend {
    Sqlite,
    Postgres,
    Both,
}

#[derive(Args, Debug)]
pub struct HistoryArgs {
    #[arg(long, value_enum, default_value = "both")]
    backend: Backend,
    /// Commands of the ec2020 mix in the throughput log (after setup and pre-fill).
    #[arg(long, default_value_t = 1_000_000)]
    commands: u64,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Throughput runs per backend, each into a new database (a PostgreSQL server's
    /// later runs find its WAL segments there to recycle, as a server long up does);
    /// with more than one, the medians are printed too.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Commands a second the load sends during the lag measurement (0: skip it).
    #[arg(long, default_value_t = 100_000.0)]
    rate: f64,
    /// Seconds of load in the lag measurement.
    #[arg(long, default_value_t = 10.0)]
    seconds: f64,
    /// Load connections in the lag measurement.
    #[arg(long, default_value_t = 8)]
    connections: usize,
    /// Measure PostgreSQL on this server (a URL of a database to connect to, as a user
    /// who may create databases) instead of a temporary one on this machine: each run
    /// writes into a new database, dropped at the end. Its CPU is not measured.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// The PostgreSQL server measured: a temporary one, or one the user named.
enum Server {
    Temporary(TempPostgres),
    Named { url: String, made: std::sync::Mutex<Vec<String>> },
}

impl Server {
    /// A new empty database's URL.
    fn database(&self) -> Result<String, String> {
        match self {
            Server::Temporary(server) => server.database().map_err(|e| e.to_string()),
            Server::Named { url, made } => {
                let mut made = made.lock().expect("databases lock");
                let name = format!("bourse_bench_{}_{}", std::process::id(), made.len());
                let created = create_database(url, &name).map_err(|e| format!("{url}: {e}"))?;
                made.push(name);
                Ok(created)
            }
        }
    }

    /// The server's process id, when it runs here and its CPU can be read.
    fn pid(&self) -> Option<u32> {
        match self {
            Server::Temporary(server) => Some(server.pid()),
            Server::Named { .. } => None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Server::Named { url, made } = self {
            for name in made.get_mut().expect("databases lock").iter() {
                if let Err(e) = drop_database(url, name) {
                    progress(format!("could not drop the benchmark's database {name}: {e}"));
                }
            }
        }
    }
}

fn progress(line: String) {
    eprintln!("{line}");
}

/// The ec2020 log as single-command entries from index 1.
fn build_log(commands: u64, seed: u64) -> Vec<LogEntry> {
    let mut market = Market::new(ec_market_spec(), seed);
    let mut engine = Engine::new(EngineConfig::default());
    let mut events: Vec<Event> = Vec::new();
    let mut log: Vec<Command> = Vec::new();
    while let Some(command) = market.next_setup() {
        events.clear();
        engine.apply(&command, &mut events);
        log.push(command);
    }
    let mut generator = Generator::new(market, engine, EC2020, u64::MAX);
    log.extend(generator.generate(commands));
    log.iter()
        .enumerate()
        .map(|(i, command)| LogEntry { index: i as u64 + 1, commands: vec![codec::encode(command)] })
        .collect()
}

/// The recorder alone: rows a second with no database, and the rows of each table.
fn recorder_only(log: &[LogEntry]) -> (u64, f64, Vec<(&'static str, u64)>) {
    let mut recorder = Recorder::new(EngineConfig::default());
    let mut rows = Rows::default();
    let mut total = 0u64;
    let mut tables: Vec<(&'static str, u64)> = Vec::new();
    let mut count = |rows: &Rows| {
        for (k, (table, n)) in rows.table_lens().into_iter().enumerate() {
            match tables.get_mut(k) {
                Some(slot) => slot.1 += n as u64,
                None => tables.push((table, n as u64)),
            }
        }
    };
    let started = Instant::now();
    for entry in log {
        recorder.apply(entry, Some(&mut rows)).expect("the log applies");
        if rows.len() >= 50_000 {
            total += rows.len() as u64;
            count(&rows);
            rows.clear();
        }
    }
    total += rows.len() as u64;
    let seconds = started.elapsed().as_secs_f64();
    count(&rows);
    (total, seconds, tables)
}

/// Figures of one backend's throughput run.
struct Throughput {
    backend: &'static str,
    entries: u64,
    rows: u64,
    seconds: f64,
    /// CPU seconds this process spent (feeding, recording, writing; SQLite runs here).
    cpu_self: f64,
    /// CPU seconds the PostgreSQL server spent (its backend and helpers).
    cpu_server: f64,
    /// CPU seconds of the server's busiest process: its backends run in parallel, so
    /// this bounds the sink's rate on a server with cores to spare.
    cpu_server_busiest: f64,
}

/// Clock ticks per second of /proc's CPU times (USER_HZ: 100 on Linux).
const TICKS_PER_SEC: f64 = 100.0;

/// utime + stime (+ cutime + cstime: children reaped) of a process, in seconds.
fn cpu_of(pid: &str, reaped: bool) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name (which may hold spaces) start after the last ')'.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let field = |k: usize| fields.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // rest[0] is field 3 (state); utime is field 14, stime 15, cutime 16, cstime 17.
    let own = field(11) + field(12);
    (if reaped { own + field(13) + field(14) } else { own }) / TICKS_PER_SEC
}

/// CPU seconds of a server process and its live children plus the children it reaped:
/// a PostgreSQL server's backends, however many came and went.
fn cpu_tree(pid: u32) -> f64 {
    let mut total = cpu_of(&pid.to_string(), true);
    let Ok(processes) = std::fs::read_dir("/proc") else { return total };
    for entry in processes.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if parent == Some(pid) {
            total += cpu_of(&name, true);
        }
    }
    total
}

/// The live children of a process and the CPU seconds each has spent.
fn children_cpu(pid: u32) -> Vec<(u32, f64)> {
    let Ok(processes) = std::fs::read_dir("/proc") else { return Vec::new() };
    let mut out = Vec::new();
    for entry in processes.filter_map(|e| e.ok()) {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(child) = name.parse::<u32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{name}/stat")) else { continue };
        let parent = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if parent == Some(pid) {
            out.push((child, cpu_of(&name, false)));
        }
    }
    out
}

/// Samples the CPU of each child of `pid` until `stop`, and returns the most any one
/// spent while sampled (a backend that exits is counted up to its last sample).
fn busiest_child(pid: u32, stop: &std::sync::atomic::AtomicBool) -> f64 {
    let mut seen: std::collections::HashMap<u32, (f64, f64)> = std::collections::HashMap::new();
    loop {
        for (child, cpu) in children_cpu(pid) {
            seen.entry(child).or_insert((cpu, cpu)).1 = cpu;
        }
        if stop.load(Ordering::Relaxed) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    seen.values().map(|(first, last)| last - first).fold(0.0, f64::max)
}

fn throughput(backend: &'static str, url: &str, log: &[LogEntry], server: Option<u32>) -> Result<Throughput, String> {
    let opened = Opened::open(url).map_err(|e| e.to_string())?;
    let sink = Sink::start(opened, EngineConfig::default(), SinkConfig::default()).map_err(|e| e.to_string())?;
    let status = Arc::clone(&sink.status);
    let sender = sink.sender();
    let head = log.last().map_or(0, |e| e.index);
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = server.map(|pid| {
        let stop = Arc::clone(&stop_sampling);
        std::thread::spawn(move || busiest_child(pid, &stop))
    });
    let (cpu_self_started, cpu_server_started) = (cpu_of("self", false), server.map_or(0.0, cpu_tree));
    let started = Instant::now();
    for chunk in log.chunks(1_024) {
        let feed = Feed::Entries { entries: chunk.to_vec(), head_index: head, head_ts: 0 };
        sender.blocking_send(feed).map_err(|_| "the sink stopped".to_string())?;
    }
    drop(sender);
    // The last write's commit is in the server's processes' CPU before the sink is done.
    let finished = sink.finish().map_err(|e| e.to_string());
    let seconds = started.elapsed().as_secs_f64();
    stop_sampling.store(true, Ordering::Relaxed);
    let cpu_server_busiest = sampler.map_or(0.0, |s| s.join().unwrap_or(0.0));
    finished?;
    let cpu_self = cpu_of("self", false) - cpu_self_started;
    let cpu_server = server.map_or(0.0, cpu_tree) - cpu_server_started;
    Ok(Throughput {
        backend,
        entries: log.len() as u64,
        rows: status.rows_written.load(Ordering::Relaxed),
        seconds,
        cpu_self,
        cpu_server,
        cpu_server_busiest,
    })
}

/// Figures of one backend's lag run.
struct Lag {
    backend: &'static str,
    rate: f64,
    acked: u64,
    throughput: f64,
    lag_entries: Vec<u64>,
    lag_ms: Vec<f64>,
    catch_up_ms: f64,
    rows: u64,
}

fn quantile<T: Copy + PartialOrd>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    Some(sorted[((sorted.len() - 1) as f64 * q).round() as usize])
}

async fn lag(backend: &'static str, url: &str, args: &HistoryArgs) -> Result<Lag, String> {
    let dir = super::closed_loop::scratch_dir("bourse-bench-history-", None)?;
    let config = NodeConfig {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("an address"),
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let following =
        Following::start(vec![node.addr.to_string()], url, SinkConfig::default()).await.map_err(|e| e.to_string())?;
    let status = Arc::clone(&following.status);
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    // The true lag: the node's own applied index and log time against the sink's last
    // transaction (the head a stream reports is as old as the chunk carrying it).
    let sampler = {
        let (status, sampling, metrics) = (Arc::clone(&status), Arc::clone(&sampling), Arc::clone(&node.metrics));
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while sampling.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let (head, head_ts) =
                    (metrics.applied_index.load(Ordering::Acquire), metrics.applied_ts.load(Ordering::Relaxed));
                let (written, written_ts) =
                    (status.written_index.load(Ordering::Acquire), status.written_ts.load(Ordering::Relaxed));
                let entries = head.saturating_sub(written);
                let ms = if entries == 0 { 0.0 } else { head_ts.saturating_sub(written_ts) as f64 / 1e6 };
                samples.push((entries, ms));
            }
            samples
        })
    };
    let load = LoadConfig {
        endpoints: vec![node.addr.to_string()],
        connections: args.connections,
        seconds: args.seconds,
        rate: Some(args.rate),
        seed: args.seed,
        progress: false,
        ..LoadConfig::default()
    };
    let report = run_load(load).await.map_err(|e| e.to_string())?;
    sampling.store(false, Ordering::Relaxed);
    let samples = sampler.await.map_err(|e| e.to_string())?;
    let stopped = Instant::now();
    let target = node.metrics.applied_index.load(Ordering::Acquire);
    while status.written_index.load(Ordering::Acquire) < target {
        if following.is_finished() {
            return Err(format!("the sink stopped: {:?}", status.error.lock().expect("status lock")));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let catch_up_ms = stopped.elapsed().as_secs_f64() * 1e3;
    let rows = status.rows_written.load(Ordering::Relaxed);
    following.stop().await.map_err(|e| e.to_string())?;
    node.shutdown().await.map_err(|e| e.to_string())?;
    let mut lag_entries: Vec<u64> = samples.iter().map(|s| s.0).collect();
    let mut lag_ms: Vec<f64> = samples.iter().map(|s| s.1).collect();
    lag_entries.sort_unstable();
    lag_ms.sort_by(f64::total_cmp);
    Ok(Lag {
        backend,
        rate: args.rate,
        acked: report.acked,
        throughput: report.throughput,
        lag_entries,
        lag_ms,
        catch_up_ms,
        rows,
    })
}

pub fn run(args: &HistoryArgs) -> Result<(), String> {
    let backends: Vec<&'static str> = match args.backend {
        Backend::Sqlite => vec!["sqlite"],
        Backend::Postgres => vec!["postgres"],
        Backend::Both => vec!["sqlite", "postgres"],
    };
    let postgres = match &args.postgres {
        _ if !backends.contains(&"postgres") => None,
        Some(url) => {
            progress(format!("PostgreSQL: the server of {url} (its CPU is not measured)"));
            Some(Server::Named { url: url.clone(), made: Default::default() })
        }
        None => {
            progress("starting a temporary PostgreSQL (initdb, durable settings)".into());
            Some(Server::Temporary(TempPostgres::start_with(true).map_err(|e| format!("PostgreSQL: {e}"))?))
        }
    };
    let scratch = tempfile::Builder::new().prefix("bourse-bench-history-").tempdir().map_err(|e| e.to_string())?;
    let url_for = |backend: &str, name: &str| -> Result<String, String> {
        match backend {
            "sqlite" => Ok(format!("sqlite:{}", scratch.path().join(format!("{name}.sqlite")).display())),
            _ => postgres.as_ref().expect("started").database(),
        }
    };
    progress(format!("generating the ec2020 log: setup, pre-fill and {} commands (seed {})", args.commands, args.seed));
    let log = build_log(args.commands, args.seed);
    let (recorder_rows, recorder_secs, tables) = recorder_only(&log);
    progress(format!(
        "recorder alone: {} entries, {recorder_rows} rows in {recorder_secs:.2} s: {:.0} rows/s, {:.0} entries/s",
        log.len(),
        recorder_rows as f64 / recorder_secs,
        log.len() as f64 / recorder_secs
    ));
    let per_table: Vec<String> = tables.iter().map(|(table, n)| format!("{table} {n}")).collect();
    progress(format!("rows per table: {}", per_table.join(", ")));
    let mut throughputs = Vec::new();
    for backend in &backends {
        let mut runs = Vec::new();
        for round in 1..=args.rounds {
            let url = url_for(backend, &format!("throughput-{round}"))?;
            let server = postgres.as_ref().filter(|_| *backend == "postgres").and_then(Server::pid);
            let t = throughput(backend, &url, &log, server)?;
            progress(format!(
                "{:<8} sink: {} entries, {} rows in {:.2} s: {:.0} rows/s, {:.0} entries/s; {}",
                t.backend,
                t.entries,
                t.rows,
                t.seconds,
                t.rows as f64 / t.seconds,
                t.entries as f64 / t.seconds,
                match (*backend, server) {
                    ("postgres", None) => format!("CPU {:.2} s here (the server's not measured)", t.cpu_self),
                    _ => format!(
                        "CPU {:.2} s here + {:.2} s server: {:.0} rows per CPU second",
                        t.cpu_self,
                        t.cpu_server,
                        t.rows as f64 / (t.cpu_self + t.cpu_server).max(1e-9)
                    ),
                }
            ));
            if server.is_some() {
                progress(format!(
                    "{:<8} sink: the server's busiest process {:.2} CPU s: at most {:.0} entries/s on a server with a core for each",
                    t.backend,
                    t.cpu_server_busiest,
                    t.entries as f64 / t.cpu_server_busiest.max(1e-9)
                ));
            }
            runs.push(t);
        }
        if runs.len() > 1 {
            let median = |figure: &dyn Fn(&Throughput) -> f64| {
                let mut values: Vec<f64> = runs.iter().map(figure).collect();
                values.sort_by(f64::total_cmp);
                values[values.len() / 2]
            };
            let server_cpu = match postgres.as_ref().filter(|_| *backend == "postgres").map(Server::pid) {
                Some(Some(_)) => format!(
                    " + {:.2} s server, busiest server process {:.2} s",
                    median(&|t| t.cpu_server),
                    median(&|t| t.cpu_server_busiest)
                ),
                _ => String::new(),
            };
            progress(format!(
                "{:<8} median of {} runs: {:.0} entries/s, {:.2} CPU s here{server_cpu}",
                backend,
                runs.len(),
                median(&|t| t.entries as f64 / t.seconds),
                median(&|t| t.cpu_self),
            ));
        }
        throughputs.extend(runs);
    }
    drop(log);
    let mut lags = Vec::new();
    if args.rate > 0.0 {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
        for backend in &backends {
            let url = url_for(backend, "lag")?;
            progress(format!("{backend}: node + sink + load at {:.0} commands/s for {} s", args.rate, args.seconds));
            let l = runtime.block_on(lag(backend, &url, args))?;
            progress(format!(
                "{:<8} lag: node acked {} ({:.0}/s); lag entries p50 {} p99 {} max {}; lag ms p50 {:.1} p99 {:.1} max {:.1}; caught up {:.0} ms after the load; {} rows",
                l.backend,
                l.acked,
                l.throughput,
                quantile(&l.lag_entries, 0.5).unwrap_or(0),
                quantile(&l.lag_entries, 0.99).unwrap_or(0),
                l.lag_entries.last().copied().unwrap_or(0),
                quantile(&l.lag_ms, 0.5).unwrap_or(0.0),
                quantile(&l.lag_ms, 0.99).unwrap_or(0.0),
                l.lag_ms.last().copied().unwrap_or(0.0),
                l.catch_up_ms,
                l.rows
            ));
            lags.push(l);
        }
    }
    if args.json {
        let throughput: Vec<serde_json::Value> = throughputs
            .iter()
            .map(|t| {
                serde_json::json!({
                    "backend": t.backend, "entries": t.entries, "rows": t.rows, "seconds": t.seconds,
                    "rows_per_sec": t.rows as f64 / t.seconds, "entries_per_sec": t.entries as f64 / t.seconds,
                    "cpu_seconds": t.cpu_self, "cpu_seconds_server": t.cpu_server,
                    "cpu_seconds_server_busiest_process": t.cpu_server_busiest,
                    "rows_per_cpu_second": t.rows as f64 / (t.cpu_self + t.cpu_server).max(1e-9),
                })
            })
            .collect();
        let lag: Vec<serde_json::Value> = lags
            .iter()
            .map(|l| {
                serde_json::json!({
                    "backend": l.backend, "rate": l.rate, "acked": l.acked, "node_throughput": l.throughput,
                    "lag_entries": {"p50": quantile(&l.lag_entries, 0.5), "p99": quantile(&l.lag_entries, 0.99),
                        "max": l.lag_entries.last()},
                    "lag_ms": {"p50": quantile(&l.lag_ms, 0.5), "p99": quantile(&l.lag_ms, 0.99), "max": l.lag_ms.last()},
                    "catch_up_ms": l.catch_up_ms, "rows": l.rows,
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({
                "bench": "history", "commands": args.commands, "seed": args.seed,
                "recorder": {"rows": recorder_rows, "seconds": recorder_secs, "rows_per_sec": recorder_rows as f64 / recorder_secs},
                "throughput": throughput, "lag": lag,
            })
        );
    }
    Ok(())
}

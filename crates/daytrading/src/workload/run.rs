//! Running a workload and measuring it (see the module above).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::ApiKey;
use bourse_engine::daytrading::DtKind;
use bourse_protocol::proto;
use bourse_protocol::proto::day_trading_client::DayTradingClient;
use hdrhistogram::Histogram;
use rustc_hash::FxHashMap;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use super::parse::{Line, Workload};

/// How commands are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    PerUser,
    Sequential,
}

impl std::str::FromStr for Mode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "per-user" => Ok(Mode::PerUser),
            "sequential" => Ok(Mode::Sequential),
            _ => Err(format!("{text:?}: expected per-user or sequential")),
        }
    }
}

/// A run's settings.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The day-trading service's address.
    pub target: String,
    /// An administrator's key (the driver acts as one); none for an `--open` gateway.
    pub key: Option<ApiKey>,
    pub mode: Mode,
    /// Users with a command outstanding at once, at most (0: all).
    pub concurrency: usize,
    /// Session streams (per-user mode).
    pub streams: usize,
    /// Commands of one user in flight at once (per-user mode; the spec's mode is 1).
    pub window: usize,
    /// Print progress to stderr every second.
    pub progress: bool,
}

impl RunConfig {
    pub fn new(target: impl Into<String>) -> RunConfig {
        RunConfig {
            target: target.into(),
            key: None,
            mode: Mode::PerUser,
            concurrency: 0,
            streams: 4,
            window: 1,
            progress: true,
        }
    }
}

/// One command's latency figures, in µs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Latency {
    pub count: u64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

/// What a run measured.
#[derive(Debug, Default)]
pub struct Report {
    /// Commands answered before the final dump (each with a result or a failure).
    pub commands: u64,
    pub seconds: f64,
    pub tps_avg: f64,
    /// The most commands answered within one second of the run.
    pub tps_peak: u64,
    /// Per command: latency in µs.
    pub latency_us: BTreeMap<&'static str, Latency>,
    /// Logged errors by message.
    pub errors: BTreeMap<String, u64>,
    /// Calls the service could not get into the log, by reason.
    pub failures: BTreeMap<String, u64>,
    /// The final global `DUMPLOG`s' responses.
    pub dumps: Vec<proto::DayTradingResponse>,
    /// Time from the last answer before the dump to the dump's answer (the history
    /// store catching up, then the writing).
    pub dump_seconds: f64,
    pub warnings: Vec<String>,
    pub skipped: Vec<String>,
}

impl Report {
    pub fn json(&self) -> serde_json::Value {
        let latency: serde_json::Map<String, serde_json::Value> = self
            .latency_us
            .iter()
            .map(|(k, l)| {
                let figures = serde_json::json!({"count": l.count, "p50_us": l.p50, "p90_us": l.p90,
                    "p99_us": l.p99, "p999_us": l.p999, "max_us": l.max});
                ((*k).to_owned(), figures)
            })
            .collect();
        let dumps: Vec<serde_json::Value> = self
            .dumps
            .iter()
            .map(|r| {
                let dump = r.dump.clone().unwrap_or_default();
                serde_json::json!({
                    "file": dump.filename, "records": dump.records, "bytes": dump.bytes,
                    "error": r.result.as_ref().map(|x| x.error.clone()).unwrap_or_default(),
                    "failure": r.failure,
                })
            })
            .collect();
        serde_json::json!({
            "commands": self.commands,
            "seconds": self.seconds,
            "tps_avg": self.tps_avg,
            "tps_peak": self.tps_peak,
            "latency": latency,
            "errors": self.errors,
            "failures": self.failures,
            "dumps": dumps,
            "dump_seconds": self.dump_seconds,
            "warnings": self.warnings.len(),
            "skipped": self.skipped.len(),
        })
    }

    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{} commands in {:.3} s: {:.0} per second on average, {} at peak",
            self.commands, self.seconds, self.tps_avg, self.tps_peak
        );
        let _ = writeln!(
            out,
            "{:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency (µs)", "count", "p50", "p90", "p99", "p99.9", "max"
        );
        for (kind, l) in &self.latency_us {
            let _ = writeln!(
                out,
                "{kind:<18} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                l.count, l.p50, l.p90, l.p99, l.p999, l.max
            );
        }
        for (error, n) in &self.errors {
            let _ = writeln!(out, "error {error:?}: {n}");
        }
        for (why, n) in &self.failures {
            let _ = writeln!(out, "FAILED {why:?}: {n}");
        }
        for dump in &self.dumps {
            match (&dump.dump, &dump.result) {
                (Some(d), _) => {
                    let _ = writeln!(out, "DUMPLOG {}: {} records, {} bytes", d.filename, d.records, d.bytes);
                }
                (None, Some(r)) => {
                    let _ = writeln!(out, "DUMPLOG: {}", r.error);
                }
                (None, None) => {
                    let _ = writeln!(out, "DUMPLOG failed: {}", dump.failure);
                }
            }
        }
        let _ = writeln!(out, "dump took {:.3} s after the last command", self.dump_seconds);
        if !self.warnings.is_empty() || !self.skipped.is_empty() {
            let _ = writeln!(out, "{} numbering warnings, {} lines skipped", self.warnings.len(), self.skipped.len());
        }
        out
    }
}

/// Measurements shared by the senders.
struct Meter {
    started: Instant,
    answered: AtomicU64,
    per_second: Mutex<Vec<u64>>,
    latency: Mutex<FxHashMap<DtKind, Histogram<u64>>>,
    errors: Mutex<BTreeMap<String, u64>>,
    failures: Mutex<BTreeMap<String, u64>>,
}

impl Meter {
    fn new() -> Meter {
        Meter {
            started: Instant::now(),
            answered: AtomicU64::new(0),
            per_second: Mutex::new(Vec::new()),
            latency: Mutex::new(FxHashMap::default()),
            errors: Mutex::new(BTreeMap::new()),
            failures: Mutex::new(BTreeMap::new()),
        }
    }

    fn record(&self, kind: DtKind, sent: Instant, response: &proto::DayTradingResponse) {
        let now = Instant::now();
        let micros = now.duration_since(sent).as_micros() as u64;
        {
            let mut latency = self.latency.lock().expect("meter lock");
            let histogram = latency.entry(kind).or_insert_with(|| Histogram::new(3).expect("a histogram"));
            let _ = histogram.record(micros.max(1));
        }
        let second = now.duration_since(self.started).as_secs() as usize;
        {
            let mut per_second = self.per_second.lock().expect("meter lock");
            if per_second.len() <= second {
                per_second.resize(second + 1, 0);
            }
            per_second[second] += 1;
        }
        match &response.result {
            Some(result) if !result.error.is_empty() => {
                *self.errors.lock().expect("meter lock").entry(result.error.clone()).or_default() += 1;
            }
            Some(_) => {}
            None => *self.failures.lock().expect("meter lock").entry(response.failure.clone()).or_default() += 1,
        }
        self.answered.fetch_add(1, Ordering::Relaxed);
    }
}

fn request(index: usize, line: &Line) -> proto::DayTradingRequest {
    proto::DayTradingRequest {
        id: index as u64,
        command: bourse_protocol::daytrading::kind_wire(line.kind),
        args: line.args.clone(),
        transaction_num: line.number,
        caller: String::new(),
    }
}

async fn connect(config: &RunConfig) -> Result<DayTradingClient<Channel>, String> {
    let endpoint =
        if config.target.contains("://") { config.target.clone() } else { format!("http://{}", config.target) };
    let channel = Channel::from_shared(endpoint)
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true)
        .connect()
        .await
        .map_err(|e| format!("{}: {e}", config.target))?;
    Ok(DayTradingClient::new(channel)
        .max_decoding_message_size(crate::MESSAGE_BYTES_MAX)
        .max_encoding_message_size(crate::MESSAGE_BYTES_MAX))
}

fn with_key<T>(config: &RunConfig, message: T) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(key) = &config.key {
        if let Ok(value) = format!("Bearer {}", key.0).parse() {
            request.metadata_mut().insert("authorization", value);
        }
    }
    request
}

/// Replays `workload` and measures it.
pub async fn run(workload: &Workload, config: &RunConfig) -> Result<Report, String> {
    let client = connect(config).await?;
    let (dumps, others): (Vec<usize>, Vec<usize>) =
        (0..workload.lines.len()).partition(|&i| workload.lines[i].is_global_dump());
    let meter = Arc::new(Meter::new());
    let done = Arc::new(AtomicBool::new(false));
    let progress = config.progress.then(|| {
        let (meter, done, total) = (Arc::clone(&meter), Arc::clone(&done), others.len() as u64);
        tokio::spawn(report_progress(meter, done, total))
    });
    match config.mode {
        Mode::Sequential => run_sequential(&client, workload, &others, config, &meter).await?,
        Mode::PerUser => run_per_user(&client, workload, &others, config, &meter).await?,
    }
    let seconds = meter.started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    if let Some(task) = progress {
        let _ = task.await;
    }
    let dump_started = Instant::now();
    let mut dump_responses = Vec::new();
    for &i in &dumps {
        let mut client = client.clone();
        let response =
            client.execute(with_key(config, request(i, &workload.lines[i]))).await.map_err(|e| e.to_string())?;
        dump_responses.push(response.into_inner());
    }
    let dump_seconds = dump_started.elapsed().as_secs_f64();
    Ok(report(&meter, seconds, dump_responses, dump_seconds, workload))
}

fn report(
    meter: &Meter,
    seconds: f64,
    dumps: Vec<proto::DayTradingResponse>,
    dump_seconds: f64,
    workload: &Workload,
) -> Report {
    let commands = meter.answered.load(Ordering::Relaxed);
    let latency_us = meter
        .latency
        .lock()
        .expect("meter lock")
        .iter()
        .map(|(kind, h)| {
            let latency = Latency {
                count: h.len(),
                p50: h.value_at_quantile(0.5),
                p90: h.value_at_quantile(0.9),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
            };
            (kind.name(), latency)
        })
        .collect();
    let per_second = meter.per_second.lock().expect("meter lock");
    Report {
        commands,
        seconds,
        tps_avg: if seconds > 0.0 { commands as f64 / seconds } else { 0.0 },
        tps_peak: per_second.iter().copied().max().unwrap_or(0),
        latency_us,
        errors: meter.errors.lock().expect("meter lock").clone(),
        failures: meter.failures.lock().expect("meter lock").clone(),
        dumps,
        dump_seconds,
        warnings: workload.warnings.clone(),
        skipped: workload.skipped.clone(),
    }
}

async fn report_progress(meter: Arc<Meter>, done: Arc<AtomicBool>, total: u64) {
    let mut last = 0;
    while !done.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let answered = meter.answered.load(Ordering::Relaxed);
        eprintln!(
            "{answered}/{total} commands ({:.1} %), {} in the last second",
            100.0 * answered as f64 / total.max(1) as f64,
            answered - last
        );
        last = answered;
    }
}

/// One command at a time, in number order.
async fn run_sequential(
    client: &DayTradingClient<Channel>,
    workload: &Workload,
    order: &[usize],
    config: &RunConfig,
    meter: &Meter,
) -> Result<(), String> {
    for &i in order {
        let line = &workload.lines[i];
        let sent = Instant::now();
        let mut client = client.clone();
        let response = client.execute(with_key(config, request(i, line))).await.map_err(|e| e.to_string())?;
        meter.record(line.kind, sent, &response.into_inner());
    }
    Ok(())
}

/// Users concurrently, each with one command outstanding, over a few streams.
async fn run_per_user(
    client: &DayTradingClient<Channel>,
    workload: &Workload,
    order: &[usize],
    config: &RunConfig,
    meter: &Arc<Meter>,
) -> Result<(), String> {
    // Each user's commands in number order.
    let mut users: Vec<VecDeque<usize>> = Vec::new();
    let mut by_user: FxHashMap<&str, usize> = FxHashMap::default();
    for &i in order {
        let user = workload.lines[i].user();
        let slot = *by_user.entry(user).or_insert_with(|| {
            users.push(VecDeque::new());
            users.len() - 1
        });
        users[slot].push_back(i);
    }
    let streams = config.streams.max(1).min(users.len().max(1));
    let concurrency = if config.concurrency == 0 { users.len() } else { config.concurrency };
    let per_stream = concurrency.div_ceil(streams).max(1);
    let mut shares: Vec<Vec<VecDeque<usize>>> = vec![Vec::new(); streams];
    for (i, user) in users.into_iter().enumerate() {
        shares[i % streams].push(user);
    }
    let mut tasks = Vec::new();
    let lines: Arc<Vec<Line>> = Arc::new(workload.lines.clone());
    for share in shares {
        let (client, config, meter, lines) = (client.clone(), config.clone(), Arc::clone(meter), Arc::clone(&lines));
        tasks.push(tokio::spawn(async move { run_stream(client, config, meter, lines, share, per_stream).await }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One stream's users: the first `active_max` start, each next user when one finishes;
/// each user has up to `window` commands in flight (the service keeps a user's commands
/// in order: one lane and one upstream session per user).
async fn run_stream(
    mut client: DayTradingClient<Channel>,
    config: RunConfig,
    meter: Arc<Meter>,
    lines: Arc<Vec<Line>>,
    users: Vec<VecDeque<usize>>,
    active_max: usize,
) -> Result<(), String> {
    let (sender, receiver) = mpsc::unbounded_channel::<proto::DayTradingRequests>();
    let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
    let mut inbound = client.session(with_key(&config, outbound)).await.map_err(|e| e.to_string())?.into_inner();
    let window = config.window.max(1);
    let mut stream = StreamState {
        users,
        in_flight: Vec::new(),
        outstanding: FxHashMap::default(),
        batch: Vec::new(),
        lines: &lines,
        window,
    };
    stream.in_flight = vec![0; stream.users.len()];
    let mut waiting: VecDeque<usize> = (0..stream.users.len()).collect();
    let mut active = 0;
    while active < active_max {
        let Some(slot) = waiting.pop_front() else { break };
        if stream.fill(slot) {
            active += 1;
        }
    }
    if !stream.batch.is_empty() {
        let _ = sender.send(proto::DayTradingRequests { requests: std::mem::take(&mut stream.batch) });
    }
    while active > 0 {
        let message = inbound.message().await.map_err(|e| e.to_string())?;
        let Some(responses) = message else { return Err("the service ended the stream".into()) };
        for response in responses.responses {
            let Some((slot, sent)) = stream.outstanding.remove(&response.id) else { continue };
            meter.record(lines[response.id as usize].kind, sent, &response);
            stream.in_flight[slot] -= 1;
            stream.fill(slot);
            if stream.in_flight[slot] == 0 {
                // The user is done: the next one starts.
                active -= 1;
                while let Some(next) = waiting.pop_front() {
                    if stream.fill(next) {
                        active += 1;
                        break;
                    }
                }
            }
        }
        if !stream.batch.is_empty() {
            let _ = sender.send(proto::DayTradingRequests { requests: std::mem::take(&mut stream.batch) });
        }
    }
    Ok(())
}

/// What one stream has sent and not had answered.
struct StreamState<'a> {
    /// Each user's commands not yet sent, in number order.
    users: Vec<VecDeque<usize>>,
    /// Each user's commands sent and not answered.
    in_flight: Vec<usize>,
    /// Line index → (user slot, sent at).
    outstanding: FxHashMap<u64, (usize, Instant)>,
    batch: Vec<proto::DayTradingRequest>,
    lines: &'a [Line],
    window: usize,
}

impl StreamState<'_> {
    /// Sends the user's next commands up to the window; whether any is in flight.
    fn fill(&mut self, slot: usize) -> bool {
        while self.in_flight[slot] < self.window {
            let Some(i) = self.users[slot].pop_front() else { break };
            self.batch.push(request(i, &self.lines[i]));
            self.outstanding.insert(i as u64, (slot, Instant::now()));
            self.in_flight[slot] += 1;
        }
        self.in_flight[slot] > 0
    }
}

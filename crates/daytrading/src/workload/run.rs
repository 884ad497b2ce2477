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
use super::wire::{self, EncodedRequests};

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

/// Measurements shared by the senders: each sender keeps its own [`Tally`] and hands
/// it in when done; `answered` counts as they go (for the progress line).
struct Meter {
    started: Instant,
    answered: AtomicU64,
    tallies: Mutex<Vec<Tally>>,
}

impl Meter {
    fn new() -> Meter {
        Meter { started: Instant::now(), answered: AtomicU64::new(0), tallies: Mutex::new(Vec::new()) }
    }

    /// Every sender's tally, merged.
    fn tally(&self) -> Tally {
        let mut all = Tally::default();
        for tally in self.tallies.lock().expect("meter lock").iter() {
            all.merge(tally);
        }
        all
    }
}

/// What one sender measured.
#[derive(Default)]
struct Tally {
    /// By the kind's code.
    latency: Vec<Option<Histogram<u64>>>,
    /// Answers by the second of the run they came in.
    per_second: Vec<u64>,
    errors: BTreeMap<String, u64>,
    failures: BTreeMap<String, u64>,
}

impl Tally {
    /// One answer: a result (`Some` error text, empty when it succeeded) or a failure.
    fn record(
        &mut self,
        started: Instant,
        kind: DtKind,
        sent: Instant,
        now: Instant,
        error: Option<&str>,
        failure: &str,
    ) {
        let micros = now.saturating_duration_since(sent).as_micros() as u64;
        let code = usize::from(kind.code());
        if self.latency.len() <= code {
            self.latency.resize_with(code + 1, || None);
        }
        let histogram = self.latency[code].get_or_insert_with(|| Histogram::new(3).expect("a histogram"));
        let _ = histogram.record(micros.max(1));
        let second = now.saturating_duration_since(started).as_secs() as usize;
        if self.per_second.len() <= second {
            self.per_second.resize(second + 1, 0);
        }
        self.per_second[second] += 1;
        match error {
            Some("") => {}
            Some(error) => count(&mut self.errors, error, 1),
            None => count(&mut self.failures, failure, 1),
        }
    }

    fn merge(&mut self, other: &Tally) {
        if self.latency.len() < other.latency.len() {
            self.latency.resize_with(other.latency.len(), || None);
        }
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            match (mine.as_mut(), theirs) {
                (Some(mine), Some(theirs)) => mine.add(theirs).expect("histograms of one shape"),
                (None, Some(theirs)) => *mine = Some(theirs.clone()),
                (_, None) => {}
            }
        }
        if self.per_second.len() < other.per_second.len() {
            self.per_second.resize(other.per_second.len(), 0);
        }
        for (mine, theirs) in self.per_second.iter_mut().zip(&other.per_second) {
            *mine += theirs;
        }
        for (error, n) in &other.errors {
            count(&mut self.errors, error, *n);
        }
        for (why, n) in &other.failures {
            count(&mut self.failures, why, *n);
        }
    }
}

/// Adds `n` to `text`'s count (allocating only for a text not seen before).
fn count(counts: &mut BTreeMap<String, u64>, text: &str, n: u64) {
    match counts.get_mut(text) {
        Some(count) => *count += n,
        None => {
            counts.insert(text.to_owned(), n);
        }
    }
}

pub(super) fn request(index: usize, line: &Line) -> proto::DayTradingRequest {
    proto::DayTradingRequest {
        id: index as u64,
        command: bourse_protocol::daytrading::kind_wire(line.kind),
        args: line.args.clone(),
        transaction_num: line.number,
        caller: String::new(),
    }
}

async fn connect(config: &RunConfig) -> Result<Channel, String> {
    let endpoint =
        if config.target.contains("://") { config.target.clone() } else { format!("http://{}", config.target) };
    // Frames of up to a megabyte from the service: a message of 4,096 answers (about
    // 300 KB) then comes as one DATA frame rather than twenty of HTTP/2's default 16 KiB,
    // within a window that does not stop it half-way for a WINDOW_UPDATE.
    Channel::from_shared(endpoint)
        .map_err(|e| e.to_string())?
        .tcp_nodelay(true)
        .max_frame_size(crate::FRAME_BYTES_MAX)
        .initial_stream_window_size(crate::WINDOW_BYTES)
        .initial_connection_window_size(4 * crate::WINDOW_BYTES)
        .connect()
        .await
        .map_err(|e| format!("{}: {e}", config.target))
}

fn client(channel: Channel) -> DayTradingClient<Channel> {
    DayTradingClient::new(channel)
        .max_decoding_message_size(crate::MESSAGE_BYTES_MAX)
        .max_encoding_message_size(crate::MESSAGE_BYTES_MAX)
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
    let channel = connect(config).await?;
    let client = client(channel.clone());
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
        Mode::PerUser => run_per_user(&channel, workload, &others, config, &meter).await?,
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
    let tally = meter.tally();
    let latency_us = DtKind::ALL
        .iter()
        .filter_map(|kind| {
            let h = tally.latency.get(usize::from(kind.code()))?.as_ref()?;
            let latency = Latency {
                count: h.len(),
                p50: h.value_at_quantile(0.5),
                p90: h.value_at_quantile(0.9),
                p99: h.value_at_quantile(0.99),
                p999: h.value_at_quantile(0.999),
                max: h.max(),
            };
            Some((kind.name(), latency))
        })
        .collect();
    Report {
        commands,
        seconds,
        tps_avg: if seconds > 0.0 { commands as f64 / seconds } else { 0.0 },
        tps_peak: tally.per_second.iter().copied().max().unwrap_or(0),
        latency_us,
        errors: tally.errors,
        failures: tally.failures,
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
    let mut tally = Tally::default();
    let mut outcome = Ok(());
    for &i in order {
        let line = &workload.lines[i];
        let sent = Instant::now();
        let mut client = client.clone();
        let response = match client.execute(with_key(config, request(i, line))).await {
            Ok(response) => response.into_inner(),
            Err(e) => {
                outcome = Err(e.to_string());
                break;
            }
        };
        let error = response.result.as_ref().map(|r| r.error.as_str());
        tally.record(meter.started, line.kind, sent, Instant::now(), error, &response.failure);
        meter.answered.fetch_add(1, Ordering::Relaxed);
    }
    meter.tallies.lock().expect("meter lock").push(tally);
    outcome
}

/// Users concurrently, each with one command outstanding, over a few streams.
async fn run_per_user(
    channel: &Channel,
    workload: &Workload,
    order: &[usize],
    config: &RunConfig,
    meter: &Arc<Meter>,
) -> Result<(), String> {
    // Each user's commands in number order, encoded (in one walk of the lines, in the
    // order they lie in memory). A command's id is its user's index (high half) and
    // its place among the user's commands (low half).
    let mut users: Vec<User> = Vec::new();
    let mut by_user: FxHashMap<&str, usize> = FxHashMap::default();
    for &i in order {
        let line = &workload.lines[i];
        let user = *by_user.entry(line.user()).or_insert_with(|| {
            users.push(User::default());
            users.len() - 1
        });
        users[user].push(user, line)?;
    }
    let streams = config.streams.max(1).min(users.len().max(1));
    let concurrency = if config.concurrency == 0 { users.len() } else { config.concurrency };
    let per_stream = concurrency.div_ceil(streams).max(1);
    let mut shares: Vec<Vec<User>> = (0..streams).map(|_| Vec::new()).collect();
    for (i, user) in users.into_iter().enumerate() {
        shares[i % streams].push(user);
    }
    let mut tasks = Vec::new();
    for (at, share) in shares.into_iter().enumerate() {
        let (channel, config, meter) = (channel.clone(), config.clone(), Arc::clone(meter));
        let place = (at, streams);
        tasks.push(tokio::spawn(async move { run_stream(channel, config, meter, share, place, per_stream).await }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())??;
    }
    Ok(())
}

/// One stream's users: the first `active_max` start, each next user when one finishes;
/// each user has up to `window` commands in flight (the service keeps a user's commands
/// in order: one lane and one upstream session per user). A command's latency runs
/// from just before its batch is handed to the stream to the arrival of the message
/// with its answer.
async fn run_stream(
    channel: Channel,
    config: RunConfig,
    meter: Arc<Meter>,
    users: Vec<User>,
    (at, streams): (usize, usize),
    active_max: usize,
) -> Result<(), String> {
    let (sender, receiver) = mpsc::unbounded_channel::<EncodedRequests>();
    let outbound = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
    let mut inbound = wire::session(channel, with_key(&config, outbound)).await.map_err(|e| e.to_string())?;
    let mut stream =
        StreamState { users, at, streams, batch: Vec::new(), batched: Vec::new(), window: config.window.max(1) };
    let mut tally = Tally::default();
    let mut waiting: VecDeque<usize> = (0..stream.users.len()).collect();
    let mut active = 0;
    while active < active_max {
        let Some(slot) = waiting.pop_front() else { break };
        if stream.fill(slot) {
            active += 1;
        }
    }
    stream.flush(&sender);
    while active > 0 {
        let message = inbound.message().await.map_err(|e| e.to_string())?;
        let Some(answers) = message else { return Err("the service ended the stream".into()) };
        let now = Instant::now();
        let mut answered = 0;
        for answer in answers.responses {
            let Some((slot, kind, sent)) = stream.answered(answer.id) else { continue };
            let error = answer.result.as_ref().map(|r| r.error.as_str());
            tally.record(meter.started, kind, sent, now, error, &answer.failure);
            answered += 1;
            stream.users[slot].in_flight -= 1;
            stream.fill(slot);
            if stream.users[slot].in_flight == 0 {
                // The user is done: the next one starts.
                active -= 1;
                stream.users[slot].done();
                while let Some(next) = waiting.pop_front() {
                    if stream.fill(next) {
                        active += 1;
                        break;
                    }
                }
            }
        }
        meter.answered.fetch_add(answered, Ordering::Relaxed);
        stream.flush(&sender);
    }
    meter.tallies.lock().expect("meter lock").push(tally);
    Ok(())
}

/// One user's commands, in number order, already encoded.
#[derive(Default)]
struct User {
    /// The encoded requests, back to back.
    encoded: Vec<u8>,
    commands: Vec<Command>,
    /// Commands sent so far.
    sent: usize,
    /// Sent and not answered.
    in_flight: usize,
}

struct Command {
    kind: DtKind,
    /// Where its encoding ends in `User::encoded` (it starts where the previous ends).
    end: u32,
    /// When it was sent, until it is answered.
    sent: Option<Instant>,
}

impl User {
    /// Appends the line as the command of user number `user` it is.
    fn push(&mut self, user: usize, line: &Line) -> Result<(), String> {
        let too_many = || format!("user {}: too many commands", line.user());
        let index = u32::try_from(self.commands.len()).map_err(|_| too_many())?;
        let user = u32::try_from(user).map_err(|_| "too many users".to_owned())?;
        wire::encode_request(u64::from(user) << 32 | u64::from(index), line, &mut self.encoded);
        let end = u32::try_from(self.encoded.len()).map_err(|_| too_many())?;
        self.commands.push(Command { kind: line.kind, end, sent: None });
        Ok(())
    }

    /// Frees what is no longer needed once every command was answered.
    fn done(&mut self) {
        self.encoded = Vec::new();
        self.commands = Vec::new();
    }
}

/// One stream's users (those whose number is `at` modulo `streams`, user `at + k *
/// streams` in slot `k`) and what it has sent and not had answered.
struct StreamState {
    users: Vec<User>,
    at: usize,
    streams: usize,
    /// The next `DayTradingRequests` message.
    batch: Vec<u8>,
    /// Its commands: (user slot, command index).
    batched: Vec<(u32, u32)>,
    window: usize,
}

impl StreamState {
    /// Batches the user's next commands up to the window; whether any is in flight.
    fn fill(&mut self, slot: usize) -> bool {
        let user = &mut self.users[slot];
        while user.in_flight < self.window && user.sent < user.commands.len() {
            let start = if user.sent == 0 { 0 } else { user.commands[user.sent - 1].end as usize };
            let end = user.commands[user.sent].end as usize;
            self.batch.extend_from_slice(&user.encoded[start..end]);
            self.batched.push((slot as u32, user.sent as u32));
            user.sent += 1;
            user.in_flight += 1;
        }
        user.in_flight > 0
    }

    /// Sends the batch, if any, stamping its commands' send time.
    fn flush(&mut self, sender: &mpsc::UnboundedSender<EncodedRequests>) {
        if self.batched.is_empty() {
            return;
        }
        let sent = Instant::now();
        for (slot, index) in self.batched.drain(..) {
            self.users[slot as usize].commands[index as usize].sent = Some(sent);
        }
        let next = Vec::with_capacity(self.batch.len());
        let batch = std::mem::replace(&mut self.batch, next);
        let _ = sender.send(EncodedRequests(batch));
    }

    /// The command an answer is for, if it is one of this stream's in flight: its user
    /// slot, kind and send time.
    fn answered(&mut self, id: u64) -> Option<(usize, DtKind, Instant)> {
        let user = usize::try_from(id >> 32).ok()?;
        if user % self.streams != self.at {
            return None;
        }
        let slot = user / self.streams;
        let command = self.users.get_mut(slot)?.commands.get_mut((id & 0xffff_ffff) as usize)?;
        let sent = command.sent.take()?;
        Some((slot, command.kind, sent))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand_chacha::rand_core::{RngCore, SeedableRng};

    /// Answers spread over several tallies and merged report what one tally of them all
    /// reports: the same percentiles, per-second counts, errors and failures.
    #[test]
    fn prop_merged_tallies_are_one_tally() {
        let started = Instant::now();
        for seed in 1..=20u64 {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut next = move || rng.next_u64();
            let parts = 1 + (next() % 5) as usize;
            let mut one = Tally::default();
            let mut many: Vec<Tally> = (0..parts).map(|_| Tally::default()).collect();
            for _ in 0..2_000 {
                let kind = DtKind::ALL[(next() % 16) as usize];
                let sent = started + Duration::from_micros(next() % 5_000_000);
                let now = sent + Duration::from_micros(next() % 3_000_000);
                let (error, failure) = match next() % 4 {
                    0 => (Some(""), ""),
                    1 => (Some("insufficient shares"), ""),
                    2 => (Some(["no pending buy", "invalid amount"][(next() % 2) as usize]), ""),
                    _ => (None, "the exchange is unreachable"),
                };
                one.record(started, kind, sent, now, error, failure);
                many[(next() % parts as u64) as usize].record(started, kind, sent, now, error, failure);
            }
            let mut merged = Tally::default();
            for tally in &many {
                merged.merge(tally);
            }
            // count, p50, p99, min, max of each kind's histogram.
            let figures = |t: &Tally| -> Vec<Option<[u64; 5]>> {
                (0..=16)
                    .map(|code| {
                        let h = t.latency.get(code)?.as_ref()?;
                        Some([h.len(), h.value_at_quantile(0.5), h.value_at_quantile(0.99), h.min(), h.max()])
                    })
                    .collect()
            };
            assert_eq!(figures(&merged), figures(&one), "seed {seed}");
            assert_eq!(merged.per_second, one.per_second, "seed {seed}");
            assert_eq!(merged.errors, one.errors, "seed {seed}");
            assert_eq!(merged.failures, one.failures, "seed {seed}");
            assert_eq!(one.per_second.iter().sum::<u64>(), 2_000);
        }
    }
}

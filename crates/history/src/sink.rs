//! The sink: committed log entries in, history rows out, exactly once.
//!
//! ```text
//! source (gRPC follower, log files) ──(bounded queue of chunks)──▶ recorder thread
//!   (engine copy: entries → rows, batched) ──(bounded queue of batches)──▶ writer thread
//!   (one transaction per batch: rows + progress [+ engine snapshot])
//! ```
//!
//! Exactly once: the progress row (last index applied) is written in the same
//! transaction as the rows of the entries up to it. On start the sink reads it back with
//! the engine snapshot saved beside it (taken at an index at or below the progress),
//! restores the engine there, asks its source for the entries after the snapshot, and
//! applies those up to the progress without writing rows again. Rows also have keys
//! derived from the log, so even a second writer of the same log could not duplicate one.
//!
//! Bounds: [`SinkConfig`] names the queue sizes, the rows per transaction and the
//! snapshot interval. A full queue slows the source (the gRPC stream is read more slowly;
//! the member's log is on disk, so nothing on the member waits).
//!
//! Lag: [`SinkStatus`] holds the member's head (index and log time of its last command,
//! as the source reports it) and the sink's written progress; their difference is the
//! lag, exported by [`SinkStatus::render`] and logged when it grows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bourse_engine::EngineConfig;
use tokio::sync::mpsc;

use crate::pace::{Pacer, Yield};
use crate::recorder::{LogEntry, RecordError, Recorder};
use crate::rows::Rows;
use crate::store::{Progress, Saved, Store, StoreError};

/// Bounds and intervals of a sink.
#[derive(Clone, Debug)]
pub struct SinkConfig {
    /// Chunks of entries waiting for the recorder.
    pub queue_chunks_max: usize,
    /// Batches waiting for the writer.
    pub queue_batches_max: usize,
    /// Rows in one batch of the recorder, at most (a batch is cut after the entry that
    /// passes it).
    pub batch_rows_max: usize,
    /// Rows in one transaction, at most: a writer behind the recorder joins the batches
    /// waiting for it up to this many rows. Each commit writes every B-tree page it
    /// touched to the WAL (most of them the same pages, a leaf per live order, account
    /// and asset, batch after batch), so a larger transaction writes fewer pages per
    /// row: from 100,000 to 400,000 rows, the SQLite writer spends about a sixth less
    /// CPU per row (docs/BENCHMARKS.md). Memory stays bounded by the batch queue.
    pub transaction_rows_max: usize,
    /// Save the engine snapshot with the progress at least this often (entries) ...
    pub snapshot_every_entries: u64,
    /// ... or this often (seconds), whichever comes first.
    pub snapshot_every_secs: u64,
    /// The writer commits at most this often (milliseconds): the batches that arrive
    /// meanwhile join the next transaction (up to `transaction_rows_max` rows). Each commit
    /// writes every B-tree page it touched to the WAL, so at a modest rate (one small
    /// batch per log chunk) fewer, larger transactions cost the writer much less; the
    /// store lags the log by at most this much more. 0: commit whatever is there.
    pub commit_every_ms: u64,
    /// Run the recorder and the writer, and the threads they start (the store's
    /// checkpointer and PostgreSQL part writers), under `SCHED_IDLE`: they take only CPU
    /// time nothing else wants. For a sink in the process of a node that trades (`bourse
    /// serve`, `bourse demo`): the history then never slows trading; under load its lag
    /// grows (a metric), and it catches up when load falls. Its queues stay bounded, and
    /// a member's log is on disk, so a sink that waits holds nothing back on the node.
    pub background: bool,
    /// Yield to a busy exchange (`pace`): while the log grows fast, the sink takes only a
    /// bounded share of the time, and catches up when it slows.
    pub yield_to: Option<Yield>,
}

impl Default for SinkConfig {
    fn default() -> Self {
        SinkConfig {
            queue_chunks_max: 8,
            queue_batches_max: 4,
            batch_rows_max: 100_000,
            transaction_rows_max: 400_000,
            snapshot_every_entries: 1_000_000,
            snapshot_every_secs: 60,
            commit_every_ms: 100,
            background: false,
            yield_to: None,
        }
    }
}

/// Puts the calling thread under `SCHED_IDLE` (threads it starts inherit it). Lowering
/// a thread's priority needs no privilege; where it is refused anyway the sink runs at
/// ordinary priority and says so.
fn run_in_background() {
    #[cfg(target_os = "linux")]
    {
        use thread_priority::{
            set_thread_priority_and_policy, thread_native_id, NormalThreadSchedulePolicy, ThreadPriority,
            ThreadSchedulePolicy,
        };
        let idle = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Idle);
        if let Err(error) = set_thread_priority_and_policy(thread_native_id(), ThreadPriority::Min, idle) {
            tracing::warn!(?error, "the history sink could not lower its priority: it competes with trading for CPU");
        }
    }
}

/// Why a sink stopped.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("history store: {0}")]
    Store(#[from] StoreError),
    #[error("{0}")]
    Record(#[from] RecordError),
    #[error("source: {0}")]
    Source(String),
}

/// Where a sink stands and where its source is; shared with metrics and tests.
#[derive(Debug, Default)]
pub struct SinkStatus {
    /// Last entry whose rows are committed in the store.
    pub written_index: AtomicU64,
    /// Log time of its last command.
    pub written_ts: AtomicU64,
    /// The member's committed index and log time, as last reported by the source (as old
    /// as the chunk that carried it: queues are short so that it stays fresh).
    pub head_index: AtomicU64,
    pub head_ts: AtomicU64,
    pub rows_written: AtomicU64,
    pub batches_written: AtomicU64,
    pub entries_applied: AtomicU64,
    /// Times the source reconnected (to the same or another member).
    pub reconnects: AtomicU64,
    /// The first index whose rows the store holds.
    pub begins_at: AtomicU64,
    /// Time the sink's threads rested to yield to a busy exchange, in nanoseconds.
    pub yielded_ns: AtomicU64,
    /// The sink stopped on an error (it is in `error`).
    pub failed: AtomicBool,
    pub error: Mutex<Option<String>>,
}

impl SinkStatus {
    /// Entries the store is behind the member.
    pub fn lag_entries(&self) -> u64 {
        self.head_index.load(Ordering::Relaxed).saturating_sub(self.written_index.load(Ordering::Relaxed))
    }

    /// Log time the store is behind the member, in nanoseconds.
    pub fn lag_ns(&self) -> u64 {
        if self.lag_entries() == 0 {
            return 0;
        }
        self.head_ts.load(Ordering::Relaxed).saturating_sub(self.written_ts.load(Ordering::Relaxed))
    }

    /// Prometheus text.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let mut metric = |name: &str, help: &str, kind: &str, value: String| {
            let _ = writeln!(out, "# HELP bourse_history_{name} {help}\n# TYPE bourse_history_{name} {kind}\nbourse_history_{name} {value}");
        };
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed).to_string();
        metric("written_index", "Last log index whose rows are committed.", "gauge", load(&self.written_index));
        metric("head_index", "The followed member's committed index.", "gauge", load(&self.head_index));
        metric("lag_entries", "Log entries the history is behind.", "gauge", self.lag_entries().to_string());
        metric(
            "lag_seconds",
            "Log time the history is behind.",
            "gauge",
            format!("{:.6}", self.lag_ns() as f64 * 1e-9),
        );
        metric("rows_written_total", "Rows written.", "counter", load(&self.rows_written));
        metric("batches_written_total", "Transactions committed.", "counter", load(&self.batches_written));
        metric(
            "entries_applied_total",
            "Log entries applied by the sink's engine.",
            "counter",
            load(&self.entries_applied),
        );
        metric("reconnects_total", "Times the log stream was opened again.", "counter", load(&self.reconnects));
        metric(
            "yielded_seconds_total",
            "Time the sink's threads rested to yield to a busy exchange.",
            "counter",
            format!("{:.3}", self.yielded_ns.load(Ordering::Relaxed) as f64 * 1e-9),
        );
        metric("begins_at", "First log index whose rows are held.", "gauge", load(&self.begins_at));
        metric(
            "failed",
            "1 when the sink stopped on an error.",
            "gauge",
            u64::from(self.failed.load(Ordering::Relaxed)).to_string(),
        );
        out
    }

    fn fail(&self, error: &SinkError) {
        tracing::error!(%error, "history sink stopped");
        *self.error.lock().expect("status lock") = Some(error.to_string());
        self.failed.store(true, Ordering::Release);
    }
}

/// What a source hands the sink.
#[derive(Debug)]
pub enum Feed {
    /// Consecutive entries, and the member's head when they were read.
    Entries { entries: Vec<LogEntry>, head_index: u64, head_ts: u64 },
    /// Only the head moved (or a heartbeat).
    Head { head_index: u64, head_ts: u64 },
}

/// A store opened for a sink, and where its source must start.
pub struct Opened {
    pub store: Store,
    pub saved: Option<Saved>,
    /// The saved snapshot is not in the database yet (a history that begins at a
    /// snapshot): the first batch writes it.
    snapshot_unsaved: bool,
}

impl Opened {
    pub fn open(url: &str) -> Result<Opened, SinkError> {
        let mut store = Store::open(url)?;
        let saved = store.saved()?;
        Ok(Opened { store, saved, snapshot_unsaved: false })
    }

    /// The first index the source must deliver: after the saved snapshot, or from the
    /// start of the log.
    pub fn from_index(&self) -> u64 {
        match &self.saved {
            Some(Saved { snapshot: Some((index, _)), .. }) => index + 1,
            _ => 0,
        }
    }

    /// Starts an empty database's history after `index`, from the engine snapshot taken
    /// there (the log before it is no longer held): `begins_at` records it.
    pub fn begin_at_snapshot(&mut self, index: u64, snapshot: Vec<u8>) {
        let progress = Progress { applied_index: index, applied_ts: 0, begins_at: index + 1 };
        self.saved = Some(Saved { progress, snapshot: Some((index, snapshot)) });
        self.snapshot_unsaved = true;
    }

    /// The member no longer holds the entries after this store's own snapshot and sent
    /// one of its snapshots instead (taken after entry `index`). An empty history begins
    /// there; a history written through `index` or further restores its engine from it
    /// and replays up to its progress without writing; a history written through less
    /// would have a hole, which is an error.
    pub fn start_at_member_snapshot(&mut self, index: u64, snapshot: Vec<u8>) -> Result<(), SinkError> {
        match &mut self.saved {
            None => {
                tracing::warn!(
                    begins_at = index + 1,
                    "the member no longer holds the log's start: this history begins after its snapshot"
                );
                self.begin_at_snapshot(index, snapshot);
                Ok(())
            }
            Some(saved) if index <= saved.progress.applied_index => {
                tracing::info!(index, "resuming from the member's snapshot (the log after this store's is pruned)");
                saved.snapshot = Some((index, snapshot));
                self.snapshot_unsaved = true;
                Ok(())
            }
            Some(saved) => Err(SinkError::Source(format!(
                "history written through log index {}, but the member holds nothing between it and its snapshot at {index}; \
                 history never skips a gap",
                saved.progress.applied_index
            ))),
        }
    }

    /// Entries up to this index are already written (replayed without rows).
    pub fn written_through(&self) -> Option<u64> {
        self.saved.as_ref().map(|s| s.progress.applied_index)
    }
}

/// A running sink: feed it with [`Sink::sender`].
pub struct Sink {
    sender: mpsc::Sender<Feed>,
    recorder: JoinHandle<Result<(), SinkError>>,
    writer: JoinHandle<Result<(), SinkError>>,
    pub status: Arc<SinkStatus>,
}

impl Sink {
    /// Starts the recorder and writer threads on `opened`. `engine` is the bounds the
    /// log was written under (the member reports them), used when there is no snapshot.
    pub fn start(opened: Opened, engine: EngineConfig, config: SinkConfig) -> Result<Sink, SinkError> {
        let Opened { store, saved, snapshot_unsaved } = opened;
        let status = Arc::new(SinkStatus::default());
        let (recorder, begins_at, written_through) = match &saved {
            Some(Saved { progress, snapshot: Some((index, bytes)) }) => {
                (Recorder::restore(*index, bytes)?, progress.begins_at, Some(progress.applied_index))
            }
            Some(Saved { progress, snapshot: None }) => {
                (Recorder::new(engine), progress.begins_at, Some(progress.applied_index))
            }
            None => (Recorder::new(engine), 0, None),
        };
        if let Some(progress) = saved.as_ref().map(|s| s.progress) {
            status.written_index.store(progress.applied_index, Ordering::Relaxed);
            status.written_ts.store(progress.applied_ts, Ordering::Relaxed);
        }
        status.begins_at.store(begins_at, Ordering::Relaxed);
        let (sender, chunks) = mpsc::channel(config.queue_chunks_max.max(1));
        let (batches_sender, batches) = std::sync::mpsc::sync_channel(config.queue_batches_max.max(1));
        let writer_status = Arc::clone(&status);
        let (commit_every, rows_max) =
            (Duration::from_millis(config.commit_every_ms), config.transaction_rows_max.max(config.batch_rows_max));
        let background = config.background;
        let pacer = config.yield_to.clone().map(|to| Arc::new(Pacer::new(to)));
        let writer_pacer = pacer.clone();
        let writer = std::thread::Builder::new()
            .name("history-writer".into())
            .spawn(move || {
                if background {
                    run_in_background();
                }
                let pacer = writer_pacer.as_deref();
                let result = write_loop(store, batches, &writer_status, commit_every, rows_max, pacer);
                if let Err(error) = &result {
                    writer_status.fail(error);
                }
                result
            })
            .map_err(|e| SinkError::Source(e.to_string()))?;
        let recorder_status = Arc::clone(&status);
        let recording = Recording {
            recorder,
            config,
            written_through,
            begins_at,
            snapshot_unsaved,
            status: Arc::clone(&status),
            pacer,
        };
        let recorder = std::thread::Builder::new()
            .name("history-recorder".into())
            .spawn(move || {
                if background {
                    run_in_background();
                }
                let result = recording.run(chunks, batches_sender);
                if let Err(error) = &result {
                    recorder_status.fail(error);
                }
                result
            })
            .map_err(|e| SinkError::Source(e.to_string()))?;
        Ok(Sink { sender, recorder, writer, status })
    }

    /// Where a source sends entries; dropping every sender ends the sink after it has
    /// written what it got.
    pub fn sender(&self) -> mpsc::Sender<Feed> {
        self.sender.clone()
    }

    /// Drops this handle's sender and waits until everything received is written.
    pub fn finish(self) -> Result<(), SinkError> {
        drop(self.sender);
        let recorded = self.recorder.join().unwrap_or_else(|_| Err(SinkError::Source("recorder panicked".into())));
        let written = self.writer.join().unwrap_or_else(|_| Err(SinkError::Source("writer panicked".into())));
        recorded.and(written)
    }
}

/// One transaction's worth.
struct Batch {
    rows: Rows,
    progress: Progress,
    snapshot: Option<(u64, Vec<u8>)>,
}

struct Recording {
    recorder: Recorder,
    config: SinkConfig,
    written_through: Option<u64>,
    begins_at: u64,
    snapshot_unsaved: bool,
    status: Arc<SinkStatus>,
    pacer: Option<Arc<Pacer>>,
}

impl Recording {
    fn run(
        mut self,
        mut chunks: mpsc::Receiver<Feed>,
        batches: std::sync::mpsc::SyncSender<Batch>,
    ) -> Result<(), SinkError> {
        let mut rows = Rows::default();
        let mut dirty = false;
        let mut snapshot_entries = 0u64;
        let mut snapshot_at = Instant::now();
        let mut logged_at = Instant::now();
        while let Some(mut feed) = chunks.blocking_recv() {
            loop {
                let started = Instant::now();
                dirty |= self.take(feed, &mut rows, &mut snapshot_entries)?;
                yield_after(self.pacer.as_deref(), started, &self.status);
                if rows.len() >= self.config.batch_rows_max {
                    break;
                }
                match chunks.try_recv() {
                    Ok(next) => feed = next,
                    Err(_) => break,
                }
            }
            if !dirty {
                continue;
            }
            let snapshot_due = std::mem::take(&mut self.snapshot_unsaved)
                || snapshot_entries >= self.config.snapshot_every_entries
                || snapshot_at.elapsed() >= Duration::from_secs(self.config.snapshot_every_secs);
            let snapshot = snapshot_due.then(|| {
                snapshot_entries = 0;
                snapshot_at = Instant::now();
                (self.recorder.last_index().unwrap_or(0), self.recorder.snapshot())
            });
            let progress = Progress {
                applied_index: self.recorder.last_index().unwrap_or(0),
                applied_ts: self.recorder.engine().ts_last(),
                begins_at: self.begins_at,
            };
            if batches.send(Batch { rows: std::mem::take(&mut rows), progress, snapshot }).is_err() {
                break; // the writer failed; it reported why
            }
            dirty = false;
            if logged_at.elapsed() >= Duration::from_secs(10) && self.status.lag_entries() > 1_000 {
                logged_at = Instant::now();
                tracing::warn!(
                    lag_entries = self.status.lag_entries(),
                    lag_ms = self.status.lag_ns() / 1_000_000,
                    "history sink behind the log"
                );
            }
        }
        Ok(())
    }

    /// Applies a feed; true when it applied entries.
    fn take(&mut self, feed: Feed, rows: &mut Rows, snapshot_entries: &mut u64) -> Result<bool, SinkError> {
        let (entries, head_index, head_ts) = match feed {
            Feed::Entries { entries, head_index, head_ts } => (entries, head_index, head_ts),
            Feed::Head { head_index, head_ts } => (Vec::new(), head_index, head_ts),
        };
        self.status.head_index.fetch_max(head_index, Ordering::Relaxed);
        self.status.head_ts.fetch_max(head_ts, Ordering::Relaxed);
        let mut applied = false;
        for entry in &entries {
            if self.recorder.last_index().is_some_and(|last| entry.index <= last) {
                continue; // a reconnected source may repeat what it sent
            }
            let write = self.written_through.is_none_or(|through| entry.index > through);
            self.recorder.apply(entry, if write { Some(&mut *rows) } else { None })?;
            self.status.entries_applied.fetch_add(1, Ordering::Relaxed);
            *snapshot_entries += 1;
            applied |= write;
        }
        Ok(applied)
    }
}

fn write_loop(
    mut store: Store,
    batches: std::sync::mpsc::Receiver<Batch>,
    status: &SinkStatus,
    commit_every: Duration,
    rows_max: usize,
    pacer: Option<&Pacer>,
) -> Result<(), SinkError> {
    let mut committed_at: Option<Instant> = None;
    while let Ok(first) = batches.recv() {
        // Until the interval since the last commit is over, the next batches join this
        // transaction (consecutive entries: their rows follow, their progress is the
        // later one, a snapshot the latest, still at or below the progress). They are
        // written as they are, one after the other, not copied into one.
        let due = committed_at.map(|at| at + commit_every);
        let (mut progress, mut snapshot) = (first.progress, first.snapshot);
        let mut rows = first.rows.len();
        let mut parts = vec![first.rows];
        while rows < rows_max {
            let wait = due.map_or(Duration::ZERO, |due| due.saturating_duration_since(Instant::now()));
            let next = if wait.is_zero() { batches.try_recv().ok() } else { batches.recv_timeout(wait).ok() };
            let Some(next) = next else { break };
            rows += next.rows.len();
            parts.push(next.rows);
            progress = next.progress;
            if next.snapshot.is_some() {
                snapshot = next.snapshot;
            }
        }
        let saved = snapshot.as_ref().map(|(index, bytes)| (*index, bytes.as_slice()));
        let started = Instant::now();
        store.write_batches(&parts, &progress, saved)?;
        status.rows_written.fetch_add(rows as u64, Ordering::Relaxed);
        status.batches_written.fetch_add(1, Ordering::Relaxed);
        status.written_ts.store(progress.applied_ts, Ordering::Relaxed);
        status.written_index.store(progress.applied_index, Ordering::Release);
        committed_at = Some(Instant::now());
        drop(parts);
        yield_after(pacer, started, status);
    }
    Ok(())
}

/// Rests the share a piece of work begun at `started` owes a busy exchange.
fn yield_after(pacer: Option<&Pacer>, started: Instant, status: &SinkStatus) {
    if let Some(pacer) = pacer {
        let rested = pacer.after(started.elapsed());
        status.yielded_ns.fetch_add(rested.as_nanos() as u64, Ordering::Relaxed);
    }
}

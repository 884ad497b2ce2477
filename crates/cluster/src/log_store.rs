//! The Raft log store: openraft's [`RaftLogStorage`] and [`RaftLogReader`] on the journal.
//!
//! ## Files
//!
//! One directory holds a purgeable journal ([`Journal::open_purgeable`]) and a small
//! metadata file, `raft-meta`:
//! * Each journal record is one Raft entry: its payload is the postcard encoding of the
//!   openraft [`Entry`] (log id with term, payload blank, normal or membership), and its
//!   journal index is the Raft index **plus one**, because openraft's log starts at index 0
//!   (the initial membership) and the journal's at 1. The record's timestamp is unused (0):
//!   the leader's time travels inside the commands.
//! * `raft-meta` holds the vote, the last purged log id (term and index), the last saved
//!   committed log id, and where the log starts when an append to an empty log skipped
//!   ahead (openraft's conformance suite does that; openraft itself purges first). It is replaced atomically: written to `raft-meta.tmp`,
//!   fsynced, renamed, directory fsynced. Layout: magic `BRSRAFTM`, version (u32), payload
//!   length (u32), CRC32C of the version, length and payload (u32), postcard payload.
//!
//! ## Ordering and durability
//!
//! Every write (append, vote, committed, truncate, purge) goes into one queue, in the
//! order openraft issues them (`&mut self` serializes the calls), and one writer thread
//! owns the files and executes the queue in that order:
//! * It drains the queue; a run of consecutive appends becomes one journal write and one
//!   `fdatasync` (group commit); then their callbacks fire, in order, with `Ok`. No
//!   callback fires before the `fdatasync` that covers its entries has returned.
//! * A vote, truncate or purge ends the run: the appends before it are made durable first,
//!   then it runs. So nothing ever overtakes an earlier write, on disk or in a crash.
//! * `save_vote` waits for its reply, which comes after the metadata file is durable.
//!   `truncate_after` and `purge` return once queued; their effect is visible to readers
//!   at once and made durable in queue order before any later append is acknowledged.
//! * A purge first makes the metadata with the new purged log id durable, then deletes the
//!   whole segments it covers ([`Journal::purge_through`]); entries below the purge point
//!   that share a segment with later ones stay on disk, hidden. A purge beyond the last
//!   entry restarts the journal empty after it. Nothing else deletes entries: the journal
//!   has no snapshots, openraft alone decides what is purged.
//! * `save_committed` only records the value in the queue (no I/O of its own): it is
//!   written with the next metadata write, at most `committed_save_interval` after it
//!   changed (checked when the writer has work), and at shutdown. A saved committed id is
//!   therefore never ahead of the durable log.
//!
//! ## Readers
//!
//! Appends are visible to readers when `append` returns: the in-memory state (vote,
//! purged and last log ids, a cache of the latest entries) is updated at submission,
//! before the writer sees the request. The cache is bounded (`cache_entries_max`,
//! `cache_bytes_max`) but only ever drops entries the writer has already written, so the
//! ones it drops are on disk. Older entries are read from the segment files through a
//! [`ReadView`] under a read lock that the writer takes exclusively while it truncates or
//! deletes files, so a read never races a removal.
//!
//! ## Failure
//!
//! An I/O error in the writer is fatal and never retried (after a failed `fdatasync` the
//! kernel may have dropped the dirty pages, "fsyncgate"): the writer fails the request and
//! every queued one with an `io::Error` (callbacks included, which stops openraft), records
//! the failure, and exits. Every later call returns the same error. Reopen to recover.
//!
//! ## Recovery
//!
//! [`LogStore::open`] reads the metadata, opens the journal (a torn tail is cut and logged,
//! mid-log corruption is an error), finishes a purge a crash interrupted (deletes the
//! segments it covers, or restarts the log after it if it ended before), refuses a log
//! that starts after the purged index + 1 (entries missing), and loads the newest entries
//! into the cache.
//!
//! ## Threads
//!
//! One writer thread, `raft-log-writer`, per store. Dropping the [`LogStore`] (openraft
//! does when the Raft instance shuts down) finishes the queue, saves the committed id and
//! joins the thread; [`LogReader`]s may outlive it and keep reading.

use std::collections::VecDeque;
use std::fmt::{self, Debug};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use bourse_journal::{Journal, JournalConfig, JournalStats, ReadView, SegmentRemover, TailCut, PAYLOAD_BYTES_LIMIT};
use openraft::storage::RaftLogStorage;
use openraft::{OptionalSend, RaftLogReader};
use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, oneshot};

use crate::types::{Entry, IoFlushed, LogId, LogState, TypeConfig, Vote};

/// The metadata file's name.
const META_FILE: &str = "raft-meta";
/// The metadata file being replaced.
const META_TEMP_FILE: &str = "raft-meta.tmp";
/// First bytes of the metadata file.
const META_MAGIC: [u8; 8] = *b"BRSRAFTM";
/// Version of the metadata layout.
const META_VERSION: u32 = 1;
/// Magic, version, payload length, checksum.
const META_HEADER_BYTES: usize = 20;
/// Largest metadata payload: three log ids and a vote take well under 100 bytes.
const META_PAYLOAD_BYTES_MAX: usize = 4096;
/// Name of the writer thread.
const WRITER_THREAD_NAME: &str = "raft-log-writer";

/// Bounds and tuning of a [`LogStore`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogStoreConfig {
    /// The journal's bounds. `payload_bytes_max` bounds one encoded Raft entry;
    /// `snapshot_bytes_max` is unused (the Raft log has no journal snapshots).
    pub journal: JournalConfig,
    /// Most entries kept in memory for readers (older ones are read from disk).
    pub cache_entries_max: usize,
    /// Most encoded bytes kept in memory for readers.
    pub cache_bytes_max: usize,
    /// Requests the writer's queue holds before a submission waits (backpressure).
    pub queue_requests_max: usize,
    /// Entries after which the writer stops draining the queue and commits the group.
    pub group_entries_max: usize,
    /// Longest a changed committed log id waits for a metadata write while the writer
    /// is busy.
    pub committed_save_interval: Duration,
}

impl Default for LogStoreConfig {
    fn default() -> Self {
        Self {
            journal: JournalConfig { payload_bytes_max: 16 << 20, ..JournalConfig::default() },
            cache_entries_max: 16_384,
            cache_bytes_max: 64 << 20,
            queue_requests_max: 1024,
            group_entries_max: 65_536,
            committed_save_interval: Duration::from_secs(1),
        }
    }
}

impl LogStoreConfig {
    /// Checks every field against its bounds.
    pub fn validate(&self) -> Result<(), Error> {
        self.journal.validate()?;
        let positive = [
            ("cache_entries_max", self.cache_entries_max),
            ("cache_bytes_max", self.cache_bytes_max),
            ("queue_requests_max", self.queue_requests_max),
            ("group_entries_max", self.group_entries_max),
        ];
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((field, _)) => Err(Error::ConfigInvalid { field, reason: "must be at least 1".into() }),
            None => Ok(()),
        }
    }
}

/// Why the log store could not open, or failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The journal failed: I/O, or corruption it found (a torn tail is cut, not an error).
    #[error("journal: {0}")]
    Journal(#[from] bourse_journal::Error),
    /// An I/O error outside the journal (the metadata file, the writer thread).
    #[error("{op} {path}: {source}")]
    Io {
        /// The operation.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the operating system said.
        #[source]
        source: io::Error,
    },
    /// The metadata file is not valid: it is replaced atomically, so this is corruption.
    #[error("{path}: invalid Raft metadata file: {reason}")]
    MetaInvalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A journal record does not hold the Raft entry it should.
    #[error("Raft log entry {index}: {reason}")]
    EntryInvalid {
        /// The Raft index.
        index: u64,
        /// What is wrong.
        reason: String,
    },
    /// The log starts after the entry following the last purged one: entries are missing.
    #[error("the log starts at Raft index {log_first_index} but only entries before {purged_end} were purged")]
    LogStartMissing {
        /// Raft index of the first entry on disk.
        log_first_index: u64,
        /// Raft index after the last purged entry (0: nothing purged).
        purged_end: u64,
    },
    /// A configuration field is out of bounds.
    #[error("invalid log store configuration: {field}: {reason}")]
    ConfigInvalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
}

impl Error {
    fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { op, path: path.into(), source }
    }

    /// The `io::ErrorKind` that best describes it to openraft.
    fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Io { source, .. } | Error::Journal(bourse_journal::Error::Io { source, .. }) => source.kind(),
            Error::ConfigInvalid { .. } => io::ErrorKind::InvalidInput,
            _ => io::ErrorKind::InvalidData,
        }
    }
}

/// Why the writer stopped: kept to answer every later call with the same error.
#[derive(Clone, Debug)]
struct Failure {
    kind: io::ErrorKind,
    message: String,
}

impl Failure {
    fn new(error: &Error) -> Self {
        Self { kind: error.kind(), message: error.to_string() }
    }

    fn to_io(&self) -> io::Error {
        io::Error::new(self.kind, format!("Raft log store stopped: {}", self.message))
    }
}

/// What a store has done since it opened; cheap to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogStoreStats {
    /// The journal's counters: `syncs` is the number of `fdatasync`s of log data and
    /// `sync_latency_ns` their latency; as of the last group.
    pub journal: JournalStats,
    /// Groups of appends made durable (one `fdatasync` each, plus one per segment roll).
    pub groups: u64,
    /// Entries made durable.
    pub entries_durable: u64,
    /// Metadata file writes (vote, purge, committed): three fsyncs each.
    pub meta_writes: u64,
    /// Reads that went to the segment files because the cache no longer held the entries.
    pub disk_reads: u64,
    /// Entries in the cache now.
    pub cache_entries: usize,
    /// Encoded bytes of the cached entries.
    pub cache_bytes: usize,
}

/// What [`LogStore::open`] found on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogStoreRecovery {
    /// The torn or corrupt tail the journal cut (already logged), if any.
    pub tail_cut: Option<TailCut>,
    /// Whether a purge interrupted by a crash was finished.
    pub purge_finished: bool,
    /// Entries present after the purged ones.
    pub entries: u64,
}

/// The state in `raft-meta`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
struct Meta {
    vote: Option<Vote>,
    purged: Option<LogId>,
    committed: Option<LogId>,
    /// The Raft index the log restarted at when an append to an empty log skipped ahead
    /// of the purge point; 0 when it never did. The log starts at the later of this and
    /// the index after `purged`.
    start: u64,
}

impl Meta {
    /// The first Raft index the log may hold.
    fn start(&self) -> u64 {
        self.start.max(self.purged.as_ref().map_or(0, |log_id| log_id.index + 1))
    }
}

/// A request to the writer, in submission order. `seq` numbers them from 1.
enum Request {
    Append {
        seq: u64,
        records: Vec<bourse_journal::Entry>,
        callback: IoFlushed,
    },
    Vote {
        vote: Vote,
        reply: oneshot::Sender<Result<(), Failure>>,
    },
    Committed {
        committed: Option<LogId>,
    },
    Truncate {
        seq: u64,
        keep_end: u64,
    },
    Purge {
        seq: u64,
        log_id: LogId,
    },
    /// The log is empty and the next append skips ahead to `start`.
    Restart {
        seq: u64,
        start: u64,
    },
}

/// What readers see. Indexes are Raft indexes; `end` means one past the last.
struct State {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    /// The first index the log may hold: after `purged`, or later (see `Meta::start`).
    start: u64,
    /// The last entry's log id, or `purged` when no entry follows it.
    last: Option<LogId>,
    /// The newest entries, contiguous, ending at `last`, with their encoded sizes.
    cache: VecDeque<(Entry, usize)>,
    cache_bytes: usize,
    /// Entries before this index that are not purged are in the files `view` names.
    /// Invariant: every index in `start .. cache_start()` is below it.
    written_end: u64,
    view: ReadView,
    /// The last truncation submitted: a writer report older than it may count entries
    /// the truncation removed, so it does not move `written_end`.
    truncate_seq: u64,
    failure: Option<Failure>,
    stats: LogStoreStats,
}

impl State {
    /// One past the last index.
    fn end(&self) -> u64 {
        self.last.as_ref().map_or(0, |log_id| log_id.index + 1)
    }

    fn cache_start(&self) -> u64 {
        self.end() - self.cache.len() as u64
    }

    fn usable(&self) -> io::Result<()> {
        match &self.failure {
            Some(failure) => Err(failure.to_io()),
            None => Ok(()),
        }
    }

    fn cache_push(&mut self, entry: Entry, bytes: usize) {
        self.last = Some(entry.log_id);
        self.cache.push_back((entry, bytes));
        self.cache_bytes += bytes;
    }

    /// Drops the oldest cached entries beyond the bounds, but only written ones.
    fn cache_evict(&mut self, config: &LogStoreConfig) {
        while self.cache.len() > config.cache_entries_max || self.cache_bytes > config.cache_bytes_max {
            if self.cache_start() >= self.written_end {
                break;
            }
            let (_, bytes) = self.cache.pop_front().expect("a non-empty cache");
            self.cache_bytes -= bytes;
        }
        self.stats.cache_entries = self.cache.len();
        self.stats.cache_bytes = self.cache_bytes;
    }

    /// Drops the cached entries before `first`.
    fn cache_drop_before(&mut self, first: u64) {
        let dropped = first.saturating_sub(self.cache_start()).min(self.cache.len() as u64);
        for _ in 0..dropped {
            let (_, bytes) = self.cache.pop_front().expect("a non-empty cache");
            self.cache_bytes -= bytes;
        }
    }

    /// Drops the cached entries from `end` on.
    fn cache_drop_from(&mut self, end: u64) {
        let kept = end.saturating_sub(self.cache_start()).min(self.cache.len() as u64) as usize;
        for (_, bytes) in self.cache.drain(kept..) {
            self.cache_bytes -= bytes;
        }
    }
}

/// State shared by the store, its readers and the writer.
struct Shared {
    /// Taken shared by every read from the files, exclusively by the writer while it
    /// truncates or deletes files: a read never races a removal.
    files: RwLock<()>,
    state: Mutex<State>,
    config: LogStoreConfig,
}

/// Locks a mutex; a poisoned one means a thread panicked while holding it, a bug.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().expect("log store lock poisoned by a panic")
}

impl Shared {
    /// The entries in `range` that the log holds (purged and future ones are absent).
    fn entries(&self, range: impl RangeBounds<u64>) -> io::Result<Vec<Entry>> {
        let start = match range.start_bound() {
            Bound::Included(&index) => index,
            Bound::Excluded(&index) => index.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let stop = match range.end_bound() {
            Bound::Included(&index) => index.saturating_add(1),
            Bound::Excluded(&index) => index,
            Bound::Unbounded => u64::MAX,
        };
        // Files first, then state: the writer takes them in the same order.
        let _files = self.files.read().expect("log store lock poisoned by a panic");
        let (disk, cached) = {
            let mut state = lock(&self.state);
            state.usable()?;
            let (start, stop) = (start.max(state.start), stop.min(state.end()));
            if start >= stop {
                return Ok(Vec::new());
            }
            let cache_start = state.cache_start();
            let skip = start.saturating_sub(cache_start) as usize;
            let take = stop.saturating_sub(start.max(cache_start)) as usize;
            let cached: Vec<Entry> = state.cache.iter().skip(skip).take(take).map(|(entry, _)| entry.clone()).collect();
            let disk = (start < cache_start).then(|| (state.view.clone(), start, stop.min(cache_start)));
            if disk.is_some() {
                state.stats.disk_reads += 1;
            }
            (disk, cached)
        };
        let Some((view, disk_start, disk_stop)) = disk else {
            return Ok(cached);
        };
        let mut entries = entries_read(&view, disk_start, disk_stop)
            .map_err(|error| io::Error::new(error.kind(), error.to_string()))?;
        entries.extend(cached);
        Ok(entries)
    }

    fn vote(&self) -> io::Result<Option<Vote>> {
        let state = lock(&self.state);
        state.usable()?;
        Ok(state.vote)
    }
}

/// Reads and decodes the entries `start .. stop` (Raft indexes) from the files.
fn entries_read(view: &ReadView, start: u64, stop: u64) -> Result<Vec<Entry>, Error> {
    Ok(entries_read_sized(view, start, stop)?.into_iter().map(|(entry, _)| entry).collect())
}

/// Like [`entries_read`], with each entry's encoded size.
fn entries_read_sized(view: &ReadView, start: u64, stop: u64) -> Result<Vec<(Entry, usize)>, Error> {
    let records = view.read_range(start + 1, stop)?;
    let mut entries = Vec::with_capacity(records.remaining() as usize);
    for record in records {
        let record = record?;
        entries.push((entry_decode(&record)?, record.payload.len()));
    }
    Ok(entries)
}

/// The Raft entry in a journal record, checked against the record's index.
fn entry_decode(record: &bourse_journal::Entry) -> Result<Entry, Error> {
    let index = record.index - 1;
    let entry: Entry = postcard::from_bytes(&record.payload)
        .map_err(|error| Error::EntryInvalid { index, reason: error.to_string() })?;
    if entry.log_id.index != index {
        let reason = format!("the record holds the entry for index {}", entry.log_id.index);
        return Err(Error::EntryInvalid { index, reason });
    }
    Ok(entry)
}

/// A cheap, cloneable reader of a [`LogStore`], for openraft's replication tasks. It sees
/// every entry `append` has returned for, durable or not, and never a purged or truncated
/// one. It outlives the store.
#[derive(Clone)]
pub struct LogReader {
    shared: Arc<Shared>,
}

impl Debug for LogReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogReader").finish_non_exhaustive()
    }
}

/// Commands of one log entry for the history's log stream: (index, encoded commands;
/// none for a blank or membership entry).
pub type CommandEntry = (u64, Vec<Vec<u8>>);

impl LogReader {
    /// The log store's counters since open (fdatasync latency among them).
    pub fn stats(&self) -> LogStoreStats {
        lock(&self.shared.state).stats.clone()
    }

    /// The first index the log still holds (entries before it were purged).
    pub fn first_index(&self) -> u64 {
        lock(&self.shared.state).start
    }

    /// Entries `first ..= last` as commands, at most `entries_max` of them and about
    /// `bytes_max` bytes (at least one entry). `Err(first_held)` when `first` was purged:
    /// the caller reports the gap, never skips it. The caller bounds `last` by what is
    /// committed (the reader also sees entries not yet committed).
    pub fn command_entries(
        &self,
        first: u64,
        last: u64,
        entries_max: usize,
        bytes_max: usize,
    ) -> io::Result<Result<Vec<CommandEntry>, u64>> {
        if first > last {
            return Ok(Ok(Vec::new()));
        }
        let stop = last.min(first.saturating_add(entries_max.max(1) as u64 - 1));
        let entries = self.shared.entries(first..=stop)?;
        match entries.first() {
            Some(entry) if entry.log_id.index != first => return Ok(Err(entry.log_id.index)),
            None if self.first_index() > first => return Ok(Err(self.first_index())),
            _ => {}
        }
        let mut out = Vec::with_capacity(entries.len());
        let mut bytes = 0;
        for entry in entries {
            if bytes >= bytes_max && !out.is_empty() {
                break;
            }
            let commands: Vec<Vec<u8>> = match &entry.payload {
                openraft::EntryPayload::Normal(batch) => batch.iter().map(<[u8]>::to_vec).collect(),
                openraft::EntryPayload::Blank | openraft::EntryPayload::Membership(_) => Vec::new(),
            };
            bytes += commands.iter().map(Vec::len).sum::<usize>() + 16;
            out.push((entry.log_id.index, commands));
        }
        Ok(Ok(out))
    }
}

impl RaftLogReader<TypeConfig> for LogReader {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.shared.entries(range)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.shared.vote()
    }
}

/// The Raft log store: see the module header. Give it to `openraft::Raft::new`.
pub struct LogStore {
    shared: Arc<Shared>,
    /// `None` only while dropping.
    sender: Option<mpsc::Sender<Request>>,
    writer: Option<JoinHandle<()>>,
    /// Sequence number of the last request submitted.
    seq: u64,
    recovery: LogStoreRecovery,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore").field("seq", &self.seq).field("recovery", &self.recovery).finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens (creating it if missing) and recovers the log in `dir` with the default
    /// configuration, and starts its writer thread.
    pub fn open(dir: &Path) -> Result<LogStore, Error> {
        Self::open_with(dir, LogStoreConfig::default())
    }

    /// Like [`LogStore::open`], with explicit bounds.
    pub fn open_with(dir: &Path, config: LogStoreConfig) -> Result<LogStore, Error> {
        config.validate()?;
        fs::create_dir_all(dir).map_err(|source| Error::io("create directory", dir, source))?;
        let meta = meta_load(dir)?;
        let (mut journal, journal_recovery) = Journal::open_purgeable(dir, config.journal)?;
        drop(journal_recovery.entries);
        let mut recovery = LogStoreRecovery { tail_cut: journal_recovery.tail_cut, ..LogStoreRecovery::default() };
        // Raft index i is journal index i + 1, so the log's first Raft index is the journal
        // index of the record before it.
        let first = meta.start();
        if journal.last_index() < first {
            // The log ends at or before the purge point: a purge beyond the log's end was
            // recorded but the crash came before (or while) the log restarted after it.
            tracing::warn!(
                purged_end = first,
                log_end = journal.last_index(),
                "restarting the log after the purge point"
            );
            journal.purge_through(first)?;
            recovery.purge_finished = true;
        } else if journal.first_index() > first + 1 {
            return Err(Error::LogStartMissing { log_first_index: journal.first_index() - 1, purged_end: first });
        } else if journal.first_index() <= first {
            // Whole segments below the purge point may remain from an interrupted purge.
            let segments_first = journal.first_index();
            journal.purge_through(first)?;
            recovery.purge_finished = journal.first_index() != segments_first;
        }
        // Raft's end (one past the last index) is the journal's last index.
        let end = journal.last_index();
        recovery.entries = end - first;
        let cache_start = first.max(end.saturating_sub(config.cache_entries_max as u64));
        let tail = entries_read_sized(&journal.read_view(), cache_start, end)?;
        let last = match tail.last() {
            Some((entry, _)) => Some(entry.log_id),
            None => meta.purged,
        };
        let mut state = State {
            vote: meta.vote,
            committed: meta.committed,
            purged: meta.purged,
            start: first,
            last,
            cache: VecDeque::new(),
            cache_bytes: 0,
            written_end: end,
            view: journal.read_view(),
            truncate_seq: 0,
            failure: None,
            stats: LogStoreStats { journal: journal.stats().clone(), ..LogStoreStats::default() },
        };
        for (entry, bytes) in tail {
            state.cache_push(entry, bytes);
        }
        state.cache_evict(&config);
        let shared = Arc::new(Shared { files: RwLock::new(()), state: Mutex::new(state), config });
        // From here on, purged segments are deleted by a thread of their own, a few
        // megabytes at a time: readers never see them again (the view they read through
        // is replaced under the files lock), and deleting hundreds of megabytes at once
        // would hold every fdatasync on the filesystem for a tenth of a second or more.
        journal.defer_segment_removal();
        let (sender, receiver) = mpsc::channel(config.queue_requests_max);
        let writer = Writer {
            dir: dir.to_path_buf(),
            journal,
            receiver,
            shared: Arc::clone(&shared),
            meta_saved: meta.clone(),
            meta,
            meta_saved_at: Instant::now(),
            remover: SegmentRemover::default(),
        };
        let writer = thread::Builder::new()
            .name(WRITER_THREAD_NAME.into())
            .spawn(move || writer.run())
            .map_err(|source| Error::io("spawn thread", WRITER_THREAD_NAME, source))?;
        Ok(LogStore { shared, sender: Some(sender), writer: Some(writer), seq: 0, recovery })
    }

    /// A reader handle (what openraft's `get_log_reader` returns).
    pub fn reader(&self) -> LogReader {
        LogReader { shared: Arc::clone(&self.shared) }
    }

    /// The last log id: of the last entry, or the last purged one when none follows it.
    pub fn last_log_id(&self) -> Option<LogId> {
        lock(&self.shared.state).last
    }

    /// The last purged log id.
    pub fn last_purged_log_id(&self) -> Option<LogId> {
        lock(&self.shared.state).purged
    }

    /// The last vote saved (durable).
    pub fn vote(&self) -> Option<Vote> {
        lock(&self.shared.state).vote
    }

    /// The last committed log id openraft saved (durable only up to the last metadata write).
    pub fn committed(&self) -> Option<LogId> {
        lock(&self.shared.state).committed
    }

    /// Counters since open.
    pub fn stats(&self) -> LogStoreStats {
        lock(&self.shared.state).stats.clone()
    }

    /// What opening found.
    pub fn recovery(&self) -> &LogStoreRecovery {
        &self.recovery
    }

    /// Finishes every queued write, saves the committed id and stops the writer; returns
    /// the error that stopped it earlier, if any. Dropping the store does the same.
    pub fn shutdown(mut self) -> io::Result<()> {
        self.writer_stop();
        lock(&self.shared.state).usable()
    }

    fn writer_stop(&mut self) {
        // The writer drains the queue and returns once every sender is gone.
        drop(self.sender.take());
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::error!("the Raft log writer thread panicked");
            }
        }
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    async fn submit(&self, request: Request) -> io::Result<()> {
        let sender = self.sender.as_ref().expect("a sender until drop");
        if sender.send(request).await.is_err() {
            let state = lock(&self.shared.state);
            state.usable()?;
            return Err(io::Error::other("Raft log store stopped"));
        }
        Ok(())
    }

    fn usable(&self) -> io::Result<()> {
        lock(&self.shared.state).usable()
    }
}

impl Drop for LogStore {
    fn drop(&mut self) {
        self.writer_stop();
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        self.shared.entries(range)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.shared.vote()
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogReader;

    async fn get_log_state(&mut self) -> Result<LogState, io::Error> {
        let state = lock(&self.shared.state);
        state.usable()?;
        Ok(LogState { last_purged_log_id: state.purged, last_log_id: state.last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.reader()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.usable()?;
        let (reply, receiver) = oneshot::channel();
        self.submit(Request::Vote { vote: *vote, reply }).await?;
        match receiver.await {
            Ok(result) => result.map_err(|failure| failure.to_io()),
            Err(_) => {
                Err(lock(&self.shared.state).usable().err().unwrap_or_else(|| io::Error::other("writer stopped")))
            }
        }
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.usable()?;
        lock(&self.shared.state).committed = committed;
        self.submit(Request::Committed { committed }).await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let state = lock(&self.shared.state);
        state.usable()?;
        Ok(state.committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IoFlushed) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        self.usable()?;
        let entries: Vec<Entry> = entries.into_iter().collect();
        let payload_bytes_max = self.shared.config.journal.payload_bytes_max.min(PAYLOAD_BYTES_LIMIT) as usize;
        let (restart, first_expected) = {
            let state = lock(&self.shared.state);
            // An empty log accepts any later start; a log with entries only the next index.
            let next = state.end().max(state.start);
            let log_empty = state.end() <= state.start;
            let first_index = entries.first().map(|entry| entry.log_id.index);
            let restart = first_index.filter(|&index| log_empty && index > next);
            (restart, restart.unwrap_or(next))
        };
        let mut records = Vec::with_capacity(entries.len());
        for (next, entry) in (first_expected..).zip(&entries) {
            if entry.log_id.index != next {
                let message = format!("entry {} does not continue the log, whose next index is {next}", entry.log_id);
                return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
            }
            let payload =
                postcard::to_allocvec(entry).map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))?;
            if payload.len() > payload_bytes_max {
                let message = format!("entry {} is {} bytes, above {payload_bytes_max}", entry.log_id, payload.len());
                return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
            }
            records.push(bourse_journal::Entry { index: entry.log_id.index + 1, timestamp_ns: 0, payload });
        }
        if let Some(start) = restart {
            let seq = self.next_seq();
            {
                let mut state = lock(&self.shared.state);
                state.start = start;
                state.written_end = start;
                state.truncate_seq = seq;
            }
            self.submit(Request::Restart { seq, start }).await?;
        }
        {
            let mut state = lock(&self.shared.state);
            for (entry, record) in entries.into_iter().zip(&records) {
                state.cache_push(entry, record.payload.len());
            }
            state.cache_evict(&self.shared.config);
        }
        let seq = self.next_seq();
        self.submit(Request::Append { seq, records, callback }).await
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        self.usable()?;
        let keep_end = last_log_id.as_ref().map_or(0, |log_id| log_id.index + 1);
        let seq = {
            let mut state = lock(&self.shared.state);
            if keep_end < state.start {
                let message =
                    format!("cannot truncate after {last_log_id:?}: the log is purged up to {:?}", state.purged);
                return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
            }
            if keep_end >= state.end() {
                return Ok(());
            }
            state.cache_drop_from(keep_end);
            state.last = if keep_end == state.start { state.purged } else { last_log_id };
            state.written_end = state.written_end.min(keep_end);
            self.seq += 1;
            state.truncate_seq = self.seq;
            self.seq
        };
        self.submit(Request::Truncate { seq, keep_end }).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        self.usable()?;
        {
            let mut state = lock(&self.shared.state);
            if state.purged.is_some_and(|purged| log_id.index <= purged.index) {
                return Ok(());
            }
            let first = log_id.index + 1;
            state.cache_drop_before(first);
            if first >= state.end() {
                // Every entry is purged: the log continues after the purge point.
                state.last = Some(log_id);
                state.written_end = state.written_end.max(first);
            }
            state.start = state.start.max(first);
            state.purged = Some(log_id);
            state.stats.cache_entries = state.cache.len();
            state.stats.cache_bytes = state.cache_bytes;
        }
        let seq = self.next_seq();
        self.submit(Request::Purge { seq, log_id }).await
    }
}

/// A run of appends waiting for one write and one `fdatasync`.
#[derive(Default)]
struct Run {
    records: Vec<bourse_journal::Entry>,
    callbacks: Vec<IoFlushed>,
    last_seq: u64,
}

/// The writer thread's state: it alone touches the files.
struct Writer {
    dir: PathBuf,
    journal: Journal,
    receiver: mpsc::Receiver<Request>,
    shared: Arc<Shared>,
    /// The metadata as the requests executed so far left it.
    meta: Meta,
    /// The metadata on disk.
    meta_saved: Meta,
    meta_saved_at: Instant,
    /// Deletes purged segments off this thread.
    remover: SegmentRemover,
}

impl Writer {
    fn run(mut self) {
        let result = self.run_loop().and_then(|()| self.committed_save(true));
        self.remover.finish();
        let Err(failure) = result else { return };
        tracing::error!(error = %failure.message, "the Raft log writer stopped on an error");
        lock(&self.shared.state).failure = Some(failure.clone());
        // Fail everything still queued; the store refuses new requests from now on.
        self.receiver.close();
        while let Some(request) = self.receiver.blocking_recv() {
            request_fail(request, &failure);
        }
    }

    /// Executes requests in order until every sender is gone, or the first failure.
    fn run_loop(&mut self) -> Result<(), Failure> {
        let group_entries_max = self.shared.config.group_entries_max;
        while let Some(first) = self.receiver.blocking_recv() {
            let mut run = Run::default();
            let mut next = Some(first);
            while let Some(request) = next.take() {
                match request {
                    Request::Append { seq, records, callback } => {
                        run.records.extend(records);
                        run.callbacks.push(callback);
                        run.last_seq = seq;
                    }
                    // Only a value: it is written after the run is durable (see the header).
                    Request::Committed { committed } => self.meta.committed = committed,
                    barrier => {
                        self.run_commit(std::mem::take(&mut run))?;
                        self.barrier_execute(barrier)?;
                    }
                }
                if run.records.len() < group_entries_max {
                    next = self.receiver.try_recv().ok();
                }
            }
            self.run_commit(run)?;
            self.committed_save(false)?;
        }
        Ok(())
    }

    /// Appends a run in one write, makes it durable with one `fdatasync`, then fires its
    /// callbacks in order.
    fn run_commit(&mut self, run: Run) -> Result<(), Failure> {
        if run.callbacks.is_empty() {
            return Ok(());
        }
        let result = self.journal.append(&run.records).and_then(|()| self.journal.sync());
        if let Err(error) = result {
            let failure = Failure::new(&Error::Journal(error));
            for callback in run.callbacks {
                callback.io_completed(Err(failure.to_io()));
            }
            return Err(failure);
        }
        {
            let mut state = lock(&self.shared.state);
            state.stats.groups += 1;
            state.stats.entries_durable += run.records.len() as u64;
            self.publish(&mut state, run.last_seq);
        }
        for callback in run.callbacks {
            callback.io_completed(Ok(()));
        }
        Ok(())
    }

    /// Tells readers what the files now hold: the view, and how far they hold entries
    /// (unless a later truncation already moved that back).
    fn publish(&self, state: &mut State, seq: u64) {
        state.view = self.journal.read_view();
        if seq >= state.truncate_seq {
            // Raft index i is journal index i + 1: the journal's last index is Raft's end.
            state.written_end = self.journal.last_index();
        }
        state.stats.journal = self.journal.stats().clone();
        state.cache_evict(&self.shared.config);
    }

    fn barrier_execute(&mut self, request: Request) -> Result<(), Failure> {
        match request {
            Request::Vote { vote, reply } => {
                self.meta.vote = Some(vote);
                if let Err(failure) = self.meta_write() {
                    let _ = reply.send(Err(failure.clone()));
                    return Err(failure);
                }
                lock(&self.shared.state).vote = Some(vote);
                // The caller may be gone; the vote stands either way.
                let _ = reply.send(Ok(()));
            }
            Request::Truncate { seq, keep_end } => {
                let _files = self.shared.files.write().expect("log store lock poisoned by a panic");
                let result = self.journal.truncate_after(keep_end);
                let mut state = lock(&self.shared.state);
                self.publish(&mut state, seq);
                result.map_err(|error| Failure::new(&Error::Journal(error)))?;
            }
            Request::Purge { seq, log_id } => {
                // The purge record is durable before any file goes.
                self.meta.purged = Some(log_id);
                self.meta_write()?;
                let result = self.purge_through(log_id.index + 1, seq);
                result.map_err(|error| Failure::new(&Error::Journal(error)))?;
            }
            Request::Restart { seq, start } => {
                // Where the log starts is durable before the log restarts there.
                self.meta.start = start;
                self.meta_write()?;
                let result = self.purge_through(start, seq);
                result.map_err(|error| Failure::new(&Error::Journal(error)))?;
            }
            Request::Append { .. } | Request::Committed { .. } => unreachable!("not a barrier"),
        }
        Ok(())
    }

    /// Purges the journal through `index` under the files lock, publishes the new view,
    /// then (the lock released) hands the segments it no longer needs to the remover.
    fn purge_through(&mut self, index: u64, seq: u64) -> Result<(), bourse_journal::Error> {
        let result = {
            let _files = self.shared.files.write().expect("log store lock poisoned by a panic");
            let result = self.journal.purge_through(index);
            self.publish(&mut lock(&self.shared.state), seq);
            result
        };
        let pruned = self.journal.take_segments_to_remove();
        self.remover.remove(self.journal.dir(), pruned);
        result
    }

    /// Writes the committed id if it changed, when `committed_save_interval` has passed
    /// since the last metadata write or `now` says so.
    fn committed_save(&mut self, now: bool) -> Result<(), Failure> {
        if self.meta.committed == self.meta_saved.committed {
            return Ok(());
        }
        if now || self.meta_saved_at.elapsed() >= self.shared.config.committed_save_interval {
            self.meta_write()?;
        }
        Ok(())
    }

    fn meta_write(&mut self) -> Result<(), Failure> {
        meta_store(&self.dir, &self.meta).map_err(|error| Failure::new(&error))?;
        self.meta_saved = self.meta.clone();
        self.meta_saved_at = Instant::now();
        lock(&self.shared.state).stats.meta_writes += 1;
        Ok(())
    }
}

/// Answers a request the writer will not execute.
fn request_fail(request: Request, failure: &Failure) {
    match request {
        Request::Append { callback, .. } => callback.io_completed(Err(failure.to_io())),
        Request::Vote { reply, .. } => {
            let _ = reply.send(Err(failure.clone()));
        }
        Request::Committed { .. } | Request::Truncate { .. } | Request::Purge { .. } | Request::Restart { .. } => {}
    }
}

/// Encodes the metadata file's bytes.
fn meta_encode(meta: &Meta) -> Result<Vec<u8>, Error> {
    let payload = postcard::to_allocvec(meta)
        .map_err(|error| Error::MetaInvalid { path: META_FILE.into(), reason: error.to_string() })?;
    let payload_bytes = u32::try_from(payload.len()).expect("metadata is small");
    let mut bytes = Vec::with_capacity(META_HEADER_BYTES + payload.len());
    bytes.extend_from_slice(&META_MAGIC);
    bytes.extend_from_slice(&META_VERSION.to_le_bytes());
    bytes.extend_from_slice(&payload_bytes.to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes[8..16]), &payload);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// Decodes the metadata file's bytes, or says why they are not valid.
fn meta_decode(bytes: &[u8]) -> Result<Meta, String> {
    if bytes.len() < META_HEADER_BYTES || bytes[0..8] != META_MAGIC {
        return Err("missing magic".into());
    }
    let word = |at: usize| u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]);
    if word(8) != META_VERSION {
        return Err(format!("unsupported version {}", word(8)));
    }
    let payload = &bytes[META_HEADER_BYTES..];
    if payload.len() != word(12) as usize {
        return Err(format!("length {} differs from the declared {}", payload.len(), word(12)));
    }
    if crc32c::crc32c_append(crc32c::crc32c(&bytes[8..16]), payload) != word(16) {
        return Err("checksum mismatch".into());
    }
    postcard::from_bytes(payload).map_err(|error| error.to_string())
}

/// Reads the metadata file (defaults when there is none) and removes a temporary one
/// left by a crash: it was never renamed, so it never counted.
fn meta_load(dir: &Path) -> Result<Meta, Error> {
    let path_temp = dir.join(META_TEMP_FILE);
    if path_temp.exists() {
        tracing::warn!(path = %path_temp.display(), "removing a metadata file left by an interrupted write");
        fs::remove_file(&path_temp).map_err(|source| Error::io("remove", &path_temp, source))?;
    }
    let path = dir.join(META_FILE);
    let bytes = match fs::metadata(&path) {
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(Meta::default()),
        Err(source) => return Err(Error::io("stat", &path, source)),
        Ok(metadata) if metadata.len() > (META_HEADER_BYTES + META_PAYLOAD_BYTES_MAX) as u64 => {
            let reason = format!("{} bytes is more than any writer makes", metadata.len());
            return Err(Error::MetaInvalid { path, reason });
        }
        Ok(_) => fs::read(&path).map_err(|source| Error::io("read", &path, source))?,
    };
    meta_decode(&bytes).map_err(|reason| Error::MetaInvalid { path, reason })
}

/// Replaces the metadata file atomically and durably: temporary file, fsync, rename,
/// directory fsync.
fn meta_store(dir: &Path, meta: &Meta) -> Result<(), Error> {
    let bytes = meta_encode(meta)?;
    let (path, path_temp) = (dir.join(META_FILE), dir.join(META_TEMP_FILE));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path_temp)
        .map_err(|source| Error::io("create", &path_temp, source))?;
    file.write_all(&bytes).map_err(|source| Error::io("write", &path_temp, source))?;
    file.sync_all().map_err(|source| Error::io("fsync", &path_temp, source))?;
    drop(file);
    fs::rename(&path_temp, &path).map_err(|source| Error::io("rename", &path_temp, source))?;
    let handle = File::open(dir).map_err(|source| Error::io("open directory", dir, source))?;
    handle.sync_all().map_err(|source| Error::io("fsync directory", dir, source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_round_trips_and_rejects_damage() {
        let meta = Meta { vote: Some(Vote::new(3, 1)), purged: None, committed: None, start: 7 };
        let bytes = meta_encode(&meta).unwrap();
        assert_eq!(meta_decode(&bytes), Ok(meta));
        let mut flipped = bytes.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(meta_decode(&flipped), Err("checksum mismatch".into()));
        assert!(meta_decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(meta_decode(b"short").is_err());
    }
}

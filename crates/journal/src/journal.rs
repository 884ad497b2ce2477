//! The journal: append, sync, snapshot, prune, truncate.
//!
//! Invariants:
//! * The log holds the records `first_index ..= last_index` with no gap, in segment files
//!   sorted by first index; the last segment is the one appended to. An empty log has
//!   `first_index == last_index + 1`.
//! * Every record up to `durable_index` has reached the disk (`fdatasync`).
//! * A segment is fdatasynced before the next one is created, so after any crash only
//!   the last segment can have a torn tail.
//! * The log reaches back to the oldest kept snapshot (`SNAPSHOTS_KEPT` = 2): records a
//!   newer snapshot covers are pruned only once an even newer one exists. Deleting up to
//!   the newest snapshot, as most logs do, would make falling back to the older snapshot
//!   useless, since the records after it would be gone.
//! * A journal opened with [`Journal::open_purgeable`] has no snapshots: its prefix is
//!   removed only by [`Journal::purge_through`], at its owner's request, and nothing else
//!   ever deletes a record the owner has not asked to delete. A journal opened with
//!   [`Journal::open`] is pruned only by its snapshots. The two kinds never mix: each
//!   refuses the other's operation.
//! * After an I/O error while changing the log's files the journal is poisoned: a failed
//!   `fdatasync` cannot be retried safely (the kernel may have dropped the dirty pages),
//!   so every later call fails until the journal is reopened and recovered.
//!
//! Complexity: `append` is linear in the bytes appended, with one `write` per call (or
//! per `WRITE_BUFFER_BYTES_MAX`); `sync` is one `fdatasync`; a roll adds one `fdatasync`
//! and one atomic segment creation. `truncate_after` reads the segment it cuts.
//!
//! Limits: one journal per directory; nothing locks the directory against a second
//! process. A power loss can persist pages written after the last `fdatasync` out of
//! order; if that leaves a hole followed by valid records, recovery reports mid-log
//! corruption rather than guess that the hole was never acknowledged.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::Instant;

use crate::config::{JournalConfig, INDEX_MAX, SNAPSHOTS_KEPT};
use crate::entries::{Entries, ReadView};
use crate::error::{Error, Result};
use crate::format::{self, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::recovery::{self, LogKind, Recovery};
use crate::segment::{self, SegmentFile};
use crate::snapshot;
use crate::stats::JournalStats;

/// Bytes `append` encodes before it writes them out, within one call.
const WRITE_BUFFER_BYTES_MAX: usize = 1 << 20;

/// One record of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// Position in the log, consecutive from 1.
    pub index: u64,
    /// The leader's timestamp, in nanoseconds.
    pub timestamp_ns: u64,
    /// Opaque bytes, at most `payload_bytes_max`.
    pub payload: Vec<u8>,
}

/// A durable, segmented, append-only log in one directory. See the module header.
#[derive(Debug)]
pub struct Journal {
    dir: PathBuf,
    config: JournalConfig,
    /// Sorted by first index, never empty; the last one is `current`.
    segments: Vec<SegmentFile>,
    /// A shared copy of `segments` for [`ReadView`]s, replaced whenever the list changes.
    segments_shared: Arc<[SegmentFile]>,
    /// Which operation removes the log's prefix: snapshots, or `purge_through`.
    kind: LogKind,
    current: File,
    current_bytes: u64,
    first_index: u64,
    last_index: u64,
    durable_index: u64,
    /// Indexes of the valid snapshots on disk, ascending.
    snapshot_indexes: Vec<u64>,
    buffer: Vec<u8>,
    poisoned: bool,
    stats: JournalStats,
    /// When set, pruned segments are listed here for the owner to delete off its hot
    /// thread ([`Journal::defer_segment_removal`]) instead of being deleted at once.
    removal_deferred: Option<Vec<PathBuf>>,
}

/// What recovery hands over to build a [`Journal`].
pub(crate) struct JournalParts {
    pub dir: PathBuf,
    pub config: JournalConfig,
    pub segments: Vec<SegmentFile>,
    pub current: File,
    pub current_bytes: u64,
    pub last_index: u64,
    pub snapshot_indexes: Vec<u64>,
    pub kind: LogKind,
}

impl Journal {
    /// Opens the journal in `dir` (created if missing) and recovers it: see [`Recovery`].
    pub fn open(dir: impl AsRef<Path>, config: JournalConfig) -> Result<(Journal, Recovery)> {
        recovery::journal_open(dir.as_ref(), config, LogKind::Snapshots)
    }

    /// Opens the journal in `dir` as a log whose prefix its owner removes with
    /// [`Journal::purge_through`] (a Raft log), and recovers it like [`Journal::open`],
    /// except that the log may start at any index: the owner keeps its own durable
    /// record of what it purged and checks the start against it. Snapshot files in `dir`
    /// are refused ([`Error::SnapshotsDisabled`]), and so is [`Journal::write_snapshot`]:
    /// nothing prunes this log behind its owner's back.
    pub fn open_purgeable(dir: impl AsRef<Path>, config: JournalConfig) -> Result<(Journal, Recovery)> {
        recovery::journal_open(dir.as_ref(), config, LogKind::Purgeable)
    }

    /// Builds a journal from recovered parts whose last segment is durable.
    pub(crate) fn from_parts(parts: JournalParts) -> Self {
        let first_index = parts.segments.first().expect("recovery leaves at least one segment").first_index;
        assert!(first_index <= parts.last_index + 1, "first index {first_index} after last {}", parts.last_index);
        Self {
            dir: parts.dir,
            config: parts.config,
            segments_shared: parts.segments.as_slice().into(),
            kind: parts.kind,
            segments: parts.segments,
            current: parts.current,
            current_bytes: parts.current_bytes,
            first_index,
            last_index: parts.last_index,
            durable_index: parts.last_index,
            snapshot_indexes: parts.snapshot_indexes,
            buffer: Vec::new(),
            poisoned: false,
            stats: JournalStats::default(),
            removal_deferred: None,
        }
    }

    /// Writes `entries` after the last record. Their indexes must continue the log
    /// (`last_index() + 1`, …) and their payloads fit `payload_bytes_max`; otherwise
    /// nothing is written. The records reach the operating system, not yet the disk:
    /// call [`Journal::sync`] before acknowledging them.
    pub fn append(&mut self, entries: &[Entry]) -> Result<()> {
        self.usable_check()?;
        self.append_validate(entries)?;
        let result = self.append_write(entries);
        self.poison_on_error(result)
    }

    /// Makes every appended record durable with one `fdatasync` (none if nothing is
    /// new) and returns the durable index.
    pub fn sync(&mut self) -> Result<u64> {
        self.usable_check()?;
        let result = self.current_sync();
        self.poison_on_error(result)?;
        Ok(self.durable_index)
    }

    /// Writes a snapshot of the state after `index` (temporary file, fsync, rename,
    /// directory fsync), keeps the newest [`SNAPSHOTS_KEPT`] snapshots, and deletes the
    /// segments whose records are all covered by the oldest kept one. A snapshot ahead
    /// of the log restarts the log after it. `index` must not be older than the newest
    /// snapshot nor leave a gap before the log's first record.
    pub fn write_snapshot(&mut self, index: u64, bytes: &[u8]) -> Result<()> {
        self.usable_check()?;
        if self.kind == LogKind::Purgeable {
            return Err(Error::SnapshotsDisabled { path: self.dir.clone() });
        }
        self.snapshot_validate(index, bytes)?;
        // The log is durable up to the snapshot before the snapshot is: after a crash the
        // records it covers are whole, or the log ends before it and restarts after it.
        let result = self.current_sync();
        self.poison_on_error(result)?;
        // A failure here leaves the log as it was: no poisoning.
        snapshot::snapshot_write(&self.dir, index, bytes)?;
        self.stats.snapshots_written += 1;
        if self.snapshot_indexes.last() != Some(&index) {
            self.snapshot_indexes.push(index);
        }
        let result = self.snapshot_install(index);
        self.poison_on_error(result)
    }

    /// Drops every record after `index` (Raft's conflict truncation). A no-op when
    /// `index >= last_index()`. Records a snapshot covers cannot be dropped.
    pub fn truncate_after(&mut self, index: u64) -> Result<()> {
        self.usable_check()?;
        if index >= self.last_index {
            return Ok(());
        }
        if let Some(&snapshot_index) = self.snapshot_indexes.last() {
            if index < snapshot_index {
                return Err(Error::TruncateBelowSnapshot { index, snapshot_index });
            }
        }
        if index + 1 < self.first_index {
            return Err(Error::TruncateBeforeLogStart { index, log_first_index: self.first_index });
        }
        let result = self.truncate_write(index);
        self.poison_on_error(result)
    }

    /// Removes the records up to `index`, whole segments at a time, in a journal opened
    /// with [`Journal::open_purgeable`]. A segment is deleted only when every record in it
    /// is at or below `index`, oldest first, so that a crash part-way leaves a suffix of
    /// the log and never a hole; `first_index()` afterwards is the first record kept,
    /// which may still be at or below `index` (the caller hides those). An `index` beyond
    /// the last record removes every segment and restarts the log empty after `index`:
    /// the next append is `index + 1`. A crash in the middle of that restart leaves a
    /// shorter log (or none, which reopens empty at 1), so the caller must have made its
    /// own record of the purge durable first and redo the purge after reopening when the
    /// log ends before it.
    pub fn purge_through(&mut self, index: u64) -> Result<()> {
        self.usable_check()?;
        if self.kind != LogKind::Purgeable {
            return Err(Error::PurgeNotEnabled);
        }
        if index > INDEX_MAX {
            return Err(Error::IndexOutOfRange { index });
        }
        let result =
            if index > self.last_index { self.log_restart(index) } else { self.segments_remove_through(index) };
        self.poison_on_error(result)
    }

    /// Reads the records `first ..= last` back from the files (`first == last + 1`: none).
    pub fn read_range(&self, first: u64, last: u64) -> Result<Entries> {
        self.usable_check()?;
        self.read_view().read_range(first, last)
    }

    /// A cheap, sendable description of the files as they are now, to read records from
    /// another thread while this one keeps appending; see [`ReadView`] for what its owner
    /// must coordinate.
    pub fn read_view(&self) -> ReadView {
        ReadView::new(Arc::clone(&self.segments_shared), self.first_index, self.last_index)
    }

    /// Index of the first record held (`last_index() + 1` when the log is empty).
    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Index of the last record appended (0 for a fresh log; the snapshot index after
    /// a restart behind a snapshot).
    pub fn last_index(&self) -> u64 {
        self.last_index
    }

    /// Index of the last record known to be on disk.
    pub fn durable_index(&self) -> u64 {
        self.durable_index
    }

    /// Index of the newest snapshot, if any.
    pub fn snapshot_index(&self) -> Option<u64> {
        self.snapshot_indexes.last().copied()
    }

    /// Counters since open.
    pub fn stats(&self) -> &JournalStats {
        &self.stats
    }

    /// The bounds it was opened with.
    pub fn config(&self) -> &JournalConfig {
        &self.config
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether an I/O error has poisoned it (see the module header).
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    fn usable_check(&self) -> Result<()> {
        if self.poisoned {
            Err(Error::Poisoned)
        } else {
            Ok(())
        }
    }

    fn poison_on_error<T>(&mut self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.poisoned = true;
        }
        result
    }

    fn append_validate(&self, entries: &[Entry]) -> Result<()> {
        let payload_bytes_max = self.config.payload_bytes_max;
        for (position, entry) in entries.iter().enumerate() {
            let index_expected = self.last_index + 1 + position as u64;
            if entry.index != index_expected {
                return Err(Error::IndexNotNext { index_expected, index_found: entry.index });
            }
            if entry.payload.len() > payload_bytes_max as usize {
                let (index, payload_bytes) = (entry.index, entry.payload.len());
                return Err(Error::PayloadTooLarge { index, payload_bytes, payload_bytes_max });
            }
        }
        Ok(())
    }

    fn append_write(&mut self, entries: &[Entry]) -> Result<()> {
        assert!(self.buffer.is_empty(), "append buffer left unwritten");
        for entry in entries {
            let record_bytes = (RECORD_HEADER_BYTES + entry.payload.len()) as u64;
            if self.roll_needed(record_bytes) {
                self.buffer_write()?;
                self.roll()?;
            } else if self.buffer.len() >= WRITE_BUFFER_BYTES_MAX {
                self.buffer_write()?;
            }
            format::record_encode(&mut self.buffer, entry.index, entry.timestamp_ns, &entry.payload);
            self.last_index = entry.index;
            self.stats.records_appended += 1;
        }
        self.buffer_write()
    }

    /// Whether a record of `record_bytes` must start a new segment: the current one has
    /// at least one record and would grow past `segment_bytes_max`.
    fn roll_needed(&self, record_bytes: u64) -> bool {
        let segment_bytes = self.current_bytes + self.buffer.len() as u64;
        segment_bytes > SEGMENT_HEADER_BYTES as u64 && segment_bytes + record_bytes > self.config.segment_bytes_max
    }

    fn buffer_write(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let path = &self.segments.last().expect("a current segment").path;
        self.current.write_all(&self.buffer).map_err(|source| Error::io("write", path, source))?;
        self.current_bytes += self.buffer.len() as u64;
        self.stats.bytes_appended += self.buffer.len() as u64;
        self.buffer.clear();
        Ok(())
    }

    /// Fdatasyncs the current segment if it holds records not yet durable.
    fn current_sync(&mut self) -> Result<()> {
        if self.durable_index >= self.last_index {
            return Ok(());
        }
        let started = Instant::now();
        let path = &self.segments.last().expect("a current segment").path;
        self.current.sync_data().map_err(|source| Error::io("fdatasync", path, source))?;
        let latency_ns = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.stats.syncs += 1;
        self.stats.sync_latency_ns.record(latency_ns);
        self.stats.sync_latency_ns_last = latency_ns;
        self.durable_index = self.last_index;
        Ok(())
    }

    /// Starts a new segment after the last record. The full segment is made durable
    /// first, so that after a crash only the last segment can have a torn tail.
    fn roll(&mut self) -> Result<()> {
        self.current_sync()?;
        let (file, segment) = segment::segment_create(&self.dir, self.last_index + 1)?;
        self.segments.push(segment);
        self.segments_share();
        self.current = file;
        self.current_bytes = SEGMENT_HEADER_BYTES as u64;
        self.stats.segments_rolled += 1;
        Ok(())
    }

    fn truncate_write(&mut self, index: u64) -> Result<()> {
        let position = self
            .segments
            .iter()
            .rposition(|segment| segment.first_index <= index + 1)
            .expect("the first segment starts at or before index + 1");
        // Newest first, so that a crash part-way leaves a prefix of the log.
        let removed = self.segments.split_off(position + 1);
        self.segments_share();
        for segment in removed.iter().rev() {
            segment::file_remove(&segment.path)?;
        }
        if !removed.is_empty() {
            segment::dir_sync(&self.dir)?;
        }
        let segment = &self.segments[position];
        let offset = segment::segment_record_offset(segment, index + 1)?;
        self.current = segment::segment_open_append(&segment.path, offset)?;
        self.current_bytes = offset;
        self.last_index = index;
        self.durable_index = self.durable_index.min(index);
        Ok(())
    }

    fn snapshot_validate(&self, index: u64, bytes: &[u8]) -> Result<()> {
        if index > INDEX_MAX {
            return Err(Error::IndexOutOfRange { index });
        }
        let snapshot_bytes_max = self.config.snapshot_bytes_max;
        if bytes.len() as u64 > snapshot_bytes_max {
            return Err(Error::SnapshotTooLarge { snapshot_bytes: bytes.len() as u64, snapshot_bytes_max });
        }
        if let Some(&index_newest) = self.snapshot_indexes.last() {
            if index < index_newest {
                return Err(Error::SnapshotIndexBehind { index, index_newest });
            }
        }
        if index + 1 < self.first_index {
            return Err(Error::SnapshotBeforeLogStart { index, log_first_index: self.first_index });
        }
        Ok(())
    }

    fn snapshot_install(&mut self, index: u64) -> Result<()> {
        if index > self.last_index {
            self.log_restart(index)?;
        }
        self.snapshots_retire()?;
        self.segments_prune()
    }

    /// The log restarts empty after `snapshot_index` (a snapshot ahead of the log, or a
    /// purge beyond its end). Old segments go first (oldest first), then the new one is
    /// created, so a crash in between leaves no gap between segments for recovery to trip
    /// on.
    fn log_restart(&mut self, snapshot_index: u64) -> Result<()> {
        for segment in &self.segments {
            segment::file_remove(&segment.path)?;
        }
        segment::dir_sync(&self.dir)?;
        let (file, segment) = segment::segment_create(&self.dir, snapshot_index + 1)?;
        self.segments = vec![segment];
        self.segments_share();
        self.current = file;
        self.current_bytes = SEGMENT_HEADER_BYTES as u64;
        self.first_index = snapshot_index + 1;
        self.last_index = snapshot_index;
        self.durable_index = snapshot_index;
        Ok(())
    }

    /// Deletes snapshot files beyond the newest [`SNAPSHOTS_KEPT`].
    fn snapshots_retire(&mut self) -> Result<()> {
        let retired_count = self.snapshot_indexes.len().saturating_sub(SNAPSHOTS_KEPT);
        if retired_count == 0 {
            return Ok(());
        }
        for index in self.snapshot_indexes.drain(..retired_count) {
            segment::file_remove(&self.dir.join(snapshot::snapshot_file_name(index)))?;
        }
        segment::dir_sync(&self.dir)
    }

    /// Deletes segments whose records are all covered by the oldest kept snapshot.
    fn segments_prune(&mut self) -> Result<()> {
        if self.snapshot_indexes.len() < SNAPSHOTS_KEPT {
            return Ok(());
        }
        self.segments_remove_through(self.snapshot_indexes[0])
    }

    /// Deletes the segments whose records are all at or below `covered_index`, oldest
    /// first, so that a crash part-way leaves a suffix of the log. Never the current
    /// segment.
    fn segments_remove_through(&mut self, covered_index: u64) -> Result<()> {
        // A segment's records are all covered when the next segment starts at or before
        // covered_index + 1.
        let pruned_count = self.segments.windows(2).take_while(|pair| pair[1].first_index <= covered_index + 1).count();
        if pruned_count == 0 {
            return Ok(());
        }
        let pruned: Vec<SegmentFile> = self.segments.drain(..pruned_count).collect();
        self.segments_share();
        self.first_index = self.segments[0].first_index;
        let paths = pruned.into_iter().map(|segment| segment.path);
        match &mut self.removal_deferred {
            Some(deferred) => {
                deferred.extend(paths);
                Ok(())
            }
            None => segments_remove(&self.dir, paths.collect()),
        }
    }

    /// From now on, segments that snapshots or purges make unneeded are left on disk and
    /// listed for [`Journal::take_segments_to_remove`]: deleting a few hundred megabytes
    /// of files takes a filesystem a good part of a second, and the journal's writer
    /// must not stop for it. Until they are deleted they are whole and covered, which
    /// is what a crash part-way through a prune leaves anyway: recovery skips them and
    /// the next prune deletes them.
    pub fn defer_segment_removal(&mut self) {
        self.removal_deferred.get_or_insert_with(Vec::new);
    }

    /// The segments pruned since the last call, oldest first, for
    /// [`segments_remove`]; empty unless removal is deferred.
    pub fn take_segments_to_remove(&mut self) -> Vec<PathBuf> {
        self.removal_deferred.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Publishes the current segment list to future [`ReadView`]s.
    fn segments_share(&mut self) {
        self.segments_shared = self.segments.as_slice().into();
    }
}

/// Deletes pruned segments of the journal in `dir`, oldest first (a crash part-way
/// leaves a suffix of the log), then makes the deletions durable.
fn segments_remove(dir: &Path, paths: Vec<PathBuf>) -> Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    for path in &paths {
        segment::file_remove(path)?;
    }
    segment::dir_sync(dir)
}

/// Cut per step and pause between steps of [`segments_remove_gradually`]: about 400 MB/s.
const PRUNE_STEP_BYTES: u64 = 8 << 20;
const PRUNE_STEP_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// Deletes pruned segments of the journal in `dir` a few megabytes at a time, so that
/// the log's `fdatasync`s on the same filesystem never wait long for the space to be
/// freed: for the journal's own pruning thread. First takes the segments out of the log:
/// each is renamed to `*.log.pruned`, oldest first (a crash part-way leaves a suffix of
/// the log), and the renames are made durable; a crash while they are cut down leaves
/// `*.log.pruned` files that the next recovery deletes.
fn segments_remove_gradually(dir: &Path, paths: Vec<PathBuf>) -> Result<()> {
    if paths.is_empty() {
        return Ok(());
    }
    let mut pruned = Vec::with_capacity(paths.len());
    for path in paths {
        // `<index>.log` becomes `<index>.log.pruned`.
        let to = path.with_extension(&segment::SEGMENT_PRUNED_SUFFIX[1..]);
        std::fs::rename(&path, &to).map_err(|source| Error::io("rename", &path, source))?;
        pruned.push(to);
    }
    segment::dir_sync(dir)?;
    for path in &pruned {
        segment::file_remove_gradually(path, PRUNE_STEP_BYTES, PRUNE_STEP_PAUSE)?;
    }
    segment::dir_sync(dir)
}

/// Why a failed deletion is not retried now: recovery lists the files at the next start,
/// skips their records (a snapshot covers them) and a later prune deletes them.
const LEFT_FOR_RECOVERY: &str =
    "pruned segments left on disk; the next start finds them and a later prune deletes them";

/// Deletes the segments a journal pruned ([`Journal::take_segments_to_remove`]) on a
/// thread of its own, gradually ([`segments_remove_gradually`]), one list at a time and
/// each oldest first, so that the log on disk stays a contiguous suffix whenever a crash
/// comes. For the thread that writes the journal: it must not stop for deletions.
#[derive(Debug, Default)]
pub struct SegmentRemover {
    running: Option<JoinHandle<()>>,
}

impl SegmentRemover {
    /// Starts deleting `paths` of the journal in `dir`, after the list before (if any)
    /// is done. A failure is logged, not returned: the files are covered, and recovery
    /// or a later prune deletes them.
    pub fn remove(&mut self, dir: &Path, paths: Vec<PathBuf>) {
        if paths.is_empty() {
            return;
        }
        // The previous list first (it is older, and long done: snapshots are far apart).
        self.finish();
        let dir = dir.to_path_buf();
        let spawned = thread::Builder::new().name("journal-prune".into()).spawn(move || {
            if let Err(error) = segments_remove_gradually(&dir, paths) {
                tracing::warn!(%error, "{LEFT_FOR_RECOVERY}");
            }
        });
        match spawned {
            Ok(handle) => self.running = Some(handle),
            Err(error) => tracing::warn!(%error, "{LEFT_FOR_RECOVERY}"),
        }
    }

    /// Waits for the deletions under way.
    pub fn finish(&mut self) {
        if let Some(handle) = self.running.take() {
            let _ = handle.join();
        }
    }
}

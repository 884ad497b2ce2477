//! Opening a journal directory: what survived a crash, and what to do with it.
//!
//! Steps, in order:
//! 1. Create the directory if it is missing.
//! 2. Delete stray temporary files (`*.log.tmp`, `*.snap.tmp`): a crash interrupted an
//!    atomic creation, and the rename never happened. Delete pruned segments
//!    (`*.log.pruned`) a crash left half deleted: they were out of the log already.
//! 3. Validate every snapshot, newest first. The newest valid one is the starting state;
//!    a corrupt one is logged, renamed to `*.snap.corrupt`, and skipped.
//! 4. Validate every segment: header, every record's checksums and index, and that each
//!    segment starts right after the previous one ends. A bad record at the end of the
//!    last segment with no valid record after it is a torn or corrupt tail: it is cut
//!    (logged with file and offset, file truncated, fdatasynced). Any other bad record,
//!    gap or header is a typed error: recovery never guesses.
//! 5. Settle the log against the snapshot at index `S`: no segment at all, or a log that
//!    ends before `S` (the snapshot got ahead of the log), restarts the log at `S + 1`;
//!    a log that starts after `S + 1` is missing records ([`Error::LogStartUncovered`]).
//!    A purgeable journal ([`Journal::open_purgeable`]) has no snapshot, refuses snapshot
//!    files ([`Error::SnapshotsDisabled`]) and accepts a log starting at any index: its
//!    owner checks the start against its own durable record of what it purged.
//! 6. Fdatasync the last segment, so that everything recovered is durable before anyone
//!    acknowledges on its strength.
//!
//! Complexity: reads every snapshot and every segment once, one segment in memory at a
//! time. The records for the caller are read again lazily through [`Entries`].

use std::fs;
use std::path::{Path, PathBuf};

use crate::config::JournalConfig;
use crate::entries::Entries;
use crate::error::{Error, RecordFault, Result};
use crate::journal::{Journal, JournalParts};
use crate::segment::{self, SegmentFile, SEGMENT_PRUNED_SUFFIX, SEGMENT_SUFFIX, SEGMENT_TEMP_SUFFIX};
use crate::snapshot::{self, Snapshot, SNAPSHOT_PREFIX, SNAPSHOT_SUFFIX, SNAPSHOT_TEMP_SUFFIX};

/// Which operation removes a journal's prefix; fixed when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LogKind {
    /// Snapshots, through [`Journal::write_snapshot`]; the log reaches back to the oldest
    /// kept snapshot.
    Snapshots,
    /// Its owner, through [`Journal::purge_through`]; no snapshots.
    Purgeable,
}

/// What [`Journal::open`] found: the state to start from and the records to replay.
#[derive(Debug)]
pub struct Recovery {
    /// The newest valid snapshot, if any.
    pub snapshot: Option<Snapshot>,
    /// The records after the snapshot (or from the log's start), in index order.
    pub entries: Entries,
    /// The torn or corrupt tail that was cut, if any.
    pub tail_cut: Option<TailCut>,
    /// Corrupt snapshots that were skipped, at their new `*.snap.corrupt` paths.
    pub snapshots_skipped: Vec<PathBuf>,
    /// Stray temporary files that were deleted.
    pub temp_files_removed: Vec<PathBuf>,
    /// Whether the snapshot was ahead of the log, which restarted after it.
    pub log_restarted: bool,
}

/// A torn or corrupt tail cut off the last segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailCut {
    /// The segment file.
    pub path: PathBuf,
    /// Where the file now ends: the end of the last valid record.
    pub offset: u64,
    /// Bytes removed.
    pub bytes_cut: u64,
    /// Why the first removed byte did not start a valid record.
    pub fault: RecordFault,
}

/// The journal's files in a directory.
#[derive(Default)]
struct Listing {
    segments: Vec<SegmentFile>,
    snapshots: Vec<(u64, PathBuf)>,
    temps: Vec<PathBuf>,
}

/// The segments as validated.
struct Chain {
    segments: Vec<SegmentFile>,
    /// Last valid index (`first - 1` of the first segment if it has no record).
    last_index: u64,
    /// Bytes of the last segment up to its last valid record.
    last_segment_bytes: u64,
    tail_cut: Option<TailCut>,
}

/// Opens and recovers the journal in `dir`; see the module header.
pub(crate) fn journal_open(dir: &Path, config: JournalConfig, kind: LogKind) -> Result<(Journal, Recovery)> {
    config.validate()?;
    fs::create_dir_all(dir).map_err(|source| Error::io("create directory", dir, source))?;
    let listing = dir_list(dir)?;
    let temp_files_removed = temps_remove(dir, listing.temps)?;
    if kind == LogKind::Purgeable {
        if let Some((_, path)) = listing.snapshots.first() {
            return Err(Error::SnapshotsDisabled { path: path.clone() });
        }
    }
    let (snapshot, snapshot_indexes, snapshots_skipped) = snapshots_load(dir, &listing.snapshots, &config)?;
    let chain = chain_scan(listing.segments)?;
    let snapshot_index = snapshot.as_ref().map_or(0, |snapshot| snapshot.index);
    let tail_cut = chain.tail_cut.clone();
    let (parts, log_restarted) = log_settle(dir, config, chain, snapshot_index, snapshot_indexes, kind)?;
    // A purgeable log may start after index 1: replay from its first record.
    let log_first_index = parts.segments.first().map_or(1, |segment| segment.first_index);
    let entries = Entries::new(&parts.segments, (snapshot_index + 1).max(log_first_index), parts.last_index);
    let journal = Journal::from_parts(parts);
    let recovery = Recovery { snapshot, entries, tail_cut, snapshots_skipped, temp_files_removed, log_restarted };
    Ok((journal, recovery))
}

/// Sorts the directory's files into segments, snapshots and temporary files; anything
/// else (corrupt snapshots, unrelated files) is left alone.
fn dir_list(dir: &Path) -> Result<Listing> {
    let mut listing = Listing::default();
    let reader = fs::read_dir(dir).map_err(|source| Error::io("list directory", dir, source))?;
    for item in reader {
        let item = item.map_err(|source| Error::io("list directory", dir, source))?;
        let name = item.file_name();
        let Some(name) = name.to_str() else { continue };
        let path = item.path();
        if let Some(first_index) = segment::file_name_index(name, "", SEGMENT_SUFFIX) {
            listing.segments.push(SegmentFile { first_index, path });
        } else if let Some(index) = segment::file_name_index(name, SNAPSHOT_PREFIX, SNAPSHOT_SUFFIX) {
            listing.snapshots.push((index, path));
        } else if segment::file_name_index(name, "", SEGMENT_TEMP_SUFFIX).is_some()
            || segment::file_name_index(name, "", SEGMENT_PRUNED_SUFFIX).is_some()
            || segment::file_name_index(name, SNAPSHOT_PREFIX, SNAPSHOT_TEMP_SUFFIX).is_some()
        {
            listing.temps.push(path);
        }
    }
    listing.segments.sort_by_key(|segment| segment.first_index);
    listing.snapshots.sort_by_key(|&(index, _)| index);
    Ok(listing)
}

fn temps_remove(dir: &Path, temps: Vec<PathBuf>) -> Result<Vec<PathBuf>> {
    for path in &temps {
        tracing::warn!(path = %path.display(), "removing a file left by an interrupted write or prune");
        segment::file_remove(path)?;
    }
    if !temps.is_empty() {
        segment::dir_sync(dir)?;
    }
    Ok(temps)
}

/// The newest valid snapshot, the indexes of all valid ones (ascending), and the new
/// paths of the corrupt ones.
fn snapshots_load(
    dir: &Path,
    snapshots: &[(u64, PathBuf)],
    config: &JournalConfig,
) -> Result<(Option<Snapshot>, Vec<u64>, Vec<PathBuf>)> {
    let mut newest = None;
    let mut indexes = Vec::new();
    let mut skipped = Vec::new();
    for (index, path) in snapshots.iter().rev() {
        match snapshot::snapshot_read(path, *index, config.snapshot_bytes_max)? {
            Ok(valid) => {
                indexes.push(*index);
                newest.get_or_insert(valid);
            }
            Err(reason) => {
                tracing::warn!(path = %path.display(), reason, "snapshot is corrupt; falling back to an older one");
                skipped.push(snapshot::snapshot_quarantine(path)?);
            }
        }
    }
    if !skipped.is_empty() {
        segment::dir_sync(dir)?;
    }
    indexes.reverse();
    Ok((newest, indexes, skipped))
}

/// Validates the segments in order and cuts a torn tail off the last one.
fn chain_scan(segments: Vec<SegmentFile>) -> Result<Chain> {
    let mut index_next: Option<u64> = None;
    let mut last_segment_bytes = 0;
    let mut tail_cut = None;
    for (position, segment) in segments.iter().enumerate() {
        let bytes = segment::segment_read(&segment.path)?;
        segment::segment_header_check(&bytes, segment)?;
        if let Some(index_expected) = index_next {
            if segment.first_index != index_expected {
                let (path, index_found) = (segment.path.clone(), segment.first_index);
                return Err(Error::SegmentIndexGap { path, index_expected, index_found });
            }
        }
        let is_last = position + 1 == segments.len();
        let scan = segment::segment_scan(&bytes, segment, is_last)?;
        if let Some(fault) = scan.tail_fault {
            let bytes_cut = bytes.len() as u64 - scan.bytes_valid;
            let path = segment.path.display();
            tracing::warn!(path = %path, offset = scan.bytes_valid, bytes_cut, %fault, "cutting a torn or corrupt tail");
            tail_cut = Some(TailCut { path: segment.path.clone(), offset: scan.bytes_valid, bytes_cut, fault });
        }
        index_next = Some(scan.last_index + 1);
        last_segment_bytes = scan.bytes_valid;
    }
    let last_index = index_next.map_or(0, |index| index - 1);
    Ok(Chain { segments, last_index, last_segment_bytes, tail_cut })
}

/// Reconciles the validated log with the snapshot at `snapshot_index` (see step 5) and
/// opens the last segment for appending, durable.
fn log_settle(
    dir: &Path,
    config: JournalConfig,
    chain: Chain,
    snapshot_index: u64,
    snapshot_indexes: Vec<u64>,
    kind: LogKind,
) -> Result<(JournalParts, bool)> {
    let dir_owned = dir.to_path_buf();
    let log_first_index = chain.segments.first().map(|segment| segment.first_index);
    let restart = match log_first_index {
        None => true,
        Some(_) if snapshot_index > chain.last_index => {
            tracing::warn!(
                snapshot_index,
                log_last_index = chain.last_index,
                "snapshot is ahead of the log; the log restarts after it"
            );
            true
        }
        Some(log_first_index) if log_first_index > snapshot_index + 1 && kind == LogKind::Snapshots => {
            return Err(Error::LogStartUncovered { log_first_index, snapshot_index });
        }
        Some(_) => false,
    };
    if restart {
        let log_restarted = !chain.segments.is_empty();
        for segment in &chain.segments {
            segment::file_remove(&segment.path)?;
        }
        let (current, segment) = segment::segment_create(dir, snapshot_index + 1)?;
        let current_bytes = crate::format::SEGMENT_HEADER_BYTES as u64;
        let segments = vec![segment];
        let last_index = snapshot_index;
        let parts = JournalParts {
            dir: dir_owned,
            config,
            segments,
            current,
            current_bytes,
            last_index,
            snapshot_indexes,
            kind,
        };
        return Ok((parts, log_restarted));
    }
    let last = chain.segments.last().expect("a non-empty chain");
    let current = segment::segment_open_append(&last.path, chain.last_segment_bytes)?;
    current.sync_data().map_err(|source| Error::io("fdatasync", &last.path, source))?;
    let (segments, current_bytes, last_index) = (chain.segments, chain.last_segment_bytes, chain.last_index);
    let parts =
        JournalParts { dir: dir_owned, config, segments, current, current_bytes, last_index, snapshot_indexes, kind };
    Ok((parts, false))
}

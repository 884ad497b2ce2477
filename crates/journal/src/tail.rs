//! Following a journal from outside its writer: [`Tail`] reads the records of a journal
//! directory from an index on, up to a bound the caller knows is durable, with one open
//! file and reading each byte once (the history sink's log stream on a single node).
//!
//! It shares nothing with the writer but the files: it lists the directory to find the
//! segment holding the next index, reads appended bytes as they come, and moves to the
//! next segment when one ends. Records are checked (both checksums, the index
//! sequence). A segment pruned behind a snapshot before the tail reached it is
//! reported as [`TailError::Pruned`] with the first index still held: never skipped.
//!
//! Limits: the caller must not ask beyond the durable index (a record being written may
//! be torn until its fdatasync); the tail does not notice a `truncate_after` of records
//! it already returned (a single node never truncates durable records).

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::config::PAYLOAD_BYTES_LIMIT;
use crate::error::RecordFault;
use crate::format::{self, SEGMENT_HEADER_BYTES};
use crate::journal::Entry;
use crate::segment::{file_name_index, SEGMENT_SUFFIX};

/// Bytes read from a segment at a time.
const READ_BYTES: usize = 1 << 20;

/// Why a tail could not read.
#[derive(Debug, thiserror::Error)]
pub enum TailError {
    #[error("log index {wanted} is no longer held (pruned behind a snapshot); the first index held is {first_held}")]
    Pruned { wanted: u64, first_held: u64 },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("{path}: record {index}: {fault}")]
    Corrupt { path: PathBuf, index: u64, fault: RecordFault },
}

/// The open segment being read.
struct Open {
    file: File,
    path: PathBuf,
    /// Index of the record at `buffer[consumed]`.
    index_at: u64,
}

/// Reads a journal directory's records in order from a given index.
pub struct Tail {
    dir: PathBuf,
    next: u64,
    open: Option<Open>,
    /// Bytes read from the open segment; `buffer[consumed..]` is not decoded yet.
    buffer: Vec<u8>,
    consumed: usize,
}

/// The segments of `dir` by first index, ascending.
pub fn segments_list(dir: &Path) -> Result<Vec<(u64, PathBuf)>, TailError> {
    let io = |source| TailError::Io { path: dir.to_path_buf(), source };
    let mut segments = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if let Some(index) = name.to_str().and_then(|n| file_name_index(n, "", SEGMENT_SUFFIX)) {
            segments.push((index, entry.path()));
        }
    }
    segments.sort();
    Ok(segments)
}

impl Tail {
    /// A tail of the journal in `dir` whose first record returned will be `next`.
    pub fn new(dir: impl Into<PathBuf>, next: u64) -> Tail {
        Tail { dir: dir.into(), next: next.max(1), open: None, buffer: Vec::new(), consumed: 0 }
    }

    /// The index of the next record [`Tail::read`] returns.
    pub fn next_index(&self) -> u64 {
        self.next
    }

    /// Records from the next index through `last` (which must be durable), at most
    /// `entries_max`; fewer (possibly none) when the files do not show them yet.
    pub fn read(&mut self, last: u64, entries_max: usize) -> Result<Vec<Entry>, TailError> {
        let mut out = Vec::new();
        while self.next <= last && out.len() < entries_max {
            if self.open.is_none() && !self.open_segment()? {
                break;
            }
            match self.record_next()? {
                Some(entry) => out.push(entry),
                None => {
                    if !self.read_more()? {
                        break;
                    }
                }
            }
        }
        Ok(out)
    }

    /// Opens the segment that holds `next`; false when no segment holds it yet.
    fn open_segment(&mut self) -> Result<bool, TailError> {
        let segments = segments_list(&self.dir)?;
        let Some(&(first, ref path)) = segments.iter().rev().find(|(first, _)| *first <= self.next) else {
            return match segments.first() {
                Some(&(first_held, _)) => Err(TailError::Pruned { wanted: self.next, first_held }),
                None => Ok(false),
            };
        };
        let io = |source| TailError::Io { path: path.clone(), source };
        let mut file = File::open(path).map_err(io)?;
        let mut header = [0u8; SEGMENT_HEADER_BYTES];
        file.read_exact(&mut header).map_err(io)?;
        if let Err(reason) = format::segment_header_decode(&header) {
            let source = std::io::Error::new(std::io::ErrorKind::InvalidData, reason);
            return Err(TailError::Io { path: path.clone(), source });
        }
        file.seek(SeekFrom::Start(SEGMENT_HEADER_BYTES as u64)).map_err(io)?;
        self.buffer.clear();
        self.consumed = 0;
        self.open = Some(Open { file, path: path.clone(), index_at: first });
        Ok(true)
    }

    /// Decodes the next whole record in the buffer; `None` when it needs more bytes.
    fn record_next(&mut self) -> Result<Option<Entry>, TailError> {
        let open = self.open.as_mut().expect("a segment is open");
        loop {
            let record = match format::record_decode(&self.buffer[self.consumed..], PAYLOAD_BYTES_LIMIT) {
                Ok(record) => record,
                Err(RecordFault::HeaderIncomplete { .. } | RecordFault::PayloadIncomplete { .. }) => return Ok(None),
                Err(fault) => return Err(TailError::Corrupt { path: open.path.clone(), index: open.index_at, fault }),
            };
            if record.index != open.index_at {
                let fault = RecordFault::IndexMismatch { index_found: record.index };
                return Err(TailError::Corrupt { path: open.path.clone(), index: open.index_at, fault });
            }
            let (bytes, index) = (record.record_bytes(), record.index);
            let entry = (index >= self.next).then(|| Entry {
                index,
                timestamp_ns: record.timestamp_ns,
                payload: record.payload.to_vec(),
            });
            self.consumed += bytes;
            open.index_at += 1;
            if let Some(entry) = entry {
                self.next = index + 1;
                return Ok(Some(entry));
            }
        }
    }

    /// Reads appended bytes; at the end of a segment that a newer one follows, moves
    /// on. False when nothing more is there yet.
    fn read_more(&mut self) -> Result<bool, TailError> {
        let open = self.open.as_mut().expect("a segment is open");
        // Drop what is decoded (once per read, not once per record).
        self.buffer.drain(..self.consumed);
        self.consumed = 0;
        // Appends what the file has now (up to READ_BYTES), without zeroing a buffer
        // first: a tail at the head of the log polls often and mostly finds nothing.
        let read = (&mut open.file).take(READ_BYTES as u64).read_to_end(&mut self.buffer);
        let read = read.map_err(|source| TailError::Io { path: open.path.clone(), source })?;
        if read > 0 {
            return Ok(true);
        }
        // End of this file. A later segment starting at the next record means this one
        // is complete (a full segment is synced before the next is created).
        let next_segment = self.dir.join(crate::segment::segment_file_name(open.index_at));
        if self.buffer.is_empty() && next_segment.exists() {
            self.open = None;
            return Ok(true);
        }
        if !open.path.exists() {
            // Pruned under us (renamed away): whatever is left was not read.
            let first_held = segments_list(&self.dir)?.first().map_or(self.next, |s| s.0);
            return Err(TailError::Pruned { wanted: self.next, first_held });
        }
        Ok(false)
    }
}

/// The valid snapshots of a journal directory, oldest first, read without changing
/// anything (an invalid one is left alone and not returned).
pub fn snapshots_read(dir: &Path) -> Result<Vec<crate::Snapshot>, TailError> {
    use crate::snapshot::{snapshot_read, SNAPSHOT_PREFIX, SNAPSHOT_SUFFIX};
    let io = |source| TailError::Io { path: dir.to_path_buf(), source };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let name = entry.file_name();
        if let Some(index) = name.to_str().and_then(|n| file_name_index(n, SNAPSHOT_PREFIX, SNAPSHOT_SUFFIX)) {
            found.push((index, entry.path()));
        }
    }
    found.sort();
    let mut snapshots = Vec::new();
    for (index, path) in found {
        match snapshot_read(&path, index, crate::SNAPSHOT_BYTES_LIMIT) {
            Ok(Ok(snapshot)) => snapshots.push(snapshot),
            Ok(Err(reason)) => tracing::warn!(path = %path.display(), reason, "skipping an invalid snapshot"),
            Err(error) => tracing::warn!(path = %path.display(), %error, "skipping an unreadable snapshot"),
        }
    }
    Ok(snapshots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Journal, JournalConfig};

    fn entry(index: u64) -> Entry {
        Entry { index, timestamp_ns: index * 10, payload: format!("command {index}").into_bytes() }
    }

    #[test]
    fn follows_appends_across_segments_and_reports_pruning() {
        let dir = tempfile::tempdir().unwrap();
        let config = JournalConfig { segment_bytes_max: 1024, ..JournalConfig::default() };
        let (mut journal, _) = Journal::open(dir.path(), config).unwrap();
        let mut tail = Tail::new(dir.path(), 1);
        let mut seen = Vec::new();
        for round in 0..10u64 {
            let entries: Vec<Entry> = (round * 30 + 1..=round * 30 + 30).map(entry).collect();
            journal.append(&entries).unwrap();
            let durable = journal.sync().unwrap();
            // In pieces of 7, as a stream's chunks.
            loop {
                let got = tail.read(durable, 7).unwrap();
                if got.is_empty() {
                    break;
                }
                seen.extend(got);
            }
            assert_eq!(tail.next_index(), durable + 1);
        }
        assert_eq!(seen, (1..=300).map(entry).collect::<Vec<_>>());
        assert!(segments_list(dir.path()).unwrap().len() > 3, "the log spans several segments");
        // Nothing beyond what it was told is durable, and nothing more is there.
        assert!(tail.read(u64::MAX, 10).unwrap().is_empty());
        // From the middle.
        let mut middle = Tail::new(dir.path(), 150);
        assert_eq!(middle.read(160, 100).unwrap(), (150..=160).map(entry).collect::<Vec<_>>());
        // The first segment removed: asking for index 1 is a gap, never a skip.
        let first = segments_list(dir.path()).unwrap()[0].1.clone();
        std::fs::remove_file(first).unwrap();
        let first_held = segments_list(dir.path()).unwrap()[0].0;
        match Tail::new(dir.path(), 1).read(300, 10) {
            Err(TailError::Pruned { wanted: 1, first_held: held }) => assert_eq!(held, first_held),
            other => panic!("expected a pruned error, got {other:?}"),
        }
    }
}

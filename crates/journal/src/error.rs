//! Every way a journal operation can fail, as values.
//!
//! Bad input (an index that is not next, a payload over its bound, a snapshot older than
//! the newest) is rejected before any byte is written and changes nothing. Corruption
//! names the file, the byte offset and the index that was expected there, so an operator
//! can look at the exact spot. I/O errors name the operation and the path.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The result of every fallible journal operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why the bytes at one position are not a valid record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFault {
    /// Fewer bytes remain than a record header needs.
    HeaderIncomplete {
        /// Bytes that remained.
        bytes_available: usize,
    },
    /// The header's CRC32C does not match its bytes.
    HeaderChecksum,
    /// The reserved header field is not zero.
    ReservedNonZero,
    /// The header declares a payload above the format's `PAYLOAD_BYTES_LIMIT`.
    PayloadTooLarge {
        /// Declared payload length.
        payload_bytes: u32,
    },
    /// The header is valid but the file ends inside the payload.
    PayloadIncomplete {
        /// Declared payload length.
        payload_bytes: u32,
        /// Payload bytes present.
        bytes_available: usize,
    },
    /// The payload's CRC32C does not match.
    PayloadChecksum,
    /// A valid record carries another index than the next one.
    IndexMismatch {
        /// The index the record carries.
        index_found: u64,
    },
}

impl fmt::Display for RecordFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::HeaderIncomplete { bytes_available } => {
                write!(f, "record header incomplete: {bytes_available} bytes left")
            }
            Self::HeaderChecksum => write!(f, "record header checksum mismatch"),
            Self::ReservedNonZero => write!(f, "record reserved field is not zero"),
            Self::PayloadTooLarge { payload_bytes } => {
                write!(f, "record declares a payload of {payload_bytes} bytes, above PAYLOAD_BYTES_LIMIT")
            }
            Self::PayloadIncomplete { payload_bytes, bytes_available } => {
                write!(f, "record payload incomplete: {bytes_available} of {payload_bytes} bytes")
            }
            Self::PayloadChecksum => write!(f, "record payload checksum mismatch"),
            Self::IndexMismatch { index_found } => write!(f, "record carries index {index_found}"),
        }
    }
}

/// A journal operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused an operation on a path.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done (`"open"`, `"fdatasync"`, `"rename"`, …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A configuration value is outside its bounds.
    #[error("config {field} is invalid: {reason}")]
    ConfigInvalid {
        /// The field's name.
        field: &'static str,
        /// Why, with the bound.
        reason: String,
    },
    /// An entry's payload is larger than `payload_bytes_max`.
    #[error("entry {index}: payload of {payload_bytes} bytes exceeds payload_bytes_max {payload_bytes_max}")]
    PayloadTooLarge {
        /// The entry's index (0 when not yet assigned).
        index: u64,
        /// Its payload length.
        payload_bytes: usize,
        /// The bound.
        payload_bytes_max: u32,
    },
    /// An appended entry's index is not the log's next index.
    #[error("entry index {index_found} is not the next index {index_expected}")]
    IndexNotNext {
        /// The next index of the log.
        index_expected: u64,
        /// The index the entry carries.
        index_found: u64,
    },
    /// A record in the middle of the log is corrupt: a torn write cannot explain it, so
    /// recovery stops rather than guess.
    #[error(
        "{path} at byte {offset}: corrupt record where index {index_expected} was expected: {fault}{}",
        valid_record_note(.valid_record_offset_after)
    )]
    RecordCorrupt {
        /// The segment file.
        path: PathBuf,
        /// Byte offset of the bad record in that file.
        offset: u64,
        /// The index the record should carry.
        index_expected: u64,
        /// What is wrong with it.
        fault: RecordFault,
        /// Where a later valid record starts in the same file, when that is what proves
        /// the fault is not a torn tail.
        valid_record_offset_after: Option<u64>,
    },
    /// A segment file's header is not a valid segment header.
    #[error("{path}: invalid segment header: {reason}")]
    SegmentHeaderInvalid {
        /// The segment file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
    /// Consecutive segments do not continue each other's indexes.
    #[error("{path}: segment starts at index {index_found} but index {index_expected} was expected")]
    SegmentIndexGap {
        /// The later segment file.
        path: PathBuf,
        /// The index after the previous segment's last record.
        index_expected: u64,
        /// The index the segment starts at.
        index_found: u64,
    },
    /// The log starts after the newest valid snapshot's index + 1: records in between are
    /// missing (for example all snapshots that covered them are corrupt).
    #[error("log starts at index {log_first_index} but the newest valid snapshot is at index {snapshot_index}")]
    LogStartUncovered {
        /// First index present in the log.
        log_first_index: u64,
        /// Index of the newest valid snapshot (0: none).
        snapshot_index: u64,
    },
    /// A snapshot is larger than `snapshot_bytes_max`.
    #[error("snapshot of {snapshot_bytes} bytes exceeds snapshot_bytes_max {snapshot_bytes_max}")]
    SnapshotTooLarge {
        /// Its length.
        snapshot_bytes: u64,
        /// The bound.
        snapshot_bytes_max: u64,
    },
    /// An index above [`INDEX_MAX`](crate::INDEX_MAX).
    #[error("index {index} is above INDEX_MAX")]
    IndexOutOfRange {
        /// The rejected index.
        index: u64,
    },
    /// A snapshot must not be older than the newest one already written.
    #[error("snapshot index {index} is older than the newest snapshot {index_newest}")]
    SnapshotIndexBehind {
        /// The rejected snapshot's index.
        index: u64,
        /// The newest snapshot's index.
        index_newest: u64,
    },
    /// A snapshot at this index would leave a gap before the log's first record.
    #[error("snapshot index {index} is before the log's first index {log_first_index} - 1")]
    SnapshotBeforeLogStart {
        /// The rejected snapshot's index.
        index: u64,
        /// First index present in the log.
        log_first_index: u64,
    },
    /// Records a snapshot covers cannot be truncated away.
    #[error("cannot truncate after index {index}: snapshot {snapshot_index} covers up to it")]
    TruncateBelowSnapshot {
        /// The requested index.
        index: u64,
        /// The newest snapshot's index.
        snapshot_index: u64,
    },
    /// Truncation below the log's start.
    #[error("cannot truncate after index {index}: the log starts at {log_first_index}")]
    TruncateBeforeLogStart {
        /// The requested index.
        index: u64,
        /// First index present in the log.
        log_first_index: u64,
    },
    /// A read asked for indexes the log does not hold.
    #[error("range {first}..={last} is outside the log {log_first_index}..={log_last_index}")]
    RangeInvalid {
        /// First requested index.
        first: u64,
        /// Last requested index.
        last: u64,
        /// First index present.
        log_first_index: u64,
        /// Last index present.
        log_last_index: u64,
    },
    /// An earlier I/O error left the files in an unknown state (a failed `fdatasync`
    /// cannot be retried safely): reopen the journal to recover.
    #[error("journal is poisoned by an earlier I/O error; reopen it")]
    Poisoned,
    /// A group-commit batch had no entries.
    #[error("batch is empty")]
    BatchEmpty,
    /// A group-commit batch had more entries than `batch_entries_max`.
    #[error("batch of {entries} entries exceeds batch_entries_max {entries_max}")]
    BatchTooLarge {
        /// Entries in the batch.
        entries: usize,
        /// The bound.
        entries_max: usize,
    },
    /// [`Journal::purge_through`](crate::Journal::purge_through) on a journal opened with
    /// [`Journal::open`](crate::Journal::open), whose prefix only its snapshots remove.
    #[error("purge_through needs a journal opened with Journal::open_purgeable")]
    PurgeNotEnabled,
    /// A snapshot in a purgeable journal (see
    /// [`Journal::open_purgeable`](crate::Journal::open_purgeable)): a snapshot file found in
    /// its directory (which may belong to another kind of journal), or a
    /// [`Journal::write_snapshot`](crate::Journal::write_snapshot) call.
    #[error("{path}: snapshots are disabled in a purgeable journal (its prefix is removed by purge_through)")]
    SnapshotsDisabled {
        /// The snapshot file found, or the journal's directory.
        path: PathBuf,
    },
    /// The group-commit writer has stopped on an error (I/O, or a panicking callback).
    #[error("group-commit writer has stopped")]
    WriterStopped,
    /// The group-commit writer was stopped by its owner (shutdown, or drop).
    #[error("group-commit writer was closed by its owner")]
    WriterClosed,
}

/// The tail of a [`Error::RecordCorrupt`] message: where the proof of mid-log corruption is.
fn valid_record_note(offset: &Option<u64>) -> String {
    match offset {
        Some(offset) => format!(" (a valid record follows at byte {offset})"),
        None => String::new(),
    }
}

impl Error {
    /// Wraps an operating-system error with the operation and the path.
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: io::Error) -> Self {
        Self::Io { op, path: path.into(), source }
    }
}

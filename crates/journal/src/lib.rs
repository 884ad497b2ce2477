//! # bourse-journal
//!
//! A durable, segmented, append-only write-ahead log of sequenced commands for one
//! exchange node, and later the Raft log store. It stores opaque payload bytes: it knows
//! nothing of the engine or of the wire protocol.
//!
//! * [`Journal`] appends [`Entry`] records (index, leader timestamp, payload) to segment
//!   files, makes them durable with one `fdatasync` per [`Journal::sync`], writes
//!   snapshots beside the log, prunes what snapshots cover and truncates a suffix.
//! * [`Journal::open`] recovers a directory: the newest valid snapshot and the records
//!   after it ([`Recovery`]). A torn tail is cut; corruption anywhere else is a typed
//!   [`Error`], never a guess.
//! * [`Journal::open_purgeable`] opens the same files as a log whose prefix its owner
//!   removes with [`Journal::purge_through`] instead of snapshots (the Raft log store);
//!   [`ReadView`] reads records from another thread while the owner appends.
//! * [`Tail`] follows a journal directory from outside its writer, up to a durable
//!   index it is given (the history sink's log stream).
//! * [`GroupCommit`] owns a journal on a writer thread: producers submit batches through a
//!   bounded queue, the writer makes each drained group durable with one `fdatasync` and
//!   acknowledges in index order.
//! * [`measure_fdatasync_latency`] measures what one durable write costs on a disk.
//!
//! The byte layout is in [`mod@format`]. Bounds are in [`JournalConfig`] and
//! [`GroupCommitConfig`].
//!
//! ```
//! use bourse_journal::{Entry, Journal, JournalConfig};
//!
//! let dir = tempfile::tempdir().unwrap();
//! let (mut journal, recovery) = Journal::open(dir.path(), JournalConfig::default()).unwrap();
//! assert!(recovery.snapshot.is_none());
//! journal.append(&[Entry { index: 1, timestamp_ns: 7, payload: b"buy".to_vec() }]).unwrap();
//! assert_eq!(journal.sync().unwrap(), 1);
//! drop(journal);
//!
//! let (journal, recovery) = Journal::open(dir.path(), JournalConfig::default()).unwrap();
//! let entries: Vec<Entry> = recovery.entries.collect::<Result<_, _>>().unwrap();
//! assert_eq!(entries[0].payload, b"buy");
//! assert_eq!(journal.last_index(), 1);
//! ```

mod config;
mod entries;
mod error;
pub mod format;
mod fsync_probe;
mod group_commit;
mod journal;
mod recovery;
mod segment;
mod snapshot;
mod stats;
mod tail;

pub use config::{
    JournalConfig, INDEX_MAX, PAYLOAD_BYTES_LIMIT, SEGMENT_BYTES_LIMIT, SEGMENT_BYTES_MIN, SNAPSHOTS_KEPT,
    SNAPSHOT_BYTES_LIMIT,
};
pub use entries::{Entries, ReadView};
pub use error::{Error, RecordFault, Result};
pub use fsync_probe::{measure_fdatasync_latency, FsyncLatency, FSYNC_PROBE_SAMPLES_MAX, FSYNC_PROBE_WRITE_BYTES};
pub use group_commit::{GroupCommit, GroupCommitConfig, GroupCommitHandle, IndexRange, Proposal, Ticket};
pub use journal::{Entry, Journal, SegmentRemover};
pub use recovery::{Recovery, TailCut};
pub use snapshot::Snapshot;
pub use stats::{GroupCommitStats, JournalStats, Log2Histogram};
pub use tail::{segments_list, snapshots_read, Tail, TailError};

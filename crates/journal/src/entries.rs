//! Reading records back, lazily, one segment in memory at a time.
//!
//! Used for the records after the snapshot at recovery and for [`Journal::read_range`]
//! (Raft replication later). Every record is checked again (both checksums, the index
//! sequence): the files were validated when the journal opened, so a failure here means
//! they changed underneath, and it is reported as [`Error::RecordCorrupt`].
//!
//! Limits: the files must stay while iterating: consume the iterator before
//! `truncate_after` or `write_snapshot` delete segments it still needs. Memory is one
//! segment.
//!
//! [`Journal::read_range`]: crate::Journal::read_range

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;

use crate::config::PAYLOAD_BYTES_LIMIT;
use crate::error::{Error, RecordFault, Result};
use crate::format::{self, SEGMENT_HEADER_BYTES};
use crate::journal::Entry;
use crate::segment::{self, SegmentFile};

/// The journal's files as they were when [`Journal::read_view`] made it: reads records
/// `first_index() ..= last_index()` from another thread while the owner keeps appending.
///
/// Appending never disturbs a view: records already written keep their bytes and place,
/// and a new segment only adds a file. What the owner must coordinate with readers is
/// removal: [`Journal::truncate_after`], [`Journal::purge_through`] and snapshot pruning
/// delete or shorten files a view names, so a read racing one of them fails (missing file,
/// short segment). Hold a lock across each read and each of those calls, and take a new
/// view after them. A read beyond what was written when the view was made is refused.
///
/// [`Journal::read_view`]: crate::Journal::read_view
/// [`Journal::truncate_after`]: crate::Journal::truncate_after
/// [`Journal::purge_through`]: crate::Journal::purge_through
#[derive(Clone, Debug)]
pub struct ReadView {
    segments: Arc<[SegmentFile]>,
    first_index: u64,
    last_index: u64,
}

impl ReadView {
    pub(crate) fn new(segments: Arc<[SegmentFile]>, first_index: u64, last_index: u64) -> Self {
        Self { segments, first_index, last_index }
    }

    /// Reads the records `first ..= last` back from the files (`first == last + 1`: none).
    pub fn read_range(&self, first: u64, last: u64) -> Result<Entries> {
        if first < self.first_index || last > self.last_index || first > last + 1 {
            let (log_first_index, log_last_index) = (self.first_index, self.last_index);
            return Err(Error::RangeInvalid { first, last, log_first_index, log_last_index });
        }
        Ok(Entries::new(&self.segments, first, last))
    }

    /// Index of the first record held when the view was made.
    pub fn first_index(&self) -> u64 {
        self.first_index
    }

    /// Index of the last record written when the view was made.
    pub fn last_index(&self) -> u64 {
        self.last_index
    }
}

/// An iterator over the records `first ..= last` of a log, in index order. It stops
/// after the first error.
#[derive(Debug)]
pub struct Entries {
    /// Segments not yet loaded, in order.
    segments: VecDeque<SegmentFile>,
    /// Next index to yield.
    index_next: u64,
    /// Last index to yield.
    index_last: u64,
    /// The loaded segment's bytes, its path, the read offset and the index expected there.
    bytes: Vec<u8>,
    path: PathBuf,
    offset: usize,
    index_at_offset: u64,
}

impl Entries {
    /// Records `first ..= last` of the log made of `segments` (sorted by first index).
    pub(crate) fn new(segments: &[SegmentFile], first: u64, last: u64) -> Self {
        let start = segments.iter().rposition(|segment| segment.first_index <= first).unwrap_or(0);
        Self {
            segments: segments[start..].iter().cloned().collect(),
            index_next: first,
            index_last: last,
            bytes: Vec::new(),
            path: PathBuf::new(),
            offset: 0,
            index_at_offset: 0,
        }
    }

    /// Records still to come, if no error cuts the iteration short.
    pub fn remaining(&self) -> u64 {
        (self.index_last + 1).saturating_sub(self.index_next)
    }

    fn entry_next(&mut self) -> Result<Option<Entry>> {
        while self.index_next <= self.index_last {
            if self.offset >= self.bytes.len() {
                self.segment_load()?;
                continue;
            }
            let (index_expected, offset) = (self.index_at_offset, self.offset);
            let record = format::record_decode(&self.bytes[offset..], PAYLOAD_BYTES_LIMIT)
                .map_err(|fault| self.record_corrupt(fault))?;
            if record.index != index_expected {
                return Err(self.record_corrupt(RecordFault::IndexMismatch { index_found: record.index }));
            }
            self.offset += record.record_bytes();
            self.index_at_offset += 1;
            if record.index >= self.index_next {
                self.index_next += 1;
                let (timestamp_ns, payload) = (record.timestamp_ns, record.payload.to_vec());
                return Ok(Some(Entry { index: record.index, timestamp_ns, payload }));
            }
        }
        Ok(None)
    }

    /// Loads the next segment; running out of segments before the last index is an
    /// error at the end of the previous one.
    fn segment_load(&mut self) -> Result<()> {
        let Some(segment) = self.segments.pop_front() else {
            return Err(self.record_corrupt(RecordFault::HeaderIncomplete { bytes_available: 0 }));
        };
        let bytes = segment::segment_read(&segment.path)?;
        segment::segment_header_check(&bytes, &segment)?;
        if self.index_at_offset != 0 && segment.first_index != self.index_at_offset {
            let (index_expected, index_found) = (self.index_at_offset, segment.first_index);
            return Err(Error::SegmentIndexGap { path: segment.path, index_expected, index_found });
        }
        self.bytes = bytes;
        self.path = segment.path;
        self.offset = SEGMENT_HEADER_BYTES;
        self.index_at_offset = segment.first_index;
        Ok(())
    }

    fn record_corrupt(&self, fault: RecordFault) -> Error {
        Error::RecordCorrupt {
            path: self.path.clone(),
            offset: self.offset as u64,
            index_expected: self.index_at_offset.max(self.index_next),
            fault,
            valid_record_offset_after: None,
        }
    }
}

impl Iterator for Entries {
    type Item = Result<Entry>;

    fn next(&mut self) -> Option<Self::Item> {
        match self.entry_next() {
            Ok(entry) => entry.map(Ok),
            Err(error) => {
                // Fuse: nothing after an error can be trusted to be in order.
                self.index_next = self.index_last + 1;
                Some(Err(error))
            }
        }
    }
}

//! Segment files: naming, atomic creation, file helpers, and the scan that validates one
//! segment at recovery.
//!
//! Invariants:
//! * Every `*.log` file in the directory has a complete, valid header: a segment is
//!   written to `<name>.log.tmp`, fsynced and renamed into place, then the directory is
//!   fsynced. A crash leaves either no segment or a whole header.
//! * Records inside a segment carry consecutive indexes starting at its `first_index`.
//!
//! The scan tells a torn tail from corruption in the middle: after a bad record in the
//! last segment it searches the rest of the file, byte by byte, for a later valid record
//! (a valid header checksum, index not below the expected one, a valid payload checksum).
//! None found: the bad bytes are a torn or corrupt tail, safe to cut. One found: the
//! corruption is in the middle and recovery stops.
//!
//! Complexity: a scan is linear in the segment; the search after a bad record is linear
//! in the bytes after it, with a cheap index filter before any checksum.
//! Limits: a segment is read into memory whole (bounded by `SEGMENT_BYTES_LIMIT` plus one
//! record).

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::config::{PAYLOAD_BYTES_LIMIT, SEGMENT_BYTES_LIMIT};
use crate::error::{Error, RecordFault, Result};
use crate::format::{self, le_u64, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};

/// Suffix of a segment file.
pub(crate) const SEGMENT_SUFFIX: &str = ".log";
/// Suffix of a segment being created.
pub(crate) const SEGMENT_TEMP_SUFFIX: &str = ".log.tmp";
/// Suffix of a pruned segment being deleted: no longer part of the log.
pub(crate) const SEGMENT_PRUNED_SUFFIX: &str = ".log.pruned";
/// Digits of the index in a segment or snapshot file name.
pub(crate) const FILE_INDEX_DIGITS: usize = 20;
/// Largest segment file recovery will read: the largest segment a writer makes.
const SEGMENT_FILE_BYTES_MAX: u64 =
    SEGMENT_BYTES_LIMIT + RECORD_HEADER_BYTES as u64 + PAYLOAD_BYTES_LIMIT as u64 + SEGMENT_HEADER_BYTES as u64;

/// One segment file of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SegmentFile {
    /// Index of its first record (also in its name and header).
    pub first_index: u64,
    /// Where it is.
    pub path: PathBuf,
}

/// The file name of the segment starting at `first_index`.
pub(crate) fn segment_file_name(first_index: u64) -> String {
    format!("{first_index:020}{SEGMENT_SUFFIX}")
}

/// The index in a file name of the form `<20 digits><suffix>`, if it has that form.
pub(crate) fn file_name_index(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != FILE_INDEX_DIGITS || !digits.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Fsyncs a directory, so that creations, renames and deletions in it are durable.
pub(crate) fn dir_sync(dir: &Path) -> Result<()> {
    let handle = File::open(dir).map_err(|source| Error::io("open directory", dir, source))?;
    handle.sync_all().map_err(|source| Error::io("fsync directory", dir, source))
}

/// Reads a whole file, refusing one longer than `bytes_max`.
pub(crate) fn file_read(path: &Path, bytes_max: u64) -> Result<Vec<u8>> {
    let bytes_len = fs::metadata(path).map_err(|source| Error::io("stat", path, source))?.len();
    if bytes_len > bytes_max {
        let reason = format!("{bytes_len} bytes is more than the {bytes_max} bytes any writer makes");
        return Err(Error::io("read", path, std::io::Error::new(std::io::ErrorKind::InvalidData, reason)));
    }
    fs::read(path).map_err(|source| Error::io("read", path, source))
}

/// Reads a whole segment file.
pub(crate) fn segment_read(path: &Path) -> Result<Vec<u8>> {
    file_read(path, SEGMENT_FILE_BYTES_MAX)
}

/// Deletes a file.
pub(crate) fn file_remove(path: &Path) -> Result<()> {
    fs::remove_file(path).map_err(|source| Error::io("remove", path, source))
}

/// Deletes a file by cutting it from the end `step_bytes` at a time, `pause` apart, then
/// removing what is left. Freeing a few hundred megabytes in one `unlink` makes the
/// filesystem's next journal commit free (and, mounted with `discard`, trim) all of it,
/// and every `fdatasync` on that filesystem waits for that commit: 0.1–0.2 s. Freed a
/// few megabytes at a time, no commit carries much.
pub(crate) fn file_remove_gradually(path: &Path, step_bytes: u64, pause: std::time::Duration) -> Result<()> {
    let file = OpenOptions::new().write(true).open(path).map_err(|source| Error::io("open", path, source))?;
    let mut bytes_len = file.metadata().map_err(|source| Error::io("stat", path, source))?.len();
    while bytes_len > step_bytes {
        bytes_len -= step_bytes;
        file.set_len(bytes_len).map_err(|source| Error::io("truncate", path, source))?;
        std::thread::sleep(pause);
    }
    file_remove(path)
}

/// Creates the segment starting at `first_index` atomically (temporary file, fsync,
/// rename, directory fsync) and returns it open for appending after its header.
pub(crate) fn segment_create(dir: &Path, first_index: u64) -> Result<(File, SegmentFile)> {
    let path = dir.join(segment_file_name(first_index));
    let path_temp = dir.join(format!("{first_index:020}{SEGMENT_TEMP_SUFFIX}"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path_temp)
        .map_err(|source| Error::io("create", &path_temp, source))?;
    file.write_all(&format::segment_header_encode(first_index))
        .map_err(|source| Error::io("write", &path_temp, source))?;
    file.sync_all().map_err(|source| Error::io("fsync", &path_temp, source))?;
    fs::rename(&path_temp, &path).map_err(|source| Error::io("rename", &path_temp, source))?;
    dir_sync(dir)?;
    Ok((file, SegmentFile { first_index, path }))
}

/// Opens an existing segment for appending at byte `bytes_len`, cutting anything after.
pub(crate) fn segment_open_append(path: &Path, bytes_len: u64) -> Result<File> {
    use std::io::{Seek, SeekFrom};
    let mut file = OpenOptions::new().write(true).open(path).map_err(|source| Error::io("open", path, source))?;
    let bytes_present = file.metadata().map_err(|source| Error::io("stat", path, source))?.len();
    if bytes_present != bytes_len {
        file.set_len(bytes_len).map_err(|source| Error::io("truncate", path, source))?;
        file.sync_data().map_err(|source| Error::io("fdatasync", path, source))?;
    }
    file.seek(SeekFrom::Start(bytes_len)).map_err(|source| Error::io("seek", path, source))?;
    Ok(file)
}

/// Checks a segment's header against the index its name promises.
pub(crate) fn segment_header_check(bytes: &[u8], segment: &SegmentFile) -> Result<()> {
    let first_index = format::segment_header_decode(bytes)
        .map_err(|reason| Error::SegmentHeaderInvalid { path: segment.path.clone(), reason })?;
    if first_index != segment.first_index {
        return Err(Error::SegmentHeaderInvalid {
            path: segment.path.clone(),
            reason: "header index differs from the file name",
        });
    }
    Ok(())
}

/// Byte offset of record `index` in a segment that holds it or ends just before it.
pub(crate) fn segment_record_offset(segment: &SegmentFile, index: u64) -> Result<u64> {
    let bytes = segment_read(&segment.path)?;
    let mut offset = SEGMENT_HEADER_BYTES;
    let mut index_expected = segment.first_index;
    while index_expected < index {
        let record_corrupt = |fault| Error::RecordCorrupt {
            path: segment.path.clone(),
            offset: offset as u64,
            index_expected,
            fault,
            valid_record_offset_after: None,
        };
        let record = format::record_decode(&bytes[offset..], PAYLOAD_BYTES_LIMIT).map_err(record_corrupt)?;
        if record.index != index_expected {
            return Err(record_corrupt(RecordFault::IndexMismatch { index_found: record.index }));
        }
        offset += record.record_bytes();
        index_expected += 1;
    }
    Ok(offset as u64)
}

/// What a scan found in one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegmentScan {
    /// Index of the last valid record (`first_index - 1` when there is none).
    pub last_index: u64,
    /// Bytes from the file start to the end of the last valid record.
    pub bytes_valid: u64,
    /// Why the bytes after `bytes_valid` were not a record, when there are any: only the
    /// last segment may have such a tail.
    pub tail_fault: Option<RecordFault>,
}

/// Validates every record of one segment whose header was checked. A bad record is a
/// tail only in the last segment and only with no valid record after it. Payloads are
/// bounded by the format's `PAYLOAD_BYTES_LIMIT`, not the configured
/// `payload_bytes_max`: lowering the bound in the configuration must never turn valid
/// records written under a higher one into a "tail" to cut.
pub(crate) fn segment_scan(bytes: &[u8], segment: &SegmentFile, is_last: bool) -> Result<SegmentScan> {
    let mut offset = SEGMENT_HEADER_BYTES;
    let mut index_expected = segment.first_index;
    while offset < bytes.len() {
        let fault = match format::record_decode(&bytes[offset..], PAYLOAD_BYTES_LIMIT) {
            Ok(record) if record.index == index_expected => {
                offset += record.record_bytes();
                index_expected += 1;
                continue;
            }
            // A valid record with the wrong index is never a torn write.
            Ok(record) => RecordFault::IndexMismatch { index_found: record.index },
            Err(fault) => fault,
        };
        let valid_after = record_valid_offset_find(bytes, offset + 1, index_expected);
        if !is_last || valid_after.is_some() || matches!(fault, RecordFault::IndexMismatch { .. }) {
            return Err(Error::RecordCorrupt {
                path: segment.path.clone(),
                offset: offset as u64,
                index_expected,
                fault,
                valid_record_offset_after: valid_after.map(|found| found as u64),
            });
        }
        return Ok(SegmentScan { last_index: index_expected - 1, bytes_valid: offset as u64, tail_fault: Some(fault) });
    }
    Ok(SegmentScan { last_index: index_expected - 1, bytes_valid: offset as u64, tail_fault: None })
}

/// The offset of the first valid record at or after `from` whose index is at least
/// `index_min`, if any.
fn record_valid_offset_find(bytes: &[u8], from: usize, index_min: u64) -> Option<usize> {
    let offset_last = bytes.len().checked_sub(RECORD_HEADER_BYTES)?;
    // A later record's index can exceed index_min by at most one per record that fits.
    let index_max = index_min.saturating_add((bytes.len() / RECORD_HEADER_BYTES) as u64);
    (from..=offset_last).find(|&offset| {
        let index = le_u64(bytes, offset + 8);
        (index_min..=index_max).contains(&index) && format::record_decode(&bytes[offset..], PAYLOAD_BYTES_LIMIT).is_ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_released_in_steps_is_deleted_whatever_its_length() {
        let dir = tempfile::tempdir().unwrap();
        for bytes_len in [0_usize, 1, 4096, 4097, 100_000] {
            let path = dir.path().join(format!("{bytes_len}.log.pruned"));
            fs::write(&path, vec![7_u8; bytes_len]).unwrap();
            file_remove_gradually(&path, 4096, std::time::Duration::ZERO).unwrap();
            assert!(!path.exists(), "{bytes_len} bytes");
        }
        let path = dir.path().join("at-once");
        fs::write(&path, b"x").unwrap();
        file_remove_gradually(&path, u64::MAX, std::time::Duration::ZERO).unwrap();
        assert!(!path.exists());
        assert!(file_remove_gradually(&path, 4096, std::time::Duration::ZERO).is_err(), "a missing file is an error");
    }

    fn segment_bytes(first_index: u64, payloads: &[&[u8]]) -> Vec<u8> {
        let mut bytes = format::segment_header_encode(first_index).to_vec();
        for (position, payload) in payloads.iter().enumerate() {
            format::record_encode(&mut bytes, first_index + position as u64, 0, payload);
        }
        bytes
    }

    fn segment(first_index: u64) -> SegmentFile {
        SegmentFile { first_index, path: PathBuf::from(segment_file_name(first_index)) }
    }

    #[test]
    fn names_round_trip() {
        assert_eq!(segment_file_name(1), "00000000000000000001.log");
        assert_eq!(file_name_index("00000000000000000001.log", "", SEGMENT_SUFFIX), Some(1));
        assert_eq!(file_name_index("0001.log", "", SEGMENT_SUFFIX), None);
        assert_eq!(file_name_index("0000000000000000000x.log", "", SEGMENT_SUFFIX), None);
    }

    #[test]
    fn scan_clean_and_torn() {
        let bytes = segment_bytes(5, &[b"a", b"bb", b"ccc"]);
        let scan = segment_scan(&bytes, &segment(5), true).unwrap();
        assert_eq!(scan, SegmentScan { last_index: 7, bytes_valid: bytes.len() as u64, tail_fault: None });
        let scan = segment_scan(&bytes[..bytes.len() - 1], &segment(5), true).unwrap();
        assert_eq!(scan.last_index, 6);
        assert!(matches!(scan.tail_fault, Some(RecordFault::PayloadIncomplete { .. })));
        assert!(matches!(
            segment_scan(&bytes[..bytes.len() - 1], &segment(5), false),
            Err(Error::RecordCorrupt { index_expected: 7, .. })
        ));
    }

    #[test]
    fn scan_middle_corruption_names_the_spot() {
        let mut bytes = segment_bytes(1, &[b"a", b"bb", b"ccc"]);
        let offset_second = SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 1;
        bytes[offset_second + 10] ^= 0xff;
        match segment_scan(&bytes, &segment(1), true) {
            Err(Error::RecordCorrupt { offset, index_expected, valid_record_offset_after, .. }) => {
                assert_eq!((offset, index_expected), (offset_second as u64, 2));
                assert_eq!(valid_record_offset_after, Some((offset_second + RECORD_HEADER_BYTES + 2) as u64));
            }
            other => panic!("expected RecordCorrupt, got {other:?}"),
        }
    }
}

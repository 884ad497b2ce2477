//! Snapshot files beside the log: atomic write, validated read, quarantine.
//!
//! A snapshot is the state after applying every record up to its index. It is written to
//! `snapshot-<index:020>.snap.tmp`, fsynced, renamed to `snapshot-<index:020>.snap`, and
//! the directory is fsynced: a crash leaves either the old set of snapshots or the new
//! one plus a stray temporary file, which recovery deletes. A snapshot that fails its
//! checksum at recovery is renamed to `*.snap.corrupt` (kept for inspection, never read
//! again) and recovery falls back to the one before it.
//!
//! Complexity: linear in the snapshot's length. Limits: read into memory whole, bounded
//! by `snapshot_bytes_max`.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::format::{self, SNAPSHOT_HEADER_BYTES};
use crate::segment::dir_sync;

/// Prefix of a snapshot file name.
pub(crate) const SNAPSHOT_PREFIX: &str = "snapshot-";
/// Suffix of a snapshot file name.
pub(crate) const SNAPSHOT_SUFFIX: &str = ".snap";
/// Suffix of a snapshot being written.
pub(crate) const SNAPSHOT_TEMP_SUFFIX: &str = ".snap.tmp";
/// Suffix given to a snapshot found corrupt.
pub(crate) const SNAPSHOT_CORRUPT_SUFFIX: &str = ".snap.corrupt";

/// The state of the state machine after applying every record up to `index`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// Last log index the state includes.
    pub index: u64,
    /// The state, opaque to the journal.
    pub bytes: Vec<u8>,
}

/// The file name of the snapshot at `index`.
pub(crate) fn snapshot_file_name(index: u64) -> String {
    format!("{SNAPSHOT_PREFIX}{index:020}{SNAPSHOT_SUFFIX}")
}

/// Writes the snapshot at `index` durably and atomically; returns its path.
pub(crate) fn snapshot_write(dir: &Path, index: u64, bytes: &[u8]) -> Result<PathBuf> {
    let path = dir.join(snapshot_file_name(index));
    let path_temp = dir.join(format!("{SNAPSHOT_PREFIX}{index:020}{SNAPSHOT_TEMP_SUFFIX}"));
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path_temp)
        .map_err(|source| Error::io("create", &path_temp, source))?;
    let header = format::snapshot_header_encode(index, bytes);
    file.write_all(&header).map_err(|source| Error::io("write", &path_temp, source))?;
    file.write_all(bytes).map_err(|source| Error::io("write", &path_temp, source))?;
    file.sync_all().map_err(|source| Error::io("fsync", &path_temp, source))?;
    drop(file);
    fs::rename(&path_temp, &path).map_err(|source| Error::io("rename", &path_temp, source))?;
    dir_sync(dir)?;
    Ok(path)
}

/// Reads and checks the snapshot file at `path`, which its name says is at
/// `index_expected`. The outer error is I/O; the inner one says why the contents are
/// not a valid snapshot.
pub(crate) fn snapshot_read(
    path: &Path,
    index_expected: u64,
    snapshot_bytes_max: u64,
) -> Result<Result<Snapshot, &'static str>> {
    let bytes_len = fs::metadata(path).map_err(|source| Error::io("stat", path, source))?.len();
    if bytes_len > snapshot_bytes_max.saturating_add(SNAPSHOT_HEADER_BYTES as u64) {
        return Ok(Err("file longer than snapshot_bytes_max"));
    }
    let bytes = fs::read(path).map_err(|source| Error::io("read", path, source))?;
    let (index, payload) = match format::snapshot_decode(&bytes) {
        Ok(decoded) => decoded,
        Err(reason) => return Ok(Err(reason)),
    };
    if index != index_expected {
        return Ok(Err("header index differs from the file name"));
    }
    Ok(Ok(Snapshot { index, bytes: payload.to_vec() }))
}

/// Renames a corrupt snapshot out of the way; returns its new path.
pub(crate) fn snapshot_quarantine(path: &Path) -> Result<PathBuf> {
    // `snapshot-<index>.snap` becomes `snapshot-<index>.snap.corrupt`.
    let path_corrupt = path.with_extension(SNAPSHOT_CORRUPT_SUFFIX.trim_start_matches('.'));
    fs::rename(path, &path_corrupt).map_err(|source| Error::io("rename", path, source))?;
    Ok(path_corrupt)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_read_quarantine() {
        let dir = tempfile::tempdir().unwrap();
        let path = snapshot_write(dir.path(), 12, b"state").unwrap();
        assert_eq!(path.file_name().unwrap(), "snapshot-00000000000000000012.snap");
        let snapshot = snapshot_read(&path, 12, 100).unwrap().unwrap();
        assert_eq!(snapshot, Snapshot { index: 12, bytes: b"state".to_vec() });
        assert_eq!(snapshot_read(&path, 13, 100).unwrap(), Err("header index differs from the file name"));
        assert_eq!(snapshot_read(&path, 12, 2).unwrap(), Err("file longer than snapshot_bytes_max"));
        let path_corrupt = snapshot_quarantine(&path).unwrap();
        assert!(path_corrupt.to_string_lossy().ends_with(SNAPSHOT_CORRUPT_SUFFIX));
        assert!(!path.exists());
    }
}

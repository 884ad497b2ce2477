//! Engine snapshots on disk, as the Raft state machine's snapshots.
//!
//! A snapshot file is `snapshot-<index>.bin` in its own directory:
//!
//! ```text
//! magic "BRSSNAP1" | u32 LE meta length | meta (postcard SnapshotMeta) |
//! u64 LE data length | data (engine snapshot bytes) | u32 LE CRC32C of all before
//! ```
//!
//! It is written to a temporary file, fsynced, renamed into place and the directory
//! fsynced, so a crash leaves either the old set of snapshots or the new one. The newest
//! [`SNAPSHOTS_KEPT`] files are kept; a file that fails its checksum is skipped with a
//! warning (an older valid one, or the log, still rebuilds the state).
//!
//! The deterministic simulator keeps its snapshots in memory instead
//! ([`SnapshotStore::memory`]): the same store, saved and read on the caller's thread.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::types::SnapshotMeta;

const MAGIC: &[u8; 8] = b"BRSSNAP1";

/// Snapshot files kept; older ones are deleted after a newer one is durable.
pub const SNAPSHOTS_KEPT: usize = 2;

/// The directory holding the state machine's snapshots.
#[derive(Clone, Debug)]
pub struct SnapshotStore {
    dir: PathBuf,
    /// In memory instead of `dir` (the simulator): the newest snapshots, oldest first.
    memory: Option<Kept>,
}

/// Snapshots kept in memory, oldest first.
type Kept = Arc<Mutex<Vec<(SnapshotMeta, Vec<u8>)>>>;

impl SnapshotStore {
    /// Opens (creating) the directory and removes temporary files a crash left behind.
    pub fn open(dir: impl AsRef<Path>) -> io::Result<SnapshotStore> {
        let dir = dir.as_ref().to_path_buf();
        fs::create_dir_all(&dir)?;
        for entry in fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                fs::remove_file(&path)?;
            }
        }
        Ok(SnapshotStore { dir, memory: None })
    }

    /// A store that keeps its newest [`SNAPSHOTS_KEPT`] snapshots in memory, for the
    /// simulator: clones share them, so a simulated restart finds what was saved.
    pub fn memory() -> SnapshotStore {
        SnapshotStore { dir: PathBuf::new(), memory: Some(Arc::default()) }
    }

    /// [`SnapshotStore::save`] off the async thread (on the caller's, in memory).
    pub async fn save_async(&self, meta: SnapshotMeta, data: Vec<u8>) -> io::Result<(SnapshotMeta, Vec<u8>)> {
        if self.memory.is_some() {
            return self.save(&meta, &data).map(|()| (meta, data));
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.save(&meta, &data).map(|()| (meta, data)))
            .await
            .map_err(io::Error::other)?
    }

    /// [`SnapshotStore::latest`] off the async thread (on the caller's, in memory).
    pub async fn latest_async(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        if self.memory.is_some() {
            return self.latest();
        }
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.latest()).await.map_err(io::Error::other)?
    }

    /// A handle that only reads the directory of a running member (it removes nothing:
    /// a temporary file there may be a snapshot being written).
    pub fn reader(dir: impl AsRef<Path>) -> SnapshotStore {
        SnapshotStore { dir: dir.as_ref().to_path_buf(), memory: None }
    }

    fn files(&self) -> io::Result<Vec<(u64, PathBuf)>> {
        let mut files = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            if let Some(index) = name.strip_prefix("snapshot-").and_then(|n| n.strip_suffix(".bin")) {
                if let Ok(index) = index.parse::<u64>() {
                    files.push((index, path));
                }
            }
        }
        files.sort();
        Ok(files)
    }

    /// Makes a snapshot durable, then deletes all but the newest [`SNAPSHOTS_KEPT`].
    pub fn save(&self, meta: &SnapshotMeta, data: &[u8]) -> io::Result<()> {
        if let Some(memory) = &self.memory {
            let mut kept = memory.lock().map_err(|_| io::Error::other("snapshot store poisoned"))?;
            kept.push((meta.clone(), data.to_vec()));
            let excess = kept.len().saturating_sub(SNAPSHOTS_KEPT);
            kept.drain(..excess);
            return Ok(());
        }
        let index = meta.last_log_id.as_ref().map_or(0, |id| id.index);
        let meta_bytes = postcard::to_stdvec(meta).map_err(io::Error::other)?;
        let mut bytes = Vec::with_capacity(8 + 4 + meta_bytes.len() + 8 + data.len() + 4);
        bytes.extend_from_slice(MAGIC);
        bytes.extend_from_slice(&(meta_bytes.len() as u32).to_le_bytes());
        bytes.extend_from_slice(&meta_bytes);
        bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
        bytes.extend_from_slice(data);
        let crc = crc32c::crc32c(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        let path = self.dir.join(format!("snapshot-{index:020}.bin"));
        let temp = path.with_extension("tmp");
        let mut file = File::create(&temp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        drop(file);
        fs::rename(&temp, &path)?;
        File::open(&self.dir)?.sync_all()?;
        let files = self.files()?;
        if files.len() > SNAPSHOTS_KEPT {
            for (_, old) in &files[..files.len() - SNAPSHOTS_KEPT] {
                fs::remove_file(old)?;
            }
        }
        Ok(())
    }

    /// The newest snapshot whose checksum holds, if any.
    pub fn latest(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        if let Some(memory) = &self.memory {
            let kept = memory.lock().map_err(|_| io::Error::other("snapshot store poisoned"))?;
            return Ok(kept.last().cloned());
        }
        for (_, path) in self.files()?.into_iter().rev() {
            match read(&path) {
                Ok(snapshot) => return Ok(Some(snapshot)),
                Err(error) => tracing::warn!(path = %path.display(), %error, "skipping an unreadable snapshot"),
            }
        }
        Ok(None)
    }
}

fn read(path: &Path) -> io::Result<(SnapshotMeta, Vec<u8>)> {
    let bytes = fs::read(path)?;
    let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidData, why.to_string());
    if bytes.len() < 8 + 4 + 8 + 4 || &bytes[..8] != MAGIC {
        return Err(bad("not a snapshot file"));
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(bad("checksum mismatch"));
    }
    let meta_len = u32::from_le_bytes(body[8..12].try_into().expect("4 bytes")) as usize;
    let meta_end =
        12usize.checked_add(meta_len).filter(|&e| e + 8 <= body.len()).ok_or_else(|| bad("bad meta length"))?;
    let meta: SnapshotMeta = postcard::from_bytes(&body[12..meta_end]).map_err(|e| bad(&e.to_string()))?;
    let data_len = u64::from_le_bytes(body[meta_end..meta_end + 8].try_into().expect("8 bytes")) as usize;
    let data = &body[meta_end + 8..];
    if data.len() != data_len {
        return Err(bad("bad data length"));
    }
    Ok((meta, data.to_vec()))
}

//! Offline replay of a member's data directory: the newest state machine snapshot, then
//! every log entry after it up to the commit index the log store last saved. With the
//! node stopped this rebuilds exactly what it had applied (a graceful shutdown saves the
//! commit index; after a crash the saved one may be a little behind, never ahead).

use std::io;
use std::path::Path;

use openraft::storage::RaftLogReader;
use openraft::EntryPayload;

use crate::log_store::LogStore;
use crate::snapshot_store::SnapshotStore;
use crate::state_machine::Committed;

/// Entries read from the log per step.
const CHUNK: u64 = 1024;

/// The snapshot a replay starts from, and where the committed log ends.
pub struct ReplayStart {
    /// (index, engine bytes) of the newest valid snapshot.
    pub snapshot: Option<(u64, Vec<u8>)>,
    /// The last committed index the log store saved.
    pub committed: Option<u64>,
}

/// Replays the member whose Raft directory is `dir` (`DATA/raft`): `start` gets the
/// snapshot (restore the engine from it), then `apply` gets each committed entry after
/// it in log order. Returns the index of the last entry given to `apply` (or of the
/// snapshot). The member must not be running.
pub async fn replay_member(
    dir: &Path,
    start: impl FnOnce(&ReplayStart) -> Result<(), String>,
    mut apply: impl FnMut(Committed) -> Result<(), String>,
) -> io::Result<Option<u64>> {
    let bad = |e: String| io::Error::new(io::ErrorKind::InvalidData, e);
    let snapshot = SnapshotStore::open(dir.join("snapshots"))?.latest()?;
    let store = LogStore::open(&dir.join("raft-log")).map_err(io::Error::other)?;
    let committed = store.committed().map(|id| id.index);
    let snapshot_index = snapshot.as_ref().and_then(|(meta, _)| meta.last_log_id.map(|id| id.index));
    let first = ReplayStart {
        snapshot: snapshot.map(|(meta, bytes)| (meta.last_log_id.map_or(0, |id| id.index), bytes)),
        committed,
    };
    start(&first).map_err(bad)?;
    let mut last = snapshot_index;
    let mut next = snapshot_index.map_or(0, |i| i + 1);
    let mut reader = store.reader();
    while let Some(end) = committed.filter(|&c| next <= c) {
        let upto = end.min(next + CHUNK - 1);
        let entries = reader.try_get_log_entries(next..=upto).await?;
        if entries.len() as u64 != upto - next + 1 {
            return Err(bad(format!("the log lacks entries between {next} and {upto}")));
        }
        for entry in entries {
            let index = entry.log_id.index;
            let batch = match entry.payload {
                EntryPayload::Normal(batch) => Some(batch),
                EntryPayload::Blank | EntryPayload::Membership(_) => None,
            };
            apply(Committed { index, term: entry.log_id.leader_id.term, batch }).map_err(bad)?;
            last = Some(index);
        }
        next = upto + 1;
    }
    store.shutdown()?;
    Ok(last)
}

//! Rebuilding the history from a single node's journal files (`bourse history rebuild`).
//!
//! What the files cover: the journal keeps its segments from some index on (it prunes
//! whole segments behind the older of its two snapshots). When it still holds index 1
//! the rebuild covers the whole log. Otherwise it starts from the oldest snapshot that
//! the held segments continue, and the database records where its history begins
//! (`history_progress.begins_at`): rows before it cannot be rebuilt from these files,
//! and the rebuild says so rather than pretend.

use std::path::Path;

use bourse_engine::EngineConfig;
use bourse_journal::{segments_list, snapshots_read, Tail};

use crate::recorder::LogEntry;
use crate::sink::{Feed, Opened, Sink, SinkConfig, SinkError};
use crate::store::Progress;

/// Entries read from the files per chunk.
const CHUNK_ENTRIES: usize = 4_096;

fn source(e: impl std::fmt::Display) -> SinkError {
    SinkError::Source(e.to_string())
}

/// Where a rebuild of `journal` starts: `None` for the start of the log, or the
/// snapshot (index, bytes) the held segments continue.
pub fn journal_start(journal: &Path) -> Result<Option<(u64, Vec<u8>)>, SinkError> {
    let segments = segments_list(journal).map_err(source)?;
    let first_held = segments.first().map_or(1, |s| s.0);
    if first_held <= 1 {
        return Ok(None);
    }
    let snapshot = snapshots_read(journal).map_err(source)?.into_iter().find(|s| s.index + 1 >= first_held);
    match snapshot {
        Some(snapshot) => Ok(Some((snapshot.index, snapshot.bytes))),
        None => Err(SinkError::Source(format!(
            "{}: the journal holds entries from {first_held} on and no snapshot they continue",
            journal.display()
        ))),
    }
}

/// Replays the journal directory `journal` into the empty database at `url`; returns
/// the progress written. The node may be running: only durable, whole records are read.
pub fn rebuild_from_journal(
    journal: &Path,
    url: &str,
    engine: EngineConfig,
    config: SinkConfig,
) -> Result<Progress, SinkError> {
    let mut opened = Opened::open(url)?;
    if opened.saved.is_some() {
        return Err(SinkError::Source(format!(
            "{url}: the database already holds history; rebuild needs an empty one"
        )));
    }
    if let Some((index, bytes)) = journal_start(journal)? {
        tracing::warn!(begins_at = index + 1, "the journal was pruned: history begins after its snapshot");
        opened.begin_at_snapshot(index, bytes);
    }
    let from = opened.from_index();
    let sink = Sink::start(opened, engine, config)?;
    let sender = sink.sender();
    let mut tail = Tail::new(journal, from);
    loop {
        let entries = tail.read(u64::MAX, CHUNK_ENTRIES).map_err(source)?;
        let Some(last) = entries.last().map(|e| e.index) else { break };
        let entries = entries.into_iter().map(|e| LogEntry { index: e.index, commands: vec![e.payload] }).collect();
        if sender.blocking_send(Feed::Entries { entries, head_index: last, head_ts: 0 }).is_err() {
            break;
        }
    }
    drop(sender);
    let status = std::sync::Arc::clone(&sink.status);
    sink.finish()?;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Acquire);
    Ok(Progress {
        applied_index: load(&status.written_index),
        applied_ts: load(&status.written_ts),
        begins_at: load(&status.begins_at),
    })
}

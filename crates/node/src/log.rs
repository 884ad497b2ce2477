//! `Log.Follow`: the committed log for the history sink, from the node's own log files.
//!
//! Nothing here touches the core thread: a single node's entries are read from its
//! journal directory ([`bourse_journal::Tail`], one open file, each byte read once) up
//! to the group commit's durable index; a cluster member's from its Raft log store
//! (the in-memory cache of recent entries, or the files) up to the applied index, which
//! is committed. With nobody following, the node does nothing more than before; a
//! follower costs a task that polls two atomics every [`IDLE_POLL`] while idle and
//! reads the files while behind.
//!
//! An index the node no longer holds (pruned behind a snapshot) is FAILED_PRECONDITION
//! with the first index held, at the start or mid-stream: the follower must report it,
//! never skip it.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bourse_cluster::log_store::LogReader;
use bourse_journal::{GroupCommitHandle, Tail, TailError};
use bourse_protocol::proto;
use tokio::sync::mpsc;
use tonic::{Request as GrpcRequest, Response, Status};

use crate::service::{BoxStream, Shared};

/// How often an idle stream looks for new committed entries.
const IDLE_POLL: Duration = Duration::from_millis(2);
/// How often an idle stream reports the head anyway (the follower's lag stays current).
const HEARTBEAT: Duration = Duration::from_secs(1);
/// Entries and bytes per chunk, at most (a chunk holds at least one entry).
const CHUNK_ENTRIES_MAX: usize = 1_024;
const CHUNK_BYTES_MAX: usize = 4 << 20;
/// Chunks queued for the connection, at most: few, so that a slow follower is slowed at
/// once (nothing is lost: it reads the files) and the head each chunk reports is fresh.
const CHUNKS_QUEUED_MAX: usize = 4;

/// Where a node's committed log is read from.
#[derive(Clone)]
pub enum LogSource {
    /// A single node: the journal directory, durable through the group commit's index.
    Journal { dir: PathBuf, group: GroupCommitHandle },
    /// A cluster member: the Raft log store, committed through the applied index, and
    /// its state machine snapshots' directory.
    Raft { reader: LogReader, snapshots: PathBuf },
}

/// A reader positioned in the log.
enum Cursor {
    Journal(Box<Tail>),
    Raft { reader: LogReader, next: u64 },
}

impl LogSource {
    fn first_index(&self) -> Result<u64, Status> {
        match self {
            LogSource::Journal { dir, .. } => match bourse_journal::segments_list(dir) {
                Ok(segments) => Ok(segments.first().map_or(1, |s| s.0)),
                Err(error) => Err(Status::internal(error.to_string())),
            },
            LogSource::Raft { reader, .. } => Ok(reader.first_index()),
        }
    }

    /// A snapshot (index, engine bytes) that the held log continues, if there is one.
    fn snapshot(&self, first_held: u64) -> Result<Option<(u64, Vec<u8>)>, Status> {
        let internal = |e: &dyn std::fmt::Display| Status::internal(e.to_string());
        match self {
            LogSource::Journal { dir, .. } => {
                let snapshots = bourse_journal::snapshots_read(dir).map_err(|e| internal(&e))?;
                Ok(snapshots.into_iter().find(|s| s.index + 1 >= first_held).map(|s| (s.index, s.bytes)))
            }
            LogSource::Raft { snapshots, .. } => {
                let latest = bourse_cluster::snapshot_store::SnapshotStore::reader(snapshots).latest();
                let latest = latest.map_err(|e| internal(&e))?;
                let latest = latest.and_then(|(meta, bytes)| meta.last_log_id.map(|id| (id.index, bytes)));
                Ok(latest.filter(|(index, _)| index + 1 >= first_held))
            }
        }
    }

    fn cursor(&self, from: u64) -> Cursor {
        match self {
            LogSource::Journal { dir, .. } => Cursor::Journal(Box::new(Tail::new(dir.clone(), from.max(1)))),
            LogSource::Raft { reader, .. } => Cursor::Raft { reader: reader.clone(), next: from },
        }
    }
}

fn pruned(wanted: u64, first_held: u64) -> Status {
    Status::failed_precondition(format!(
        "log index {wanted} is no longer held (pruned behind a snapshot); the first index held is {first_held}"
    ))
}

impl Cursor {
    /// Entries from the cursor through `head`, one chunk's worth (blocking I/O).
    fn read(&mut self, head: u64) -> Result<Vec<proto::LogEntry>, Status> {
        match self {
            Cursor::Journal(tail) => match tail.read(head, CHUNK_ENTRIES_MAX) {
                Ok(entries) => Ok(entries
                    .into_iter()
                    .map(|e| proto::LogEntry { index: e.index, commands: vec![e.payload] })
                    .collect()),
                Err(TailError::Pruned { wanted, first_held }) => Err(pruned(wanted, first_held)),
                Err(error) => Err(Status::internal(error.to_string())),
            },
            Cursor::Raft { reader, next } => {
                match reader.command_entries(*next, head, CHUNK_ENTRIES_MAX, CHUNK_BYTES_MAX) {
                    Ok(Ok(entries)) => {
                        if let Some((last, _)) = entries.last() {
                            *next = last + 1;
                        }
                        Ok(entries.into_iter().map(|(index, commands)| proto::LogEntry { index, commands }).collect())
                    }
                    Ok(Err(first_held)) => Err(pruned(*next, first_held)),
                    Err(error) => Err(Status::internal(error.to_string())),
                }
            }
        }
    }
}

#[derive(Clone)]
pub struct LogService(pub Shared);

/// `Log.Follow` for a follower in the node's own process (`bourse serve`'s history
/// sink): the same stream of chunks, handed over as values instead of over a socket.
#[derive(Clone)]
pub struct LocalLog(pub(crate) LogService);

impl LocalLog {
    pub async fn follow(&self, request: proto::FollowLogRequest) -> Result<BoxStream<proto::LogChunk>, Status> {
        use proto::log_server::Log;
        Ok(self.0.follow(GrpcRequest::new(request)).await?.into_inner())
    }
}

impl LogService {
    /// Where the log is read; a simulated node has no files to read it from.
    fn source(&self) -> Result<&LogSource, Status> {
        self.0.log.as_ref().ok_or_else(|| Status::unimplemented("this node keeps no log files (it is simulated)"))
    }

    /// The committed index and the log time of the last command applied.
    fn head(&self, source: &LogSource) -> (u64, u64) {
        let metrics = &self.0.metrics;
        let index = match source {
            LogSource::Journal { group, .. } => group.durable_index(),
            LogSource::Raft { .. } => metrics.applied_index.load(Ordering::Acquire),
        };
        (index, metrics.applied_ts.load(Ordering::Relaxed))
    }
}

#[tonic::async_trait]
impl proto::log_server::Log for LogService {
    type FollowStream = BoxStream<proto::LogChunk>;

    async fn follow(
        &self,
        request: GrpcRequest<proto::FollowLogRequest>,
    ) -> Result<Response<Self::FollowStream>, Status> {
        let request = request.into_inner();
        let mut from = request.from_index;
        let source = self.source()?.clone();
        let first_held = source.first_index()?;
        let mut snapshot = None;
        if from < first_held && !(from <= 1 && first_held <= 1) {
            if !request.snapshot_if_pruned {
                return Err(pruned(from, first_held));
            }
            let (index, bytes) = source.snapshot(first_held)?.ok_or_else(|| pruned(from, first_held))?;
            from = index + 1;
            snapshot = Some((index, bytes));
        }
        let engine_config = postcard::to_allocvec(&self.0.engine).map_err(|e| Status::internal(e.to_string()))?;
        let service = LogService(self.0.clone());
        let (out, receiver) = mpsc::channel(CHUNKS_QUEUED_MAX);
        tokio::spawn(async move {
            service.0.metrics.logs_open.fetch_add(1, Ordering::Relaxed);
            let (head_index, head_ts) = service.head(&source);
            let (snapshot_index, snapshot) = snapshot.unwrap_or_default();
            let first = proto::LogChunk {
                entries: Vec::new(),
                head_index,
                head_ts,
                engine_config,
                first_index: first_held,
                snapshot,
                snapshot_index,
            };
            if out.send(Ok(first)).await.is_ok() {
                service.stream(&source, source.cursor(from), out).await;
            }
            service.0.metrics.logs_open.fetch_sub(1, Ordering::Relaxed);
        });
        Ok(Response::new(Box::pin(tokio_stream::wrappers::ReceiverStream::new(receiver))))
    }
}

impl LogService {
    async fn stream(&self, source: &LogSource, mut cursor: Cursor, out: mpsc::Sender<Result<proto::LogChunk, Status>>) {
        let mut reported = Instant::now();
        let mut shutdown = self.0.shutdown.clone();
        loop {
            if *shutdown.borrow_and_update() {
                return;
            }
            let (head_index, head_ts) = self.head(source);
            let (back, read) = tokio::task::spawn_blocking(move || {
                let read = cursor.read(head_index);
                (cursor, read)
            })
            .await
            .expect("log read task");
            cursor = back;
            let entries = match read {
                Ok(entries) => entries,
                Err(status) => {
                    tracing::warn!(%status, "log stream ends");
                    let _ = out.send(Err(status)).await;
                    return;
                }
            };
            if entries.is_empty() && reported.elapsed() < HEARTBEAT {
                tokio::select! {
                    _ = tokio::time::sleep(IDLE_POLL) => {}
                    _ = out.closed() => return,
                    _ = shutdown.changed() => {}
                }
                continue;
            }
            reported = Instant::now();
            let chunk = proto::LogChunk { entries, head_index, head_ts, ..Default::default() };
            if out.send(Ok(chunk)).await.is_err() {
                return;
            }
        }
    }
}

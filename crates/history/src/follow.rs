//! Following the committed log of a cluster over gRPC (`Log.Follow`), from any member,
//! failing over to another when the one followed goes away; or, for the sink of a node
//! in the same process, the node's own `Log.Follow` stream without the network.
//!
//! The follower asks for the entries after the last one it handed the sink, so a
//! reconnect repeats nothing and skips nothing (the sink also ignores an entry it
//! already applied). A member that no longer holds the index asked for answers
//! FAILED_PRECONDITION: the follower then tries the other members, and if none holds it
//! stops with an error that says so — history never skips a gap silently.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bourse_engine::EngineConfig;
use bourse_protocol::proto;
use tokio::sync::{mpsc, watch};
use tokio_stream::StreamExt;
use tonic::Code;

use crate::recorder::LogEntry;
use crate::sink::{Feed, Opened, Sink, SinkConfig, SinkError, SinkStatus};

/// Pause before trying the next member after a failure.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// Connection attempt bound per member.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A `Log.Follow` stream of chunks, or the status that ended it.
pub type ChunkStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<proto::LogChunk, tonic::Status>> + Send + 'static>>;

/// `Log.Follow` of a member in this process (`bourse serve`'s own sink), called without
/// the network: the node's stream of chunks, handed over as values.
pub type LocalLog = Arc<
    dyn Fn(
            proto::FollowLogRequest,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ChunkStream, tonic::Status>> + Send>>
        + Send
        + Sync,
>;

/// A log stream from one member of `nodes`, reopened on another after a failure.
pub struct Follower {
    nodes: Vec<String>,
    /// Set when the one member followed is in this process.
    local: Option<LocalLog>,
    current: usize,
    next_index: u64,
    stream: Option<ChunkStream>,
    /// The first chunk, read by `connect`, not yet handed on.
    first: Option<proto::LogChunk>,
    /// Ask for a snapshot when the log asked for is pruned (a new, empty history only).
    snapshot_if_pruned: bool,
    /// Mutual TLS to the members (an `observer` certificate: nodes with the cluster's
    /// PKI serve `Log.Follow` to observers and nodes only).
    tls: Option<bourse_pki::grpc::Connector>,
}

/// Where a new history begins when the log before it is gone: (index, engine snapshot).
pub type StartSnapshot = Option<(u64, Vec<u8>)>;

fn endpoint(node: &str) -> String {
    if node.contains("://") {
        node.to_string()
    } else {
        format!("http://{node}")
    }
}

impl Follower {
    /// Opens the stream at `from_index` on the first member that answers, and returns
    /// the engine bounds the log was written under. With `snapshot_if_pruned` (an empty
    /// history) a member that no longer holds `from_index` starts after a snapshot, which
    /// is returned: the history then begins there.
    pub async fn connect(
        nodes: Vec<String>,
        from_index: u64,
        snapshot_if_pruned: bool,
    ) -> Result<(Follower, EngineConfig, StartSnapshot), SinkError> {
        Follower::start(nodes, None, None, from_index, snapshot_if_pruned).await
    }

    /// [`Follower::connect`] over mutual TLS with `tls`'s certificate.
    pub async fn connect_tls(
        nodes: Vec<String>,
        tls: Option<bourse_pki::grpc::Connector>,
        from_index: u64,
        snapshot_if_pruned: bool,
    ) -> Result<(Follower, EngineConfig, StartSnapshot), SinkError> {
        Follower::start(nodes, None, tls, from_index, snapshot_if_pruned).await
    }

    /// [`Follower::connect`] to the member in this process.
    pub async fn connect_local(
        local: LocalLog,
        from_index: u64,
        snapshot_if_pruned: bool,
    ) -> Result<(Follower, EngineConfig, StartSnapshot), SinkError> {
        Follower::start(vec!["the node in this process".into()], Some(local), None, from_index, snapshot_if_pruned)
            .await
    }

    async fn start(
        nodes: Vec<String>,
        local: Option<LocalLog>,
        tls: Option<bourse_pki::grpc::Connector>,
        from_index: u64,
        snapshot_if_pruned: bool,
    ) -> Result<(Follower, EngineConfig, StartSnapshot), SinkError> {
        if nodes.is_empty() {
            return Err(SinkError::Source("no node address to follow".into()));
        }
        let mut follower = Follower {
            nodes,
            local,
            current: 0,
            next_index: from_index,
            stream: None,
            first: None,
            snapshot_if_pruned,
            tls,
        };
        let (mut rounds, mut pruned) = (0, 0);
        loop {
            match follower.open().await {
                Ok(mut chunk) => {
                    let config = postcard::from_bytes(&chunk.engine_config)
                        .map_err(|e| SinkError::Source(format!("the member's engine config does not decode: {e}")))?;
                    let snapshot = (!chunk.snapshot.is_empty())
                        .then(|| (chunk.snapshot_index, std::mem::take(&mut chunk.snapshot)));
                    if let Some((index, _)) = &snapshot {
                        follower.next_index = index + 1;
                    }
                    follower.snapshot_if_pruned = false;
                    follower.first = Some(chunk);
                    return Ok((follower, config, snapshot));
                }
                Err(Failure::Fatal(error)) => return Err(error),
                Err(failure @ (Failure::Pruned(_) | Failure::Retry(_))) => {
                    let (Failure::Pruned(reason) | Failure::Retry(reason)) = &failure else { unreachable!() };
                    if matches!(failure, Failure::Pruned(_)) {
                        pruned += 1;
                        if pruned >= follower.nodes.len() {
                            return Err(gap(reason));
                        }
                    }
                    rounds += 1;
                    if rounds >= 10 * follower.nodes.len() {
                        return Err(SinkError::Source(format!("no member serves the log: {reason}")));
                    }
                    tracing::warn!(node = %follower.nodes[follower.current], %reason, "log stream unavailable; trying another member");
                    follower.current = (follower.current + 1) % follower.nodes.len();
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        }
    }

    /// Opens a stream on the current member and reads its first chunk.
    async fn open(&mut self) -> Result<proto::LogChunk, Failure> {
        let request =
            proto::FollowLogRequest { from_index: self.next_index, snapshot_if_pruned: self.snapshot_if_pruned };
        let node = match &self.local {
            Some(_) => self.nodes[0].clone(),
            None => endpoint(&self.nodes[self.current]),
        };
        let mut stream = match &self.local {
            Some(local) => local(request).await.map_err(|status| classify(&node, status))?,
            None => open_remote(&node, self.tls.as_ref(), request).await?,
        };
        let first = match stream.next().await.transpose() {
            Ok(Some(chunk)) => chunk,
            Ok(None) => return Err(Failure::Retry(format!("{node}: the stream ended at once"))),
            Err(status) => return Err(classify(&node, status)),
        };
        self.stream = Some(stream);
        Ok(first)
    }

    /// Hands every chunk to `sink` until `stop` turns true, the sink goes away, or no
    /// member can serve the next index.
    pub async fn run(
        mut self,
        sink: mpsc::Sender<Feed>,
        status: Arc<SinkStatus>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), SinkError> {
        let (mut failures, mut pruned) = (0usize, 0usize);
        loop {
            if let Some(chunk) = self.first.take() {
                if !self.hand(chunk, &sink).await {
                    return Ok(());
                }
            }
            let Some(stream) = self.stream.as_mut() else {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY_PAUSE) => {}
                    _ = stop.wait_for(|s| *s) => return Ok(()),
                }
                self.current = (self.current + 1) % self.nodes.len();
                match self.open().await {
                    Ok(chunk) => {
                        status.reconnects.fetch_add(1, Ordering::Relaxed);
                        tracing::info!(node = %self.nodes[self.current], from = self.next_index, "log stream reopened");
                        self.first = Some(chunk);
                        (failures, pruned) = (0, 0);
                    }
                    Err(Failure::Fatal(error)) => return Err(error),
                    Err(Failure::Pruned(reason)) => {
                        pruned += 1;
                        if pruned >= self.nodes.len() {
                            return Err(gap(&reason));
                        }
                    }
                    Err(Failure::Retry(reason)) => {
                        failures += 1;
                        if failures % self.nodes.len() == 0 {
                            tracing::warn!(%reason, "no member serves the log yet; retrying");
                        }
                    }
                }
                continue;
            };
            let message = tokio::select! {
                message = stream.next() => message.transpose(),
                _ = stop.wait_for(|s| *s) => return Ok(()),
            };
            match message {
                Ok(Some(chunk)) => {
                    if !self.hand(chunk, &sink).await {
                        return Ok(());
                    }
                }
                Ok(None) => self.stream = None,
                Err(status) => {
                    tracing::warn!(node = %self.nodes[self.current], %status, "log stream broke");
                    self.stream = None;
                }
            }
        }
    }

    /// Gives one chunk to the sink; false when the sink is gone.
    async fn hand(&mut self, chunk: proto::LogChunk, sink: &mpsc::Sender<Feed>) -> bool {
        let (head_index, head_ts) = (chunk.head_index, chunk.head_ts);
        let feed = if chunk.entries.is_empty() {
            Feed::Head { head_index, head_ts }
        } else {
            let entries: Vec<LogEntry> =
                chunk.entries.into_iter().map(|e| LogEntry { index: e.index, commands: e.commands }).collect();
            self.next_index = entries.last().map_or(self.next_index, |e| e.index + 1);
            Feed::Entries { entries, head_index, head_ts }
        };
        sink.send(feed).await.is_ok()
    }
}

/// Opens `Log.Follow` on `node` over the network.
async fn open_remote(
    node: &str,
    tls: Option<&bourse_pki::grpc::Connector>,
    request: proto::FollowLogRequest,
) -> Result<ChunkStream, Failure> {
    let endpoint = tonic::transport::Endpoint::from_shared(node.to_owned())
        .map_err(|e| Failure::Fatal(SinkError::Source(format!("{node}: {e}"))))?
        .connect_timeout(CONNECT_TIMEOUT);
    let channel = bourse_pki::grpc::connect(endpoint, tls).await.map_err(|e| Failure::Retry(format!("{node}: {e}")))?;
    let mut client = proto::log_client::LogClient::new(channel).max_decoding_message_size(256 << 20);
    match client.follow(request).await {
        Ok(response) => Ok(Box::pin(response.into_inner())),
        Err(status) => Err(classify(node, status)),
    }
}

enum Failure {
    Retry(String),
    /// This member no longer holds the index; another may.
    Pruned(String),
    Fatal(SinkError),
}

fn classify(node: &str, status: tonic::Status) -> Failure {
    match status.code() {
        Code::FailedPrecondition => Failure::Pruned(format!("{node}: {}", status.message())),
        _ => Failure::Retry(format!("{node}: {}", status.message())),
    }
}

/// Every member said the index is pruned: the gap is real and history stops on it.
fn gap(reason: &str) -> SinkError {
    SinkError::Source(format!("{reason}; no member holds it, and history never skips a gap"))
}

/// A sink fed by a [`Follower`]: what `bourse serve` runs in-process and `bourse history
/// run` runs on its own.
pub struct Following {
    sink: Sink,
    task: tokio::task::JoinHandle<Result<(), SinkError>>,
    stop: watch::Sender<bool>,
    pub status: Arc<SinkStatus>,
}

impl Following {
    /// Opens the store at `url`, connects to a member of `nodes` from where the store
    /// stands, and starts the sink. Must run inside a tokio runtime.
    pub async fn start(nodes: Vec<String>, url: &str, config: SinkConfig) -> Result<Following, SinkError> {
        Following::begin(nodes, None, None, url, config).await
    }

    /// [`Following::start`] over mutual TLS with `tls`'s certificate (an observer's).
    pub async fn start_tls(
        nodes: Vec<String>,
        tls: Option<bourse_pki::grpc::Connector>,
        url: &str,
        config: SinkConfig,
    ) -> Result<Following, SinkError> {
        Following::begin(nodes, None, tls, url, config).await
    }

    /// [`Following::start`] on the node in this process, without the network.
    pub async fn start_local(local: LocalLog, url: &str, config: SinkConfig) -> Result<Following, SinkError> {
        Following::begin(Vec::new(), Some(local), None, url, config).await
    }

    async fn begin(
        nodes: Vec<String>,
        local: Option<LocalLog>,
        tls: Option<bourse_pki::grpc::Connector>,
        url: &str,
        config: SinkConfig,
    ) -> Result<Following, SinkError> {
        let url = url.to_string();
        // The PostgreSQL client blocks; it must not run on an async task.
        let opened = tokio::task::spawn_blocking(move || Opened::open(&url))
            .await
            .map_err(|e| SinkError::Source(e.to_string()))??;
        let mut opened = opened;
        let from = opened.from_index();
        let (follower, engine, snapshot) = match local {
            Some(local) => Follower::connect_local(local, from, true).await?,
            None => Follower::connect_tls(nodes, tls, from, true).await?,
        };
        if let Some((index, bytes)) = snapshot {
            opened.start_at_member_snapshot(index, bytes)?;
        }
        let sink = Sink::start(opened, engine, config)?;
        let status = Arc::clone(&sink.status);
        let (stop, stopping) = watch::channel(false);
        let task = tokio::spawn(follower.run(sink.sender(), Arc::clone(&status), stopping));
        tracing::info!(from, "history sink following the log");
        Ok(Following { sink, task, stop, status })
    }

    /// True once the follower or the sink stopped by itself (on an error).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished() || self.status.failed.load(Ordering::Acquire)
    }

    /// Stops following and waits until what was received is written.
    pub async fn stop(self) -> Result<(), SinkError> {
        let _ = self.stop.send(true);
        let followed = self.task.await.map_err(|e| SinkError::Source(e.to_string()))?;
        let sink = self.sink;
        let finished =
            tokio::task::spawn_blocking(move || sink.finish()).await.map_err(|e| SinkError::Source(e.to_string()))?;
        followed.and(finished)
    }
}

//! The Raft peer transport, client side: openraft's network factory and the per-peer
//! clients that speak the frame protocol of [`crate::transport`].
//!
//! Every client openraft asks for (replication, heartbeat, snapshot) owns its own TCP
//! connection, so heartbeats and lease probes never queue behind AppendEntries batches or
//! snapshot bytes. A connection is opened on first use, kept while it works, and dropped on
//! any error, timeout or abandoned exchange; the next call reconnects. Dropping it is what
//! keeps the protocol in step: a reply that arrives after its caller gave up can never be
//! read as the answer to a later request.
//!
//! Errors map to what openraft should do next: cannot connect, connection reset or closed,
//! or the peer's Raft has stopped → [`Unreachable`] (openraft backs off); no answer within
//! the RPC's `soft_ttl` → [`Timeout`]; a malformed or unexpected reply → [`NetworkError`]
//! (retried at once). Raft-level refusals (a higher vote, a log conflict) are ordinary
//! replies and pass through untouched.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bourse_pki::Role;
use futures_util::{FutureExt, Stream, StreamExt};
use openraft::base::{BoxFuture, BoxStream};
use openraft::errors::{NetworkError, ReplicationClosed, Timeout, Unreachable};
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{RPCOption, RPCTypes, RaftNetworkFactory};
use openraft::raft::StreamAppendResult;
use openraft::OptionalSend;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpSocket;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::tls::MemberTls;
use crate::transport::{encode_frame, encode_snapshot_head, read_frame, FrameError, FrameKind};
use crate::types::{
    AppendEntriesRequest, AppendEntriesResponse, NodeId, Peer, RpcError, Snapshot, SnapshotResponse, StreamingError,
    TransferLeaderRequest, TransferLeaderResponse, TypeConfig, Vote, VoteRequest, VoteResponse,
};

/// A connection to a peer: TCP, or TLS over it.
trait PeerIo: AsyncRead + AsyncWrite + Send + Sync + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Sync + Unpin> PeerIo for T {}
type PeerRead = tokio::io::ReadHalf<Box<dyn PeerIo>>;
type PeerWrite = tokio::io::WriteHalf<Box<dyn PeerIo>>;

/// How this node dials its peers.
#[derive(Clone, Debug)]
pub struct NetworkConfig {
    /// Upper bound on establishing a connection; an RPC's own deadline, when shorter, wins.
    pub connect_timeout: Duration,
    /// Source address for outgoing connections. [`crate::fault::FaultProxy`] tells nodes
    /// apart by it (tests bind node `i` to `127.0.0.<10+i>`); `None` lets the OS choose.
    pub bind_ip: Option<IpAddr>,
    /// Size of the slices a snapshot is written in when openraft does not suggest one;
    /// each slice must make progress within the RPC's `soft_ttl`.
    pub snapshot_chunk: usize,
    /// The least time a replication reply (AppendEntries, a `stream_append` reply,
    /// TransferLeader) is waited for. openraft's deadline for these is a fraction of the
    /// heartbeat interval (6 ms with an 8 ms heartbeat), which a follower busy with a
    /// large batch and its fsync can miss while healthy; dropping the connection then
    /// stalls replication to it. A dead peer is still found by connection errors, and a
    /// silent one after this long, without holding up the other followers.
    pub reply_timeout_min: Duration,
    /// Mutual TLS to every peer (`None`: plaintext, for loopback only): this node's
    /// certificate is presented, and every peer's is checked against the CA and its
    /// revocation list, for the address dialed, and must name the role `node`.
    pub tls: Option<MemberTls>,
    /// Where replication round trips are recorded (shared with the transport's server).
    pub stats: Arc<crate::transport::TransportStats>,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_millis(500),
            bind_ip: None,
            snapshot_chunk: 1 << 20,
            reply_timeout_min: Duration::from_millis(500),
            tls: None,
            stats: Arc::default(),
        }
    }
}

/// openraft's network factory: one [`PeerClient`], hence one connection, per (target,
/// purpose).
#[derive(Clone, Debug)]
pub struct Network {
    id: NodeId,
    config: Arc<NetworkConfig>,
}

impl Network {
    /// `id` is this node's id; it only labels timeout errors.
    pub fn new(id: NodeId, config: NetworkConfig) -> Self {
        Self { id, config: Arc::new(config) }
    }

    fn client(&self, target: NodeId, node: &Peer) -> PeerClient {
        PeerClient { id: self.id, target, addr: node.raft.clone(), config: self.config.clone(), conn: None }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        self.client(target, node)
    }

    async fn new_heartbeat_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        self.client(target, node)
    }

    async fn new_snapshot_client(&mut self, target: NodeId, node: &Peer) -> PeerClient {
        self.client(target, node)
    }
}

/// A client for one peer and one purpose, holding at most one connection.
pub struct PeerClient {
    id: NodeId,
    target: NodeId,
    addr: String,
    config: Arc<NetworkConfig>,
    conn: Option<Conn>,
}

struct Conn {
    rd: BufReader<PeerRead>,
    wr: PeerWrite,
    /// The TLS reload count it was made under: an older one is not used again.
    generation: u64,
}

/// Why an exchange failed, before it is mapped to openraft's error types.
#[derive(Debug)]
enum Fail {
    /// The peer cannot be reached or went away: back off.
    Unreachable(String),
    /// An established connection was closed or reset under us. Worth one immediate retry
    /// on a fresh connection when the connection was an old one (the peer may have
    /// restarted since); otherwise the same as `Unreachable`.
    Closed(String),
    Timeout,
    Network(String),
}

impl Fail {
    fn io(e: io::Error) -> Self {
        use io::ErrorKind::*;
        match e.kind() {
            ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof | NotConnected => {
                Fail::Closed(e.to_string())
            }
            _ => Fail::Network(e.to_string()),
        }
    }

    fn frame(e: FrameError) -> Self {
        match e {
            FrameError::Io(e) => Fail::io(e),
            // Retrying at once would only hit the same bound again: back off instead, and
            // say so loudly (the cure is a smaller `max_payload_entries` or batch).
            e @ FrameError::TooLarge { .. } => {
                tracing::error!(error = %e, "raft frame over the transport's bound");
                Fail::Unreachable(e.to_string())
            }
            e => Fail::Network(e.to_string()),
        }
    }
}

fn closed() -> Fail {
    Fail::Closed("connection closed by peer".into())
}

impl PeerClient {
    /// The deadline for a replication reply: openraft's, but at least
    /// [`NetworkConfig::reply_timeout_min`].
    fn reply_ttl(&self, option: &RPCOption) -> Duration {
        option.soft_ttl().max(self.config.reply_timeout_min)
    }

    fn rpc_error(&self, fail: Fail, action: RPCTypes, timeout: Duration) -> RpcError {
        match fail {
            Fail::Unreachable(m) | Fail::Closed(m) => {
                RpcError::Unreachable(Unreachable::from_string(format!("{} ({}): {m}", self.target, self.addr)))
            }
            Fail::Timeout => RpcError::Timeout(Timeout { action, id: self.id, target: self.target, timeout }),
            Fail::Network(m) => {
                RpcError::Network(NetworkError::from_string(format!("{} ({}): {m}", self.target, self.addr)))
            }
        }
    }

    /// The open connection, dialing one if there is none.
    async fn connection(&mut self) -> Result<&mut Conn, Fail> {
        let generation = self.config.tls.as_ref().map_or(0, MemberTls::generation);
        if self.conn.as_ref().is_some_and(|conn| conn.generation != generation) {
            // The certificates were reloaded: a new handshake, which a revoked peer fails.
            self.conn = None;
        }
        if self.conn.is_none() {
            let stream = tokio::time::timeout(self.config.connect_timeout, self.dial()).await.map_err(|_| {
                Fail::Unreachable(format!("connect timed out after {:?}", self.config.connect_timeout))
            })??;
            let (rd, wr) = tokio::io::split(stream);
            self.conn = Some(Conn { rd: BufReader::with_capacity(64 << 10, rd), wr, generation });
        }
        Ok(self.conn.as_mut().expect("connection was just set"))
    }

    async fn dial(&self) -> Result<Box<dyn PeerIo>, Fail> {
        let unreachable = |e: io::Error| Fail::Unreachable(format!("connect: {e}"));
        let addrs = tokio::net::lookup_host(&self.addr).await.map_err(unreachable)?;
        let bind = self.config.bind_ip;
        let addr: SocketAddr = addrs
            .into_iter()
            .find(|a| bind.is_none_or(|ip| ip.is_ipv4() == a.is_ipv4()))
            .ok_or_else(|| Fail::Unreachable(format!("no usable address for {}", self.addr)))?;
        let socket = if addr.is_ipv4() { TcpSocket::new_v4() } else { TcpSocket::new_v6() }.map_err(unreachable)?;
        if let Some(ip) = bind {
            socket.bind(SocketAddr::new(ip, 0)).map_err(unreachable)?;
        }
        let stream = socket.connect(addr).await.map_err(unreachable)?;
        stream.set_nodelay(true).map_err(unreachable)?;
        let Some(tls) = &self.config.tls else { return Ok(Box::new(stream)) };
        // The name checked against the peer's certificate: the host part of the address
        // dialed (an IP address or a DNS name the certificate must list).
        let host = self.addr.rsplit_once(':').map_or(self.addr.as_str(), |(host, _)| host);
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| Fail::Unreachable(format!("{host}: not a name TLS can check: {e}")))?;
        let connector = tokio_rustls::TlsConnector::from(tls.client.current());
        let stream = connector.connect(name, stream).await.map_err(|e| Fail::Unreachable(format!("TLS: {e}")))?;
        match bourse_pki::peer_identity(stream.get_ref().1) {
            Some(identity) if identity.role == Role::Node => Ok(Box::new(stream)),
            other => Err(Fail::Unreachable(format!(
                "TLS: the peer is {}, not a member",
                other.map_or("unnamed".to_string(), |i| i.to_string())
            ))),
        }
    }

    /// Writes `frame` and reads one reply of kind `reply`, retrying once on a fresh
    /// connection if a reused one turns out to be dead. Raft RPCs are idempotent, so a
    /// request that did reach the peer before the connection died may safely be repeated.
    async fn exchange(&mut self, frame: &[u8], reply: FrameKind) -> Result<Vec<u8>, Fail> {
        let reused = self.conn.is_some();
        match self.exchange_once(frame, reply).await {
            Err(Fail::Closed(_)) if reused => {
                self.conn = None;
                self.exchange_once(frame, reply).await
            }
            res => res,
        }
    }

    async fn exchange_once(&mut self, frame: &[u8], reply: FrameKind) -> Result<Vec<u8>, Fail> {
        let conn = self.connection().await?;
        conn.wr.write_all(frame).await.map_err(Fail::io)?;
        let got = read_frame(&mut conn.rd).await.map_err(Fail::frame)?.ok_or_else(closed)?;
        expect_kind(got, reply)
    }

    /// One unary RPC within `ttl`. Any failure drops the connection.
    async fn call<Req, Resp>(
        &mut self,
        kind: FrameKind,
        reply: FrameKind,
        action: RPCTypes,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, RpcError>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
    {
        let frame = encode_frame(kind, req).map_err(|e| self.rpc_error(Fail::frame(e), action, ttl))?;
        let res = match tokio::time::timeout(ttl, self.exchange(&frame, reply)).await {
            Ok(res) => res.and_then(|payload| decode_reply(&payload)),
            Err(_) => Err(Fail::Timeout),
        };
        res.map_err(|fail| {
            self.conn = None;
            self.rpc_error(fail, action, ttl)
        })
    }

    async fn send_snapshot(&mut self, vote: &Vote, snapshot: &Snapshot, option: &RPCOption) -> Result<Vec<u8>, Fail> {
        let ttl = option.soft_ttl();
        let data = snapshot.snapshot.get_ref();
        let head = encode_snapshot_head(vote, &snapshot.meta, data.len()).map_err(Fail::frame)?;
        let chunk = option.snapshot_chunk_size().unwrap_or(self.config.snapshot_chunk).max(64 << 10);
        let conn = deadline(ttl, self.connection()).await?;
        deadline(ttl, async { conn.wr.write_all(&head).await.map_err(Fail::io) }).await?;
        for part in data.chunks(chunk) {
            deadline(ttl, async { conn.wr.write_all(part).await.map_err(Fail::io) }).await?;
        }
        let got = deadline(ttl, async { read_frame(&mut conn.rd).await.map_err(Fail::frame) }).await?;
        expect_kind(got.ok_or_else(closed)?, FrameKind::SnapshotReply)
    }
}

async fn deadline<T>(ttl: Duration, fut: impl Future<Output = Result<T, Fail>>) -> Result<T, Fail> {
    tokio::time::timeout(ttl, fut).await.unwrap_or(Err(Fail::Timeout))
}

fn expect_kind(frame: crate::transport::Frame, want: FrameKind) -> Result<Vec<u8>, Fail> {
    if frame.kind == want {
        return Ok(frame.payload);
    }
    if frame.kind == FrameKind::Error {
        let why: String = frame.decode().unwrap_or_else(|_| "(undecodable)".into());
        return Err(Fail::Network(format!("peer rejected the request: {why}")));
    }
    Err(Fail::Network(format!("expected a {want:?} frame, got {:?}", frame.kind)))
}

/// Decodes a `Result<T, String>` reply; `Err` is the text of the peer's fatal Raft error
/// (it has stopped), which makes the peer unreachable for our purposes.
fn decode_reply<T: DeserializeOwned>(payload: &[u8]) -> Result<T, Fail> {
    match postcard::from_bytes::<Result<T, String>>(payload) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(fatal)) => Err(Fail::Unreachable(format!("peer's Raft stopped: {fatal}"))),
        Err(e) => Err(Fail::Network(format!("undecodable reply: {e}"))),
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = crate::types::SnapshotData;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse, RpcError> {
        let ttl = self.reply_ttl(&option);
        self.call(FrameKind::Append, FrameKind::AppendReply, RPCTypes::AppendEntries, &rpc, ttl).await
    }

    async fn vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        let ttl = option.soft_ttl();
        self.call(FrameKind::Vote, FrameKind::VoteReply, RPCTypes::Vote, &rpc, ttl).await
    }

    async fn pre_vote(&mut self, rpc: VoteRequest, option: RPCOption) -> Result<VoteResponse, RpcError> {
        let ttl = option.soft_ttl();
        self.call(FrameKind::PreVote, FrameKind::PreVoteReply, RPCTypes::Vote, &rpc, ttl).await
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse, RpcError> {
        let ttl = self.reply_ttl(&option);
        self.call(FrameKind::TransferLeader, FrameKind::TransferLeaderReply, RPCTypes::TransferLeader, &req, ttl).await
    }

    /// Sends the whole snapshot as one frame, in slices that must each make progress
    /// within `soft_ttl`; the peer's reply (it has installed the snapshot) must come within
    /// `soft_ttl` of the last byte. Set openraft's `install_snapshot_timeout` so that
    /// installing the largest snapshot fits in it. `cancel` abandons the transfer at once
    /// (the connection is dropped).
    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse, StreamingError> {
        let ttl = option.soft_ttl();
        let res = tokio::select! {
            closed = cancel => {
                self.conn = None;
                return Err(StreamingError::Closed(closed));
            }
            res = self.send_snapshot(&vote, &snapshot, &option) => res,
        };
        res.and_then(|payload| decode_reply(&payload)).map_err(|fail| {
            self.conn = None;
            self.rpc_error(fail, RPCTypes::InstallSnapshot, ttl).into()
        })
    }

    /// Pipelined: a writer task sends each request as soon as openraft yields it, while
    /// the returned stream reads replies in order on the same connection. A reply is due
    /// within `soft_ttl` of its request being sent or of the previous reply, whichever is
    /// later, so a long queue on a busy follower is not a timeout while it makes progress;
    /// an idle stream (no request outstanding) has no deadline.
    ///
    /// The connection is kept for the next session only when the session ends cleanly
    /// (input exhausted, every reply and the end-of-session ack read); an error reply, a
    /// failure or a dropped stream closes it.
    fn stream_append<'s, S>(
        &'s mut self,
        input: S,
        option: RPCOption,
    ) -> BoxFuture<'s, Result<BoxStream<'s, Result<StreamAppendResult<TypeConfig>, RpcError>>, RpcError>>
    where
        S: Stream<Item = AppendEntriesRequest> + OptionalSend + Unpin + 'static,
    {
        Box::pin(async move {
            let ttl = self.reply_ttl(&option);
            let mut retried = false;
            let conn = loop {
                let reused = self.conn.is_some();
                match deadline(ttl, self.connection()).await {
                    Ok(_) => break self.conn.take().expect("connection is open"),
                    Err(Fail::Closed(_)) if reused && !retried => retried = true,
                    Err(fail) => return Err(self.rpc_error(fail, RPCTypes::AppendEntries, ttl)),
                }
            };
            let (sent_tx, sent_rx) = mpsc::unbounded_channel();
            let generation = conn.generation;
            let writer = AbortOnDrop(tokio::spawn(write_requests(conn.wr, input, sent_tx)));
            let reloads = self.config.tls.as_ref().map(MemberTls::reloads);
            let session = Session {
                client: self,
                rd: Some(conn.rd),
                writer: Some(writer),
                sent_rx,
                ttl,
                progress: None,
                reloads,
                generation,
            };
            let replies = futures_util::stream::unfold(session, |mut s| async move {
                let item = s.next_reply().await?;
                Some((item, s))
            });
            Ok(Box::pin(replies) as BoxStream<'s, _>)
        })
    }
}

/// Aborts the task when dropped, so an abandoned stream session stops writing at once.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Writes a session's requests, flushing whenever openraft has no next request ready (so
/// a burst goes out in few segments, and a lone heartbeat without delay), then the end
/// marker. Announces each request on `sent` just before writing it, so the reader knows
/// how many replies to expect and from when. Returns the write half for reuse.
async fn write_requests<S>(
    wr: PeerWrite,
    mut input: S,
    sent: mpsc::UnboundedSender<Instant>,
) -> Result<PeerWrite, FrameError>
where
    S: Stream<Item = AppendEntriesRequest> + Unpin,
{
    let mut wr = BufWriter::with_capacity(64 << 10, wr);
    loop {
        let next = match input.next().now_or_never() {
            Some(next) => next,
            None => {
                wr.flush().await?;
                input.next().await
            }
        };
        let Some(req) = next else { break };
        let frame = encode_frame(FrameKind::StreamAppend, &req)?;
        // The reader is gone only if the session was abandoned; this task is aborted then.
        let _ = sent.send(Instant::now());
        wr.write_all(&frame).await?;
    }
    wr.write_all(&encode_frame(FrameKind::StreamEnd, &())?).await?;
    wr.flush().await?;
    Ok(wr.into_inner())
}

struct Session<'s> {
    client: &'s mut PeerClient,
    /// `None` once the session is over.
    rd: Option<BufReader<PeerRead>>,
    writer: Option<AbortOnDrop<Result<PeerWrite, FrameError>>>,
    sent_rx: mpsc::UnboundedReceiver<Instant>,
    ttl: Duration,
    /// When the last reply arrived.
    progress: Option<Instant>,
    /// Fires when the certificates are reloaded: the session ends, and its connection
    /// with it.
    reloads: Option<tokio::sync::watch::Receiver<u64>>,
    /// The reload count its connection was made under.
    generation: u64,
}

type StreamItem = Result<StreamAppendResult<TypeConfig>, RpcError>;

impl Session<'_> {
    async fn next_reply(&mut self) -> Option<StreamItem> {
        let rd = self.rd.as_mut()?;
        let Some(sent_at) = self.sent_rx.recv().await else {
            // The writer is done: every reply has been read. Wait for its result and the
            // server's ack, then hand the connection back for the next session.
            let rd = self.rd.take()?;
            let writer = self.writer.take()?;
            return self.finish(rd, writer).await.err();
        };
        let due = self.progress.map_or(sent_at, |p| p.max(sent_at)) + self.ttl;
        let reading = async {
            match tokio::time::timeout_at(due, read_frame(rd)).await {
                Err(_) => Err(Fail::Timeout),
                Ok(Err(e)) => Err(Fail::frame(e)),
                Ok(Ok(None)) => Err(closed()),
                Ok(Ok(Some(frame))) => expect_kind(frame, FrameKind::StreamReply)
                    .and_then(|payload| decode_reply::<StreamAppendResult<TypeConfig>>(&payload)),
            }
        };
        let generation = self.generation;
        let res = match self.reloads.as_mut() {
            Some(reloads) => tokio::select! {
                res = reading => res,
                _ = reloads.wait_for(|&now| now != generation) => {
                    Err(Fail::Closed("the certificates were reloaded".into()))
                }
            },
            None => reading.await,
        };
        self.progress = Some(Instant::now());
        match res {
            Ok(Ok(matched)) => {
                let sent_at = sent_at.into_std();
                crate::transport::TransportStats::record(&self.client.config.stats.append_round_trip_ns, sent_at);
                Some(Ok(Ok(matched)))
            }
            Ok(Err(refused)) => {
                // openraft ends the session here; so does the server. Requests written
                // after this one get no reply, so the connection cannot be reused.
                self.rd = None;
                Some(Ok(Err(refused)))
            }
            Err(fail) => {
                self.rd = None;
                Some(Err(self.client.rpc_error(fail, RPCTypes::AppendEntries, self.ttl)))
            }
        }
    }

    async fn finish(
        &mut self,
        mut rd: BufReader<PeerRead>,
        mut writer: AbortOnDrop<Result<PeerWrite, FrameError>>,
    ) -> Result<(), StreamItem> {
        let fail = |s: &Self, f: Fail| Err(Err(s.client.rpc_error(f, RPCTypes::AppendEntries, s.ttl)));
        let wr = match (&mut writer.0).await {
            Ok(Ok(wr)) => wr,
            Ok(Err(e)) => return fail(self, Fail::frame(e)),
            Err(e) => return fail(self, Fail::Network(format!("stream writer failed: {e}"))),
        };
        match tokio::time::timeout(self.ttl, read_frame(&mut rd)).await {
            Ok(Ok(Some(frame))) if frame.kind == FrameKind::StreamEndAck => {
                self.client.conn = Some(Conn { rd, wr, generation: self.generation });
                Ok(())
            }
            // Every reply was delivered; only the connection is lost.
            _ => Ok(()),
        }
    }
}

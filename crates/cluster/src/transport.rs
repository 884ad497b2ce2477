//! The Raft peer transport: the frame format and the server side.
//!
//! A frame is `u32` little-endian length, one kind byte, then the payload; the length
//! counts the kind byte and the payload. Payloads are postcard-encoded openraft messages,
//! except the snapshot frame (see [`FrameKind::Snapshot`]). Every frame kind has a size
//! bound checked against the length field before any payload byte is read, and payload
//! buffers grow as bytes arrive, so a garbage length costs nothing; only the snapshot kind
//! gets the large bound.
//!
//! A connection carries one conversation at a time, in order:
//!
//! - **unary**: a request frame, then exactly one reply frame of the matching reply kind;
//! - **stream session**: one or more [`FrameKind::StreamAppend`] frames, written without
//!   waiting for replies, then [`FrameKind::StreamEnd`]. The server feeds them to
//!   [`openraft::Raft::stream_append`] and writes one [`FrameKind::StreamReply`] per
//!   request in order, until the input ends or a reply is an error (openraft ends the
//!   stream there; requests after it get no reply). After `StreamEnd` the server writes
//!   [`FrameKind::StreamEndAck`], and the connection is idle again. A client that stops
//!   early closes the connection instead, so no stale reply can ever be read as the answer
//!   to a later request.
//!
//! A remote node whose Raft has stopped answers with the error's text (the reply payload
//! is `Result<T, String>`): the sender treats the peer as unreachable. Errors travel as
//! text so that no error type, some of them recursive, is ever decoded from the wire.
//!
//! A frame that cannot be parsed (unknown kind, oversize, undecodable payload, wrong kind
//! for the connection's state) gets a [`FrameKind::Error`] frame with the reason, then the
//! connection is closed; the server keeps serving everything else.
//!
//! Authentication: with a [`MemberTls`] (the cluster's CA, `bourse pki`), every
//! connection is mutual TLS before its first frame: the peer must present a certificate
//! of the cluster's CA, not revoked, naming the role `node` (a gateway's or an
//! operator's certificate is refused, as is a peer with none); a handshake has
//! [`HANDSHAKE_MAX`] to finish; a reload of the certificates ends every connection
//! (`crate::tls`). Without one the transport is plaintext, which
//! `bourse node` allows only on loopback addresses.

use std::future::Future;
use std::io::Cursor;
use std::pin::pin;
use std::sync::Arc;

use bourse_pki::{ReloadableServerConfig, Role};

use crate::tls::MemberTls;
use futures_util::StreamExt;
use openraft::storage::RaftStateMachine;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::types::{
    AppendEntriesRequest, Raft, Snapshot, SnapshotData, SnapshotMeta, TransferLeaderRequest, TypeConfig, Vote,
    VoteRequest,
};

/// Bound on every frame but the snapshot frame. An AppendEntries of 300 entries, each a
/// batch of up to 4,096 encoded commands, stays well below it; a sender refuses to write a
/// bigger frame rather than have every receiver drop the connection.
pub const MAX_FRAME_LEN: u32 = 128 << 20;

/// Bound on the snapshot frame: the whole state machine travels in one frame (the length
/// field is a `u32`, so about 4 GiB). The receiver grows its buffer as the bytes arrive
/// and never reserves what the length field claims, and with TLS only a member may send
/// one. A server takes at most its configured `snapshot_bytes_max` (below this).
pub const MAX_SNAPSHOT_FRAME_LEN: u32 = u32::MAX;

/// How long a peer has to finish the TLS handshake.
pub const HANDSHAKE_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Requests in flight between a connection's reader and openraft's stream_append; beyond
/// it the reader stops reading and TCP pushes back on the leader.
const STREAM_WINDOW: usize = 64;

/// What a frame carries. Request kinds are below 0x80, their replies are `0x80 | kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// [`AppendEntriesRequest`] → [`FrameKind::AppendReply`].
    Append = 0x01,
    /// [`VoteRequest`] → [`FrameKind::VoteReply`].
    Vote = 0x02,
    /// [`VoteRequest`] (a pre-vote) → [`FrameKind::PreVoteReply`].
    PreVote = 0x03,
    /// [`TransferLeaderRequest`] → [`FrameKind::TransferLeaderReply`].
    TransferLeader = 0x04,
    /// A whole snapshot → [`FrameKind::SnapshotReply`]. Its payload is a `u32`
    /// little-endian header length, the postcard header `(Vote, SnapshotMeta)`, then the
    /// raw snapshot bytes, which are read straight into the buffer that becomes the
    /// [`SnapshotData`] (no copy, no re-encoding of hundreds of MB).
    Snapshot = 0x05,
    /// One request of a stream session; see the module docs.
    StreamAppend = 0x06,
    /// The end of a stream session's input (empty payload).
    StreamEnd = 0x07,
    AppendReply = 0x81,
    VoteReply = 0x82,
    PreVoteReply = 0x83,
    TransferLeaderReply = 0x84,
    SnapshotReply = 0x85,
    /// One `Result<StreamAppendResult, String>`, in request order.
    StreamReply = 0x86,
    /// All replies of the session have been written (empty payload).
    StreamEndAck = 0x87,
    /// The server rejected a frame (payload: the reason, a `String`) and closes the
    /// connection.
    Error = 0xFF,
}

impl FrameKind {
    pub fn from_byte(b: u8) -> Option<Self> {
        use FrameKind::*;
        Some(match b {
            0x01 => Append,
            0x02 => Vote,
            0x03 => PreVote,
            0x04 => TransferLeader,
            0x05 => Snapshot,
            0x06 => StreamAppend,
            0x07 => StreamEnd,
            0x81 => AppendReply,
            0x82 => VoteReply,
            0x83 => PreVoteReply,
            0x84 => TransferLeaderReply,
            0x85 => SnapshotReply,
            0x86 => StreamReply,
            0x87 => StreamEndAck,
            0xFF => Error,
            _ => return None,
        })
    }

    /// The largest length field accepted for this kind.
    pub fn max_len(self) -> u32 {
        match self {
            FrameKind::Snapshot => MAX_SNAPSHOT_FRAME_LEN,
            _ => MAX_FRAME_LEN,
        }
    }
}

/// Why a frame could not be read, written or decoded.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("transport I/O: {0}")]
    Io(#[from] std::io::Error),
    #[error("empty frame (length 0)")]
    Empty,
    #[error("unknown frame kind {0:#04x}")]
    UnknownKind(u8),
    #[error("{kind:?} frame of {len} bytes exceeds the limit of {max}")]
    TooLarge { kind: FrameKind, len: u64, max: u32 },
    #[error("malformed {0:?} frame")]
    Malformed(FrameKind),
    #[error("postcard: {0}")]
    Codec(#[from] postcard::Error),
    #[error("unexpected {0:?} frame")]
    Unexpected(FrameKind),
}

/// A frame as read from the wire. `data` holds the raw snapshot bytes of a
/// [`FrameKind::Snapshot`] frame (then `payload` is its header) and is empty otherwise.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub kind: FrameKind,
    pub payload: Vec<u8>,
    pub data: Vec<u8>,
}

impl Frame {
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, FrameError> {
        Ok(postcard::from_bytes(&self.payload)?)
    }
}

/// One frame ready to write: length, kind, postcard payload.
pub fn encode_frame<T: Serialize + ?Sized>(kind: FrameKind, value: &T) -> Result<Vec<u8>, FrameError> {
    let buf = postcard::to_extend(value, vec![0, 0, 0, 0, kind as u8])?;
    finish_len(kind, buf)
}

/// The head of a [`FrameKind::Snapshot`] frame, everything up to the raw snapshot bytes,
/// which the caller writes next (exactly `data_len` of them).
pub fn encode_snapshot_head(vote: &Vote, meta: &SnapshotMeta, data_len: usize) -> Result<Vec<u8>, FrameError> {
    let kind = FrameKind::Snapshot;
    let buf = postcard::to_extend(&(vote, meta), vec![0, 0, 0, 0, kind as u8, 0, 0, 0, 0])?;
    let header_len = u32::try_from(buf.len() - 9).map_err(|_| FrameError::Malformed(kind))?;
    let total = (buf.len() - 4) as u64 + data_len as u64;
    if total > u64::from(kind.max_len()) {
        return Err(FrameError::TooLarge { kind, len: total, max: kind.max_len() });
    }
    let mut buf = buf;
    buf[..4].copy_from_slice(&(total as u32).to_le_bytes());
    buf[5..9].copy_from_slice(&header_len.to_le_bytes());
    Ok(buf)
}

fn finish_len(kind: FrameKind, mut buf: Vec<u8>) -> Result<Vec<u8>, FrameError> {
    let len = (buf.len() - 4) as u64;
    if len > u64::from(kind.max_len()) {
        return Err(FrameError::TooLarge { kind, len, max: kind.max_len() });
    }
    buf[..4].copy_from_slice(&(len as u32).to_le_bytes());
    Ok(buf)
}

/// Reads one frame; `Ok(None)` on a clean end of stream before its first byte.
///
/// Not cancel-safe: a frame abandoned half-read leaves the stream unusable, so callers
/// drop the connection when they drop this future.
pub async fn read_frame<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Frame>, FrameError> {
    read_frame_within(r, MAX_SNAPSHOT_FRAME_LEN).await
}

/// [`read_frame`] taking a snapshot frame of at most `snapshot_max` bytes (a server's
/// configured limit): a longer one is refused from its length field, before any of its
/// data is read.
pub async fn read_frame_within<R: AsyncRead + Unpin>(
    r: &mut R,
    snapshot_max: u32,
) -> Result<Option<Frame>, FrameError> {
    let mut head = [0u8; 5];
    if r.read(&mut head[..1]).await? == 0 {
        return Ok(None);
    }
    r.read_exact(&mut head[1..]).await?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    if len == 0 {
        return Err(FrameError::Empty);
    }
    let kind = FrameKind::from_byte(head[4]).ok_or(FrameError::UnknownKind(head[4]))?;
    let max = if kind == FrameKind::Snapshot { kind.max_len().min(snapshot_max) } else { kind.max_len() };
    if len > max {
        return Err(FrameError::TooLarge { kind, len: u64::from(len), max });
    }
    let body = u64::from(len - 1);
    if kind != FrameKind::Snapshot {
        let payload = read_exact_vec(r, body).await?;
        return Ok(Some(Frame { kind, payload, data: Vec::new() }));
    }
    if body < 4 {
        return Err(FrameError::Malformed(kind));
    }
    let header_len = u64::from(r.read_u32_le().await?);
    if header_len > body - 4 || header_len > u64::from(MAX_FRAME_LEN) {
        return Err(FrameError::Malformed(kind));
    }
    let payload = read_exact_vec(r, header_len).await?;
    let data_len = body - 4 - header_len;
    // Grown as the bytes arrive, never reserved from the length field: a peer that
    // claims gigabytes and sends none costs nothing.
    let mut data = Vec::new();
    fill(r, &mut data, data_len).await?;
    Ok(Some(Frame { kind, payload, data }))
}

async fn read_exact_vec<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> Result<Vec<u8>, FrameError> {
    // Start small: the length field is not trusted until the bytes are there.
    let mut v = Vec::with_capacity(n.min(64 << 10) as usize);
    fill(r, &mut v, n).await?;
    Ok(v)
}

async fn fill<R: AsyncRead + Unpin>(r: &mut R, v: &mut Vec<u8>, n: u64) -> Result<(), FrameError> {
    let got = (&mut *r).take(n).read_to_end(v).await? as u64;
    if got < n {
        return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
    }
    Ok(())
}

/// Serves the Raft transport on `listener` until `shutdown` completes: then it stops
/// accepting and cuts every open connection (peers see the node as gone, as after a
/// crash), and returns.
///
/// Timings of replication as the transport sees them, on both sides (what the node's
/// `/metrics` shows as `bourse_raft_*`).
#[derive(Debug, Default)]
pub struct TransportStats {
    /// Follower: from reading an AppendEntries request of a stream to writing its reply
    /// (openraft's append, the log's fdatasync, the reply), in nanoseconds.
    pub append_served_ns: std::sync::Mutex<bourse_journal::Log2Histogram>,
    /// Leader: from writing an AppendEntries request of a stream to reading its reply
    /// (the network both ways and the follower's service), in nanoseconds.
    pub append_round_trip_ns: std::sync::Mutex<bourse_journal::Log2Histogram>,
}

impl TransportStats {
    pub(crate) fn record(histogram: &std::sync::Mutex<bourse_journal::Log2Histogram>, since: std::time::Instant) {
        let ns = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        histogram.lock().unwrap_or_else(std::sync::PoisonError::into_inner).record(ns);
    }
}

/// Each connection is one task; a protocol error ends that connection only. Accept errors
/// (for example out of file descriptors) are logged and retried after a short pause.
pub async fn serve<SM>(
    listener: TcpListener,
    raft: Raft<SM>,
    tls: Option<MemberTls>,
    snapshot_bytes_max: u32,
    stats: Arc<TransportStats>,
    shutdown: impl Future<Output = ()> + Send,
) where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotData>,
{
    let mut shutdown = pin!(shutdown);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let raft = raft.clone();
                    let tls = tls.clone();
                    let stats = Arc::clone(&stats);
                    conns.spawn(async move {
                        let served = match tls {
                            Some(tls) => {
                                let mut reloads = tls.reloads();
                                match accept_member(stream, &tls.server).await {
                                    // A reload ends the connection: the peer comes back
                                    // through a new handshake.
                                    Ok(stream) => tokio::select! {
                                        served = serve_conn(stream, raft, snapshot_bytes_max, &stats) => served,
                                        _ = reloads.changed() => Ok(()),
                                    },
                                    Err(refused) => {
                                        tracing::warn!(%peer, %refused, "raft transport connection refused");
                                        return;
                                    }
                                }
                            }
                            None => match stream.set_nodelay(true) {
                                Ok(()) => serve_conn(stream, raft, snapshot_bytes_max, &stats).await,
                                Err(e) => Err(e.into()),
                            },
                        };
                        if let Err(e) = served {
                            tracing::debug!(%peer, error = %e, "raft transport connection closed");
                        }
                    });
                }
                Err(e) => {
                    tracing::warn!(error = %e, "raft transport accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    conns.shutdown().await;
}

/// The TLS handshake of an incoming connection, within [`HANDSHAKE_MAX`], and the check
/// that the peer is a member: its certificate (verified against the CA and its CRL by
/// the handshake) names the role `node`.
async fn accept_member(
    stream: TcpStream,
    tls: &ReloadableServerConfig,
) -> Result<tokio_rustls::server::TlsStream<TcpStream>, String> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
    let stream = tokio::time::timeout(HANDSHAKE_MAX, acceptor.accept(stream))
        .await
        .map_err(|_| format!("no TLS handshake within {HANDSHAKE_MAX:?}"))?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    match bourse_pki::peer_identity(stream.get_ref().1) {
        Some(identity) if identity.role == Role::Node => Ok(stream),
        Some(identity) => Err(format!("{identity} is not a member: the Raft port takes node certificates only")),
        None => Err("the peer's certificate names no identity".into()),
    }
}

async fn serve_conn<SM, S>(
    stream: S,
    raft: Raft<SM>,
    snapshot_bytes_max: u32,
    stats: &TransportStats,
) -> Result<(), FrameError>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotData>,
    S: AsyncRead + AsyncWrite + Send + Unpin,
{
    let (rd, mut wr) = tokio::io::split(stream);
    let mut rd = BufReader::with_capacity(64 << 10, rd);
    let res = conn_loop(&mut rd, &mut wr, &raft, snapshot_bytes_max, stats).await;
    if let Err(e) = &res {
        if !matches!(e, FrameError::Io(_)) {
            // Best effort: tell the peer why before closing.
            if let Ok(frame) = encode_frame(FrameKind::Error, &e.to_string()) {
                let _ = wr.write_all(&frame).await;
            }
        }
    }
    res
}

async fn conn_loop<SM, R, W>(
    rd: &mut R,
    wr: &mut W,
    raft: &Raft<SM>,
    snapshot_bytes_max: u32,
    stats: &TransportStats,
) -> Result<(), FrameError>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotData>,
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    while let Some(frame) = read_frame_within(rd, snapshot_bytes_max).await? {
        let reply = match frame.kind {
            FrameKind::Append => {
                let req: AppendEntriesRequest = frame.decode()?;
                let res = raft.append_entries(req).await.map_err(|e| e.to_string());
                encode_frame(FrameKind::AppendReply, &res)?
            }
            FrameKind::Vote => {
                let req: VoteRequest = frame.decode()?;
                let res = raft.vote(req).await.map_err(|e| e.to_string());
                encode_frame(FrameKind::VoteReply, &res)?
            }
            FrameKind::PreVote => {
                let req: VoteRequest = frame.decode()?;
                let res = raft.pre_vote(req).await.map_err(|e| e.to_string());
                encode_frame(FrameKind::PreVoteReply, &res)?
            }
            FrameKind::TransferLeader => {
                let req: TransferLeaderRequest = frame.decode()?;
                let res = raft.handle_transfer_leader(req).await.map_err(|e| e.to_string());
                encode_frame(FrameKind::TransferLeaderReply, &res)?
            }
            FrameKind::Snapshot => {
                let (vote, meta): (Vote, SnapshotMeta) = frame.decode()?;
                let snapshot = Snapshot { meta, snapshot: Cursor::new(frame.data) };
                let res = raft.install_full_snapshot(vote, snapshot).await.map_err(|e| e.to_string());
                encode_frame(FrameKind::SnapshotReply, &res)?
            }
            FrameKind::StreamAppend => {
                stream_session(frame.decode()?, rd, wr, raft, stats).await?;
                encode_frame(FrameKind::StreamEndAck, &())?
            }
            other => return Err(FrameError::Unexpected(other)),
        };
        wr.write_all(&reply).await?;
    }
    Ok(())
}

/// Runs one stream session whose first request has been read, up to and including its
/// [`FrameKind::StreamEnd`]; the caller writes the ack. Reading requests and writing
/// replies run concurrently, so the leader's pipeline never waits on a round trip.
async fn stream_session<SM, R, W>(
    first: AppendEntriesRequest,
    rd: &mut R,
    wr: &mut W,
    raft: &Raft<SM>,
    stats: &TransportStats,
) -> Result<(), FrameError>
where
    SM: RaftStateMachine<TypeConfig, SnapshotData = SnapshotData>,
    R: AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    // When each request still unanswered was read: replies come in request order.
    let read_at = std::sync::Mutex::new(std::collections::VecDeque::from([std::time::Instant::now()]));
    let read_at = &read_at;
    let (tx, rx) = mpsc::channel::<AppendEntriesRequest>(STREAM_WINDOW);
    // The receiver is alive and the channel empty: this cannot fail.
    let _ = tx.try_send(first);
    let input = futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|req| (req, rx)) });
    let output = raft.stream_append(input);

    let requests = async move {
        loop {
            let frame = read_frame(rd).await?.ok_or(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()))?;
            match frame.kind {
                FrameKind::StreamAppend => {
                    read_at
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .push_back(std::time::Instant::now());
                    let req: AppendEntriesRequest = frame.decode()?;
                    // Fails once openraft has ended the session on an error reply: the
                    // client discards everything after that reply, so drop the request.
                    let _ = tx.send(req).await;
                }
                // Dropping `tx` ends openraft's input; its output then ends after the
                // last pending reply.
                FrameKind::StreamEnd => return Ok::<(), FrameError>(()),
                other => return Err(FrameError::Unexpected(other)),
            }
        }
    };
    let replies = async {
        let mut output = pin!(output);
        while let Some(item) = output.next().await {
            let last = !matches!(item, Ok(Ok(_)));
            let item = item.map_err(|fatal| fatal.to_string());
            wr.write_all(&encode_frame(FrameKind::StreamReply, &item)?).await?;
            let read = read_at.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop_front();
            if let Some(read) = read {
                TransportStats::record(&stats.append_served_ns, read);
            }
            if last {
                break;
            }
        }
        Ok::<(), FrameError>(())
    };
    tokio::try_join!(requests, replies)?;
    Ok(())
}

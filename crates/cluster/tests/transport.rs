//! The Raft peer transport over real TCP on loopback: the frame codec, the server's
//! handling of bad input, the fault proxy, pipelined stream sessions, and a 3-node cluster
//! (elections, commits, leader loss, a partition and its healing, snapshot catch-up).
//!
//! The log store and state machine here are minimal in-memory test doubles, not the real
//! ones.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_cluster::fault::FaultProxy;
use bourse_cluster::network::{Network, NetworkConfig, PeerClient};
use bourse_cluster::tls::MemberTls;
use bourse_cluster::transport::{
    encode_frame, encode_snapshot_head, read_frame, read_frame_within, serve, Frame, FrameError, FrameKind,
    MAX_FRAME_LEN,
};
use bourse_cluster::types::{
    AppendEntriesRequest, AppendEntriesResponse, Applied, Entry, LogId, LogState, Raft, Snapshot, SnapshotData,
    SnapshotMeta, StoredMembership, TransferLeaderRequest, Vote, VoteRequest, VoteResponse,
};
use bourse_cluster::{Batch, NodeId, Peer, TypeConfig};
use bourse_pki::{Ca, Identity, Role, TlsFiles};
use futures_util::{Stream, StreamExt};
use openraft::entry::RaftEntry;
use openraft::errors::{ClientWriteError, ForwardReason, RaftError};
use openraft::impls::leader_id_adv::LeaderId;
use openraft::network::v2::RaftNetworkV2;
use openraft::network::{RPCOption, RaftNetworkFactory};
use openraft::raft::StreamAppendResult;
use openraft::storage::{
    EntryResponder, IOFlushed, RaftLogReader, RaftLogStorage, RaftSnapshotBuilder, RaftStateMachine,
};
use openraft::{Config, EntryPayload, Membership, ServerState, SnapshotPolicy};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::oneshot;

// ---------------------------------------------------------------------------------------
// In-memory log store and state machine (test doubles).

#[derive(Clone, Default)]
struct MemLog {
    inner: Arc<Mutex<LogInner>>,
}

#[derive(Default)]
struct LogInner {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    log: BTreeMap<u64, Entry>,
}

impl RaftLogReader<TypeConfig> for MemLog {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        Ok(self.inner.lock().unwrap().log.range(range).map(|(_, e)| e.clone()).collect())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        Ok(self.inner.lock().unwrap().vote)
    }
}

impl RaftLogStorage<TypeConfig> for MemLog {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState, io::Error> {
        let inner = self.inner.lock().unwrap();
        let last = inner.log.values().next_back().map(|e| e.log_id).or(inner.purged);
        Ok(LogState { last_purged_log_id: inner.purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        self.inner.lock().unwrap().vote = Some(*vote);
        Ok(())
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        self.inner.lock().unwrap().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        Ok(self.inner.lock().unwrap().committed)
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let mut inner = self.inner.lock().unwrap();
        for e in entries {
            inner.log.insert(e.log_id.index(), e);
        }
        drop(inner);
        callback.io_completed(Ok(()));
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> Result<(), io::Error> {
        let from = last.map_or(0, |l| l.index() + 1);
        self.inner.lock().unwrap().log.split_off(&from);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        let mut inner = self.inner.lock().unwrap();
        inner.log = inner.log.split_off(&(log_id.index() + 1));
        inner.purged = Some(log_id);
        Ok(())
    }
}

/// Applies batches by appending their commands to a list; a snapshot is that list.
#[derive(Clone, Default)]
struct MemSm {
    inner: Arc<Mutex<SmInner>>,
}

#[derive(Default)]
struct SmInner {
    applied: Option<LogId>,
    membership: StoredMembership,
    commands: Vec<Vec<u8>>,
    snapshot: Option<(SnapshotMeta, Vec<u8>)>,
    installed: usize,
}

impl MemSm {
    fn commands(&self) -> Vec<Vec<u8>> {
        self.inner.lock().unwrap().commands.clone()
    }

    fn installed(&self) -> usize {
        self.inner.lock().unwrap().installed
    }
}

impl RaftSnapshotBuilder<TypeConfig> for MemSm {
    type SnapshotData = SnapshotData;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let mut inner = self.inner.lock().unwrap();
        let data = postcard::to_allocvec(&inner.commands).map_err(io::Error::other)?;
        let meta = SnapshotMeta { last_log_id: inner.applied, last_membership: inner.membership.clone() };
        inner.snapshot = Some((meta.clone(), data.clone()));
        Ok(Snapshot { meta, snapshot: io::Cursor::new(data) })
    }
}

impl RaftStateMachine<TypeConfig> for MemSm {
    type SnapshotData = SnapshotData;
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.inner.lock().unwrap();
        Ok((inner.applied, inner.membership.clone()))
    }

    async fn apply<S>(&mut self, mut entries: S) -> Result<(), io::Error>
    where
        S: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + Send,
    {
        while let Some(item) = entries.next().await {
            let (entry, responder) = item?;
            let mut inner = self.inner.lock().unwrap();
            inner.applied = Some(entry.log_id);
            let mut n = 0;
            match entry.payload {
                EntryPayload::Blank => {}
                EntryPayload::Normal(batch) => {
                    n = batch.len() as u32;
                    inner.commands.extend(batch.iter().map(<[u8]>::to_vec));
                }
                EntryPayload::Membership(m) => inner.membership = StoredMembership::new(Some(entry.log_id), m),
            }
            drop(inner);
            if let Some(r) = responder {
                r.send(Applied { commands: n });
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self {
        self.clone()
    }

    async fn install_snapshot(&mut self, meta: &SnapshotMeta, snapshot: SnapshotData) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        let commands: Vec<Vec<u8>> = postcard::from_bytes(&data).map_err(io::Error::other)?;
        let mut inner = self.inner.lock().unwrap();
        inner.commands = commands;
        inner.applied = meta.last_log_id;
        inner.membership = meta.last_membership.clone();
        inner.snapshot = Some((meta.clone(), data));
        inner.installed += 1;
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        let inner = self.inner.lock().unwrap();
        Ok(inner.snapshot.clone().map(|(meta, data)| Snapshot { meta, snapshot: io::Cursor::new(data) }))
    }
}

// ---------------------------------------------------------------------------------------
// Helpers.

fn node_ip(id: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, 0, 10 + id as u8))
}

fn log_id(term: u64, node: NodeId, index: u64) -> LogId {
    LogId::new(LeaderId { term, node_id: node }, index)
}

fn membership() -> Membership<NodeId, Peer> {
    let nodes: BTreeMap<NodeId, Peer> = (1..=3)
        .map(|i| (i, Peer { api: format!("127.0.0.1:{}", 7400 + i), raft: format!("127.0.0.1:{}", 7500 + i) }))
        .collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes).unwrap()
}

/// postcard must give back the same value (by its Debug form) and re-encode to the same
/// bytes.
fn roundtrip<T: Serialize + DeserializeOwned + Debug>(value: &T) {
    let bytes = postcard::to_allocvec(value).unwrap();
    let back: T = postcard::from_bytes(&bytes).unwrap();
    assert_eq!(format!("{value:?}"), format!("{back:?}"));
    assert_eq!(bytes, postcard::to_allocvec(&back).unwrap());
}

fn test_config() -> Arc<Config> {
    Arc::new(
        Config {
            cluster_name: "transport-test".into(),
            heartbeat_interval: 100,
            election_timeout_min: 400,
            election_timeout_max: 800,
            install_snapshot_timeout: 2000,
            enable_pre_vote: Some(true),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(10),
            max_in_snapshot_log_to_keep: 0,
            purge_batch_size: 1,
            ..Default::default()
        }
        .validate()
        .unwrap(),
    )
}

struct Node {
    id: NodeId,
    raft: Raft<MemSm>,
    sm: MemSm,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn kill(&mut self) {
        self.raft.shutdown().await.unwrap();
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        (&mut self.server).await.unwrap();
    }
}

struct Cluster {
    nodes: Vec<Node>,
    /// Index `i` stands in front of node `i + 1`.
    proxies: Vec<FaultProxy>,
}

impl Cluster {
    /// Three nodes on 127.0.0.1, each dialing from 127.0.0.<10+id>, each behind a proxy
    /// that the membership advertises; node 1 initializes.
    async fn start() -> Cluster {
        let config = test_config();
        let mut listeners = Vec::new();
        let mut proxies = Vec::new();
        let mut members = BTreeMap::new();
        for id in 1..=3u64 {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let proxy =
                FaultProxy::start("127.0.0.1:0".parse().unwrap(), listener.local_addr().unwrap()).await.unwrap();
            members.insert(id, Peer { api: String::new(), raft: proxy.addr().to_string() });
            listeners.push(listener);
            proxies.push(proxy);
        }
        let mut nodes = Vec::new();
        for (i, listener) in listeners.into_iter().enumerate() {
            let id = i as u64 + 1;
            let net = Network::new(id, NetworkConfig { bind_ip: Some(node_ip(id)), ..Default::default() });
            let sm = MemSm::default();
            let raft = Raft::new(id, config.clone(), net, MemLog::default(), sm.clone()).await.unwrap();
            let (stop, stopped) = oneshot::channel::<()>();
            let server = tokio::spawn(serve(listener, raft.clone(), None, u32::MAX, Default::default(), async move {
                let _ = stopped.await;
            }));
            nodes.push(Node { id, raft, sm, stop: Some(stop), server });
        }
        nodes[0].raft.initialize(members).await.unwrap();
        Cluster { nodes, proxies }
    }

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id as usize - 1]
    }

    /// Waits until one of `among` is leader as seen by itself, and returns its id.
    async fn leader(&self, among: &[NodeId]) -> NodeId {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            for &id in among {
                let m = self.node(id).raft.metrics();
                let m = m.borrow_watched();
                if m.state == ServerState::Leader && m.current_leader == Some(id) {
                    return id;
                }
            }
            assert!(tokio::time::Instant::now() < deadline, "no leader among {among:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn write(&self, leader: NodeId, tag: &str, n: usize) -> u64 {
        let mut last = 0;
        for i in 0..n {
            let batch = Batch::from_commands([format!("{tag}-{i}")]);
            // A new leader refuses writes until a quorum has acknowledged it (its lease).
            let mut tries = 0;
            let resp = loop {
                match self.node(leader).raft.client_write(batch.clone()).await {
                    Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))
                        if f.reason == ForwardReason::LeaseExpired && tries < 100 =>
                    {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    res => break res.unwrap(),
                }
            };
            last = resp.log_id.index();
        }
        last
    }

    async fn wait_applied(&self, ids: &[NodeId], index: u64) {
        for &id in ids {
            self.node(id)
                .raft
                .wait(Some(Duration::from_secs(10)))
                .applied_index_at_least(Some(index), format!("node {id} applies {index}"))
                .await
                .unwrap();
        }
    }

    /// Cuts `id` off from the others in both directions.
    fn isolate(&self, id: NodeId) {
        for (i, p) in self.proxies.iter().enumerate() {
            if i as u64 + 1 == id {
                p.block_all();
            } else {
                p.block(node_ip(id));
            }
        }
    }

    fn heal(&self) {
        self.proxies.iter().for_each(FaultProxy::heal);
    }
}

use openraft::async_runtime::watch::WatchReceiver;

/// A single uninitialized node serving on loopback: enough to answer votes and appends.
async fn lone_node() -> (Raft<MemSm>, SocketAddr, oneshot::Sender<()>) {
    lone_node_with(None).await
}

/// [`lone_node`], its transport mutual TLS when `tls` is given.
async fn lone_node_with(tls: Option<MemberTls>) -> (Raft<MemSm>, SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let raft =
        Raft::new(9, test_config(), Network::new(9, NetworkConfig::default()), MemLog::default(), MemSm::default())
            .await
            .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, raft.clone(), tls, u32::MAX, Default::default(), async move {
        let _ = stopped.await;
    }));
    (raft, addr, stop)
}

async fn client_to(addr: SocketAddr) -> PeerClient {
    client_to_with(addr, None).await
}

async fn client_to_with(addr: SocketAddr, tls: Option<MemberTls>) -> PeerClient {
    let peer = Peer { api: String::new(), raft: addr.to_string() };
    Network::new(1, NetworkConfig { tls, ..NetworkConfig::default() }).new_client(9, &peer).await
}

fn option() -> RPCOption {
    RPCOption::new(Duration::from_secs(2))
}

// ---------------------------------------------------------------------------------------
// Mutual TLS.

/// The files of `role id`, issued by `ca` for 127.0.0.1.
fn issued(ca: &Ca, role: Role, id: &str) -> TlsFiles {
    let identity = Identity::new(role, id).unwrap();
    ca.issue(&identity, &["127.0.0.1".to_string()], &ca.dir().join("issued")).unwrap().files
}

fn client_tls(files: &TlsFiles) -> Option<MemberTls> {
    Some(MemberTls::load(files).unwrap())
}

fn vote_request() -> VoteRequest {
    VoteRequest::new(Vote::new(1, 1), None)
}

#[tokio::test]
async fn mutual_tls_admits_members_and_refuses_everyone_else() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::init(&dir.path().join("a")).unwrap();
    let other = Ca::init(&dir.path().join("b")).unwrap();
    let server = MemberTls::load(&issued(&ca, Role::Node, "9")).unwrap();
    let (_raft, addr, _stop) = lone_node_with(Some(server.clone())).await;

    // A member: node 1 of the cluster's CA.
    let member = issued(&ca, Role::Node, "1");
    let mut client = client_to_with(addr, client_tls(&member)).await;
    client.vote(vote_request(), option()).await.expect("a member's vote request is answered");

    // No TLS at all; a gateway's certificate of the same CA; a node certificate of
    // another CA (trusting ours, so the server is the one to refuse it); a revoked one.
    let mut plaintext = client_to(addr).await;
    assert!(plaintext.vote(vote_request(), option()).await.is_err(), "plaintext refused");
    let gateway = issued(&ca, Role::Gateway, "1");
    let mut as_gateway = client_to_with(addr, client_tls(&gateway)).await;
    assert!(as_gateway.vote(vote_request(), option()).await.is_err(), "a gateway is not a member");
    let foreign = TlsFiles { ca: member.ca.clone(), crl: member.crl.clone(), ..issued(&other, Role::Node, "1") };
    let mut from_elsewhere = client_to_with(addr, client_tls(&foreign)).await;
    assert!(from_elsewhere.vote(vote_request(), option()).await.is_err(), "another CA's node");
    // A member revoked while connected: the reload ends its connection, and its next
    // handshake fails.
    let revoked = issued(&ca, Role::Node, "2");
    let mut with_revoked = client_to_with(addr, client_tls(&revoked)).await;
    with_revoked.vote(vote_request(), option()).await.expect("not revoked yet");
    let serial = ca.list().unwrap().into_iter().find(|c| c.identity.id == "2").unwrap().serial;
    ca.revoke(&serial).unwrap();
    server.reload().unwrap();
    assert!(with_revoked.vote(vote_request(), option()).await.is_err(), "a revoked member");

    // A member's client refuses a server that is not a member (a gateway's certificate).
    let impostor = MemberTls::load(&gateway).unwrap();
    let (_raft2, impostor_addr, _stop2) = lone_node_with(Some(impostor)).await;
    let mut to_impostor = client_to_with(impostor_addr, client_tls(&member)).await;
    let refused = to_impostor.vote(vote_request(), option()).await.unwrap_err().to_string();
    assert!(refused.contains("not a member"), "{refused}");

    // Garbage bytes on the TLS port end that connection only: the member is still served.
    let mut garbage = TcpStream::connect(addr).await.unwrap();
    garbage.write_all(&[0xFF; 64]).await.unwrap();
    let mut again = client_to_with(addr, client_tls(&member)).await;
    again.vote(vote_request(), option()).await.expect("still serving members");
}

// ---------------------------------------------------------------------------------------
// Codec.

#[test]
fn postcard_round_trips_openraft_messages() {
    let vote = Vote::new(3, 2);
    roundtrip(&vote);
    roundtrip(&Vote::new_committed(4, 1));
    roundtrip(&log_id(3, 2, 17));
    roundtrip(&membership());
    let stored = StoredMembership::new(Some(log_id(1, 1, 0)), membership());
    roundtrip(&stored);
    roundtrip(&SnapshotMeta { last_log_id: Some(log_id(3, 2, 17)), last_membership: stored });
    let entries = vec![
        Entry::new_blank(log_id(3, 2, 5)),
        Entry::new_membership(log_id(3, 2, 6), membership()),
        Entry::new_normal(log_id(3, 2, 7), Batch::from_commands([vec![1, 2, 3], vec![]])),
    ];
    let append = AppendEntriesRequest {
        vote,
        prev_log_id: Some(log_id(2, 1, 4)),
        entries,
        leader_commit: Some(log_id(2, 1, 3)),
    };
    roundtrip(&append);
    roundtrip(&AppendEntriesResponse::Success);
    roundtrip(&AppendEntriesResponse::PartialSuccess(Some(log_id(3, 2, 6))));
    roundtrip(&AppendEntriesResponse::Conflict);
    roundtrip(&AppendEntriesResponse::HigherVote(Vote::new(9, 3)));
    roundtrip(&VoteRequest::new(vote, Some(log_id(2, 1, 4))));
    roundtrip(&VoteResponse::new(vote, Some(log_id(2, 1, 4)), true));
    roundtrip(&TransferLeaderRequest::new(vote, 3, Some(log_id(3, 2, 7))));
    let ok: Result<StreamAppendResult<TypeConfig>, String> = Ok(Ok(Some(log_id(3, 2, 7))));
    roundtrip(&ok);
    let conflict: Result<StreamAppendResult<TypeConfig>, String> =
        Ok(Err(openraft::raft::StreamAppendError::Conflict(log_id(3, 2, 7))));
    roundtrip(&conflict);
    roundtrip(&Err::<StreamAppendResult<TypeConfig>, String>("raft stopped".into()));
}

#[tokio::test]
async fn frames_round_trip_and_bad_frames_are_rejected() {
    // Round trip through the frame layer, including the snapshot frame's raw tail.
    let req = VoteRequest::new(Vote::new(3, 2), Some(log_id(2, 1, 4)));
    let mut wire = encode_frame(FrameKind::Vote, &req).unwrap();
    let meta = SnapshotMeta { last_log_id: Some(log_id(3, 2, 17)), last_membership: Default::default() };
    let data: Vec<u8> = (0..100_000u32).map(|i| i as u8).collect();
    wire.extend(encode_snapshot_head(&Vote::new(3, 2), &meta, data.len()).unwrap());
    wire.extend(&data);
    wire.extend(encode_frame(FrameKind::StreamEnd, &()).unwrap());
    let mut r = &wire[..];
    let f = read_frame(&mut r).await.unwrap().unwrap();
    assert_eq!(f.kind, FrameKind::Vote);
    assert_eq!(format!("{:?}", f.decode::<VoteRequest>().unwrap()), format!("{req:?}"));
    let f = read_frame(&mut r).await.unwrap().unwrap();
    assert_eq!(f.kind, FrameKind::Snapshot);
    let (_, back): (Vote, SnapshotMeta) = f.decode().unwrap();
    assert_eq!(back, meta);
    assert_eq!(f.data, data);
    assert_eq!(
        read_frame(&mut r).await.unwrap().unwrap(),
        Frame { kind: FrameKind::StreamEnd, payload: vec![], data: vec![] }
    );
    assert!(read_frame(&mut r).await.unwrap().is_none(), "clean end of stream");

    // Bad input: every case is an error, never a panic or a huge allocation.
    let oversize = [&(MAX_FRAME_LEN + 1).to_le_bytes()[..], &[FrameKind::Append as u8]].concat();
    assert!(matches!(read_frame(&mut &oversize[..]).await, Err(FrameError::TooLarge { .. })));
    let huge_snapshot = [&u32::MAX.to_le_bytes()[..], &[FrameKind::Snapshot as u8], &[0, 0, 0, 0]].concat();
    assert!(read_frame(&mut &huge_snapshot[..]).await.is_err(), "truncated snapshot frame");
    // A server's configured limit refuses a snapshot from its length field alone.
    let over_limit = [&(2u32 << 20).to_le_bytes()[..], &[FrameKind::Snapshot as u8]].concat();
    match read_frame_within(&mut &over_limit[..], 1 << 20).await {
        Err(FrameError::TooLarge { kind: FrameKind::Snapshot, len, max }) => assert_eq!((len, max), (2 << 20, 1 << 20)),
        other => panic!("a snapshot over the limit: {other:?}"),
    }
    let mut within = &wire[..];
    read_frame_within(&mut within, 1 << 20).await.unwrap().unwrap();
    assert_eq!(read_frame_within(&mut within, 1 << 20).await.unwrap().unwrap().data, data, "under the limit");
    let bad_header = [&20u32.to_le_bytes()[..], &[FrameKind::Snapshot as u8], &100u32.to_le_bytes()].concat();
    assert!(matches!(read_frame(&mut &bad_header[..]).await, Err(FrameError::Malformed(_))));
    assert!(matches!(read_frame(&mut &[0u8, 0, 0, 0, 1][..]).await, Err(FrameError::Empty)));
    assert!(matches!(read_frame(&mut &[1u8, 0, 0, 0, 0x42][..]).await, Err(FrameError::UnknownKind(0x42))));
    let truncated = &encode_frame(FrameKind::Vote, &req).unwrap()[..8];
    assert!(matches!(read_frame(&mut &truncated[..]).await, Err(FrameError::Io(_))));
    let garbage = [&4u32.to_le_bytes()[..], &[FrameKind::Vote as u8, 0xFF, 0xFF, 0xFF]].concat();
    let f = read_frame(&mut &garbage[..]).await.unwrap().unwrap();
    assert!(f.decode::<VoteRequest>().is_err());
}

#[tokio::test]
async fn server_survives_garbage_and_keeps_serving() {
    let (raft, addr, _stop) = lone_node().await;
    let cases: Vec<Vec<u8>> = vec![
        [&(MAX_FRAME_LEN + 1).to_le_bytes()[..], &[FrameKind::Append as u8]].concat(),
        [&4u32.to_le_bytes()[..], &[FrameKind::Vote as u8, 0xFF, 0xFF, 0xFF]].concat(),
        [&1u32.to_le_bytes()[..], &[0x42]].concat(),
        encode_frame(FrameKind::VoteReply, &()).unwrap(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ];
    for case in cases {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&case).await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), read_frame(&mut s)).await.unwrap();
        let reply = reply.unwrap().expect("an error frame before the close");
        assert_eq!(reply.kind, FrameKind::Error);
        let why: String = reply.decode().unwrap();
        assert!(!why.is_empty());
        let mut rest = Vec::new();
        let n = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut rest)).await.unwrap().unwrap_or(0);
        assert_eq!(n, 0, "connection closed after the error frame");
    }
    // Still serving: a real vote gets a real answer.
    let mut client = client_to(addr).await;
    let resp = client.vote(VoteRequest::new(Vote::new(5, 1), None), option()).await.unwrap();
    assert!(resp.is_granted_to(&Vote::new(5, 1)) || resp.vote >= Vote::new(5, 1));
    raft.shutdown().await.unwrap();
}

// ---------------------------------------------------------------------------------------
// Client against one server.

/// Appends that each add one entry after the previous one, from leader 1 in term 1.
fn appends(from: u64, n: u64) -> Vec<AppendEntriesRequest> {
    (from..from + n)
        .map(|i| AppendEntriesRequest {
            vote: Vote::new_committed(1, 1),
            prev_log_id: i.checked_sub(1).map(|p| log_id(1, 1, p)),
            entries: vec![Entry::new_normal(log_id(1, 1, i), Batch::from_commands([i.to_le_bytes()]))],
            leader_commit: None,
        })
        .collect()
}

#[tokio::test]
async fn unary_rpcs_stream_sessions_and_reconnects() {
    let (raft, addr, stop) = lone_node().await;
    let mut client = client_to(addr).await;

    // A pipelined session of 300 requests: one reply each, in order.
    let input = futures_util::stream::iter(appends(0, 300));
    let out: Vec<_> = client.stream_append(input, option()).await.unwrap().collect().await;
    assert_eq!(out.len(), 300);
    for (i, r) in out.into_iter().enumerate() {
        assert_eq!(r.unwrap().unwrap(), Some(log_id(1, 1, i as u64)));
    }

    // The connection is reused by the next session and by unary calls.
    let out: Vec<_> =
        client.stream_append(futures_util::stream::iter(appends(300, 5)), option()).await.unwrap().collect().await;
    assert!(out.iter().all(|r| matches!(r, Ok(Ok(_)))));
    let resp = client.append_entries(appends(305, 1).remove(0), option()).await.unwrap();
    assert!(matches!(resp, AppendEntriesResponse::Success));

    // A conflict ends the session with the conflict; later requests get no reply, and the
    // next session works on a fresh connection.
    let mut bad = appends(400, 3);
    bad[0].prev_log_id = Some(log_id(1, 1, 399));
    let out: Vec<_> = client.stream_append(futures_util::stream::iter(bad), option()).await.unwrap().collect().await;
    assert_eq!(out.len(), 1);
    assert!(matches!(out[0], Ok(Err(openraft::raft::StreamAppendError::Conflict(_)))));
    let out: Vec<_> =
        client.stream_append(futures_util::stream::iter(appends(306, 2)), option()).await.unwrap().collect().await;
    assert_eq!(out.len(), 2);
    assert!(out.iter().all(|r| matches!(r, Ok(Ok(_)))));

    // A higher vote from the peer passes through as a reply.
    let resp = client.vote(VoteRequest::new(Vote::new(0, 1), None), option()).await.unwrap();
    assert!(!resp.is_granted_to(&Vote::new(0, 1)));

    // A snapshot over the wire, installed by the peer.
    let data: Vec<u8> = postcard::to_allocvec(&vec![vec![7u8; 1000]; 3000]).unwrap();
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(1, 1, 1000)),
        last_membership: StoredMembership::new(Some(log_id(1, 1, 0)), membership()),
    };
    let snapshot = Snapshot { meta, snapshot: io::Cursor::new(data) };
    let never = std::future::pending::<openraft::errors::ReplicationClosed>();
    let resp = client.full_snapshot(Vote::new_committed(1, 1), snapshot, never, option()).await.unwrap();
    assert_eq!(resp.vote, Vote::new_committed(1, 1));
    raft.wait(Some(Duration::from_secs(5))).snapshot(log_id(1, 1, 1000), "installed").await.unwrap();

    // The peer goes away: unreachable, not a hang.
    raft.shutdown().await.unwrap();
    let _ = stop.send(());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let err = client.vote(VoteRequest::new(Vote::new(6, 1), None), option()).await.unwrap_err();
    assert!(matches!(err, openraft::errors::RPCError::Unreachable(_)), "{err:?}");
    let err = client.stream_append(futures_util::stream::iter(appends(0, 1)), option()).await;
    assert!(matches!(err, Err(openraft::errors::RPCError::Unreachable(_))));
}

#[tokio::test]
async fn a_silent_peer_is_a_timeout() {
    // Accepts and reads, never answers.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            held.push(s);
        }
    });
    let mut client = client_to(addr).await;
    let t0 = std::time::Instant::now();
    let err = client.vote(VoteRequest::new(Vote::new(1, 1), None), RPCOption::new(Duration::from_millis(200))).await;
    assert!(matches!(err, Err(openraft::errors::RPCError::Timeout(_))), "{err:?}");
    // soft_ttl is 3/4 of the hard ttl: 150 ms here.
    assert!(t0.elapsed() >= Duration::from_millis(140) && t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    let mut out = client
        .stream_append(futures_util::stream::iter(appends(0, 2)), RPCOption::new(Duration::from_millis(200)))
        .await
        .unwrap();
    assert!(matches!(out.next().await, Some(Err(openraft::errors::RPCError::Timeout(_)))));
    assert!(out.next().await.is_none());
}

// ---------------------------------------------------------------------------------------
// Fault proxy.

async fn connect_from(src: IpAddr, to: SocketAddr) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(SocketAddr::new(src, 0)).unwrap();
    s.connect(to).await.unwrap()
}

/// Whether an echo round trip works on `s` (false: closed or reset).
async fn echoes(s: &mut TcpStream) -> bool {
    if s.write_all(b"ping").await.is_err() {
        return false;
    }
    let mut buf = [0u8; 4];
    matches!(tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf)).await, Ok(Ok(_))) && &buf == b"ping"
}

#[tokio::test]
async fn fault_proxy_blocks_by_source_and_delays() {
    let echo = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let target = echo.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = echo.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let proxy = FaultProxy::start("127.0.0.1:0".parse().unwrap(), target).await.unwrap();
    let (a, b) = (node_ip(1), node_ip(2));
    let mut from_a = connect_from(a, proxy.addr()).await;
    let mut from_b = connect_from(b, proxy.addr()).await;
    assert!(echoes(&mut from_a).await && echoes(&mut from_b).await);

    proxy.block(a);
    assert!(!echoes(&mut from_a).await, "open connection from a is cut");
    assert!(!echoes(&mut connect_from(a, proxy.addr()).await).await, "new connection from a is dropped");
    assert!(echoes(&mut from_b).await, "b is not affected");

    proxy.unblock(a);
    assert!(echoes(&mut connect_from(a, proxy.addr()).await).await);

    proxy.block_all();
    assert!(!echoes(&mut from_b).await);
    assert!(!echoes(&mut connect_from(b, proxy.addr()).await).await);
    proxy.heal();
    let mut from_b = connect_from(b, proxy.addr()).await;
    assert!(echoes(&mut from_b).await);

    proxy.set_delay(Duration::from_millis(150));
    let t0 = std::time::Instant::now();
    assert!(echoes(&mut from_b).await);
    assert!(t0.elapsed() >= Duration::from_millis(150));
    proxy.set_delay(Duration::ZERO);
    let t0 = std::time::Instant::now();
    assert!(echoes(&mut from_b).await);
    assert!(t0.elapsed() < Duration::from_millis(150));
}

// ---------------------------------------------------------------------------------------
// A 3-node cluster.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_commits_and_survives_leader_loss() {
    let mut c = Cluster::start().await;
    let leader = c.leader(&[1, 2, 3]).await;
    let last = c.write(leader, "a", 20).await;
    c.wait_applied(&[1, 2, 3], last).await;
    let expected = c.node(leader).sm.commands();
    assert_eq!(expected.len(), 20);
    for id in 1..=3 {
        assert_eq!(c.node(id).sm.commands(), expected, "node {id}");
    }

    c.nodes[leader as usize - 1].kill().await;
    let survivors: Vec<NodeId> = (1..=3).filter(|&i| i != leader).collect();
    let new_leader = c.leader(&survivors).await;
    assert_ne!(new_leader, leader);
    let last = c.write(new_leader, "b", 5).await;
    c.wait_applied(&survivors, last).await;
    for &id in &survivors {
        assert_eq!(c.node(id).sm.commands().len(), 25, "node {id}");
    }
    for n in &mut c.nodes {
        if n.id != leader {
            n.kill().await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_moves_leadership_and_healing_catches_up() {
    let mut c = Cluster::start().await;
    let old = c.leader(&[1, 2, 3]).await;
    let last = c.write(old, "before", 3).await;
    c.wait_applied(&[1, 2, 3], last).await;

    c.isolate(old);
    let majority: Vec<NodeId> = (1..=3).filter(|&i| i != old).collect();
    let new = c.leader(&majority).await;
    // Enough entries for snapshots and purges (every 10 logs, none kept), so the old
    // leader can only catch up through a snapshot over the wire.
    let last = c.write(new, "during", 30).await;
    c.wait_applied(&majority, last).await;
    assert!(c.node(old).sm.commands().len() < 33, "the isolated node got nothing");

    c.heal();
    c.wait_applied(&[old], last).await;
    assert_eq!(c.node(old).sm.commands(), c.node(new).sm.commands());
    assert!(c.node(old).sm.installed() >= 1, "caught up by snapshot");
    let m = c.node(old).raft.metrics().borrow_watched().clone();
    assert_eq!(m.current_leader, Some(new));
    for n in &mut c.nodes {
        n.kill().await;
    }
}

//! Bad input on the wire to one running `bourse serve`: the node refuses each with the
//! status or ack the contract names, never crashes, never logs it, and keeps serving.
//!
//! Cases, each followed by a well-formed Admin.Submit on a fresh connection:
//! - garbage bytes on a raw TCP connection, HTTP/1.1 text, and a valid HTTP/2 preface
//!   followed by junk frames (with an idle connection and a half-sent preface held open
//!   throughout);
//! - gRPC bodies that are not valid protobuf for the method, unary and on the stream
//!   (sent with a raw bytes codec);
//! - well-formed messages of the wrong shape: a command without its oneof body, an
//!   unknown or unspecified enum (ack refused with a code from 1000, log index 0, seq not
//!   used up), a SubmitRequest without a command, client id 0;
//! - a message above `grpc_message_bytes_max` (4 MiB), unary and on the stream;
//! - a batch above `client_batch_commands_max` (4096 commands);
//! - a stream whose client id changes mid-stream.
//!
//! Two stream lifecycle tests run their own node: a client that half-closes its stream
//! still hears every ack, and a client dropped for not reading its acks sees its stream
//! end with an error.

mod support;

use std::time::Duration;

use bourse_engine::command::{Command, CommandBody, OrderRequest, Tif};
use bourse_engine::{ClientId, Px, Qty, Side, SymbolId};
use bourse_protocol::proto;
use bourse_protocol::proto::order_entry_client::OrderEntryClient;
use prost::bytes::{Buf, BufMut};
use prost::Message;
use support::{Market, NodeProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_stream::StreamExt;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{Code, Status};

/// The node's default `grpc_message_bytes_max`.
const GRPC_MESSAGE_BYTES_MAX: usize = 4 << 20;
/// The node's default `client_batch_commands_max`.
const CLIENT_BATCH_COMMANDS_MAX: usize = 4096;
/// The HTTP/2 client connection preface.
const HTTP2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// The client id of the oversized messages, which must never reach the log.
const CLIENT_OVERSIZED: u64 = 302;

/// The node under test and the admin client's next seq.
struct Fixture {
    node: NodeProcess,
    market: Market,
    /// The log index of the last well-formed submit.
    index_last: u64,
}

impl Fixture {
    /// A fresh connection and a well-formed Admin.Submit: the node still serves.
    async fn still_serves(&mut self, after: &str) {
        let mut admin = support::admin_connect(&self.node.url()).await;
        let seq = self.market.admin_seq_next;
        let ack = support::admin_submit(&mut admin, support::ADMIN_CLIENT, seq, CommandBody::CreateAccount).await;
        assert!(ack.log_index > 0 && !ack.duplicate, "after {after}: {ack:?}\n{}", self.node.stderr());
        support::ok_id(&ack);
        self.market.admin_seq_next += 1;
        self.index_last = ack.log_index;
        println!("after {after}: Admin.Submit answered at index {}", ack.log_index);
    }

    fn url(&self) -> String {
        self.node.url()
    }
}

#[test]
fn bad_input_is_refused_and_the_node_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let index_last = runtime.block_on(async move {
        let mut admin = support::admin_connect(&node.url()).await;
        let market = support::market_setup(&mut admin, 2).await;
        let mut fixture = Fixture { node, market, index_last: 0 };
        garbage_connections(&mut fixture).await;
        protobuf_invalid(&mut fixture).await;
        shapes_wrong(&mut fixture).await;
        messages_too_large(&mut fixture).await;
        batch_too_long(&mut fixture).await;
        client_id_changes(&mut fixture).await;
        let (status, stderr) = fixture.node.terminate();
        assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
        assert!(!stderr.contains("panicked"), "the node panicked:\n{stderr}");
        fixture.index_last
    });
    // Nothing refused reached the log: no command of client 0 or of the oversized
    // submit, and nothing after the last well-formed one.
    let replay = support::replay_journal(&dir.path().join("data"), None);
    assert_eq!(replay.index_last, index_last);
    for (index, record) in &replay.records {
        assert!(![0, CLIENT_OVERSIZED].contains(&record.command.client.0), "{index}: {:?}", record.command);
    }
}

/// Writes `bytes` on a new TCP connection and waits for the node to close it.
async fn tcp_send_expect_close(fixture: &Fixture, bytes: &[u8], what: &str) {
    let mut stream = TcpStream::connect(fixture.node.addr).await.unwrap();
    // The node may close before it has read everything; a reset is a close too.
    let _ = stream.write_all(bytes).await;
    let mut sink = vec![0u8; 64 * 1024];
    let closed = tokio::time::timeout(support::RPC_WAIT_MAX, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "{what}: the node kept the connection open for {:?}", support::RPC_WAIT_MAX);
}

async fn garbage_connections(fixture: &mut Fixture) {
    // Held open through every case below: an idle connection and a half-sent preface.
    let idle = TcpStream::connect(fixture.node.addr).await.unwrap();
    let mut half = TcpStream::connect(fixture.node.addr).await.unwrap();
    half.write_all(&HTTP2_PREFACE[..10]).await.unwrap();

    let mut junk = vec![0u8; 4096];
    let mut state = 0x9e37_79b9_u32;
    for byte in &mut junk {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        *byte = (state >> 24) as u8;
    }
    tcp_send_expect_close(fixture, &junk, "random bytes").await;
    fixture.still_serves("random bytes on a raw connection").await;

    tcp_send_expect_close(fixture, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "HTTP/1.1").await;
    fixture.still_serves("an HTTP/1.1 request").await;

    let mut framed = HTTP2_PREFACE.to_vec();
    framed.extend_from_slice(&junk);
    tcp_send_expect_close(fixture, &framed, "HTTP/2 junk frames").await;
    fixture.still_serves("an HTTP/2 preface followed by junk frames").await;

    // A frame header that declares a huge DATA frame on a stream never opened.
    let mut oversized = HTTP2_PREFACE.to_vec();
    oversized.extend_from_slice(&[0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01]);
    tcp_send_expect_close(fixture, &oversized, "oversized HTTP/2 frame").await;
    fixture.still_serves("an oversized HTTP/2 frame header").await;
    drop((idle, half));
}

/// A codec that sends and receives raw bytes, to put anything in a gRPC body.
#[derive(Clone, Copy, Default)]
struct RawCodec;

struct RawEncoder;
struct RawDecoder;

impl Encoder for RawEncoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for RawDecoder {
    type Item = Vec<u8>;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut bytes = vec![0u8; src.remaining()];
        src.copy_to_slice(&mut bytes);
        Ok(Some(bytes))
    }
}

impl Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawEncoder;
    type Decoder = RawDecoder;

    fn encoder(&mut self) -> RawEncoder {
        RawEncoder
    }

    fn decoder(&mut self) -> RawDecoder {
        RawDecoder
    }
}

async fn raw_grpc(url: &str) -> tonic::client::Grpc<Channel> {
    let channel = support::bounded("connect", Channel::from_shared(url.to_string()).unwrap().connect()).await.unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    support::bounded("ready", grpc.ready()).await.unwrap();
    grpc
}

/// Admin.Submit with `body` as the raw request message.
async fn submit_raw(url: &str, body: Vec<u8>) -> Result<Vec<u8>, Status> {
    let mut grpc = raw_grpc(url).await;
    let path = PathAndQuery::from_static("/bourse.v1.Admin/Submit");
    support::bounded("raw Admin.Submit", grpc.unary(tonic::Request::new(body), path, RawCodec))
        .await
        .map(tonic::Response::into_inner)
}

/// OrderEntry.Session with `messages` as raw client messages; returns how the stream ended.
async fn session_raw(url: &str, messages: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, Status> {
    let mut grpc = raw_grpc(url).await;
    let path = PathAndQuery::from_static("/bourse.v1.OrderEntry/Session");
    let request = tonic::Request::new(tokio_stream::iter(messages));
    let mut replies = support::bounded("raw Session", grpc.streaming(request, path, RawCodec)).await?.into_inner();
    let mut received = Vec::new();
    while let Some(reply) = support::bounded("raw Session reply", replies.next()).await {
        received.push(reply?);
    }
    Ok(received)
}

async fn protobuf_invalid(fixture: &mut Fixture) {
    let url = fixture.url();
    // Wire type 7 does not exist; a truncated varint; client_id (a varint) as bytes.
    let bodies: [(&str, Vec<u8>); 3] = [
        ("wire type 7", vec![0x0f, 0xff, 0xff, 0xff]),
        ("truncated varint", vec![0x08, 0xff, 0xff]),
        ("field of the wrong wire type", vec![0x0a, 0x03, 0x01, 0x02, 0x03]),
    ];
    for (what, body) in &bodies {
        let status = submit_raw(&url, body.clone()).await.expect_err("an invalid message is refused");
        assert_ne!(status.code(), Code::Ok);
        println!("Admin.Submit with {what}: {:?} {}", status.code(), status.message());
        fixture.still_serves(&format!("Admin.Submit with {what}")).await;

        let ended = session_raw(&url, vec![body.clone()]).await;
        let status = ended.expect_err("an invalid batch ends the stream with an error");
        println!("Session with {what}: {:?} {}", status.code(), status.message());
        fixture.still_serves(&format!("a Session batch with {what}")).await;
    }
}

/// A client command of `client` as the wire carries it.
fn wire(client: u64, seq: u64, body: CommandBody) -> proto::ClientCommand {
    proto::ClientCommand::from(&Command { client: ClientId(client), seq, ts: 0, body })
}

fn place(fixture: &Fixture, account: usize) -> CommandBody {
    let account = fixture.market.accounts[account];
    let order = OrderRequest::limit(account, SymbolId(fixture.market.symbol), Side::Buy, Px(900), Qty(1), Tif::Gtc);
    CommandBody::Place(order)
}

/// A session of `client` through the generated client: a sender of batches and the replies.
struct Session {
    sender: mpsc::Sender<proto::ClientBatch>,
    replies: tonic::Streaming<proto::ServerBatch>,
}

impl Session {
    async fn open(url: &str) -> Session {
        let mut order_entry = support::bounded("connect", OrderEntryClient::connect(url.to_string())).await.unwrap();
        let (sender, receiver) = mpsc::channel(4);
        let replies = support::bounded(
            "open session",
            order_entry.session(tokio_stream::wrappers::ReceiverStream::new(receiver)),
        )
        .await
        .unwrap()
        .into_inner();
        Session { sender, replies }
    }

    async fn send(&self, client_id: u64, commands: Vec<proto::ClientCommand>) {
        self.sender.send(proto::ClientBatch { client_id, commands }).await.expect("stream open");
    }

    /// The next `len` acks, or the status that ended the stream.
    async fn acks(&mut self, len: usize) -> Result<Vec<proto::Ack>, Status> {
        let mut acks = Vec::new();
        while acks.len() < len {
            match support::bounded("session reply", self.replies.next()).await {
                Some(Ok(batch)) => acks.extend(batch.acks),
                Some(Err(status)) => return Err(status),
                None => return Err(Status::unknown("the stream ended without a status")),
            }
        }
        Ok(acks)
    }

    /// How the stream ends, with no ack before the end.
    async fn end(&mut self) -> Status {
        match self.acks(1).await {
            Ok(acks) => panic!("expected the stream to end, got acks {acks:?}"),
            Err(status) => status,
        }
    }
}

fn refusal_code(ack: &proto::Ack) -> u32 {
    match &ack.outcome {
        Some(proto::ack::Outcome::Rejected(info)) => info.code,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

async fn shapes_wrong(fixture: &mut Fixture) {
    const CLIENT: u64 = 300;
    let url = fixture.url();
    let mut session = Session::open(&url).await;
    let mut no_body = wire(CLIENT, 1, place(fixture, 0));
    no_body.body = None;
    let mut side_unknown = wire(CLIENT, 1, place(fixture, 0));
    let mut tif_unspecified = wire(CLIENT, 1, place(fixture, 0));
    if let Some(proto::client_command::Body::Place(order)) = &mut side_unknown.body {
        order.side = 99;
    }
    if let Some(proto::client_command::Body::Place(order)) = &mut tif_unspecified.body {
        order.tif = proto::Tif::Unspecified as i32;
    }
    // Each refusal leaves seq 1 unused, so the well-formed seq 1 after them applies.
    let cases = [
        ("no oneof body", no_body, 1000),
        ("unknown side", side_unknown, 1002),
        ("unspecified tif", tif_unspecified, 1001),
    ];
    for (what, command, code) in cases {
        session.send(CLIENT, vec![command]).await;
        let ack = session.acks(1).await.unwrap_or_else(|s| panic!("{what}: stream ended: {s}")).remove(0);
        assert_eq!((ack.seq, ack.log_index, ack.duplicate), (1, 0, false), "{what}: {ack:?}");
        assert_eq!(refusal_code(&ack), code, "{what}: {ack:?}");
        println!("{what}: refused with {:?}", ack.outcome);
    }
    session.send(CLIENT, vec![wire(CLIENT, 1, place(fixture, 0))]).await;
    let ack = session.acks(1).await.unwrap().remove(0);
    assert!(ack.log_index > 0 && !ack.duplicate, "seq 1 after refusals applies: {ack:?}");
    support::ok_id(&ack);
    fixture.still_serves("commands of the wrong shape").await;

    let mut admin = support::admin_connect(&url).await;
    let status = admin.submit(proto::SubmitRequest { client_id: 301, command: None }).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    let command = wire(0, 1, CommandBody::CreateAccount);
    let status = admin.submit(proto::SubmitRequest { client_id: 0, command: Some(command.clone()) }).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    fixture.still_serves("Admin.Submit without a command or with client id 0").await;

    let mut session = Session::open(&url).await;
    session.send(0, vec![command]).await;
    let status = session.end().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status}");
    fixture.still_serves("a session with client id 0").await;
}

async fn messages_too_large(fixture: &mut Fixture) {
    let url = fixture.url();
    let name = "X".repeat(GRPC_MESSAGE_BYTES_MAX + 1024);
    let command = wire(CLIENT_OVERSIZED, 1, CommandBody::CreateAsset { name, decimals: 0 });
    let request = proto::SubmitRequest { client_id: CLIENT_OVERSIZED, command: Some(command.clone()) };
    assert!(request.encoded_len() > GRPC_MESSAGE_BYTES_MAX);
    let mut admin = support::admin_connect(&url).await;
    let status = support::bounded("oversized submit", admin.submit(request)).await.unwrap_err();
    assert!(matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted), "{status:?}");
    println!("oversized Admin.Submit: {:?} {}", status.code(), status.message());
    fixture.still_serves("an oversized Admin.Submit").await;

    let mut session = Session::open(&url).await;
    session.send(CLIENT_OVERSIZED, vec![command]).await;
    let status = session.end().await;
    assert!(matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted), "{status:?}");
    fixture.still_serves("an oversized session batch").await;
}

async fn batch_too_long(fixture: &mut Fixture) {
    const CLIENT: u64 = 303;
    let url = fixture.url();
    let mut session = Session::open(&url).await;
    let commands: Vec<_> =
        (1..=CLIENT_BATCH_COMMANDS_MAX as u64 + 1).map(|seq| wire(CLIENT, seq, place(fixture, 1))).collect();
    session.send(CLIENT, commands).await;
    let status = session.end().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    println!("batch of {} commands: {}", CLIENT_BATCH_COMMANDS_MAX + 1, status.message());
    fixture.still_serves("a batch above client_batch_commands_max").await;

    // Nothing of the refused batch was applied: seq 1 is still the next one.
    let mut session = Session::open(&url).await;
    session.send(CLIENT, vec![wire(CLIENT, 1, place(fixture, 1))]).await;
    let ack = session.acks(1).await.unwrap().remove(0);
    assert!(!ack.duplicate && ack.log_index > 0, "{ack:?}");
    support::ok_id(&ack);
}

async fn client_id_changes(fixture: &mut Fixture) {
    let url = fixture.url();
    let mut session = Session::open(&url).await;
    session.send(304, vec![wire(304, 1, CommandBody::CreateAccount)]).await;
    let ack = session.acks(1).await.unwrap().remove(0);
    support::ok_id(&ack);
    session.send(305, vec![wire(305, 1, CommandBody::CreateAccount)]).await;
    let status = session.end().await;
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    println!("client id changed mid-stream: {}", status.message());
    // Give the node a moment to drop the session before checking it serves others.
    tokio::time::sleep(Duration::from_millis(10)).await;
    fixture.still_serves("a client id change mid-stream").await;
}

/// A client that sends its batches and then closes its side of the stream (gRPC's way
/// of saying it has nothing more to send) still hears every ack, then a clean end.
#[test]
fn a_session_half_closed_by_the_client_still_gets_every_ack() {
    const CLIENT: u64 = 400;
    const BATCHES: u64 = 4;
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let (acks, end) = runtime.block_on(async {
        let mut order_entry = support::bounded("connect", OrderEntryClient::connect(node.url())).await.unwrap();
        let batches: Vec<proto::ClientBatch> = (0..BATCHES)
            .map(|b| {
                let commands = (1..=BATCH_LEN).map(|i| wire(CLIENT, b * BATCH_LEN + i, CommandBody::CreateAccount));
                proto::ClientBatch { client_id: CLIENT, commands: commands.collect() }
            })
            .collect();
        // The request stream ends after the last batch: the client half-closes.
        let mut replies =
            support::bounded("session", order_entry.session(tokio_stream::iter(batches))).await.unwrap().into_inner();
        let mut acks = Vec::new();
        loop {
            match support::bounded("session reply", replies.next()).await {
                Some(Ok(batch)) => acks.extend(batch.acks),
                Some(Err(status)) => break (acks, Some(status)),
                None => break (acks, None),
            }
        }
    });
    let (status, stderr) = node.terminate();
    assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
    let seqs: Vec<u64> = acks.iter().map(|ack| ack.seq).collect();
    assert_eq!(seqs, (1..=BATCHES * BATCH_LEN).collect::<Vec<_>>(), "acks before the end ({end:?})");
    assert!(end.is_none(), "the stream ended with {end:?}");
}

/// Commands per batch in the stream lifecycle tests.
const BATCH_LEN: u64 = 16;

/// A client that does not read its acks is dropped as too slow, and its stream ends
/// with an error (outbox.rs: "its stream ends; the client reconnects and resends")
/// rather than staying open while the node applies its commands without answering.
#[test]
fn a_session_dropped_for_not_reading_ends_its_stream() {
    const CLIENT: u64 = 401;
    const DROP_WAIT_MAX: Duration = Duration::from_secs(20);
    let dir = tempfile::tempdir().unwrap();
    let node = NodeProcess::start(&dir.path().join("data"), "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let end = runtime.block_on(async {
        // A small HTTP/2 window, so the node's outbox fills after fewer batches.
        let endpoint = Channel::from_shared(node.url()).unwrap().initial_stream_window_size(Some(4096));
        let channel = support::bounded("connect", endpoint.connect()).await.unwrap();
        let mut order_entry = OrderEntryClient::new(channel);
        let (sender, receiver) = mpsc::channel(1 << 16);
        let stream = tokio_stream::wrappers::ReceiverStream::new(receiver);
        let mut replies = support::bounded("session", order_entry.session(stream)).await.unwrap().into_inner();
        // One command at a time, paced so each becomes its own server batch, unread.
        let started = std::time::Instant::now();
        let mut seq = 0;
        while !node.stderr().contains("session dropped") {
            assert!(started.elapsed() < DROP_WAIT_MAX, "the node never dropped the session");
            seq += 1;
            sender
                .send(proto::ClientBatch {
                    client_id: CLIENT,
                    commands: vec![wire(CLIENT, seq, CommandBody::CreateAccount)],
                })
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        println!("dropped after {seq} commands in {:?}", started.elapsed());
        let mut acked = 0;
        loop {
            match tokio::time::timeout(support::RPC_WAIT_MAX, replies.next()).await {
                Ok(Some(Ok(batch))) => acked += batch.acks.len(),
                Ok(Some(Err(status))) => break Ok(status),
                Ok(None) => break Err(format!("ended without a status after {acked} acks")),
                Err(_) => break Err(format!("still open and silent after {acked} of {seq} acks")),
            }
        }
    });
    let (status, stderr) = node.terminate();
    assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
    let status = end.unwrap_or_else(|end| panic!("the dropped session's stream {end}"));
    println!("the dropped session ended with {status}");
}

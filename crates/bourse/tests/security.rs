//! Forged and unauthorised calls on every port of a running cluster (issue 23): three
//! `bourse node` processes with the cluster's PKI (the harness's CA), and callers that
//! try what they may not. Each attempt must be refused with a clear status, and no
//! replica's state may change: after the whole matrix every replica reports the state
//! hash it had before it.
//!
//! Each refusal has a positive control beside it (the same call by a caller that may
//! make it succeeds), so a port that refused everything would not pass.

#[macro_use]
#[path = "support/cluster.rs"]
mod harness;

use std::time::Duration;

use bourse_client::ClientTls;
use bourse_engine::command::CommandBody;
use bourse_pki::grpc::Connector;
use bourse_pki::{Ca, Identity, Role};
use bourse_protocol::proto;
use harness::{ClusterHarness, HarnessOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

/// How long one call may take.
const CALL_MAX: Duration = Duration::from_secs(10);

async fn channel(api: std::net::SocketAddr, tls: Option<&ClientTls>) -> Result<Channel, String> {
    let endpoint = Endpoint::from_shared(format!("http://{api}")).expect("uri").connect_timeout(CALL_MAX);
    match tls {
        Some(tls) => endpoint.connect_with_connector(tls.0.clone()).await,
        None => endpoint.connect().await,
    }
    .map_err(|e| format!("{e:?}"))
}

/// Cluster.Status on `api` as `tls` (none: plaintext): the status, or why not.
async fn status(api: std::net::SocketAddr, tls: Option<&ClientTls>) -> Result<proto::ClusterStatus, String> {
    let call = async {
        let channel = channel(api, tls).await?;
        proto::cluster_client::ClusterClient::new(channel)
            .status(proto::ClusterStatusRequest {})
            .await
            .map(tonic::Response::into_inner)
            .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
    };
    tokio::time::timeout(CALL_MAX, call).await.unwrap_or_else(|_| Err("timed out".into()))
}

fn submit_request(client_id: u64, body: &CommandBody) -> proto::SubmitRequest {
    let body = proto::client_command::Body::from(body);
    proto::SubmitRequest { client_id, command: Some(proto::ClientCommand { seq: 1, body: Some(body) }) }
}

/// Admin.Submit of `body` on `api` as `tls`.
async fn admin_submit(
    api: std::net::SocketAddr,
    tls: &ClientTls,
    body: &CommandBody,
) -> Result<proto::Ack, tonic::Status> {
    let channel = channel(api, Some(tls)).await.map_err(tonic::Status::unavailable)?;
    let mut client = proto::admin_client::AdminClient::new(channel).max_encoding_message_size(64 << 20);
    let call = client.submit(submit_request(0x5EC_0000 + rand_id(), body));
    tokio::time::timeout(CALL_MAX, call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("timed out"))?
        .map(|r| r.into_inner())
}

/// A client id of its own for each call (each call is a new client).
fn rand_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Asserts `result` was refused with `code`, its message containing `words`.
fn refused<T: std::fmt::Debug>(what: &str, result: Result<T, tonic::Status>, code: Code, words: &str) {
    match result {
        Ok(value) => panic!("{what}: accepted ({value:?}), expected {code:?}"),
        Err(status) => {
            assert_eq!(status.code(), code, "{what}: {status:?}");
            assert!(status.message().contains(words), "{what}: {status:?} does not say {words:?}");
            println!("refused as it must be: {what}: {:?}: {}", status.code(), status.message());
        }
    }
}

/// One command in a new order entry session on `api` as `tls`: its ack.
async fn order_entry(
    api: std::net::SocketAddr,
    tls: &ClientTls,
    body: &CommandBody,
) -> Result<proto::Ack, tonic::Status> {
    let channel = channel(api, Some(tls)).await.map_err(tonic::Status::unavailable)?;
    let command = submit_request(0, body).command.expect("a command");
    let batch = proto::ClientBatch { client_id: 0xE0_0000 + rand_id(), commands: vec![command] };
    let (up, rx) = tokio::sync::mpsc::channel(1);
    up.send(batch).await.expect("send");
    let mut down = proto::order_entry_client::OrderEntryClient::new(channel)
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await?
        .into_inner();
    let batch = tokio::time::timeout(CALL_MAX, down.message())
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no ack"))??
        .ok_or_else(|| tonic::Status::aborted("the session ended without an ack"))?;
    drop(up);
    batch.acks.into_iter().next().ok_or_else(|| tonic::Status::internal("a batch without an ack"))
}

/// Opens GatewayLink.Link on `api` as `tls`, sends `first`, and returns how the node
/// answers within `wait`: `Ok(())` if the link is still open then.
async fn link(
    api: std::net::SocketAddr,
    tls: &ClientTls,
    first: proto::GatewayUp,
    wait: Duration,
) -> Result<(), tonic::Status> {
    link_downs(api, tls, first, wait).await.map(|_| ())
}

/// Opens GatewayLink.Link on `api` as `tls`, sends `first`, and gathers what the node
/// sends down within `wait` (the link heartbeating meanwhile).
async fn link_downs(
    api: std::net::SocketAddr,
    tls: &ClientTls,
    first: proto::GatewayUp,
    wait: Duration,
) -> Result<Vec<proto::GatewayDown>, tonic::Status> {
    let channel = channel(api, Some(tls)).await.map_err(tonic::Status::unavailable)?;
    let (up, rx) = tokio::sync::mpsc::channel(16);
    let gateway = first.gateway;
    up.send(first).await.expect("send");
    let beats = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let heartbeat = proto::GatewayUp { gateway, watermark: now_ns(), ..Default::default() };
            if up.send(heartbeat).await.is_err() {
                break;
            }
        }
    });
    let mut client = proto::gateway_link_client::GatewayLinkClient::new(channel);
    let mut down = client.link(tokio_stream::wrappers::ReceiverStream::new(rx)).await?.into_inner();
    let mut downs = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while let Ok(message) = tokio::time::timeout_at(deadline, down.message()).await {
        match message? {
            Some(message) => downs.push(message),
            None => break,
        }
    }
    beats.abort();
    Ok(downs)
}

/// A link message that claims `claim` and sends one command under its client id.
fn claimed_batch(
    gateway: u32,
    claim: Option<proto::SessionClaim>,
    client_id: u64,
    body: &CommandBody,
) -> proto::GatewayUp {
    let command = submit_request(0, body).command.expect("a command");
    let ts = now_ns();
    proto::GatewayUp {
        gateway,
        watermark: ts,
        claims: Vec::new(),
        batches: vec![proto::StampedBatch {
            client_id,
            gateway_ts: ts,
            gateway_seq: 1,
            commands: vec![command],
            claim,
        }],
        feed_delay_ns: 0,
    }
}

fn as_proto(claim: bourse_gateway::keys::Claim) -> proto::SessionClaim {
    proto::SessionClaim { client_id: claim.client_id, key: claim.key, local_id: claim.local_id }
}

/// Asserts the node dropped `client`'s batch on the link and told the gateway why.
fn claim_refused(what: &str, downs: Result<Vec<proto::GatewayDown>, tonic::Status>, client: u64, words: &str) {
    let downs = downs.unwrap_or_else(|status| panic!("{what}: the link itself ended: {status:?}"));
    let acked: Vec<_> = downs.iter().flat_map(|d| &d.replies).filter(|r| r.client_id == client).collect();
    assert!(acked.is_empty(), "{what}: the node answered the batch: {acked:?}");
    let refusal = downs
        .iter()
        .flat_map(|d| &d.refused)
        .find(|r| r.client_id == client)
        .unwrap_or_else(|| panic!("{what}: no refusal came down: {downs:?}"));
    assert!(refusal.reason.contains(words), "{what}: {refusal:?} does not say {words:?}");
    println!("refused as it must be: {what}: {}", refusal.reason);
}

/// One command in an order entry session of a gateway's client port, with `key`, as
/// client `client_id`: its ack.
async fn gateway_command(
    gateway: std::net::SocketAddr,
    key: &str,
    client_id: u64,
    seq: u64,
    body: &CommandBody,
) -> Result<proto::Ack, tonic::Status> {
    let channel = channel(gateway, None).await.map_err(tonic::Status::unavailable)?;
    let mut command = submit_request(0, body).command.expect("a command");
    command.seq = seq;
    let (up, rx) = tokio::sync::mpsc::channel(1);
    up.send(proto::ClientBatch { client_id, commands: vec![command] }).await.expect("send");
    let mut request = tonic::Request::new(tokio_stream::wrappers::ReceiverStream::new(rx));
    request.metadata_mut().insert("authorization", format!("Bearer {key}").parse().expect("header"));
    let mut down = proto::order_entry_client::OrderEntryClient::new(channel).session(request).await?.into_inner();
    let batch = tokio::time::timeout(CALL_MAX, down.message())
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no ack"))??
        .ok_or_else(|| tonic::Status::aborted("the session ended without an ack"))?;
    drop(up);
    batch.acks.into_iter().next().ok_or_else(|| tonic::Status::internal("a batch without an ack"))
}

fn now_ns() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_nanos() as u64
}

/// Whether the peer closes a raw connection to `addr` after we send `bytes` (within 7 s:
/// the Raft port's handshake bound is 5 s).
async fn raw_closed(addr: std::net::SocketAddr, bytes: &[u8]) -> bool {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let _ = stream.write_all(bytes).await;
    let mut buf = [0u8; 4096];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {} // a TLS alert, say: read on until the close
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(7), closed).await.unwrap_or(false)
}

/// A TLS handshake with the Raft port as `identity` of `ca_dir`, then a frame: whether the
/// member closes the connection (it takes node certificates of its own CA only).
async fn raft_as(addr: std::net::SocketAddr, ca_dir: &std::path::Path, identity: &Identity) -> bool {
    let config = bourse_pki::client_config(&bourse_pki::TlsFiles::issued(ca_dir, identity)).expect("config");
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let connector = tokio_rustls::TlsConnector::from(config);
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").expect("name");
    let mut stream = match connector.connect(name, tcp).await {
        Ok(stream) => stream,
        Err(_) => return true, // refused in the handshake
    };
    // A snapshot frame header claiming 4 GiB: never read, the connection is already gone.
    let _ = stream.write_all(&[0x07, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]).await;
    let mut buf = [0u8; 1024];
    let closed = async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return true,
                Ok(_) => {}
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(7), closed).await.unwrap_or(false)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_forged_or_unauthorised_call_is_refused_and_no_state_changes() {
    // The nodes know one API key, alice's; the gateways know alice's and bob's.
    let keys_dir = tempfile::tempdir().expect("tempdir");
    let keys_file = keys_dir.path().join("keys.toml");
    let (alice_key, bob_key) = (bourse_gateway::keys::generate_key(), bourse_gateway::keys::generate_key());
    let alice_entry = bourse_gateway::keys::entry_for(&alice_key, "alice", vec![0, 1, 2], false);
    let bob_entry = bourse_gateway::keys::entry_for(&bob_key, "bob", vec![0, 1, 2], false);
    bourse_gateway::keys::append(&keys_file, alice_entry.clone()).expect("the nodes' key file");
    let options = HarnessOptions {
        node_args: vec!["--client-keys".into(), keys_file.display().to_string()],
        ..HarnessOptions::default()
    };
    let h = ClusterHarness::start("security", 3, options).await;
    let (leader, _) = h.leader().await;
    let api = h.slots[leader].api;
    let operator = h.client_tls("operator:harness");
    let observer = h.client_tls("observer:audit");
    let gateway1 = h.client_tls("gateway:1");

    // Positive controls, and a state worth protecting: an operator creates an asset.
    let asset = CommandBody::CreateAsset { name: "SEC".into(), decimals: 2 };
    let ack = admin_submit(api, &operator, &asset).await.expect("an operator may submit");
    assert!(ack.outcome.is_some(), "{ack:?}");
    for slot in h.all() {
        status(h.slots[slot].api, Some(&observer)).await.expect("an observer reads the status");
    }
    // Gateway 1 is named in --admin-gateways (the harness's): it may relay a deposit.
    let gateway2 = h.client_tls("gateway:2");
    let account = CommandBody::CreateAccount;
    let relayed = order_entry(api, &gateway1, &account).await.expect("gateway 1's session");
    assert!(relayed.log_index > 0 && matches!(relayed.outcome, Some(proto::ack::Outcome::OkId(_))), "{relayed:?}");

    // Sessions through real gateways (2 and 3), which check keys the nodes check again.
    let gateway_keys =
        || bourse_gateway::KeyStore::from_entries(vec![alice_entry.clone(), bob_entry.clone()]).expect("gateway keys");
    let mut gateways = Vec::new();
    for id in [2, 3] {
        let mut config = bourse_gateway::GatewayConfig::new(id, "127.0.0.1:0".parse().expect("addr"), h.endpoints());
        config.tls = Some(h.client_tls(&format!("gateway:{id}")));
        gateways.push(bourse_gateway::Gateway::start(config, gateway_keys()).await.expect("a gateway"));
    }
    let cancel = CommandBody::Cancel {
        account: bourse_engine::AccountId(0),
        symbol: bourse_engine::SymbolId(0),
        order: bourse_engine::OrderId(424_242),
    };
    // Alice's client 9 through gateway 2, then the same command again through gateway
    // 3 (a client whose gateway went away): one session, so the resend is a duplicate.
    let first = gateway_command(gateways[0].addr(), &alice_key, 9, 1, &cancel).await.expect("alice via gateway 2");
    assert!(first.log_index > 0 && !first.duplicate, "{first:?}");
    let again = gateway_command(gateways[1].addr(), &alice_key, 9, 1, &cancel).await.expect("alice via gateway 3");
    assert!(again.duplicate && again.outcome == first.outcome, "moved to gateway 3: {again:?} after {first:?}");
    // Bob's key is the gateways', not the nodes': his session is refused by the node.
    refused(
        "a session of a key the nodes' key file lacks",
        gateway_command(gateways[0].addr(), &bob_key, 9, 1, &cancel).await,
        Code::PermissionDenied,
        "not in the nodes' key file",
    );
    for gateway in gateways {
        gateway.shutdown().await;
    }
    // A gateway's own sessions (its front ends') are claimed in its namespace.
    let own = bourse_gateway::Principal::open().claim("", 1, 5);
    let downs = link_downs(
        api,
        &gateway1,
        claimed_batch(1, Some(as_proto(own.clone())), own.client_id, &cancel),
        Duration::from_secs(2),
    )
    .await
    .expect("gateway 1's link");
    let acked = downs.iter().flat_map(|d| &d.replies).any(|r| r.client_id == own.client_id);
    assert!(acked, "gateway 1's own session was not answered: {downs:?}");

    let (index_before, hash_before) = h.wait_converged(&h.all(), Duration::from_secs(30)).await;
    println!("before the matrix: index {index_before} hash {hash_before}");

    // 1. No certificate: plaintext gRPC is refused at the TLS handshake, on every member.
    for slot in h.all() {
        let answer = status(h.slots[slot].api, None).await;
        assert!(answer.is_err(), "plaintext Status on slot {slot} answered: {answer:?}");
    }

    // 2. A certificate from another CA, with a gateway identity the cluster knows.
    let other = tempfile::tempdir().expect("tempdir");
    let other_ca = Ca::init(&other.path().join("ca")).expect("another CA");
    let impostor = Identity::new(Role::Operator, "harness").expect("identity");
    other_ca.issue(&impostor, &[], &other.path().join("ca").join(bourse_pki::ISSUED_DIR)).expect("issue");
    let foreign = ClientTls(Connector::issued(&other.path().join("ca"), &impostor, Role::Node).expect("connector"));
    let answer = status(api, Some(&foreign)).await;
    assert!(answer.is_err(), "another CA's certificate was let in: {answer:?}");
    let forged = admin_submit(api, &foreign, &CommandBody::CreateAsset { name: "FORGED".into(), decimals: 0 }).await;
    assert!(forged.is_err(), "another CA's operator submitted: {forged:?}");

    // 3. Roles: each call that is not the caller's is PERMISSION_DENIED by name.
    let deposit = CommandBody::Deposit {
        account: bourse_engine::AccountId(0),
        asset: bourse_engine::AssetId(0),
        amount: bourse_engine::Amount(1_000_000),
    };
    refused(
        "a gateway calling Admin.Submit",
        admin_submit(api, &gateway1, &deposit).await,
        Code::PermissionDenied,
        "gateway 1",
    );
    refused(
        "an observer calling Admin.Submit",
        admin_submit(api, &observer, &deposit).await,
        Code::PermissionDenied,
        "observer audit",
    );
    let observer_session = async {
        let channel = channel(api, Some(&observer)).await.map_err(tonic::Status::unavailable)?;
        let batch =
            proto::ClientBatch { client_id: 77, commands: vec![submit_request(77, &deposit).command.expect("cmd")] };
        proto::order_entry_client::OrderEntryClient::new(channel)
            .session(tokio_stream::iter(vec![batch]))
            .await
            .map(|_| ())
    };
    refused("an observer opening an order entry session", observer_session.await, Code::PermissionDenied, "OrderEntry");
    let transfer = async {
        let channel = channel(api, Some(&gateway1)).await.map_err(tonic::Status::unavailable)?;
        proto::cluster_client::ClusterClient::new(channel)
            .transfer_leader(proto::TransferLeaderRequest { to: h.slots[(leader + 1) % 3].id })
            .await
            .map(|_| ())
    };
    refused("a gateway transferring leadership", transfer.await, Code::PermissionDenied, "TransferLeader");
    let follow = |tls: ClientTls| async move {
        let channel = channel(api, Some(&tls)).await.map_err(tonic::Status::unavailable)?;
        let mut stream = proto::log_client::LogClient::new(channel)
            .max_decoding_message_size(256 << 20)
            .follow(proto::FollowLogRequest { from_index: 1, snapshot_if_pruned: true })
            .await?
            .into_inner();
        stream.message().await.map(|chunk| chunk.map(|c| c.entries.len()))
    };
    refused(
        "a gateway reading every account's orders via Log.Follow",
        follow(gateway1.clone()).await,
        Code::PermissionDenied,
        "Log/Follow",
    );
    follow(observer.clone()).await.expect("an observer follows the log");

    // Gateway 2 is not: its administrative command is refused before the log, its
    // seq not used up (the code a gateway gives a key that may not send one).
    let refused_deposit = order_entry(api, &gateway2, &deposit).await.expect("gateway 2's session");
    match &refused_deposit.outcome {
        Some(proto::ack::Outcome::Rejected(info)) => {
            assert_eq!((info.code, info.name.as_str()), (1004, "not_authorized"), "{info:?}");
            assert_eq!(refused_deposit.log_index, 0, "refused before the log");
            println!("refused as it must be: a deposit from gateway 2's session: {info:?}");
        }
        other => panic!("gateway 2's deposit: {other:?}"),
    }

    // 4. A gateway link under another gateway's id, and stamps outside the bound.
    let hello = |gateway: u32, watermark: u64| proto::GatewayUp { gateway, watermark, ..Default::default() };
    link(api, &gateway1, hello(1, now_ns()), Duration::from_millis(800)).await.expect("gateway 1 links as itself");
    refused(
        "gateway 1 linking as gateway 2",
        link(api, &gateway1, hello(2, now_ns()), Duration::from_secs(3)).await,
        Code::PermissionDenied,
        "may not link as gateway 2",
    );
    refused(
        "an observer linking as a gateway",
        link(api, &observer, hello(1, now_ns()), Duration::from_secs(3)).await,
        Code::PermissionDenied,
        "GatewayLink",
    );
    refused(
        "a gateway stamping 10 s ahead of the node's clock",
        link(api, &gateway1, hello(1, now_ns() + 10_000_000_000), Duration::from_secs(3)).await,
        Code::OutOfRange,
        "ahead of this node's clock",
    );

    // 4b. Claims of clients on a link: another gateway's own client, a key's client
    //     without the key or with another key, another client of the key, no claim.
    let alice = bourse_gateway::KeyStore::from_entries(vec![alice_entry.clone()]).expect("keys");
    let alice = alice.verify(&alice_key).expect("alice");
    let wait = Duration::from_secs(2);
    let victim = alice.claim(&alice_key, 2, 9);
    let keyless = proto::SessionClaim { key: String::new(), ..as_proto(victim.clone()) };
    let wrong_key = proto::SessionClaim { key: bob_key.clone(), ..as_proto(victim.clone()) };
    let other_client = proto::SessionClaim { local_id: 10, ..as_proto(victim.clone()) };
    let cases = [
        (
            "gateway 2 claiming gateway 1's own client",
            Some(as_proto(own.clone())),
            own.client_id,
            "not in gateway 2's namespace",
        ),
        (
            "gateway 2 claiming alice's client without her key",
            Some(keyless),
            victim.client_id,
            "not in gateway 2's namespace",
        ),
        (
            "gateway 2 claiming alice's client with bob's key",
            Some(wrong_key),
            victim.client_id,
            "not in the nodes' key file",
        ),
        (
            "gateway 2 claiming alice's client 9 as her client 10",
            Some(other_client),
            victim.client_id,
            "not a client of the key",
        ),
        ("gateway 2 sending for alice's client without a claim", None, victim.client_id, "not claimed on this link"),
    ];
    for (what, claim, client, words) in cases {
        let downs = link_downs(api, &gateway2, claimed_batch(2, claim, client, &cancel), wait).await;
        claim_refused(what, downs, client, words);
    }

    // 5. An oversize message: refused by the decoder, before any service sees it.
    let huge = CommandBody::CreateAsset { name: "X".repeat(5 << 20), decimals: 0 };
    let oversize = admin_submit(api, &operator, &huge).await;
    let too_big = oversize.expect_err("a 5 MiB message was taken");
    assert!(matches!(too_big.code(), Code::OutOfRange | Code::ResourceExhausted | Code::Internal), "{too_big:?}");
    println!("refused as it must be: an oversize message: {:?}: {}", too_big.code(), too_big.message());

    // 6. The Raft port: plaintext bytes, a gateway's certificate, another CA's node.
    let raft = h.slots[leader].raft_listen;
    assert!(raw_closed(raft, b"\x07\xff\xff\xff\xffnot TLS at all").await, "the Raft port kept a plaintext connection");
    let pki = h.pki_dir();
    assert!(
        raft_as(raft, &pki, &Identity::new(Role::Gateway, "1").expect("identity")).await,
        "the Raft port kept a gateway's connection"
    );
    let node_elsewhere = Identity::new(Role::Node, "9").expect("identity");
    other_ca
        .issue(&node_elsewhere, &["127.0.0.1".into()], &other.path().join("ca").join(bourse_pki::ISSUED_DIR))
        .expect("issue");
    assert!(raft_as(raft, &other.path().join("ca"), &node_elsewhere).await, "the Raft port took another CA's node");

    // 7. Revocation: an operator's open connection is ended by the reload that follows its
    //    revocation, and it cannot connect again; others reconnect and carry on.
    let doomed = h.client_tls("operator:doomed");
    let open = channel(api, Some(&doomed)).await.expect("the doomed operator connects");
    let mut doomed_client = proto::cluster_client::ClusterClient::new(open);
    doomed_client.status(proto::ClusterStatusRequest {}).await.expect("before its revocation");
    let ca = Ca::open(&pki).expect("the harness's CA");
    let serial = ca
        .list()
        .expect("list")
        .into_iter()
        .find(|c| c.identity.to_string() == "operator doomed")
        .expect("issued")
        .serial;
    ca.revoke(&serial).expect("revoke");
    h.reload_certificates();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = tokio::time::timeout(CALL_MAX, doomed_client.status(proto::ClusterStatusRequest {})).await;
    assert!(!matches!(after, Ok(Ok(_))), "a revoked operator's open connection still answers: {after:?}");
    assert!(status(api, Some(&doomed)).await.is_err(), "a revoked operator connected again");
    // TLS 1.3: the client's side of the handshake completes before the server has
    // checked its certificate, so the refusal arrives as the server's alert, or (when
    // the close wins the race) as the connection closed or a broken pipe: a transport
    // error, never an answer.
    let revoked = admin_submit(api, &doomed, &deposit).await.expect_err("a revoked operator submitted");
    assert!(matches!(revoked.code(), Code::Unknown | Code::Unavailable | Code::Cancelled), "{revoked:?}");
    println!("refused as it must be: a revoked operator submitting: {revoked:?}");
    let (_, _) = h.leader().await; // the others reconnect and find the leader again
    status(api, Some(&operator)).await.expect("an operator in good standing carries on");

    // Nothing forged changed anything: every replica has the hash it had before.
    let (index_after, hash_after) = h.wait_converged(&h.all(), Duration::from_secs(30)).await;
    println!("after the matrix: index {index_after} hash {hash_after}");
    assert_eq!(hash_after, hash_before, "a refused call changed the state");

    // A key added to the nodes' file is taken once they re-read it (SIGHUP).
    bourse_gateway::keys::append(&keys_file, bob_entry.clone()).expect("add bob's key");
    h.reload_certificates();
    let mut config = bourse_gateway::GatewayConfig::new(3, "127.0.0.1:0".parse().expect("addr"), h.endpoints());
    config.tls = Some(h.client_tls("gateway:3"));
    let gateway = bourse_gateway::Gateway::start(config, gateway_keys()).await.expect("a gateway");
    let bob = gateway_command(gateway.addr(), &bob_key, 9, 1, &cancel).await.expect("bob after the reload");
    assert!(bob.log_index > 0 && !bob.duplicate, "{bob:?}");
    gateway.shutdown().await;
}

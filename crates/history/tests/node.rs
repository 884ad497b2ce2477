//! The sink against real nodes over loopback (`Log.Follow`): a single node whose sink is
//! stopped and started again mid-stream, then compared with a rebuild from the node's
//! journal and with the node's balances; and a 3-member cluster whose followed member
//! is shut down while the sink follows, compared with a rebuild from a member's files.

mod support;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bourse_client::{random_client_id, Client, ClientOptions, QueryClient};
use bourse_engine::command::{CommandBody, MatchPolicy, OrderKind, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Outcome, Px, Qty, Side, SymbolId};
use bourse_history::{Following, SinkConfig, Store};
use bourse_node::config::RaftConfig;
use bourse_node::{Node, NodeConfig};
use support::{dump, small_config, sqlite_url};

fn options() -> ClientOptions {
    ClientOptions {
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(200),
        unavailable_max: Duration::from_secs(30),
        ..ClientOptions::default()
    }
}

fn sink_config() -> SinkConfig {
    SinkConfig { snapshot_every_secs: 1, ..small_config() }
}

/// USD and ACME, ACME/USD, four accounts with money and shares.
async fn market(client: &Client) {
    let replies = client
        .submit_batch(vec![
            CommandBody::CreateAsset { name: "USD".into(), decimals: 2 },
            CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 },
        ])
        .await
        .unwrap();
    assert!(replies.iter().all(|r| r.ok_id().is_some()));
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: AssetId(1),
        quote: AssetId(0),
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(1),
        policy: MatchPolicy::Fifo,
    };
    assert!(client.submit(CommandBody::CreateSymbol(Box::new(spec))).await.unwrap().ok_id().is_some());
    let mut setup = Vec::new();
    for account in 0..4 {
        setup.push(CommandBody::CreateAccount);
        let account = AccountId(account);
        setup.push(CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(100_000_000) });
        setup.push(CommandBody::Credit { account, asset: AssetId(1), amount: Amount(100_000) });
    }
    // Accounts must exist before they are funded: one at a time.
    for body in setup {
        assert!(client.submit(body).await.unwrap().ok_id().is_some());
    }
}

/// `batches` batches of 20 seeded orders, cancels, moves, reduces and stops.
async fn flow(client: &Client, seed: u64, batches: usize) {
    let mut state = seed | 1;
    let mut rand = move |n: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % n
    };
    let mut resting: Vec<(OrderId, AccountId)> = Vec::new();
    for _ in 0..batches {
        let mut bodies = Vec::new();
        for _ in 0..20 {
            let account = AccountId(rand(4) as u32);
            let side = if rand(2) == 0 { Side::Buy } else { Side::Sell };
            let px = Px(95 + rand(11) as i64);
            let body = match rand(20) {
                0..=11 => CommandBody::Place(OrderRequest::limit(
                    account,
                    SymbolId(0),
                    side,
                    px,
                    Qty(1 + rand(20) as i64),
                    Tif::Gtc,
                )),
                12..=13 => CommandBody::Place(OrderRequest::limit(
                    account,
                    SymbolId(0),
                    side,
                    px,
                    Qty(1 + rand(30) as i64),
                    Tif::Ioc,
                )),
                14 if !resting.is_empty() => {
                    let (order, account) = resting.swap_remove(rand(resting.len() as u64) as usize);
                    CommandBody::Cancel { account, symbol: SymbolId(0), order }
                }
                15 if !resting.is_empty() => {
                    let (order, account) = resting[rand(resting.len() as u64) as usize];
                    CommandBody::Move { account, symbol: SymbolId(0), order, px }
                }
                16 if !resting.is_empty() => {
                    let (order, account) = resting[rand(resting.len() as u64) as usize];
                    CommandBody::Reduce { account, symbol: SymbolId(0), order, qty_by: Qty(1) }
                }
                _ => {
                    let trigger = Px(if side == Side::Buy { 101 } else { 99 });
                    let mut request = OrderRequest::limit(account, SymbolId(0), side, px, Qty(5), Tif::Gtc);
                    request.kind = OrderKind::StopLimit { trigger, px };
                    CommandBody::Place(request)
                }
            };
            bodies.push(body);
        }
        let accounts: Vec<Option<AccountId>> = bodies
            .iter()
            .map(|b| match b {
                CommandBody::Place(r) if r.tif == Tif::Gtc => Some(r.account),
                _ => None,
            })
            .collect();
        for (reply, account) in client.submit_batch(bodies).await.unwrap().iter().zip(accounts) {
            if let (Outcome::Ok { id }, Some(account)) = (reply.outcome, account) {
                resting.push((OrderId(id), account));
            }
        }
    }
}

async fn wait_written(following: &Following, index: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while following.status.written_index.load(Ordering::Acquire) < index {
        assert!(
            !following.status.failed.load(Ordering::Acquire),
            "the sink failed: {:?}",
            following.status.error.lock().unwrap()
        );
        assert!(
            Instant::now() < deadline,
            "the sink did not reach {index} (at {})",
            following.status.written_index.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn applied_index(node: &Node) -> u64 {
    node.metrics.applied_index.load(Ordering::Acquire)
}

/// The last balance movement of each (account, asset) equals the node's balance.
async fn check_balances(url: &str, endpoints: Vec<String>) {
    let url = url.to_string();
    let rows = tokio::task::spawn_blocking(move || {
        Store::open(&url)
            .unwrap()
            .query("SELECT account, asset, available, reserved FROM balance_movements ORDER BY log_index, pos", &[])
            .unwrap()
    })
    .await
    .unwrap();
    let mut last = BTreeMap::new();
    for r in rows {
        last.insert((r[0].int().unwrap(), r[1].int().unwrap()), (r[2].int().unwrap(), r[3].int().unwrap()));
    }
    let mut query = QueryClient::connect(endpoints, options()).await.unwrap();
    for account in 0..4u32 {
        let balances = query.balances(AccountId(account)).await.unwrap();
        for b in balances.balances {
            assert_eq!(
                last.get(&(i64::from(account), i64::from(b.asset))),
                Some(&(b.available, b.reserved)),
                "account {account} asset {}",
                b.asset
            );
        }
    }
}

async fn dump_async(url: &str) -> BTreeMap<&'static str, Vec<Vec<bourse_history::store::Value>>> {
    let url = url.to_string();
    tokio::task::spawn_blocking(move || dump(&url)).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_node_restart_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let config = NodeConfig {
        data: data.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        segment_bytes_max: 1 << 20,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.unwrap();
    let endpoints = vec![node.addr.to_string()];
    let live = sqlite_url(dir.path(), "live.sqlite");
    let following = Following::start(endpoints.clone(), &live, sink_config()).await.unwrap();
    let client = Client::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    market(&client).await;
    flow(&client, 7, 30).await;
    // Stop the sink mid-stream and start it again while orders keep coming.
    wait_written(&following, applied_index(&node).await / 2).await;
    following.stop().await.unwrap();
    flow(&client, 8, 30).await;
    // It resumes on the node's log in process (as `bourse serve` runs it), where the
    // first left off.
    let log = node.local_log();
    let local: bourse_history::LocalLog = std::sync::Arc::new(move |request| {
        let log = log.clone();
        Box::pin(async move { log.follow(request).await })
    });
    let following = Following::start_local(local, &live, sink_config()).await.unwrap();
    flow(&client, 9, 30).await;
    wait_written(&following, applied_index(&node).await).await;
    assert_eq!(following.status.lag_entries(), 0);
    following.stop().await.unwrap();
    check_balances(&live, endpoints).await;

    let rebuilt = sqlite_url(dir.path(), "rebuilt.sqlite");
    let journal = bourse_node::journal_dir(&data);
    let rebuilt_url = rebuilt.clone();
    let progress = tokio::task::spawn_blocking(move || {
        bourse_history::files::rebuild_from_journal(&journal, &rebuilt_url, Default::default(), small_config())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(progress.applied_index, applied_index(&node).await);
    assert_eq!(dump_async(&rebuilt).await, dump_async(&live).await);
    let live_dump = dump_async(&live).await;
    assert!(live_dump["executions"].len() > 50, "the flow traded");
    client.close().await.unwrap();
    node.shutdown().await.unwrap();
}

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], bourse_node::ports::free_local_port().unwrap()))
}

async fn start_member(data: &Path, id: u64, api: SocketAddr, raft: SocketAddr, bootstrap: &[String]) -> Node {
    let config = NodeConfig {
        data: data.to_path_buf(),
        listen: api,
        raft: Some(RaftConfig {
            id,
            listen: raft,
            bootstrap: bootstrap.to_vec(),
            snapshot_every_entries: 1 << 40,
            ..RaftConfig::default()
        }),
        ..NodeConfig::default()
    };
    Node::start(config).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_member_shut_down_while_following() {
    let dir = tempfile::tempdir().unwrap();
    let apis: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let rafts: Vec<SocketAddr> = (0..3).map(|_| free_addr()).collect();
    let bootstrap: Vec<String> = (0..3).map(|i| format!("{}={}/{}", i + 1, apis[i], rafts[i])).collect();
    let mut nodes = Vec::new();
    for i in 0..3 {
        nodes.push(Some(
            start_member(&dir.path().join(format!("n{i}")), i as u64 + 1, apis[i], rafts[i], &bootstrap).await,
        ));
    }
    let endpoints: Vec<String> = apis.iter().map(|a| a.to_string()).collect();
    let client = Client::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    market(&client).await;
    let live = sqlite_url(dir.path(), "live.sqlite");
    // The sink follows member 1 first (its first address).
    let following = Following::start(endpoints.clone(), &live, sink_config()).await.unwrap();
    flow(&client, 11, 20).await;
    let first = nodes[0].as_ref().unwrap();
    wait_written(&following, applied_index(first).await).await;
    nodes[0].take().unwrap().shutdown().await.unwrap();
    flow(&client, 12, 20).await;
    let survivor = nodes[1].as_ref().unwrap();
    // Wait until the survivor has applied everything, then until the sink has it.
    let target = {
        tokio::time::sleep(Duration::from_millis(200)).await;
        applied_index(survivor).await
    };
    wait_written(&following, target).await;
    assert!(following.status.reconnects.load(Ordering::Relaxed) >= 1, "the sink moved to another member");
    following.stop().await.unwrap();
    check_balances(&live, endpoints[1..].to_vec()).await;
    // A second sink from scratch on another member writes the same history.
    let again = sqlite_url(dir.path(), "again.sqlite");
    let second = Following::start(vec![endpoints[2].clone()], &again, sink_config()).await.unwrap();
    wait_written(&second, target).await;
    second.stop().await.unwrap();
    assert_eq!(dump_async(&again).await, dump_async(&live).await);
    assert!(dump_async(&live).await["executions"].len() > 30, "the flow traded");
    client.close().await.unwrap();
    for node in nodes.into_iter().flatten() {
        node.shutdown().await.unwrap();
    }
}

/// A node whose journal was pruned behind snapshots: a new history begins after a
/// snapshot and says where; a history whose next entry is gone stops with an error
/// that says so, never skipping it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pruned_log_new_history_begins_at_a_snapshot_and_a_gap_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("node");
    let config = NodeConfig {
        data: data.clone(),
        listen: "127.0.0.1:0".parse().unwrap(),
        segment_bytes_max: 4 << 10,
        snapshot_every_commands: 150,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.unwrap();
    let endpoints = vec![node.addr.to_string()];
    // An early history that never saves a snapshot of its own: when restarted after the
    // node pruned, it must resume from one of the node's.
    let early = sqlite_url(dir.path(), "early.sqlite");
    let no_snapshots = SinkConfig { snapshot_every_entries: u64::MAX, snapshot_every_secs: 3600, ..small_config() };
    let following = Following::start(endpoints.clone(), &early, no_snapshots.clone()).await.unwrap();
    let client = Client::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    market(&client).await;
    let journal = bourse_node::journal_dir(&data);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seed = 20;
    while bourse_journal::segments_list(&journal).unwrap().first().map_or(1, |s| s.0) <= 1 {
        assert!(Instant::now() < deadline, "the journal was never pruned");
        flow(&client, seed, 10).await;
        seed += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    wait_written(&following, applied_index(&node).await).await;
    following.stop().await.unwrap();
    let early_following = Following::start(endpoints.clone(), &early, no_snapshots).await.unwrap();

    let url = sqlite_url(dir.path(), "late.sqlite");
    let following = Following::start(endpoints.clone(), &url, sink_config()).await.unwrap();
    let begins_at = following.status.begins_at.load(Ordering::Relaxed);
    assert!(begins_at > 1, "the history says where it begins");
    flow(&client, 99, 5).await;
    wait_written(&following, applied_index(&node).await).await;
    following.stop().await.unwrap();
    let url_read = url.clone();
    let (progress, first_row) = tokio::task::spawn_blocking(move || {
        let mut store = Store::open(&url_read).unwrap();
        let progress = bourse_history::query::progress(&mut store).unwrap().unwrap();
        let first = store.query("SELECT MIN(log_index) FROM balance_movements", &[]).unwrap();
        (progress, first[0][0].int())
    })
    .await
    .unwrap();
    assert_eq!(progress.begins_at, begins_at);
    assert!(first_row.is_some_and(|first| first as u64 >= begins_at));
    // Restarted, it goes on from its own progress (the snapshot it saved).
    let following = Following::start(endpoints.clone(), &url, sink_config()).await.unwrap();
    flow(&client, 100, 3).await;
    wait_written(&following, applied_index(&node).await).await;
    following.stop().await.unwrap();
    // The early history, resumed from the node's snapshot, wrote the same rows as the
    // late one from where that begins.
    wait_written(&early_following, applied_index(&node).await).await;
    early_following.stop().await.unwrap();
    let (early_dump, late_dump) = (dump_async(&early).await, dump_async(&url).await);
    for (table, rows) in &late_dump {
        let early_rows: Vec<_> =
            early_dump[table].iter().filter(|r| r[0].int().unwrap() as u64 >= begins_at).cloned().collect();
        assert_eq!(&early_rows, rows, "{table}");
    }

    // A history that stopped at entry 3 cannot go on: entry 4 is gone.
    let behind = sqlite_url(dir.path(), "behind.sqlite");
    let behind_url = behind.clone();
    tokio::task::spawn_blocking(move || {
        let progress = bourse_history::Progress { applied_index: 3, applied_ts: 0, begins_at: 0 };
        Store::open(&behind_url).unwrap().write(&Default::default(), &progress, None).unwrap();
    })
    .await
    .unwrap();
    let error = Following::start(endpoints.clone(), &behind, sink_config()).await.err().expect("a gap is an error");
    assert!(error.to_string().contains("never skips a gap"), "{error}");
    client.close().await.unwrap();
    node.shutdown().await.unwrap();
}

//! The client against a real node (`bourse_node::Node`, in process, on 127.0.0.1 with a
//! temporary data directory): answers, fills, queries and market data; every command
//! applied exactly once while the node is restarted under the client on the same data
//! directory and port; a short load run.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use bourse_client::load::{run_load, LoadConfig};
use bourse_client::{random_client_id, AdminSession, Client, ClientOptions, QueryClient, Reply, SessionEvent};
use bourse_engine::command::{CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, OrderId, Outcome, Px, Qty, Side, SymbolId};
use bourse_node::{Node, NodeConfig};
use bourse_protocol::proto;

fn options() -> ClientOptions {
    ClientOptions {
        backoff_min: Duration::from_millis(10),
        backoff_max: Duration::from_millis(200),
        unavailable_max: Duration::from_secs(30),
        ..ClientOptions::default()
    }
}

/// Starts a node on `data`, listening on `listen`; a port just freed by a stopped node
/// may take a moment to be bindable again.
async fn start(data: &Path, listen: SocketAddr) -> Node {
    let config = NodeConfig { data: data.to_path_buf(), listen, metrics_listen: None, ..NodeConfig::default() };
    let mut tries = 0;
    loop {
        match Node::start(config.clone()).await {
            Ok(node) => return node,
            Err(error) if tries < 100 => {
                tries += 1;
                eprintln!("node start failed ({error}), retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("node does not start: {error}"),
        }
    }
}

fn ok_id(reply: &Reply) -> u64 {
    reply.ok_id().unwrap_or_else(|| panic!("rejected: {reply:?}"))
}

/// USD and ACME, ACME/USD, two accounts with 1,000,000 USD and 1,000 ACME each.
async fn market(client: &Client) -> (AssetId, AssetId, SymbolId, AccountId, AccountId) {
    let replies = client
        .submit_batch(vec![
            CommandBody::CreateAsset { name: "USD".into(), decimals: 2 },
            CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 },
        ])
        .await
        .unwrap();
    let (usd, acme) = (AssetId(ok_id(&replies[0]) as u32), AssetId(ok_id(&replies[1]) as u32));
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: acme,
        quote: usd,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(1),
        policy: MatchPolicy::Fifo,
    };
    let symbol = SymbolId(ok_id(&client.submit(CommandBody::CreateSymbol(Box::new(spec))).await.unwrap()) as u32);
    let replies = client.submit_batch(vec![CommandBody::CreateAccount, CommandBody::CreateAccount]).await.unwrap();
    let (a, b) = (AccountId(ok_id(&replies[0]) as u32), AccountId(ok_id(&replies[1]) as u32));
    let funding = [a, b]
        .into_iter()
        .flat_map(|account| {
            [
                CommandBody::Deposit { account, asset: usd, amount: Amount(1_000_000) },
                CommandBody::Credit { account, asset: acme, amount: Amount(1_000) },
            ]
        })
        .collect();
    for reply in client.submit_batch(funding).await.unwrap() {
        assert_eq!(reply.outcome, Outcome::Ok { id: 0 });
    }
    (usd, acme, symbol, a, b)
}

fn available(reply: &proto::GetBalancesReply, asset: AssetId) -> i64 {
    reply.balances.iter().find(|balance| balance.asset == asset.0).map_or(0, |balance| balance.available)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_fills_queries_and_market_data() {
    let data = tempfile::tempdir().unwrap();
    let node = start(data.path(), "127.0.0.1:0".parse().unwrap()).await;
    let endpoints = vec![node.addr.to_string()];
    let client = Client::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    let mut events = client.events().unwrap();
    let (usd, acme, symbol, seller, buyer) = market(&client).await;
    let mut query = QueryClient::connect(endpoints.clone(), options()).await.unwrap();
    let mut market_data = query.subscribe(&[symbol]).await.unwrap();

    let sell = OrderRequest::limit(seller, symbol, Side::Sell, Px(500), Qty(10), Tif::Gtc);
    let sell_id = ok_id(&client.submit(CommandBody::Place(sell)).await.unwrap());
    let depth = query.depth(symbol, 0).await.unwrap();
    assert_eq!(depth.asks.iter().map(|level| (level.px, level.qty)).collect::<Vec<_>>(), [(500, 10)]);
    let buy = OrderRequest::limit(buyer, symbol, Side::Buy, Px(500), Qty(4), Tif::Ioc);
    let buy_reply = client.submit(CommandBody::Place(buy)).await.unwrap();
    let buy_id = ok_id(&buy_reply);

    let mut fills = Vec::new();
    while fills.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("fills in time") {
            Some(SessionEvent::Fill(fill)) => fills.push(fill),
            other => panic!("expected a fill, got {other:?}"),
        }
    }
    fills.sort_by_key(|fill| fill.order);
    assert_eq!((fills[0].order, fills[0].qty, fills[0].px, fills[0].maker), (sell_id, 4, 500, true));
    assert_eq!((fills[1].order, fills[1].counter_order, fills[1].fee), (buy_id, sell_id, 4));
    assert_eq!(fills[0].log_index, buy_reply.log_index, "the fill happened at the buy's log entry");

    let balances = query.balances(buyer).await.unwrap();
    assert_eq!(available(&balances, acme), 1_004);
    assert_eq!(available(&balances, usd), 1_000_000 - 4 * 500 - 4);
    assert!(balances.log_index >= buy_reply.log_index);
    let order = query.order(OrderId(sell_id)).await.unwrap().order.unwrap();
    assert_eq!((order.qty_filled, order.qty_open), (4, 6));
    let open = query.open_orders(seller).await.unwrap();
    assert_eq!(open.orders.iter().map(|order| order.id).collect::<Vec<_>>(), [sell_id]);
    assert_eq!(query.symbol_by_name("ACME/USD").await.unwrap().map(|symbol| symbol.id), Some(symbol.0));
    assert_eq!(query.asset_by_name("ACME").await.unwrap().map(|asset| asset.id), Some(acme.0));
    assert!(matches!(query.order(OrderId(999_999)).await, Err(bourse_client::Error::NotFound(_))));

    let trade = loop {
        let update = tokio::time::timeout(Duration::from_secs(10), market_data.next_update())
            .await
            .expect("market data in time")
            .unwrap()
            .expect("the feed goes on");
        if let Some(proto::market_data_update::Update::Trade(trade)) = update.update {
            break trade;
        }
    };
    assert_eq!((trade.symbol, trade.px, trade.qty), (symbol.0, 500, 4));

    let cancel = CommandBody::Cancel { account: seller, symbol, order: OrderId(sell_id) };
    assert!(client.submit(cancel).await.unwrap().ok_id().is_some());
    match tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("cancel in time") {
        Some(SessionEvent::Cancel(report)) => assert_eq!((report.order, report.qty_cancelled), (sell_id, 6)),
        other => panic!("expected a cancel report, got {other:?}"),
    }

    let mut admin = AdminSession::connect(endpoints, random_client_id(), options()).await.unwrap();
    let deposit = CommandBody::Deposit { account: seller, asset: usd, amount: Amount(5) };
    let reply = admin.submit(deposit).await.unwrap();
    assert_eq!((reply.seq, reply.outcome, reply.duplicate), (1, Outcome::Ok { id: 0 }, false));
    let unknown = admin.submit(CommandBody::SuspendAccount { account: AccountId(77) }).await.unwrap();
    assert_eq!(unknown.outcome, Outcome::Rejected(bourse_engine::Reject::AccountUnknown));

    client.close().await.unwrap();
    node.shutdown().await.unwrap();
}

/// Sends `total` deposits of 1 fire-and-forget while the node is stopped and started
/// again twice on the same data directory and port; every deposit lands exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_applies_exactly_once_across_node_restarts() {
    let data = tempfile::tempdir().unwrap();
    let mut node = Some(start(data.path(), "127.0.0.1:0".parse().unwrap()).await);
    let address = node.as_ref().unwrap().addr;
    let endpoints = vec![address.to_string()];
    let client = Client::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    let mut events = client.events().unwrap();
    let (usd, _, _, account, _) = market(&client).await;
    let seq_first = client.submit(CommandBody::CreateAccount).await.unwrap().seq + 1;

    let total: u64 = 3_000;
    let sender = {
        let client = client.clone();
        tokio::spawn(async move {
            let deposit = CommandBody::Deposit { account, asset: usd, amount: Amount(1) };
            for _ in 0..total {
                client.send(&deposit).await.expect("the client keeps going");
            }
        })
    };
    let mut seqs = Vec::new();
    let mut duplicates = 0;
    let mut restarts = 0;
    while (seqs.len() as u64) < total {
        let event = tokio::time::timeout(Duration::from_secs(60), events.recv()).await.expect("answers in time");
        match event {
            Some(SessionEvent::Reply(reply)) => {
                assert_eq!(reply.outcome, Outcome::Ok { id: 0 }, "{reply:?}");
                duplicates += u64::from(reply.duplicate);
                seqs.push(reply.seq);
            }
            other => panic!("unexpected {other:?}"),
        }
        if restarts < 2 && seqs.len() as u64 == total / 3 * (restarts + 1) {
            node.take().unwrap().shutdown().await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            let restarted = start(data.path(), address).await;
            assert!(restarted.recovered.index > 0, "recovered from the journal");
            node = Some(restarted);
            restarts += 1;
        }
    }
    sender.await.unwrap();
    client.flush().await.unwrap();
    seqs.sort_unstable();
    assert_eq!(seqs, (seq_first..seq_first + total).collect::<Vec<_>>(), "one answer per command");

    let mut query = QueryClient::connect(endpoints, options()).await.unwrap();
    let balances = query.balances(account).await.unwrap();
    assert_eq!(available(&balances, usd), 1_000_000 + total as i64, "every deposit applied exactly once");
    let stats = client.stats();
    assert!(stats.reconnects >= 2, "{stats:?}");
    eprintln!("restarts {restarts}, duplicates {duplicates}, {stats:?}");
    node.take().unwrap().shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_load_run_is_answered_in_full() {
    let data = tempfile::tempdir().unwrap();
    let node = start(data.path(), "127.0.0.1:0".parse().unwrap()).await;
    let config = LoadConfig {
        endpoints: vec![node.addr.to_string()],
        connections: 2,
        seconds: 1.0,
        rate: Some(2_000.0),
        seed: 11,
        accounts_per_connection: 10,
        open_orders_per_connection: 100,
        client: options(),
        progress: false,
        ..LoadConfig::default()
    };
    let report = run_load(config.clone()).await.unwrap();
    eprintln!("open loop: {report}");
    assert_eq!(report.errors, 0, "{report}");
    assert!((1_000..=2_000).contains(&report.acked), "{report}");
    assert!(report.rejected < report.acked / 2, "{report}");
    let flat_out = run_load(LoadConfig { seconds: 0.5, rate: None, ..config }).await.unwrap();
    eprintln!("flat out: {flat_out}");
    assert!(flat_out.acked > 0 && flat_out.errors == 0, "{flat_out}");
    node.shutdown().await.unwrap();
}

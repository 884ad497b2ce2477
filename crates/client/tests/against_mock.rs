//! The client against a node in miniature (`mock`: the real engine behind the generated
//! services, with faults on demand): answers and fills, exactly once across broken
//! streams, refusals before the log, failover, backpressure, giving up, the admin and
//! query helpers and a short load run.

mod mock;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bourse_client::load::{run_load, LoadConfig};
use bourse_client::{random_client_id, AdminSession, Client, ClientOptions, Error, QueryClient, Reply, SessionEvent};
use bourse_engine::command::{CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, Outcome, Px, Qty, Side, SymbolId};
use mock::MockNode;

fn options() -> ClientOptions {
    ClientOptions {
        backoff_min: Duration::from_millis(5),
        backoff_max: Duration::from_millis(100),
        unavailable_max: Duration::from_secs(10),
        request_timeout: Duration::from_secs(5),
        ..ClientOptions::default()
    }
}

fn ok_id(reply: &Reply) -> u64 {
    reply.ok_id().unwrap_or_else(|| panic!("rejected: {reply:?}"))
}

async fn node() -> (MockNode, Vec<String>) {
    let node = MockNode::new();
    let address = node.serve().await;
    (node, vec![address.to_string()])
}

/// USD (0), ACME (1), ACME/USD (0), two funded accounts.
async fn market(client: &Client) -> (SymbolId, AccountId, AccountId) {
    let usd = ok_id(&client.submit(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await.unwrap());
    let acme = ok_id(&client.submit(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }).await.unwrap());
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: AssetId(acme as u32),
        quote: AssetId(usd as u32),
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    };
    let symbol = SymbolId(ok_id(&client.submit(CommandBody::CreateSymbol(Box::new(spec))).await.unwrap()) as u32);
    let replies = client.submit_batch(vec![CommandBody::CreateAccount, CommandBody::CreateAccount]).await.unwrap();
    let (a, b) = (AccountId(ok_id(&replies[0]) as u32), AccountId(ok_id(&replies[1]) as u32));
    let funding = [a, b]
        .into_iter()
        .flat_map(|account| {
            [
                CommandBody::Deposit { account, asset: AssetId(usd as u32), amount: Amount(1_000_000) },
                CommandBody::Credit { account, asset: AssetId(acme as u32), amount: Amount(1_000) },
            ]
        })
        .collect();
    for reply in client.submit_batch(funding).await.unwrap() {
        assert_eq!(reply.outcome, Outcome::Ok { id: 0 });
    }
    (symbol, a, b)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_carry_ids_and_fills_reach_the_owner() {
    let (node, endpoints) = node().await;
    let client = Client::connect(endpoints, random_client_id(), options()).await.unwrap();
    let mut events = client.events().expect("first take");
    assert!(client.events().is_none(), "the event stream is taken once");
    let (symbol, seller, buyer) = market(&client).await;

    let sell = OrderRequest::limit(seller, symbol, Side::Sell, Px(100), Qty(10), Tif::Gtc);
    let sell_id = ok_id(&client.submit(CommandBody::Place(sell)).await.unwrap());
    let buy = OrderRequest::limit(buyer, symbol, Side::Buy, Px(100), Qty(4), Tif::Gtc);
    let reply = client.submit(CommandBody::Place(buy)).await.unwrap();
    let buy_id = ok_id(&reply);
    assert!(!reply.duplicate && reply.log_index > 0);

    let mut fills = Vec::new();
    while fills.len() < 2 {
        match tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("fills in time") {
            Some(SessionEvent::Fill(fill)) => fills.push(fill),
            other => panic!("expected a fill, got {other:?}"),
        }
    }
    fills.sort_by_key(|fill| fill.order);
    assert_eq!((fills[0].order, fills[0].qty, fills[0].px, fills[0].maker), (sell_id, 4, 100, true));
    assert_eq!((fills[1].order, fills[1].qty, fills[1].counter_order, fills[1].maker), (buy_id, 4, sell_id, false));

    let cancel = CommandBody::Cancel { account: seller, symbol, order: bourse_engine::OrderId(sell_id) };
    assert!(client.submit(cancel).await.unwrap().ok_id().is_some());
    match tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("cancel in time") {
        Some(SessionEvent::Cancel(report)) => assert_eq!((report.order, report.qty_cancelled), (sell_id, 6)),
        other => panic!("expected a cancel report, got {other:?}"),
    }
    assert_eq!(node.balance(buyer.0, 1), 1_004);
    client.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_applies_exactly_once_across_broken_streams() {
    let (node, endpoints) = node().await;
    let client_id = random_client_id();
    let client = Client::connect(endpoints, client_id, ClientOptions { batch_len_max: 7, ..options() }).await.unwrap();
    let mut events = client.events().unwrap();
    let (_, account, _) = market(&client).await;
    let setup_commands = client.stats().inflight as u64; // 0: everything answered
    assert_eq!(setup_commands, 0);
    let seq_setup = node.state.lock().unwrap().applied.len() as u64;

    node.faults.break_every.store(37, Ordering::Relaxed);
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1) };
    let mut replies: Vec<Reply> = Vec::new();
    // Half pipelined through submit_batch, half fire-and-forget through the events.
    let mut sent = Vec::new();
    for round in 0..10 {
        replies.extend(client.submit_batch(vec![deposit.clone(); 40]).await.unwrap());
        for _ in 0..40 {
            sent.push(client.send(&deposit).await.unwrap());
        }
        assert!(round < 10);
    }
    while replies.len() < 800 {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await.expect("answers in time") {
            Some(SessionEvent::Reply(reply)) => replies.push(reply),
            Some(SessionEvent::Failed { seq, error }) => panic!("seq {seq} failed: {error}"),
            other => panic!("unexpected {other:?}"),
        }
    }
    client.flush().await.unwrap();
    node.faults.break_every.store(0, Ordering::Relaxed);

    let mut seqs: Vec<u64> = replies.iter().map(|reply| reply.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (seq_setup + 1..=seq_setup + 800).collect::<Vec<_>>(), "one answer per command");
    assert!(replies.iter().all(|reply| reply.outcome == Outcome::Ok { id: 0 }));
    let applied: Vec<u64> =
        node.state.lock().unwrap().applied.iter().filter(|(c, _)| *c == client_id.0).map(|(_, seq)| *seq).collect();
    assert_eq!(applied, (1..=seq_setup + 800).collect::<Vec<_>>(), "applied exactly once, in order");
    assert_eq!(node.balance(account.0, 0), 1_000_000 + 800);

    let breaks = node.faults.breaks.load(Ordering::Relaxed);
    assert!(breaks >= 20, "{breaks} breaks");
    assert!(client.stats().reconnects >= breaks, "{:?}", client.stats());
    assert!(replies.iter().any(|reply| reply.duplicate), "answers lost in a break come back as duplicates");
    assert!(node.state.lock().unwrap().batch_len_seen_max <= 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_lost_on_a_live_stream_are_resent_after_a_gap_or_a_silence() {
    let (node, endpoints) = node().await;
    let quick = ClientOptions { request_timeout: Duration::from_millis(300), batch_len_max: 5, ..options() };
    let client = Client::connect(endpoints, random_client_id(), quick).await.unwrap();
    let (_, account, _) = market(&client).await;
    node.faults.lose_every.store(23, Ordering::Relaxed);
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1) };
    for reply in client.submit_batch(vec![deposit.clone(); 300]).await.unwrap() {
        assert_eq!(reply.outcome, Outcome::Ok { id: 0 });
    }
    // One command at a time: a lost one has nothing behind it to draw a gap, and only
    // the silence on the stream brings it back (losses are at most 30 apart, so 30 in a
    // row include one).
    for _ in 0..30 {
        assert_eq!(client.submit(deposit.clone()).await.unwrap().outcome, Outcome::Ok { id: 0 });
    }
    node.faults.lose_every.store(0, Ordering::Relaxed);
    assert!(node.faults.lost.load(Ordering::Relaxed) >= 10);
    assert_eq!(node.balance(account.0, 0), 1_000_000 + 330, "every deposit applied exactly once");
    let stats = client.stats();
    assert!(stats.rewinds >= 5, "gaps made the client resend: {stats:?}");
    assert!(stats.reconnects >= 1, "a silent stream was given up: {stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_is_reported_and_the_commands_behind_it_still_apply() {
    let (node, endpoints) = node().await;
    let client = Client::connect(endpoints, random_client_id(), options()).await.unwrap();
    let (_, account, _) = market(&client).await;
    node.faults.refuse_amount.store(13, Ordering::Relaxed);
    let withdraw = |amount| CommandBody::Withdraw { account, asset: AssetId(0), amount: Amount(amount) };
    let mut receivers = Vec::new();
    for amount in [1, 2, 13, 4, 5] {
        receivers.push(client.reserve().await.unwrap().submit(&withdraw(amount)).unwrap());
    }
    let mut results = Vec::new();
    for receiver in receivers {
        results.push(receiver.await.unwrap());
    }
    assert!(matches!(results[2], Err(Error::Refused { code: 1000, .. })), "{:?}", results[2]);
    for index in [0, 1, 3, 4] {
        assert_eq!(results[index].as_ref().unwrap().outcome, Outcome::Ok { id: 0 }, "{index}");
    }
    assert_eq!(node.balance(account.0, 0), 1_000_000 - 12);
    // The hole was filled with a command the engine rejected; later commands go on.
    assert_eq!(client.submit(withdraw(1)).await.unwrap().outcome, Outcome::Ok { id: 0 });
    assert!(client.stats().rewinds >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_endpoint_is_tried_when_the_first_is_down() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_address = dead.local_addr().unwrap().to_string();
    drop(dead);
    let (_node, live) = node().await;
    let endpoints = vec![dead_address, live[0].clone()];
    let client = Client::connect(endpoints, random_client_id(), options()).await.unwrap();
    assert_eq!(client.submit(CommandBody::CreateAccount).await.unwrap().outcome, Outcome::Ok { id: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_window_makes_senders_wait() {
    let (node, endpoints) = node().await;
    let client =
        Client::connect(endpoints, random_client_id(), ClientOptions { inflight_max: 3, ..options() }).await.unwrap();
    let mut events = client.events().unwrap();
    node.pause(true);
    // A slot reserved and not used goes back to the window.
    drop(client.try_reserve().expect("an empty window has a free slot"));
    for _ in 0..3 {
        client.send(&CommandBody::CreateAccount).await.unwrap();
    }
    assert_eq!(client.stats().inflight, 3);
    assert!(client.try_reserve().is_none(), "a full window has no slot to take now");
    let fourth = tokio::time::timeout(Duration::from_millis(200), client.reserve()).await;
    assert!(fourth.is_err(), "a fourth command must wait for a slot");
    node.pause(false);
    let seq = client.send(&CommandBody::CreateAccount).await.unwrap();
    assert_eq!(seq, 4);
    let mut answered = 0;
    while answered < 4 {
        if let Some(SessionEvent::Reply(_)) = events.recv().await {
            answered += 1;
        }
    }
    client.flush().await.unwrap();
    assert_eq!(client.stats().inflight, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_commands_fail_when_no_node_comes_back() {
    let (node, endpoints) = node().await;
    let quick = ClientOptions { unavailable_max: Duration::from_millis(500), ..options() };
    let client = Client::connect(endpoints, random_client_id(), quick).await.unwrap();
    assert!(client.submit(CommandBody::CreateAccount).await.is_ok());
    node.pause(true);
    let waiting = {
        let client = client.clone();
        tokio::spawn(async move { client.submit(CommandBody::CreateAccount).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    node.faults.down.store(true, Ordering::Relaxed);
    node.pause(false);
    let result = tokio::time::timeout(Duration::from_secs(10), waiting).await.expect("gave up in time").unwrap();
    assert!(matches!(result, Err(Error::Unavailable { .. })), "{result:?}");
    let after = client.submit(CommandBody::CreateAccount).await;
    assert!(matches!(after, Err(Error::Unavailable { .. })), "the client stays closed: {after:?}");
    assert!(matches!(client.flush().await, Err(Error::Unavailable { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_session_and_queries() {
    let (node, endpoints) = node().await;
    let mut admin = AdminSession::connect(endpoints.clone(), random_client_id(), options()).await.unwrap();
    let usd = admin.submit(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await.unwrap();
    assert_eq!((usd.seq, usd.outcome), (1, Outcome::Ok { id: 0 }));
    let account = admin.submit(CommandBody::CreateAccount).await.unwrap();
    admin.submit(CommandBody::Deposit { account: AccountId(0), asset: AssetId(0), amount: Amount(250) }).await.unwrap();
    node.faults.refuse_amount.store(7, Ordering::Relaxed);
    let refused = admin.submit(CommandBody::Withdraw { account: AccountId(0), asset: AssetId(0), amount: Amount(7) });
    assert!(matches!(refused.await, Err(Error::Refused { seq: 4, .. })));
    let after = admin
        .submit(CommandBody::Withdraw { account: AccountId(0), asset: AssetId(0), amount: Amount(50) })
        .await
        .unwrap();
    assert_eq!((after.seq, after.outcome), (5, Outcome::Ok { id: 0 }), "seq 4 was filled, 5 follows");
    let taken = admin.submit(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await.unwrap();
    assert_eq!(taken.outcome, Outcome::Rejected(bourse_engine::Reject::NameTaken));
    assert_eq!(account.outcome, Outcome::Ok { id: 0 });

    let mut query = QueryClient::connect(endpoints, options()).await.unwrap();
    let balances = query.balances(AccountId(0)).await.unwrap();
    assert_eq!(balances.balances.len(), 1);
    assert_eq!(balances.balances[0].available, 200);
    assert_eq!(query.asset_by_name("USD").await.unwrap().map(|asset| asset.id), Some(0));
    assert_eq!(query.asset_by_name("EUR").await.unwrap(), None);
    assert!(matches!(query.balances(AccountId(9)).await, Err(Error::NotFound(_))));
    assert!(matches!(query.order(bourse_engine::OrderId(1)).await, Err(Error::NotFound(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_open_loop_load_run_is_answered_in_full() {
    let (node, endpoints) = node().await;
    let config = LoadConfig {
        endpoints,
        connections: 2,
        seconds: 1.0,
        rate: Some(2_000.0),
        seed: 7,
        accounts_per_connection: 5,
        open_orders_per_connection: 50,
        client: options(),
        progress: false,
        ..LoadConfig::default()
    };
    let report = run_load(config.clone()).await.unwrap();
    eprintln!("{report}");
    assert_eq!(report.errors, 0, "{report}");
    // 2,000 scheduled; a slow machine falls behind the schedule and sends fewer.
    assert!((1_000..=2_000).contains(&report.acked), "{report}");
    assert!(report.latency_us.p50 > 0 && report.latency_us.max >= report.latency_us.p99, "{report}");
    assert!(report.rejected < report.acked / 2, "the flow should mostly be accepted: {report}");
    // A second run finds the assets and the symbol by name and makes new accounts.
    let assets_before = node.state.lock().unwrap().engine.assets_len();
    let again = run_load(LoadConfig { seconds: 0.3, rate: None, ..config }).await.unwrap();
    assert_eq!(node.state.lock().unwrap().engine.assets_len(), assets_before);
    assert!(again.acked > 0 && again.errors == 0, "{again}");
}

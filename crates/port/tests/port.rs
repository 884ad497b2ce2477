//! The front-end port against a real node and gateway, in process and over gRPC: the
//! same keys, checks, refusals, events and answers either way.

use std::time::Duration;

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, ApiKey, Client, ClientOptions, Error};
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, CancelReason, Outcome, Px, Qty, Side, SymbolId};
use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig};
use bourse_port::{KeySession, OrderEvent, Port, Refusal, Upstream};

fn limit(account: AccountId, symbol: SymbolId, side: Side, px: i64) -> CommandBody {
    CommandBody::Place(OrderRequest::limit(account, symbol, side, Px(px), Qty(1), Tif::Gtc))
}

/// The next order event within a few seconds.
async fn next(events: &mut tokio::sync::broadcast::Receiver<OrderEvent>) -> OrderEvent {
    tokio::time::timeout(Duration::from_secs(5), events.recv()).await.expect("an order event").unwrap()
}

/// A node with the load driver's market and `count` funded accounts.
async fn node_with_accounts(dir: &std::path::Path, count: u32) -> (Node, SymbolId, Vec<AccountId>, SymbolSetup) {
    let config = NodeConfig {
        data: dir.to_path_buf(),
        listen: "127.0.0.1:0".parse().unwrap(),
        sequencer_window_us: 0,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.unwrap();
    let endpoints = vec![node.addr.to_string()];
    let setup = SymbolSetup::default();
    let (market, assets) = setup_market(&endpoints, &setup, &ClientOptions::default()).await.unwrap();
    let admin = Client::connect(endpoints, random_client_id(), ClientOptions::default()).await.unwrap();
    let accounts = funded_accounts(&admin, count, assets, &setup).await.unwrap();
    admin.close().await.unwrap();
    (node, market.symbol, accounts, setup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_and_over_grpc_the_port_gives_the_same_answers() {
    let dir = tempfile::tempdir().unwrap();
    let (node, symbol_id, accounts, setup) = node_with_accounts(dir.path(), 2).await;
    let (alice, bob) = (generate_key(), generate_key());
    let keys = KeyStore::from_entries(vec![
        entry_for(&alice, "alice", vec![accounts[0].0], false),
        entry_for(&bob, "bob", vec![accounts[1].0], false),
    ])
    .unwrap();
    let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
    config.hold_us = 0;
    let gateway = Gateway::start(config, keys).await.unwrap();
    let px = setup.px_mid;

    let upstreams = [Upstream::InProcess(gateway.local()), Upstream::Remote(vec![gateway.addr().to_string()])];
    for upstream in upstreams {
        let how = upstream.describe().join(",");
        let port = Port::new(upstream.clone());

        // The catalog: a symbol by name, then by id without asking again.
        let mut query = port.query(Some(ApiKey(alice.clone()))).await.unwrap();
        let symbol = port.catalog().symbol(&query, &setup.symbol).await.unwrap().expect("the symbol");
        assert_eq!(symbol.id, symbol_id.0, "{how}");
        assert_eq!(port.catalog().find_symbol(&symbol.id.to_string()).map(|s| s.id), Some(symbol.id));
        assert!(port.catalog().symbol(&query, "NOPE/USD").await.unwrap().is_none());

        // Order entry: alice's sell rests, bob's buy takes it; both hear typed fills.
        let alice_session = KeySession::new(upstream.clone(), Some(ApiKey(alice.clone())));
        let bob_session = KeySession::new(upstream.clone(), Some(ApiKey(bob.clone())));
        alice_session.client().await.unwrap();
        bob_session.client().await.unwrap();
        let (mut alice_events, mut bob_events) = (alice_session.subscribe(), bob_session.subscribe());
        let sell = alice_session.submit(limit(accounts[0], symbol_id, Side::Sell, px)).await.unwrap();
        let Outcome::Ok { id: sell_id } = sell.outcome else { panic!("{how}: {:?}", sell.outcome) };
        let buy = bob_session.submit(limit(accounts[1], symbol_id, Side::Buy, px)).await.unwrap();
        assert!(matches!(buy.outcome, Outcome::Ok { .. }), "{how}: {:?}", buy.outcome);
        port.acked(buy.log_index);
        match next(&mut alice_events).await {
            OrderEvent::Fill { order, side, maker, qty, .. } => {
                assert_eq!((order, side, maker, qty), (sell_id, Side::Sell, true, 1), "{how}")
            }
            other => panic!("{how}: {other:?}"),
        }
        assert!(matches!(next(&mut bob_events).await, OrderEvent::Fill { side: Side::Buy, maker: false, .. }));
        // A cancellation is typed too.
        let rest = alice_session.submit(limit(accounts[0], symbol_id, Side::Sell, px + 10)).await.unwrap();
        let Outcome::Ok { id: rest_id } = rest.outcome else { panic!("{how}") };
        let cancel =
            CommandBody::Cancel { account: accounts[0], symbol: symbol_id, order: bourse_engine::OrderId(rest_id) };
        alice_session.submit(cancel).await.unwrap();
        match next(&mut alice_events).await {
            OrderEvent::Cancelled { order, reason, .. } => {
                assert_eq!((order, reason), (rest_id, CancelReason::Requested), "{how}")
            }
            other => panic!("{how}: {other:?}"),
        }

        // Read-your-writes: the balances are read at or after the acknowledged buy.
        let bob_queries = port.query_pool(Some(ApiKey(bob.clone())));
        let balances = port
            .query_after(
                &bob_queries,
                |r: &bourse_protocol::proto::GetBalancesReply| r.log_index,
                |q| Box::pin(q.balances(accounts[1])),
            )
            .await
            .unwrap();
        assert!(balances.log_index >= port.acked_index(), "{how}");

        // The gateway's refusals, the same in process: another key's account, before
        // the log (1004), and another key's balances (permission denied).
        match alice_session.submit(limit(accounts[1], symbol_id, Side::Buy, px)).await {
            Err(Error::Refused { code, .. }) => assert_eq!(Refusal::from_code(code), Some(Refusal::NotAuthorized)),
            other => panic!("{how}: {other:?}"),
        }
        match query.balances(accounts[1]).await {
            Err(Error::Status { code, .. }) => assert_eq!(code, tonic::Code::PermissionDenied, "{how}"),
            other => panic!("{how}: {other:?}"),
        }
        // Another key's order reads exactly as a missing one: nothing says it exists.
        let mut bob_reads = port.query(Some(ApiKey(bob.clone()))).await.unwrap();
        let foreign = bob_reads.order(bourse_engine::OrderId(sell_id)).await.unwrap_err();
        assert_eq!(foreign, Error::NotFound(format!("order {sell_id}")), "{how}");
        let missing = bob_reads.order(bourse_engine::OrderId(u64::MAX)).await.unwrap_err();
        assert_eq!(missing, Error::NotFound(format!("order {}", u64::MAX)), "{how}");
        // Market data needs a key too: none is refused; alice's subscription is served.
        let mut anonymous = port.query(None).await.unwrap();
        match anonymous.subscribe_channels(&[symbol_id], &[]).await {
            Err(Error::Status { code, .. }) => assert_eq!(code, tonic::Code::Unauthenticated, "{how}"),
            Err(other) => panic!("{how}: {other:?}"),
            Ok(_) => panic!("{how}: an anonymous subscription was served"),
        }
        assert!(matches!(
            anonymous.l2(symbol_id, 5).await,
            Err(Error::Status { code: tonic::Code::Unauthenticated, .. })
        ));
        assert!(query.subscribe_channels(&[symbol_id], &[]).await.is_ok(), "{how}");
        // An unknown key is refused at once: no query, no session, no endless retry.
        let stranger = Some(ApiKey("not-a-key".into()));
        let mut strange = port.query(stranger.clone()).await.unwrap();
        match strange.assets().await {
            Err(Error::Status { code, .. }) => assert_eq!(code, tonic::Code::Unauthenticated, "{how}"),
            other => panic!("{how}: {other:?}"),
        }
        let strange_session = KeySession::new(upstream.clone(), stranger);
        let tried = tokio::time::timeout(Duration::from_secs(10), strange_session.client()).await;
        assert!(matches!(tried, Ok(Err(_))), "{how}: an unknown key's session must fail, and fast");
    }
    gateway.shutdown().await;
}

/// Refusals for the session's limits are transient: `submit` reports them with their
/// code, `submit_patiently` sends again until the gateway takes the command. The rate
/// is the key's, shared by all its sessions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_refusals_are_retried_only_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let (node, symbol, accounts, setup) = node_with_accounts(dir.path(), 1).await;
    let key = generate_key();
    let keys = KeyStore::from_entries(vec![entry_for(&key, "slow", vec![accounts[0].0], false)]).unwrap();
    let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
    config.hold_us = 0;
    config.rate_per_sec = 20;
    config.burst = 1;
    let gateway = Gateway::start(config, keys).await.unwrap();
    let session = KeySession::new(Upstream::InProcess(gateway.local()), Some(ApiKey(key)));
    let order = limit(accounts[0], symbol, Side::Buy, setup.px_mid - 100);
    assert!(session.submit(order.clone()).await.is_ok(), "the burst allows one");
    match session.submit(order.clone()).await {
        Err(Error::Refused { code, .. }) => assert_eq!(Refusal::from_code(code), Some(Refusal::RateLimited)),
        other => panic!("{other:?}"),
    }
    // The rate is the key's, not a session's: another session of the key is refused too.
    let other = KeySession::new(Upstream::InProcess(gateway.local()), session.key().cloned());
    match other.submit(order.clone()).await {
        Err(Error::Refused { code, .. }) => assert_eq!(Refusal::from_code(code), Some(Refusal::RateLimited)),
        other => panic!("a second session of the key: {other:?}"),
    }
    let reply = session.submit_patiently(order, Duration::from_secs(5)).await.unwrap();
    assert!(matches!(reply.outcome, Outcome::Ok { .. }), "{:?}", reply.outcome);
    gateway.shutdown().await;
}

/// A key holds at most `sessions_per_key_max` order-entry sessions and
/// `subscriptions_per_key_max` market data subscriptions at once; more are refused with
/// the limit named, and a slot given back is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_holds_its_most_sessions_and_subscriptions() {
    let dir = tempfile::tempdir().unwrap();
    let (node, symbol, accounts, _) = node_with_accounts(dir.path(), 1).await;
    let key = generate_key();
    let keys = KeyStore::from_entries(vec![entry_for(&key, "greedy", vec![accounts[0].0], false)]).unwrap();
    let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
    config.hold_us = 0;
    config.sessions_per_key_max = 2;
    config.subscriptions_per_key_max = 2;
    let gateway = Gateway::start(config, keys).await.unwrap();
    let local = gateway.local();
    let options = ClientOptions {
        api_key: Some(ApiKey(key.clone())),
        unavailable_max: Duration::from_millis(300),
        ..ClientOptions::default()
    };

    let first = Client::connect_local(local.clone(), random_client_id(), options.clone()).await.unwrap();
    let _second = Client::connect_local(local.clone(), random_client_id(), options.clone()).await.unwrap();
    match Client::connect_local(local.clone(), random_client_id(), options.clone()).await {
        Err(Error::Unavailable { last, .. }) => assert!(last.contains("holds 2 sessions already"), "{last}"),
        other => panic!("a third session: {:?}", other.map(|c| c.client_id())),
    }
    first.close().await.unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let third = loop {
        match Client::connect_local(local.clone(), random_client_id(), options.clone()).await {
            Ok(client) => break client,
            Err(error) => assert!(tokio::time::Instant::now() < deadline, "no slot freed: {error}"),
        }
    };
    drop(third);

    let mut query = bourse_client::QueryClient::connect_local(local.clone(), options.clone()).unwrap();
    let one = query.subscribe_channels(&[symbol], &[]).await.unwrap();
    let _two = query.subscribe_channels(&[symbol], &[]).await.unwrap();
    match query.subscribe_channels(&[symbol], &[]).await {
        Err(Error::Status { code, message }) => {
            assert_eq!(code, tonic::Code::ResourceExhausted);
            assert!(message.contains("holds 2 subscriptions already"), "{message}");
        }
        Err(other) => panic!("{other:?}"),
        Ok(_) => panic!("a third subscription was served"),
    }
    // A subscription dropped frees its slot once the gateway notices (a heartbeat at most).
    drop(one);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while query.subscribe_channels(&[symbol], &[]).await.is_err() {
        assert!(tokio::time::Instant::now() < deadline, "the dropped subscription's slot was never freed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    gateway.shutdown().await;
}

/// Keys re-read without a restart: a key added works at once; a removed key's open
/// session ends with PERMISSION_DENIED and it can open no other; the others carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reloaded_key_file_adds_and_revokes_keys_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (node, symbol, accounts, setup) = node_with_accounts(dir.path(), 3).await;
    let (alice, bob, carol) = (generate_key(), generate_key(), generate_key());
    let entry = |key: &str, name: &str, account: usize| entry_for(key, name, vec![accounts[account].0], false);
    let keys = KeyStore::from_entries(vec![entry(&alice, "alice", 0), entry(&bob, "bob", 1)]).unwrap();
    let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
    config.hold_us = 0;
    let gateway = Gateway::start(config, keys).await.unwrap();
    let upstream = Upstream::InProcess(gateway.local());
    let session = |key: &str| KeySession::new(upstream.clone(), Some(ApiKey(key.to_owned())));
    let order = |account: usize| limit(accounts[account], symbol, Side::Buy, setup.px_mid - 100);
    let (alice_session, bob_session, carol_session) = (session(&alice), session(&bob), session(&carol));
    assert!(alice_session.submit(order(0)).await.is_ok());
    assert!(bob_session.submit(order(1)).await.is_ok());
    assert!(tokio::time::timeout(Duration::from_secs(5), carol_session.client()).await.unwrap().is_err());

    // alice out, carol in.
    let file = KeyStore::from_entries(vec![entry(&bob, "bob", 1), entry(&carol, "carol", 2)]).unwrap();
    assert_eq!(gateway.reload_keys(file), 1, "alice's one session ended");
    match alice_session.submit(order(0)).await {
        Err(Error::Status { code, message }) => {
            assert_eq!(code, tonic::Code::PermissionDenied);
            assert!(message.contains("revoked"), "{message}");
        }
        other => panic!("alice after the reload: {other:?}"),
    }
    let again = tokio::time::timeout(Duration::from_secs(5), session(&alice).submit(order(0))).await.unwrap();
    assert!(matches!(again, Err(Error::Status { code: tonic::Code::Unauthenticated, .. })), "{again:?}");
    assert!(bob_session.submit(order(1)).await.is_ok(), "bob's session carries on");
    assert!(session(&carol).submit(order(2)).await.is_ok(), "carol's key works without a restart");
    gateway.shutdown().await;
}

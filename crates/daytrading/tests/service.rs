//! The day-trading service through a real node, gateway and history sink: the sixteen
//! commands over `Execute`, caller authorization, quotes from each source, the trigger
//! poller, and both DUMPLOG forms validated against the schema with xmllint.

mod support;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_daytrading::quote::emulator::{Emulator, Latency};
use bourse_daytrading::quote::legacy::LegacyServer;
use bourse_daytrading::{Clock, SourceConfig};
use bourse_engine::daytrading::{DtKind, Sym};
use support::{emulator, Exchange, Options};

fn emulated_price(symbol: &str, user: &str, n: u64, k: u64) -> i64 {
    Emulator::new(emulator(Latency::None)).unwrap().answer_at(Sym::parse(symbol).unwrap(), user, n, k).price
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sixteen_commands_through_the_service_and_both_dumps_validate() {
    // Over the gateway's listen address (the other tests open their sessions in process).
    let exchange = Exchange::start(Options { emulator_listen: true, local: false, ..Options::default() }).await;
    let mut admin = exchange.client(&exchange.admin).await;
    use DtKind::*;
    let u = "oY01WVirLr";
    // ADD creates the user; the result is the cash available.
    assert_eq!(admin.ok(Add, &[u, "1000.00"], 1).await.amount, Some(100_000));
    admin.err(Add, &[u, "-5"], 2, "invalid amount").await;
    admin.err(Quote, &["nobody", "ABC"], 3, "unknown user").await;
    // The service fetched a quote for command 3 (it did not know the user was missing):
    // logged and cached even though the command failed, so QUOTE uses it (spec 7.1).
    let quote = admin.ok(Quote, &[u, "ABC"], 4).await;
    let p = emulated_price("ABC", "nobody", 3, 0);
    assert_eq!(quote.price, Some(p));
    // BUY reuses the cached quote (no second fetch: same price), holds shares × p.
    let amount = p * 3 + p / 2;
    let buy = admin.ok(Buy, &[u, "ABC", &cents(amount)], 5).await;
    assert_eq!((buy.price, buy.shares, buy.amount), (Some(p), Some(3), Some(3 * p)));
    assert_eq!(admin.ok(CommitBuy, &[u], 6).await.shares, Some(3));
    admin.err(CommitBuy, &[u], 7, "no pending buy").await;
    admin.ok(Buy, &[u, "ABC", &cents(p)], 8).await;
    assert_eq!(admin.ok(CancelBuy, &[u], 9).await.amount, Some(p));
    admin.err(CancelBuy, &[u], 10, "no pending buy").await;
    let sell = admin.ok(Sell, &[u, "ABC", &cents(2 * p)], 11).await;
    assert_eq!(sell.shares, Some(2));
    admin.ok(CommitSell, &[u], 12).await;
    admin.ok(Sell, &[u, "ABC", &cents(p)], 13).await;
    admin.ok(CancelSell, &[u], 14).await;
    admin.err(CommitSell, &[u], 15, "no pending sell").await;
    admin.err(CancelSell, &[u], 16, "no pending sell").await;
    admin.err(SetBuyTrigger, &[u, "XYZ", "10.00"], 17, "no buy trigger").await;
    admin.ok(SetBuyAmount, &[u, "XYZ", "100.00"], 18).await;
    admin.ok(CancelSetBuy, &[u, "XYZ"], 19).await;
    admin.ok(SetSellAmount, &[u, "ABC", "600.00"], 20).await;
    // A sell trigger above any emulated price stays armed; it reserves ⌊600/600⌋ share.
    assert_eq!(admin.ok(SetSellTrigger, &[u, "ABC", "600.00"], 21).await.shares, Some(1));
    admin.ok(CancelSetSell, &[u, "ABC"], 22).await;
    let summary = admin.ok(DisplaySummary, &[u], 23).await;
    let summary: serde_json::Value = serde_json::from_str(&summary.summary_json).unwrap();
    assert_eq!(summary["user"], u);
    assert_eq!(summary["holdings"][0]["symbol"], "ABC");
    assert_eq!(summary["holdings"][0]["available"], 1, "3 bought, 2 sold");
    assert_eq!(summary["history"]["total"], 21, "the user's commands before it (3 was nobody's)");

    // A key that is not an administrator's acts as the user it names, only for itself.
    let mut web = exchange.client(&exchange.user_key).await;
    let own = web.call_as(u, DisplaySummary, &[u], 24).await;
    assert!(own.failure.is_empty() && own.result.is_some(), "{own:?}");
    let other = web.call_as(u, Add, &["someoneelse", "1.00"], 25).await;
    assert!(other.result.is_none() && other.failure.contains("not authorized"), "{other:?}");
    let global = web.call_as(u, DumpLog, &["all.xml"], 26).await;
    assert_eq!(global.result.expect("logged").error, "not authorized");
    // An unknown key is refused before anything is logged.
    let mut stranger = exchange.client("not-a-key").await;
    let mut request = tonic::Request::new(bourse_protocol::proto::DayTradingRequest::default());
    request.metadata_mut().insert("authorization", "Bearer not-a-key".parse().unwrap());
    let refused = stranger.client.execute(request).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated);

    // The user's DUMPLOG comes back in the response; the global one is written to a file.
    let mine = web.call_as(u, DumpLog, &[u, "mine.xml"], 27).await;
    let dump = mine.dump.expect("the user's document");
    let document = String::from_utf8(dump.document.clone()).unwrap();
    assert!(document.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n"));
    assert!(document.ends_with("</log>\n"));
    assert!(!document.contains("nobody"), "only the user's records");
    assert_eq!(document.matches("<userCommand>").count(), 24, "1, 2, 4 to 24 and 27");
    support::xmllint_bytes(&dump.document);
    let global = admin.call(DumpLog, &["./testLOG"], 28).await;
    let written = global.dump.expect("the global dump");
    assert_eq!(written.filename, "testLOG");
    let file = exchange.dump_dir.join("testLOG");
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(text.len() as u64, written.bytes);
    assert_eq!(
        text.matches("<userCommand>").count(),
        27,
        "every command but 25 (refused by the service), this one included"
    );
    assert!(text.contains("<errorMessage>unknown user</errorMessage>"));
    assert!(text.contains("<quoteServer>") && text.contains("<accountTransaction>"));
    support::xmllint(&file);
    // A file name with a directory part is a logged error and writes nothing.
    admin.err(DumpLog, &["../escape"], 29, "invalid filename").await;
    assert!(!exchange.dir.path().join("escape").exists());
    // The emulator also answers the legacy wire format (--dt-emulator-listen), with the
    // same seeded prices (the wire carries no transactionNum: n = 0).
    let endpoint = exchange.service.emulator_addr().expect("the endpoint").to_string();
    let symbol = Sym::parse("EMU").unwrap();
    let wire = bourse_daytrading::quote::legacy::fetch(&endpoint, symbol, u, Duration::from_secs(2), 1).await.unwrap();
    assert_eq!(wire.price, emulated_price("EMU", u, 0, 0));
    exchange.stop().await;
}

fn cents(c: i64) -> String {
    format!("{}.{:02}", c / 100, c % 100)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poller_fetches_quotes_for_armed_triggers_and_they_fire() {
    let options = Options { trigger_poll_ms: 50, ..Options::default() };
    let exchange = Exchange::start(options).await;
    let mut admin = exchange.client(&exchange.admin).await;
    use DtKind::*;
    let u = "trigger01";
    admin.ok(Add, &[u, "1000.00"], 1).await;
    // No quote of XYZ was ever fetched: only the poller can fire this trigger, and any
    // emulated price (at most 500.00) is at or below 500.00.
    admin.ok(SetBuyAmount, &[u, "XYZ", "600.00"], 2).await;
    admin.ok(SetBuyTrigger, &[u, "XYZ", "500.00"], 3).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let summary = loop {
        let result = admin.ok(DisplaySummary, &[u], 4).await;
        let summary: serde_json::Value = serde_json::from_str(&result.summary_json).unwrap();
        if summary["buyTriggers"].as_array().unwrap().is_empty() {
            break summary;
        }
        assert!(Instant::now() < deadline, "the trigger never fired: {summary}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // It fired at the quote the poller fetched, asked for the trigger's user and number.
    let p = emulated_price("XYZ", u, 3, 0);
    let shares = 60_000 / p;
    assert_eq!(summary["holdings"][0]["symbol"], "XYZ");
    assert_eq!(summary["holdings"][0]["available"], shares);
    assert_eq!(summary["cash"]["available"], cents(100_000 - shares * p));
    assert_eq!(summary["cash"]["reserved"], "0.00");
    // The audit log has the poller's quoteServer and the firing's systemEvent.
    let dump = admin.call(DumpLog, &[u, "t.xml"], 5).await.dump.expect("a dump");
    let document = String::from_utf8(dump.document.clone()).unwrap();
    assert!(document.contains("<command>SET_BUY_TRIGGER</command>") && document.contains("<systemEvent>"));
    assert!(document.contains(&format!("<price>{}</price>", cents(p))));
    support::xmllint_bytes(&dump.document);
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotes_from_a_legacy_tcp_server_are_recorded_as_answered() {
    // The emulator's wire endpoint stands in for the legacy quote server.
    let quote_server = LegacyServer::start(
        "127.0.0.1:0".parse().unwrap(),
        std::sync::Arc::new(Emulator::new(emulator(Latency::Fixed(Duration::from_millis(5)))).unwrap()),
        Clock::Wall,
    )
    .await
    .unwrap();
    let source = SourceConfig::LegacyTcp {
        address: quote_server.addr().to_string(),
        timeout: Duration::from_millis(500),
        attempts: 3,
    };
    let exchange = Exchange::start(Options { source, ..Options::default() }).await;
    let mut admin = exchange.client(&exchange.admin).await;
    let u = "legacyUser";
    admin.ok(DtKind::Add, &[u, "10.00"], 1).await;
    let quote = admin.ok(DtKind::Quote, &[u, "QQ"], 2).await;
    // The wire format carries no transactionNum: the server answers as for n = 0.
    assert_eq!(quote.price, Some(emulated_price("QQ", u, 0, 0)));
    let dump = admin.call(DumpLog, &[u, "q.xml"], 3).await.dump.expect("a dump");
    let document = String::from_utf8(dump.document.clone()).unwrap();
    let key = Emulator::new(emulator(Latency::None)).unwrap().answer_at(Sym::parse("QQ").unwrap(), u, 0, 0).cryptokey;
    assert!(document.contains(&format!("<cryptokey>{key}</cryptokey>")), "{document}");
    support::xmllint_bytes(&dump.document);
    exchange.stop().await;
}

use DtKind::DumpLog;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotes_from_the_exchanges_own_market_are_its_last_trade_in_cents() {
    use bourse_client::{random_client_id, AdminSession, ApiKey, ClientOptions};
    use bourse_engine::command::{CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
    use bourse_engine::{AccountId, Amount, AssetId, Px, Qty, Side, SymbolId};
    let source = SourceConfig::Market(bourse_daytrading::quote::market::MarketPrice::Last);
    let exchange = Exchange::start(Options { source, ..Options::default() }).await;
    let mut admin = exchange.client(&exchange.admin).await;
    let u = "marketUser";
    admin.ok(DtKind::Add, &[u, "100.00"], 1).await;
    // No pair ABC/USD: no price, a logged error.
    admin.err(DtKind::Quote, &[u, "ABC"], 2, "quote unavailable").await;
    // USD in cents, ABC in whole shares, ABC/USD; account 1 sells 1 share at 12.34 to
    // account 0.
    let options = ClientOptions { api_key: Some(ApiKey(exchange.admin.clone())), ..ClientOptions::default() };
    let endpoints = vec![exchange.gateway.addr().to_string()];
    let mut session = AdminSession::connect(endpoints, random_client_id(), options).await.unwrap();
    let bodies = [
        CommandBody::CreateAsset { name: "USD".into(), decimals: 2 },
        CommandBody::CreateAsset { name: "ABC".into(), decimals: 0 },
        CommandBody::CreateSymbol(Box::new(SymbolSpec {
            name: "ABC/USD".into(),
            base: AssetId(1),
            quote: AssetId(0),
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(1_000_000),
            fee_maker: Amount(0),
            fee_taker: Amount(0),
            policy: MatchPolicy::Fifo,
        })),
        CommandBody::CreateAccount,
        CommandBody::CreateAccount,
        CommandBody::Deposit { account: AccountId(0), asset: AssetId(0), amount: Amount(100_000) },
        CommandBody::Credit { account: AccountId(1), asset: AssetId(1), amount: Amount(10) },
        CommandBody::Place(OrderRequest::limit(AccountId(1), SymbolId(0), Side::Sell, Px(1234), Qty(1), Tif::Gtc)),
        CommandBody::Place(OrderRequest::limit(AccountId(0), SymbolId(0), Side::Buy, Px(1234), Qty(1), Tif::Gtc)),
    ];
    for body in bodies {
        session.submit(body).await.unwrap();
    }
    // The service learns the trade from the gateway's market data.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut n = 3;
    let quote = loop {
        let response = admin.call(DtKind::Quote, &[u, "ABC"], n).await;
        let result = response.result.expect("logged");
        if result.error.is_empty() {
            break result;
        }
        assert!(Instant::now() < deadline, "no market price: {}", result.error);
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(quote.price, Some(1234));
    let dump = admin.call(DumpLog, &[u, "m.xml"], n + 1).await.dump.expect("a dump");
    let document = String::from_utf8(dump.document.clone()).unwrap();
    assert!(document.contains("<price>12.34</price>"), "{document}");
    support::xmllint_bytes(&dump.document);
    exchange.stop().await;
}

/// A quote server in the legacy wire format that answers every symbol at 100.00 after
/// `delay` and counts the requests of each symbol.
async fn counting_quote_server(delay: Duration) -> (String, Arc<Mutex<BTreeMap<String, usize>>>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let asked = Arc::new(Mutex::new(BTreeMap::new()));
    let counts = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let counts = Arc::clone(&counts);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                BufReader::new(read).read_line(&mut line).await.unwrap();
                let (symbol, user) = line.trim_end().split_once(',').unwrap();
                *counts.lock().unwrap().entry(symbol.to_owned()).or_insert(0) += 1;
                tokio::time::sleep(delay).await;
                let now = Clock::Wall.now_ms(0);
                let _ = write.write_all(format!("100.00,{symbol},{user},{now},key\n").as_bytes()).await;
            });
        }
    });
    (address, asked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_needs_of_one_symbol_share_one_fetch_per_validity_window() {
    // A slow source: every command below asks while the first fetch is in the air.
    let (address, asked) = counting_quote_server(Duration::from_millis(300)).await;
    let source = SourceConfig::LegacyTcp { address, timeout: Duration::from_secs(5), attempts: 1 };
    let exchange = Exchange::start(Options { source, sessions: 8, ..Options::default() }).await;
    let mut admin = exchange.client(&exchange.admin).await;
    use DtKind::*;
    let users: Vec<String> = (0..24).map(|i| format!("flight{i:02}")).collect();
    for (i, u) in users.iter().enumerate() {
        admin.ok(Add, &[u, "1000.00"], 1 + i as u64).await;
    }
    // Each round: every user at once, each on its own connection, QUOTE or BUY of
    // `symbol(i)`; every command succeeds at the one price.
    let round = |first_n: u64, symbol: fn(usize) -> &'static str| {
        let users = users.clone();
        let exchange = &exchange;
        async move {
            let mut calls = tokio::task::JoinSet::new();
            for (i, u) in users.into_iter().enumerate() {
                let mut client = exchange.client(&exchange.admin).await;
                let n = first_n + i as u64;
                calls.spawn(async move {
                    match i % 2 {
                        0 => client.ok(Quote, &[&u, symbol(i)], n).await,
                        _ => client.ok(Buy, &[&u, symbol(i), "250.00"], n).await,
                    }
                });
            }
            let results = calls.join_all().await;
            assert!(results.iter().all(|r| r.price == Some(10_000)), "{results:?}");
            results.len()
        }
    };
    let mut commands = users.len() + round(100, |_| "ABC").await;
    let counts = |asked: &Mutex<BTreeMap<String, usize>>| asked.lock().unwrap().clone();
    assert_eq!(counts(&asked), BTreeMap::from([("ABC".to_owned(), 1)]), "24 users, one fetch");
    // Still valid: ABC is not fetched again; XYZ, asked by half of them, once.
    commands += round(200, |i| if i % 4 < 2 { "ABC" } else { "XYZ" }).await;
    let expected = BTreeMap::from([("ABC".to_owned(), 1), ("XYZ".to_owned(), 1)]);
    assert_eq!(counts(&asked), expected);
    // The audit log has each real hit once, with the command that carried it, and every
    // command (the dump's own included).
    let dump = admin.call(DumpLog, &["flights.xml"], 300).await;
    assert!(dump.result.is_some_and(|r| r.error.is_empty()), "{:?}", dump.failure);
    let text = std::fs::read_to_string(exchange.dump_dir.join("flights.xml")).unwrap();
    assert_eq!(text.matches("<quoteServer>").count(), 2);
    assert_eq!(text.matches("<userCommand>").count(), commands + 1);
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_nodes_day_trading_table_sets_both_validities_and_the_service_reads_them() {
    let (address, asked) = counting_quote_server(Duration::ZERO).await;
    let source = SourceConfig::LegacyTcp { address, timeout: Duration::from_secs(5), attempts: 1 };
    // Over the gateway's gRPC address, as a separate `gateway run` reaches the node.
    let options = Options {
        source,
        local: false,
        refresh_margin_ms: 200,
        node_toml: Some("[day_trading]\nquote_ttl_ms = 1500\npending_ttl_ms = 1000\n"),
        ..Options::default()
    };
    let exchange = Exchange::start(options).await;
    // The service took its quote validity from the node, which reports the engine's.
    assert_eq!(exchange.service.service().quote_ttl_ms(), 1_500);
    let mut query = bourse_client::QueryClient::connect(
        vec![exchange.gateway.addr().to_string()],
        bourse_client::ClientOptions {
            api_key: Some(bourse_client::ApiKey(exchange.admin.clone())),
            ..bourse_client::ClientOptions::default()
        },
    )
    .await
    .unwrap();
    let settings = query.day_trading_config().await.unwrap();
    assert_eq!((settings.quote_ttl_ms, settings.pending_ttl_ms, settings.summary_history), (1_500, 1_000, 10));
    let mut admin = exchange.client(&exchange.admin).await;
    use DtKind::*;
    let fetched = || asked.lock().unwrap().get("ABC").copied().unwrap_or(0);
    let u = "ttlUser";
    admin.ok(Add, &[u, "1000.00"], 1).await;
    // A quote serves for 1.5 s: the second QUOTE uses the cached one, the third (after
    // 1.5 s) needs a new fetch, which the service makes because it knows the validity.
    let first = admin.ok(Quote, &[u, "ABC"], 2).await;
    let cached = admin.ok(Quote, &[u, "ABC"], 3).await;
    assert_eq!((fetched(), cached.quote_arrival), (1, first.quote_arrival));
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    let fresh = admin.ok(Quote, &[u, "ABC"], 4).await;
    assert_eq!(fetched(), 2);
    assert!(fresh.quote_arrival > first.quote_arrival, "{fresh:?}");
    // A pending BUY lasts 1 s: expiresAt says so, and it cannot be committed after.
    let buy = admin.ok(Buy, &[u, "ABC", "200.00"], 5).await;
    assert_eq!(buy.expires_at, Some(buy.stamp + 1_000));
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    admin.err(CommitBuy, &[u], 6, "no pending buy").await;
    // Within its second it can.
    admin.ok(Buy, &[u, "ABC", "200.00"], 7).await;
    assert_eq!(admin.ok(CommitBuy, &[u], 8).await.shares, Some(2));
    exchange.stop().await;
}

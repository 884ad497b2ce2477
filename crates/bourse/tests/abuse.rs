//! Abuse at the edge while an honest client trades: a node, a gateway with keys, and
//! the REST, FIX and XML front ends in its process, each listener with a first-request
//! deadline of one second. The abusers run on a runtime of their own, as another
//! machine's clients would:
//!
//! - slowloris clients on the REST, FIX and XML listeners (a byte every 300 ms, never a
//!   whole request), reconnecting as they are cut;
//! - one key opening order-entry sessions without end, and one opening REST and FIX
//!   connections without end;
//! - a flood of requests with made-up keys, over REST and gRPC;
//! - a market data subscriber that never reads;
//! - a flood of fillers (cancels of order 0) that nothing refused.
//!
//! The honest client's round trip is measured without and with the abusers, in three
//! alternating rounds; the median p99 with them must be at most 3× the median without.
//! Each abuser must be cut off: the slowloris clients within the deadline (closed
//! without a word: HTTP's header timeout, FIX's Logon deadline and the XML spec's read
//! timeout all close), the others told why.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, ApiKey, Client, ClientOptions, Error, QueryClient};
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, OrderId, Px, Qty, Side, SymbolId};
use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig};
use bourse_protocol::proto;

/// Samples of the honest client per round.
const SAMPLES: usize = 300;
/// The listeners' first-request deadline.
const DEADLINE: Duration = Duration::from_secs(1);

/// What each abuser saw when it was cut off, by abuser.
type Verdicts = Arc<Mutex<Vec<(&'static str, String)>>>;

#[derive(Clone, Copy)]
struct Edge {
    gateway: SocketAddr,
    http: SocketAddr,
    fix: SocketAddr,
    xml: SocketAddr,
    symbol: SymbolId,
}

fn options(key: &str) -> ClientOptions {
    ClientOptions {
        api_key: Some(ApiKey(key.to_owned())),
        unavailable_max: Duration::from_millis(300),
        ..ClientOptions::default()
    }
}

/// One p99 of the honest client: `SAMPLES` commands one after another, each timed from
/// submit to its answer: an order that rests far from the market, then its cancel (so
/// market data moves: the stalled subscriber's buffer fills).
async fn p99(client: &Client, account: AccountId, symbol: SymbolId) -> Duration {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES / 2 {
        let order = OrderRequest::limit(account, symbol, Side::Buy, Px(1_000), Qty(1), Tif::Gtc);
        let began = Instant::now();
        let placed = client.submit(CommandBody::Place(order)).await.expect("the honest client is served");
        samples.push(began.elapsed());
        let order = OrderId(placed.ok_id().expect("the order rests"));
        let began = Instant::now();
        client.submit(CommandBody::Cancel { account, symbol, order }).await.expect("the honest client is served");
        samples.push(began.elapsed());
    }
    samples.sort();
    samples[samples.len() * 99 / 100]
}

/// A byte every 300 ms on a new connection to `addr`, after `start`, until the server
/// closes it (its answer, if any, is what it said); reconnects until `stop`.
fn slowloris(name: &'static str, addr: SocketAddr, start: &'static [u8], stop: Arc<AtomicBool>, verdicts: Verdicts) {
    while !stop.load(Ordering::Relaxed) {
        let Ok(mut stream) = TcpStream::connect(addr) else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_millis(300)));
        let began = Instant::now();
        let _ = stream.write_all(start);
        let mut answer = Vec::new();
        let cut = loop {
            let mut buf = [0u8; 4096];
            match stream.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(error) if error.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => break true,
            }
            if stop.load(Ordering::Relaxed) || began.elapsed() > DEADLINE * 10 {
                break false;
            }
            if stream.write_all(b"x").is_err() {
                break true;
            }
        };
        if cut {
            let (said, after) = (String::from_utf8_lossy(&answer).into_owned(), began.elapsed());
            let late = if after > DEADLINE * 3 { "late: " } else { "" };
            verdicts.lock().unwrap().push((name, format!("{late}closed after {after:?}; said {said:?}")));
        }
    }
}

/// The abusers, on a runtime of their own, until `stop`.
/// The abusers' keys: one opening sessions (and its account), one subscribing, one
/// sending fillers (and its account), one opening connections.
type AbuserKeys = ((String, AccountId), String, (String, AccountId), String);

/// Connections each key holds at most at the REST and FIX listeners, in this test.
const CONNECTIONS_PER_KEY: usize = 4;

/// Opens REST connections (each kept alive after a request) and FIX connections (each
/// logged on as a new CompID) with one key until each listener refuses one, then holds
/// them until `stop`.
fn connections_without_end(edge: &Edge, key: String, stop: Arc<AtomicBool>, verdicts: Verdicts) {
    let mut held = Vec::new();
    let mut rest = "never refused".to_string();
    for _ in 0..CONNECTIONS_PER_KEY * 3 {
        let Ok(mut stream) = TcpStream::connect(edge.http) else { continue };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let request = format!("GET /v1/symbols HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {key}\r\n\r\n");
        let _ = stream.write_all(request.as_bytes());
        let mut buf = [0u8; 8192];
        let answer = match stream.read(&mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).into_owned(),
            Err(error) => error.to_string(),
        };
        if !answer.starts_with("HTTP/1.1 200") {
            rest = format!("after {} connections: {}", held.len(), answer.lines().next().unwrap_or(""));
            rest.push_str(answer.split("\r\n\r\n").nth(1).unwrap_or(""));
            break;
        }
        held.push(stream);
    }
    let rest_held = held.len();
    let mut fix = "never refused".to_string();
    for i in 0..CONNECTIONS_PER_KEY * 3 {
        let Ok(mut stream) = TcpStream::connect(edge.fix) else { continue };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let mut logon = bourse_fix::codec::Message::new("A");
        logon
            .push(49, format!("HOG{i}"))
            .push(56, "BOURSE")
            .push_display(34, 1)
            .push(52, bourse_fix::time::utc_timestamp(bourse_fix::time::now_ns()))
            .push(98, "0")
            .push(108, "30")
            .push(554, &key)
            .push(141, "Y");
        let _ = stream.write_all(&logon.encode());
        let mut buf = [0u8; 4096];
        let answer = match stream.read(&mut buf) {
            Ok(n) => String::from_utf8_lossy(&buf[..n]).replace('\x01', "|"),
            Err(error) => error.to_string(),
        };
        if !answer.contains("|35=A|") {
            fix = format!("after {} logons: {answer}", held.len() - rest_held);
            break;
        }
        held.push(stream);
    }
    verdicts.lock().unwrap().push(("REST connections without end", rest));
    verdicts.lock().unwrap().push(("FIX connections without end", fix));
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(held);
}

fn abuse(edge: &Edge, keys: AbuserKeys, stop: Arc<AtomicBool>, verdicts: Verdicts) -> Vec<std::thread::JoinHandle<()>> {
    let mut threads = Vec::new();
    for (name, addr, start) in [
        ("REST slowloris", edge.http, &b"GET /v1/symbols HTTP/1.1\r\nhost: x\r\nx-slow: "[..]),
        ("FIX slowloris", edge.fix, &b"8=FIX.4.4\x019=70\x0135=A\x0149=SLOW\x01"[..]),
        ("XML slowloris", edge.xml, &b"200\n<create><account id=\""[..]),
    ] {
        for _ in 0..4 {
            let (stop, verdicts) = (Arc::clone(&stop), Arc::clone(&verdicts));
            threads.push(std::thread::spawn(move || slowloris(name, addr, start, stop, verdicts)));
        }
    }
    // Made-up keys over REST: each a 401, as fast as one connection goes.
    let (http, flood_stop, flood_verdicts) = (edge.http, Arc::clone(&stop), Arc::clone(&verdicts));
    threads.push(std::thread::spawn(move || {
        let mut statuses = std::collections::BTreeMap::new();
        while !flood_stop.load(Ordering::Relaxed) {
            let Ok(mut stream) = TcpStream::connect(http) else {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            };
            let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
            let request = format!(
                "GET /v1/symbols HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\nconnection: close\r\n\r\n",
                generate_key()
            );
            let _ = stream.write_all(request.as_bytes());
            let mut answer = String::new();
            let _ = stream.read_to_string(&mut answer);
            *statuses.entry(answer.get(9..12).unwrap_or("---").to_owned()).or_insert(0u32) += 1;
            // 500 a second: a flood, not a saturated core of this two-core machine.
            std::thread::sleep(Duration::from_millis(2));
        }
        flood_verdicts.lock().unwrap().push(("fake keys over REST", format!("{statuses:?}")));
    }));
    let connections = *edge;
    let (conns, conns_stop, conns_verdicts) = (keys.3.clone(), Arc::clone(&stop), Arc::clone(&verdicts));
    threads.push(std::thread::spawn(move || connections_without_end(&connections, conns, conns_stop, conns_verdicts)));
    let (gateway, symbol) = (edge.gateway, edge.symbol);
    threads.push(std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(grpc_abusers(gateway, symbol, keys, stop, verdicts));
    }));
    threads
}

async fn grpc_abusers(
    gateway: SocketAddr,
    symbol: SymbolId,
    keys: AbuserKeys,
    stop: Arc<AtomicBool>,
    verdicts: Verdicts,
) {
    let ((hog, hog_account), reader, (filler, filler_account), _) = keys;
    let endpoints = vec![gateway.to_string()];
    let say = |name: &'static str, what: String| {
        eprintln!("abuse: {name}: {what}");
        verdicts.lock().unwrap().push((name, what));
    };
    // One key opening sessions without end: refused past its cap, saying which.
    let mut held = Vec::new();
    for _ in 0..64 {
        match Client::connect(endpoints.clone(), random_client_id(), options(&hog)).await {
            Ok(session) => {
                match session.submit(CommandBody::Cancel { account: hog_account, symbol, order: OrderId(1) }).await {
                    Err(error @ Error::Status { .. }) => {
                        say("sessions without end", error.to_string());
                        break;
                    }
                    _ => held.push(session),
                }
            }
            Err(error) => {
                say("sessions without end", error.to_string());
                break;
            }
        }
    }
    // A subscriber that never reads, on a connection whose HTTP/2 windows are a few
    // kilobytes (so what it does not read backs up into the gateway at once, not into
    // its own buffers): dropped once the gateway's buffer for it is full, with the reason.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{gateway}"))
        .unwrap()
        .initial_stream_window_size(Some(4_096))
        .initial_connection_window_size(Some(4_096))
        .connect()
        .await
        .unwrap();
    let channels = [proto::Channel::Orders, proto::Channel::L2, proto::Channel::Trades, proto::Channel::Bbo];
    let mut request = tonic::Request::new(proto::SubscribeRequest {
        symbols: Vec::new(),
        channels: channels.iter().map(|&channel| channel as i32).collect(),
    });
    request.metadata_mut().insert("authorization", format!("Bearer {reader}").parse().unwrap());
    let mut stalled = proto::market_data_client::MarketDataClient::new(channel)
        .subscribe(request)
        .await
        .expect("a subscription")
        .into_inner();
    // Made-up keys over gRPC, and fillers that nothing refused, until told to stop.
    let mut fillers_cut = None;
    let mut fake = 0;
    while !stop.load(Ordering::Relaxed) {
        if let Ok(mut query) = QueryClient::connect(endpoints.clone(), options(&generate_key())).await {
            if let Err(error) = query.symbols().await {
                fake += 1;
                if fake == 1 {
                    say("fake keys over gRPC", error.to_string());
                }
            }
        }
        if fillers_cut.is_none() {
            if let Ok(session) = Client::connect(endpoints.clone(), random_client_id(), options(&filler)).await {
                let body = CommandBody::Cancel { account: filler_account, symbol, order: OrderId(0) };
                for _ in 0..2_000 {
                    if let Err(error) = session.send(&body).await {
                        fillers_cut = Some(error.to_string());
                        break;
                    }
                }
                if fillers_cut.is_none() {
                    if let Err(error) = session.flush().await {
                        fillers_cut = Some(error.to_string());
                    }
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    say("filler flood", fillers_cut.unwrap_or_else(|| "never cut".into()));
    // Only now does the subscriber read: what was buffered, then why it was dropped.
    let give_up = tokio::time::Instant::now() + Duration::from_secs(15);
    let dropped = loop {
        match tokio::time::timeout_at(give_up, stalled.message()).await {
            Ok(Ok(Some(_))) => continue,
            Ok(Ok(None)) => break "ended without a reason".to_string(),
            Ok(Err(status)) => break format!("{:?}: {}", status.code(), status.message()),
            Err(_) => break "still open after 15 s".to_string(),
        }
    };
    say("subscriber that never reads", dropped);
    drop(held);
}

#[test]
fn an_honest_client_keeps_trading_while_abusers_are_cut_off() {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (honest, hog, reader, filler) = (generate_key(), generate_key(), generate_key(), generate_key());
    let conns = generate_key();
    let (node, gateway, fronts, edge, accounts) = runtime.block_on(async {
        let config = NodeConfig {
            data: dir.path().join("node"),
            listen: "127.0.0.1:0".parse().unwrap(),
            sequencer_window_us: 0,
            ..NodeConfig::default()
        };
        let node = Node::start(config).await.unwrap();
        let endpoints = vec![node.addr.to_string()];
        let setup = SymbolSetup::default();
        let (market, assets) = setup_market(&endpoints, &setup, &ClientOptions::default()).await.unwrap();
        let admin = Client::connect(endpoints, random_client_id(), ClientOptions::default()).await.unwrap();
        let accounts = funded_accounts(&admin, 4, assets, &setup).await.unwrap();
        admin.close().await.unwrap();
        let mut keys = KeyStore::from_entries(vec![
            entry_for(&honest, "honest", vec![accounts[0].0], false),
            entry_for(&hog, "hog", vec![accounts[1].0], false),
            entry_for(&reader, "reader", vec![accounts[2].0], false),
            entry_for(&filler, "filler", vec![accounts[3].0], false),
            entry_for(&conns, "conns", vec![accounts[1].0], false),
        ])
        .unwrap();
        let service = keys.add_process_key("http-front-end", false);
        let xml_key = keys.add_process_key("xml-front-end", true);
        let mut config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
        config.hold_us = 0;
        config.sessions_per_key_max = 8;
        config.subscriber_buffer = 64;
        config.rate_per_sec = 2_000;
        config.burst = 200;
        let gateway = Gateway::start(config, keys).await.unwrap();
        while !gateway.market_ready() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let upstream = bourse_port::Upstream::InProcess(gateway.local());
        let mut http = bourse_http::HttpConfig::new(listen, Vec::new());
        http.upstream = upstream.clone();
        http.service_key = Some(ApiKey(service));
        http.limits.first_request_timeout = DEADLINE;
        http.limits.connections_per_key_max = CONNECTIONS_PER_KEY;
        let http = bourse_http::HttpServer::start(http).await.unwrap();
        let mut fix = bourse_fix::FixConfig::new(listen, Vec::new(), dir.path().join("fix"));
        fix.upstream = upstream.clone();
        fix.limits.first_request_timeout = DEADLINE;
        fix.limits.connections_per_key_max = CONNECTIONS_PER_KEY;
        let fix = bourse_fix::FixServer::start(fix).await.unwrap();
        let mut exchange = bourse_xml::ExchangeConfig::new(Vec::new());
        exchange.upstream = upstream;
        exchange.key = Some(ApiKey(xml_key));
        exchange.quote_asset = "XUSD".into();
        let exchange =
            Arc::new(bourse_xml::Exchange::connect(exchange, Arc::new(bourse_xml::NoHistory)).await.unwrap());
        let mut xml = bourse_xml::XmlConfig::new(listen, bourse_xml::Framing::Prefixed);
        xml.limits.io_timeout = DEADLINE;
        xml.limits.idle_timeout = DEADLINE;
        let xml = bourse_xml::XmlServer::start(xml, exchange).await.unwrap();
        let edge = Edge {
            gateway: gateway.addr(),
            http: http.addr(),
            fix: fix.addr(),
            xml: xml.addr(),
            symbol: market.symbol,
        };
        (node, gateway, (http, fix, xml), edge, accounts)
    });
    let account = accounts[0];

    let client = runtime
        .block_on(Client::connect(vec![edge.gateway.to_string()], random_client_id(), options(&honest)))
        .unwrap();
    let verdicts: Verdicts = Arc::default();
    let (mut quiet, mut abused) = (Vec::new(), Vec::new());
    let mut threads = Vec::new();
    let stop = Arc::new(AtomicBool::new(false));
    for round in 0..3 {
        eprintln!("abuse: round {round}, without abusers");
        quiet.push(runtime.block_on(p99(&client, account, edge.symbol)));
        if round == 0 {
            let keys = ((hog.clone(), accounts[1]), reader.clone(), (filler.clone(), accounts[3]), conns.clone());
            threads = abuse(&edge, keys, Arc::clone(&stop), Arc::clone(&verdicts));
            std::thread::sleep(DEADLINE * 2);
        }
        eprintln!("abuse: round {round}, with abusers");
        abused.push(runtime.block_on(p99(&client, account, edge.symbol)));
    }
    eprintln!("abuse: stopping the abusers");
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
    quiet.sort();
    abused.sort();
    let (quiet, abused) = (quiet[1], abused[1]);
    println!(
        "honest p99: {quiet:?} without abusers, {abused:?} with them ({:.2}×)",
        abused.as_secs_f64() / quiet.as_secs_f64()
    );

    let verdicts = verdicts.lock().unwrap().clone();
    for (name, what) in &verdicts {
        println!("{name}: {what}");
    }
    let said = |name: &str| verdicts.iter().filter(|(n, _)| *n == name).map(|(_, w)| w.clone()).collect::<Vec<_>>();
    for name in ["REST slowloris", "FIX slowloris", "XML slowloris"] {
        let cuts = said(name);
        assert!(!cuts.is_empty(), "{name} was never cut off");
        assert!(cuts.iter().all(|cut| !cut.starts_with("late")), "{name} held on past 3× the deadline: {cuts:?}");
    }
    assert!(
        said("sessions without end").iter().any(|w| w.contains("ResourceExhausted: this key holds 8 sessions")),
        "{:?}",
        said("sessions without end")
    );
    assert!(
        said("fake keys over gRPC").iter().any(|w| w.contains("Unauthenticated")),
        "{:?}",
        said("fake keys over gRPC")
    );
    assert!(said("fake keys over REST").iter().all(|w| w.starts_with("{\"401\"")), "{:?}", said("fake keys over REST"));
    assert!(said("filler flood").iter().any(|w| w.contains("fillers")), "{:?}", said("filler flood"));
    assert!(
        said("subscriber that never reads").iter().any(|w| w.contains("behind")),
        "{:?}",
        said("subscriber that never reads")
    );
    let refused = format!("after {CONNECTIONS_PER_KEY} ");
    let rest = said("REST connections without end");
    assert!(
        rest.iter().any(|w| w.starts_with(&refused) && w.contains("429") && w.contains("too_many_connections")),
        "{rest:?}"
    );
    let fix = said("FIX connections without end");
    assert!(
        fix.iter().any(|w| w.starts_with(&refused) && w.contains("|35=5|") && w.contains("holds 4 connections")),
        "{fix:?}"
    );
    // Each listener counted what it refused, on the gateway's /metrics.
    let metrics = bourse_port::render_metrics();
    let value = |name: &str, front_end: &str, addr: SocketAddr| -> u64 {
        let series = format!("bourse_listener_{name}{{front_end=\"{front_end}\",addr=\"{addr}\"}} ");
        let line = metrics.lines().find_map(|line| line.strip_prefix(series.as_str()));
        line.unwrap_or_else(|| panic!("no {series} in\n{metrics}")).parse().unwrap()
    };
    for (front_end, addr) in [("http", edge.http), ("fix", edge.fix)] {
        assert!(value("key_refused_total", front_end, addr) >= 1, "{front_end}: {metrics}");
    }
    for (front_end, addr) in [("http", edge.http), ("fix", edge.fix), ("xml", edge.xml)] {
        let cut = value("deadlines_total", front_end, addr) + value("idle_closed_total", front_end, addr);
        assert!(cut >= 1, "{front_end} counted no slowloris cut: {metrics}");
    }
    assert!(abused <= quiet * 3, "the honest client's p99 went from {quiet:?} to {abused:?} with the abusers");

    runtime.block_on(async {
        client.close().await.unwrap();
        let (http, fix, xml) = fronts;
        xml.shutdown().await;
        fix.shutdown().await;
        http.shutdown().await;
        gateway.shutdown().await;
        node.shutdown().await.unwrap();
    });
}

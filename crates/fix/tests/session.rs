//! The FIX session layer against a real node and gateway: malformed input, sequence
//! gaps both ways, resends from the store after a dropped connection and after a
//! restart, duplicate ClOrdIDs, logon refusals, sequence resets, market data.

mod support;

use std::time::Duration;

use bourse_fix::codec::{checksum, Message};
use support::{f, get, limit, Exchange, FixClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_messages_get_protocol_errors_and_change_nothing() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    let before = exchange.balance(1, 0).await;

    // A bad checksum is garbled: ignored, not counted.
    let mut bytes = fix.message("D", fix.seq, &limit("x1", 1, "1", 1, 150)).encode();
    let n = bytes.len();
    bytes[n - 2] = if bytes[n - 2] == b'0' { b'1' } else { b'0' };
    fix.send_raw(&bytes).await;
    assert!(fix.try_recv(Duration::from_millis(300)).await.is_none());

    // A NewOrderSingle without ClOrdID: Reject, RequiredTagMissing, naming the tag.
    let seq = fix.send("D", &limit("x2", 1, "1", 1, 150)[1..]).await;
    let reject = fix.recv_app().await;
    assert_eq!(
        (reject.msg_type(), get(&reject, 45), get(&reject, 373), get(&reject, 371)),
        ("3", &*seq.to_string(), "1", "11")
    );

    // A tag without a value, written by hand.
    let body = format!("35=D\x0149=ALICE\x0156=BOURSE\x0134={}\x0152=20260101-00:00:00\x0111=\x01", fix.seq);
    let mut raw = format!("8=FIX.4.4\x019={}\x01{body}", body.len()).into_bytes();
    raw.extend_from_slice(format!("10={:03}\x01", checksum(&raw)).as_bytes());
    fix.send_raw(&raw).await;
    fix.seq += 1;
    let reject = fix.recv_app().await;
    assert_eq!((reject.msg_type(), get(&reject, 373), get(&reject, 371)), ("3", "4", "11"));

    // A value FIX does not define for Side: Reject, ValueIncorrect (5), naming the tag
    // and what it must be; never a guessed side. (An OrdType or TimeInForce Bourse does
    // not support is an ExecutionReport rejection: tests/orders.rs.)
    fix.send("D", &limit("x4", 1, "9", 1, 150)).await;
    let reject = fix.recv_app().await;
    assert_eq!((reject.msg_type(), get(&reject, 373), get(&reject, 371)), ("3", "5", "54"));
    assert!(get(&reject, 58).contains("Side must be 1 (buy) or 2 (sell)"), "{}", get(&reject, 58));

    // An unsupported application message: BusinessMessageReject.
    fix.send("H", &f(&[(11, "x3")])).await;
    let reject = fix.recv_app().await;
    assert_eq!((reject.msg_type(), get(&reject, 372), get(&reject, 380)), ("j", "H", "3"));

    // TestRequest is answered with its id; the session still works after all that.
    fix.send("1", &f(&[(112, "ping")])).await;
    let heartbeat = fix.recv().await;
    assert_eq!((heartbeat.msg_type(), get(&heartbeat, 112)), ("0", "ping"));
    fix.send("D", &limit("ok", 1, "1", 1, 150)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    assert_eq!(exchange.balance(1, 0).await.1, before.1 + 151);
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gap_from_the_client_is_resent_and_a_too_low_seq_ends_the_session() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    // Seq 2 and 3 "lost": 4 arrives, the server asks from 2, and drops 4.
    fix.seq = 4;
    fix.send("D", &limit("g4", 1, "1", 1, 150)).await;
    let request = fix.recv_app().await;
    assert_eq!((request.msg_type(), get(&request, 7), get(&request, 16)), ("2", "2", "0"));
    // The client fills 2..3 with a gap fill and resends 4 as a possible duplicate.
    let mut gap = fix.message("4", 2, &f(&[(123, "Y"), (36, "4")]));
    gap.set(43, "Y");
    fix.send_raw(&gap.encode()).await;
    let mut again = fix.message("D", 4, &limit("g4", 1, "1", 1, 150));
    again.push(43, "Y").push(122, "20260101-00:00:00");
    fix.send_raw(&again.encode()).await;
    let new = fix.recv_app().await;
    assert_eq!((get(&new, 11), get(&new, 150)), ("g4", "0"));
    fix.seq = 5;
    // SequenceReset in reset mode jumps ahead whatever its own seq.
    let reset = fix.message("4", 99, &f(&[(36, "10")]));
    fix.send_raw(&reset.encode()).await;
    fix.seq = 10;
    fix.send("1", &f(&[(112, "after-reset")])).await;
    assert_eq!(get(&fix.recv().await, 112), "after-reset");
    // A seq below the expected one without PossDupFlag: Logout, then the end.
    fix.seq = 3;
    fix.send("0", &[]).await;
    let logout = fix.recv_app().await;
    assert_eq!(logout.msg_type(), "5");
    assert!(get(&logout, 58).contains("too low"), "{logout:?}");
    assert!(fix.closed(Duration::from_secs(3)).await);
    exchange.stop().await;
}

/// Logs on again as ALICE continuing from `seq`; returns the client and the Logon.
async fn relogon(exchange: &Exchange, seq: u64) -> (FixClient, Message) {
    let mut fix = FixClient::connect(exchange.fix_addr, "ALICE", seq).await;
    fix.send("A", &f(&[(98, "0"), (108, "30"), (554, &exchange.alice)])).await;
    let logon = fix.recv().await;
    assert_eq!(logon.msg_type(), "A", "{logon:?}");
    (fix, logon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_loses_no_report_and_a_resent_order_is_not_doubled() {
    let mut exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    fix.send("D", &limit("rest", 1, "1", 5, 150)).await;
    let new = fix.recv_app().await;
    let order_seq: u64 = get(&new, 34).parse().unwrap();
    let order_id = get(&new, 37).to_owned();
    // The connection drops; while the client is away its order trades.
    drop(fix);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (mut other, _) = FixClient::logon(exchange.fix_addr, "OTHER", &exchange.alice, false).await;
    other.send("D", &limit("hit", 0, "2", 5, 150)).await;
    assert_eq!(get(&other.recv_app().await, 150), "0");
    assert_eq!(get(&other.recv_app().await, 150), "F");

    // Back: the Logon's seq is ahead of what the client saw; it asks for the rest.
    let (mut fix, logon) = relogon(&exchange, 3).await;
    let logon_seq: u64 = get(&logon, 34).parse().unwrap();
    assert_eq!(logon_seq, order_seq + 2, "the fill was numbered while the client was away");
    fix.send("2", &f(&[(7, &(order_seq + 1).to_string()), (16, "0")])).await;
    let fill = fix.recv_app().await;
    assert_eq!((get(&fill, 150), get(&fill, 39), get(&fill, 37), get(&fill, 43)), ("F", "2", order_id.as_str(), "Y"));
    assert_eq!(get(&fill, 34), (order_seq + 1).to_string());
    assert!(fill.get(122).is_some(), "a resend carries OrigSendingTime");
    let gap = fix.recv_app().await;
    assert_eq!((gap.msg_type(), get(&gap, 123), get(&gap, 36)), ("4", "Y", &*(logon_seq + 1).to_string()));

    // The client is unsure its order went in and sends it again: its status, not a new order.
    fix.send("D", &limit("rest", 1, "1", 5, 150)).await;
    let status = fix.recv_app().await;
    assert_eq!((get(&status, 150), get(&status, 39), get(&status, 37)), ("I", "2", order_id.as_str()));

    // A restart of the FIX front end keeps sequence numbers, the sent messages and the
    // ClOrdIDs.
    let seq = fix.seq;
    drop(fix);
    tokio::time::sleep(Duration::from_millis(100)).await;
    exchange.stop_fix().await;
    exchange.start_fix().await;
    let (mut fix, logon) = relogon(&exchange, seq).await;
    assert!(get(&logon, 34).parse::<u64>().unwrap() >= logon_seq + 2, "{logon:?}");
    fix.send("D", &limit("rest", 1, "1", 5, 150)).await;
    let status = fix.recv_app().await;
    assert_eq!((get(&status, 150), get(&status, 39), get(&status, 14), get(&status, 6)), ("I", "2", "5", "150"));
    fix.send("2", &f(&[(7, &order_seq.to_string()), (16, &order_seq.to_string())])).await;
    let resent = fix.recv_app().await;
    assert_eq!((get(&resent, 11), get(&resent, 150), get(&resent, 43)), ("rest", "0", "Y"));
    let open = exchange.query(&exchange.admin).await.open_orders(bourse_engine::AccountId(1)).await.unwrap();
    assert!(open.orders.is_empty(), "no second order: {:?}", open.orders);

    // An order trades while the FIX front end is down: its upstream session is gone with
    // it, so the fill is learned from the exchange after the restart and resent.
    fix.send("D", &limit("rest2", 1, "1", 2, 150)).await;
    let new = fix.recv_app().await;
    assert_eq!(get(&new, 150), "0");
    let new_seq: u64 = get(&new, 34).parse().unwrap();
    let seq = fix.seq;
    drop(fix);
    tokio::time::sleep(Duration::from_millis(100)).await;
    exchange.stop_fix().await;
    assert_eq!(exchange.ioc(&exchange.alice, 0, bourse_engine::Side::Sell, 150, 2).await, 2);
    exchange.start_fix().await;
    let (mut fix, _) = relogon(&exchange, seq).await;
    fix.send("2", &f(&[(7, &(new_seq + 1).to_string()), (16, "0")])).await;
    let fill = loop {
        let message = fix.recv_app().await;
        if message.msg_type() == "8" {
            break message;
        }
    };
    assert_eq!(
        (get(&fill, 11), get(&fill, 150), get(&fill, 39), get(&fill, 14), get(&fill, 43)),
        ("rest2", "F", "2", "2", "Y")
    );
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logons_are_checked_and_reset_seq_num_starts_over() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    // An unknown key: Logout with the reason, then the end.
    let (mut fix, answer) = FixClient::logon(exchange.fix_addr, "EVE", "not-a-key", false).await;
    assert_eq!(answer.msg_type(), "5");
    assert!(get(&answer, 58).contains("unknown API key"), "{answer:?}");
    assert!(fix.closed(Duration::from_secs(3)).await);
    // No key at all.
    let mut fix = FixClient::connect(exchange.fix_addr, "EVE", 1).await;
    fix.send("A", &f(&[(98, "0"), (108, "30")])).await;
    assert!(get(&fix.recv().await, 58).contains("Password (554)"));
    // Another CompID than ours: closed without an answer.
    let mut fix = FixClient::connect(exchange.fix_addr, "EVE", 1).await;
    let mut logon = fix.message("A", 1, &f(&[(98, "0"), (108, "30"), (554, &exchange.alice)]));
    logon.set(56, "SOMEONE");
    fix.send_raw(&logon.encode()).await;
    assert!(fix.try_recv(Duration::from_secs(2)).await.is_none());
    // Something other than a Logon first: closed.
    let mut fix = FixClient::connect(exchange.fix_addr, "EVE", 1).await;
    fix.send("0", &[]).await;
    assert!(fix.closed(Duration::from_secs(3)).await);

    // A session, then a second connection for it while the first is on: refused.
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    fix.send("0", &[]).await;
    let (_second, answer) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    assert_eq!(answer.msg_type(), "5");
    // Another key cannot take over ALICE's session (and read its reports by resend).
    let (_third, answer) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.admin, false).await;
    assert_eq!(answer.msg_type(), "5");
    assert!(get(&answer, 58).contains("another API key"), "{answer:?}");
    drop(fix);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ResetSeqNumFlag: both sides start from 1 again.
    let (mut fix, answer) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, true).await;
    assert_eq!((answer.msg_type(), get(&answer, 34), get(&answer, 141)), ("A", "1", "Y"), "{:?}", get(&answer, 58));
    fix.send("1", &f(&[(112, "t")])).await;
    assert_eq!(get(&fix.recv().await, 34), "2");
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn market_data_is_a_snapshot_then_incremental_refreshes() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (mut fix, _) = FixClient::logon(exchange.fix_addr, "ALICE", &exchange.alice, false).await;
    fix.send("D", &limit("b", 1, "1", 3, 140)).await;
    assert_eq!(get(&fix.recv_app().await, 150), "0");
    // The gateway's market data follows the log a little behind the acknowledgement.
    let mut query = exchange.query(&exchange.alice).await;
    while query.l2(bourse_engine::SymbolId(0), 0).await.unwrap().bids.is_empty() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let request = f(&[
        (262, "md1"),
        (263, "1"),
        (264, "0"),
        (265, "1"),
        (267, "3"),
        (269, "0"),
        (269, "1"),
        (269, "2"),
        (146, "1"),
        (55, "ACME/USD"),
    ]);
    fix.send("V", &request).await;
    let snapshot = fix.recv_app().await;
    assert_eq!(
        (snapshot.msg_type(), get(&snapshot, 262), get(&snapshot, 55), get(&snapshot, 268)),
        ("W", "md1", "ACME/USD", "1")
    );
    assert_eq!((get(&snapshot, 269), get(&snapshot, 270), get(&snapshot, 271)), ("0", "140", "3"));
    // An offer appears, then trades part of the bid.
    // The ExecutionReport and the market data travel separately: either may come first.
    fix.send("D", &limit("s", 0, "2", 2, 150)).await;
    let (mut new, mut update) = (None, None);
    while new.is_none() || update.is_none() {
        let message = fix.recv_app().await;
        match message.msg_type() {
            "8" => new = Some(message),
            "X" => update = Some(message),
            other => panic!("unexpected {other}: {message:?}"),
        }
    }
    assert_eq!(get(&new.unwrap(), 150), "0");
    let update = update.unwrap();
    assert_eq!((get(&update, 279), get(&update, 269), get(&update, 270), get(&update, 271)), ("0", "1", "150", "2"));
    fix.send("D", &limit("hit", 0, "2", 1, 140)).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let message = fix.recv_app().await;
        if message.msg_type() == "X" {
            seen.push((
                get(&message, 279).to_owned(),
                get(&message, 269).to_owned(),
                get(&message, 270).to_owned(),
                get(&message, 271).to_owned(),
            ));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        vec![("0".into(), "2".into(), "140".into(), "1".into()), ("1".into(), "0".into(), "140".into(), "2".into())]
    );
    // Problems are MarketDataRequestReject with a reason.
    fix.send("V", &f(&[(262, "md2"), (263, "1"), (264, "0"), (267, "1"), (269, "0"), (146, "1"), (55, "NOPE")])).await;
    let reject = next_of(&mut fix, "Y").await;
    assert_eq!((get(&reject, 262), get(&reject, 281)), ("md2", "0"));
    exchange.stop().await;
}

async fn next_of(fix: &mut FixClient, msg_type: &str) -> Message {
    loop {
        let message = fix.recv_app().await;
        if message.msg_type() == msg_type {
            return message;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_gets_heartbeats_a_test_request_then_a_logout() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let mut fix = FixClient::connect(exchange.fix_addr, "QUIET", 1).await;
    fix.send("A", &f(&[(98, "0"), (108, "1"), (554, &exchange.alice)])).await;
    assert_eq!(fix.recv().await.msg_type(), "A");
    // Silent for 1.2 × HeartBtInt: a TestRequest; heartbeats when the server is idle.
    let started = std::time::Instant::now();
    let mut types = Vec::new();
    while let Some(message) = fix.try_recv(Duration::from_secs(5)).await {
        types.push(message.msg_type().to_owned());
        if message.msg_type() == "5" {
            assert!(get(&message, 58).contains("TestRequest"), "{message:?}");
            break;
        }
    }
    assert!(types.contains(&"1".to_string()), "{types:?}");
    assert!(types.contains(&"0".to_string()), "{types:?}");
    assert_eq!(types.last().map(String::as_str), Some("5"), "{types:?}");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(2_000) && waited < Duration::from_secs(5), "{waited:?}");
    assert!(fix.closed(Duration::from_secs(3)).await);

    // Answering TestRequests keeps a session alive.
    let mut fix = FixClient::connect(exchange.fix_addr, "QUIET", 2).await;
    fix.send("A", &f(&[(98, "0"), (108, "1"), (554, &exchange.alice)])).await;
    assert_eq!(fix.recv().await.msg_type(), "A");
    let until = std::time::Instant::now() + Duration::from_millis(3_500);
    while std::time::Instant::now() < until {
        let Some(message) = fix.try_recv(Duration::from_millis(500)).await else { continue };
        assert_ne!(message.msg_type(), "5", "logged out while answering: {message:?}");
        if message.msg_type() == "1" {
            let id = get(&message, 112).to_owned();
            fix.send("0", &f(&[(112, &id)])).await;
        }
    }
    exchange.stop().await;
}

/// The listener's limits hold before Logon: a connection that trickles its Logon a byte
/// at a time is closed once `first_request_timeout` has passed (the limit is on the
/// whole Logon, not each read), and no more than `connections_max` are served at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_limits_hold_before_logon() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = Exchange::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = bourse_fix::FixConfig::new("127.0.0.1:0".parse().unwrap(), Vec::new(), dir.path().to_path_buf());
    config.upstream = bourse_port::Upstream::InProcess(exchange.gateway.local());
    config.limits.first_request_timeout = Duration::from_millis(500);
    config.limits.connections_max = 2;
    let server = bourse_fix::FixServer::start(config).await.unwrap();

    // A byte every 100 ms: each read is quick, the Logon never completes.
    let mut slow = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let started = std::time::Instant::now();
    let closed = loop {
        if slow.write_all(b"8").await.is_err() {
            break true;
        }
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(100), slow.read(&mut byte)).await {
            Ok(Ok(0)) | Ok(Err(_)) => break true,
            _ => {}
        }
        if started.elapsed() > Duration::from_secs(5) {
            break false;
        }
    };
    assert!(closed, "the trickling connection is still open after 5 s");
    assert!(started.elapsed() < Duration::from_secs(3), "closed after {:?}", started.elapsed());

    // Two silent connections hold both slots: a third is not served (its Logon is not
    // read) until one of them times out and frees its slot.
    let _a = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let _b = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent = std::time::Instant::now();
    let (_carol, answer) = FixClient::logon(server.addr(), "CAROL", &exchange.alice, false).await;
    assert_eq!(answer.msg_type(), "A");
    assert!(sent.elapsed() >= Duration::from_millis(300), "answered after {:?}: a slot was free", sent.elapsed());
    server.shutdown().await;
    exchange.stop().await;
}

/// A counterparty that stops reading: its reports fill the socket, then its queue
/// (`outbox_max`), and the session is ended as too slow, while another session on the
/// same front end trades on (the write that waits for the slow socket waits in that
/// connection's writer, never in the task that turns its events into reports). The
/// slow connection ends once it is drained, its messages gapless and in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_ended_and_others_trade_on() {
    use tokio::io::AsyncWriteExt;
    let exchange = Exchange::start().await;
    exchange.market().await;
    let dir = tempfile::tempdir().unwrap();
    let mut config = bourse_fix::FixConfig::new("127.0.0.1:0".parse().unwrap(), Vec::new(), dir.path().to_path_buf());
    config.upstream = bourse_port::Upstream::InProcess(exchange.gateway.local());
    config.outbox_max = 16;
    let server = bourse_fix::FixServer::start(config).await.unwrap();

    let mut slow = FixClient::connect_small(server.addr(), "SLOW", 1).await;
    slow.send("A", &f(&[(98, "0"), (108, "30"), (554, &exchange.alice), (141, "Y")])).await;
    assert_eq!(slow.recv().await.msg_type(), "A");
    // Orders that rest (a cent a share, far below the book), written without reading.
    const ORDERS: usize = 4_000;
    let mut wire = Vec::new();
    for i in 0..ORDERS {
        let seq = slow.seq;
        slow.seq += 1;
        wire.extend(slow.message("D", seq, &limit(&format!("s{i}"), 0, "1", 1, 1)).encode());
    }
    // The server stops reading once it ends the session: the rest may never be taken.
    let _ = tokio::time::timeout(Duration::from_secs(10), slow.stream.write_all(&wire)).await;

    // Meanwhile another session trades: an order and its report, promptly.
    let (mut other, answer) = FixClient::logon(server.addr(), "OTHER", &exchange.alice, true).await;
    assert_eq!(answer.msg_type(), "A");
    other.send("D", &limit("o1", 1, "1", 1, 1)).await;
    let report = other.recv_app().await;
    assert_eq!((report.msg_type(), get(&report, 11), get(&report, 39)), ("8", "o1", "0"));

    // The slow session was ended: what it was sent drains, then the connection closes.
    let mut seqs = Vec::new();
    while let Some(message) = slow.try_recv(Duration::from_secs(5)).await {
        seqs.push(message.get_u64(34).unwrap().unwrap());
    }
    assert!(seqs.len() > 1, "nothing was sent after the Logon");
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "sent out of order or with gaps");
    assert!(slow.closed(Duration::from_secs(5)).await, "the slow session was not ended");
    server.shutdown().await;
    exchange.stop().await;
}

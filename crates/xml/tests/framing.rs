//! Framing and document errors in both reply framings (spec section 2.4), with the
//! connection behaviour each one calls for; pipelining, timeouts and the connection
//! bound (section 11). A request-level error changes nothing.

mod support;

use std::time::Duration;

use support::{frame, read_framed, request_error, results, Exchange2, Options};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn small_limits() -> Options {
    Options {
        xml: |config| {
            config.limits.request_bytes_max = 1_000;
            config.max_children = 3;
            config.limits.idle_timeout = Duration::from_millis(400);
            config.limits.io_timeout = Duration::from_millis(400);
            config.limits.connections_max = 4;
        },
        ..Options::default()
    }
}

/// Sends `bytes` (without closing) and reads everything until the server closes.
async fn exchange_raw(addr: std::net::SocketAddr, bytes: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply))
        .await
        .expect("the server closes")
        .unwrap();
    reply
}

fn framed_bytes(document: &str) -> Vec<u8> {
    frame(document.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn framing_errors_are_answered_and_close_the_connection_in_both_framings() {
    let x = Exchange2::start_with(small_limits()).await;
    let cases: [(&[u8], Option<&str>); 9] = [
        (b"abc\n<create/>", Some("Malformed length line")),
        (b"\n<create/>", Some("Malformed length line")),
        (b"\r\n", Some("Malformed length line")),
        (b"-9\n<create/>", Some("Malformed length line")),
        (b" 9\n<create/>", Some("Malformed length line")),
        (b"000000000000000000009\n<create/>", Some("Malformed length line")),
        // Too large: answered at once, the body is never read (none is sent).
        (b"1001\n", Some("Request too large")),
        (b"99999999999999999\n", Some("Request too large")),
        // The peer stops before N bytes arrived (the write side is closed below).
        (b"20\n<create/>", None),
    ];
    for (bytes, text) in cases {
        for framed in [false, true] {
            let addr = if framed { x.framed.addr() } else { x.bare.addr() };
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(bytes).await.unwrap();
            if text.is_none() {
                stream.shutdown().await.unwrap();
            }
            let mut reply = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply)).await.unwrap().unwrap();
            let expected = match (text, framed) {
                (None, _) => Vec::new(),
                (Some(text), false) => request_error(text).into_bytes(),
                (Some(text), true) => framed_bytes(&request_error(text)),
            };
            assert_eq!(
                String::from_utf8_lossy(&reply),
                String::from_utf8_lossy(&expected),
                "{bytes:?} framed {framed}"
            );
        }
    }
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_answered_and_keep_a_length_prefixed_connection_open() {
    let x = Exchange2::start_with(small_limits()).await;
    let too_many = "<create><account id=\"1\" balance=\"1\"/><account id=\"2\" balance=\"1\"/>\
                    <account id=\"3\" balance=\"1\"/><account id=\"4\" balance=\"1\"/></create>";
    let cases = [
        ("", "Malformed XML"),
        ("<create>", "Malformed XML"),
        ("<create></transactions>", "Malformed XML"),
        ("not xml at all", "Malformed XML"),
        ("<!DOCTYPE create [<!ENTITY a \"aaaaaaaaaa\">]><create>&a;</create>", "Malformed XML"),
        ("<!DOCTYPE create SYSTEM \"file:///etc/passwd\"><create/>", "Malformed XML"),
        ("<order sym=\"A\" amount=\"1\" limit=\"1\"/>", "Unknown root element: order"),
        ("<results/>", "Unknown root element: results"),
        (too_many, "Too many children"),
        ("<transactions id=\"1\"/>", "Empty transactions"),
        ("<transactions><query id=\"1\"/></transactions>", "Missing attribute: id"),
    ];
    let mut framed = x.connect().await;
    for (body, text) in cases {
        assert_eq!(framed.request(body).await, request_error(text), "{body:?}");
        assert_eq!(x.bare(body).await, request_error(text), "{body:?} bare");
    }
    // The framed connection is still open and in step; nothing above was executed.
    let reply = framed.request("<create><account id=\"1\" balance=\"1\"/></create>").await;
    assert_eq!(reply, results(&["  <created id=\"1\"/>"]), "account 1 of the refused request was never made");
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_requests_are_answered_in_order_and_bare_mode_discards_what_follows() {
    let x = Exchange2::start().await;
    let mut stream = TcpStream::connect(x.framed.addr()).await.unwrap();
    let mut bytes = Vec::new();
    for id in 1..=5 {
        bytes.extend(frame(format!("<create><account id=\"{id}\" balance=\"{id}\"/></create>").as_bytes()));
    }
    // A length line may end in CR LF.
    bytes.extend(b"9\r\n<create/>");
    stream.write_all(&bytes).await.unwrap();
    for id in 1..=5 {
        let reply = read_framed(&mut stream).await.unwrap();
        assert_eq!(reply, results(&[&format!("  <created id=\"{id}\"/>")]));
    }
    assert_eq!(read_framed(&mut stream).await.unwrap(), results(&[]));
    drop(stream);

    // Bare: one request per connection; what the client sends after the body is
    // discarded and cannot reset the connection before the reply is read.
    let mut bytes = frame(b"<create><account id=\"6\" balance=\"1\"/></create>");
    bytes.extend(frame(b"<create><account id=\"7\" balance=\"1\"/></create>"));
    bytes.extend(vec![b'x'; 100_000]);
    let reply = exchange_raw(x.bare.addr(), &bytes).await;
    assert_eq!(String::from_utf8(reply).unwrap(), results(&["  <created id=\"6\"/>"]));
    assert_eq!(x.bare("<create><account id=\"7\" balance=\"1\"/></create>").await, results(&["  <created id=\"7\"/>"]));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_and_read_timeouts_close_without_a_reply() {
    let x = Exchange2::start_with(small_limits()).await;
    for addr in [x.bare.addr(), x.framed.addr()] {
        // Nothing sent: closed after the idle timeout.
        let started = std::time::Instant::now();
        assert!(exchange_raw(addr, b"").await.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(350), "{:?}", started.elapsed());
        // Half a request: closed after the read timeout, unanswered.
        assert!(exchange_raw(addr, b"50\n<create").await.is_empty());
        assert!(exchange_raw(addr, b"5").await.is_empty());
    }
    // Between requests on a kept-open connection, the idle timeout applies.
    let mut framed = x.connect().await;
    assert_eq!(framed.request("<create/>").await, results(&[]));
    assert!(framed.closed().await);
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_bound_wait_to_be_served() {
    let mut options = small_limits();
    options.xml = |config| {
        config.limits.connections_max = 2;
    };
    let x = Exchange2::start_with(options).await;
    let mut first = x.connect().await;
    let mut second = x.connect().await;
    assert_eq!(first.request("<create/>").await, results(&[]));
    assert_eq!(second.request("<create/>").await, results(&[]));
    let mut third = x.connect().await;
    third.send("<create/>").await;
    let waited = tokio::time::timeout(Duration::from_millis(300), read_framed(&mut third.stream)).await;
    assert!(waited.is_err(), "a third connection is not served while two are open");
    drop(first);
    assert_eq!(third.receive().await, results(&[]));
    assert_eq!(second.request("<create/>").await, results(&[]));
    x.stop().await;
}

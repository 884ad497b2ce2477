//! HTTPS and WSS: the REST API and the WebSocket over TLS with a certificate from a CA,
//! verified by a client that trusts that CA only; a client that does not trust it, or
//! that speaks plain HTTP to the TLS port, gets nothing from the API.

mod support;

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::{limit, Exchange};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_and_websocket_over_tls() {
    let exchange = Exchange::start_tls().await;
    exchange.market().await;
    let alice = exchange.client(&exchange.alice);
    let placed = alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 5, 150))).await;
    let id = placed["id"].as_u64().expect("an order id");
    let got = alice.expect(200, "GET", &format!("/v1/orders/{id}"), None).await;
    assert_eq!(got["status"], "open", "{got}");

    // WSS: the upgrade and the frames over the same TLS connection.
    let addr = exchange.http.addr();
    let stream = support::connect(addr, exchange.tls.as_ref()).await.unwrap();
    let url = format!("wss://127.0.0.1:{}/v1/ws?api_key={}", addr.port(), exchange.alice);
    let (mut socket, _) = tokio_tungstenite::client_async(url, stream).await.expect("the WebSocket upgrade over TLS");
    let subscribe = json!({"op": "subscribe", "channels": ["trades"], "symbols": ["ACME/USD"]});
    socket.send(Message::Text(subscribe.to_string().into())).await.unwrap();
    next(&mut socket, "subscribed").await;
    alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 2, 150))).await;
    let trade = next(&mut socket, "trade").await;
    assert_eq!((trade["qty"].as_i64(), trade["px"].as_i64()), (Some(2), Some(150)), "{trade}");

    // A client that trusts another CA: no handshake, so no request is read.
    let other = tempfile::tempdir().unwrap();
    let (_, other_ca) = support::edge_certificate(other.path());
    let stranger = support::client_tls(&other_ca);
    let refused = support::connect(addr, Some(&stranger)).await;
    assert!(refused.is_err(), "a certificate from another CA is refused by the client");

    // Plain HTTP to the TLS port: no HTTP answer, only a TLS alert or a closed socket.
    let mut plain = tokio::net::TcpStream::connect(addr).await.unwrap();
    plain.write_all(b"GET /v1/health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), plain.read_to_end(&mut answer)).await;
    assert!(!answer.starts_with(b"HTTP/"), "plaintext got an HTTP answer: {:?}", String::from_utf8_lossy(&answer));

    exchange.stop().await;
}

type Socket = tokio_tungstenite::WebSocketStream<Box<dyn support::Stream>>;

/// The next message of type `kind` (others are skipped), within 10 s.
async fn next(socket: &mut Socket, kind: &str) -> Value {
    let wait = async {
        while let Some(message) = socket.next().await {
            if let Message::Text(text) = message.unwrap() {
                let value: Value = serde_json::from_str(&text).unwrap();
                if value["type"] == kind {
                    return value;
                }
            }
        }
        panic!("the WebSocket closed");
    };
    tokio::time::timeout(Duration::from_secs(10), wait).await.expect("the message within 10 s")
}

//! The WebSocket: an L2 book rebuilt from a snapshot and sequenced updates, a lost
//! update detected by its sequence number and recovered by subscribing again, trades,
//! BBO and the key's own order events (an expiry at the close of the trading day too).

mod support;

use std::collections::BTreeMap;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use support::{limit, Exchange};
use tokio_tungstenite::tungstenite::Message;

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// A WebSocket client that checks the connection's `seq` as it reads.
struct Ws {
    socket: Socket,
    seq: u64,
}

impl Ws {
    async fn connect(exchange: &Exchange, key: &str) -> Ws {
        let url = format!("ws://{}/v1/ws?api_key={key}", exchange.http.addr());
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        Ws { socket, seq: 0 }
    }

    async fn send(&mut self, request: Value) {
        self.socket.send(Message::Text(request.to_string().into())).await.unwrap();
    }

    async fn next(&mut self) -> Value {
        loop {
            let message = tokio::time::timeout(Duration::from_secs(10), self.socket.next())
                .await
                .expect("a message within 10 s")
                .expect("the socket is open")
                .unwrap();
            if let Message::Text(text) = message {
                let value: Value = serde_json::from_str(&text).unwrap();
                self.seq += 1;
                assert_eq!(value["seq"], self.seq, "the connection's seq has no gap: {value}");
                if value["type"] != "heartbeat" {
                    return value;
                }
            }
        }
    }

    /// Reads until a message of `kind` arrives, handing the others to `other`.
    async fn until(&mut self, kind: &str, mut other: impl FnMut(&Value)) -> Value {
        loop {
            let value = self.next().await;
            if value["type"] == kind {
                return value;
            }
            other(&value);
        }
    }
}

/// A subscriber's L2 book.
#[derive(Default, Debug, PartialEq)]
struct Book {
    bids: BTreeMap<i64, i64>,
    asks: BTreeMap<i64, i64>,
    symbol_seq: u64,
}

impl Book {
    fn from_snapshot(snapshot: &Value) -> Book {
        let side = |levels: &Value| {
            levels.as_array().unwrap().iter().map(|l| (l["px"].as_i64().unwrap(), l["qty"].as_i64().unwrap())).collect()
        };
        Book {
            bids: side(&snapshot["bids"]),
            asks: side(&snapshot["asks"]),
            symbol_seq: snapshot["symbol_seq"].as_u64().unwrap(),
        }
    }

    /// Applies an update; false when it does not follow the last one (a gap).
    fn apply(&mut self, update: &Value) -> bool {
        let seq = update["symbol_seq"].as_u64().unwrap();
        if seq <= self.symbol_seq {
            return true;
        }
        if seq != self.symbol_seq + 1 {
            return false;
        }
        self.symbol_seq = seq;
        let side = if update["side"] == "buy" { &mut self.bids } else { &mut self.asks };
        let (px, qty) = (update["px"].as_i64().unwrap(), update["qty"].as_i64().unwrap());
        if qty == 0 {
            side.remove(&px);
        } else {
            side.insert(px, qty);
        }
        true
    }

    fn matches(&self, rest: &Value) -> bool {
        let side = |levels: &Value| -> BTreeMap<i64, i64> {
            levels.as_array().unwrap().iter().map(|l| (l["px"].as_i64().unwrap(), l["qty"].as_i64().unwrap())).collect()
        };
        self.bids == side(&rest["bids"]) && self.asks == side(&rest["asks"])
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn l2_gaps_are_detected_and_a_new_subscription_resynchronizes() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let alice = exchange.client(&exchange.alice);
    alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 5, 150))).await;
    alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 5, 140))).await;

    let subscribe = json!({"op": "subscribe", "channels": ["l2", "trades", "bbo", "orders"], "symbols": ["ACME/USD"]});
    // Market data is released by the gateway a hold time after the commit (and passes
    // the REST server's follower): a socket opened at once may see a book without the
    // two orders yet, so open one until its snapshot has them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let (mut ws, mut book) = loop {
        let mut ws = Ws::connect(&exchange, &exchange.alice).await;
        ws.send(subscribe.clone()).await;
        let subscribed = ws.next().await;
        assert_eq!((subscribed["type"].as_str(), &subscribed["symbols"]), (Some("subscribed"), &json!([0])));
        let book = Book::from_snapshot(&ws.until("l2_snapshot", |_| {}).await);
        if book.asks == BTreeMap::from([(150, 5)]) && book.bids == BTreeMap::from([(140, 5)]) {
            break (ws, book);
        }
        assert!(std::time::Instant::now() < deadline, "the snapshot never showed the two orders: {book:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };

    // New orders: one rests, one trades against the ask.
    let resting = alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 3, 141))).await;
    alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 2, 150))).await;

    // Lose the first update on purpose: the next one shows the gap.
    let mut events = Vec::new();
    let lost = ws.until("l2_update", |v| events.push(v.clone())).await;
    let mut gap_seen = false;
    while !gap_seen {
        let update = ws.until("l2_update", |v| events.push(v.clone())).await;
        gap_seen = !book.apply(&update);
    }
    assert!(lost["symbol_seq"].as_u64().unwrap() == book.symbol_seq + 1, "the lost update was the one missing");

    // Resynchronize: subscribe again, start from the new snapshot.
    ws.send(subscribe).await;
    ws.until("subscribed", |v| events.push(v.clone())).await;
    let snapshot = ws.until("l2_snapshot", |v| events.push(v.clone())).await;
    book = Book::from_snapshot(&snapshot);
    alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 1, 142))).await;
    loop {
        let rest = alice.expect(200, "GET", "/v1/books/ACME%2FUSD", None).await;
        if book.matches(&rest) && book.bids.contains_key(&142) {
            break;
        }
        let update = ws.until("l2_update", |v| events.push(v.clone())).await;
        assert!(book.apply(&update), "no gap after the resync");
    }
    assert_eq!(book.asks, BTreeMap::from([(150, 3)]));

    // Trades, BBO and alice's own order events came too.
    let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert!(kinds.contains(&"trade"), "{kinds:?}");
    assert!(kinds.contains(&"bbo"), "{kinds:?}");
    let order_events: Vec<&Value> = events.iter().filter(|e| e["type"] == "order").collect();
    assert!(order_events.iter().any(|e| e["event"] == "accepted" && e["order"] == resting["id"]), "{order_events:?}");
    assert!(order_events.iter().any(|e| e["event"] == "fill" && e["px"] == 150), "{order_events:?}");
    exchange.stop().await;
}

/// A Day order placed through this server expires at the close of the trading day (an
/// operator's command, on another key): the owner's socket gets the cancellation with
/// reason `expired`, and the book update that takes it out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_day_order_is_reported_to_its_owner() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let alice = exchange.client(&exchange.alice);
    let mut ws = Ws::connect(&exchange, &exchange.alice).await;
    ws.send(json!({"op": "subscribe", "channels": ["l2", "orders"], "symbols": ["ACME/USD"]})).await;
    ws.until("l2_snapshot", |_| {}).await;
    let mut day = limit(0, "sell", 5, 150);
    day["tif"] = json!("day");
    let id = alice.expect(201, "POST", "/v1/orders", Some(day)).await["id"].clone();
    let closed = exchange.client(&exchange.admin).expect(200, "POST", "/v1/admin/close-day", None).await;
    assert_eq!(closed["expired"], 1);

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let expiry = loop {
        let message = tokio::time::timeout_at(deadline, ws.next()).await;
        let message = message.unwrap_or_else(|_| panic!("no cancellation within 10 s; saw {seen:?}"));
        if message["type"] == "order" && message["event"] == "cancelled" {
            break message;
        }
        seen.push(message);
    };
    assert_eq!(
        (&expiry["order"], expiry["qty_cancelled"].as_i64(), expiry["reason"].as_str()),
        (&id, Some(5), Some("expired"))
    );
    assert_eq!(expiry["log_index"], closed["log_index"]);
    assert!(seen.iter().any(|m| m["type"] == "order" && m["event"] == "accepted" && m["order"] == id), "{seen:?}");
    // The ask leaves the book: its level goes to 0.
    let gone = async {
        while !seen.iter().any(|m| m["type"] == "l2_update" && m["px"] == 150 && m["qty"] == 0) {
            seen.push(ws.next().await);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), gone).await.expect("the ask's level goes to 0 within 10 s");
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_an_error_and_bad_keys_no_socket() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let mut ws = Ws::connect(&exchange, &exchange.alice).await;
    ws.send(json!({"op": "dance"})).await;
    let error = ws.next().await;
    assert_eq!((error["type"].as_str(), error["name"].as_str()), (Some("error"), Some("invalid_body")));
    ws.send(json!({"op": "subscribe", "channels": ["trades"], "symbols": ["NOPE/USD"]})).await;
    let error = ws.next().await;
    assert_eq!((error["type"].as_str(), error["code"].as_u64()), (Some("error"), Some(3)));
    // The connection still serves.
    ws.send(json!({"op": "subscribe", "channels": ["trades"], "symbols": []})).await;
    assert_eq!(ws.next().await["type"], "subscribed");

    let url = format!("ws://{}/v1/ws?api_key=not-a-key", exchange.http.addr());
    let refused = tokio_tungstenite::connect_async(url).await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("an unknown key must get 401, got {other:?}"),
    }
    exchange.stop().await;
}

//! The REST API against a real node and gateway: trading round trips, typed errors,
//! the key's permissions, and concurrent clients whose connections drop.

mod support;

use serde_json::json;
use support::{limit, Exchange};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_trade_rest_and_are_cancelled_moved_and_reduced() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let alice = exchange.client(&exchange.alice);

    let sell = alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 10, 150))).await;
    let sell_id = sell["id"].as_u64().unwrap();
    assert!(sell["log_index"].as_u64().unwrap() > 0);
    let buy = alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 4, 151))).await;
    let buy_id = buy["id"].as_u64().unwrap();

    // The buy traded 4 at the resting price; the sell rests with 6.
    let book = alice.expect(200, "GET", "/v1/books/ACME%2FUSD", None).await;
    assert_eq!(book["asks"], json!([{"px": 150, "qty": 6}]));
    assert_eq!(book["bids"], json!([]));
    assert_eq!(book["last_px"], 150);
    let by_id = alice.expect(200, "GET", "/v1/books/0?levels=1", None).await;
    assert_eq!(by_id["asks"], book["asks"]);

    let order = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}"), None).await;
    assert_eq!(order["status"], "open");
    assert_eq!(order["qty_filled"], 4);
    assert_eq!(order["qty_open"], 6);
    assert_eq!(order["px_resting"], 150);
    let fills = alice.expect(200, "GET", &format!("/v1/orders/{buy_id}/fills"), None).await;
    assert_eq!(fills["fills"].as_array().unwrap().len(), 1);
    assert_eq!(fills["fills"][0]["px"], 150);
    assert_eq!(fills["fills"][0]["qty"], 4);
    assert_eq!(fills["fills"][0]["fee"], 4, "the taker fee is 1 cent a share");
    assert_eq!(fills["fills"][0]["maker"], false);

    // Balances: the buyer paid 4 × 150 + 4 in fees; the seller got 600 and 4 shares left.
    let buyer = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    let usd = |balances: &serde_json::Value| {
        balances["balances"].as_array().unwrap().iter().find(|b| b["asset_name"] == "USD").cloned().unwrap()
    };
    assert_eq!(usd(&buyer)["available"], 1_000_000 - 604);
    let seller = alice.expect(200, "GET", "/v1/accounts/0/balances", None).await;
    assert_eq!(usd(&seller)["available"], 1_000_000 + 600);

    // The trade is in the recent trades (the server follows the trades channel).
    let mut trades = serde_json::Value::Null;
    for _ in 0..100 {
        trades = alice.expect(200, "GET", "/v1/trades/ACME%2FUSD", None).await;
        if !trades["trades"].as_array().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(trades["trades"][0]["px"], 150);
    assert_eq!(trades["trades"][0]["qty"], 4);
    assert_eq!(trades["trades"][0]["taker_side"], "buy");

    // Reduce keeps the order; move reprices it; cancel ends it.
    alice.expect(200, "POST", &format!("/v1/orders/{sell_id}/reduce"), Some(json!({"qty_by": 2}))).await;
    alice.expect(200, "POST", &format!("/v1/orders/{sell_id}/move"), Some(json!({"px": 160}))).await;
    let moved = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}"), None).await;
    assert_eq!((moved["qty_open"].as_i64(), moved["px_resting"].as_i64()), (Some(4), Some(160)));
    let open = alice.expect(200, "GET", "/v1/accounts/0/orders", None).await;
    assert_eq!(open["orders"].as_array().unwrap().len(), 1);
    alice.expect(200, "DELETE", &format!("/v1/orders/{sell_id}"), None).await;
    let cancelled = alice.expect(200, "GET", &format!("/v1/orders/{sell_id}"), None).await;
    assert_eq!(cancelled["status"], "cancelled");
    let open = alice.expect(200, "GET", "/v1/accounts/0/orders", None).await;
    assert_eq!(open["orders"], json!([]));

    // Market buy with a budget, stop-limit pending.
    alice.expect(201, "POST", "/v1/orders", Some(limit(0, "sell", 5, 170))).await;
    let market = json!({"account": 1, "symbol": "ACME/USD", "side": "buy", "type": "market", "qty": 2, "budget": 400});
    let market = alice.expect(201, "POST", "/v1/orders", Some(market)).await;
    let market = alice.expect(200, "GET", &format!("/v1/orders/{}", market["id"]), None).await;
    assert_eq!((market["status"].as_str(), market["qty_filled"].as_i64()), (Some("filled"), Some(2)));
    let stop = json!({"account": 1, "symbol": "ACME/USD", "side": "buy", "type": "stop_limit", "qty": 1,
        "trigger": 500, "px": 500});
    let stop = alice.expect(201, "POST", "/v1/orders", Some(stop)).await;
    let stop = alice.expect(200, "GET", &format!("/v1/orders/{}", stop["id"]), None).await;
    assert_eq!(stop["status"], "pending");
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_are_typed_and_change_nothing() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let alice = exchange.client(&exchange.alice);
    let code = |value: &serde_json::Value| (value["error"]["code"].as_u64().unwrap(), value["error"]["name"].clone());

    // The engine's rejection, with its stable code and name.
    let (status, body) = alice.request("POST", "/v1/orders", Some(limit(1, "buy", 1_000_000, 151))).await;
    assert_eq!((status, code(&body)), (422, (13, json!("balance_insufficient"))));
    let (status, body) = alice.request("POST", "/v1/orders", Some(limit(0, "sell", 1, 0))).await;
    assert_eq!((status, code(&body).1), (422, json!("px_out_of_bounds")));
    // The gateway's refusal: alice does not own account 5.
    let (status, body) = alice.request("POST", "/v1/orders", Some(limit(5, "buy", 1, 151))).await;
    assert_eq!((status, code(&body)), (403, (1004, json!("not_authorized"))));
    let (status, _) = alice.request("GET", "/v1/accounts/5/balances", None).await;
    assert_eq!(status, 403);
    // Nor may she create accounts.
    let (status, body) = alice.request("POST", "/v1/accounts", None).await;
    assert_eq!((status, code(&body).0), (403, 1004));
    // Unknown names and ids.
    let (status, body) = alice.request("GET", "/v1/books/NOPE%2FUSD", None).await;
    assert_eq!((status, code(&body)), (404, (3, json!("symbol_unknown"))));
    let (status, body) = alice.request("GET", "/v1/orders/999", None).await;
    assert_eq!((status, code(&body).1), (404, json!("not_found")));
    // Malformed requests.
    let (status, body) = alice.raw("POST", "/v1/orders", Some("{not json".into())).await;
    assert_eq!((status, code(&body)), (400, (2000, json!("invalid_body"))));
    let no_px = json!({"account": 0, "symbol": "ACME/USD", "side": "sell", "type": "limit", "qty": 1});
    let (status, body) = alice.request("POST", "/v1/orders", Some(no_px)).await;
    assert_eq!((status, code(&body).1), (400, json!("invalid_parameter")));
    assert!(body["error"]["message"].as_str().unwrap().contains("px is required"));
    // An enum value the API does not define, or a number out of its type's range, is
    // refused with what was wrong: never read as some default.
    let order = |field: &str, value: serde_json::Value| {
        let mut body = limit(1, "buy", 1, 151);
        body[field] = value;
        body
    };
    for (field, value, says) in [
        ("side", json!("sideways"), "unknown variant `sideways`"),
        ("type", json!("iceberg"), "unknown variant `iceberg`"),
        ("tif", json!("gtd"), "unknown variant `gtd`"),
        ("stp", json!("sometimes"), "unknown variant `sometimes`"),
        ("account", json!(4_294_967_296_u64), "invalid value"),
        ("qty", json!("1"), "invalid type"),
    ] {
        let (status, body) = alice.request("POST", "/v1/orders", Some(order(field, value))).await;
        assert_eq!((status, code(&body)), (400, (2000, json!("invalid_body"))), "{field}: {body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{field}: {message}");
    }
    // A body past the listener's cap (2 MiB) is refused, not read on.
    let (status, body) = alice.raw("POST", "/v1/orders", Some("x".repeat(3 << 20))).await;
    assert_eq!((status, code(&body).0), (400, 2000));
    assert!(body["error"]["message"].as_str().unwrap().contains("length limit exceeded"), "{body}");
    let (status, _) = alice.request("GET", "/v1/orders/not-a-number", None).await;
    assert_eq!(status, 400);
    let (status, _) = alice.request("GET", "/v1/books/0?levels=0", None).await;
    assert_eq!(status, 400);
    // A key the gateway does not know, and no key at all.
    let stranger = support::Http { addr: exchange.http.addr(), key: Some("not-a-key".into()), tls: None };
    let (status, body) = stranger.request("GET", "/v1/symbols", None).await;
    assert_eq!((status, code(&body).1), (401, json!("unauthenticated")));
    let nobody = support::Http { addr: exchange.http.addr(), key: None, tls: None };
    assert_eq!(nobody.request("GET", "/v1/symbols", None).await.0, 401);
    // A key in the URL is taken on the WebSocket upgrade only (tests/websocket.rs).
    let (status, body) = nobody.request("GET", &format!("/v1/symbols?api_key={}", exchange.alice), None).await;
    assert_eq!(status, 401);
    assert!(body["error"]["message"].as_str().unwrap().contains("only on /v1/ws"), "{body}");

    // None of it changed anything: no order, balances as deposited.
    let open = alice.expect(200, "GET", "/v1/accounts/1/orders", None).await;
    assert_eq!(open["orders"], json!([]));
    let balances = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    assert_eq!(balances["balances"][0]["available"], 1_000_000);
    assert_eq!(balances["balances"][0]["reserved"], 0);
    exchange.stop().await;
}

/// Many clients place orders at once; some drop their connection before the answer.
/// Every order that was acknowledged exists, exactly as placed, and nothing was placed
/// twice: reservations equal the open orders' holds exactly.
///
/// The REST API takes no client order id, so each request carries its own: a price no
/// other request has. Nothing sells, so every order the exchange accepted rests, and
/// the account's open orders are all of them: each price then appears at most once,
/// exactly once for an acknowledged request (with the id it was acknowledged with),
/// and never one that was not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_and_dropped_connections_lose_no_acknowledged_order() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let clients = 16;
    let orders_each = 20;
    // The price that names request `i` of `client`.
    let px_of = move |client: usize, i: usize| (1_000 + client * orders_each + i) as i64;
    let mut tasks = Vec::new();
    for client in 0..clients {
        let http = exchange.client(&exchange.alice);
        tasks.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for i in 0..orders_each {
                let px = px_of(client, i);
                let body = limit(1, "buy", 1, px);
                if (client + i) % 7 == 0 {
                    // Drop the connection before the answer can arrive.
                    let request = http.request("POST", "/v1/orders", Some(body));
                    let _ = tokio::time::timeout(std::time::Duration::from_micros(200), request).await;
                    continue;
                }
                let (status, value) = http.request("POST", "/v1/orders", Some(body)).await;
                assert_eq!(status, 201, "{value}");
                acknowledged.push((px, value["id"].as_u64().unwrap()));
            }
            acknowledged
        }));
    }
    let mut acknowledged = std::collections::BTreeMap::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    let sent: std::collections::BTreeSet<i64> =
        (0..clients).flat_map(|client| (0..orders_each).map(move |i| px_of(client, i))).collect();
    assert_eq!(sent.len(), clients * orders_each, "every request has a price of its own");
    assert!(acknowledged.len() > sent.len() / 2 && acknowledged.len() < sent.len(), "some requests were dropped");
    // Let dropped requests that still reached the exchange finish.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let alice = exchange.client(&exchange.alice);
    let open = alice.expect(200, "GET", "/v1/accounts/1/orders", None).await;
    let open = open["orders"].as_array().unwrap();
    let mut placed: std::collections::BTreeMap<i64, Vec<u64>> = std::collections::BTreeMap::new();
    for order in open {
        let px = order["px"].as_i64().unwrap();
        assert!(sent.contains(&px), "an order that no request asked for: {order}");
        assert_eq!((order["side"].as_str(), order["qty_open"].as_i64()), (Some("buy"), Some(1)), "{order}");
        placed.entry(px).or_default().push(order["id"].as_u64().unwrap());
    }
    for (px, ids) in &placed {
        assert_eq!(ids.len(), 1, "the request of price {px} was placed {} times: orders {ids:?}", ids.len());
    }
    for (px, id) in &acknowledged {
        assert_eq!(placed.get(px), Some(&vec![*id]), "acknowledged order {id} (price {px}) is not there once");
    }
    // The open orders are every order there is: ids are given out one by one from 1, and
    // this exchange has no others, so they are 1..=n and order n + 1 does not exist.
    let mut ids: Vec<u64> = placed.values().flatten().copied().collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "no order of the account is done or elsewhere");
    let (status, _) = alice.request("GET", &format!("/v1/orders/{}", ids.len() + 1), None).await;
    assert_eq!(status, 404, "an order beyond the open ones exists");
    let held: i64 = open.iter().map(|o| o["px"].as_i64().unwrap() + 1).sum();
    let balances = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    let usd = &balances["balances"][0];
    assert_eq!(usd["reserved"].as_i64().unwrap(), held, "reserved equals the open orders' holds");
    assert_eq!(usd["available"].as_i64().unwrap() + held, 1_000_000);
    exchange.stop().await;
}

/// Routes the router serves that the document leaves out, and why: the document itself,
/// and the WebSocket upgrade (OpenAPI 3 cannot describe one; its messages are the `Ws*`
/// schemas).
const UNDOCUMENTED: &[(&str, &str)] = &[("GET", "/openapi.json"), ("GET", "/v1/ws")];

/// The document and the router agree route for route: what `api::router` registers is
/// documented (but for [`UNDOCUMENTED`]), what is documented is registered, and asking
/// the running server for each documented route and method reaches a handler (no 404
/// from the router's fallback, no 405), while every other method of a documented path
/// is 405 and an unknown path the fallback's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route() {
    let exchange = Exchange::start().await;
    let nobody = support::Http { addr: exchange.http.addr(), key: None, tls: None };
    let doc = nobody.expect(200, "GET", "/openapi.json", None).await;
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for schema in ["PlaceOrder", "ErrorBody", "WsMessage", "WsRequest"] {
        assert!(doc["components"]["schemas"][schema].is_object(), "{schema} is documented");
    }
    let methods = ["GET", "POST", "PUT", "DELETE", "PATCH"];
    let mut documented = std::collections::BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            let method = method.to_ascii_uppercase();
            assert!(methods.contains(&method.as_str()), "{method} {path}: a method this test does not probe");
            documented.insert((method, path.clone()));
        }
    }
    let registered = registered_routes();
    let undocumented: std::collections::BTreeSet<_> =
        UNDOCUMENTED.iter().map(|(method, path)| (method.to_string(), path.to_string())).collect();
    assert!(undocumented.is_subset(&registered), "UNDOCUMENTED names a route the router no longer has");
    let served: std::collections::BTreeSet<_> = registered.difference(&undocumented).cloned().collect();
    let missing: Vec<_> = served.difference(&documented).collect();
    assert!(missing.is_empty(), "routes the router serves that /openapi.json leaves out: {missing:?}");
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(unserved.is_empty(), "routes /openapi.json documents that the router does not register: {unserved:?}");

    // The running server, route by route (without a key: nothing is done, and the
    // routes whose service this server lacks answer their own 404). The router's own
    // answers: 405 with no body, and its fallback's 404 `no such route`.
    let addr = exchange.http.addr();
    let routing_miss = |status: u16, body: &str| status == 405 || (status == 404 && body.contains("no such route"));
    let paths: std::collections::BTreeSet<&String> = registered.iter().map(|(_, path)| path).collect();
    for path in paths {
        let uri = path
            .replace("{account}", "0")
            .replace("{order}", "1")
            .replace("{symbol}", "ACME%2FUSD")
            .replace("{userid}", "someone")
            .replace("{id}", "1");
        assert!(!uri.contains('{'), "{path}: a path parameter this test does not fill in");
        for method in methods {
            let (status, body) = probe(addr, method, &uri).await;
            if registered.contains(&(method.to_string(), path.clone())) {
                assert!(!routing_miss(status, &body), "{method} {uri} is not routed: {status} {body}");
            } else {
                assert_eq!(status, 405, "{method} {uri} is served but neither registered nor documented: {body}");
            }
        }
    }
    let (status, body) = probe(addr, "GET", "/v1/no-such-route").await;
    assert!(status == 404 && routing_miss(status, &body), "an unknown path: {status} {body}");
    exchange.stop().await;
}

/// (method, path) of every `.route(PATH, METHOD(handler).METHOD(handler)…)` in
/// `api::router`, read from its source (axum cannot list a router's routes). A route
/// registered any other way, or anywhere else in the crate, fails the test, so that it
/// cannot go unseen.
fn registered_routes() -> std::collections::BTreeSet<(String, String)> {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut elsewhere = Vec::new();
    for file in std::fs::read_dir(&src).unwrap() {
        let path = file.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let outside = if path.ends_with("api.rs") { text.replace(router_source(&text), "") } else { text.clone() };
        for registration in [".route(", ".route_service(", ".nest(", ".nest_service(", ".merge("] {
            if outside.contains(registration) || (registration != ".route(" && text.contains(registration)) {
                elsewhere.push(format!("{} ({registration})", path.display()));
            }
        }
    }
    assert!(elsewhere.is_empty(), "routes registered where this test does not read them: {elsewhere:?}");
    let text = std::fs::read_to_string(src.join("api.rs")).unwrap();
    let router = router_source(&text);
    let mut routes = std::collections::BTreeSet::new();
    for call in router.split(".route(").skip(1) {
        let (path, rest) = call.trim_start().strip_prefix('"').and_then(|c| c.split_once('"')).expect("a literal path");
        let chain = rest.trim_start().strip_prefix(',').expect("a method router after the path");
        // The method functions at the chain's top level: `get(a).post(b)` is get, post.
        let (mut depth, mut word, mut found) = (0, String::new(), 0);
        for c in chain.chars() {
            match c {
                '(' if depth == 0 => {
                    let method = word.rsplit("::").next().unwrap().to_ascii_uppercase();
                    assert!(
                        ["GET", "POST", "PUT", "DELETE", "PATCH"].contains(&method.as_str()),
                        "{path}: {word}(…) is not a method this test can read"
                    );
                    assert!(routes.insert((method, path.to_string())), "{path} is registered twice");
                    found += 1;
                    depth += 1;
                }
                '(' => depth += 1,
                ')' if depth == 0 => break,
                ')' => depth -= 1,
                '.' if depth == 0 => word.clear(),
                c if depth == 0 && !c.is_whitespace() => word.push(c),
                _ => {}
            }
        }
        assert!(found > 0, "{path}: no method read");
    }
    assert!(routes.len() > 40, "the router's routes were read: {routes:?}");
    routes
}

/// A request without a key or body: the status and the body as text (not all are JSON).
async fn probe(addr: std::net::SocketAddr, method: &str, path: &str) -> (u16, String) {
    use http_body_util::BodyExt;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
    tokio::spawn(connection);
    let request = hyper::Request::builder().method(method).uri(path).header("host", addr.to_string());
    let request = request.body(http_body_util::Full::new(hyper::body::Bytes::new())).unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

/// `pub fn router(…) { … }` of api.rs.
fn router_source(api: &str) -> &str {
    let router = &api[api.find("pub fn router(").expect("api::router")..];
    &router[..router.find("\n}\n").expect("the end of api::router")]
}

/// Day orders rest like GTC ones until an administrative key closes the trading day:
/// then they read back as expired and their holds are free; GTC orders stay. Other keys
/// may not close the day, and their attempts change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn day_orders_expire_when_an_admin_closes_the_day() {
    let exchange = Exchange::start().await;
    exchange.market().await;
    let (alice, admin) = (exchange.client(&exchange.alice), exchange.client(&exchange.admin));
    let mut day = limit(1, "buy", 4, 140);
    day["tif"] = json!("day");
    let day = alice.expect(201, "POST", "/v1/orders", Some(day)).await["id"].as_u64().unwrap();
    let gtc = alice.expect(201, "POST", "/v1/orders", Some(limit(1, "buy", 2, 139))).await["id"].as_u64().unwrap();
    let order = alice.expect(200, "GET", &format!("/v1/orders/{day}"), None).await;
    assert_eq!((order["tif"].as_str(), order["status"].as_str()), (Some("day"), Some("open")));
    let reserved = |balances: &serde_json::Value| balances["balances"][0]["reserved"].as_i64().unwrap();
    let before = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    assert_eq!(reserved(&before), 4 * 141 + 2 * 140, "price plus the taker fee of 1 a share");

    // Alice's key is not an administrative one; no key is no one.
    let (status, body) = alice.request("POST", "/v1/admin/close-day", None).await;
    assert_eq!((status, body["error"]["code"].as_u64()), (403, Some(1004)));
    let nobody = support::Http { addr: exchange.http.addr(), key: None, tls: None };
    assert_eq!(nobody.request("POST", "/v1/admin/close-day", None).await.0, 401);
    assert_eq!(alice.expect(200, "GET", &format!("/v1/orders/{day}"), None).await["status"], "open");

    let closed = admin.expect(200, "POST", "/v1/admin/close-day", None).await;
    assert_eq!((closed["expired"].as_u64(), closed["duplicate"].as_bool()), (Some(1), Some(false)));
    assert!(closed["log_index"].as_u64().unwrap() > 0);
    let expired = alice.expect(200, "GET", &format!("/v1/orders/{day}"), None).await;
    assert_eq!((expired["status"].as_str(), expired["qty_open"].as_i64()), (Some("expired"), Some(0)));
    assert_eq!(alice.expect(200, "GET", &format!("/v1/orders/{gtc}"), None).await["status"], "open");
    let after = alice.expect(200, "GET", "/v1/accounts/1/balances", None).await;
    assert_eq!(reserved(&after), 2 * 140);
    let open = alice.expect(200, "GET", "/v1/accounts/1/orders", None).await;
    assert_eq!(open["orders"].as_array().unwrap().len(), 1);

    let again = admin.expect(200, "POST", "/v1/admin/close-day", None).await;
    assert_eq!(again["expired"], 0);
    exchange.stop().await;
}

/// The listener's limits on REST: a client trickling its request headers is cut off
/// once `first_request_timeout` has passed (the limit is on the whole header, not each
/// read), and a keep-alive connection that sends nothing for `idle_timeout` is closed;
/// an honest client on its own connection is answered all the while.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trickling_and_idle_connections_are_closed() {
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = Exchange::start().await;
    let mut config = bourse_http::HttpConfig::new("127.0.0.1:0".parse().unwrap(), Vec::new());
    config.upstream = bourse_port::Upstream::InProcess(exchange.gateway.local());
    config.limits.first_request_timeout = Duration::from_millis(500);
    config.limits.idle_timeout = Duration::from_secs(1);
    let server = bourse_http::HttpServer::start(config).await.unwrap();
    let addr = server.addr();

    /// Reads until the server closes; how long that took (None: still open at 5 s).
    async fn closed_after(stream: &mut tokio::net::TcpStream, started: Instant) -> Option<Duration> {
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                Ok(Ok(_)) => {}
                Err(_) => return None,
            }
        }
    }

    // Headers a byte every 100 ms: never complete, cut off after about 500 ms.
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"GET /health HTTP/1.1\r\n").await.unwrap();
    let trickle = tokio::spawn(async move {
        for _ in 0..40 {
            if slow.write_all(b"X").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        slow
    });
    // Meanwhile an honest client is answered.
    let honest = support::Http { addr, key: Some(exchange.alice.clone()), tls: None };
    assert_eq!(honest.request("GET", "/v1/symbols", None).await.0, 200);
    let mut slow = trickle.await.unwrap();
    let took = closed_after(&mut slow, started).await.expect("the trickling connection was closed");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");

    // One request answered, then silence: a keep-alive connection waiting for its next
    // request's headers is held to the same header limit.
    let mut waiting = tokio::net::TcpStream::connect(addr).await.unwrap();
    waiting.write_all(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").await.unwrap();
    let mut buf = [0u8; 1024];
    let n = waiting.read(&mut buf).await.unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&buf[..n]));
    let took = closed_after(&mut waiting, Instant::now()).await.expect("the waiting connection was closed");
    assert!(took < Duration::from_secs(3), "closed after {took:?}");

    // Headers complete, the promised body never comes: no byte moves, so the
    // connection is closed after the idle limit.
    let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
    let started = Instant::now();
    let headers =
        "POST /v1/orders HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n";
    silent.write_all(headers.as_bytes()).await.unwrap();
    let took = closed_after(&mut silent, started).await.expect("the silent connection was closed");
    assert!(took >= Duration::from_millis(800) && took < Duration::from_secs(3), "closed after {took:?}");
    server.shutdown().await;
    exchange.stop().await;
}

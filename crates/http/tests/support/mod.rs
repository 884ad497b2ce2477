//! A real node, a gateway with keys, and the HTTP API in front of it, on loopback; a
//! plain HTTP/1.1 client and a WebSocket client for the tests.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_http::{HttpConfig, HttpServer};
use bourse_node::{Node, NodeConfig};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{json, Value};

pub struct Exchange {
    pub node: Node,
    pub gateway: Gateway,
    pub http: HttpServer,
    /// May do anything.
    pub admin: String,
    /// Trades for accounts 0 and 1 only.
    pub alice: String,
    /// The history sink following the node (`start_with_history`).
    pub history: Option<bourse_history::Following>,
    /// The day-trading service the HTTP API's day-trading routes call
    /// (`start_with_day_trading`).
    pub day_trading: Option<bourse_daytrading::DayTradingServer>,
    /// Day trading: a key named after the user `DT_USER` (it acts only as that user).
    pub dt_user_key: String,
    /// With TLS (`start_tls`): the CA certificate clients trust, and their configuration.
    pub ca: Option<std::path::PathBuf>,
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    /// The key file's entries (ops, alice, the day trader), for `revoke`.
    entries: Vec<bourse_gateway::keys::KeyEntry>,
    _dir: tempfile::TempDir,
}

/// The user `Exchange::dt_user_key` is named after.
pub const DT_USER: &str = "daytrader1";

impl Exchange {
    /// A node, a gateway (hold 0) with an admin key and alice's key, and the HTTP API.
    pub async fn start() -> Exchange {
        Exchange::start_with(false, false, false).await
    }

    /// As `start`, serving HTTPS and WSS with a certificate from a CA of the test's own.
    pub async fn start_tls() -> Exchange {
        Exchange::start_with(false, false, true).await
    }

    /// As `start`, with a history sink following the node into a SQLite file that the
    /// HTTP API's history routes read.
    pub async fn start_with_history() -> Exchange {
        Exchange::start_with(true, false, false).await
    }

    /// As `start_with_history`, with the day-trading service (emulated quotes: seed 7,
    /// 1.00 to 500.00; the trigger poller every 100 ms) that the HTTP API's day-trading
    /// routes call.
    pub async fn start_with_day_trading() -> Exchange {
        Exchange::start_with(true, true, false).await
    }

    /// As `start_with_day_trading`, over HTTPS (as `start_tls`).
    pub async fn start_with_day_trading_tls() -> Exchange {
        Exchange::start_with(true, true, true).await
    }

    async fn start_with(with_history: bool, with_day_trading: bool, with_tls: bool) -> Exchange {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig {
            data: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().unwrap(),
            sequencer_window_us: 0,
            ..NodeConfig::default()
        };
        let node = Node::start(config).await.unwrap();
        let (admin, alice, dt_user_key) = (generate_key(), generate_key(), generate_key());
        let entries = || {
            vec![
                entry_for(&admin, "ops", Vec::new(), true),
                entry_for(&alice, "alice", vec![0, 1], false),
                entry_for(&dt_user_key, DT_USER, Vec::new(), false),
            ]
        };
        let mut keys = KeyStore::from_entries(entries()).unwrap();
        let service = keys.add_process_key("http-front-end", false);
        let dt_key = keys.add_process_key("day-trading", true);
        let mut gateway_config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
        gateway_config.hold_us = 0;
        let gateway = Gateway::start(gateway_config, keys).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gateway.market_ready() {
            assert!(Instant::now() < deadline, "the gateway's feed never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // In the gateway's process, as `bourse gateway run --http` runs it.
        let mut http_config = HttpConfig::new("127.0.0.1:0".parse().unwrap(), Vec::new());
        http_config.upstream = bourse_port::Upstream::InProcess(gateway.local());
        http_config.service_key = Some(bourse_client::ApiKey(service));
        let mut history = None;
        if with_history {
            let url = format!("sqlite:{}", dir.path().join("history.sqlite").display());
            let sink = bourse_history::SinkConfig::default();
            history = Some(bourse_history::Following::start(vec![node.addr.to_string()], &url, sink).await.unwrap());
            http_config.history = Some(url);
        }
        let mut day_trading = None;
        if with_day_trading {
            use bourse_daytrading::quote::emulator::{EmulatorConfig, Latency};
            let mut service = bourse_daytrading::ServiceConfig::new(vec![gateway.addr().to_string()]);
            service.key = Some(bourse_client::ApiKey(dt_key));
            service.trigger_poll_ms = 100;
            service.dump_dir = dir.path().join("dumps");
            service.history = http_config.history.clone();
            service.dump_wait = Duration::from_secs(60);
            service.sessions = 2;
            // Callers' keys are the gateway's, as `bourse gateway run` checks them (so a
            // key revoked at the gateway is refused here too).
            let local = gateway.local();
            let auth = bourse_daytrading::Auth::Keys(std::sync::Arc::new(move |key: &str| {
                let rights = local.0.rights(Some(key))?;
                Some(bourse_daytrading::KeyHolder { name: rights.name, admin: rights.admin })
            }));
            let config = bourse_daytrading::ServerConfig {
                listen: "127.0.0.1:0".parse().unwrap(),
                service,
                source: bourse_daytrading::SourceConfig::Emulator(EmulatorConfig {
                    seed: 7,
                    price_min: 100,
                    price_max: 50_000,
                    latency: Latency::None,
                }),
                emulator_listen: None,
                auth,
            };
            let server = bourse_daytrading::DayTradingServer::start(config).await.unwrap();
            http_config.day_trading = Some(server.addr().to_string());
            day_trading = Some(server);
        }
        let (mut ca, mut tls) = (None, None);
        if with_tls {
            let (edge, ca_file) = edge_certificate(&dir.path().join("pki"));
            http_config.tls = Some(edge);
            tls = Some(client_tls(&ca_file));
            ca = Some(ca_file);
        }
        let http = HttpServer::start(http_config).await.unwrap();
        let entries = entries();
        Exchange { node, gateway, http, admin, alice, history, day_trading, dt_user_key, ca, tls, entries, _dir: dir }
    }

    /// Takes the key named `name` out of the gateway's keys, as a reload of a key file
    /// without it does; returns the sessions that ended.
    pub fn revoke(&self, name: &str) -> usize {
        let kept = self.entries.iter().filter(|entry| entry.name != name).cloned().collect();
        self.gateway.reload_keys(KeyStore::from_entries(kept).unwrap())
    }

    pub fn client(&self, key: &str) -> Http {
        Http { addr: self.http.addr(), key: Some(key.to_owned()), tls: self.tls.clone() }
    }

    /// USD (cents) and ACME (whole shares), ACME/USD with a taker fee of 1 cent a share,
    /// accounts 0 and 1 with $10,000 each and 100 ACME for account 0.
    pub async fn market(&self) {
        let admin = self.client(&self.admin);
        admin.expect(201, "POST", "/v1/assets", Some(json!({"name": "USD", "decimals": 2}))).await;
        admin.expect(201, "POST", "/v1/assets", Some(json!({"name": "ACME", "decimals": 0}))).await;
        let symbol = json!({"name": "ACME/USD", "base": "ACME", "quote": "USD", "tick": 1, "lot": 1,
            "px_min": 1, "px_max": 1000000, "fee_taker": 1});
        admin.expect(201, "POST", "/v1/symbols", Some(symbol)).await;
        for account in 0..2 {
            let created = admin.expect(201, "POST", "/v1/accounts", None).await;
            assert_eq!(created["id"], account);
            let path = format!("/v1/accounts/{account}/deposits");
            admin.expect(200, "POST", &path, Some(json!({"asset": "USD", "amount": 1_000_000}))).await;
        }
        admin.expect(200, "POST", "/v1/accounts/0/credits", Some(json!({"asset": "ACME", "amount": 100}))).await;
    }

    /// Waits until the history holds every entry the node has applied.
    pub async fn history_caught_up(&self) {
        let following = self.history.as_ref().expect("a history sink");
        let deadline = Instant::now() + Duration::from_secs(20);
        let target = self.node.metrics.applied_index.load(std::sync::atomic::Ordering::Acquire);
        while following.status.written_index.load(std::sync::atomic::Ordering::Acquire) < target {
            assert!(Instant::now() < deadline, "the history did not catch up");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn stop(self) {
        if let Some(service) = self.day_trading {
            service.shutdown().await;
        }
        if let Some(history) = self.history {
            history.stop().await.unwrap();
        }
        self.http.shutdown().await;
        self.gateway.shutdown().await;
        self.node.shutdown().await.unwrap();
    }
}

/// A CA in `dir` and a gateway certificate from it for 127.0.0.1 and localhost: the
/// edge's TLS, and the CA certificate clients trust.
pub fn edge_certificate(dir: &std::path::Path) -> (bourse_port::EdgeTls, std::path::PathBuf) {
    let (files, ca) = bourse_pki::testing::loopback_edge(dir);
    (bourse_port::EdgeTls::load(files).unwrap(), ca)
}

/// A client configuration trusting the CA certificate `ca` only (HTTP/1.1 by ALPN).
pub fn client_tls(ca: &std::path::Path) -> std::sync::Arc<rustls::ClientConfig> {
    bourse_pki::testing::client_trusting(ca, &[b"http/1.1"])
}

/// A connection to `addr`, through TLS (verifying the name 127.0.0.1) when `tls` is set.
pub async fn connect(
    addr: SocketAddr,
    tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
) -> std::io::Result<Box<dyn Stream>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    match tls {
        None => Ok(Box::new(stream)),
        Some(config) => {
            let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
            let stream = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(config)).connect(name, stream).await?;
            Ok(Box::new(stream))
        }
    }
}

/// A client's byte stream, plain or TLS.
pub trait Stream: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static> Stream for T {}

/// A minimal HTTP/1.1 client: one connection per request.
#[derive(Clone)]
pub struct Http {
    pub addr: SocketAddr,
    pub key: Option<String>,
    /// HTTPS, trusting this configuration's roots.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

impl Http {
    pub async fn request(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        self.raw(method, path, body.map(|b| b.to_string())).await
    }

    /// Sends `body` as is (for malformed bodies).
    pub async fn raw(&self, method: &str, path: &str, body: Option<String>) -> (u16, Value) {
        let stream = connect(self.addr, self.tls.as_ref()).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = hyper::Request::builder().method(method).uri(path).header("host", self.addr.to_string());
        if let Some(key) = &self.key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        if body.is_some() {
            request = request.header("content-type", "application/json");
        }
        let request = request.body(Full::new(Bytes::from(body.unwrap_or_default()))).unwrap();
        let response = sender.send_request(request).await.unwrap();
        let status = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        // A body that is not JSON (a plain-text refusal of a WebSocket upgrade without
        // its headers, say) comes back as a string.
        let value = match bytes.is_empty() {
            true => Value::Null,
            false => serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())),
        };
        (status, value)
    }

    /// A GET whose answer is not JSON: status, content type and content disposition, body.
    pub async fn get_text(&self, path: &str) -> (u16, String, String, String) {
        let stream = connect(self.addr, self.tls.as_ref()).await.unwrap();
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.unwrap();
        tokio::spawn(connection);
        let mut request = hyper::Request::builder().method("GET").uri(path).header("host", self.addr.to_string());
        if let Some(key) = &self.key {
            request = request.header("authorization", format!("Bearer {key}"));
        }
        let response = sender.send_request(request.body(Full::new(Bytes::new())).unwrap()).await.unwrap();
        let status = response.status().as_u16();
        let header =
            |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_owned();
        let (content_type, disposition) = (header("content-type"), header("content-disposition"));
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (status, content_type, disposition, String::from_utf8_lossy(&bytes).into_owned())
    }

    /// The request's JSON, asserting its status.
    pub async fn expect(&self, status: u16, method: &str, path: &str, body: Option<Value>) -> Value {
        let (got, value) = self.request(method, path, body).await;
        assert_eq!(got, status, "{method} {path}: {value}");
        value
    }
}

/// A limit order's JSON.
pub fn limit(account: u32, side: &str, qty: i64, px: i64) -> Value {
    json!({"account": account, "symbol": "ACME/USD", "side": side, "type": "limit", "qty": qty, "px": px})
}

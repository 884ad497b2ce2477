//! A real node, a gateway with keys and the FIX front end in front of it, on loopback;
//! a small FIX client written on the crate's codec for the tests.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use bourse_client::{random_client_id, AdminSession, ApiKey, ClientOptions, QueryClient};
use bourse_engine::command::{CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, Px, Qty};
use bourse_fix::codec::{self, Message};
use bourse_fix::time::{now_ns, utc_timestamp};
use bourse_fix::{FixConfig, FixServer};
use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Exchange {
    pub node: Node,
    pub gateway: Gateway,
    pub fix: Option<FixServer>,
    pub fix_addr: SocketAddr,
    /// May do anything.
    pub admin: String,
    /// Trades for accounts 0 and 1 only.
    pub alice: String,
    pub fix_data: PathBuf,
    /// FIX over TLS (`start_tls`): the certificate the front end presents, and the CA
    /// certificate clients trust.
    pub tls: Option<bourse_port::EdgeTls>,
    pub ca: Option<PathBuf>,
    _dir: tempfile::TempDir,
}

impl Exchange {
    /// A node, a gateway (hold 0) with an admin key and alice's key, and the FIX front end.
    pub async fn start() -> Exchange {
        Exchange::start_with(false).await
    }

    /// As `start`, the FIX front end over TLS with a certificate for 127.0.0.1 and localhost (the name QuickFIX/J verifies) from a CA
    /// of the test's own (`Exchange::ca`).
    pub async fn start_tls() -> Exchange {
        Exchange::start_with(true).await
    }

    async fn start_with(tls: bool) -> Exchange {
        let dir = tempfile::tempdir().unwrap();
        let (tls, ca) = match tls {
            true => {
                let (files, ca) = bourse_pki::testing::loopback_edge(&dir.path().join("pki"));
                (Some(bourse_port::EdgeTls::load(files).unwrap()), Some(ca))
            }
            false => (None, None),
        };
        let config = NodeConfig {
            data: dir.path().join("node"),
            listen: "127.0.0.1:0".parse().unwrap(),
            sequencer_window_us: 0,
            ..NodeConfig::default()
        };
        let node = Node::start(config).await.unwrap();
        let (admin, alice) = (generate_key(), generate_key());
        let keys = KeyStore::from_entries(vec![
            entry_for(&admin, "ops", Vec::new(), true),
            entry_for(&alice, "alice", vec![0, 1], false),
        ])
        .unwrap();
        let mut gateway_config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
        gateway_config.hold_us = 0;
        let gateway = Gateway::start(gateway_config, keys).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !gateway.market_ready() {
            assert!(Instant::now() < deadline, "the gateway's feed never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let fix_data = dir.path().join("fix");
        let mut exchange = Exchange {
            node,
            gateway,
            fix: None,
            fix_addr: "127.0.0.1:0".parse().unwrap(),
            admin,
            alice,
            fix_data,
            tls,
            ca,
            _dir: dir,
        };
        exchange.start_fix().await;
        exchange
    }

    /// (Re)starts the FIX front end on the same data directory (and address, after the
    /// first start).
    pub async fn start_fix(&mut self) {
        // In the gateway's process, as `bourse gateway run --fix` runs it.
        let mut config = FixConfig::new(self.fix_addr, Vec::new(), self.fix_data.clone());
        config.upstream = bourse_port::Upstream::InProcess(self.gateway.local());
        config.tls = self.tls.clone();
        let server = FixServer::start(config).await.unwrap();
        self.fix_addr = server.addr();
        self.fix = Some(server);
    }

    pub async fn stop_fix(&mut self) {
        if let Some(server) = self.fix.take() {
            server.shutdown().await;
        }
    }

    fn options(&self, key: &str) -> ClientOptions {
        ClientOptions { api_key: Some(ApiKey(key.to_owned())), ..ClientOptions::default() }
    }

    /// A query client with `key`.
    pub async fn query(&self, key: &str) -> QueryClient {
        QueryClient::connect(vec![self.gateway.addr().to_string()], self.options(key)).await.unwrap()
    }

    /// USD (cents) and ACME (shares), ACME/USD with a taker fee of 1 cent a share,
    /// accounts 0 and 1 with $10,000 each and 100 ACME for account 0.
    pub async fn market(&self) {
        let endpoints = vec![self.gateway.addr().to_string()];
        let mut admin = AdminSession::connect(endpoints, random_client_id(), self.options(&self.admin)).await.unwrap();
        let mut ok = async |body| admin.submit(body).await.unwrap().ok_id().expect("accepted");
        let usd = AssetId(ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await as u32);
        let acme = AssetId(ok(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }).await as u32);
        let spec = SymbolSpec {
            name: "ACME/USD".into(),
            base: acme,
            quote: usd,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(1_000_000),
            fee_maker: Amount(0),
            fee_taker: Amount(1),
            policy: MatchPolicy::Fifo,
        };
        ok(CommandBody::CreateSymbol(Box::new(spec))).await;
        for _ in 0..2 {
            let account = AccountId(ok(CommandBody::CreateAccount).await as u32);
            ok(CommandBody::Deposit { account, asset: usd, amount: Amount(1_000_000) }).await;
        }
        ok(CommandBody::Credit { account: AccountId(0), asset: acme, amount: Amount(100) }).await;
    }

    /// As `market`, and a margin contract: FUT (asset 2), account 2 (FUT/USD's insurance
    /// account, not alice's), and FUT/USD (symbol 1): prices 10 to 1,000, multiplier
    /// 1,000 (a contract at 100 is worth 100,000 cents), initial margin 10 %,
    /// maintenance 5 %, position limit 1,000, the operator's mark, no fees.
    pub async fn margin_market(&self) {
        self.market().await;
        let mut admin = self.admin().await;
        let mut ok = async |body| admin.submit(body).await.unwrap().ok_id().expect("accepted");
        let fut = AssetId(ok(CommandBody::CreateAsset { name: "FUT".into(), decimals: 0 }).await as u32);
        let insurance = AccountId(ok(CommandBody::CreateAccount).await as u32);
        assert_eq!((fut, insurance), (AssetId(2), AccountId(2)));
        let spec = SymbolSpec {
            name: "FUT/USD".into(),
            base: fut,
            quote: AssetId(0),
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(10),
            px_max: Px(1_000),
            fee_maker: Amount(0),
            fee_taker: Amount(0),
            policy: MatchPolicy::Fifo,
        };
        let margin = MarginSpec {
            initial_bp: 1_000,
            maintenance_bp: 500,
            multiplier: 1_000,
            position_limit: Qty(1_000),
            mark: MarkSource::Operator,
            insurance,
        };
        let symbol = ok(CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin }))).await;
        assert_eq!(symbol, 1);
    }

    /// The operator's mark of a margin symbol, set with the admin key.
    pub async fn set_mark(&self, symbol: u32, px: i64) {
        let body = CommandBody::SetMark { symbol: bourse_engine::SymbolId(symbol), px: Px(px) };
        self.admin().await.submit(body).await.unwrap().ok_id().expect("the mark is set");
    }

    async fn admin(&self) -> AdminSession {
        let endpoints = vec![self.gateway.addr().to_string()];
        AdminSession::connect(endpoints, random_client_id(), self.options(&self.admin)).await.unwrap()
    }

    /// Closes the trading day with the admin key; returns how many orders expired.
    pub async fn close_day(&self) -> u64 {
        let endpoints = vec![self.gateway.addr().to_string()];
        let mut admin = AdminSession::connect(endpoints, random_client_id(), self.options(&self.admin)).await.unwrap();
        admin.close_day().await.unwrap().ok_id().expect("the close is accepted")
    }

    /// (available, reserved) of `asset` in `account`.
    pub async fn balance(&self, account: u32, asset: u32) -> (i64, i64) {
        let reply = self.query(&self.admin).await.balances(AccountId(account)).await.unwrap();
        reply.balances.iter().find(|b| b.asset == asset).map(|b| (b.available, b.reserved)).unwrap_or((0, 0))
    }

    /// Places an IOC limit order through the gateway's gRPC with `key`, as a program
    /// other than the FIX client would; returns the quantity it traded.
    pub async fn ioc(&self, key: &str, account: u32, side: bourse_engine::Side, px: i64, qty: i64) -> i64 {
        use bourse_engine::command::{OrderRequest, Tif};
        let endpoints = vec![self.gateway.addr().to_string()];
        let client = bourse_client::Client::connect(endpoints, random_client_id(), self.options(key)).await.unwrap();
        let order =
            OrderRequest::limit(AccountId(account), bourse_engine::SymbolId(0), side, Px(px), Qty(qty), Tif::Ioc);
        let reply = client.submit(CommandBody::Place(order)).await.unwrap();
        let id = reply.ok_id().expect("placed");
        let info = self.query(&self.admin).await.order(bourse_engine::OrderId(id)).await.unwrap();
        info.order.unwrap().qty_filled
    }

    pub async fn stop(mut self) {
        self.stop_fix().await;
        self.gateway.shutdown().await;
        self.node.shutdown().await.unwrap();
    }
}

/// A FIX initiator for tests: numbers its messages, reads whole frames.
pub struct FixClient {
    pub stream: TcpStream,
    buf: Vec<u8>,
    /// The next MsgSeqNum this client sends.
    pub seq: u64,
    pub sender: String,
}

impl FixClient {
    pub async fn connect(addr: SocketAddr, sender: &str, seq: u64) -> FixClient {
        let stream = TcpStream::connect(addr).await.unwrap();
        FixClient { stream, buf: Vec::new(), seq, sender: sender.to_owned() }
    }

    /// As `connect`, with a receive buffer of a few kilobytes: a client that does not
    /// read soon leaves the server's writes waiting.
    pub async fn connect_small(addr: SocketAddr, sender: &str, seq: u64) -> FixClient {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4_096).unwrap();
        let stream = socket.connect(addr).await.unwrap();
        FixClient { stream, buf: Vec::new(), seq, sender: sender.to_owned() }
    }

    /// Connects and logs on with `key`; returns the Logon answer.
    pub async fn logon(addr: SocketAddr, sender: &str, key: &str, reset: bool) -> (FixClient, Message) {
        let mut client = FixClient::connect(addr, sender, 1).await;
        let mut fields = vec![(98, "0".to_string()), (108, "30".to_string()), (554, key.to_owned())];
        if reset {
            fields.push((141, "Y".into()));
        }
        client.send("A", &fields).await;
        let answer = client.recv().await;
        (client, answer)
    }

    /// A message of `msg_type` with the standard header and `fields`.
    pub fn message(&self, msg_type: &str, seq: u64, fields: &[(u32, String)]) -> Message {
        let mut message = Message::new(msg_type);
        message.push(49, &self.sender).push(56, "BOURSE").push_display(34, seq).push(52, utc_timestamp(now_ns()));
        for (tag, value) in fields {
            message.push(*tag, value);
        }
        message
    }

    pub async fn send(&mut self, msg_type: &str, fields: &[(u32, String)]) -> u64 {
        let seq = self.seq;
        let message = self.message(msg_type, seq, fields);
        self.send_raw(&message.encode()).await;
        self.seq += 1;
        seq
    }

    pub async fn send_raw(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }

    /// The next message (5 s at most).
    pub async fn recv(&mut self) -> Message {
        self.try_recv(Duration::from_secs(5)).await.expect("a FIX message within 5 s")
    }

    /// The next message within `wait`, or `None` (also when the connection closed).
    pub async fn try_recv(&mut self, wait: Duration) -> Option<Message> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Ok(Some(len)) = codec::frame(&self.buf) {
                let (message, error) = Message::decode(&self.buf[..len]);
                assert_eq!(error, None, "the server sent a malformed message");
                self.buf.drain(..len);
                return Some(message);
            }
            let mut chunk = vec![0u8; 65_536];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                _ => return None,
            }
        }
    }

    /// The next message that is not a Heartbeat.
    pub async fn recv_app(&mut self) -> Message {
        loop {
            let message = self.recv().await;
            if message.msg_type() != "0" {
                return message;
            }
        }
    }

    /// True when the server closed the connection within `wait`.
    pub async fn closed(&mut self, wait: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let mut chunk = [0u8; 4096];
            match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
                Err(_) => return false,
            }
        }
    }
}

/// `fields` as owned pairs.
pub fn f(fields: &[(u32, &str)]) -> Vec<(u32, String)> {
    fields.iter().map(|(t, v)| (*t, (*v).to_owned())).collect()
}

/// A limit NewOrderSingle's fields.
pub fn limit(cl: &str, account: u32, side: &str, qty: i64, px: i64) -> Vec<(u32, String)> {
    vec![
        (11, cl.into()),
        (1, account.to_string()),
        (55, "ACME/USD".into()),
        (54, side.into()),
        (60, utc_timestamp(now_ns())),
        (38, qty.to_string()),
        (40, "2".into()),
        (44, px.to_string()),
        (59, "1".into()),
    ]
}

pub fn get(message: &Message, tag: u32) -> &str {
    message.get_str(tag).unwrap_or("")
}

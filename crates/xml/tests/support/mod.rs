//! A real node, a gateway with keys, and the XML front end in front of it (one bare and
//! one length-prefixed listener sharing one exchange), on loopback; a raw TCP client.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_gateway::keys::{entry_for, generate_key};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig};
use bourse_xml::{Exchange, ExchangeConfig, Framing, NoHistory, XmlConfig, XmlServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub struct Exchange2 {
    pub node: Node,
    pub gateway: Gateway,
    pub bare: XmlServer,
    pub framed: XmlServer,
    pub exchange: Arc<Exchange>,
    /// The front end's process key (admin).
    pub key: String,
    _dir: tempfile::TempDir,
}

/// Settings a test may change before start.
pub struct Options {
    pub xml: fn(&mut XmlConfig),
    pub exchange: fn(&mut ExchangeConfig),
}

impl Default for Options {
    fn default() -> Self {
        Options { xml: |_| {}, exchange: |_| {} }
    }
}

impl Exchange2 {
    pub async fn start() -> Exchange2 {
        Exchange2::start_with(Options::default()).await
    }

    /// A node, a gateway (hold 0) whose only key is the XML front end's process key
    /// (admin, as `bourse gateway run --xml` makes it), and both listeners.
    pub async fn start_with(options: Options) -> Exchange2 {
        let dir = tempfile::tempdir().unwrap();
        let config = NodeConfig {
            data: dir.path().to_path_buf(),
            listen: "127.0.0.1:0".parse().unwrap(),
            sequencer_window_us: 0,
            ..NodeConfig::default()
        };
        let node = Node::start(config).await.unwrap();
        let operator = generate_key();
        let mut keys = KeyStore::from_entries(vec![entry_for(&operator, "ops", Vec::new(), true)]).unwrap();
        let service = keys.add_process_key("xml-front-end", true);
        let mut gateway_config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), vec![node.addr.to_string()]);
        gateway_config.hold_us = 0;
        let gateway = Gateway::start(gateway_config, keys).await.unwrap();
        // In the gateway's process, as `bourse gateway run --xml` runs it.
        let mut exchange_config = ExchangeConfig::new(Vec::new());
        exchange_config.upstream = bourse_port::Upstream::InProcess(gateway.local());
        exchange_config.key = Some(bourse_client::ApiKey(service.clone()));
        (options.exchange)(&mut exchange_config);
        let exchange = Arc::new(Exchange::connect(exchange_config, Arc::new(NoHistory)).await.unwrap());
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut bare = XmlConfig::new(listen, Framing::Bare);
        (options.xml)(&mut bare);
        let mut framed = XmlConfig::new(listen, Framing::Prefixed);
        (options.xml)(&mut framed);
        let bare = XmlServer::start(bare, Arc::clone(&exchange)).await.unwrap();
        let framed = XmlServer::start(framed, Arc::clone(&exchange)).await.unwrap();
        Exchange2 { node, gateway, bare, framed, exchange, key: service, _dir: dir }
    }

    /// One request on a new bare connection: the reply, read until the server closes.
    pub async fn bare(&self, body: &str) -> String {
        bare_request(self.bare.addr(), body.as_bytes()).await
    }

    /// A new length-prefixed connection.
    pub async fn connect(&self) -> Framed {
        Framed::connect(self.framed.addr()).await
    }

    pub async fn stop(self) {
        self.bare.shutdown().await;
        self.framed.shutdown().await;
        self.gateway.shutdown().await;
        self.node.shutdown().await.unwrap();
    }
}

/// `N\n` + body.
pub fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = format!("{}\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

/// Sends a framed request on a new connection and reads the bare reply to the end.
pub async fn bare_request(addr: SocketAddr, body: &[u8]) -> String {
    raw(addr, &frame(body)).await
}

/// Sends `bytes` as they are and reads until the server closes.
pub async fn raw(addr: SocketAddr, bytes: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut reply))
        .await
        .expect("the server closes after replying")
        .unwrap();
    String::from_utf8(reply).unwrap()
}

/// A length-prefixed connection.
pub struct Framed {
    pub stream: TcpStream,
}

impl Framed {
    pub async fn connect(addr: SocketAddr) -> Framed {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Framed { stream }
    }

    pub async fn send(&mut self, body: &str) {
        self.stream.write_all(&frame(body.as_bytes())).await.unwrap();
    }

    /// Reads one `M\n` + document reply.
    pub async fn receive(&mut self) -> String {
        tokio::time::timeout(Duration::from_secs(20), read_framed(&mut self.stream))
            .await
            .expect("a reply in time")
            .expect("a framed reply")
    }

    pub async fn request(&mut self, body: &str) -> String {
        self.send(body).await;
        self.receive().await
    }

    /// Whether the server closed the connection (reads EOF within a while).
    pub async fn closed(&mut self) -> bool {
        let mut byte = [0u8; 1];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), self.stream.read(&mut byte)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    }
}

/// Reads one framed reply; `None` at EOF before it.
pub async fn read_framed(stream: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    loop {
        let mut byte = [0u8; 1];
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        if byte[0] == b'\n' {
            break;
        }
        line.push(byte[0]);
        assert!(line.len() < 20, "a length line: {line:?}");
    }
    let length: usize = std::str::from_utf8(&line).unwrap().parse().unwrap();
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    Some(String::from_utf8(body).unwrap())
}

/// The reply document for these result lines (each already indented).
pub fn results(lines: &[&str]) -> String {
    if lines.is_empty() {
        return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results/>\n".into();
    }
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results>\n");
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out.push_str("</results>\n");
    out
}

/// A request-level error reply.
pub fn request_error(text: &str) -> String {
    results(&[&format!("  <error>{text}</error>")])
}

/// The transaction id in an `<opened … id="N"/>` line of a reply.
pub fn opened_id(reply: &str) -> u64 {
    let at = reply.find("<opened").expect("an opened result");
    let id = &reply[at..];
    let start = id.find(" id=\"").expect("an id") + 5;
    let end = start + id[start..].find('"').unwrap();
    id[start..end].parse().unwrap()
}

/// Every `id="N"` of `<opened>` results in a reply, in order.
pub fn opened_ids(reply: &str) -> Vec<u64> {
    reply.lines().filter(|l| l.trim_start().starts_with("<opened")).map(opened_id).collect()
}

/// Waits until `check` holds.
pub async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "{what} never happened");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

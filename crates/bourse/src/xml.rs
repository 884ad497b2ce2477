//! `bourse gateway run … --xml ADDR [--xml-framed ADDR]`: the XML exchange protocol's
//! listeners in the gateway's process (`bourse-xml`), with the spec's settings
//! (section 11) as flags. With `--history URL`, an order the engine no longer
//! remembers is answered from the history store ([`StoreHistory`]).

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_client::ApiKey;
use bourse_engine::command::Stp;
use bourse_history::Store;
use bourse_protocol::proto;
use bourse_xml::{Exchange, ExchangeConfig, Framing, NoHistory, OrderHistory, Scales, XmlConfig, XmlServer};
use clap::{Args, ValueEnum};

#[derive(Args, Debug, Clone)]
pub struct XmlArgs {
    /// Serve the XML exchange protocol here with bare replies (reply, then close), as
    /// port 12345 does by default.
    #[arg(long)]
    xml: Option<SocketAddr>,
    /// Serve it here with length-prefixed replies on kept-open connections.
    #[arg(long)]
    xml_framed: Option<SocketAddr>,
    /// Serve it over TLS here (bare replies), with the certificate of --tls-cert or --pki.
    #[arg(long)]
    xml_tls: Option<SocketAddr>,
    /// Serve it over TLS here with length-prefixed replies on kept-open connections.
    #[arg(long)]
    xml_framed_tls: Option<SocketAddr>,
    /// With --keys: the name of the key (in --keys) whose rights the XML listeners act
    /// with. The protocol carries no key, so every XML client acts as this key: its
    /// accounts only, and `<create>` (accounts, money, shares) only if it is an admin's.
    #[arg(long, value_name = "NAME")]
    xml_as: Option<String>,
    /// Serve XML on addresses other than loopback. Anyone who reaches the port acts with
    /// the rights of --xml-as: put it behind a network that only trusted clients reach.
    #[arg(long)]
    xml_allow_remote: bool,
    /// Largest request body accepted, in bytes.
    #[arg(long, default_value_t = 4 << 20)]
    xml_max_request_bytes: usize,
    /// Most result-producing children in one request.
    #[arg(long, default_value_t = 10_000)]
    xml_max_children: usize,
    /// Time to receive one whole request once its first byte arrived.
    #[arg(long, default_value_t = 30_000)]
    xml_read_timeout_ms: u64,
    /// Close a connection on which no request byte arrives for this long.
    #[arg(long, default_value_t = 300_000)]
    xml_idle_timeout_ms: u64,
    /// Connections served at once (more wait in the accept backlog).
    #[arg(long, default_value_t = 10_000)]
    xml_max_connections: usize,
    /// Fractional digits allowed in shares.
    #[arg(long, default_value_t = 4)]
    xml_quantity_scale: u32,
    /// Fractional digits allowed in prices (cash has quantity + price digits).
    #[arg(long, default_value_t = 4)]
    xml_price_scale: u32,
    /// Self-trade prevention of XML orders.
    #[arg(long, value_enum, default_value_t = SelfTrade::Allow)]
    xml_self_trade: SelfTrade,
    /// The asset XML symbols trade against (created with quantity + price decimals;
    /// start-up fails if it exists with other decimals).
    #[arg(long, default_value = "USD")]
    xml_quote: String,
    /// Order-entry sessions the XML front end keeps to the gateway (128 commands in
    /// flight each; few sessions batch better).
    #[arg(long, default_value_t = 2)]
    xml_sessions: usize,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SelfTrade {
    Allow,
    CancelResting,
    CancelIncoming,
}

impl XmlArgs {
    pub fn wanted(&self) -> bool {
        self.listens().iter().any(|(_, addr)| addr.is_some())
    }

    /// Whether a TLS listener is asked for.
    pub fn tls_wanted(&self) -> bool {
        self.xml_tls.is_some() || self.xml_framed_tls.is_some()
    }

    /// The name of the key the listeners act as (`--xml-as`).
    pub fn acting_as(&self) -> Option<&str> {
        self.xml_as.as_deref()
    }

    /// Refuses listeners that are not on loopback, unless `--xml-allow-remote`.
    pub fn check_exposure(&self) -> Result<(), String> {
        if self.xml_allow_remote {
            return Ok(());
        }
        match crate::cli::exposed(self.listens()) {
            Some((flag, addr)) => Err(format!(
                "{flag} {addr}: the XML protocol carries no key, so anyone who reaches the port acts as \
                 --xml-as; it binds loopback unless you give --xml-allow-remote"
            )),
            None => Ok(()),
        }
    }

    /// The listeners asked for, with their flags.
    pub fn listens(&self) -> [(&'static str, Option<SocketAddr>); 4] {
        self.listens_all().map(|(flag, addr, _)| (flag, addr))
    }

    /// The listeners asked for, with their flags and whether each is TLS.
    pub fn listens_all(&self) -> [(&'static str, Option<SocketAddr>, bool); 4] {
        [
            ("--xml", self.xml, false),
            ("--xml-framed", self.xml_framed, false),
            ("--xml-tls", self.xml_tls, true),
            ("--xml-framed-tls", self.xml_framed_tls, true),
        ]
    }

    /// Starts the listeners asked for, sharing one link to the gateway `upstream`;
    /// orders past the engine's memory are read from the history store at `history`.
    pub async fn start(
        &self,
        upstream: bourse_port::Upstream,
        key: Option<ApiKey>,
        history: Option<&str>,
        tls: Option<bourse_port::EdgeTls>,
    ) -> Result<Vec<XmlServer>, String> {
        if self.tls_wanted() && tls.is_none() {
            return Err("--xml-tls and --xml-framed-tls need a certificate: --tls-cert and --tls-key, or --pki".into());
        }
        let mut config = ExchangeConfig::new(Vec::new());
        config.upstream = upstream;
        config.key = key;
        config.scales = Scales { quantity: self.xml_quantity_scale, price: self.xml_price_scale };
        config.self_trade = match self.xml_self_trade {
            SelfTrade::Allow => Stp::Allow,
            SelfTrade::CancelResting => Stp::CancelResting,
            SelfTrade::CancelIncoming => Stp::CancelIncoming,
        };
        config.quote_asset = self.xml_quote.clone();
        config.sessions = self.xml_sessions;
        let history: Arc<dyn OrderHistory> = match history {
            Some(url) => Arc::new(StoreHistory::open(url).await?),
            None => Arc::new(NoHistory),
        };
        let exchange = Arc::new(Exchange::connect(config, history).await.map_err(|e| format!("--xml: {e}"))?);
        let mut servers = Vec::new();
        let listeners = [
            (self.xml, Framing::Bare, false),
            (self.xml_framed, Framing::Prefixed, false),
            (self.xml_tls, Framing::Bare, true),
            (self.xml_framed_tls, Framing::Prefixed, true),
        ];
        for (listen, framing, over_tls) in listeners {
            let Some(listen) = listen else { continue };
            let mut config = XmlConfig::new(listen, framing);
            config.tls = tls.clone().filter(|_| over_tls);
            config.limits.request_bytes_max = self.xml_max_request_bytes;
            config.max_children = self.xml_max_children;
            config.limits.io_timeout = Duration::from_millis(self.xml_read_timeout_ms);
            config.limits.idle_timeout = Duration::from_millis(self.xml_idle_timeout_ms);
            config.limits.connections_max = self.xml_max_connections;
            let server =
                XmlServer::start(config, Arc::clone(&exchange)).await.map_err(|e| format!("--xml {listen}: {e}"))?;
            let mode = if framing == Framing::Bare { "bare replies" } else { "length-prefixed replies" };
            let over = if over_tls { ", TLS" } else { "" };
            println!("XML exchange protocol on {} ({mode}{over})", server.addr());
            servers.push(server);
        }
        Ok(servers)
    }
}

/// The XML front end's order history: the history store, read on tokio's blocking
/// threads (the PostgreSQL client is synchronous) over one connection, opened at start
/// and again after an error.
pub struct StoreHistory {
    url: String,
    store: Arc<Mutex<Option<Store>>>,
}

impl StoreHistory {
    /// Opens the store at `url` (a SQLite file or `postgres://…`) once, so a wrong URL
    /// stops the gateway at start rather than at the first old order.
    pub async fn open(url: &str) -> Result<StoreHistory, String> {
        let owned = url.to_string();
        let store = tokio::task::spawn_blocking(move || Store::open(&owned))
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("--history {url}: {e}"))?;
        Ok(StoreHistory { url: url.to_string(), store: Arc::new(Mutex::new(Some(store))) })
    }
}

impl OrderHistory for StoreHistory {
    fn order(&self, id: u64) -> Pin<Box<dyn Future<Output = Result<Option<proto::OrderInfo>, String>> + Send + '_>> {
        let (url, store) = (self.url.clone(), Arc::clone(&self.store));
        Box::pin(async move {
            let Ok(id) = i64::try_from(id) else { return Ok(None) };
            tokio::task::spawn_blocking(move || {
                let mut slot = store.lock().expect("history store lock");
                if slot.is_none() {
                    *slot = Some(Store::open(&url).map_err(|e| format!("history store {url}: {e}"))?);
                }
                let read = bourse_history::query::order_view(slot.as_mut().expect("opened"), id);
                if read.is_err() {
                    *slot = None;
                }
                read.map(|view| view.as_ref().map(proto::OrderInfo::from)).map_err(|e| format!("history store: {e}"))
            })
            .await
            .map_err(|e| format!("history store task: {e}"))?
        })
    }
}

//! # bourse-port
//!
//! The one way every front end (REST/WebSocket, FIX, XML, day trading) reaches the
//! exchange. A front end decodes its protocol, calls the port, and encodes the answer;
//! what lies between is here, once:
//!
//! - **Where the gateway is** ([`Upstream`]): in this process whenever the front end
//!   runs in the gateway's process — sessions, queries and market data are then the
//!   gateway's own services called as values (`bourse_client::LocalGateway`), with the
//!   same key checks, limits and stamps as over its listener but no protobuf encoding,
//!   HTTP/2 or loopback socket — and over gRPC only when it is remote.
//! - **Order entry per key** ([`KeySession`]): one exactly-once `Client` session,
//!   opened on first use and opened anew (new client id) after it ended; commands
//!   refused for the session's rate or in-flight limit can be retried.
//! - **The catalog** ([`Catalog`]): asset and symbol names to ids. Both are immutable
//!   once created, so only a miss is asked upstream.
//! - **Read-your-writes** ([`Port::acked_index`]): the highest log index of any command
//!   this front end had acknowledged; a query answered at a lower index is asked again
//!   as a linearizable read ([`Port::query_after`]) on a shared connection
//!   ([`Port::query_pool`]).
//! - **Refusals** ([`Refusal`]): the codes 1000 and up, defined once in
//!   `bourse_protocol::refusal`.
//! - **Order events** ([`OrderEvent`]): fills and cancellations decoded to engine
//!   types; an event the port cannot decode is logged and skipped, never defaulted.
//! - **Listeners** ([`listener`]): connection limits, timeouts and request caps, one
//!   settings type and one accept loop for every front end, plain or TLS
//!   ([`EdgeTls`]; the handshake under the same deadline as the first request).

mod catalog;
mod events;
pub mod listener;
mod session;
mod stream;

use std::sync::atomic::{AtomicU64, Ordering};

pub use bourse_client::{ApiKey, Client, ClientOptions, Error, KeyRights, LocalGateway, QueryClient, QueryPool, Reply};
pub use bourse_pki::{Alpn, EdgeFiles, EdgeTls};
pub use bourse_protocol::refusal::Refusal;
pub use catalog::Catalog;
pub use events::{OrderEvent, OrderEvents};
pub use listener::{render_metrics, Connection, KeyConnections, KeyHold, Listener, ListenerLimits, ListenerStats};
pub use session::KeySession;
pub use stream::{EdgeRead, EdgeStream, EdgeWrite};

/// Where the gateway is.
#[derive(Clone, Debug)]
pub enum Upstream {
    /// In this process: its services are called without a network hop.
    InProcess(LocalGateway),
    /// Over gRPC: a gateway's listen address, or nodes (which check no keys).
    Remote(Vec<String>),
}

impl Upstream {
    /// Addresses for logs and health pages ("… (in process)" for a local gateway).
    pub fn describe(&self) -> Vec<String> {
        match self {
            Upstream::InProcess(gateway) => vec![format!("{} (in process)", gateway.0.name())],
            Upstream::Remote(endpoints) => endpoints.clone(),
        }
    }

    /// Whether there is nowhere to go (a remote upstream with no address).
    pub fn is_empty(&self) -> bool {
        matches!(self, Upstream::Remote(endpoints) if endpoints.is_empty())
    }

    /// What `key` may see, when the gateway is in this process; over gRPC the port
    /// cannot tell (`None`), and a front end shows only what anyone may see.
    pub fn rights(&self, key: Option<&str>) -> Option<KeyRights> {
        match self {
            Upstream::InProcess(gateway) => gateway.0.rights(key),
            Upstream::Remote(_) => None,
        }
    }

    /// Opens an order-entry session of client `id`.
    pub async fn client(&self, id: bourse_engine::ClientId, options: ClientOptions) -> Result<Client, Error> {
        match self {
            Upstream::InProcess(gateway) => Client::connect_local(gateway.clone(), id, options).await,
            Upstream::Remote(endpoints) => Client::connect(endpoints.clone(), id, options).await,
        }
    }

    /// Opens a query client (queries and market data).
    pub async fn query(&self, options: ClientOptions) -> Result<QueryClient, Error> {
        match self {
            Upstream::InProcess(gateway) => QueryClient::connect_local(gateway.clone(), options),
            Upstream::Remote(endpoints) => QueryClient::connect(endpoints.clone(), options).await,
        }
    }
}

/// A front end's port: its upstream, its catalog and what it had acknowledged.
pub struct Port {
    upstream: Upstream,
    catalog: Catalog,
    /// The highest log index of a command this front end had acknowledged.
    acked: AtomicU64,
}

impl Port {
    pub fn new(upstream: Upstream) -> Port {
        Port { upstream, catalog: Catalog::default(), acked: AtomicU64::new(0) }
    }

    pub fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    pub fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Options of a session or query client acting with `key`.
    pub fn options(key: Option<ApiKey>) -> ClientOptions {
        ClientOptions { api_key: key, ..ClientOptions::default() }
    }

    /// A query client acting with `key`.
    pub async fn query(&self, key: Option<ApiKey>) -> Result<QueryClient, Error> {
        self.upstream.query(Port::options(key)).await
    }

    /// Notes that a command was acknowledged at `log_index`.
    pub fn acked(&self, log_index: u64) {
        self.acked.fetch_max(log_index, Ordering::AcqRel);
    }

    /// The highest log index this front end has had acknowledged.
    pub fn acked_index(&self) -> u64 {
        self.acked.load(Ordering::Acquire)
    }

    /// A shared query connection acting with `key` ([`QueryPool`]).
    pub fn query_pool(&self, key: Option<ApiKey>) -> QueryPool {
        let upstream = self.upstream.clone();
        QueryPool::new(move || {
            let upstream = upstream.clone();
            let options = Port::options(key.clone());
            async move { upstream.query(options).await }
        })
    }

    /// Runs `call` on `pool` so that it sees every command this front end had
    /// acknowledged: a reply read below [`Port::acked_index`] (a follower behind the
    /// leader) or a "not found" is asked again as a linearizable read. `index` says at
    /// which log index a reply was read.
    pub async fn query_after<T, F>(&self, pool: &QueryPool, index: fn(&T) -> u64, call: F) -> Result<T, Error>
    where
        F: for<'a> Fn(
            &'a mut QueryClient,
        ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, Error>> + Send + 'a>>,
    {
        let wanted = self.acked_index();
        match pool.call(false, &call).await {
            Ok(reply) if index(&reply) >= wanted => return Ok(reply),
            Ok(_) | Err(Error::NotFound(_)) => {}
            Err(error) => return Err(error),
        }
        pool.call(true, &call).await
    }
}

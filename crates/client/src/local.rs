//! Order entry and queries in the same process: a front end that runs inside a
//! gateway's process (REST, FIX, XML, day trading) opens its sessions and asks its
//! queries on the gateway without a network hop. The gateway runs the very session it runs for a gRPC caller — the key from
//! the request's metadata, its checks and limits, its stamp — and the [`Client`] keeps
//! all of its own behaviour (window, exactly-once seqs, resends after a broken
//! session); only protobuf encoding, HTTP/2 and the loopback socket are left out, and
//! with them about a third of the front end's work per command (docs/BENCHMARKS.md).
//!
//! [`Client`]: crate::Client

use std::pin::Pin;
use std::sync::Arc;

use bourse_protocol::proto;

/// The gateway's `MarketData` service, its subscription stream typed.
pub type LocalMarketData =
    dyn proto::market_data_server::MarketData<SubscribeStream = MessageStream<proto::MarketDataUpdate>>;

/// A stream of messages or of the status that ended it: one direction of a session.
pub type MessageStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// What a gateway offers to front ends in its process: `OrderEntry.Session`, and its
/// `Query` and `MarketData` services, called as values. Each checks the API key in
/// the request's metadata exactly as the gateway's listener does.
pub trait LocalOrderEntry: Send + Sync + 'static {
    /// The gateway's name in logs (its listen address).
    fn name(&self) -> String;

    /// Opens a session as `OrderEntry.Session` would: the request's metadata carries
    /// the API key; the answer is the stream of server batches.
    fn session(
        &self,
        request: tonic::Request<MessageStream<proto::ClientBatch>>,
    ) -> Result<MessageStream<proto::ServerBatch>, tonic::Status>;

    /// The gateway's `Query` service (the key's accounts only; passed to the cluster).
    fn query(&self) -> Arc<dyn proto::query_server::Query>;

    /// The gateway's `MarketData` service (its held-and-released feed).
    fn market_data(&self) -> Arc<LocalMarketData>;

    /// What `key` may see (`None` for a key the gateway does not know): for front ends
    /// that show other parties' data only to those entitled.
    fn rights(&self, key: Option<&str>) -> Option<KeyRights>;
}

/// What a key may see: every account (`admin`), or its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyRights {
    /// The key's name in the key file.
    pub name: String,
    pub admin: bool,
    pub accounts: Vec<u32>,
}

impl KeyRights {
    /// Whether the key may see `account`'s side of a trade.
    pub fn sees(&self, account: u32) -> bool {
        self.admin || self.accounts.contains(&account)
    }
}

/// A handle on a gateway in this process (cheap to clone).
#[derive(Clone)]
pub struct LocalGateway(pub Arc<dyn LocalOrderEntry>);

impl std::fmt::Debug for LocalGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalGateway({})", self.0.name())
    }
}

//! The upstream gRPC sessions, one per API key, and the catalog of names.
//!
//! A [`Session`] holds, for one key, an order-entry [`Client`] (opened on the first
//! command, and opened anew with a new client id when the old one ended: a client whose
//! session ended cannot trust its seqs to be gapless) and a [`QueryClient`]. Commands of
//! one key share its client's 128-command window; queries of one key take turns on its
//! query client. The fills and cancellations the gateway sends the client are handed to
//! the key's WebSocket subscribers through a broadcast channel.
//!
//! The catalog maps asset and symbol names to ids. Both are immutable once created, so
//! a name is looked up upstream only when the catalog does not know it yet.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use bourse_client::{random_client_id, ApiKey, Client, ClientOptions, QueryClient};
use bourse_engine::command::CommandBody;
use bourse_engine::{Outcome, Reject};
use bourse_protocol::proto;
use tokio::sync::{broadcast, Mutex};

use crate::error::ApiError;
use crate::model::Accepted;
use crate::ws::WsOrderEvent;

/// Events of a key's orders buffered for its WebSocket subscribers.
const EVENTS_BUFFER: usize = 4_096;

/// The sessions of every key seen, and the catalog.
pub struct Upstreams {
    endpoints: Vec<String>,
    sessions: Mutex<HashMap<Option<String>, Arc<Session>>>,
    catalog: RwLock<Catalog>,
}

/// One key's way upstream.
pub struct Session {
    key: Option<ApiKey>,
    endpoints: Vec<String>,
    client: Mutex<Option<Client>>,
    query: Mutex<QueryClient>,
    events: broadcast::Sender<WsOrderEvent>,
}

#[derive(Default)]
struct Catalog {
    assets: Vec<proto::AssetInfo>,
    symbols: Vec<proto::SymbolInfo>,
}

impl Upstreams {
    pub fn new(endpoints: Vec<String>) -> Self {
        Upstreams { endpoints, sessions: Mutex::new(HashMap::new()), catalog: RwLock::new(Catalog::default()) }
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The session of `key`, connecting its query client on first use. A key the
    /// gateway does not know is refused here (401), and not remembered.
    pub async fn session(&self, key: Option<String>) -> Result<Arc<Session>, ApiError> {
        let mut sessions = self.sessions.lock().await;
        if let Some(session) = sessions.get(&key) {
            return Ok(Arc::clone(session));
        }
        let api_key = key.clone().map(ApiKey);
        let options = ClientOptions { api_key: api_key.clone(), ..ClientOptions::default() };
        let mut query = QueryClient::connect(self.endpoints.clone(), options).await?;
        // Proves the key: the gateway answers UNAUTHENTICATED for one it does not know.
        let assets = query.assets().await?;
        self.catalog.write().expect("catalog lock").assets = assets.assets;
        let (events, _) = broadcast::channel(EVENTS_BUFFER);
        let session = Arc::new(Session {
            key: api_key,
            endpoints: self.endpoints.clone(),
            client: Mutex::new(None),
            query: Mutex::new(query),
            events,
        });
        sessions.insert(key, Arc::clone(&session));
        Ok(session)
    }

    /// The id of the symbol named `name` (or given as an id).
    pub async fn symbol(&self, session: &Session, name: &str) -> Result<proto::SymbolInfo, ApiError> {
        if let Some(found) = self.find_symbol(name) {
            return Ok(found);
        }
        let symbols = session.query().await.symbols().await?;
        self.catalog.write().expect("catalog lock").symbols = symbols.symbols;
        self.find_symbol(name).ok_or(ApiError::Rejected(Reject::SymbolUnknown))
    }

    fn find_symbol(&self, name: &str) -> Option<proto::SymbolInfo> {
        let catalog = self.catalog.read().expect("catalog lock");
        let by_id = name.parse::<u32>().ok();
        catalog
            .symbols
            .iter()
            .find(|s| Some(s.id) == by_id || s.spec.as_ref().is_some_and(|spec| spec.name == name))
            .cloned()
    }

    /// The asset named `name` (or given as an id).
    pub async fn asset(&self, session: &Session, name: &str) -> Result<proto::AssetInfo, ApiError> {
        if let Some(found) = self.find_asset(name) {
            return Ok(found);
        }
        let assets = session.query().await.assets().await?;
        self.catalog.write().expect("catalog lock").assets = assets.assets;
        self.find_asset(name).ok_or(ApiError::Rejected(Reject::AssetUnknown))
    }

    fn find_asset(&self, name: &str) -> Option<proto::AssetInfo> {
        let catalog = self.catalog.read().expect("catalog lock");
        let by_id = name.parse::<u32>().ok();
        catalog.assets.iter().find(|a| Some(a.id) == by_id || a.name == name).cloned()
    }

    /// The name of asset `id`, as far as the catalog knows ("" when it does not).
    pub fn asset_name(&self, id: u32) -> String {
        let catalog = self.catalog.read().expect("catalog lock");
        catalog.assets.iter().find(|a| a.id == id).map(|a| a.name.clone()).unwrap_or_default()
    }

    /// Remembers the newest lists read upstream.
    pub fn learn(&self, assets: Option<Vec<proto::AssetInfo>>, symbols: Option<Vec<proto::SymbolInfo>>) {
        let mut catalog = self.catalog.write().expect("catalog lock");
        if let Some(assets) = assets {
            catalog.assets = assets;
        }
        if let Some(symbols) = symbols {
            catalog.symbols = symbols;
        }
    }
}

impl Session {
    /// The key's query client, for one call or a few.
    pub async fn query(&self) -> tokio::sync::MutexGuard<'_, QueryClient> {
        self.query.lock().await
    }

    /// The events of this key's orders (accepted here, filled, cancelled), from now on.
    pub fn subscribe_events(&self) -> broadcast::Receiver<WsOrderEvent> {
        self.events.subscribe()
    }

    /// Tells this key's WebSocket subscribers about one of its orders.
    pub fn publish(&self, event: WsOrderEvent) {
        // No subscriber is not an error: the events are simply not wanted now.
        let _ = self.events.send(event);
    }

    /// Sends one command and waits until it is committed and applied. An engine
    /// rejection is an error that changed nothing.
    pub async fn submit(&self, body: CommandBody) -> Result<Accepted, ApiError> {
        let client = self.client().await?;
        match client.submit(body).await {
            Ok(reply) => match reply.outcome {
                Outcome::Ok { id } => Ok(Accepted { id, log_index: reply.log_index, duplicate: reply.duplicate }),
                Outcome::Rejected(reject) => Err(ApiError::Rejected(reject)),
            },
            Err(error) => {
                if matches!(error, bourse_client::Error::Closed | bourse_client::Error::Unavailable { .. }) {
                    // The session is over: the next command opens a new one.
                    self.client.lock().await.take();
                }
                Err(error.into())
            }
        }
    }

    async fn client(&self) -> Result<Client, ApiError> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let options = ClientOptions { api_key: self.key.clone(), ..ClientOptions::default() };
        let client = Client::connect(self.endpoints.clone(), random_client_id(), options).await?;
        if let Some(mut events) = client.events() {
            let sender = self.events.clone();
            tokio::spawn(async move {
                while let Some(event) = events.recv().await {
                    if let Some(event) = crate::ws::order_event_from(event) {
                        let _ = sender.send(event);
                    }
                }
            });
        }
        *slot = Some(client.clone());
        Ok(client)
    }
}

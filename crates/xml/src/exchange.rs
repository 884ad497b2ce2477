//! The way to the exchange: gRPC sessions to the gateway, and what the front end may
//! remember of the exchange because it never changes.
//!
//! - **Commands** go through a pool of the front-end port's order-entry sessions
//!   ([`KeySession`]: exactly-once, resent across reconnects, answered only once
//!   committed; in the gateway's process they call it in process, without gRPC). A request's commands all
//!   go through one session, one at a time, so each sees the effects of the one before.
//!   A session that ended is replaced by a new one (new client id) on next use.
//! - **Queries** go through a pool of [`QueryClient`]s. Read-your-writes: the front end
//!   keeps the highest log index of any command it has had acknowledged; a reply read at
//!   a lower index (a follower behind the leader), or a "not found" (which carries no
//!   index), is asked again as a linearizable read, which the leader answers only after
//!   applying everything committed before. So a query sees every command this front end
//!   acknowledged, on any connection.
//! - **Remembered**: account external id → account, and symbol name → (symbol, share
//!   asset). Neither mapping ever changes in the engine once made, so only misses go
//!   upstream. The quote asset is looked up (or created) once, at start.
//!
//! Symbols are created on demand: asset `SYM` with `quantity_scale` decimals and pair
//! `SYM/QUOTE` (tick 1, lot 1, prices 1 to `i64::MAX`, no fees, FIFO); a concurrent
//! creator (another front end) is tolerated: a `name_taken` answer means "look again".
//! A pair or asset of that name made by someone else with other units is refused
//! ([`SymbolProblem::Incompatible`]) rather than traded at wrong prices.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bourse_client::{ApiKey, QueryClient, QueryPool};
use bourse_engine::command::{CommandBody, MatchPolicy, Stp, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, Outcome, Px, Qty, Reject, SymbolId};
use bourse_port::{KeySession, Port, Upstream};
use bourse_protocol::proto;
use tokio::sync::Mutex;

use crate::value::Scales;

/// Where the front end's commands and queries go, and in which units.
#[derive(Clone, Debug)]
pub struct ExchangeConfig {
    /// Where commands and queries go: the gateway of this process (no network hop), or
    /// gRPC addresses of a gateway (or a node, which checks no keys).
    pub upstream: Upstream,
    /// The key made for this process (admin: it creates accounts, assets and symbols).
    pub key: Option<ApiKey>,
    pub scales: Scales,
    /// Self-trade prevention of every order (spec default: allow).
    pub self_trade: Stp,
    /// The quote asset every symbol trades against, with `cash_scale` decimals.
    pub quote_asset: String,
    /// Upstream order-entry sessions (each keeps up to 128 commands in flight, so
    /// sessions × 128 requests can wait for their commit at once). Few sessions batch
    /// better: with 64 busy connections 2 sessions served about 25 % more requests a
    /// second than 8 (docs/BENCHMARKS.md).
    pub sessions: usize,
}

impl ExchangeConfig {
    /// A front end sending to the gRPC addresses `upstream`; set
    /// [`ExchangeConfig::upstream`] to a gateway of this process instead where there is one.
    pub fn new(upstream: Vec<String>) -> Self {
        ExchangeConfig {
            upstream: Upstream::Remote(upstream),
            key: None,
            scales: Scales::DEFAULT,
            self_trade: Stp::Allow,
            quote_asset: "USD".into(),
            sessions: 2,
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        self.scales.validate()?;
        if self.upstream.is_empty() {
            return Err("the XML front end needs at least one upstream address".into());
        }
        if !(1..=256).contains(&self.sessions) {
            return Err(format!("sessions = {} is outside 1..=256", self.sessions));
        }
        if self.quote_asset.is_empty() || self.quote_asset.len() > bourse_engine::NAME_LEN_MAX {
            return Err(format!("quote asset {:?} is not a valid asset name", self.quote_asset));
        }
        Ok(())
    }
}

/// Orders older than the engine keeps in memory (`orders_closed_max`) are answered by
/// the history store. This is its hook (`bourse gateway run --xml … --history URL`
/// wires the store in); [`NoHistory`] knows nothing, so such an order reads as unknown.
/// The answer is the order as the engine's order query reported it; an `Err` (the
/// store could not be read) is answered as the service being unavailable.
pub trait OrderHistory: Send + Sync {
    fn order(&self, id: u64) -> Pin<Box<dyn Future<Output = Result<Option<proto::OrderInfo>, String>> + Send + '_>>;
}

/// No history: orders out of the engine's memory are unknown.
pub struct NoHistory;

impl OrderHistory for NoHistory {
    fn order(&self, _id: u64) -> Pin<Box<dyn Future<Output = Result<Option<proto::OrderInfo>, String>> + Send + '_>> {
        Box::pin(std::future::ready(Ok(None)))
    }
}

/// The engine's ids of one XML symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolIds {
    pub symbol: SymbolId,
    /// The share asset.
    pub base: AssetId,
}

/// Why a symbol cannot be traded through this front end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SymbolProblem {
    /// An asset or pair of that name exists with units this front end cannot map.
    Incompatible,
    Upstream(String),
}

/// An upstream failure: the cluster could not be reached or answered what this front
/// end cannot read. The command may or may not have been applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("upstream: {0}")]
pub struct UpstreamError(pub String);

impl From<bourse_client::Error> for UpstreamError {
    fn from(error: bourse_client::Error) -> Self {
        UpstreamError(error.to_string())
    }
}

/// How long a command refused for the session's rate or in-flight limit is retried.
const REFUSAL_RETRY_MAX: Duration = Duration::from_secs(5);

/// The front end's link to the exchange.
pub struct Exchange {
    config: ExchangeConfig,
    /// The front-end port: where commands and queries go, what was acknowledged.
    port: Port,
    sessions: Vec<KeySession>,
    next_session: AtomicUsize,
    /// The query connection, shared by every request.
    queries: QueryPool,
    quote: AssetId,
    accounts: RwLock<HashMap<u64, AccountId>>,
    symbols: RwLock<HashMap<String, SymbolIds>>,
    /// One symbol creation at a time (the rest wait and find it made).
    creating: Mutex<()>,
    history: Arc<dyn OrderHistory>,
}

impl Exchange {
    /// Connects and finds (or creates) the quote asset. Refuses to start when the quote
    /// asset exists with decimals other than `cash_scale`: its balances would mean
    /// other amounts (pick another `quote_asset`).
    pub async fn connect(config: ExchangeConfig, history: Arc<dyn OrderHistory>) -> Result<Exchange, String> {
        config.validate()?;
        let sessions =
            (0..config.sessions).map(|_| KeySession::new(config.upstream.clone(), config.key.clone())).collect();
        let port = Port::new(config.upstream.clone());
        let queries = port.query_pool(config.key.clone());
        let mut exchange = Exchange {
            port,
            sessions,
            next_session: AtomicUsize::new(0),
            queries,
            quote: AssetId(0),
            accounts: RwLock::new(HashMap::new()),
            symbols: RwLock::new(HashMap::new()),
            creating: Mutex::new(()),
            history,
            config,
        };
        exchange.quote = exchange.quote_asset().await?;
        Ok(exchange)
    }

    pub fn config(&self) -> &ExchangeConfig {
        &self.config
    }

    pub fn scales(&self) -> Scales {
        self.config.scales
    }

    pub fn quote(&self) -> AssetId {
        self.quote
    }

    /// The highest log index this front end has had acknowledged.
    pub fn acked_index(&self) -> u64 {
        self.port.acked_index()
    }

    async fn quote_asset(&self) -> Result<AssetId, String> {
        let name = self.config.quote_asset.clone();
        let decimals = self.config.scales.cash();
        for _ in 0..3 {
            let assets = self.assets().await.map_err(|e| e.to_string())?;
            if let Some(asset) = assets.iter().find(|a| a.name == name) {
                if asset.decimals != decimals {
                    return Err(format!(
                        "the quote asset {name} exists with {} decimals, but cash has {decimals} \
                         (quantity_scale + price_scale): choose another quote asset",
                        asset.decimals
                    ));
                }
                return Ok(AssetId(asset.id));
            }
            let body = CommandBody::CreateAsset { name: name.clone(), decimals: decimals as u8 };
            match self.submit(self.session(), body).await.map_err(|e| e.to_string())?.0 {
                Outcome::Ok { id } => return Ok(AssetId(id as u32)),
                Outcome::Rejected(Reject::NameTaken) => continue,
                Outcome::Rejected(reject) => return Err(format!("creating the quote asset {name}: {reject}")),
            }
        }
        Err(format!("the quote asset {name} could not be found or created"))
    }

    /// A session for one request: its commands then go through it one after another.
    pub fn session(&self) -> usize {
        self.next_session.fetch_add(1, Ordering::Relaxed) % self.sessions.len()
    }

    /// Sends one command through `session` and waits until it is committed and applied:
    /// the engine's outcome and the log index. Refusals for the session's rate or
    /// in-flight limit are retried (they did not reach the log).
    pub async fn submit(&self, session: usize, body: CommandBody) -> Result<(Outcome, u64), UpstreamError> {
        let reply = self.sessions[session].submit_patiently(body, REFUSAL_RETRY_MAX).await?;
        self.port.acked(reply.log_index);
        Ok((reply.outcome, reply.log_index))
    }

    /// A query that must see every command acknowledged so far (see the module
    /// documentation): `Ok(None)` for "not found".
    async fn query_fresh<T, F>(&self, index_of: fn(&T) -> u64, call: F) -> Result<Option<T>, UpstreamError>
    where
        F: for<'a> Fn(&'a mut QueryClient) -> Pin<Box<dyn Future<Output = bourse_client::Result<T>> + Send + 'a>>,
    {
        match self.port.query_after(&self.queries, index_of, call).await {
            Ok(reply) => Ok(Some(reply)),
            Err(bourse_client::Error::NotFound(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    async fn assets(&self) -> Result<Vec<proto::AssetInfo>, UpstreamError> {
        let reply = self.query_fresh(|r: &proto::GetAssetsReply| r.log_index, |c| Box::pin(c.assets())).await?;
        Ok(reply.map(|r| r.assets).unwrap_or_default())
    }

    async fn symbols(&self) -> Result<Vec<proto::SymbolInfo>, UpstreamError> {
        let reply = self.query_fresh(|r: &proto::GetSymbolsReply| r.log_index, |c| Box::pin(c.symbols())).await?;
        Ok(reply.map(|r| r.symbols).unwrap_or_default())
    }

    /// The account created with `external_id`, if there is one.
    pub async fn account(&self, external_id: u64) -> Result<Option<AccountId>, UpstreamError> {
        if let Some(&account) = self.accounts.read().expect("accounts lock").get(&external_id) {
            return Ok(Some(account));
        }
        let reply = self
            .query_fresh(
                |r: &proto::GetAccountReply| r.log_index,
                move |c| Box::pin(c.account_by_external_id(external_id)),
            )
            .await?;
        Ok(reply.map(|reply| self.remember_account(external_id, AccountId(reply.account))))
    }

    /// Remembers an account this front end created or found.
    pub fn remember_account(&self, external_id: u64, account: AccountId) -> AccountId {
        self.accounts.write().expect("accounts lock").insert(external_id, account);
        account
    }

    /// An order as the exchange remembers it (or the history store, past the engine's
    /// memory), read after every command acknowledged so far.
    pub async fn order(&self, id: u64) -> Result<Option<proto::OrderInfo>, UpstreamError> {
        let reply = self
            .query_fresh(|r: &proto::GetOrderReply| r.log_index, move |c| Box::pin(c.order(bourse_engine::OrderId(id))))
            .await?;
        let order = match reply.and_then(|reply| reply.order) {
            Some(order) => order,
            None => match self.history.order(id).await.map_err(UpstreamError)? {
                Some(order) => order,
                None => return Ok(None),
            },
        };
        // The reports compare the status with known values: one this version does not
        // know is the exchange's answer it cannot read, not a closed order.
        bourse_protocol::convert::order_status_from_proto(order.status, "OrderInfo.status")
            .map_err(|e| UpstreamError(format!("an answer this front end cannot read: {e}")))?;
        Ok(Some(order))
    }

    /// The engine's ids of XML symbol `name`; with `create`, it is made if it does not
    /// exist (`Ok(None)` only without `create`).
    pub async fn symbol(&self, name: &str, create: bool) -> Result<Option<SymbolIds>, SymbolProblem> {
        if let Some(&ids) = self.symbols.read().expect("symbols lock").get(name) {
            return Ok(Some(ids));
        }
        let upstream = |e: UpstreamError| SymbolProblem::Upstream(e.0);
        if let Some(ids) = self.symbol_lookup(name).await? {
            return Ok(Some(ids));
        }
        if !create {
            return Ok(None);
        }
        let _one_at_a_time = self.creating.lock().await;
        for _ in 0..3 {
            if let Some(ids) = self.symbol_lookup(name).await? {
                return Ok(Some(ids));
            }
            let assets = self.assets().await.map_err(upstream)?;
            let base = match assets.iter().find(|a| a.name == name) {
                Some(asset) if asset.decimals == self.config.scales.quantity => AssetId(asset.id),
                Some(_) => return Err(SymbolProblem::Incompatible),
                None => {
                    let body =
                        CommandBody::CreateAsset { name: name.to_owned(), decimals: self.config.scales.quantity as u8 };
                    match self.submit(self.session(), body).await.map_err(upstream)?.0 {
                        Outcome::Ok { id } => AssetId(id as u32),
                        Outcome::Rejected(Reject::NameTaken) => continue,
                        Outcome::Rejected(_) => return Err(SymbolProblem::Incompatible),
                    }
                }
            };
            let spec = self.pair_spec(name, base);
            match self.submit(self.session(), CommandBody::CreateSymbol(Box::new(spec))).await.map_err(upstream)?.0 {
                Outcome::Ok { id } => {
                    let ids = SymbolIds { symbol: SymbolId(id as u32), base };
                    self.symbols.write().expect("symbols lock").insert(name.to_owned(), ids);
                    return Ok(Some(ids));
                }
                Outcome::Rejected(Reject::NameTaken) => continue,
                Outcome::Rejected(_) => return Err(SymbolProblem::Incompatible),
            }
        }
        Err(SymbolProblem::Upstream(format!("symbol {name} could not be found or created")))
    }

    fn pair_name(&self, name: &str) -> String {
        format!("{name}/{}", self.config.quote_asset)
    }

    /// What this front end makes of XML symbol `name`: one share unit per lot and per
    /// tick, every positive price, no fees.
    fn pair_spec(&self, name: &str, base: AssetId) -> SymbolSpec {
        SymbolSpec {
            name: self.pair_name(name),
            base,
            quote: self.quote,
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(i64::MAX),
            fee_maker: Amount(0),
            fee_taker: Amount(0),
            policy: MatchPolicy::Fifo,
        }
    }

    /// Looks the pair up upstream; remembers it when it has our units.
    async fn symbol_lookup(&self, name: &str) -> Result<Option<SymbolIds>, SymbolProblem> {
        let upstream = |e: UpstreamError| SymbolProblem::Upstream(e.0);
        let pair = self.pair_name(name);
        let symbols = self.symbols().await.map_err(upstream)?;
        let Some(found) = symbols.iter().find(|s| s.spec.as_ref().is_some_and(|spec| spec.name == pair)) else {
            return Ok(None);
        };
        let spec = found.spec.as_ref().expect("found by its spec");
        let assets = self.assets().await.map_err(upstream)?;
        let base_ok =
            assets.iter().any(|a| a.id == spec.base && a.name == name && a.decimals == self.config.scales.quantity);
        if !base_ok || spec.quote != self.quote.0 || spec.tick != 1 || spec.lot != 1 {
            return Err(SymbolProblem::Incompatible);
        }
        let ids = SymbolIds { symbol: SymbolId(found.id), base: AssetId(spec.base) };
        self.symbols.write().expect("symbols lock").insert(name.to_owned(), ids);
        Ok(Some(ids))
    }
}

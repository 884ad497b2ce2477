//! The service: takes day-trading calls, attaches quotes where they are needed, submits
//! them to the exchange through the gateway's order-entry sessions and answers each
//! once its command is committed. It holds no business rule: every check and effect is
//! the engine's (`bourse_engine::daytrading`); the service decides only whether to
//! fetch a quote (spec 7.1).
//!
//! ```text
//! call ─▶ lane of its user ─▶ quote? (view of the cache) ─▶ session = hash(user) ─▶ gateway ─▶ log
//!  ◀── response (result, log index; DUMPLOG: the dump from the history store) ◀── ack
//! ```
//!
//! - **Order**: one user's commands take effect in the order they came. A user's calls
//!   go through one upstream session (chosen by hashing the userid), whose seqs keep
//!   their order; a call that must wait for a slow quote holds its user's later calls in
//!   the user's *lane* until it is sent. Calls of different users never wait for each
//!   other's quotes.
//! - **Quotes**: `QUOTE`, `BUY` and `SELL` whose arguments are well formed, of a user not
//!   known to be missing, get a fresh quote when the service's view of the cache has
//!   less than `refresh_margin_ms` of validity left. The view learns from committed
//!   results (an attached quote arrived at its entry's stamp; a `QUOTE` reports its
//!   cached quote's arrival). A view that is wrong costs at most an extra hit or a
//!   `quote unavailable`, both logged.
//! - **One fetch per symbol at a time** ([`crate::quote::flight`]): of the calls that
//!   need a fresh quote of one symbol at once, the first fetches and carries the quote
//!   into the log with its command; the others wait in their users' lanes until that
//!   command is committed, then go without a quote and the engine serves them from its
//!   cache. A symbol is fetched once per validity window however many users ask.
//! - **Exactly once**: the upstream sessions are `bourse_client::Client`s: a command is
//!   resent across reconnects and leader changes until answered, and the engine applies
//!   it once; a retry's answer comes from the user's recent history.
//! - **Bounds**: `sessions` upstream sessions of 128 commands in flight each; a caller's
//!   stream holds at most `CALLS_IN_FLIGHT_MAX` unanswered calls.

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_client::{ApiKey, Client, ClientOptions, LocalGateway, SessionEvent};
use bourse_engine::command::CommandBody;
use bourse_engine::daytrading::{amount_parse, userid_valid, DtCommand, DtError, DtKind, DtQuote, DtRequest, Sym};
use bourse_protocol::proto;
use rustc_hash::{FxHashMap, FxHashSet, FxHasher};
use tokio::sync::{mpsc, oneshot};

use crate::quote::flight::{Flight, Flights, Landing, Turn};
use crate::quote::{Clock, Quoter};

/// Users known to be missing that the view remembers, at most.
const MISSING_USERS_MAX: usize = 65_536;

/// Unanswered calls one caller's stream may have.
pub const CALLS_IN_FLIGHT_MAX: usize = 65_536;

/// The service's settings (spec section 12, the parts that are the service's).
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The gateway's listen address (and others to fail over to).
    pub upstream: Vec<String>,
    /// The gateway when it runs in this process: sessions and queries go to it in
    /// process (`bourse_port::Upstream::InProcess`) instead of to `upstream`.
    pub local: Option<LocalGateway>,
    /// The service's own key: an administrator's (it vouches for callers).
    pub key: Option<ApiKey>,
    pub clock: Clock,
    /// Fetch a fresh quote when the cached one has less than this left. (The validity
    /// itself is the engine's: [`Service::start`] reads it from the exchange.)
    pub refresh_margin_ms: u64,
    /// How often the trigger poller looks; 0 turns it off.
    pub trigger_poll_ms: u64,
    pub dump_dir: PathBuf,
    pub log_server_name: String,
    /// The history store `DUMPLOG` reads (SQLite path or `postgres://…`).
    pub history: Option<String>,
    /// How long a `DUMPLOG` waits for the history store to reach its entry.
    pub dump_wait: Duration,
    /// Upstream order-entry sessions: together they bound the commands in flight to the
    /// exchange (128 each), which must cover the journal's group commit at full rate.
    pub sessions: usize,
}

impl ServiceConfig {
    pub fn new(upstream: Vec<String>) -> ServiceConfig {
        ServiceConfig {
            upstream,
            local: None,
            key: None,
            clock: Clock::Wall,
            refresh_margin_ms: 2_000,
            trigger_poll_ms: 1_000,
            dump_dir: PathBuf::from("dumps"),
            log_server_name: "bourse-dt".into(),
            history: None,
            dump_wait: Duration::from_secs(600),
            sessions: 64,
        }
    }

    /// Where the service's sessions and queries go on the front-end port.
    pub(crate) fn port_upstream(&self) -> bourse_port::Upstream {
        match &self.local {
            Some(gateway) => bourse_port::Upstream::InProcess(gateway.clone()),
            None => bourse_port::Upstream::Remote(self.upstream.clone()),
        }
    }

    pub(crate) fn client_options(&self) -> ClientOptions {
        ClientOptions {
            api_key: self.key.clone(),
            batch_len_max: 128,
            unavailable_max: Duration::from_secs(60),
            events_capacity: 4_096,
            ..ClientOptions::default()
        }
    }
}

/// One call: a command as a caller sent it, and who the caller is.
#[derive(Clone, Debug)]
pub struct Call {
    pub id: u64,
    pub kind: DtKind,
    pub args: Vec<String>,
    pub transaction_num: u64,
    pub caller: String,
    pub admin: bool,
}

impl Call {
    /// The user whose lane and session the call takes (the global `DUMPLOG`: none).
    fn user(&self) -> &str {
        if self.kind == DtKind::DumpLog && self.args.len() == 1 {
            return "";
        }
        self.args.first().map_or("", String::as_str)
    }

    /// The symbol the call needs a price for, if its arguments are well formed.
    fn priced_symbol(&self) -> Option<Sym> {
        let needs = matches!(self.kind, DtKind::Quote | DtKind::Buy | DtKind::Sell);
        if !needs || self.args.len() != self.kind.arity() || !userid_valid(&self.args[0]) {
            return None;
        }
        if self.kind != DtKind::Quote && amount_parse(&self.args[2]).is_none() {
            return None;
        }
        Sym::parse(&self.args[1])
    }
}

/// Where a call's response goes.
pub enum Replier {
    Stream(mpsc::UnboundedSender<proto::DayTradingResponse>),
    Once(oneshot::Sender<proto::DayTradingResponse>),
}

impl Replier {
    fn send(self, response: proto::DayTradingResponse) {
        match self {
            Replier::Stream(sender) => {
                let _caller_gone = sender.send(response);
            }
            Replier::Once(sender) => {
                let _caller_gone = sender.send(response);
            }
        }
    }
}

/// A failure response: the call did not reach the log (or its answer was lost).
pub fn failure(id: u64, why: impl Into<String>) -> proto::DayTradingResponse {
    proto::DayTradingResponse { id, failure: why.into(), ..proto::DayTradingResponse::default() }
}

/// A call sent upstream, waiting for its ack.
struct Pending {
    call: Call,
    replier: Replier,
    quote: Option<(Sym, i64)>,
    /// The flight of the attached quote, landed once the command is committed.
    flight: Option<Flight>,
}

/// One upstream order-entry session and the calls it carries.
struct Upstream {
    client: Client,
    waiting: Mutex<FxHashMap<u64, Pending>>,
    /// The answers, until the reader task takes them.
    events: Mutex<Option<bourse_client::Events>>,
}

/// What the service believes of the ledger: cached quotes and users known not to exist.
#[derive(Default)]
struct View {
    /// Symbol → (price, arrival stamp ms).
    quotes: FxHashMap<Sym, (i64, u64)>,
    missing: FxHashSet<String>,
}

/// A user's calls waiting behind one whose quote is being fetched.
#[derive(Default)]
struct Lane {
    queue: VecDeque<(Call, Replier)>,
}

pub struct Service {
    config: ServiceConfig,
    /// The engine's quote validity, read from the exchange at start.
    quote_ttl_ms: u64,
    quoter: Quoter,
    upstreams: Vec<Mutex<Arc<Upstream>>>,
    view: Mutex<View>,
    lanes: Mutex<FxHashMap<String, Lane>>,
    flights: Flights,
}

impl Service {
    /// Reads the engine's quote validity from the exchange and connects the upstream
    /// sessions.
    pub async fn start(config: ServiceConfig, quoter: Quoter) -> Result<Arc<Service>, String> {
        if config.sessions == 0 {
            return Err("sessions must be at least 1".into());
        }
        let quote_ttl_ms = engine_quote_ttl_ms(&config).await?;
        let mut upstreams = Vec::with_capacity(config.sessions);
        for _ in 0..config.sessions {
            upstreams.push(Mutex::new(Upstream::connect(&config).await?));
        }
        let service = Arc::new(Service {
            config,
            quote_ttl_ms,
            quoter,
            upstreams,
            view: Mutex::default(),
            lanes: Mutex::default(),
            flights: Flights::default(),
        });
        for (i, upstream) in service.upstreams.iter().enumerate() {
            let upstream = Arc::clone(&upstream.lock().expect("upstream lock"));
            Arc::clone(&service).spawn_reader(i, upstream);
        }
        Ok(service)
    }

    pub fn config(&self) -> &ServiceConfig {
        &self.config
    }

    /// The engine's quote validity (ms), which the service's view of its cache uses.
    pub fn quote_ttl_ms(&self) -> u64 {
        self.quote_ttl_ms
    }

    pub(crate) fn quoter(&self) -> &Quoter {
        &self.quoter
    }

    /// Takes a call: it is answered through `replier` once committed (or failed).
    pub async fn dispatch(self: &Arc<Self>, call: Call, replier: Replier) {
        let lead = {
            let mut lanes = self.lanes.lock().expect("lanes lock");
            if let Some(lane) = lanes.get_mut(call.user()) {
                lane.queue.push_back((call, replier));
                return;
            }
            match self.needs_fetch(&call) {
                None => None,
                // An immediate source is asked here, unless another call's fetch of the
                // symbol is in the air: then this one waits for it in a lane.
                Some(symbol) => match self.quoter.is_immediate().then(|| self.flights.join(symbol)) {
                    Some(Turn::Lead(flight)) => Some((symbol, flight)),
                    Some(Turn::Wait(_)) | None => {
                        // Hold the user's later calls until this one is sent.
                        lanes.insert(call.user().to_owned(), Lane::default());
                        let service = Arc::clone(self);
                        tokio::spawn(async move { service.run_lane(call, replier).await });
                        return;
                    }
                },
            }
        };
        let (quote, flight) = match lead {
            Some((symbol, flight)) => self.fetch_leading(&call, symbol, flight).await,
            None => (None, None),
        };
        self.send(call, quote, flight, replier).await;
    }

    /// Sends a lane's calls in order, fetching their quotes, until it is empty.
    async fn run_lane(self: Arc<Self>, first: Call, replier: Replier) {
        let user = first.user().to_owned();
        let mut next = Some((first, replier));
        while let Some((call, replier)) = next.take() {
            let (quote, flight) = self.quote_for(&call).await;
            self.send(call, quote, flight, replier).await;
            let mut lanes = self.lanes.lock().expect("lanes lock");
            let lane = lanes.get_mut(&user).expect("a running lane is there");
            next = lane.queue.pop_front();
            if next.is_none() {
                lanes.remove(&user);
            }
        }
    }

    /// The symbol to fetch a quote of for `call`, if it needs one now (spec 7.1).
    fn needs_fetch(&self, call: &Call) -> Option<Sym> {
        let symbol = call.priced_symbol()?;
        let view = self.view.lock().expect("view lock");
        if view.missing.contains(&call.args[0]) {
            // It fails with `unknown user` before it needs a price.
            return None;
        }
        let now = self.config.clock.now_ms(call.transaction_num);
        let fresh = view.quotes.get(&symbol).is_some_and(|&(_, arrival)| {
            now.saturating_sub(arrival) + self.config.refresh_margin_ms < self.quote_ttl_ms
        });
        (!fresh).then_some(symbol)
    }

    /// The quote `call` carries, if it needs one (with the flight it leads): fetched by
    /// this call, or none once another call's fetch of the symbol, waited for, has put
    /// a quote in the cache (or found the source without one).
    async fn quote_for(&self, call: &Call) -> (Option<DtQuote>, Option<Flight>) {
        while let Some(symbol) = self.needs_fetch(call) {
            match self.flights.join(symbol) {
                Turn::Lead(flight) => return self.fetch_leading(call, symbol, flight).await,
                Turn::Wait(waiting) => match waiting.landed().await {
                    // The command goes without, as the leader's did.
                    Landing::FetchFailed => return (None, None),
                    // Look again: the view has the leader's quote, or a new flight is due.
                    Landing::Committed | Landing::Lost => {}
                },
            }
        }
        (None, None)
    }

    /// Fetches the quote of `symbol` for `call`, leading `flight`: the quote and the
    /// flight travel with the command; without a quote the flight lands at once.
    async fn fetch_leading(&self, call: &Call, symbol: Sym, flight: Flight) -> (Option<DtQuote>, Option<Flight>) {
        match self.quoter.fetch(symbol, &call.args[0], call.transaction_num, &self.config.clock).await {
            Ok(quote) => (Some(quote), Some(flight)),
            Err(error) => {
                // The command goes without: the engine decides with its cache.
                tracing::warn!(%error, %symbol, "quote fetch failed");
                flight.land(Landing::FetchFailed);
                (None, None)
            }
        }
    }

    /// Whether a fetch of `symbol` is in the air (the poller leaves it to that one).
    pub(crate) fn fetching(&self, symbol: Sym) -> bool {
        self.flights.in_air(symbol)
    }

    /// The upstream session of `user`.
    fn upstream_for(&self, user: &str) -> (usize, Arc<Upstream>) {
        let mut hasher = FxHasher::default();
        user.hash(&mut hasher);
        let i = (hasher.finish() % self.upstreams.len() as u64) as usize;
        (i, Arc::clone(&self.upstreams[i].lock().expect("upstream lock")))
    }

    async fn send(self: &Arc<Self>, mut call: Call, quote: Option<DtQuote>, flight: Option<Flight>, replier: Replier) {
        let attached = quote.as_ref().map(|q| (q.symbol, q.price));
        // The command takes the call's strings; the call keeps what its answer needs:
        // its user (a DUMPLOG: every argument).
        let args = if call.kind == DtKind::DumpLog {
            call.args.clone()
        } else {
            let user = call.args.first().cloned();
            std::mem::replace(&mut call.args, user.into_iter().collect())
        };
        let command = DtCommand {
            kind: call.kind,
            args,
            transaction_num: call.transaction_num,
            caller: std::mem::take(&mut call.caller),
            admin: call.admin,
            quote,
        };
        let body = CommandBody::DayTrading(Box::new(DtRequest::Command(command)));
        let (index, upstream) = self.upstream_for(call.user());
        let pending = Pending { call, replier, quote: attached, flight };
        if let Err((pending, error)) = upstream.send(&body, pending).await {
            pending.replier.send(failure(pending.call.id, format!("unavailable: {error}")));
            self.replace_upstream(index, &upstream).await;
        }
    }

    /// Submits a poller's quote entry (its answer only confirms it was logged).
    pub(crate) async fn send_quote(self: &Arc<Self>, quote: DtQuote) -> Result<(), String> {
        let symbol = quote.symbol;
        let (_, upstream) = self.upstream_for(symbol.as_str());
        let body = CommandBody::DayTrading(Box::new(DtRequest::Quote(quote)));
        upstream.client.submit(body).await.map_err(|e| e.to_string())?;
        Ok(())
    }

    /// A session that ended for good is replaced by a new one (a new client id).
    async fn replace_upstream(self: &Arc<Self>, index: usize, dead: &Arc<Upstream>) {
        if !Arc::ptr_eq(&self.upstreams[index].lock().expect("upstream lock"), dead) {
            return;
        }
        match Upstream::connect(&self.config).await {
            Ok(fresh) => {
                let mut slot = self.upstreams[index].lock().expect("upstream lock");
                if Arc::ptr_eq(&slot, dead) {
                    *slot = Arc::clone(&fresh);
                    Arc::clone(self).spawn_reader(index, fresh);
                }
            }
            Err(error) => tracing::error!(%error, "upstream session could not be replaced"),
        }
    }

    /// Starts the task that reads `upstream`'s answers (a named future type would be
    /// recursive: the reader replaces its session and starts the next reader).
    fn spawn_reader(self: Arc<Self>, index: usize, upstream: Arc<Upstream>) {
        let reader: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> =
            Box::pin(self.read_answers(index, upstream));
        tokio::spawn(reader);
    }

    /// Reads one upstream session's answers and completes their calls.
    async fn read_answers(self: Arc<Self>, index: usize, upstream: Arc<Upstream>) {
        let Some(mut events) = upstream.events.lock().expect("events lock").take() else { return };
        while let Some(event) = events.recv().await {
            let (seq, answer) = match event {
                SessionEvent::Reply(reply) => (reply.seq, Ok(reply)),
                SessionEvent::Failed { seq, error } => (seq, Err(error.to_string())),
                SessionEvent::Fill(_) | SessionEvent::Cancel(_) => continue,
            };
            let Some(pending) = upstream.waiting.lock().expect("waiting lock").remove(&seq) else { continue };
            match answer {
                Ok(reply) => self.complete(pending, reply),
                Err(error) => pending.replier.send(failure(pending.call.id, error)),
            }
        }
        // The session is over: what still waits is failed, and a new session takes over.
        let orphans: Vec<Pending> = upstream.waiting.lock().expect("waiting lock").drain().map(|(_, p)| p).collect();
        for pending in orphans {
            pending.replier.send(failure(pending.call.id, "unavailable: the upstream session ended"));
        }
        self.replace_upstream(index, &upstream).await;
    }

    /// A committed answer: learn from it, then respond (a `DUMPLOG` after its dump).
    fn complete(self: &Arc<Self>, mut pending: Pending, reply: bourse_client::Reply) {
        let Some(result) = reply.day_trading else {
            let why = match reply.outcome {
                bourse_engine::Outcome::Rejected(reject) => format!("rejected: {}", reject.name()),
                bourse_engine::Outcome::Ok { .. } => "no result".into(),
            };
            pending.replier.send(failure(pending.call.id, why));
            return;
        };
        self.learn(&pending, &result);
        if let Some(flight) = pending.flight.take() {
            // The engine logged and cached the quote: the calls waiting for it go now.
            flight.land(Landing::Committed);
        }
        let response = proto::DayTradingResponse {
            id: pending.call.id,
            result: Some(*result),
            log_index: reply.log_index,
            dump: None,
            failure: String::new(),
        };
        let is_dump =
            pending.call.kind == DtKind::DumpLog && response.result.as_ref().is_some_and(|r| r.error_code == 0);
        if is_dump {
            let service = Arc::clone(self);
            tokio::spawn(async move {
                let response = crate::dump::complete(&service.config, &pending.call, response).await;
                pending.replier.send(response);
            });
        } else {
            pending.replier.send(response);
        }
    }

    /// Updates the view from a committed result.
    fn learn(&self, pending: &Pending, result: &proto::DayTradingResult) {
        let mut view = self.view.lock().expect("view lock");
        if let Some((symbol, price)) = pending.quote {
            view.quotes.insert(symbol, (price, result.stamp));
        }
        if let (Some(price), Some(arrival)) = (result.price, result.quote_arrival) {
            if let Some(symbol) = Sym::parse(&result.symbol) {
                let newer = view.quotes.get(&symbol).is_none_or(|&(_, known)| known < arrival);
                if newer {
                    view.quotes.insert(symbol, (price, arrival));
                }
            }
        }
        let user = pending.call.user();
        match DtError::from_code(u64::from(result.error_code)) {
            Some(DtError::UnknownUser) => {
                if view.missing.len() >= MISSING_USERS_MAX {
                    // Forgetting costs at most a quote fetched for a command that fails.
                    view.missing.clear();
                }
                view.missing.insert(user.to_owned());
            }
            None if pending.call.kind == DtKind::Add => {
                view.missing.remove(user);
            }
            _ => {}
        }
    }
}

/// The engine's quote validity, asked of the exchange through the gateway
/// (`Query.GetDayTradingConfig`): one setting, the node's, so the service's view of the
/// cache cannot disagree with the cache.
async fn engine_quote_ttl_ms(config: &ServiceConfig) -> Result<u64, String> {
    let read = async {
        let mut query = config.port_upstream().query(config.client_options()).await?;
        query.day_trading_config().await
    };
    let settings = read
        .await
        .map_err(|e| format!("day trading: the exchange's settings could not be read at {:?}: {e}", config.upstream))?;
    Ok(settings.quote_ttl_ms)
}

impl Upstream {
    async fn connect(config: &ServiceConfig) -> Result<Arc<Upstream>, String> {
        let id = bourse_client::random_client_id();
        let client = config
            .port_upstream()
            .client(id, config.client_options())
            .await
            .map_err(|e| format!("day trading: the gateway at {:?}: {e}", config.upstream))?;
        let events = client.events();
        Ok(Arc::new(Upstream { client, waiting: Mutex::default(), events: Mutex::new(events) }))
    }

    /// Sends `body` and files `pending` under its seq, or gives it back with the error.
    async fn send(&self, body: &CommandBody, pending: Pending) -> Result<(), (Pending, String)> {
        let permit = match self.client.reserve().await {
            Ok(permit) => permit,
            Err(error) => return Err((pending, error.to_string())),
        };
        // Filed under the same lock the answer reader takes, so it cannot miss it.
        let mut waiting = self.waiting.lock().expect("waiting lock");
        match permit.send(body) {
            Ok(seq) => {
                waiting.insert(seq, pending);
                Ok(())
            }
            Err(error) => Err((pending, error.to_string())),
        }
    }
}

//! The load driver: many order entry sessions sending a seeded order flow at a node (or a
//! cluster), measuring answered commands per second and latency.
//!
//! [`run_load`] first sets up the market through `Admin` (the two assets and the symbol,
//! looked up by name with `GetAssets`/`GetSymbols` and created only when missing), then
//! gives each connection — a [`Client`] with its own random client id — its own new
//! accounts, funded with deposits and credits. Then every connection sends its
//! [`flow::OrderFlow`] for `seconds`:
//! - **open loop** when `rate` is given: command `i` of a connection has the intended
//!   send time `start + i / (rate / connections)`, and its latency is measured from that
//!   time to its answer, so a stalled node or a full window shows up as latency instead
//!   of silently slowing the sender (no coordinated omission);
//! - **flat out** otherwise: each connection keeps its window full, and latency is
//!   measured from each send.
//!
//! Latencies go to one HDR histogram per connection (µs). A progress line goes to stderr
//! every second; at the end the histograms are merged into a [`LoadReport`]. After
//! `seconds` the connections stop sending and wait up to `drain_max` for the answers
//! still owed; anything unanswered then counts as an error.

pub mod flow;
pub mod report;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_engine::command::{CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, Outcome, Px, Qty, SymbolId};
use hdrhistogram::Histogram;
use rustc_hash::FxHashMap;
use tokio::time::Instant;

use crate::client::{Client, Events, SessionEvent};
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::reply::Reply;
use crate::{random_client_id, AdminSession, QueryClient};

pub use flow::{FlowMarket, OrderFlow};
pub use report::{latency_histogram, LatencyUs, LoadReport};

/// The market a load run trades in; created when missing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolSetup {
    /// The traded asset (looked up by name).
    pub base: String,
    /// The currency (looked up by name).
    pub quote: String,
    /// The symbol (looked up by name). An existing symbol keeps its own tick and lot.
    pub symbol: String,
    pub tick: i64,
    pub lot: i64,
    pub px_min: i64,
    pub px_max: i64,
    pub fee_maker: i64,
    pub fee_taker: i64,
    /// Where the flow centres its book; rounded to the tick.
    pub px_mid: i64,
    /// Ticks each side of the mid where orders rest.
    pub band_ticks: i64,
    /// Quote deposited into every new account, in minor units.
    pub quote_deposit: i64,
    /// Base credited to every new account.
    pub base_credit: i64,
}

impl Default for SymbolSetup {
    fn default() -> Self {
        SymbolSetup {
            base: "LOAD".into(),
            quote: "USD".into(),
            symbol: "LOAD/USD".into(),
            tick: 1,
            lot: 1,
            // The engine wants a taker fee no larger than the value of one lot at px_min.
            px_min: 1_000,
            px_max: 100_000_000,
            fee_maker: 1,
            fee_taker: 2,
            px_mid: 100_000,
            band_ticks: 375,
            quote_deposit: 1_000_000_000_000,
            base_credit: 1_000_000_000,
        }
    }
}

/// What to run.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadConfig {
    pub endpoints: Vec<String>,
    /// Order entry sessions, each with its own client id and accounts.
    pub connections: usize,
    /// How long to send.
    pub seconds: f64,
    /// Commands per second over all connections; `None` sends flat out.
    pub rate: Option<f64>,
    /// Connection `i` draws its flow from `seed + i`.
    pub seed: u64,
    pub accounts_per_connection: u32,
    /// Each connection keeps about this many orders open.
    pub open_orders_per_connection: usize,
    pub symbol: SymbolSetup,
    /// Options of every connection (its `inflight_max` is the pipelining depth).
    pub client: ClientOptions,
    /// Options of the set-up (the assets and symbol by `Admin.Submit`, the accounts and
    /// their money in a session of its own): nodes with the cluster's PKI take those from
    /// operators, while the flow's sessions are a gateway's. None: `client`'s.
    pub setup: Option<ClientOptions>,
    /// How long to wait for answers still owed after `seconds`.
    pub drain_max: Duration,
    /// Print a progress line to stderr every second.
    pub progress: bool,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            // The node's default listen address.
            endpoints: vec!["127.0.0.1:7400".into()],
            connections: 4,
            seconds: 10.0,
            rate: None,
            seed: 1,
            accounts_per_connection: 100,
            open_orders_per_connection: 250,
            symbol: SymbolSetup::default(),
            client: ClientOptions::default(),
            setup: None,
            drain_max: Duration::from_secs(10),
            progress: true,
        }
    }
}

impl LoadConfig {
    fn validate(&self) -> Result<()> {
        let fail = |reason: &str| Err(Error::InvalidOptions(format!("load: {reason}")));
        if self.connections == 0 {
            return fail("connections must be at least 1");
        }
        if !(self.seconds.is_finite() && self.seconds > 0.0) {
            return fail("seconds must be positive");
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return fail("rate must be positive");
            }
        }
        if self.accounts_per_connection == 0 {
            return fail("accounts_per_connection must be at least 1");
        }
        let symbol = &self.symbol;
        if symbol.tick <= 0 || symbol.lot <= 0 || symbol.band_ticks <= 0 {
            return fail("tick, lot and band_ticks must be positive");
        }
        self.client.validate()
    }
}

/// Sets up the market, runs the flow on every connection and reports.
pub async fn run_load(config: LoadConfig) -> Result<LoadReport> {
    config.validate()?;
    let setup = config.setup.as_ref().unwrap_or(&config.client);
    let (market, assets) = setup_market(&config.endpoints, &config.symbol, setup).await?;
    let mut connections = Vec::with_capacity(config.connections);
    for index in 0..config.connections {
        connections.push(setup_connection(&config, index, market, assets).await?);
    }
    let progress: Vec<Arc<Progress>> = (0..config.connections).map(|_| Arc::new(Progress::new())).collect();
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(config.seconds);
    let interval = config.rate.map(|rate| Duration::from_secs_f64(config.connections as f64 / rate));
    let mut tasks = Vec::with_capacity(connections.len());
    for (connection, progress) in connections.into_iter().zip(&progress) {
        let run = ConnectionRun { start, end, interval, drain_max: config.drain_max, progress: Arc::clone(progress) };
        tasks.push(tokio::spawn(run.run(connection)));
    }
    let reporter = config.progress.then(|| tokio::spawn(report_progress(progress.clone(), start)));
    for task in tasks {
        task.await.map_err(|error| Error::Protocol(format!("a load connection panicked: {error}")))?;
    }
    let seconds = start.elapsed().as_secs_f64();
    if let Some(reporter) = reporter {
        reporter.abort();
    }
    let mut histogram = latency_histogram();
    let (mut acked, mut errors, mut rejected) = (0, 0, 0);
    for progress in &progress {
        histogram.add(&*progress.histogram.lock().expect("histogram lock")).expect("same bounds");
        acked += progress.acked.load(Ordering::Relaxed);
        errors += progress.errors.load(Ordering::Relaxed);
        rejected += progress.rejected.load(Ordering::Relaxed);
    }
    let report = LoadReport::new(acked, seconds, &histogram, errors, rejected);
    if config.progress {
        eprintln!("load: {report}");
    }
    Ok(report)
}

/// Finds or creates the two assets and the symbol of `setup` on the exchange at
/// `endpoints`; returns the flow's market and the (base, quote) asset ids.
pub async fn setup_market(
    endpoints: &[String],
    setup: &SymbolSetup,
    options: &ClientOptions,
) -> Result<(FlowMarket, (AssetId, AssetId))> {
    let mut query = QueryClient::connect(endpoints.to_vec(), options.clone()).await?;
    let mut admin = AdminSession::connect(endpoints.to_vec(), random_client_id(), options.clone()).await?;
    let base = find_or_create_asset(&mut query, &mut admin, &setup.base).await?;
    let quote = find_or_create_asset(&mut query, &mut admin, &setup.quote).await?;
    let (symbol, tick, lot) = match query.symbol_by_name(&setup.symbol).await? {
        Some(found) => existing_symbol(found, (base, quote))?,
        None => {
            let spec = SymbolSpec {
                name: setup.symbol.clone(),
                base,
                quote,
                tick: Px(setup.tick),
                lot: Qty(setup.lot),
                px_min: Px(setup.px_min),
                px_max: Px(setup.px_max),
                fee_maker: Amount(setup.fee_maker),
                fee_taker: Amount(setup.fee_taker),
                policy: MatchPolicy::Fifo,
            };
            let reply = admin.submit(CommandBody::CreateSymbol(Box::new(spec))).await?;
            match reply.ok_id() {
                Some(id) => (SymbolId(id as u32), setup.tick, setup.lot),
                // Another load run may have created it meanwhile.
                None => match query.symbol_by_name(&setup.symbol).await? {
                    Some(found) => existing_symbol(found, (base, quote))?,
                    None => return Err(setup_failed(&format!("symbol {}", setup.symbol), &reply)),
                },
            }
        }
    };
    let px_mid = setup.px_mid / tick * tick;
    let market = FlowMarket { symbol, tick, lot, px_mid, band_ticks: setup.band_ticks };
    Ok((market, (base, quote)))
}

fn existing_symbol(
    found: bourse_protocol::proto::SymbolInfo,
    assets: (AssetId, AssetId),
) -> Result<(SymbolId, i64, i64)> {
    let spec = found.spec.ok_or_else(|| Error::Protocol("a symbol without its spec".into()))?;
    if (AssetId(spec.base), AssetId(spec.quote)) != assets {
        return Err(Error::InvalidOptions(format!("load: symbol {} trades other assets", spec.name)));
    }
    Ok((SymbolId(found.id), spec.tick, spec.lot))
}

async fn find_or_create_asset(query: &mut QueryClient, admin: &mut AdminSession, name: &str) -> Result<AssetId> {
    if let Some(asset) = query.asset_by_name(name).await? {
        return Ok(AssetId(asset.id));
    }
    let reply = admin.submit(CommandBody::CreateAsset { name: name.to_owned(), decimals: 2 }).await?;
    if let Some(id) = reply.ok_id() {
        return Ok(AssetId(id as u32));
    }
    match query.asset_by_name(name).await? {
        Some(asset) => Ok(AssetId(asset.id)),
        None => Err(setup_failed(&format!("asset {name}"), &reply)),
    }
}

fn setup_failed(what: &str, reply: &Reply) -> Error {
    Error::InvalidOptions(format!("load: could not create {what}: {:?}", reply.outcome))
}

/// One connection ready to run: its client, its events and its flow.
struct Connection {
    client: Client,
    events: Events,
    flow: OrderFlow,
}

/// Opens connection `index` and creates and funds its accounts (pipelined).
async fn setup_connection(
    config: &LoadConfig,
    index: usize,
    market: FlowMarket,
    (base, quote): (AssetId, AssetId),
) -> Result<Connection> {
    let client = Client::connect(config.endpoints.clone(), random_client_id(), config.client.clone()).await?;
    let events = client.events().expect("a new client has its events");
    // Accounts and money are administrative: with set-up options of their own (an
    // operator's, where the flow's are a gateway's) a session of those makes them.
    let accounts = match &config.setup {
        Some(setup) => {
            let funder = Client::connect(config.endpoints.clone(), random_client_id(), setup.clone()).await?;
            let accounts =
                funded_accounts(&funder, config.accounts_per_connection, (base, quote), &config.symbol).await;
            funder.close().await?;
            accounts?
        }
        None => funded_accounts(&client, config.accounts_per_connection, (base, quote), &config.symbol).await?,
    };
    let seed = config.seed.wrapping_add(index as u64);
    let flow = OrderFlow::new(seed, market, accounts, config.open_orders_per_connection);
    Ok(Connection { client, events, flow })
}

/// Creates `count` accounts through `client` and funds each with the quote deposit and
/// base credit of `setup`.
pub async fn funded_accounts(
    client: &Client,
    count: u32,
    (base, quote): (AssetId, AssetId),
    setup: &SymbolSetup,
) -> Result<Vec<AccountId>> {
    let creates = (0..count).map(|_| CommandBody::CreateAccount).collect();
    let mut accounts = Vec::with_capacity(count as usize);
    for reply in client.submit_batch(creates).await? {
        let id = reply.ok_id().ok_or_else(|| setup_failed("an account", &reply))?;
        accounts.push(AccountId(id as u32));
    }
    let funding = accounts
        .iter()
        .flat_map(|&account| {
            [
                CommandBody::Deposit { account, asset: quote, amount: Amount(setup.quote_deposit) },
                CommandBody::Credit { account, asset: base, amount: Amount(setup.base_credit) },
            ]
        })
        .collect();
    for reply in client.submit_batch(funding).await? {
        if let Outcome::Rejected(_) = reply.outcome {
            return Err(setup_failed("a deposit", &reply));
        }
    }
    Ok(accounts)
}

/// Counters one connection shares with the progress reporter.
struct Progress {
    acked: AtomicU64,
    errors: AtomicU64,
    rejected: AtomicU64,
    histogram: Mutex<Histogram<u64>>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            acked: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            histogram: Mutex::new(latency_histogram()),
        }
    }

    /// Adds what a run of events read together counted, under one lock.
    fn add(&self, tally: Tally<'_>) {
        if !tally.latencies_us.is_empty() {
            let mut histogram = self.histogram.lock().expect("histogram lock");
            for &latency_us in tally.latencies_us.iter() {
                histogram.saturating_record(latency_us);
            }
            drop(histogram);
            self.acked.fetch_add(tally.latencies_us.len() as u64, Ordering::Relaxed);
        }
        if tally.rejected > 0 {
            self.rejected.fetch_add(tally.rejected, Ordering::Relaxed);
        }
        if tally.errors > 0 {
            self.errors.fetch_add(tally.errors, Ordering::Relaxed);
        }
    }
}

/// What a run of events read together adds to a connection's [`Progress`]: answers
/// arriving together are timed against one reading of the clock.
struct Tally<'a> {
    now: Instant,
    /// Ack latencies of this run, emptied into the histogram by [`Progress::add`].
    latencies_us: &'a mut Vec<u64>,
    rejected: u64,
    errors: u64,
}

impl<'a> Tally<'a> {
    fn new(now: Instant, latencies_us: &'a mut Vec<u64>) -> Self {
        latencies_us.clear();
        Tally { now, latencies_us, rejected: 0, errors: 0 }
    }
}

/// Turns of a connection's loop between two looks at the clock for the end of the run.
const END_CHECK_EVERY: u32 = 32;

/// The schedule of one connection.
struct ConnectionRun {
    start: Instant,
    end: Instant,
    /// Between intended sends; `None` for flat out.
    interval: Option<Duration>,
    drain_max: Duration,
    progress: Arc<Progress>,
}

impl ConnectionRun {
    async fn run(self, connection: Connection) {
        let Connection { client, mut events, mut flow } = connection;
        let mut sent_at: FxHashMap<u64, Instant> = FxHashMap::default();
        let mut sent: u64 = 0;
        let mut latencies = Vec::new();
        let mut sending = true;
        // One timer for the whole run, polled only when nothing else is ready; while
        // answers and window slots keep coming, the clock is read every few turns.
        let run_ends = tokio::time::sleep_until(self.end);
        tokio::pin!(run_ends);
        let mut turns: u32 = 0;
        while sending {
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(END_CHECK_EVERY) && Instant::now() >= self.end {
                break;
            }
            let intended = self.interval.map(|interval| self.start + interval.mul_f64(sent as f64));
            // The run covers [start, end): a command scheduled at `end` belongs to no one.
            if intended.is_some_and(|at| at >= self.end) {
                break;
            }
            let send_slot = async {
                if let Some(at) = intended {
                    tokio::time::sleep_until(at).await;
                }
                client.reserve().await
            };
            tokio::select! {
                biased;
                event = events.recv() => match event {
                    Some(event) => {
                        // Answers come in batches: take the rest of this one now, with
                        // one look at the clock and one update of the shared tallies.
                        let mut tally = Tally::new(Instant::now(), &mut latencies);
                        self.on_event(&mut flow, &mut sent_at, event, &mut tally);
                        while let Some(event) = events.try_recv() {
                            self.on_event(&mut flow, &mut sent_at, event, &mut tally);
                        }
                        self.progress.add(tally);
                    }
                    None => sending = false,
                },
                permit = send_slot => {
                    let Ok(mut permit) = permit else {
                        sending = false;
                        continue;
                    };
                    let now = Instant::now();
                    loop {
                        let (body, intent) = flow.next_command();
                        match permit.send(&body) {
                            Ok(seq) => {
                                sent_at.insert(seq, intended.unwrap_or(now));
                                flow.on_sent(seq, intent);
                                sent += 1;
                            }
                            Err(_) => {
                                sending = false;
                                break;
                            }
                        }
                        // Flat out, fill the free window slots without a turn each.
                        match (intended, client.try_reserve()) {
                            (None, Some(next)) => permit = next,
                            _ => break,
                        }
                    }
                }
                () = &mut run_ends => sending = false,
            }
        }
        self.drain(&mut events, &mut flow, &mut sent_at, &mut latencies).await;
    }

    /// Waits for the answers still owed, at most `drain_max`; the rest are errors.
    async fn drain(
        &self,
        events: &mut Events,
        flow: &mut OrderFlow,
        sent_at: &mut FxHashMap<u64, Instant>,
        latencies: &mut Vec<u64>,
    ) {
        let deadline = Instant::now() + self.drain_max;
        while !sent_at.is_empty() {
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Ok(Some(event)) => {
                    let mut tally = Tally::new(Instant::now(), latencies);
                    self.on_event(flow, sent_at, event, &mut tally);
                    self.progress.add(tally);
                }
                Ok(None) | Err(_) => break,
            }
        }
        self.progress.errors.fetch_add(sent_at.len() as u64, Ordering::Relaxed);
        sent_at.clear();
    }

    fn on_event(
        &self,
        flow: &mut OrderFlow,
        sent_at: &mut FxHashMap<u64, Instant>,
        event: SessionEvent,
        tally: &mut Tally<'_>,
    ) {
        match event {
            SessionEvent::Reply(reply) => {
                flow.on_reply(&reply);
                let Some(at) = sent_at.remove(&reply.seq) else { return };
                let latency = tally.now.saturating_duration_since(at);
                tally.latencies_us.push(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).max(1));
                if let Outcome::Rejected(_) = reply.outcome {
                    tally.rejected += 1;
                }
            }
            SessionEvent::Failed { seq, error } => {
                tracing::debug!(seq, %error, "load command failed");
                flow.on_failed(seq);
                if sent_at.remove(&seq).is_some() {
                    tally.errors += 1;
                }
            }
            SessionEvent::Fill(fill) => flow.on_fill(&fill),
            SessionEvent::Cancel(cancel) => flow.on_cancel(&cancel),
        }
    }
}

/// Prints acked/s, errors and latency so far to stderr once a second.
async fn report_progress(progress: Vec<Arc<Progress>>, start: Instant) {
    let mut ticker = tokio::time::interval_at(start + Duration::from_secs(1), Duration::from_secs(1));
    let mut acked_before = 0;
    loop {
        ticker.tick().await;
        let mut histogram = latency_histogram();
        let (mut acked, mut errors) = (0, 0);
        for progress in &progress {
            histogram.add(&*progress.histogram.lock().expect("histogram lock")).expect("same bounds");
            acked += progress.acked.load(Ordering::Relaxed);
            errors += progress.errors.load(Ordering::Relaxed);
        }
        let latency = LatencyUs::from_histogram(&histogram);
        eprintln!(
            "load: {:>5.1} s  acked/s {:>9}  acked {:>10}  errors {:>6}  p50 {:>7} us  p99 {:>7} us",
            start.elapsed().as_secs_f64(),
            acked - acked_before,
            acked,
            errors,
            latency.p50,
            latency.p99
        );
        acked_before = acked;
    }
}

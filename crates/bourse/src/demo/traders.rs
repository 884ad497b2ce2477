//! The agents, live: each on its own order-entry session at a gateway, with its own key.
//!
//! A [`Trader`] wraps one `bourse_sim` strategy. At each wake-up it reads its account
//! report through the gateway: balances, margin position and resting orders (the
//! exchange's word, so a lost fill report or a failover cannot leave it with a wrong
//! picture), takes the best bid and offer and last trades of its gateway's
//! [`MarketView`], asks the strategy, and sends the intents in order on its session
//! (each answered once committed), timing each from send to answer.
//! The accepted orders' ids and gateway stamps go to the [`Recorder`], from which the
//! demo measures inbound unfairness.
//!
//! Market data: the traders of one gateway share one subscription (best bid and offer
//! and trades of every symbol), because every subscriber of a gateway gets the same
//! releases at the same instant (hold-and-release) and 48 copies of one stream would
//! only cost CPU on a small machine.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::{random_client_id, ApiKey, Client, ClientOptions, QueryClient, Reply};
use bourse_engine::{AccountId, AssetId, Outcome, SymbolId};
use bourse_protocol::proto;
use bourse_protocol::proto::market_data_update::Update;
use bourse_sim::agents::arena::command_body;
use bourse_sim::agents::fundamental::Fundamental;
use bourse_sim::agents::{Level, Observation, OpenOrder, Portfolio, Quote, Side, Strategy, SymbolRules};
use hdrhistogram::Histogram;
use tokio::sync::watch;

/// The market as one gateway released it.
pub struct MarketView {
    quotes: Mutex<Vec<Quote>>,
    trades: std::sync::atomic::AtomicU64,
}

impl MarketView {
    /// Follows `gateway`'s best bid and offer and trades of every symbol until `stop`.
    pub fn start(gateway: String, key: ApiKey, symbols: usize, stop: watch::Receiver<bool>) -> Arc<MarketView> {
        let view = Arc::new(MarketView {
            quotes: Mutex::new(vec![Quote::default(); symbols]),
            trades: std::sync::atomic::AtomicU64::new(0),
        });
        tokio::spawn(follow(Arc::clone(&view), gateway, key, stop));
        view
    }

    pub fn quotes(&self) -> Vec<Quote> {
        self.quotes.lock().expect("quotes lock").clone()
    }

    /// Trades seen since the start.
    pub fn trades(&self) -> u64 {
        self.trades.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn apply(&self, update: proto::MarketDataUpdate) {
        let mut quotes = self.quotes.lock().expect("quotes lock");
        match update.update {
            Some(Update::Bbo(bbo)) => {
                if let Some(quote) = quotes.get_mut(bbo.symbol as usize) {
                    quote.bid = bbo.bid_px.map(|px| Level { px, qty: bbo.bid_qty });
                    quote.ask = bbo.ask_px.map(|px| Level { px, qty: bbo.ask_qty });
                }
            }
            Some(Update::Trade(trade)) => {
                if let Some(quote) = quotes.get_mut(trade.symbol as usize) {
                    quote.last = Some(trade.px);
                }
                self.trades.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {}
        }
    }
}

async fn follow(view: Arc<MarketView>, gateway: String, key: ApiKey, stop: watch::Receiver<bool>) {
    let options = ClientOptions { api_key: Some(key), ..ClientOptions::default() };
    while !*stop.borrow() {
        let result: bourse_client::Result<()> = async {
            let mut query = QueryClient::connect(vec![gateway.clone()], options.clone()).await?;
            let mut stream = query.subscribe_channels(&[], &[proto::Channel::Bbo, proto::Channel::Trades]).await?;
            while let Some(update) = stream.next_update().await? {
                view.apply(update);
            }
            Ok(())
        }
        .await;
        if let Err(error) = result {
            tracing::debug!(%error, "demo market view: subscribing again");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One accepted order, for the inbound unfairness measure.
#[derive(Clone, Copy, Debug)]
pub struct Accepted {
    pub order: u64,
    pub gateway_ts: u64,
}

/// What the traders report to the statistics, drained once per interval.
pub struct Recorder {
    pub accepted: Vec<Accepted>,
    /// Send-to-answer latency of every command answered, ns.
    pub latency: Histogram<u64>,
    pub rejected: u64,
    pub failed: u64,
    /// Each trader's latest holdings.
    pub portfolios: Vec<Option<Portfolio>>,
}

impl Recorder {
    pub fn new(traders: usize) -> Self {
        Recorder {
            accepted: Vec::new(),
            latency: latency_histogram(),
            rejected: 0,
            failed: 0,
            portfolios: vec![None; traders],
        }
    }
}

/// Latencies from 1 µs to 60 s with 3 significant digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("histogram bounds")
}

/// What every trader shares: the symbols, the fundamentals, the recorder.
pub struct Shared {
    /// The stocks, then the margin contract (when there is one).
    pub symbols: Vec<SymbolId>,
    /// Asset of each stock's shares; the cash is asset 0.
    pub assets: Vec<AssetId>,
    /// The margin contract, after the stocks.
    pub future: Option<super::margin::Future>,
    pub rules: Vec<SymbolRules>,
    pub fundamentals: Mutex<Vec<Fundamental>>,
    pub recorder: Mutex<Recorder>,
    pub started: Instant,
}

impl Shared {
    fn fundamentals_at(&self, now_ns: u64) -> Vec<i64> {
        self.fundamentals.lock().expect("fundamentals lock").iter_mut().map(|f| f.advance_to(now_ns)).collect()
    }
}

/// One agent on its session.
pub struct Trader {
    pub index: usize,
    pub account: AccountId,
    pub gateway: String,
    pub key: ApiKey,
    pub strategy: Box<dyn Strategy>,
    pub view: Arc<MarketView>,
    pub shared: Arc<Shared>,
}

impl Trader {
    /// Trades until `stop`.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let options = ClientOptions { api_key: Some(self.key.clone()), ..ClientOptions::default() };
        let mut session: Option<(Client, QueryClient)> = None;
        // Agents start spread over their first second, not all at once.
        let mut next = Instant::now() + Duration::from_millis(17 * (self.index as u64 % 60));
        let mut intents = Vec::new();
        loop {
            tokio::select! {
                () = tokio::time::sleep_until(next.into()) => {}
                _ = stop.wait_for(|stopping| *stopping) => return,
            }
            if session.is_none() {
                session = connect(&self.gateway, &options).await;
            }
            let Some((client, query)) = session.as_mut() else {
                next = Instant::now() + Duration::from_secs(1);
                continue;
            };
            let state = match self.read_state(query).await {
                Ok(state) => state,
                Err(error) => {
                    tracing::debug!(trader = self.index, %error, "demo trader: reading its state failed");
                    session = None;
                    next = Instant::now() + Duration::from_millis(500);
                    continue;
                }
            };
            let (portfolio, open) = state;
            let now_ns = self.shared.started.elapsed().as_nanos() as u64;
            let quotes = self.view.quotes();
            let fundamentals = self.shared.fundamentals_at(now_ns);
            let observation = Observation {
                now_ns,
                rules: &self.shared.rules,
                quotes: &quotes,
                fundamentals: &fundamentals,
                portfolio: &portfolio,
                open_orders: &open,
            };
            intents.clear();
            let wait = self.strategy.wake(&observation, &mut intents);
            self.shared.recorder.lock().expect("recorder lock").portfolios[self.index] = Some(portfolio);
            let bodies: Vec<_> =
                intents.iter().filter_map(|i| command_body(i, self.account, &self.shared.symbols, &open)).collect();
            if !self.send(client, bodies).await {
                session = None;
            }
            next = Instant::now().max(next + Duration::from_nanos(wait));
        }
    }

    /// Sends the commands in order, pipelined, and records each answer; false when the
    /// session failed (a new one is opened at the next wake-up).
    async fn send(&self, client: &Client, bodies: Vec<bourse_engine::command::CommandBody>) -> bool {
        let mut pending = Vec::with_capacity(bodies.len());
        for body in &bodies {
            let sent = Instant::now();
            let receiver = match client.reserve().await.and_then(|permit| permit.submit(body)) {
                Ok(receiver) => receiver,
                Err(_) => {
                    self.shared.recorder.lock().expect("recorder lock").failed += 1;
                    return false;
                }
            };
            let is_place = matches!(body, bourse_engine::command::CommandBody::Place(_));
            pending.push((sent, is_place, receiver));
        }
        let mut healthy = true;
        for (sent, is_place, receiver) in pending {
            let answer: Option<Reply> = receiver.await.ok().and_then(Result::ok);
            let latency_ns = sent.elapsed().as_nanos() as u64;
            let mut recorder = self.shared.recorder.lock().expect("recorder lock");
            match answer {
                Some(reply) => {
                    recorder.latency.saturating_record(latency_ns);
                    match reply.outcome {
                        Outcome::Ok { id } if is_place && !reply.duplicate => {
                            recorder.accepted.push(Accepted { order: id, gateway_ts: reply.gateway_ts });
                        }
                        Outcome::Ok { .. } => {}
                        Outcome::Rejected(_) => recorder.rejected += 1,
                    }
                }
                None => {
                    recorder.failed += 1;
                    healthy = false;
                }
            }
        }
        healthy
    }

    /// Balances, the margin contract's position and resting orders, as the exchange has
    /// them (one account report: one log index). The cash's total counts the position's
    /// unrealised P&L, so the portfolio's value is the account's.
    async fn read_state(&self, query: &mut QueryClient) -> bourse_client::Result<(Portfolio, Vec<OpenOrder>)> {
        let report = query.account_report(self.account).await?;
        let balances = &report.balances;
        let of = |asset: AssetId| {
            balances.iter().find(|b| b.asset == asset.0).map_or((0, 0), |b| (b.available, b.available + b.reserved))
        };
        let (cash_available, cash_total) = of(AssetId(0));
        let mut shares: Vec<(i64, i64)> = self.shared.assets.iter().map(|&asset| of(asset)).collect();
        let mut unrealized = 0;
        if let Some(future) = &self.shared.future {
            let position = report.positions.iter().find(|p| p.symbol == future.symbol.0);
            shares.push(
                position.map_or(super::margin::holding(future, 0, 0), |p| {
                    super::margin::holding(future, p.size, p.selling)
                }),
            );
            unrealized = position.map_or(0, |p| p.unrealized);
        }
        let portfolio = Portfolio {
            cash_available,
            cash_total: cash_total + unrealized,
            shares_available: shares.iter().map(|s| s.0).collect(),
            shares_total: shares.iter().map(|s| s.1).collect(),
        };
        let orders = report.open_orders;
        let mut open: Vec<OpenOrder> = orders
            .iter()
            .filter_map(|o| {
                Some(OpenOrder {
                    id: o.id,
                    symbol: self.shared.symbols.iter().position(|s| s.0 == o.symbol)?,
                    side: if o.side == proto::Side::Sell as i32 { Side::Sell } else { Side::Buy },
                    px: o.px_resting?,
                    qty_open: o.qty_open,
                })
            })
            .collect();
        open.sort_by_key(|o| o.id);
        Ok((portfolio, open))
    }
}

async fn connect(gateway: &str, options: &ClientOptions) -> Option<(Client, QueryClient)> {
    let endpoints = vec![gateway.to_string()];
    let client = Client::connect(endpoints.clone(), random_client_id(), options.clone()).await.ok()?;
    let query = QueryClient::connect(endpoints, options.clone()).await.ok()?;
    Some((client, query))
}

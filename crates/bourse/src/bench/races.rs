//! `bourse bench fairness --identical-traders N`: fairness as a trader sees it (issue 31).
//!
//! One node and N gateways in this process, each gateway with its own injected delays
//! and clock error (`--profile`), and one bot per gateway: the same strategy, reacting
//! to the same market data, racing for the same opportunities. A maker (straight to the
//! node, outside the race) rests a sell of one share well below the mid every
//! `1 / --rate` seconds, then cancels whatever is left of it before the next. Each bot
//! watches the BBO through its own gateway and, the moment an ask at or below the
//! bargain price shows, sends an IOC buy of one share at it. One bot gets the share;
//! the others' IOCs find nothing. That is one race.
//!
//! Reported per bot: races entered (IOCs sent), races won (shares bought: its balance,
//! read from the engine at the end), its share of the races anyone won, and its P&L
//! (quote balance change plus shares at the mid). Beside them, for each race the
//! gateways whose injected delay to the leader was the smallest when it began, and the
//! share of races a fastest gateway's bot won: with fairness off (d_s = d_h = 0) the
//! best-connected gateway should win most races, as CloudEx and Onyx report; with it on,
//! every bot about alike.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, Client, ClientOptions, QueryClient};
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{OrderId, Px, Qty, Side};
use bourse_fairness::{true_now_ns, ProfileSpec};
use bourse_node::{Node, NodeConfig};
use bourse_protocol::proto;

/// How far below the mid the maker rests its bargain, in ticks of 1.
const BARGAIN_TICKS: i64 = 10;

/// One bot's result.
#[derive(Clone, Debug)]
pub struct Bot {
    pub gateway: u32,
    pub entered: u64,
    pub won: u64,
    /// Its share of the races anyone won.
    pub share: f64,
    /// Quote balance change plus shares bought at the mid, in the quote's minor units.
    pub pnl: i64,
    /// Races it won while its gateway was among the fastest to the leader.
    pub won_fastest: u64,
}

/// One run's result.
#[derive(Clone, Debug)]
pub struct RaceReport {
    pub d_s_us: u64,
    pub d_h_us: u64,
    /// Bargains the maker rested, and those a bot took (the maker's count: its cancel
    /// found the bargain filled; the bots' `won`, from their balances, must add up to it).
    pub races: u64,
    pub taken: u64,
    pub bots: Vec<Bot>,
    /// Of the races taken, the share won by a bot whose gateway was among the fastest
    /// to the leader when the race began, and that share if the winner were drawn at
    /// random (the mean share of gateways among the fastest).
    pub fastest_won: f64,
    pub fastest_expected: f64,
    /// Best minus worst bot's share of the races taken, in percentage points.
    pub share_spread_pp: f64,
}

impl RaceReport {
    pub fn print(&self) {
        println!(
            "d_s {} µs, d_h {} µs: {} races, {} taken; won by a fastest gateway's bot {:.1}% (at random {:.1}%); \
             spread of shares {:.1} pp",
            self.d_s_us,
            self.d_h_us,
            self.races,
            self.taken,
            self.fastest_won * 100.0,
            self.fastest_expected * 100.0,
            self.share_spread_pp
        );
        println!(
            "{:>8} {:>8} {:>6} {:>8} {:>7} {:>10} {:>12}",
            "gateway", "entered", "won", "share%", "±95%", "pnl", "won_fastest"
        );
        for bot in &self.bots {
            println!(
                "{:>8} {:>8} {:>6} {:>8.1} {:>7.1} {:>10} {:>12}",
                bot.gateway,
                bot.entered,
                bot.won,
                bot.share * 100.0,
                margin(bot.share, self.taken) * 100.0,
                bot.pnl,
                bot.won_fastest
            );
        }
    }

    pub fn json(&self) -> serde_json::Value {
        let bots: Vec<serde_json::Value> = self
            .bots
            .iter()
            .map(|bot| {
                serde_json::json!({
                    "gateway": bot.gateway, "entered": bot.entered, "won": bot.won, "share": bot.share,
                    "share_margin95": margin(bot.share, self.taken), "pnl": bot.pnl,
                    "won_while_fastest": bot.won_fastest,
                })
            })
            .collect();
        serde_json::json!({
            "d_s_us": self.d_s_us, "d_h_us": self.d_h_us, "races": self.races, "taken": self.taken,
            "won_by_fastest": self.fastest_won, "won_by_fastest_at_random": self.fastest_expected,
            "share_spread_pp": self.share_spread_pp, "bots": bots,
        })
    }
}

/// The half-width of a 95% confidence interval of a share `p` of `n` races (normal
/// approximation of the binomial): how far apart two bots' shares may be by chance.
fn margin(p: f64, n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    1.96 * (p * (1.0 - p) / n as f64).sqrt()
}

/// What the run's parts share.
pub struct RaceSettings<'a> {
    pub bots: u32,
    pub spec: &'a ProfileSpec,
    pub seed: u64,
    /// Bargains per second.
    pub rate: f64,
    pub seconds: f64,
    pub data: &'a std::path::Path,
    pub release: super::fairness::Release,
}

/// One run with the sequencing window `d_s` and the hold `d_h` (µs).
pub async fn one_race_run(settings: &RaceSettings<'_>, d_s: u64, d_h: u64) -> Result<RaceReport, String> {
    let dir = tempfile::Builder::new().prefix("bourse-races-").tempdir_in(settings.data).map_err(|e| e.to_string())?;
    let config = NodeConfig {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("an address"),
        sequencer_window_us: d_s,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let endpoints = vec![node.addr.to_string()];
    let setup = SymbolSetup::default();
    let options = ClientOptions::default();
    let (market, assets) = setup_market(&endpoints, &setup, &options).await.map_err(|e| e.to_string())?;
    let (base, quote) = assets;
    let maker =
        Client::connect(endpoints.clone(), random_client_id(), options.clone()).await.map_err(|e| e.to_string())?;
    let accounts = funded_accounts(&maker, settings.bots + 1, assets, &setup).await.map_err(|e| e.to_string())?;
    let (maker_account, bot_accounts) = (accounts[0], accounts[1..].to_vec());

    let (gateways, profiles) = super::fairness::open_gateways(
        &endpoints,
        settings.bots,
        d_h,
        settings.spec,
        settings.seed,
        settings.release,
        false,
    )
    .await?;

    let bargain = market.px_mid - BARGAIN_TICKS;
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(settings.seconds);
    let mut bots = Vec::new();
    let mut entered = Vec::new();
    for (g, &account) in bot_accounts.iter().enumerate() {
        let address = vec![gateways[g].addr().to_string()];
        let mut query = QueryClient::connect(address.clone(), options.clone()).await.map_err(|e| e.to_string())?;
        let mut feed =
            query.subscribe_channels(&[market.symbol], &[proto::Channel::Bbo]).await.map_err(|e| e.to_string())?;
        let client = Client::connect(address, random_client_id(), options.clone()).await.map_err(|e| e.to_string())?;
        let sent = Arc::new(AtomicU64::new(0));
        entered.push(Arc::clone(&sent));
        let symbol = market.symbol;
        bots.push(tokio::spawn(async move {
            // Armed while no bargain shows; fires once per bargain.
            let mut armed = true;
            loop {
                let update = tokio::select! {
                    update = feed.next_update() => update,
                    () = tokio::time::sleep_until((end + Duration::from_millis(100)).into()) => break,
                };
                let Ok(Some(update)) = update else { break };
                let Some(proto::market_data_update::Update::Bbo(bbo)) = update.update else { continue };
                match bbo.ask_px {
                    Some(px) if px <= bargain => {
                        if armed {
                            armed = false;
                            let order = OrderRequest::limit(account, symbol, Side::Buy, Px(px), Qty(1), Tif::Ioc);
                            if client.send(&CommandBody::Place(order)).await.is_ok() {
                                sent.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    _ => armed = true,
                }
            }
            let _ = client.close().await;
        }));
    }

    // The maker: a bargain, a pause, a cancel of what is left. A bargain the cancel
    // finds filled was taken: its fill names the winner's order, whose account names
    // the bot. Which gateways were fastest when the race began comes from their delay
    // models (the injected spikes).
    let mut query = QueryClient::connect(endpoints.clone(), options.clone()).await.map_err(|e| e.to_string())?;
    let (mut races, mut taken) = (0u64, 0u64);
    let mut winners: Vec<(Vec<u32>, u32)> = Vec::new();
    let interval = Duration::from_secs_f64(1.0 / settings.rate);
    let mut next = Instant::now();
    while next + interval < end {
        tokio::time::sleep_until(next.into()).await;
        let now = true_now_ns();
        let extra: Vec<u64> =
            profiles.iter().map(|p| p.inbound.spikes.as_ref().map_or(0, |spikes| spikes.extra_at(now))).collect();
        let least = extra.iter().copied().min().unwrap_or(0);
        let fastest: Vec<u32> = (0..settings.bots).filter(|&g| extra[g as usize] == least).collect();
        let order = OrderRequest::limit(maker_account, market.symbol, Side::Sell, Px(bargain), Qty(1), Tif::Gtc);
        let placed = maker.submit(CommandBody::Place(order)).await.map_err(|e| e.to_string())?;
        races += 1;
        next += interval;
        tokio::time::sleep_until(next.into()).await;
        let Some(id) = placed.ok_id() else { continue };
        let cancel = CommandBody::Cancel { account: maker_account, symbol: market.symbol, order: OrderId(id) };
        if maker.submit(cancel).await.map_err(|e| e.to_string())?.ok_id().is_some() {
            continue;
        }
        taken += 1;
        let info = query.order(OrderId(id)).await.map_err(|e| e.to_string())?;
        let taker = info.order.and_then(|order| order.fills.first().map(|fill| fill.counter_order));
        if let Some(taker) = taker {
            let account = query.order(OrderId(taker)).await.map_err(|e| e.to_string())?.order.map(|o| o.account);
            if let Some(bot) = bot_accounts.iter().position(|a| Some(a.0) == account) {
                winners.push((fastest, bot as u32));
            }
        }
    }
    for bot in bots {
        bot.await.map_err(|e| e.to_string())?;
    }
    let mut results = Vec::new();
    for (g, &account) in bot_accounts.iter().enumerate() {
        let reply = query.balances(account).await.map_err(|e| e.to_string())?;
        let amount = |asset: bourse_engine::AssetId| {
            reply.balances.iter().find(|b| b.asset == asset.0).map_or(0, |b| b.available + b.reserved)
        };
        let shares = amount(base) - setup.base_credit;
        let pnl = amount(quote) - setup.quote_deposit + shares * market.px_mid;
        results.push((g as u32, shares.max(0) as u64, pnl));
    }
    maker.close().await.map_err(|e| e.to_string())?;
    for gateway in gateways {
        gateway.shutdown().await;
    }
    node.shutdown().await.map_err(|e| e.to_string())?;

    let mut won_fastest = vec![0u64; settings.bots as usize];
    let mut fastest_hits = 0u64;
    let mut fastest_expected = 0.0;
    for (fastest, winner) in &winners {
        fastest_expected += fastest.len() as f64 / f64::from(settings.bots);
        if fastest.contains(winner) {
            won_fastest[*winner as usize] += 1;
            fastest_hits += 1;
        }
    }
    if !winners.is_empty() {
        fastest_expected /= winners.len() as f64;
    }
    let bots: Vec<Bot> = results
        .iter()
        .map(|&(gateway, won, pnl)| Bot {
            gateway: gateway + 1,
            entered: entered[gateway as usize].load(Ordering::Relaxed),
            won,
            share: if taken == 0 { 0.0 } else { won as f64 / taken as f64 },
            pnl,
            won_fastest: won_fastest[gateway as usize],
        })
        .collect();
    let shares = bots.iter().map(|b| b.share);
    let spread = shares.clone().fold(f64::MIN, f64::max) - shares.fold(f64::MAX, f64::min);
    Ok(RaceReport {
        d_s_us: d_s,
        d_h_us: d_h,
        races,
        taken,
        bots,
        fastest_won: if winners.is_empty() { 0.0 } else { fastest_hits as f64 / winners.len() as f64 },
        fastest_expected,
        share_spread_pp: spread * 100.0,
    })
}

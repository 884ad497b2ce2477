//! The `market` quote source (spec 7): the price of `SYM` is the last trade of the
//! exchange's own `SYM/USD` (or the mid of its best bid and ask, by `quote.market.price`),
//! converted to cents rounding half up; `quoteServerTime` is the log stamp of the market
//! data event it came from; the cryptokey is base64 of SHA-256 over
//! `market,SYM,userid,price,quoteServerTime`.
//!
//! It follows the gateway's trades and BBO channels for every symbol (a task that
//! resubscribes after a break) and converts with the units of the pair: `px` is minor
//! units of USD per base unit, so a share (10^b base units) costs `px × 10^b` minor units,
//! which are `10^(d − 2)` to the cent.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bourse_client::{ClientOptions, QueryClient};
use bourse_engine::daytrading::{cents_format, DtQuote, QuoteSource, Sym};
use bourse_protocol::proto;
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

/// Which price `market` quotes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarketPrice {
    /// The last trade; the mid when there was none.
    Last,
    /// The mid of best bid and ask; the last trade when one side is empty.
    Mid,
}

impl std::str::FromStr for MarketPrice {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "last" => Ok(MarketPrice::Last),
            "mid" => Ok(MarketPrice::Mid),
            _ => Err(format!("{text:?}: expected last or mid")),
        }
    }
}

/// What is known of one pair.
#[derive(Clone, Copy, Debug, Default)]
struct Pair {
    /// Minor units of the quote asset per cent, as (numerator, denominator) of
    /// cents = px × 10^b × 100 / 10^d.
    scale: (i128, i128),
    /// (px, log stamp ns) of the last trade.
    last: Option<(i64, u64)>,
    /// (bid, ask, log stamp ns) when both sides are there.
    mid: Option<(i64, i64, u64)>,
}

#[derive(Default)]
struct State {
    /// `SYM` → symbol id, for pairs `SYM/USD`.
    by_name: FxHashMap<String, u32>,
    pairs: FxHashMap<u32, Pair>,
}

/// Prices from the exchange's market data.
pub struct MarketQuotes {
    state: Arc<Mutex<State>>,
    mode: MarketPrice,
    client: QueryClient,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for MarketQuotes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl MarketQuotes {
    /// Connects to the gateway (in this process, or over gRPC) and follows its trades
    /// and BBO.
    pub async fn start(
        upstream: bourse_port::Upstream,
        options: ClientOptions,
        mode: MarketPrice,
    ) -> Result<Self, String> {
        let mut client = upstream.query(options).await.map_err(|e| e.to_string())?;
        let state = Arc::new(Mutex::new(State::default()));
        load_pairs(&mut client, &state).await?;
        let task = tokio::spawn(follow(client.clone(), Arc::clone(&state)));
        Ok(MarketQuotes { state, mode, client, task })
    }

    /// The quote of `symbol` for `userid`, if the market has a price for it.
    pub async fn quote(&self, symbol: Sym, userid: &str) -> Result<DtQuote, String> {
        if !self.state.lock().expect("market lock").by_name.contains_key(symbol.as_str()) {
            // A pair made since: look again.
            load_pairs(&mut self.client.clone(), &self.state).await?;
        }
        let state = self.state.lock().expect("market lock");
        let id = state.by_name.get(symbol.as_str()).ok_or_else(|| format!("no pair {symbol}/USD"))?;
        let pair = state.pairs.get(id).copied().unwrap_or_default();
        let (price, stamp_ns) = price_of(&pair, self.mode).ok_or_else(|| format!("{symbol}/USD has no price"))?;
        if price < 1 {
            return Err(format!("{symbol}/USD is below one cent"));
        }
        let quote_server_time = stamp_ns / 1_000_000;
        let text = format!("market,{symbol},{userid},{},{quote_server_time}", cents_format(price));
        let cryptokey = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(text.as_bytes()));
        Ok(DtQuote {
            symbol,
            price,
            userid: userid.to_owned(),
            quote_server_time,
            cryptokey,
            source: QuoteSource::Market,
            transaction_num: 0,
        })
    }
}

/// `px` (or twice it, for a mid) in cents rounding half up, with the stamp.
fn price_of(pair: &Pair, mode: MarketPrice) -> Option<(i64, u64)> {
    let (num, den) = pair.scale;
    let cents = |twice_px: i128| {
        let n = twice_px * num;
        let d = 2 * den;
        i64::try_from((n + d / 2) / d).ok()
    };
    let last = pair.last.and_then(|(px, ts)| Some((cents(2 * i128::from(px))?, ts)));
    let mid = pair.mid.and_then(|(bid, ask, ts)| Some((cents(i128::from(bid) + i128::from(ask))?, ts)));
    match mode {
        MarketPrice::Last => last.or(mid),
        MarketPrice::Mid => mid.or(last),
    }
}

/// Reads the pairs `SYM/USD` and their units.
async fn load_pairs(client: &mut QueryClient, state: &Mutex<State>) -> Result<(), String> {
    let assets = client.assets().await.map_err(|e| e.to_string())?.assets;
    let symbols = client.symbols().await.map_err(|e| e.to_string())?.symbols;
    let decimals = |id: u32| assets.iter().find(|a| a.id == id).map(|a| a.decimals);
    let mut state = state.lock().expect("market lock");
    for info in symbols {
        let Some(spec) = info.spec else { continue };
        let Some(name) = spec.name.strip_suffix("/USD") else { continue };
        if Sym::parse(name).is_none() {
            continue;
        }
        let (Some(b), Some(d)) = (decimals(spec.base), decimals(spec.quote)) else { continue };
        let scale = (10i128.pow(b.min(18)) * 100, 10i128.pow(d.min(18)));
        state.by_name.insert(name.to_owned(), info.id);
        state.pairs.entry(info.id).or_default().scale = scale;
    }
    Ok(())
}

/// Follows trades and BBO of every symbol, resubscribing after a break.
async fn follow(mut client: QueryClient, state: Arc<Mutex<State>>) {
    loop {
        let channels = [proto::Channel::Trades, proto::Channel::Bbo];
        if let Ok(mut stream) = client.subscribe_channels(&[], &channels).await {
            while let Ok(Some(update)) = stream.next_update().await {
                apply(&state, update);
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn apply(state: &Mutex<State>, update: proto::MarketDataUpdate) {
    let mut state = state.lock().expect("market lock");
    match update.update {
        Some(proto::market_data_update::Update::Trade(trade)) => {
            state.pairs.entry(trade.symbol).or_default().last = Some((trade.px, update.ts));
        }
        Some(proto::market_data_update::Update::Bbo(bbo)) => {
            let mid = match (bbo.bid_px, bbo.ask_px) {
                (Some(bid), Some(ask)) => Some((bid, ask, update.ts)),
                _ => None,
            };
            state.pairs.entry(bbo.symbol).or_default().mid = mid;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prices_convert_to_cents_rounding_half_up() {
        // USD with 2 decimals, whole shares: px is cents.
        let pair = Pair { scale: (100, 100), last: Some((12_345, 7_000_000)), mid: Some((100, 103, 9_000_000)) };
        assert_eq!(price_of(&pair, MarketPrice::Last), Some((12_345, 7_000_000)));
        // The mid of 100 and 103 cents is 101.5: 102.
        assert_eq!(price_of(&pair, MarketPrice::Mid), Some((102, 9_000_000)));
        // USD with 8 decimals, shares with 4: px 10^4 is 10^-8 $ per 10^-4 share = $0.0001/share... ×10^4.
        let fine = Pair { scale: (10_000 * 100, 100_000_000), last: Some((12_345_678, 1)), mid: None };
        // 12,345,678 × 10^4 × 100 / 10^8 = 123,456.78 cents: 123,457.
        assert_eq!(price_of(&fine, MarketPrice::Mid), Some((123_457, 1)));
        assert_eq!(price_of(&Pair::default(), MarketPrice::Last), None);
    }
}

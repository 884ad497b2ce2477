//! Recent trades per symbol, for `GET /v1/trades/{symbol}`.
//!
//! One task follows the upstream trades channel with the server's own key and keeps
//! the newest `trades_kept` trades of each symbol. When the stream breaks it subscribes
//! again (with backoff); trades released while it was away are not recovered (the
//! history store answers for the past), and the gap is logged.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bourse_client::ClientOptions;
use bourse_port::Upstream;
use bourse_protocol::proto;
use bourse_protocol::proto::market_data_update::Update;
use tokio::sync::watch;

use crate::model::Trade;
use crate::HttpConfig;

/// The recent trades of every symbol.
pub struct Market {
    trades: Mutex<HashMap<u32, VecDeque<Trade>>>,
    kept: usize,
}

impl Market {
    /// Starts following the trades channel upstream.
    pub fn start(config: &HttpConfig, shutdown: watch::Receiver<bool>) -> Arc<Market> {
        let market = Arc::new(Market { trades: Mutex::new(HashMap::new()), kept: config.trades_kept });
        let options = ClientOptions { api_key: config.service_key.clone(), ..ClientOptions::default() };
        tokio::spawn(follow(Arc::clone(&market), config.upstream.clone(), options, shutdown));
        market
    }

    /// The newest `limit` trades of `symbol`, oldest first.
    pub fn recent(&self, symbol: u32, limit: usize) -> Vec<Trade> {
        let trades = self.trades.lock().expect("trades lock");
        let Some(kept) = trades.get(&symbol) else { return Vec::new() };
        kept.iter().skip(kept.len().saturating_sub(limit)).cloned().collect()
    }

    fn record(&self, ts: u64, trade: &proto::TradeUpdate) {
        let mut trades = self.trades.lock().expect("trades lock");
        let kept = trades.entry(trade.symbol).or_default();
        if kept.len() == self.kept {
            kept.pop_front();
        }
        match trade_from(ts, trade) {
            Ok(trade) => kept.push_back(trade),
            Err(error) => tracing::error!(%error, "a trade this version cannot read: not kept"),
        }
    }
}

/// A trade update as JSON.
pub fn trade_from(ts: u64, trade: &proto::TradeUpdate) -> Result<Trade, crate::error::ApiError> {
    Ok(Trade {
        symbol: trade.symbol,
        px: trade.px,
        qty: trade.qty,
        taker_side: crate::api::side_from(trade.taker_side, "TradeUpdate.taker_side")?,
        log_index: trade.log_index,
        trade_seq: trade.trade_seq,
        ts,
    })
}

async fn follow(market: Arc<Market>, upstream: Upstream, options: ClientOptions, shutdown: watch::Receiver<bool>) {
    let mut backoff = Duration::from_millis(50);
    while !*shutdown.borrow() {
        match follow_once(&market, &upstream, &options).await {
            Ok(()) => tracing::warn!("the upstream trades stream ended; subscribing again"),
            Err(error) => tracing::warn!(%error, "the upstream trades stream failed; subscribing again"),
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}

async fn follow_once(market: &Market, upstream: &Upstream, options: &ClientOptions) -> bourse_client::Result<()> {
    let mut query = upstream.query(options.clone()).await?;
    let mut stream = query.subscribe_channels(&[], &[proto::Channel::Trades]).await?;
    while let Some(update) = stream.next_update().await? {
        if let Some(Update::Trade(trade)) = &update.update {
            market.record(update.ts, trade);
        }
    }
    Ok(())
}

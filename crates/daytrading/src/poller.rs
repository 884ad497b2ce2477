//! The trigger poller (spec 5): every `trigger_poll_ms` it asks the exchange which
//! symbols have armed triggers and what their cached quotes are
//! (`Query.GetDayTradingArmed`), and for each one without a quote that stays valid for
//! `refresh_margin_ms`, fetches a quote — asked for the earliest-armed trigger's user
//! and transactionNum — and submits it as a quote entry, at most once per
//! `trigger_poll_ms` per symbol, and never while a command's fetch of the symbol is in
//! the air (that quote fires them too). Firings happen in the engine when the entry
//! applies.
//!
//! It works on the wall clock: golden runs (virtual clock) turn it off, since when it
//! fires depends on timing.

use std::sync::Arc;
use std::time::Duration;

use bourse_client::QueryClient;
use bourse_engine::daytrading::Sym;
use rustc_hash::FxHashMap;

use crate::service::Service;

/// Runs until the service is dropped by everyone else.
pub async fn run(service: Arc<Service>) {
    let config = service.config().clone();
    if config.trigger_poll_ms == 0 {
        return;
    }
    let period = Duration::from_millis(config.trigger_poll_ms);
    let mut client: Option<QueryClient> = None;
    let mut polled: FxHashMap<Sym, u64> = FxHashMap::default();
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        if Arc::strong_count(&service) == 1 {
            return;
        }
        if client.is_none() {
            client = config.port_upstream().query(config.client_options()).await.ok();
        }
        let Some(query) = client.as_mut() else { continue };
        let armed = match query.day_trading_armed().await {
            Ok(armed) => armed,
            Err(error) => {
                tracing::warn!(%error, "trigger poller: the armed symbols could not be read");
                client = None;
                continue;
            }
        };
        let now = config.clock.now_ms(0).max(armed.stamp);
        for symbol in armed.symbols {
            let Some(sym) = Sym::parse(&symbol.symbol) else { continue };
            let valid_until = symbol.quote_price.map_or(0, |_| symbol.quote_arrival + service.quote_ttl_ms());
            if valid_until > now + config.refresh_margin_ms {
                continue;
            }
            if polled.get(&sym).is_some_and(|&at| now < at + config.trigger_poll_ms) || service.fetching(sym) {
                // Asked lately, or a command's fetch is in the air (its quote fires too).
                continue;
            }
            polled.insert(sym, now);
            let service = Arc::clone(&service);
            tokio::spawn(async move {
                let clock = service.config().clock.clone();
                let quote = service.quoter().fetch(sym, &symbol.userid, symbol.transaction_num, &clock).await;
                match quote {
                    Ok(quote) => {
                        if let Err(error) = service.send_quote(quote).await {
                            tracing::warn!(%error, symbol = %sym, "trigger poller: the quote entry failed");
                        }
                    }
                    Err(error) => tracing::warn!(%error, symbol = %sym, "trigger poller: no quote"),
                }
            });
        }
    }
}

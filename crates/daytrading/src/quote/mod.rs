//! The quote service (spec 7): one interface, interchangeable sources.
//!
//! - [`emulator`]: the seeded emulation of the legacy quote server, in process (and on
//!   an optional TCP endpoint in the legacy wire format);
//! - [`legacy`]: any server speaking the legacy wire format (`legacy-tcp`);
//! - [`market`]: the exchange's own market (last trade or mid of `SYM/USD`);
//!
//! and [`flight`], which makes concurrent needs of one symbol's quote share one fetch.
//!
//! A fetched quote is a *real hit*: the service attaches it to the command that needed
//! it (or submits it as a poller's entry), and the engine logs it and caches it. Replay
//! never comes here: the quotes are in the log.

pub mod emulator;
pub mod flight;
pub mod legacy;
pub mod market;

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bourse_engine::daytrading::{DtQuote, Sym};

use emulator::{Emulator, EmulatorConfig};
use market::{MarketPrice, MarketQuotes};

/// The service's clock: the wall clock, or for golden runs a virtual one that reads
/// `T0 + n × STEP` for the request numbered n (the node's virtual clock stamps log
/// index i at `T0 + i × STEP`, so in a sequential run of a fresh node they agree).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Clock {
    Wall,
    Virtual { t0_ms: u64, step_ms: u64 },
}

impl Clock {
    /// Now in ms since the epoch, for the request numbered `n`.
    pub fn now_ms(&self, n: u64) -> u64 {
        match self {
            Clock::Wall => SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
            Clock::Virtual { t0_ms, step_ms } => t0_ms.saturating_add(n.saturating_mul(*step_ms)),
        }
    }
}

/// Which source quotes (spec 12, `quote.source`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SourceConfig {
    Emulator(EmulatorConfig),
    Market(MarketPrice),
    /// `host:port`, the first attempt's timeout (doubled per retry) and the attempts.
    LegacyTcp {
        address: String,
        timeout: Duration,
        attempts: u32,
    },
}

/// A source ready to quote.
pub enum Quoter {
    Emulator(Arc<Emulator>),
    Market(Box<MarketQuotes>),
    LegacyTcp { address: String, timeout: Duration, attempts: u32 },
}

impl Quoter {
    /// A real hit: the quote of `symbol` for `userid`, asked with transactionNum `n`,
    /// stamped by `clock` where the source has no clock of its own. Waits out the
    /// emulator's latency.
    pub async fn fetch(&self, symbol: Sym, userid: &str, n: u64, clock: &Clock) -> Result<DtQuote, String> {
        match self {
            Quoter::Emulator(emulator) => {
                let (mut quote, delay) = emulator.quote(symbol, userid, n, 0);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                // The time it answers, after its latency.
                quote.quote_server_time = clock.now_ms(n);
                Ok(quote)
            }
            Quoter::Market(market) => market.quote(symbol, userid).await,
            Quoter::LegacyTcp { address, timeout, attempts } => {
                legacy::fetch(address, symbol, userid, *timeout, *attempts).await
            }
        }
        .map(|mut quote| {
            quote.transaction_num = n;
            quote
        })
    }

    /// Whether a fetch can be answered at once (the in-process emulator without
    /// latency): then the service need not hand the command to a task of its own.
    pub fn is_immediate(&self) -> bool {
        matches!(self, Quoter::Emulator(e) if e.config().latency == emulator::Latency::None)
    }
}

//! The mean-reversion trader: bets that a price away from its moving average comes back.
//!
//! At each wake-up it samples every symbol's reference price into a window of the last
//! `window` samples (a simple moving average with its standard deviation σ). Once the
//! window is full: a price below the average by more than `max(z · σ, min_bps)` is a
//! buy, above it a sell, each an IOC order of `qty` at the opposite touch (`min_bps`
//! basis points, at least a tick, is the least deviation that counts) (it takes
//! liquidity, as a trader acting on a signal does), while its position in the symbol
//! stays within ±`position_limit` of its starting holding. CloudEx's population has four
//! such traders over its ten symbols; the band rule is the usual Bollinger-band form of
//! a moving-average mean-reversion signal (ABIDES's momentum agent compares moving
//! averages the same way, with the opposite sign of bet).

use bourse_engine::Side;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::signal::Window;
use super::{jittered_ns, AgentKind, Budget, Intent, Observation, Place, Strategy, NS_PER_SEC};

/// The mean-reversion trader's settings.
#[derive(Clone, Debug)]
pub struct MeanReversionParams {
    pub symbols: Vec<usize>,
    /// Samples in the moving average (one per wake-up).
    pub window: usize,
    /// Deviations from the average, in standard deviations, that trigger a trade …
    pub z: f64,
    /// … and at least this many basis points of the average (and one tick).
    pub min_bps: f64,
    pub qty: i64,
    /// Shares above or below the starting holding, at most.
    pub position_limit: i64,
    pub shares_initial: i64,
    /// Mean wake-up interval (±20 %).
    pub wake_ns: u64,
}

impl Default for MeanReversionParams {
    fn default() -> Self {
        MeanReversionParams {
            symbols: Vec::new(),
            window: 20,
            z: 1.0,
            min_bps: 10.0,
            qty: 20,
            position_limit: 1_000,
            shares_initial: 0,
            wake_ns: NS_PER_SEC,
        }
    }
}

/// See the module documentation.
pub struct MeanReversion {
    params: MeanReversionParams,
    rng: ChaCha8Rng,
    windows: Vec<Window>,
}

impl MeanReversion {
    pub fn new(params: MeanReversionParams, seed: u64) -> Self {
        let slots = params.symbols.iter().copied().max().map_or(0, |m| m + 1);
        let windows = vec![Window::new(params.window); slots];
        MeanReversion { params, rng: ChaCha8Rng::seed_from_u64(seed), windows }
    }
}

impl Strategy for MeanReversion {
    fn kind(&self) -> AgentKind {
        AgentKind::MeanReversion
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let mut budget = Budget::new(observation);
        for &symbol in &self.params.symbols {
            let (Some(quote), Some(rules)) = (observation.quotes.get(symbol), observation.rules.get(symbol)) else {
                continue;
            };
            let Some(price) = quote.reference() else { continue };
            let window = &mut self.windows[symbol];
            window.push(price);
            let (Some(mean), Some(sd)) = (window.mean(), window.std_dev()) else { continue };
            if !window.is_full() {
                continue;
            }
            let floor = (mean * self.params.min_bps / 10_000.0).max(rules.tick as f64);
            let band = (self.params.z * sd).max(floor);
            let position =
                observation.portfolio.shares_total.get(symbol).copied().unwrap_or(0) - self.params.shares_initial;
            let (side, px) = if price < mean - band && position < self.params.position_limit {
                (Side::Buy, quote.ask.map(|l| l.px))
            } else if price > mean + band && position > -self.params.position_limit {
                (Side::Sell, quote.bid.map(|l| l.px))
            } else {
                continue;
            };
            if let Some(px) = px {
                budget.push(intents, Place { symbol, side, px, qty: self.params.qty, ioc: true });
            }
        }
        jittered_ns(&mut self.rng, self.params.wake_ns, 0.2)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn trader() -> MeanReversion {
        let params = MeanReversionParams {
            symbols: vec![0],
            window: 10,
            shares_initial: 10_000,
            ..MeanReversionParams::default()
        };
        MeanReversion::new(params, 3)
    }

    /// Feeds mids around 10,000 (±1) to fill the window; returns the intents of the last.
    fn warm(trader: &mut MeanReversion, owned: &mut Owned) {
        for k in 0..10 {
            owned.quotes[0] = quote(9_999 + k % 2, 10_001 + k % 2);
            let mut intents = Vec::new();
            trader.wake(&owned.view(), &mut intents);
            assert!(intents.is_empty(), "no signal inside the band: {intents:?}");
        }
    }

    #[test]
    fn buys_below_its_moving_average_and_sells_above() {
        let mut owned = Owned::new(1, 9_999, 10_001);
        let mut mr = trader();
        warm(&mut mr, &mut owned);
        owned.quotes[0] = quote(9_980, 9_982);
        let mut intents = Vec::new();
        mr.wake(&owned.view(), &mut intents);
        assert_eq!(places(&intents), vec![Place { symbol: 0, side: Side::Buy, px: 9_982, qty: 20, ioc: true }]);

        let mut mr = trader();
        warm(&mut mr, &mut owned);
        owned.quotes[0] = quote(10_020, 10_022);
        let mut intents = Vec::new();
        mr.wake(&owned.view(), &mut intents);
        assert_eq!(places(&intents), vec![Place { symbol: 0, side: Side::Sell, px: 10_020, qty: 20, ioc: true }]);
    }

    #[test]
    fn stops_buying_at_its_position_limit() {
        let mut owned = Owned::new(1, 9_999, 10_001);
        owned.portfolio.shares_total[0] = 11_000;
        let mut mr = trader();
        warm(&mut mr, &mut owned);
        owned.quotes[0] = quote(9_980, 9_982);
        let mut intents = Vec::new();
        mr.wake(&owned.view(), &mut intents);
        assert!(intents.is_empty(), "{intents:?}");
    }
}

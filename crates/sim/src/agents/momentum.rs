//! The momentum trader: follows the trend of two moving averages (ABIDES's
//! MomentumAgent).
//!
//! At each wake-up it samples one symbol's reference price; once it has `long` samples
//! it compares the average of the last `short` with that of the last `long`: a higher
//! short average is an up-trend and it buys, a lower one a down-trend and it sells, an
//! IOC order of a random size in `qty_min..=qty_max` at the opposite touch. RMSC03 runs
//! 25 such agents with windows 20 and 50, sizes 1 to 10 and a wake-up every 20 s; the
//! demo keeps the windows and sizes and wakes every second so trends show within minutes.
//! Its position stays within ±`position_limit` of the starting holding.

use bourse_engine::Side;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::signal::Window;
use super::{jittered_ns, AgentKind, Budget, Intent, Observation, Place, Strategy, NS_PER_SEC};

/// The momentum trader's settings.
#[derive(Clone, Debug)]
pub struct MomentumParams {
    pub symbol: usize,
    pub short: usize,
    pub long: usize,
    pub qty_min: i64,
    pub qty_max: i64,
    pub position_limit: i64,
    pub shares_initial: i64,
    pub wake_ns: u64,
}

impl Default for MomentumParams {
    fn default() -> Self {
        MomentumParams {
            symbol: 0,
            short: 20,
            long: 50,
            qty_min: 1,
            qty_max: 10,
            position_limit: 1_000,
            shares_initial: 0,
            wake_ns: NS_PER_SEC,
        }
    }
}

/// See the module documentation.
pub struct Momentum {
    params: MomentumParams,
    rng: ChaCha8Rng,
    short: Window,
    long: Window,
}

impl Momentum {
    pub fn new(params: MomentumParams, seed: u64) -> Self {
        let (short, long) = (Window::new(params.short), Window::new(params.long));
        Momentum { params, rng: ChaCha8Rng::seed_from_u64(seed), short, long }
    }
}

impl Strategy for Momentum {
    fn kind(&self) -> AgentKind {
        AgentKind::Momentum
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let wait = jittered_ns(&mut self.rng, self.params.wake_ns, 0.2);
        let symbol = self.params.symbol;
        let Some(quote) = observation.quotes.get(symbol) else { return wait };
        let Some(price) = quote.reference() else { return wait };
        self.short.push(price);
        self.long.push(price);
        let (Some(short), Some(long)) = (self.short.mean(), self.long.mean()) else { return wait };
        if !self.long.is_full() || short == long {
            return wait;
        }
        let position =
            observation.portfolio.shares_total.get(symbol).copied().unwrap_or(0) - self.params.shares_initial;
        let (side, px) = if short > long && position < self.params.position_limit {
            (Side::Buy, quote.ask.map(|l| l.px))
        } else if short < long && position > -self.params.position_limit {
            (Side::Sell, quote.bid.map(|l| l.px))
        } else {
            return wait;
        };
        let qty = self.rng.gen_range(self.params.qty_min.max(1)..=self.params.qty_max.max(self.params.qty_min.max(1)));
        if let Some(px) = px {
            Budget::new(observation).push(intents, Place { symbol, side, px, qty, ioc: true });
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn run(prices: impl Iterator<Item = i64>) -> Vec<Intent> {
        let params = MomentumParams { short: 3, long: 6, shares_initial: 10_000, ..MomentumParams::default() };
        let mut trader = Momentum::new(params, 9);
        let mut owned = Owned::new(1, 0, 0);
        let mut last = Vec::new();
        for mid in prices {
            owned.quotes[0] = quote(mid - 1, mid + 1);
            last.clear();
            trader.wake(&owned.view(), &mut last);
        }
        last
    }

    #[test]
    fn buys_an_up_trend_and_sells_a_down_trend() {
        let up = places(&run((0..8).map(|k| 10_000 + 5 * k)));
        assert_eq!(up.len(), 1);
        assert_eq!((up[0].side, up[0].px, up[0].ioc), (Side::Buy, 10_036, true));
        assert!((1..=10).contains(&up[0].qty));
        let down = places(&run((0..8).map(|k| 10_000 - 5 * k)));
        assert_eq!((down[0].side, down[0].px), (Side::Sell, 9_964));
    }

    #[test]
    fn waits_for_a_full_long_window() {
        assert!(run((0..5).map(|k| 10_000 + 5 * k)).is_empty());
    }
}

//! The value trader: estimates a symbol's fundamental value from noisy observations and
//! trades toward it (ABIDES's ValueAgent).
//!
//! It wakes at Poisson arrivals, cancels its resting orders, and observes the fundamental
//! with Gaussian noise of variance `sigma_n` (RMSC03: `r̄ / 10`). It keeps a Bayesian
//! (Kalman) estimate `r_t` with variance `σ_t`: between observations the estimate decays
//! toward `r̄` at the process's κ and its variance grows by the process's shock variance;
//! an observation is weighted by the two variances. It projects the estimate
//! `horizon_s` ahead (ABIDES projects to the close), and if the projection is below the
//! mid it sells, else it buys, `size` shares drawn in `size_min..size_max` (RMSC03: 20
//! to 50). With probability `aggression` (RMSC03: 0.1) it takes the touch; otherwise it
//! shades its price up to `depth_spread` spreads (RMSC03: 2) into the passive side.

use bourse_engine::Side;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{exponential_ns, standard_normal, AgentKind, Budget, Intent, Observation, Place, Strategy, NS_PER_SEC};

/// The value trader's settings.
#[derive(Clone, Debug)]
pub struct ValueParams {
    pub symbol: usize,
    /// The process's long-run mean r̄, κ per second, and shock variance per second.
    pub mean: f64,
    pub kappa: f64,
    pub shock_variance: f64,
    /// Variance of its observation noise.
    pub sigma_n: f64,
    /// How far ahead it values the symbol, in seconds.
    pub horizon_s: f64,
    pub size_min: i64,
    pub size_max: i64,
    pub aggression: f64,
    pub depth_spread: i64,
    pub wake_mean_ns: u64,
}

impl ValueParams {
    /// RMSC03's value agent on `symbol` whose fundamental follows `process`.
    pub fn abides(symbol: usize, process: &super::fundamental::FundamentalParams) -> Self {
        ValueParams {
            symbol,
            mean: process.mean,
            kappa: process.kappa,
            shock_variance: process.sigma * process.sigma,
            sigma_n: process.mean / 10.0,
            horizon_s: 60.0,
            size_min: 20,
            size_max: 50,
            aggression: 0.1,
            depth_spread: 2,
            wake_mean_ns: 3 * NS_PER_SEC,
        }
    }
}

/// See the module documentation.
pub struct ValueTrader {
    params: ValueParams,
    rng: ChaCha8Rng,
    estimate: f64,
    variance: f64,
    t_prev_ns: Option<u64>,
}

impl ValueTrader {
    pub fn new(params: ValueParams, seed: u64) -> Self {
        let estimate = params.mean;
        ValueTrader { params, rng: ChaCha8Rng::seed_from_u64(seed), estimate, variance: 0.0, t_prev_ns: None }
    }

    /// The current estimate of the fundamental, projected `horizon_s` ahead.
    pub fn projection(&self) -> f64 {
        let decay = (-self.params.kappa * self.params.horizon_s).exp();
        self.params.mean + (self.estimate - self.params.mean) * decay
    }

    /// Takes one noisy observation of `truth` at `now_ns` into the estimate.
    fn observe(&mut self, truth: i64, now_ns: u64) {
        let p = &self.params;
        let observed = truth as f64 + p.sigma_n.sqrt() * standard_normal(&mut self.rng);
        let dt = self.t_prev_ns.map_or(0.0, |t| now_ns.saturating_sub(t) as f64 / 1e9);
        self.t_prev_ns = Some(now_ns);
        let decay = (-p.kappa * dt).exp();
        let prior = p.mean + (self.estimate - p.mean) * decay;
        let growth = if p.kappa > 0.0 { (1.0 - decay * decay) / (2.0 * p.kappa) } else { dt };
        let prior_variance = decay * decay * self.variance + growth * p.shock_variance;
        // The first observation (no prior variance yet) is taken at its word less the noise.
        let prior_variance = if self.variance == 0.0 && dt == 0.0 { p.sigma_n } else { prior_variance };
        let gain = prior_variance / (prior_variance + p.sigma_n);
        self.estimate = prior + gain * (observed - prior);
        self.variance = (1.0 - gain) * prior_variance;
    }
}

impl Strategy for ValueTrader {
    fn kind(&self) -> AgentKind {
        AgentKind::Value
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let wait = exponential_ns(&mut self.rng, self.params.wake_mean_ns);
        let symbol = self.params.symbol;
        let (Some(quote), Some(&truth)) = (observation.quotes.get(symbol), observation.fundamentals.get(symbol)) else {
            return wait;
        };
        let mut budget = Budget::new(observation);
        for order in observation.open_orders.iter().filter(|o| o.symbol == symbol) {
            intents.push(Intent::Cancel { order: order.id });
            budget.release(order);
        }
        self.observe(truth, observation.now_ns);
        let value = self.projection();
        let size = self.rng.gen_range(self.params.size_min.max(1)..self.params.size_max.max(self.params.size_min + 1));
        let place = match (quote.bid, quote.ask) {
            (Some(bid), Some(ask)) => {
                let mid = (bid.px + ask.px) as f64 / 2.0;
                let spread = (ask.px - bid.px).max(1);
                let adjust = if self.rng.gen::<f64>() < self.params.aggression {
                    0
                } else {
                    self.rng.gen_range(0..(self.params.depth_spread * spread).max(1))
                };
                if value < mid {
                    Place { symbol, side: Side::Sell, px: bid.px + adjust, qty: size, ioc: false }
                } else {
                    Place { symbol, side: Side::Buy, px: ask.px - adjust, qty: size, ioc: false }
                }
            }
            _ => {
                let side = if self.rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
                Place { symbol, side, px: value.round() as i64, qty: size, ioc: false }
            }
        };
        budget.push(intents, place);
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::super::fundamental::FundamentalParams;
    use super::super::test_support::*;
    use super::*;

    fn side_after(fundamental: i64, wakes: u64) -> (Side, ValueTrader) {
        let process = FundamentalParams::demo(10_000);
        let mut trader = ValueTrader::new(ValueParams::abides(0, &process), 8);
        let mut owned = Owned::new(1, 9_995, 10_005);
        owned.fundamentals[0] = fundamental;
        let mut last = Vec::new();
        for k in 0..wakes {
            owned.now_ns = k * NS_PER_SEC;
            last.clear();
            trader.wake(&owned.view(), &mut last);
        }
        (places(&last)[0].side, trader)
    }

    #[test]
    fn follows_the_fundamental() {
        let (side, trader) = side_after(10_300, 20);
        assert_eq!(side, Side::Buy);
        assert!((10_200.0..10_300.0).contains(&trader.projection()), "{}", trader.projection());
        let (side, trader) = side_after(9_700, 20);
        assert_eq!(side, Side::Sell);
        assert!((9_700.0..9_800.0).contains(&trader.projection()), "{}", trader.projection());
    }

    #[test]
    fn prices_stay_near_the_touch_and_it_cancels_before_placing() {
        let process = FundamentalParams::demo(10_000);
        let mut trader = ValueTrader::new(ValueParams::abides(0, &process), 2);
        let mut owned = Owned::new(1, 9_995, 10_005);
        owned.open_orders =
            vec![super::super::OpenOrder { id: 9, symbol: 0, side: Side::Buy, px: 9_990, qty_open: 30 }];
        for k in 0..200 {
            owned.now_ns = k * NS_PER_SEC;
            owned.fundamentals[0] = 10_000 + (k as i64 % 7) * 100 - 300;
            let mut intents = Vec::new();
            trader.wake(&owned.view(), &mut intents);
            assert_eq!(intents[0], Intent::Cancel { order: 9 });
            let place = places(&intents)[0];
            // Within two spreads (20) of the touch on the passive side.
            match place.side {
                Side::Buy => assert!((10_005 - 20..=10_005).contains(&place.px), "{place:?}"),
                Side::Sell => assert!((9_995..=9_995 + 20).contains(&place.px), "{place:?}"),
            }
            assert!((20..50).contains(&place.qty));
        }
    }
}

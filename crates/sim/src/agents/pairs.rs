//! The pairs trader: trades the spread between two related symbols.
//!
//! The spread is `s = ln(p_a) − ln(p_b)` of the two reference prices, sampled at each
//! wake-up into a window of `window` samples; `z = (s − mean) / σ`. With the position
//! in `a` flat it opens when `|z| > entry`: above, `a` is dear against `b`, so it sells
//! `a` and buys `b`; below, the reverse. Holding a position it closes both legs when
//! `|z| < exit` (the spread came back) and adds nothing while open. The legs are IOC
//! orders of `qty` at the opposite touch. This is the distance/z-score rule of Gatev,
//! Goetzmann and Rouwenhorst ("Pairs Trading: Performance of a Relative-Value Arbitrage
//! Rule", Review of Financial Studies 19(3), 2006), with their two-σ entry; the hedge
//! ratio is 1 (equal quantities), which fits symbols of similar price.
//!
//! Its side of the spread is read from its holdings of `a` (above the starting holding:
//! long the spread), not remembered, so a lost fill report cannot confuse it.

use bourse_engine::Side;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::signal::Window;
use super::{jittered_ns, AgentKind, Budget, Intent, Observation, Place, Strategy, NS_PER_SEC};

/// The pairs trader's settings.
#[derive(Clone, Debug)]
pub struct PairsParams {
    pub a: usize,
    pub b: usize,
    pub window: usize,
    pub entry_z: f64,
    pub exit_z: f64,
    pub qty: i64,
    pub shares_initial: i64,
    pub wake_ns: u64,
}

impl Default for PairsParams {
    fn default() -> Self {
        PairsParams {
            a: 0,
            b: 1,
            window: 30,
            entry_z: 2.0,
            exit_z: 0.5,
            qty: 50,
            shares_initial: 0,
            wake_ns: NS_PER_SEC,
        }
    }
}

/// See the module documentation.
pub struct PairsTrader {
    params: PairsParams,
    rng: ChaCha8Rng,
    spread: Window,
}

impl PairsTrader {
    pub fn new(params: PairsParams, seed: u64) -> Self {
        let spread = Window::new(params.window);
        PairsTrader { params, rng: ChaCha8Rng::seed_from_u64(seed), spread }
    }

    /// Both legs: `side_a` in `a` (qty_a) and the other side in `b` (qty_b), at the touches.
    fn legs(&self, observation: &Observation<'_>, side_a: Side, qty_a: i64, qty_b: i64, intents: &mut Vec<Intent>) {
        let touch = |symbol: usize, side: Side| {
            let quote = observation.quotes[symbol];
            match side {
                Side::Buy => quote.ask.map(|l| l.px),
                Side::Sell => quote.bid.map(|l| l.px),
            }
        };
        let (a, b, side_b) = (self.params.a, self.params.b, side_a.opposite());
        let (Some(px_a), Some(px_b)) = (touch(a, side_a), touch(b, side_b)) else { return };
        let mut budget = Budget::new(observation);
        let (Some(leg_a), Some(leg_b)) = (
            budget.fit(Place { symbol: a, side: side_a, px: px_a, qty: qty_a, ioc: true }),
            budget.fit(Place { symbol: b, side: side_b, px: px_b, qty: qty_b, ioc: true }),
        ) else {
            return;
        };
        intents.push(Intent::Place(leg_a));
        intents.push(Intent::Place(leg_b));
    }
}

impl Strategy for PairsTrader {
    fn kind(&self) -> AgentKind {
        AgentKind::Pairs
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let wait = jittered_ns(&mut self.rng, self.params.wake_ns, 0.2);
        let (a, b) = (self.params.a, self.params.b);
        let (Some(qa), Some(qb)) = (observation.quotes.get(a), observation.quotes.get(b)) else { return wait };
        let (Some(pa), Some(pb)) = (qa.reference(), qb.reference()) else { return wait };
        if pa <= 0.0 || pb <= 0.0 {
            return wait;
        }
        let s = pa.ln() - pb.ln();
        self.spread.push(s);
        let (Some(mean), Some(sd)) = (self.spread.mean(), self.spread.std_dev()) else { return wait };
        if !self.spread.is_full() || sd <= 0.0 {
            return wait;
        }
        let z = (s - mean) / sd;
        let shares = |symbol: usize| observation.portfolio.shares_total.get(symbol).copied().unwrap_or(0);
        let held_a = shares(a) - self.params.shares_initial;
        let held_b = shares(b) - self.params.shares_initial;
        let qty = self.params.qty;
        if held_a == 0 {
            if z > self.params.entry_z {
                self.legs(observation, Side::Sell, qty, qty, intents);
            } else if z < -self.params.entry_z {
                self.legs(observation, Side::Buy, qty, qty, intents);
            }
        } else if z.abs() < self.params.exit_z {
            // Close: bring both holdings back to where they started.
            let side_a = if held_a > 0 { Side::Sell } else { Side::Buy };
            self.legs(observation, side_a, held_a.abs(), held_b.abs().max(1), intents);
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn trader() -> PairsTrader {
        let params = PairsParams { window: 10, shares_initial: 10_000, ..PairsParams::default() };
        PairsTrader::new(params, 4)
    }

    /// Ten samples of a spread that wobbles around 0.
    fn warm(trader: &mut PairsTrader, owned: &mut Owned) {
        for k in 0..10 {
            owned.quotes[0] = quote(9_999 + k % 2, 10_001 + k % 2);
            owned.quotes[1] = quote(9_999, 10_001);
            let mut intents = Vec::new();
            trader.wake(&owned.view(), &mut intents);
            assert!(intents.is_empty());
        }
    }

    #[test]
    fn sells_the_dear_leg_and_buys_the_cheap_one_then_closes() {
        let mut owned = Owned::new(2, 9_999, 10_001);
        let mut pairs = trader();
        warm(&mut pairs, &mut owned);
        owned.quotes[0] = quote(10_099, 10_101);
        let mut intents = Vec::new();
        pairs.wake(&owned.view(), &mut intents);
        assert_eq!(
            places(&intents),
            vec![
                Place { symbol: 0, side: Side::Sell, px: 10_099, qty: 50, ioc: true },
                Place { symbol: 1, side: Side::Buy, px: 10_001, qty: 50, ioc: true }
            ]
        );
        // Filled: short a, long b. While the spread stays wide it adds nothing …
        owned.portfolio.shares_total = vec![9_950, 10_050];
        let mut intents = Vec::new();
        pairs.wake(&owned.view(), &mut intents);
        assert!(intents.is_empty(), "{intents:?}");
        // … and when it returns to its mean it closes both legs.
        let mut closed = Vec::new();
        for _ in 0..20 {
            owned.quotes[0] = quote(9_999, 10_001);
            closed.clear();
            pairs.wake(&owned.view(), &mut closed);
            if !closed.is_empty() {
                break;
            }
        }
        assert_eq!(
            places(&closed),
            vec![
                Place { symbol: 0, side: Side::Buy, px: 10_001, qty: 50, ioc: true },
                Place { symbol: 1, side: Side::Sell, px: 9_999, qty: 50, ioc: true }
            ]
        );
    }

    #[test]
    fn buys_a_when_it_is_cheap() {
        let mut owned = Owned::new(2, 9_999, 10_001);
        let mut pairs = trader();
        warm(&mut pairs, &mut owned);
        owned.quotes[0] = quote(9_899, 9_901);
        let mut intents = Vec::new();
        pairs.wake(&owned.view(), &mut intents);
        let legs = places(&intents);
        assert_eq!((legs[0].symbol, legs[0].side), (0, Side::Buy));
        assert_eq!((legs[1].symbol, legs[1].side), (1, Side::Sell));
    }
}

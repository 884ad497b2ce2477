//! The noise (random) trader: zero intelligence, the bulk of the order flow.
//!
//! It wakes at Poisson arrivals (ABIDES's agents draw exponential wake-up gaps), picks a
//! symbol and a side at random, a price uniformly within `band_bps` basis points of the
//! market's reference price and a quantity uniformly in `1..=qty_max` lots, and sends a GTC
//! limit order: about half cross the spread and trade at once, the rest rest in the
//! book. This is Gode and Sunder's zero-intelligence trader ("Allocative Efficiency of
//! Markets with Zero-Intelligence Traders", Journal of Political Economy 101(1), 1993)
//! in the form CloudEx's random traders take: random side, price around the current
//! price, random size. ABIDES's NoiseAgent is the same idea placed at the touch.
//!
//! Bounds: its orders are within `band_bps` of the reference (at least a tick) and the symbol's price
//! bounds, at most `qty_max` lots and affordable ([`super::Budget`]); it keeps at most
//! `open_max` orders resting (cancelling its oldest) and cancels an order older than
//! `ttl_ns`, so it cannot fill the book or run out of money by leaving orders behind.

use bourse_engine::Side;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::{exponential_ns, AgentKind, Budget, Intent, Observation, Place, Strategy, NS_PER_SEC};

/// The noise trader's settings.
#[derive(Clone, Debug)]
pub struct NoiseParams {
    /// Symbols it may trade (scenario indexes), one picked at random per order.
    pub symbols: Vec<usize>,
    /// The price is the reference ± up to this many basis points (at least one tick).
    pub band_bps: f64,
    /// Lots per order, at most.
    pub qty_max_lots: i64,
    /// Mean time between orders (exponential).
    pub wake_mean_ns: u64,
    /// Resting orders at most; the oldest beyond it is cancelled.
    pub open_max: usize,
    /// Orders resting longer than this are cancelled.
    pub ttl_ns: u64,
    /// The reference price before any trade or quote, per symbol.
    pub px_open: Vec<i64>,
}

impl Default for NoiseParams {
    fn default() -> Self {
        NoiseParams {
            symbols: Vec::new(),
            band_bps: 20.0,
            qty_max_lots: 100,
            wake_mean_ns: 2 * NS_PER_SEC,
            open_max: 8,
            ttl_ns: 30 * NS_PER_SEC,
            px_open: Vec::new(),
        }
    }
}

/// See the module documentation.
pub struct NoiseTrader {
    params: NoiseParams,
    rng: ChaCha8Rng,
    /// When each of its orders was first seen resting (order id, time).
    seen: Vec<(u64, u64)>,
}

impl NoiseTrader {
    pub fn new(params: NoiseParams, seed: u64) -> Self {
        NoiseTrader { params, rng: ChaCha8Rng::seed_from_u64(seed), seen: Vec::new() }
    }

    /// Cancels orders past their time to live, and the oldest beyond `open_max − 1` (to
    /// make room for the new one).
    fn cancel_stale(&mut self, observation: &Observation<'_>, budget: &mut Budget<'_>, intents: &mut Vec<Intent>) {
        let now = observation.now_ns;
        self.seen.retain(|(id, _)| observation.open_orders.iter().any(|o| o.id == *id));
        for order in observation.open_orders {
            if !self.seen.iter().any(|(id, _)| *id == order.id) {
                self.seen.push((order.id, now));
            }
        }
        let keep = self.params.open_max.saturating_sub(1);
        let excess = observation.open_orders.len().saturating_sub(keep);
        for (k, order) in observation.open_orders.iter().enumerate() {
            let since = self.seen.iter().find(|(id, _)| *id == order.id).map_or(now, |(_, t)| *t);
            if k < excess || now.saturating_sub(since) >= self.params.ttl_ns {
                intents.push(Intent::Cancel { order: order.id });
                budget.release(order);
            }
        }
    }
}

impl Strategy for NoiseTrader {
    fn kind(&self) -> AgentKind {
        AgentKind::Noise
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let mut budget = Budget::new(observation);
        self.cancel_stale(observation, &mut budget, intents);
        let wait = exponential_ns(&mut self.rng, self.params.wake_mean_ns);
        if self.params.symbols.is_empty() {
            return wait;
        }
        let symbol = self.params.symbols[self.rng.gen_range(0..self.params.symbols.len())];
        let (Some(rules), Some(quote)) = (observation.rules.get(symbol), observation.quotes.get(symbol)) else {
            return wait;
        };
        let reference =
            quote.reference().unwrap_or(self.params.px_open.get(symbol).copied().unwrap_or(rules.px_min) as f64);
        let side = if self.rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
        let band = super::market_maker::ticks_for_bps(rules.clamp_px(reference), self.params.band_bps, rules.tick);
        let offset = self.rng.gen_range(-band..=band);
        let px = rules.clamp_px(reference) + offset * rules.tick;
        let qty = self.rng.gen_range(1..=self.params.qty_max_lots.max(1)) * rules.lot;
        budget.push(intents, Place { symbol, side, px, qty, ioc: false });
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::{OpenOrder, SymbolRules};
    use super::*;

    #[test]
    fn orders_stay_within_the_band_the_bounds_and_the_budget() {
        let mut owned = Owned::new(4, 9_995, 10_005);
        // 10 bp of 10,000 is 10 ticks of 1, or 2 ticks of 5 (within tighter bounds).
        owned.rules[3] = SymbolRules { tick: 5, lot: 10, px_min: 9_990, px_max: 10_003 };
        owned.portfolio.cash_available = 60_000;
        owned.portfolio.shares_available = vec![25, 25, 25, 25];
        let params = NoiseParams {
            symbols: vec![0, 1, 2, 3],
            band_bps: 10.0,
            px_open: vec![10_000; 4],
            ..NoiseParams::default()
        };
        let mut trader = NoiseTrader::new(params, 42);
        let (mut buys, mut sells, mut mean_wait) = (0, 0, 0u64);
        for round in 0..2_000u64 {
            owned.now_ns = round * NS_PER_SEC;
            let mut intents = Vec::new();
            mean_wait += trader.wake(&owned.view(), &mut intents) / 2_000;
            for place in places(&intents) {
                let rules = owned.rules[place.symbol];
                assert!((10_000 - 10..=10_000 + 10).contains(&place.px), "{place:?}");
                assert!((rules.px_min..=rules.px_max).contains(&place.px) && place.px % rules.tick == 0);
                assert!(place.qty > 0 && place.qty <= 100 * rules.lot && place.qty % rules.lot == 0);
                match place.side {
                    Side::Buy => {
                        assert!(place.px * place.qty <= 60_000, "{place:?}");
                        buys += 1;
                    }
                    Side::Sell => {
                        assert!(place.qty <= 25, "{place:?}");
                        sells += 1;
                    }
                }
            }
        }
        assert!(buys > 500 && sells > 500, "{buys} {sells}");
        assert!((1_800_000_000..2_200_000_000).contains(&mean_wait), "mean wait {mean_wait} ns");
    }

    #[test]
    fn same_seed_same_orders() {
        let owned = Owned::new(2, 9_995, 10_005);
        let params = NoiseParams { symbols: vec![0, 1], px_open: vec![10_000; 2], ..NoiseParams::default() };
        let run = |seed| {
            let mut trader = NoiseTrader::new(params.clone(), seed);
            let mut intents = Vec::new();
            let waits: Vec<u64> = (0..50).map(|_| trader.wake(&owned.view(), &mut intents)).collect();
            (intents, waits)
        };
        assert_eq!(run(5), run(5));
        assert_ne!(run(5), run(6));
    }

    #[test]
    fn cancels_old_orders_and_keeps_few_resting() {
        let mut owned = Owned::new(1, 9_995, 10_005);
        owned.open_orders =
            (1..=10).map(|id| OpenOrder { id, symbol: 0, side: Side::Buy, px: 9_990, qty_open: 5 }).collect();
        let params = NoiseParams { symbols: vec![0], open_max: 8, px_open: vec![10_000], ..NoiseParams::default() };
        let mut trader = NoiseTrader::new(params, 1);
        let mut intents = Vec::new();
        trader.wake(&owned.view(), &mut intents);
        let cancelled: Vec<u64> = intents
            .iter()
            .filter_map(|i| match i {
                Intent::Cancel { order } => Some(*order),
                _ => None,
            })
            .collect();
        assert_eq!(cancelled, vec![1, 2, 3], "the three oldest make room for one new order");
        // 30 s later every remaining order is past its time to live.
        owned.open_orders.retain(|o| o.id > 3);
        owned.now_ns = 31 * NS_PER_SEC;
        let mut intents = Vec::new();
        trader.wake(&owned.view(), &mut intents);
        let cancels = intents.iter().filter(|i| matches!(i, Intent::Cancel { .. })).count();
        assert_eq!(cancels, 7);
    }
}

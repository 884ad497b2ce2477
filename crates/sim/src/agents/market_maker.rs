//! The market maker: quotes both sides of every symbol it makes a market in, around a
//! reference price skewed by its inventory, within inventory limits.
//!
//! At each wake-up, per symbol:
//! - the reference price is, as configured, the symbol's fundamental value (a reference
//!   price feed from outside the book, like the oracle ABIDES's agents read; the
//!   default, which keeps the market anchored while the fundamental wanders) or the last
//!   trade (else the mid, else the opening price: the price the market last agreed on);
//! - the reservation price is the reference moved against the inventory `q` (shares held
//!   above the starting holding): `r = reference − skew · q`, the inventory term of
//!   Avellaneda and Stoikov ("High-frequency trading in a limit order book",
//!   Quantitative Finance 8(3), 2008), so a market maker that has bought too much quotes
//!   lower and sells more;
//! - it wants `levels` bids at `r − half_spread − k · spacing` and `levels` asks at
//!   `r + half_spread + k · spacing` (k = 0, 1, …), each of `size` shares, like ABIDES's
//!   adaptive market maker's ladder (`num_ticks` levels `level_spacing` apart around the
//!   mid; RMSC03 uses 10 levels and wakes every 10 s — a shorter ladder that moves every
//!   second or so suits a demo measured in minutes);
//! - at or beyond `+inventory_limit` it shows no bids, at or beyond `−inventory_limit`
//!   no asks, so the inventory stays within the limit plus one ladder's size;
//! - it reaches the wanted ladder from its resting orders with as few commands as it
//!   can: a resting order at a wanted price stays, one at another price moves there,
//!   extra ones are cancelled and missing ones placed (a half-filled order is replaced
//!   by a full one). When prices rise it moves its asks before its bids (and the
//!   reverse when they fall), so its own quotes never cross.

use bourse_engine::Side;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::{jittered_ns, AgentKind, Budget, Intent, Observation, OpenOrder, Place, Strategy, NS_PER_SEC};

/// Where the market maker takes its reference price from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MakerReference {
    /// The symbol's fundamental value (an outside reference price).
    Fundamental,
    /// The last trade, else the mid, else the opening price.
    LastTrade,
}

/// The market maker's settings.
#[derive(Clone, Debug)]
pub struct MarketMakerParams {
    /// Symbols quoted (scenario indexes).
    pub symbols: Vec<usize>,
    pub reference: MakerReference,
    /// Distance from the reservation price to the first bid and first ask, in basis
    /// points of the price (at least one tick).
    pub half_spread_bps: f64,
    pub levels: usize,
    /// Distance between levels, in basis points (at least one tick).
    pub level_spacing_bps: f64,
    /// Shares per level.
    pub size: i64,
    /// Inventory (shares above the starting holding) beyond which one side goes quiet.
    pub inventory_limit: i64,
    /// Ticks the reservation price moves per `size` shares of inventory.
    pub skew_ticks_per_size: f64,
    /// The starting holding of each symbol (inventory is measured from it).
    pub shares_initial: i64,
    /// The reference price before any trade or quote, per symbol.
    pub px_open: Vec<i64>,
    /// Mean wake-up interval (±20 %).
    pub wake_ns: u64,
}

impl Default for MarketMakerParams {
    fn default() -> Self {
        MarketMakerParams {
            symbols: Vec::new(),
            reference: MakerReference::Fundamental,
            half_spread_bps: 5.0,
            levels: 3,
            level_spacing_bps: 5.0,
            size: 50,
            inventory_limit: 2_000,
            skew_ticks_per_size: 0.5,
            shares_initial: 0,
            px_open: Vec::new(),
            wake_ns: NS_PER_SEC,
        }
    }
}

/// See the module documentation.
pub struct MarketMaker {
    params: MarketMakerParams,
    rng: ChaCha8Rng,
    /// The reservation price of each symbol at the previous wake-up.
    reservation_last: Vec<Option<i64>>,
}

impl MarketMaker {
    pub fn new(params: MarketMakerParams, seed: u64) -> Self {
        let symbols = params.px_open.len();
        MarketMaker { params, rng: ChaCha8Rng::seed_from_u64(seed), reservation_last: vec![None; symbols] }
    }

    /// Inventory of `symbol`: shares held above the starting holding.
    fn inventory(&self, observation: &Observation<'_>, symbol: usize) -> i64 {
        observation.portfolio.shares_total.get(symbol).copied().unwrap_or(0) - self.params.shares_initial
    }

    /// The reservation price of `symbol`, in ticks' units of price.
    fn reservation(&self, observation: &Observation<'_>, symbol: usize) -> i64 {
        let quote = observation.quotes[symbol];
        let open = self.params.px_open.get(symbol).copied().unwrap_or(0) as f64;
        let reference = match self.params.reference {
            MakerReference::Fundamental => observation.fundamentals.get(symbol).map_or(open, |&v| v as f64),
            MakerReference::LastTrade => quote.last.map(|px| px as f64).or_else(|| quote.mid()).unwrap_or(open),
        };
        let tick = observation.rules[symbol].tick as f64;
        let inventory_in_sizes = self.inventory(observation, symbol) as f64 / self.params.size.max(1) as f64;
        observation.rules[symbol].clamp_px(reference - self.params.skew_ticks_per_size * inventory_in_sizes * tick)
    }

    /// The wanted prices of one side, best first (empty when the inventory limit bars it).
    fn ladder(&self, observation: &Observation<'_>, symbol: usize, side: Side, reservation: i64) -> Vec<i64> {
        let inventory = self.inventory(observation, symbol);
        let barred = match side {
            Side::Buy => inventory >= self.params.inventory_limit,
            Side::Sell => inventory <= -self.params.inventory_limit,
        };
        if barred {
            return Vec::new();
        }
        let rules = observation.rules[symbol];
        let half = ticks_for_bps(reservation, self.params.half_spread_bps, rules.tick);
        let spacing = ticks_for_bps(reservation, self.params.level_spacing_bps, rules.tick);
        let mut prices: Vec<i64> = (0..self.params.levels as i64)
            .map(|k| {
                let ticks = half + k * spacing;
                match side {
                    Side::Buy => rules.clamp_px((reservation - ticks * rules.tick) as f64),
                    Side::Sell => rules.clamp_px((reservation + ticks * rules.tick) as f64),
                }
            })
            .collect();
        prices.dedup();
        prices
    }

    /// Intents that turn the resting orders of one side into the wanted ladder.
    fn requote_side(
        &self,
        observation: &Observation<'_>,
        budget: &mut Budget<'_>,
        symbol: usize,
        side: Side,
        wanted: &[i64],
        intents: &mut Vec<Intent>,
    ) {
        let mut resting: Vec<&OpenOrder> =
            observation.open_orders.iter().filter(|o| o.symbol == symbol && o.side == side).collect();
        match side {
            Side::Buy => resting.sort_by_key(|o| (std::cmp::Reverse(o.px), o.id)),
            Side::Sell => resting.sort_by_key(|o| (o.px, o.id)),
        }
        for (k, order) in resting.iter().enumerate() {
            let Some(&px) = wanted.get(k) else {
                intents.push(Intent::Cancel { order: order.id });
                budget.release(order);
                continue;
            };
            if order.qty_open * 2 < self.params.size {
                intents.push(Intent::Cancel { order: order.id });
                budget.release(order);
                budget.push(intents, Place { symbol, side, px, qty: self.params.size, ioc: false });
            } else if order.px != px {
                let extra_cash = if side == Side::Buy { (px - order.px) * order.qty_open } else { 0 };
                if extra_cash <= budget.cash() {
                    intents.push(Intent::Move { order: order.id, px });
                    budget.charge_cash(extra_cash);
                } else {
                    intents.push(Intent::Cancel { order: order.id });
                    budget.release(order);
                }
            }
        }
        for &px in wanted.iter().skip(resting.len()) {
            budget.push(intents, Place { symbol, side, px, qty: self.params.size, ioc: false });
        }
    }
}

/// `bps` basis points of `px` in whole ticks, at least one.
pub fn ticks_for_bps(px: i64, bps: f64, tick: i64) -> i64 {
    ((px as f64 * bps / 10_000.0 / tick.max(1) as f64).round() as i64).max(1)
}

impl Strategy for MarketMaker {
    fn kind(&self) -> AgentKind {
        AgentKind::MarketMaker
    }

    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64 {
        let mut budget = Budget::new(observation);
        for &symbol in &self.params.symbols {
            if symbol >= observation.rules.len() {
                continue;
            }
            let reservation = self.reservation(observation, symbol);
            let rising = self.reservation_last.get(symbol).copied().flatten().is_none_or(|last| reservation >= last);
            if let Some(slot) = self.reservation_last.get_mut(symbol) {
                *slot = Some(reservation);
            }
            let sides = if rising { [Side::Sell, Side::Buy] } else { [Side::Buy, Side::Sell] };
            for side in sides {
                let wanted = self.ladder(observation, symbol, side, reservation);
                self.requote_side(observation, &mut budget, symbol, side, &wanted, intents);
            }
        }
        jittered_ns(&mut self.rng, self.params.wake_ns, 0.2)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;

    fn maker(symbols: usize) -> MarketMaker {
        let params = MarketMakerParams {
            symbols: (0..symbols).collect(),
            reference: MakerReference::LastTrade,
            half_spread_bps: 2.0,
            level_spacing_bps: 2.0,
            shares_initial: 10_000,
            px_open: vec![10_000; symbols],
            ..MarketMakerParams::default()
        };
        MarketMaker::new(params, 7)
    }

    #[test]
    fn quotes_both_sides_of_every_symbol_around_the_reference() {
        let mut owned = Owned::new(3, 9_990, 10_010);
        owned.quotes[1].last = Some(10_100);
        let mut mm = maker(3);
        let mut intents = Vec::new();
        let wait = mm.wake(&owned.view(), &mut intents);
        assert!((800_000_000..=1_200_000_000).contains(&wait), "{wait}");
        let places = places(&intents);
        assert_eq!(places.len(), 3 * 2 * 3, "three levels a side on three symbols");
        for symbol in 0..3 {
            let reference = if symbol == 1 { 10_100 } else { 10_000 };
            let bids: Vec<i64> =
                places.iter().filter(|p| p.symbol == symbol && p.side == Side::Buy).map(|p| p.px).collect();
            let asks: Vec<i64> =
                places.iter().filter(|p| p.symbol == symbol && p.side == Side::Sell).map(|p| p.px).collect();
            assert_eq!(bids, vec![reference - 2, reference - 4, reference - 6]);
            assert_eq!(asks, vec![reference + 2, reference + 4, reference + 6]);
        }
        assert!(places.iter().all(|p| p.qty == 50 && !p.ioc));
    }

    #[test]
    fn quotes_around_the_fundamental_when_told_to() {
        let mut owned = Owned::new(1, 9_990, 10_010);
        owned.fundamentals[0] = 10_500;
        let mut mm = maker(1);
        mm.params.reference = MakerReference::Fundamental;
        let mut intents = Vec::new();
        mm.wake(&owned.view(), &mut intents);
        let best_bid = places(&intents).iter().filter(|p| p.side == Side::Buy).map(|p| p.px).max();
        assert_eq!(best_bid, Some(10_500 - 2));
        assert_eq!(ticks_for_bps(950, 5.0, 1), 1, "at least one tick");
        assert_eq!(ticks_for_bps(31_000, 5.0, 1), 16);
    }

    #[test]
    fn respects_its_inventory_limit_and_skews_against_inventory() {
        let mut mm = maker(1);
        let mut owned = Owned::new(1, 9_990, 10_010);
        // Long by the limit: no bids, asks lowered to sell the inventory.
        owned.portfolio.shares_total[0] = 12_000;
        owned.portfolio.shares_available[0] = 12_000;
        let mut intents = Vec::new();
        mm.wake(&owned.view(), &mut intents);
        let places = places(&intents);
        assert!(places.iter().all(|p| p.side == Side::Sell), "{places:?}");
        // 2,000 shares = 40 sizes at 0.5 tick each: the reservation is 20 ticks lower.
        assert_eq!(places[0].px, 10_000 - 20 + 2);
        // Short by the limit: no asks.
        owned.portfolio.shares_total[0] = 8_000;
        owned.portfolio.shares_available[0] = 8_000;
        let mut intents = Vec::new();
        mm.wake(&owned.view(), &mut intents);
        assert!(super::super::test_support::places(&intents).iter().all(|p| p.side == Side::Buy));
    }

    #[test]
    fn moves_resting_quotes_instead_of_placing_new_ones() {
        let mut mm = maker(1);
        let mut owned = Owned::new(1, 9_990, 10_010);
        let mut intents = Vec::new();
        mm.wake(&owned.view(), &mut intents);
        // Its ladder rests; the market trades 5 ticks higher.
        owned.open_orders = places(&intents)
            .iter()
            .enumerate()
            .map(|(i, p)| OpenOrder { id: i as u64 + 1, symbol: 0, side: p.side, px: p.px, qty_open: p.qty })
            .collect();
        owned.quotes[0].last = Some(10_005);
        let mut intents = Vec::new();
        mm.wake(&owned.view(), &mut intents);
        assert_eq!(intents.len(), 6, "{intents:?}");
        assert!(intents.iter().all(|i| matches!(i, Intent::Move { .. })));
        // Prices rose: asks move first.
        let first =
            owned.open_orders.iter().find(|o| matches!(intents[0], Intent::Move { order, .. } if order == o.id));
        assert_eq!(first.map(|o| o.side), Some(Side::Sell));
        // The same market again: nothing to do.
        for intent in &intents {
            if let Intent::Move { order, px } = intent {
                owned.open_orders.iter_mut().find(|o| o.id == *order).unwrap().px = *px;
            }
        }
        let mut again = Vec::new();
        mm.wake(&owned.view(), &mut again);
        assert!(again.is_empty(), "{again:?}");
    }
}

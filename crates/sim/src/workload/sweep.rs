//! The sweep: one deep, one-sided book taken out by a single large order.
//!
//! 100,000 sell orders from 1,000 accounts rest over 10,000 consecutive price levels
//! (ten a level, placed round-robin across levels so each level's queue mixes
//! accounts); then one IOC buy for their whole quantity, limited at the highest of those
//! prices, trades with every one of them. The figure of merit is fills per second for
//! that one command: the cost of a long match loop with settlement and events per fill.

use bourse_engine::book::FastBook;
use bourse_engine::command::{Command, CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, Amount, Engine, EngineConfig, Event, Outcome, Px, Qty, Side, SymbolId};
use rand::Rng;

use super::market::{Market, MarketSpec};

pub const SWEEP_ORDERS: u32 = 100_000;
pub const SWEEP_LEVELS: u32 = 10_000;
pub const SWEEP_ACCOUNTS: u32 = 1_000;
/// Largest resting order, in lots.
const SWEEP_QTY_MAX: i64 = 20;

/// A book ready to be swept and the command that sweeps it.
pub struct SweepWorkload {
    pub start: Engine<FastBook>,
    pub sweep: Command,
    pub orders: u32,
    pub levels: u32,
    pub qty_total: i64,
}

fn sweep_market_spec(accounts: u32) -> MarketSpec {
    MarketSpec {
        // The last account is the sweeper.
        accounts: accounts + 1,
        symbols: 1,
        px_center: Px(100_000),
        px_min: Px(1_000),
        px_max: Px(10_000_000),
        fee_maker: Amount(1),
        fee_taker: Amount(2),
        quote_deposit: Amount(1_000_000_000_000_000),
        base_credit: Amount(1_000_000_000),
        orders_per_side: 0,
        px_spread_ticks: 1,
        margin: None,
    }
}

impl SweepWorkload {
    /// `orders` sells over `levels` levels from `accounts` accounts, sizes drawn from `seed`.
    pub fn build(seed: u64, orders: u32, levels: u32, accounts: u32) -> Self {
        assert!(orders > 0 && levels > 0 && accounts > 0, "a sweep needs orders, levels and accounts");
        let mut market = Market::new(sweep_market_spec(accounts), seed);
        let mut engine = Engine::new(EngineConfig::default());
        market.apply_setup(&mut engine);
        let symbol = SymbolId(0);
        let px_low = market.spec.px_center.0 + 1;
        let mut qty_total = 0;
        let mut events: Vec<Event> = Vec::new();
        for i in 0..orders {
            let account = AccountId(market.rng.gen_range(0..accounts));
            let px = Px(px_low + i64::from(i % levels));
            let qty = Qty(market.rng.gen_range(1..=SWEEP_QTY_MAX));
            qty_total += qty.0;
            let request = OrderRequest::limit(account, symbol, Side::Sell, px, qty, Tif::Gtc);
            let command = market.clients.user(account, CommandBody::Place(request));
            events.clear();
            let applied = engine.apply(&command, &mut events);
            assert!(matches!(applied.outcome, Outcome::Ok { .. }), "sweep book order refused: {applied:?}");
        }
        let sweeper = AccountId(accounts);
        let px_high = Px(px_low + i64::from(levels.min(orders)) - 1);
        let request = OrderRequest::limit(sweeper, symbol, Side::Buy, px_high, Qty(qty_total), Tif::Ioc);
        let sweep = market.clients.user(sweeper, CommandBody::Place(request));
        SweepWorkload { start: engine, sweep, orders, levels, qty_total }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_fills_every_resting_order() {
        let workload = SweepWorkload::build(7, 500, 50, 20);
        assert_eq!(workload.start.orders_resting(), 500);
        assert_eq!(workload.start.book_levels(SymbolId(0)), 50);
        let mut engine = workload.start.clone();
        let mut events = Vec::new();
        let applied = engine.apply(&workload.sweep, &mut events);
        assert!(matches!(applied.outcome, Outcome::Ok { .. }), "{applied:?}");
        let fills = events.iter().filter(|e| matches!(e, Event::Trade { .. })).count();
        assert_eq!(fills, 500);
        assert_eq!(engine.orders_resting(), 0);
    }
}

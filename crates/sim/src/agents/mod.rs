//! Simulated traders: small strategy objects, deterministic given their seed.
//!
//! Each agent is a [`Strategy`]: at each wake-up it gets an [`Observation`] (the time,
//! the market as its gateway released it, its own portfolio and resting orders, and the
//! fundamental values of the symbols) and answers with [`Intent`]s (place, cancel, move)
//! and the delay until it wants to wake again. A strategy does no I/O and reads no
//! clock: the same seed and the same observations give the same intents, so unit tests
//! drive strategies with hand-made observations, [`arena`] runs a whole population on
//! an in-process engine with a simulated clock, and `bourse demo` runs each agent on its
//! own gateway session.
//!
//! Prices and quantities are integers in engine units (quote minor units per base unit,
//! base units); floats appear only inside a strategy's own arithmetic (moving averages,
//! z-scores, Bayesian estimates) and are rounded to the tick before they leave it.
//!
//! The population and the parameters follow published simulations (each module cites
//! its sources):
//! - ABIDES (Byrd, Hybinette, Balch, "ABIDES: Towards High-Fidelity Multi-Agent Market
//!   Simulation", SIGSIM-PADS 2020; its reference configuration RMSC03): noise, value
//!   and momentum agents, the adaptive market maker, and the mean-reverting fundamental
//!   ("sparse mean-reverting oracle");
//! - CloudEx (Ghalayini, Geng, Sachidananda, Sriram, Zhang, Prabhakar, Rosenblum,
//!   Sivaraman, "CloudEx: A Fair-Access Financial Exchange in the Cloud", HotOS 2021):
//!   the population its experiments ran — one market maker, 43 random traders and 4
//!   mean-reversion traders over 10 symbols, each trader starting with 5,000,000 in cash
//!   and 10,000 shares of every symbol — which is [`scenario::Scenario::cloudex`].
//!
//! Every intent a strategy returns passes [`Budget::fit`]: on a known tick, inside the
//! symbol's price bounds, a positive multiple of the lot, and affordable from the
//! agent's available cash or shares after the intents already returned in the same
//! wake-up. So a well-behaved agent is never rejected for its balance; the exchange's
//! own checks stay the authority.

pub mod arena;
pub mod fundamental;
pub mod market_maker;
pub mod mean_reversion;
pub mod momentum;
pub mod noise;
pub mod pairs;
pub mod scenario;
pub mod signal;
pub mod value;

pub use bourse_engine::Side;

/// Nanoseconds in a second, for wake-up delays.
pub const NS_PER_SEC: u64 = 1_000_000_000;

/// The kinds of agent, as the dashboard groups them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AgentKind {
    MarketMaker,
    Noise,
    MeanReversion,
    Momentum,
    Pairs,
    Value,
}

impl AgentKind {
    /// A short stable name (`market_maker`, `noise`, …).
    pub fn name(self) -> &'static str {
        match self {
            AgentKind::MarketMaker => "market_maker",
            AgentKind::Noise => "noise",
            AgentKind::MeanReversion => "mean_reversion",
            AgentKind::Momentum => "momentum",
            AgentKind::Pairs => "pairs",
            AgentKind::Value => "value",
        }
    }
}

/// The rules of a symbol an agent must respect.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolRules {
    pub tick: i64,
    pub lot: i64,
    pub px_min: i64,
    pub px_max: i64,
}

impl SymbolRules {
    /// `px` rounded to the nearest tick and clamped into the price bounds (on ticks).
    pub fn clamp_px(&self, px: f64) -> i64 {
        let ticks = (px / self.tick as f64).round();
        let lowest = (self.px_min + self.tick - 1) / self.tick;
        let highest = self.px_max / self.tick;
        let ticks = if ticks.is_nan() { lowest as f64 } else { ticks.clamp(lowest as f64, highest as f64) };
        ticks as i64 * self.tick
    }

    /// `qty` rounded down to the lot (0 when below one lot).
    pub fn floor_qty(&self, qty: i64) -> i64 {
        qty.max(0) / self.lot * self.lot
    }
}

/// One side's best level.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub px: i64,
    pub qty: i64,
}

/// What an agent knows of one symbol's market: best bid and offer and the last trade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quote {
    pub bid: Option<Level>,
    pub ask: Option<Level>,
    pub last: Option<i64>,
}

impl Quote {
    /// The mid price when both sides are there.
    pub fn mid(&self) -> Option<f64> {
        Some((self.bid?.px + self.ask?.px) as f64 / 2.0)
    }

    /// The price a trader takes as the market's: the mid, else the last trade, else
    /// the one side there is.
    pub fn reference(&self) -> Option<f64> {
        self.mid().or(self.last.map(|px| px as f64)).or(self.bid.map(|l| l.px as f64)).or(self.ask.map(|l| l.px as f64))
    }

    /// The spread in price units, when both sides are there.
    pub fn spread(&self) -> Option<i64> {
        Some(self.ask?.px - self.bid?.px)
    }
}

/// An agent's holdings: cash (the quote asset) and shares of each symbol's base asset.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Portfolio {
    /// Free to spend.
    pub cash_available: i64,
    /// Available plus held by resting buy orders.
    pub cash_total: i64,
    /// Per symbol (scenario order): free to sell.
    pub shares_available: Vec<i64>,
    /// Per symbol: available plus held by resting sell orders.
    pub shares_total: Vec<i64>,
}

impl Portfolio {
    /// The same cash and shares in every symbol, nothing reserved.
    pub fn uniform(cash: i64, shares: i64, symbols: usize) -> Self {
        Portfolio {
            cash_available: cash,
            cash_total: cash,
            shares_available: vec![shares; symbols],
            shares_total: vec![shares; symbols],
        }
    }

    /// Cash plus each holding at its mark, in cash units (marks per symbol; a symbol
    /// without a mark counts for nothing).
    pub fn value(&self, marks: &[Option<i64>]) -> i64 {
        let shares: i128 = self
            .shares_total
            .iter()
            .zip(marks)
            .map(|(&qty, mark)| i128::from(qty) * i128::from(mark.unwrap_or(0)))
            .sum();
        i64::try_from(i128::from(self.cash_total) + shares).unwrap_or(i64::MAX)
    }
}

/// One of the agent's own resting orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenOrder {
    pub id: u64,
    /// Index of the symbol in the scenario.
    pub symbol: usize,
    pub side: Side,
    pub px: i64,
    pub qty_open: i64,
}

/// Everything an agent sees when it wakes.
#[derive(Clone, Copy, Debug)]
pub struct Observation<'a> {
    /// Simulation time: nanoseconds since the agents started.
    pub now_ns: u64,
    /// Per symbol, in scenario order.
    pub rules: &'a [SymbolRules],
    pub quotes: &'a [Quote],
    /// The true fundamental value of each symbol now (value traders observe it with
    /// their own noise; the others ignore it).
    pub fundamentals: &'a [i64],
    pub portfolio: &'a Portfolio,
    /// The agent's resting orders, oldest first.
    pub open_orders: &'a [OpenOrder],
}

/// A new limit order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    pub symbol: usize,
    pub side: Side,
    pub px: i64,
    pub qty: i64,
    /// Immediate or cancel (the rest of the order is cancelled) rather than GTC.
    pub ioc: bool,
}

/// What an agent asks its session to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    Place(Place),
    Cancel {
        order: u64,
    },
    /// A new price for a resting order (it loses its time priority).
    Move {
        order: u64,
        px: i64,
    },
}

/// A trading strategy: observations in, intents out.
pub trait Strategy: Send + Sync {
    fn kind(&self) -> AgentKind;

    /// Decides what to do now. Pushes intents (in the order they must be sent) and
    /// returns how many nanoseconds to wait before the next wake-up (at least 1 ms).
    fn wake(&mut self, observation: &Observation<'_>, intents: &mut Vec<Intent>) -> u64;
}

/// What an agent may still commit during one wake-up: its available cash and shares
/// less what the intents already returned would hold.
#[derive(Clone, Debug)]
pub struct Budget<'a> {
    rules: &'a [SymbolRules],
    cash: i64,
    shares: Vec<i64>,
}

impl<'a> Budget<'a> {
    pub fn new(observation: &Observation<'a>) -> Self {
        Budget {
            rules: observation.rules,
            cash: observation.portfolio.cash_available,
            shares: observation.portfolio.shares_available.clone(),
        }
    }

    /// Shares of `symbol` still free to sell.
    pub fn shares(&self, symbol: usize) -> i64 {
        self.shares.get(symbol).copied().unwrap_or(0)
    }

    /// Cash still free to spend.
    pub fn cash(&self) -> i64 {
        self.cash
    }

    /// `place` made valid: price on a tick within bounds, quantity a multiple of the lot
    /// and at most `qty` cut to what the budget allows; None when not even one lot fits.
    /// The budget is charged for what is returned.
    pub fn fit(&mut self, place: Place) -> Option<Place> {
        let rules = *self.rules.get(place.symbol)?;
        let px = rules.clamp_px(place.px as f64);
        let mut qty = rules.floor_qty(place.qty);
        match place.side {
            Side::Buy => {
                qty = qty.min(rules.floor_qty(self.cash / px.max(1)));
            }
            Side::Sell => {
                qty = qty.min(rules.floor_qty(self.shares(place.symbol)));
            }
        }
        if qty <= 0 {
            return None;
        }
        match place.side {
            Side::Buy => self.cash -= px * qty,
            Side::Sell => self.shares[place.symbol] -= qty,
        }
        Some(Place { px, qty, ..place })
    }

    /// Pushes `place` onto `intents` when it fits; says whether it did.
    pub fn push(&mut self, intents: &mut Vec<Intent>, place: Place) -> bool {
        match self.fit(place) {
            Some(fitted) => {
                intents.push(Intent::Place(fitted));
                true
            }
            None => false,
        }
    }

    /// Takes `amount` of cash (a buy order moved to a higher price holds more).
    pub fn charge_cash(&mut self, amount: i64) {
        self.cash -= amount.max(0);
    }

    /// Frees what cancelling `order` releases (for a strategy that cancels and then
    /// places again in the same wake-up).
    pub fn release(&mut self, order: &OpenOrder) {
        match order.side {
            Side::Buy => self.cash += order.px * order.qty_open,
            Side::Sell => {
                if let Some(shares) = self.shares.get_mut(order.symbol) {
                    *shares += order.qty_open;
                }
            }
        }
    }
}

/// A draw from the exponential distribution with mean `mean_ns` (Poisson arrivals, as
/// ABIDES draws its agents' wake-up gaps), at least 1 ms.
pub fn exponential_ns(rng: &mut impl rand::Rng, mean_ns: u64) -> u64 {
    let u: f64 = rng.gen();
    let gap = -(1.0 - u).ln() * mean_ns as f64;
    (gap as u64).max(1_000_000)
}

/// A draw from the standard normal distribution (Box–Muller).
pub fn standard_normal(rng: &mut impl rand::Rng) -> f64 {
    let u1: f64 = 1.0 - rng.gen::<f64>();
    let u2: f64 = rng.gen();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// `mean_ns` with ±`jitter` (a share, 0 to 1) drawn uniformly, at least 1 ms: a regular
/// wake-up that does not fall in lockstep with other agents'.
pub fn jittered_ns(rng: &mut impl rand::Rng, mean_ns: u64, jitter: f64) -> u64 {
    let factor = 1.0 + jitter * (2.0 * rng.gen::<f64>() - 1.0);
    ((mean_ns as f64 * factor) as u64).max(1_000_000)
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// Ten symbols around $100.00 (cents), tick 1, lot 1.
    pub fn rules(symbols: usize) -> Vec<SymbolRules> {
        vec![SymbolRules { tick: 1, lot: 1, px_min: 1, px_max: 1_000_000 }; symbols]
    }

    pub fn quote(bid: i64, ask: i64) -> Quote {
        Quote { bid: Some(Level { px: bid, qty: 100 }), ask: Some(Level { px: ask, qty: 100 }), last: None }
    }

    /// An observation over owned parts.
    pub struct Owned {
        pub now_ns: u64,
        pub rules: Vec<SymbolRules>,
        pub quotes: Vec<Quote>,
        pub fundamentals: Vec<i64>,
        pub portfolio: Portfolio,
        pub open_orders: Vec<OpenOrder>,
    }

    impl Owned {
        pub fn new(symbols: usize, bid: i64, ask: i64) -> Self {
            Owned {
                now_ns: 0,
                rules: rules(symbols),
                quotes: vec![quote(bid, ask); symbols],
                fundamentals: vec![(bid + ask) / 2; symbols],
                portfolio: Portfolio::uniform(500_000_000, 10_000, symbols),
                open_orders: Vec::new(),
            }
        }

        pub fn view(&self) -> Observation<'_> {
            Observation {
                now_ns: self.now_ns,
                rules: &self.rules,
                quotes: &self.quotes,
                fundamentals: &self.fundamentals,
                portfolio: &self.portfolio,
                open_orders: &self.open_orders,
            }
        }
    }

    pub fn places(intents: &[Intent]) -> Vec<Place> {
        intents
            .iter()
            .filter_map(|i| match i {
                Intent::Place(p) => Some(*p),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;

    #[test]
    fn budget_fits_orders_to_ticks_bounds_lots_and_balances() {
        let rules = vec![SymbolRules { tick: 5, lot: 10, px_min: 100, px_max: 1_000 }];
        let portfolio = Portfolio::uniform(10_000, 25, 1);
        let quotes = vec![Quote::default()];
        let observation = Observation {
            now_ns: 0,
            rules: &rules,
            quotes: &quotes,
            fundamentals: &[500],
            portfolio: &portfolio,
            open_orders: &[],
        };
        let mut budget = Budget::new(&observation);
        let buy = |px, qty| Place { symbol: 0, side: Side::Buy, px, qty, ioc: false };
        // 2 ticks above the bound comes down to 1,000; 10,000 cash buys 10 at 1,000.
        assert_eq!(budget.fit(buy(1_012, 37)), Some(buy(1_000, 10)));
        assert_eq!(budget.cash(), 0);
        assert_eq!(budget.fit(buy(500, 10)), None, "no cash left");
        let sell = |px, qty| Place { symbol: 0, side: Side::Sell, px, qty, ioc: true };
        assert_eq!(budget.fit(sell(3, 100)), Some(sell(100, 20)), "25 shares sell 2 lots, at the lowest price");
        assert_eq!(budget.fit(sell(500, 10)), None, "5 shares left: less than a lot");
        assert_eq!(budget.fit(Place { symbol: 1, ..sell(500, 10) }), None, "an unknown symbol");
    }

    #[test]
    fn quote_reference_falls_back_from_mid_to_last_to_one_side() {
        let mut quote = quote(99, 101);
        assert_eq!(quote.reference(), Some(100.0));
        quote.last = Some(97);
        assert_eq!(quote.reference(), Some(100.0));
        quote.ask = None;
        assert_eq!(quote.reference(), Some(97.0));
        quote.last = None;
        assert_eq!(quote.reference(), Some(99.0));
        assert_eq!(Quote::default().reference(), None);
    }

    #[test]
    fn portfolio_value_marks_shares_to_market() {
        let portfolio = Portfolio::uniform(1_000, 10, 2);
        assert_eq!(portfolio.value(&[Some(50), Some(7)]), 1_000 + 500 + 70);
        assert_eq!(portfolio.value(&[None, Some(7)]), 1_000 + 70);
    }
}

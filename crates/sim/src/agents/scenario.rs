//! Populations of agents over a set of symbols.
//!
//! - [`Scenario::cloudex`] (the default): CloudEx's experimental population — one market
//!   maker, 43 random (noise) traders and 4 mean-reversion traders over 10 symbols, every
//!   trader starting with 5,000,000 dollars (500,000,000 cents) and 10,000 shares of
//!   every symbol.
//! - [`Scenario::mixed`]: the same, plus the ABIDES agents that need a fundamental: one
//!   value trader per symbol, two momentum traders and a pairs trader.
//! - [`Scenario::identical`]: CloudEx's population plus four identical traders: the same
//!   strategy with the same parameters and the same seed, so they decide alike on the
//!   same market data; placed one per gateway (with four gateways), they show side by
//!   side whether where a trader connects decides what it earns (issue 31).
//!
//! Symbols are stocks quoted in USD cents (tick 1 cent, lot 1 share, no fees), with
//! opening prices from $9.50 to $310.00 so the dashboard shows different scales. Every
//! agent has its own seed derived from the scenario's, so a population reproduces.

use super::fundamental::{Fundamental, FundamentalParams};
use super::market_maker::{MarketMaker, MarketMakerParams};
use super::mean_reversion::{MeanReversion, MeanReversionParams};
use super::momentum::{Momentum, MomentumParams};
use super::noise::{NoiseParams, NoiseTrader};
use super::pairs::{PairsParams, PairsTrader};
use super::value::{ValueParams, ValueTrader};
use super::{AgentKind, Strategy, SymbolRules};

/// One stock of a scenario.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymbolDef {
    /// The base asset's name; the symbol is `NAME/USD`.
    pub name: String,
    /// Opening reference price, in cents.
    pub px_open: i64,
    pub rules: SymbolRules,
}

impl SymbolDef {
    /// The symbol's name on the exchange.
    pub fn symbol_name(&self, quote: &str) -> String {
        format!("{}/{}", self.name, quote)
    }
}

/// The settings of one agent.
#[derive(Clone, Debug)]
pub enum AgentConfig {
    MarketMaker(MarketMakerParams),
    Noise(NoiseParams),
    MeanReversion(MeanReversionParams),
    Momentum(MomentumParams),
    Pairs(PairsParams),
    Value(ValueParams),
}

/// One agent of a population.
#[derive(Clone, Debug)]
pub struct AgentSpec {
    /// A name unique in the scenario (`noise-07`).
    pub name: String,
    pub config: AgentConfig,
    pub seed: u64,
}

impl AgentSpec {
    pub fn kind(&self) -> AgentKind {
        match self.config {
            AgentConfig::MarketMaker(_) => AgentKind::MarketMaker,
            AgentConfig::Noise(_) => AgentKind::Noise,
            AgentConfig::MeanReversion(_) => AgentKind::MeanReversion,
            AgentConfig::Momentum(_) => AgentKind::Momentum,
            AgentConfig::Pairs(_) => AgentKind::Pairs,
            AgentConfig::Value(_) => AgentKind::Value,
        }
    }

    /// A fresh strategy object for this agent.
    pub fn build(&self) -> Box<dyn Strategy> {
        match &self.config {
            AgentConfig::MarketMaker(p) => Box::new(MarketMaker::new(p.clone(), self.seed)),
            AgentConfig::Noise(p) => Box::new(NoiseTrader::new(p.clone(), self.seed)),
            AgentConfig::MeanReversion(p) => Box::new(MeanReversion::new(p.clone(), self.seed)),
            AgentConfig::Momentum(p) => Box::new(Momentum::new(p.clone(), self.seed)),
            AgentConfig::Pairs(p) => Box::new(PairsTrader::new(p.clone(), self.seed)),
            AgentConfig::Value(p) => Box::new(ValueTrader::new(p.clone(), self.seed)),
        }
    }
}

/// A population of agents over a set of symbols, with their starting holdings.
#[derive(Clone, Debug)]
pub struct Scenario {
    pub name: String,
    /// The cash asset (cents: 2 decimals).
    pub quote: String,
    pub symbols: Vec<SymbolDef>,
    /// Each agent's starting cash, in cents, and shares of every symbol.
    pub cash: i64,
    pub shares: i64,
    pub agents: Vec<AgentSpec>,
    /// The fundamental process of each symbol.
    pub fundamentals: Vec<FundamentalParams>,
    pub seed: u64,
}

/// The ten stocks: name and opening price in cents.
const STOCKS: [(&str, i64); 10] = [
    ("ACME", 10_000),
    ("BOLT", 9_800),
    ("CRUX", 25_000),
    ("DYNA", 7_500),
    ("ECHO", 1_820),
    ("FLUX", 13_000),
    ("GRID", 6_100),
    ("HALO", 31_000),
    ("IONX", 950),
    ("JADE", 5_500),
];

/// Names of the scenarios [`Scenario::by_name`] knows.
pub const SCENARIOS: [&str; 3] = ["cloudex", "mixed", "identical"];

/// How many identical traders [`Scenario::identical`] adds.
pub const IDENTICAL_TRADERS: usize = 4;

/// A well-mixed 64-bit value of `seed` and `index` (SplitMix64's finalizer).
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed.wrapping_add(index.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Scenario {
    /// The scenario called `name` (see [`SCENARIOS`]).
    pub fn by_name(name: &str, seed: u64) -> Option<Scenario> {
        match name {
            "cloudex" => Some(Scenario::cloudex(seed)),
            "mixed" => Some(Scenario::mixed(seed)),
            "identical" => Some(Scenario::identical(seed)),
            _ => None,
        }
    }

    /// CloudEx's population: 1 market maker, 43 noise and 4 mean-reversion traders.
    pub fn cloudex(seed: u64) -> Scenario {
        let symbols: Vec<SymbolDef> = STOCKS
            .iter()
            .map(|&(name, px_open)| SymbolDef {
                name: name.to_owned(),
                px_open,
                rules: SymbolRules { tick: 1, lot: 1, px_min: 1, px_max: 10_000_000 },
            })
            .collect();
        let all: Vec<usize> = (0..symbols.len()).collect();
        let px_open: Vec<i64> = symbols.iter().map(|s| s.px_open).collect();
        let shares = 10_000;
        let mut scenario = Scenario {
            name: "cloudex".into(),
            quote: "USD".into(),
            fundamentals: px_open.iter().map(|&px| FundamentalParams::demo(px)).collect(),
            symbols,
            cash: 500_000_000,
            shares,
            agents: Vec::new(),
            seed,
        };
        scenario.add(
            "market-maker".into(),
            AgentConfig::MarketMaker(MarketMakerParams {
                symbols: all.clone(),
                shares_initial: shares,
                px_open: px_open.clone(),
                ..MarketMakerParams::default()
            }),
        );
        for k in 1..=43 {
            let params = NoiseParams { symbols: all.clone(), px_open: px_open.clone(), ..NoiseParams::default() };
            scenario.add(format!("random-{k:02}"), AgentConfig::Noise(params));
        }
        for k in 1..=4 {
            let params =
                MeanReversionParams { symbols: all.clone(), shares_initial: shares, ..MeanReversionParams::default() };
            scenario.add(format!("mean-reversion-{k}"), AgentConfig::MeanReversion(params));
        }
        scenario
    }

    /// CloudEx's population plus value traders (one per symbol), two momentum traders
    /// and a pairs trader (ACME against BOLT).
    pub fn mixed(seed: u64) -> Scenario {
        let mut scenario = Scenario::cloudex(seed);
        scenario.name = "mixed".into();
        for symbol in 0..scenario.symbols.len() {
            let params = ValueParams::abides(symbol, &scenario.fundamentals[symbol]);
            scenario.add(format!("value-{}", scenario.symbols[symbol].name.to_lowercase()), AgentConfig::Value(params));
        }
        for (k, symbol) in [0usize, 2].into_iter().enumerate() {
            let params = MomentumParams { symbol, shares_initial: scenario.shares, ..MomentumParams::default() };
            scenario.add(format!("momentum-{}", k + 1), AgentConfig::Momentum(params));
        }
        let params = PairsParams { a: 0, b: 1, shares_initial: scenario.shares, ..PairsParams::default() };
        scenario.add("pairs-acme-bolt".into(), AgentConfig::Pairs(params));
        scenario
    }

    /// CloudEx's population plus [`IDENTICAL_TRADERS`] mean-reversion traders that are
    /// one trader four times over: one set of parameters and one seed. They come last,
    /// one after another, so the demo (agent i trades through gateway 1 + i mod G) puts
    /// them on four different gateways when it runs four.
    pub fn identical(seed: u64) -> Scenario {
        let mut scenario = Scenario::cloudex(seed);
        scenario.name = "identical".into();
        let all: Vec<usize> = (0..scenario.symbols.len()).collect();
        let params =
            MeanReversionParams { symbols: all, shares_initial: scenario.shares, ..MeanReversionParams::default() };
        let shared_seed = mix(seed, u64::MAX);
        for k in 1..=IDENTICAL_TRADERS {
            scenario.agents.push(AgentSpec {
                name: format!("identical-{k}"),
                config: AgentConfig::MeanReversion(params.clone()),
                seed: shared_seed,
            });
        }
        scenario
    }

    fn add(&mut self, name: String, config: AgentConfig) {
        let seed = mix(self.seed, self.agents.len() as u64);
        self.agents.push(AgentSpec { name, config, seed });
    }

    /// Every symbol's rules, in scenario order.
    pub fn rules(&self) -> Vec<SymbolRules> {
        self.symbols.iter().map(|s| s.rules).collect()
    }

    /// The fundamental processes, each with its own seed.
    pub fn fundamental_processes(&self) -> Vec<Fundamental> {
        self.fundamentals.iter().enumerate().map(|(k, p)| Fundamental::new(*p, mix(!self.seed, k as u64))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cloudex_has_its_population() {
        let scenario = Scenario::cloudex(1);
        let count = |kind| scenario.agents.iter().filter(|a| a.kind() == kind).count();
        assert_eq!(scenario.symbols.len(), 10);
        assert_eq!(count(AgentKind::MarketMaker), 1);
        assert_eq!(count(AgentKind::Noise), 43);
        assert_eq!(count(AgentKind::MeanReversion), 4);
        assert_eq!(scenario.agents.len(), 48);
        assert_eq!((scenario.cash, scenario.shares), (500_000_000, 10_000));
        let mut names: Vec<&str> = scenario.agents.iter().map(|a| a.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 48, "names are unique");
        let mut seeds: Vec<u64> = scenario.agents.iter().map(|a| a.seed).collect();
        seeds.dedup();
        assert_eq!(seeds.len(), 48);
    }

    #[test]
    fn identical_traders_are_one_trader_on_four_gateways() {
        let scenario = Scenario::identical(7);
        let twins: Vec<(usize, &AgentSpec)> =
            scenario.agents.iter().enumerate().filter(|(_, a)| a.name.starts_with("identical-")).collect();
        assert_eq!(twins.len(), IDENTICAL_TRADERS);
        assert!(twins.iter().all(|(_, a)| a.seed == twins[0].1.seed), "one seed");
        assert!(twins.iter().all(|(_, a)| format!("{:?}", a.config) == format!("{:?}", twins[0].1.config)));
        let gateways: std::collections::BTreeSet<usize> = twins.iter().map(|(i, _)| i % 4).collect();
        assert_eq!(gateways.len(), 4, "one per gateway of four");
        assert_eq!(scenario.agents.len(), Scenario::cloudex(7).agents.len() + IDENTICAL_TRADERS);
    }

    #[test]
    fn mixed_adds_the_abides_agents() {
        let scenario = Scenario::mixed(1);
        let count = |kind| scenario.agents.iter().filter(|a| a.kind() == kind).count();
        assert_eq!(count(AgentKind::Value), 10);
        assert_eq!(count(AgentKind::Momentum), 2);
        assert_eq!(count(AgentKind::Pairs), 1);
        assert!(Scenario::by_name("nope", 1).is_none());
    }
}

//! The demo's margin contract: FUT/USD, a future settled in the traders' USD.
//!
//! It comes after the scenario's stocks (symbol `stocks`, asset `1 + stocks`) with an
//! insurance account of its own (the account after the guest's, funded by the demo).
//! A contract is worth `MULTIPLIER` times its price: with a 10 % initial margin, one
//! contract needs exactly what one share at the same price costs, so the agents'
//! budgets ([`bourse_sim::agents::Budget`]) fit margin buys as they fit stock buys (a
//! margin sell holds that cash too, which a budget does not count: with $5,000,000 a
//! trader, the exchange's check, the authority, refuses none). The mark is the last
//! trade.
//!
//! The agents trade it as one more symbol of their lists (the market maker quotes it
//! around a fundamental of its own, every random trader may pick it); no agent knows it
//! is a future. What they see as shares of it ([`holding`]) is what the position limit
//! lets them sell: the limit plus the position less their open sells, so a short
//! position is as bounded as a stock holding, and the market maker's inventory (held
//! above its starting holding) is its position.

use bourse_engine::command::{CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, SymbolSpec};
use bourse_engine::{AccountId, Amount, AssetId, Px, Qty, SymbolId};
use bourse_sim::agents::fundamental::{Fundamental, FundamentalParams};
use bourse_sim::agents::scenario::{AgentConfig, Scenario};
use bourse_sim::agents::SymbolRules;

/// The contract's base asset; the symbol is `FUT/<quote>`.
pub const NAME: &str = "FUT";
/// The opening reference price, in cents ($200.00).
pub const PX_OPEN: i64 = 20_000;
/// Cents per (price cent × contract): a contract at $200.00 is worth $2,000.
pub const MULTIPLIER: i64 = 10;
pub const INITIAL_BP: u32 = 1_000;
pub const MAINTENANCE_BP: u32 = 500;
/// What the demo deposits into the insurance account, in cents ($1,000,000).
pub const INSURANCE_CASH: i64 = 100_000_000;
/// The same rules as the stocks': tick 1 cent, lot 1 contract.
pub const RULES: SymbolRules = SymbolRules { tick: 1, lot: 1, px_min: 1, px_max: 10_000_000 };

/// Where the contract is once set up.
#[derive(Clone, Copy, Debug)]
pub struct Future {
    /// Its index among the agents' symbols (after the stocks).
    pub index: usize,
    pub symbol: SymbolId,
    /// The largest position either way (the scenario's share holding).
    pub position_limit: i64,
    pub insurance: AccountId,
}

/// The contract, when the scenario's stocks and accounts (the guest's last) exist.
pub fn future(scenario: &Scenario, guest: AccountId) -> Future {
    Future {
        index: scenario.symbols.len(),
        symbol: SymbolId(scenario.symbols.len() as u32),
        position_limit: scenario.shares,
        insurance: AccountId(guest.0 + 1),
    }
}

/// Lets the market maker quote the contract and every random trader pick it.
pub fn add_to_agents(scenario: &mut Scenario) {
    for agent in &mut scenario.agents {
        match &mut agent.config {
            AgentConfig::MarketMaker(params) => {
                params.symbols.push(scenario.symbols.len());
                params.px_open.push(PX_OPEN);
            }
            AgentConfig::Noise(params) => {
                params.symbols.push(scenario.symbols.len());
                params.px_open.push(PX_OPEN);
            }
            _ => {}
        }
    }
}

/// Who trades it, for the printout.
pub fn traders(scenario: &Scenario) -> (usize, usize) {
    let count = |wanted: fn(&AgentConfig) -> bool| scenario.agents.iter().filter(|a| wanted(&a.config)).count();
    (count(|c| matches!(c, AgentConfig::MarketMaker(_))), count(|c| matches!(c, AgentConfig::Noise(_))))
}

/// The contract's fundamental value, seeded apart from the stocks'.
pub fn fundamental(seed: u64) -> Fundamental {
    Fundamental::new(FundamentalParams::demo(PX_OPEN), seed ^ 0x5EED_F00D)
}

/// The commands that make it: the insurance account and its cash, the contract's asset,
/// the margin symbol (the cash is asset 0, as the scenario's setup makes it).
pub fn setup_commands(scenario: &Scenario, future: &Future) -> Vec<CommandBody> {
    let spec = SymbolSpec {
        name: format!("{NAME}/{}", scenario.quote),
        base: AssetId(1 + future.index as u32),
        quote: AssetId(0),
        tick: Px(RULES.tick),
        lot: Qty(RULES.lot),
        px_min: Px(RULES.px_min),
        px_max: Px(RULES.px_max),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    };
    let margin = MarginSpec {
        initial_bp: INITIAL_BP,
        maintenance_bp: MAINTENANCE_BP,
        multiplier: MULTIPLIER,
        position_limit: Qty(future.position_limit),
        mark: MarkSource::LastTrade,
        insurance: future.insurance,
    };
    vec![
        CommandBody::CreateAccount,
        CommandBody::Deposit { account: future.insurance, asset: AssetId(0), amount: Amount(INSURANCE_CASH) },
        CommandBody::CreateAsset { name: NAME.to_owned(), decimals: 0 },
        CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin })),
    ]
}

/// The ids the commands of [`setup_commands`] must have made, in their order (0 for
/// the deposit, which makes nothing).
pub fn expected_ids(future: &Future) -> [u64; 4] {
    [u64::from(future.insurance.0), 0, 1 + future.index as u64, u64::from(future.symbol.0)]
}

/// What an agent sees as its holding of the contract, (free to sell, total), from its
/// position and its open sells: see the module documentation.
pub fn holding(future: &Future, size: i64, selling: i64) -> (i64, i64) {
    (future.position_limit + size - selling, future.position_limit + size)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_contract_needs_what_one_share_at_its_price_costs() {
        // The initial margin of one contract at px is px × MULTIPLIER × INITIAL_BP / 10,000.
        let px = 12_345;
        assert_eq!(px * MULTIPLIER * i64::from(INITIAL_BP) / 10_000, px);
        let largest = RULES.px_max * Scenario::cloudex(1).shares * MULTIPLIER;
        assert!(largest <= bourse_engine::command::MARGIN_NOTIONAL_MAX, "the position limit fits the engine's bound");
    }

    #[test]
    fn the_market_maker_and_the_random_traders_trade_it() {
        let mut scenario = Scenario::cloudex(1);
        add_to_agents(&mut scenario);
        assert_eq!(traders(&scenario), (1, 43));
        for agent in &scenario.agents {
            if let AgentConfig::Noise(params) = &agent.config {
                assert_eq!((params.symbols.last(), params.px_open.get(10)), (Some(&10), Some(&PX_OPEN)));
            }
        }
        let future = future(&scenario, AccountId(48));
        assert_eq!((future.symbol, future.insurance), (SymbolId(10), AccountId(49)));
        assert_eq!(holding(&future, -300, 50), (10_000 - 350, 9_700));
    }
}

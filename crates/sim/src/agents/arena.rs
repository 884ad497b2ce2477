//! A whole population on an in-process engine with a simulated clock: no network, no
//! threads, deterministic given the scenario's seed.
//!
//! The arena creates the scenario's assets, symbols and funded accounts, then runs the
//! agents' wake-ups in time order (ties by agent index): each agent observes the engine's
//! state at its wake-up instant (best bid and offer, last trade, its balances and open
//! orders, the fundamentals) and its intents are applied at once, in order, as commands
//! of its own client session. It is how the agents are tested together (prices move,
//! trades happen, no agent is refused for its balance, the engine's invariants hold)
//! and a quick way to tune a population's parameters before running it live.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, AssetId, ClientId, Engine, EngineConfig, Event, OrderId, Outcome, Px, Qty, Reject, SymbolId,
};

use super::fundamental::Fundamental;
use super::scenario::Scenario;
use super::{Intent, Level, Observation, OpenOrder, Portfolio, Quote, Strategy, SymbolRules};

/// The commands that set a scenario up on an empty exchange, in order: the cash asset,
/// each stock's asset and symbol, then per agent an account, its cash and its shares.
/// Ids on an empty exchange are predictable: asset 0 is the cash, asset `1 + k` and
/// symbol `k` the k-th stock, account `a` the a-th agent.
pub fn setup_commands(scenario: &Scenario) -> Vec<CommandBody> {
    let mut commands = vec![CommandBody::CreateAsset { name: scenario.quote.clone(), decimals: 2 }];
    for (k, stock) in scenario.symbols.iter().enumerate() {
        commands.push(CommandBody::CreateAsset { name: stock.name.clone(), decimals: 0 });
        commands.push(CommandBody::CreateSymbol(Box::new(symbol_spec(scenario, k))));
    }
    for account in 0..scenario.agents.len() as u32 {
        commands.extend(account_commands(scenario, AccountId(account)));
    }
    commands
}

/// The spec of stock `k` when the cash is asset 0 and the stock asset `1 + k`.
pub fn symbol_spec(scenario: &Scenario, k: usize) -> SymbolSpec {
    let stock = &scenario.symbols[k];
    SymbolSpec {
        name: stock.symbol_name(&scenario.quote),
        base: AssetId(1 + k as u32),
        quote: AssetId(0),
        tick: Px(stock.rules.tick),
        lot: Qty(stock.rules.lot),
        px_min: Px(stock.rules.px_min),
        px_max: Px(stock.rules.px_max),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    }
}

/// Creating account `account` (the next one) and funding it as the scenario says.
pub fn account_commands(scenario: &Scenario, account: AccountId) -> Vec<CommandBody> {
    let mut commands = vec![
        CommandBody::CreateAccount,
        CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(scenario.cash) },
    ];
    for k in 0..scenario.symbols.len() {
        commands.push(CommandBody::Credit { account, asset: AssetId(1 + k as u32), amount: Amount(scenario.shares) });
    }
    commands
}

/// The engine command for one intent of the agent trading for `account`. Symbols are
/// scenario indexes; the engine's symbol ids are in `symbols`.
pub fn command_body(
    intent: &Intent,
    account: AccountId,
    symbols: &[SymbolId],
    open: &[OpenOrder],
) -> Option<CommandBody> {
    Some(match *intent {
        Intent::Place(place) => {
            let tif = if place.ioc { Tif::Ioc } else { Tif::Gtc };
            let side = place.side;
            let symbol = *symbols.get(place.symbol)?;
            CommandBody::Place(OrderRequest::limit(account, symbol, side, Px(place.px), Qty(place.qty), tif))
        }
        Intent::Cancel { order } => {
            let symbol = *symbols.get(open.iter().find(|o| o.id == order)?.symbol)?;
            CommandBody::Cancel { account, symbol, order: OrderId(order) }
        }
        Intent::Move { order, px } => {
            let symbol = *symbols.get(open.iter().find(|o| o.id == order)?.symbol)?;
            CommandBody::Move { account, symbol, order: OrderId(order), px: Px(px) }
        }
    })
}

/// What happened in an arena run.
#[derive(Clone, Debug, Default)]
pub struct ArenaStats {
    pub commands: u64,
    /// Commands sent by each agent.
    pub commands_by_agent: Vec<u64>,
    /// Trades per symbol (scenario order).
    pub trades: Vec<u64>,
    /// Rejections by reason (a stale cancel or move of an order that just traded is
    /// expected; a balance rejection is not).
    pub rejected: Vec<(Reject, u64)>,
}

impl ArenaStats {
    fn reject(&mut self, reject: Reject) {
        match self.rejected.iter_mut().find(|(r, _)| *r == reject) {
            Some((_, count)) => *count += 1,
            None => self.rejected.push((reject, 1)),
        }
    }
}

/// See the module documentation.
pub struct Arena {
    engine: Engine,
    scenario: Scenario,
    strategies: Vec<Box<dyn Strategy>>,
    fundamentals: Vec<Fundamental>,
    symbols: Vec<SymbolId>,
    rules: Vec<SymbolRules>,
    seqs: Vec<u64>,
    queue: BinaryHeap<Reverse<(u64, usize)>>,
    now_ns: u64,
    stats: ArenaStats,
    events: Vec<Event>,
}

/// The engine's clock at simulation time 0 (any fixed instant will do).
const TS_START: u64 = 1_700_000_000_000_000_000;

impl Arena {
    /// The scenario set up on a new engine, every agent due to wake at time 0.
    pub fn new(scenario: &Scenario) -> Arena {
        let mut arena = Arena {
            engine: Engine::new(EngineConfig::default()),
            strategies: scenario.agents.iter().map(|a| a.build()).collect(),
            fundamentals: scenario.fundamental_processes(),
            symbols: (0..scenario.symbols.len() as u32).map(SymbolId).collect(),
            rules: scenario.rules(),
            seqs: vec![0; scenario.agents.len() + 1],
            queue: (0..scenario.agents.len()).map(|a| Reverse((0, a))).collect(),
            now_ns: 0,
            stats: ArenaStats { trades: vec![0; scenario.symbols.len()], ..ArenaStats::default() },
            events: Vec::new(),
            scenario: scenario.clone(),
        };
        let admin = scenario.agents.len();
        for body in setup_commands(scenario) {
            let outcome = arena.apply(admin, body);
            assert!(matches!(outcome, Outcome::Ok { .. }), "setup refused: {outcome:?}");
        }
        arena.stats = ArenaStats {
            trades: vec![0; scenario.symbols.len()],
            commands_by_agent: vec![0; scenario.agents.len()],
            ..ArenaStats::default()
        };
        arena
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    pub fn stats(&self) -> &ArenaStats {
        &self.stats
    }

    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// Applies one command of `client` (agent index; the last index is the set-up).
    fn apply(&mut self, client: usize, body: CommandBody) -> Outcome {
        self.seqs[client] += 1;
        let command =
            Command { client: ClientId(client as u64 + 1), seq: self.seqs[client], ts: TS_START + self.now_ns, body };
        self.events.clear();
        let applied = self.engine.apply(&command, &mut self.events);
        self.stats.commands += 1;
        if let Some(count) = self.stats.commands_by_agent.get_mut(client) {
            *count += 1;
        }
        for event in &self.events {
            if let Event::Trade { symbol, .. } = event {
                self.stats.trades[symbol.0 as usize] += 1;
            }
        }
        if let Outcome::Rejected(reject) = applied.outcome {
            self.stats.reject(reject);
        }
        applied.outcome
    }

    /// Best bid and offer and last trade of every symbol.
    pub fn quotes(&self) -> Vec<Quote> {
        self.symbols
            .iter()
            .map(|&symbol| {
                let depth = self.engine.depth(symbol, 1);
                let level = |levels: Option<&Vec<(Px, Qty)>>| {
                    levels.and_then(|l| l.first()).map(|&(px, qty)| Level { px: px.0, qty: qty.0 })
                };
                Quote {
                    bid: level(depth.as_ref().map(|d| &d.bids)),
                    ask: level(depth.as_ref().map(|d| &d.asks)),
                    last: self.engine.last_px(symbol).map(|px| px.0),
                }
            })
            .collect()
    }

    /// The holdings of agent `agent`.
    pub fn portfolio(&self, agent: usize) -> Portfolio {
        let account = AccountId(agent as u32);
        let balance = |asset: u32| self.engine.balance(account, AssetId(asset)).unwrap_or_default();
        let cash = balance(0);
        let stocks: Vec<_> = (0..self.symbols.len() as u32).map(|k| balance(1 + k)).collect();
        Portfolio {
            cash_available: cash.available.0,
            cash_total: cash.available.0 + cash.reserved.0,
            shares_available: stocks.iter().map(|b| b.available.0).collect(),
            shares_total: stocks.iter().map(|b| b.available.0 + b.reserved.0).collect(),
        }
    }

    fn open_orders(&self, agent: usize) -> Vec<OpenOrder> {
        let mut open: Vec<OpenOrder> = self
            .engine
            .open_orders(AccountId(agent as u32))
            .into_iter()
            .filter_map(|view| {
                Some(OpenOrder {
                    id: view.record.id.0,
                    symbol: view.record.symbol.0 as usize,
                    side: view.record.side,
                    px: view.px_resting?.0,
                    qty_open: view.qty_open.0,
                })
            })
            .collect();
        open.sort_by_key(|o| o.id);
        open
    }

    /// Runs every wake-up due before `until_ns`.
    pub fn run_until(&mut self, until_ns: u64) {
        let mut intents = Vec::new();
        while let Some(&Reverse((at, agent))) = self.queue.peek() {
            if at >= until_ns {
                break;
            }
            self.queue.pop();
            self.now_ns = at;
            let fundamentals: Vec<i64> = self.fundamentals.iter_mut().map(|f| f.advance_to(at)).collect();
            let quotes = self.quotes();
            let portfolio = self.portfolio(agent);
            let open = self.open_orders(agent);
            let observation = Observation {
                now_ns: at,
                rules: &self.rules,
                quotes: &quotes,
                fundamentals: &fundamentals,
                portfolio: &portfolio,
                open_orders: &open,
            };
            intents.clear();
            let wait = self.strategies[agent].wake(&observation, &mut intents);
            for intent in &intents {
                if let Some(body) = command_body(intent, AccountId(agent as u32), &self.symbols, &open) {
                    self.apply(agent, body);
                }
            }
            self.queue.push(Reverse((at + wait.max(1), agent)));
        }
        self.now_ns = until_ns;
    }

    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::NS_PER_SEC;

    #[test]
    fn the_cloudex_population_trades_every_symbol_within_its_budget() {
        let scenario = Scenario::cloudex(3);
        let mut arena = Arena::new(&scenario);
        let opens: Vec<i64> = scenario.symbols.iter().map(|s| s.px_open).collect();
        let mut moved = vec![false; opens.len()];
        for second in 1..=120 {
            arena.run_until(second * NS_PER_SEC);
            for (k, quote) in arena.quotes().iter().enumerate() {
                moved[k] |= quote.last.is_some_and(|px| px != opens[k]);
            }
        }
        arena.engine().check_invariants();
        let stats = arena.stats();
        assert!(stats.trades.iter().all(|&t| t > 20), "trades per symbol: {:?}", stats.trades);
        assert!(moved.iter().all(|&m| m), "every price moved");
        for (reject, count) in &stats.rejected {
            assert!(
                !matches!(reject, Reject::BalanceInsufficient),
                "{count} orders refused for their balance: {:?}",
                stats.rejected
            );
        }
        for (k, quote) in arena.quotes().iter().enumerate() {
            let last = quote.last.unwrap() as f64;
            let open = opens[k] as f64;
            assert!((last / open - 1.0).abs() < 0.2, "{}: {last} from {open}", scenario.symbols[k].name);
        }
        // Nothing created or destroyed: cash and shares sum to what was handed out.
        let agents = scenario.agents.len();
        let total_cash: i64 = (0..agents).map(|a| arena.portfolio(a).cash_total).sum();
        assert_eq!(total_cash, scenario.cash * agents as i64);
        for k in 0..scenario.symbols.len() {
            let total: i64 = (0..agents).map(|a| arena.portfolio(a).shares_total[k]).sum();
            assert_eq!(total, scenario.shares * agents as i64);
        }
    }

    #[test]
    fn the_mixed_population_runs_every_kind_of_agent() {
        let scenario = Scenario::mixed(5);
        let mut arena = Arena::new(&scenario);
        arena.run_until(180 * NS_PER_SEC);
        arena.engine().check_invariants();
        assert!(arena.stats().trades.iter().all(|&t| t > 10), "{:?}", arena.stats().trades);
        for (agent, &count) in scenario.agents.iter().zip(&arena.stats().commands_by_agent) {
            assert!(count > 0, "{} sent nothing in 180 s", agent.name);
        }
    }

    #[test]
    fn same_seed_same_market() {
        let run = |seed| {
            let mut arena = Arena::new(&Scenario::cloudex(seed));
            arena.run_until(20 * NS_PER_SEC);
            (arena.engine().state_hash(), arena.stats().commands)
        };
        assert_eq!(run(9), run(9));
        assert_ne!(run(9).0, run(10).0);
    }
}

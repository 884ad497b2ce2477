//! A market laid out for a benchmark, and its pre-filled books, as engine commands.
//!
//! Layout (ids are predictable because setup runs on a fresh engine):
//! - asset 0 is the quote currency `USD`; asset `1 + s` is the base asset of symbol `s`;
//! - symbol `s` is `S{s}/USD`, FIFO, tick 1, lot 1, with small fees;
//! - account `a` trades symbol `a % symbols` (its home) and holds exactly two assets, USD
//!   and that base: with one symbol, 1,000 accounts are exchange-core's 1,000 users with
//!   2,000 currency accounts. Deposits are large so risk checks pass (they still run).
//!
//! Setup commands come from the admin client [`ADMIN`]; orders come from one client per
//! account ([`client_of`]), each numbering its commands 1, 2, 3, … without gaps.
//!
//! The pre-fill places `orders_per_side` GTC orders on each side of every book, buys
//! below the centre price and sells above it, so none trades, all are accepted, and the
//! engine gives them ids 1, 2, 3, … in order: the tracker is filled with those predicted
//! orders directly. Whoever applies the pre-fill must check that every command was
//! accepted (see [`Market::apply_setup`]).

use bourse_engine::command::{
    Command, CommandBody, MarginSpec, MarginSymbol, MatchPolicy, OrderRequest, SymbolSpec, Tif,
};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, Engine, Event, OrderId, Outcome, Px, Qty, Side, SymbolId};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::tracker::{Resting, Tracker};

/// The client that creates assets, symbols and accounts and funds them.
pub const ADMIN: ClientId = ClientId(0);

/// The first command's timestamp; each command is one microsecond after the previous.
pub const TS_START: u64 = 1_700_000_000_000_000_000;
const TS_STEP_NS: u64 = 1_000;

/// The client that sends an account's orders.
pub fn client_of(account: AccountId) -> ClientId {
    ClientId(u64::from(account.0) + 1)
}

/// The shape of a benchmark market.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarketSpec {
    pub accounts: u32,
    pub symbols: u32,
    /// Pre-fill buys rest below this price and sells above it.
    pub px_center: Px,
    pub px_min: Px,
    pub px_max: Px,
    pub fee_maker: Amount,
    pub fee_taker: Amount,
    /// USD minor units deposited in every account.
    pub quote_deposit: Amount,
    /// Units of its home symbol's base asset credited to every account.
    pub base_credit: Amount,
    /// Resting orders per side of every book after the pre-fill, and the target the
    /// generator keeps each side near.
    pub orders_per_side: u32,
    /// Scale of how far from the touch new GTC orders are placed, in ticks.
    pub px_spread_ticks: i64,
    /// Margin rules: every symbol is then a margin contract (its base asset the
    /// contract, USD the settlement currency), account 0 its insurance account.
    pub margin: Option<MarginSpec>,
}

impl MarketSpec {
    pub fn symbol_spec(&self, symbol: u32) -> SymbolSpec {
        SymbolSpec {
            name: format!("S{symbol}/USD"),
            base: base_asset(SymbolId(symbol)),
            quote: QUOTE,
            tick: Px(1),
            lot: Qty(1),
            px_min: self.px_min,
            px_max: self.px_max,
            fee_maker: self.fee_maker,
            fee_taker: self.fee_taker,
            policy: MatchPolicy::Fifo,
        }
    }

    /// Number of setup commands: one quote asset, a base asset and a symbol per symbol,
    /// and per account its creation, deposit and credit.
    pub fn setup_len(&self) -> u64 {
        1 + 2 * u64::from(self.symbols) + 3 * u64::from(self.accounts)
    }

    pub fn prefill_len(&self) -> u64 {
        2 * u64::from(self.symbols) * u64::from(self.orders_per_side)
    }
}

/// The quote asset every symbol trades against.
pub const QUOTE: AssetId = AssetId(0);

pub fn base_asset(symbol: SymbolId) -> AssetId {
    AssetId(symbol.0 + 1)
}

/// Per-client sequence numbers and the leader clock of a generated stream.
#[derive(Clone, Debug)]
pub struct Clients {
    seqs: Vec<u64>,
    seq_admin: u64,
    ts: u64,
}

impl Clients {
    pub fn new(accounts: u32) -> Self {
        Clients { seqs: vec![0; accounts as usize], seq_admin: 0, ts: TS_START }
    }

    fn stamp(&mut self) -> u64 {
        self.ts += TS_STEP_NS;
        self.ts
    }

    /// The admin client's next command.
    pub fn admin(&mut self, body: CommandBody) -> Command {
        self.seq_admin += 1;
        Command { client: ADMIN, seq: self.seq_admin, ts: self.stamp(), body }
    }

    /// `account`'s client's next command.
    pub fn user(&mut self, account: AccountId, body: CommandBody) -> Command {
        let seq = &mut self.seqs[account.0 as usize];
        *seq += 1;
        let seq = *seq;
        Command { client: client_of(account), seq, ts: self.stamp(), body }
    }
}

/// An order size: 1 plus the product of three draws from 0..6, so sizes run from 1 to
/// 126 with many small orders and a few large ones (mean about 16.6).
pub fn qty_random(rng: &mut impl Rng) -> Qty {
    Qty(1 + rng.gen_range(0..6) * rng.gen_range(0..6) * rng.gen_range(0..6))
}

/// A distance from the touch in ticks, in `0..spread`: the product of two uniform draws
/// scaled back to the range, so near prices are much likelier than far ones.
pub fn px_offset(rng: &mut impl Rng, spread: i64) -> i64 {
    let spread = spread.max(1);
    rng.gen_range(0..spread) * rng.gen_range(0..spread) / spread
}

/// A market being built and then traded: its spec, clients, the generator's view of
/// the books, and the seeded random source everything draws from.
#[derive(Clone, Debug)]
pub struct Market {
    pub spec: MarketSpec,
    pub clients: Clients,
    pub tracker: Tracker,
    pub rng: ChaCha8Rng,
    setup_next: u64,
    prefill_next: u64,
    order_id_next: u64,
}

impl Market {
    pub fn new(spec: MarketSpec, seed: u64) -> Self {
        assert!(spec.accounts >= spec.symbols && spec.symbols > 0, "every symbol needs an account");
        Market {
            clients: Clients::new(spec.accounts),
            tracker: Tracker::new(spec.symbols),
            rng: ChaCha8Rng::seed_from_u64(seed),
            spec,
            setup_next: 0,
            prefill_next: 0,
            order_id_next: 1,
        }
    }

    /// A random account whose home is `symbol`.
    pub fn account_for(&mut self, symbol: SymbolId) -> AccountId {
        let symbols = self.spec.symbols;
        let homed = (self.spec.accounts - 1 - symbol.0) / symbols + 1;
        AccountId(symbol.0 + symbols * self.rng.gen_range(0..homed))
    }

    /// The next setup or pre-fill command, or `None` when both are done.
    pub fn next_setup(&mut self) -> Option<Command> {
        if self.setup_next < self.spec.setup_len() {
            let body = self.setup_body(self.setup_next);
            self.setup_next += 1;
            return Some(self.clients.admin(body));
        }
        if self.prefill_next < self.spec.prefill_len() {
            let cursor = self.prefill_next;
            self.prefill_next += 1;
            return Some(self.prefill_command(cursor));
        }
        None
    }

    /// Appends up to `max` setup and pre-fill commands; returns how many.
    pub fn fill_setup(&mut self, out: &mut Vec<Command>, max: usize) -> usize {
        let start = out.len();
        while out.len() - start < max {
            match self.next_setup() {
                Some(command) => out.push(command),
                None => break,
            }
        }
        out.len() - start
    }

    fn setup_body(&self, index: u64) -> CommandBody {
        let symbols = u64::from(self.spec.symbols);
        let accounts = u64::from(self.spec.accounts);
        // Assets, symbols, then accounts (created, funded, credited); a margin
        // contract's insurance account (account 0) must exist before the symbol, so
        // with margin the accounts are created first.
        let (symbols_at, accounts_at) = match self.spec.margin {
            None => (1 + symbols, 1 + 2 * symbols),
            Some(_) => (1 + symbols + accounts, 1 + symbols),
        };
        if index == 0 {
            return CommandBody::CreateAsset { name: "USD".into(), decimals: 2 };
        }
        if index <= symbols {
            return CommandBody::CreateAsset { name: format!("S{}", index - 1), decimals: 0 };
        }
        if (symbols_at..symbols_at + symbols).contains(&index) {
            let spec = self.spec.symbol_spec((index - symbols_at) as u32);
            return match self.spec.margin {
                Some(margin) => CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin })),
                None => CommandBody::CreateSymbol(Box::new(spec)),
            };
        }
        if (accounts_at..accounts_at + accounts).contains(&index) {
            return CommandBody::CreateAccount;
        }
        let i = index - 1 - 2 * symbols - accounts;
        let account = AccountId((i % accounts) as u32);
        match i / accounts {
            0 => CommandBody::Deposit { account, asset: QUOTE, amount: self.spec.quote_deposit },
            _ => {
                let home = SymbolId(account.0 % self.spec.symbols);
                CommandBody::Credit { account, asset: base_asset(home), amount: self.spec.base_credit }
            }
        }
    }

    /// Pre-fill command number `cursor`: round after round, every symbol gets a buy and
    /// a sell, so all books grow evenly.
    fn prefill_command(&mut self, cursor: u64) -> Command {
        let symbols = u64::from(self.spec.symbols);
        let symbol = SymbolId(((cursor / 2) % symbols) as u32);
        let side = if cursor.is_multiple_of(2) { Side::Buy } else { Side::Sell };
        let account = self.account_for(symbol);
        let offset = 1 + px_offset(&mut self.rng, self.spec.px_spread_ticks);
        let px = match side {
            Side::Buy => Px((self.spec.px_center.0 - offset).max(self.spec.px_min.0)),
            Side::Sell => Px((self.spec.px_center.0 + offset).min(self.spec.px_max.0)),
        };
        let qty = qty_random(&mut self.rng);
        let id = OrderId(self.order_id_next);
        self.order_id_next += 1;
        self.tracker.insert(symbol, side, Resting { id, account, px, qty });
        let request = OrderRequest::limit(account, symbol, side, px, qty, Tif::Gtc);
        self.clients.user(account, CommandBody::Place(request))
    }

    /// Applies all setup and pre-fill commands to `engine` (which must be fresh),
    /// panicking if any is refused: the layout above would then be wrong.
    pub fn apply_setup<B: bourse_engine::book::Book>(&mut self, engine: &mut Engine<B>) {
        let mut events: Vec<Event> = Vec::new();
        while let Some(command) = self.next_setup() {
            events.clear();
            let applied = engine.apply(&command, &mut events);
            assert!(matches!(applied.outcome, Outcome::Ok { .. }), "setup command {command:?} gave {applied:?}");
        }
        assert_eq!(engine.next_order_id(), self.next_order_id(), "pre-fill ids differ from the prediction");
    }

    /// The id the engine will give the next accepted order, as predicted by the pre-fill.
    pub fn next_order_id(&self) -> OrderId {
        OrderId(self.order_id_next)
    }
}

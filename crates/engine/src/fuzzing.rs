//! Differential harness shared by the fuzz target, the property tests and the seeded
//! stream tests.
//!
//! [`Differential`] drives an engine on the [`FastBook`] and one on the
//! [`ReferenceBook`] with the same commands and panics at the first difference in
//! outcome or events, or at the first broken invariant of either. [`body_from_bytes`]
//! turns a few bytes into a mostly valid command aimed at a small fixed market (so
//! random input reaches deep states: resting orders, icebergs, stops, self trades),
//! with a share of deliberately bad input, Day orders and the close of the trading day
//! among them. [`rare_body_from_bytes`] makes the kinds that one leaves out (new
//! symbols mid-stream and day-trading entries: the sixteen commands and poller quotes,
//! mostly well-formed, for a few users and symbols). [`run`] is the fuzz entry point: it
//! mixes both with raw bytes handed to the wire decoder, so every [`CommandBody`] kind
//! is generated ([`body_kind`] names them).

use crate::book::{Book, FastBook, ReferenceBook};
use crate::codec;
use crate::command::{
    Command, CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec,
    Tif,
};
use crate::daytrading::{DtCommand, DtKind, DtQuote, DtRequest, QuoteSource, Sym};
use crate::engine::Engine;
use crate::event::{Applied, Event, Outcome};
use crate::reject::Reject;
use crate::types::{AccountId, Amount, AssetId, ClientId, OrderId, Px, Qty, Side, SymbolId};

/// Clients the harness numbers commands for.
pub const CLIENTS: usize = 3;
/// Accounts created by the fixture.
pub const ACCOUNTS: u32 = 4;

/// Per symbol of the fixture: (mid price, tick, lot). The first two are spot pairs, the
/// last two margin contracts.
const SYMBOLS: [(i64, i64, i64); 4] = [(1_000, 1, 1), (1_000, 5, 10), (1_000, 1, 1), (1_000, 5, 10)];

/// The fixture's margin symbols' insurance account.
pub const INSURANCE: AccountId = AccountId(3);

/// The fixture's margin contracts, for a market that has its three spot assets, two
/// spot pairs and four accounts: assets M (settlement), FUT and FUT2; symbols FUT/M
/// (FIFO, last-trade mark, multiplier 1) and FUT2/M (pro-rata, operator mark,
/// multiplier 2), insured by account 3; 2,000 M deposited to each account.
pub fn margin_market() -> Vec<CommandBody> {
    let mut bodies: Vec<CommandBody> = ["M", "FUT", "FUT2"]
        .iter()
        .map(|name| CommandBody::CreateAsset { name: (*name).into(), decimals: 2 })
        .collect();
    // High leverage and thin cash, so the stream's price moves of a few per cent
    // liquidate.
    let margins = [
        ("FUT/M", 4, MatchPolicy::Fifo, MarkSource::LastTrade, 1),
        ("FUT2/M", 5, MatchPolicy::ProRata, MarkSource::Operator, 2),
    ];
    for (i, (name, base, policy, mark, multiplier)) in margins.into_iter().enumerate() {
        let (_, tick, lot) = SYMBOLS[2 + i];
        bodies.push(CommandBody::CreateMarginSymbol(Box::new(MarginSymbol {
            spec: SymbolSpec {
                name: name.into(),
                base: AssetId(base),
                quote: AssetId(3),
                tick: Px(tick),
                lot: Qty(lot),
                px_min: Px(500),
                px_max: Px(5_000),
                fee_maker: Amount(-1),
                fee_taker: Amount(2),
                policy,
            },
            margin: MarginSpec {
                initial_bp: 300,
                maintenance_bp: 200,
                multiplier,
                position_limit: Qty(500 * lot),
                mark,
                insurance: INSURANCE,
            },
        })));
    }
    for account in 0..ACCOUNTS {
        bodies.push(CommandBody::Deposit { account: AccountId(account), asset: AssetId(3), amount: Amount(2_000) });
    }
    bodies
}

/// A reader of fuzz bytes that yields zeros once exhausted.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Bytes { data }
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    pub fn byte(&mut self) -> u8 {
        match self.data.split_first() {
            Some((&b, rest)) => {
                self.data = rest;
                b
            }
            None => 0,
        }
    }

    /// A value in `0..n`.
    pub fn below(&mut self, n: u8) -> u8 {
        self.byte() % n
    }

    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }
}

/// Two engines, one per book, kept in lockstep.
pub struct Differential {
    pub fast: Engine<FastBook>,
    pub reference: Engine<ReferenceBook>,
    seqs: [u64; CLIENTS],
    ts: u64,
    events_fast: Vec<Event>,
    events_reference: Vec<Event>,
    /// Every balance as its last `Balance` event said: what a client following the
    /// events believes.
    reported: std::collections::BTreeMap<(AccountId, AssetId), (i64, i64)>,
}

impl Default for Differential {
    fn default() -> Self {
        Differential::new()
    }
}

impl Differential {
    /// Assets USD, ACME, BETA; symbols ACME/USD (FIFO, tick 1, lot 1, maker rebate 1,
    /// taker fee 2) and BETA/USD (pro-rata, tick 5, lot 10, taker fee 3); four funded
    /// accounts; then [`margin_market`]'s two contracts.
    pub fn new() -> Self {
        let mut d = Differential {
            fast: Engine::default(),
            reference: Engine::default(),
            seqs: [0; CLIENTS],
            ts: 1_000_000,
            events_fast: Vec::new(),
            events_reference: Vec::new(),
            reported: Default::default(),
        };
        for name in ["USD", "ACME", "BETA"] {
            d.apply_as(0, CommandBody::CreateAsset { name: name.into(), decimals: 2 });
        }
        let specs = [("ACME/USD", 1, MatchPolicy::Fifo, -1, 2), ("BETA/USD", 2, MatchPolicy::ProRata, 0, 3)];
        for (i, (name, base, policy, fee_maker, fee_taker)) in specs.into_iter().enumerate() {
            let (_, tick, lot) = SYMBOLS[i];
            d.apply_as(
                0,
                CommandBody::CreateSymbol(Box::new(SymbolSpec {
                    name: name.into(),
                    base: AssetId(base),
                    quote: AssetId(0),
                    tick: Px(tick),
                    lot: Qty(lot),
                    px_min: Px(500),
                    px_max: Px(5_000),
                    fee_maker: Amount(fee_maker),
                    fee_taker: Amount(fee_taker),
                    policy,
                })),
            );
        }
        for _ in 0..ACCOUNTS {
            d.apply_as(0, CommandBody::CreateAccount);
        }
        for account in 0..ACCOUNTS {
            let account = AccountId(account);
            d.apply_as(0, CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(50_000_000) });
            for asset in [1, 2] {
                d.apply_as(0, CommandBody::Credit { account, asset: AssetId(asset), amount: Amount(20_000) });
            }
        }
        for body in margin_market() {
            d.apply_as(0, body);
        }
        d
    }

    /// Applies `command` to both engines; panics if they disagree or break an invariant.
    ///
    /// A fill-or-kill order refused as unfillable is also replayed as IOC on a copy of
    /// the engine, which must then not fill it completely (matching itself asserts the
    /// other direction: a FOK that passed the check fills).
    ///
    /// A `CloseDay` must expire exactly the Day orders that were open (its outcome
    /// counts them) and leave none open.
    pub fn apply(&mut self, command: &Command) -> Applied {
        let before = is_fok(command).then(|| self.fast.clone());
        let day_open = open_day_orders(&self.fast);
        self.events_fast.clear();
        self.events_reference.clear();
        let fast = self.fast.apply(command, &mut self.events_fast);
        let reference = self.reference.apply(command, &mut self.events_reference);
        assert_eq!(fast, reference, "outcomes differ for {command:?}");
        assert_eq!(self.events_fast, self.events_reference, "events differ for {command:?}");
        self.fast.check_invariants();
        self.reference.check_invariants();
        self.assert_balances_reported(command);
        if let (Some(before), Outcome::Rejected(Reject::FokCannotFill)) = (before, fast.outcome) {
            assert_fok_refusal_right(before, command);
        }
        // Applied, not a duplicate nor refused by the session check (raw input's seqs).
        if let (CommandBody::CloseDay, Outcome::Ok { id }, false) = (&command.body, fast.outcome, fast.duplicate) {
            assert_eq!(id, day_open, "CloseDay counted wrong");
            assert_eq!(open_day_orders(&self.fast), 0, "a Day order outlived CloseDay");
        }
        fast
    }

    /// Every balance the command changed was reported by a `Balance` event: the
    /// balances the events say are the engine's.
    fn assert_balances_reported(&mut self, command: &Command) {
        for event in &self.events_fast {
            if let Event::Balance { account, asset, available, reserved } = *event {
                self.reported.insert((account, asset), (available.0, reserved.0));
            }
        }
        for (i, account) in self.fast.accounts.iter().enumerate() {
            for (asset, balance) in &account.balances {
                let reported = self.reported.get(&(AccountId(i as u32), *asset)).copied().unwrap_or((0, 0));
                assert_eq!(
                    reported,
                    (balance.available.0, balance.reserved.0),
                    "account {i} asset {} changed without a Balance event in {command:?}",
                    asset.0
                );
            }
        }
    }

    /// Applies `body` as the next command of `client`.
    pub fn apply_as(&mut self, client: usize, body: CommandBody) -> Applied {
        self.seqs[client] += 1;
        self.ts += 1_000;
        let command = Command { client: ClientId(client as u64), seq: self.seqs[client], ts: self.ts, body };
        self.apply(&command)
    }

    /// The events of the last command (the same on both engines).
    pub fn events(&self) -> &[Event] {
        &self.events_fast
    }

    /// The next sequence number of `client`.
    pub fn next_seq(&self, client: usize) -> u64 {
        self.seqs[client] + 1
    }

    /// Moves the clock of the next commands on by `ns` (the day-trading ledger's quotes
    /// and pending orders expire after a minute).
    pub fn advance(&mut self, ns: u64) {
        self.ts = self.ts.saturating_add(ns);
    }

    /// A copy made by snapshotting the fast engine and restoring it into both books,
    /// with the same clients' sequence numbers.
    pub fn restored(&self) -> Differential {
        let bytes = self.fast.snapshot();
        Differential {
            fast: Engine::restore(&bytes).expect("own snapshot restores"),
            reference: Engine::restore(&bytes).expect("own snapshot restores"),
            seqs: self.seqs,
            ts: self.ts,
            events_fast: Vec::new(),
            events_reference: Vec::new(),
            reported: self.reported.clone(),
        }
    }

    pub fn assert_same_hash(&self) {
        assert_eq!(self.fast.state_hash(), self.reference.state_hash(), "state hashes differ");
    }
}

/// Open or pending Day orders of an engine.
fn open_day_orders<B: Book>(engine: &Engine<B>) -> u64 {
    engine.orders.values().filter(|record| record.tif == Tif::Day).count() as u64
}

fn is_fok(command: &Command) -> bool {
    matches!(&command.body, CommandBody::Place(request) if request.tif == Tif::Fok)
}

/// Replays a refused FOK as IOC (a sell without its minimum-proceeds budget) and
/// checks it would not have filled completely within its limits.
fn assert_fok_refusal_right(mut engine: Engine<FastBook>, command: &Command) {
    let CommandBody::Place(mut request) = command.body.clone() else { unreachable!("checked by is_fok") };
    let proceeds_min = match (request.side, &mut request.kind) {
        (Side::Sell, OrderKind::Market { budget }) => budget.take(),
        _ => None,
    };
    request.tif = Tif::Ioc;
    let ioc = Command { body: CommandBody::Place(request), ..command.clone() };
    let mut events = Vec::new();
    let Outcome::Ok { id } = engine.apply(&ioc, &mut events).outcome else { return };
    // Only the order's own fills count: stops it fires trade in the same command.
    let (mut filled, mut proceeds) = (0i64, 0i128);
    for event in &events {
        if let Event::Trade { px, qty, fee_taker, taker_order, .. } = event {
            if taker_order.0 != id {
                continue;
            }
            filled += qty.0;
            proceeds += crate::types::notional(*px, *qty) - i128::from(fee_taker.0);
        }
    }
    let complete = filled == request.qty.0 && proceeds_min.is_none_or(|min| proceeds >= i128::from(min.0));
    assert!(!complete, "FOK refused but as IOC it fills completely: {command:?}");
}

/// Builds one command for the [`Differential`] fixture from a few bytes.
pub fn body_from_bytes<B: Book>(bytes: &mut Bytes<'_>, engine: &Engine<B>) -> CommandBody {
    let account = account_from(bytes);
    // One time in sixteen a symbol that does not exist; else one of the fixture's (the
    // margin contracts too where the engine has them: other users of this generator
    // set up only the two spot pairs).
    let fixture = fixture_symbols(engine);
    let sym = match bytes.below(16) {
        15 => 4,
        n => n % fixture,
    };
    let symbol = SymbolId(u32::from(sym));
    match bytes.below(24) {
        0..=8 => CommandBody::Place(order_from(bytes, account, sym)),
        9..=11 => {
            let (order, account) = recent_order(bytes, engine);
            CommandBody::Cancel { account, symbol: order_symbol(engine, order).unwrap_or(symbol), order }
        }
        12..=16 => {
            let (order, account) = recent_order(bytes, engine);
            let order_sym = order_symbol(engine, order).unwrap_or(symbol);
            let (mid, tick, _) = SYMBOLS.get(order_sym.0 as usize).copied().unwrap_or(SYMBOLS[0]);
            let px = Px(mid + (i64::from(bytes.below(41)) - 20) * tick + off_tick(bytes));
            CommandBody::Move { account, symbol: order_sym, order, px }
        }
        17..=18 => {
            let (order, account) = recent_order(bytes, engine);
            let order_sym = order_symbol(engine, order).unwrap_or(symbol);
            let lot = SYMBOLS.get(order_sym.0 as usize).map_or(1, |s| s.2);
            CommandBody::Reduce { account, symbol: order_sym, order, qty_by: Qty(i64::from(bytes.below(4)) * lot) }
        }
        19 => {
            let asset = asset_from(bytes);
            let amount = amount_from(bytes);
            // Margin cash (M) stays thin, so price moves liquidate.
            let amount = if asset == AssetId(3) && amount.0 < i64::MAX / 2 { Amount(amount.0 / 500) } else { amount };
            CommandBody::Deposit { account, asset, amount }
        }
        20 => CommandBody::Withdraw { account, asset: asset_from(bytes), amount: amount_from(bytes) },
        21 => {
            let asset = asset_from(bytes);
            let amount = amount_from(bytes);
            let amount = if asset == AssetId(3) && amount.0 < i64::MAX / 2 { Amount(amount.0 / 500) } else { amount };
            CommandBody::Credit { account, asset, amount }
        }
        22 => match bytes.below(16) {
            0 => CommandBody::SuspendAccount { account },
            _ => CommandBody::ResumeAccount { account },
        },
        _ => match bytes.below(8) {
            0 => CommandBody::CreateAccount,
            1 => CommandBody::CreateAsset { name: format!("A{}", bytes.below(4)), decimals: bytes.below(20) },
            // Few external ids, so some are taken; deposits of every kind, zero included.
            2 => CommandBody::CreateAccountWithId {
                external_id: u64::from(bytes.below(8)),
                asset: asset_from(bytes),
                deposit: amount_from(bytes),
            },
            3 => CommandBody::CloseDay,
            // Sometimes past the limit.
            4 => CommandBody::SetFairness(crate::command::FairnessSetting {
                hold_ns: u64::from(bytes.below(12)) * 1_000_000_000,
                window_ns: u64::from(bytes.below(4)) * 100_000,
            }),
            // Mostly the operator-marked contract, a mark within a few per cent (or off
            // tick, or out of bounds); sometimes a symbol whose mark is not settable.
            5 | 6 => {
                let symbol = SymbolId(if bytes.below(8) == 0 { u32::from(bytes.below(5)) } else { 3 });
                let px = match bytes.below(16) {
                    0 => Px(1),
                    n => Px(1_000 + (i64::from(bytes.below(41)) - 20) * 5 + i64::from(n == 1)),
                };
                CommandBody::SetMark { symbol, px }
            }
            _ => CommandBody::Withdraw { account, asset: AssetId(0), amount: Amount(i64::MAX) },
        },
    }
}

/// How many of the fixture's symbols (`SYMBOLS`) the engine has: 4 with the margin
/// contracts of [`Differential::new`], 2 where only the spot pairs were set up.
fn fixture_symbols<B: Book>(engine: &Engine<B>) -> u8 {
    engine.symbols_len().clamp(1, SYMBOLS.len()) as u8
}

fn account_from(bytes: &mut Bytes<'_>) -> AccountId {
    // One time in seventeen an account that does not exist.
    match u32::from(bytes.below(ACCOUNTS as u8 * 4 + 1)) {
        n if n == ACCOUNTS * 4 => AccountId(ACCOUNTS),
        n => AccountId(n % ACCOUNTS),
    }
}

fn asset_from(bytes: &mut Bytes<'_>) -> AssetId {
    AssetId(u32::from(bytes.below(4)))
}

fn amount_from(bytes: &mut Bytes<'_>) -> Amount {
    match bytes.below(8) {
        0 => Amount(0),
        1 => Amount(-5),
        2 => Amount(i64::MAX - 3),
        n => Amount(i64::from(n) * 1_000 * i64::from(bytes.byte())),
    }
}

/// Usually zero; sometimes a price off the tick.
fn off_tick(bytes: &mut Bytes<'_>) -> i64 {
    i64::from(bytes.below(16) == 0)
}

/// Usually a resting order; sometimes a recent id (a stop, a closed or unknown order).
/// Usually with its owner.
fn recent_order<B: Book>(bytes: &mut Bytes<'_>, engine: &Engine<B>) -> (OrderId, AccountId) {
    let symbol = SymbolId(u32::from(bytes.below(4) % fixture_symbols(engine)));
    let side = if bytes.below(2) == 0 { Side::Buy } else { Side::Sell };
    let resting = engine.book_orders(symbol, side, 32);
    let pick = usize::from(bytes.byte());
    let order = match resting.get(pick % resting.len().max(1)) {
        Some(order) if pick % 8 != 0 => order.id,
        _ => OrderId(engine.next_order_id().0.saturating_sub(1 + (pick as u64 % 24)).max(1)),
    };
    let owner = engine.order(order).map(|view| view.record.account);
    let account = match (owner, bytes.below(8)) {
        (Some(owner), 1..) => owner,
        _ => account_from(bytes),
    };
    (order, account)
}

fn order_symbol<B: Book>(engine: &Engine<B>, order: OrderId) -> Option<SymbolId> {
    engine.order(order).map(|view| view.record.symbol)
}

fn order_from(bytes: &mut Bytes<'_>, account: AccountId, sym: u8) -> OrderRequest {
    let (mid, tick, lot) = SYMBOLS.get(usize::from(sym)).copied().unwrap_or(SYMBOLS[0]);
    let side = if bytes.below(2) == 0 { Side::Buy } else { Side::Sell };
    let px_offset = (i64::from(bytes.below(21)) - 10) * tick;
    // Buys mostly below the mid and sells above, so books build up; some cross.
    let px = match side {
        Side::Buy => Px(mid - px_offset.abs() + if bytes.below(4) == 0 { 3 * tick } else { 0 }),
        Side::Sell => Px(mid + px_offset.abs() - if bytes.below(4) == 0 { 3 * tick } else { 0 }),
    };
    let px = Px(px.0 + off_tick(bytes));
    let qty = match bytes.below(16) {
        0 => Qty(0),
        1 => Qty(lot * 7 + 1),
        2 => Qty(i64::MAX / 2),
        n => Qty(i64::from(n) * lot),
    };
    let tif = match bytes.below(8) {
        0 => Tif::Ioc,
        1 => Tif::Fok,
        2..=3 => Tif::Day,
        _ => Tif::Gtc,
    };
    let stp = match bytes.below(3) {
        0 => Stp::CancelResting,
        1 => Stp::CancelIncoming,
        _ => Stp::Allow,
    };
    // Margin orders hold margin, not a budget: mostly none there.
    let budget = match (bytes.below(3), sym >= 2 && bytes.below(8) != 0) {
        (0, _) | (_, true) => None,
        _ => Some(Amount(i64::from(bytes.byte()) * 2_000)),
    };
    let trigger = Px(mid + (i64::from(bytes.below(11)) - 5) * tick);
    let (kind, tif) = match bytes.below(10) {
        0 => (OrderKind::Market { budget }, if tif.rests() { Tif::Ioc } else { tif }),
        1 => (OrderKind::StopLimit { trigger, px }, tif),
        2 => (OrderKind::StopMarket { trigger, budget }, if bytes.below(8) == 0 { tif } else { Tif::Ioc }),
        _ => (OrderKind::Limit { px }, tif),
    };
    let display_qty = (bytes.below(6) == 0).then(|| Qty(lot * i64::from(1 + bytes.below(3))));
    OrderRequest {
        account,
        symbol: SymbolId(u32::from(sym)),
        side,
        kind,
        qty,
        tif,
        post_only: bytes.below(8) == 0,
        display_qty,
        stp,
    }
}

/// How many kinds of [`CommandBody`] there are; [`body_kind`] numbers them from 0.
pub const BODY_KINDS: usize = 18;

/// The kind of `body` as a number below [`BODY_KINDS`]. The match has no wildcard, so a
/// new kind of command does not compile until it is numbered here (and then the corpus
/// test asks the generators to make it).
pub fn body_kind(body: &CommandBody) -> usize {
    match body {
        CommandBody::CreateAsset { .. } => 0,
        CommandBody::CreateSymbol(_) => 1,
        CommandBody::CreateAccount => 2,
        CommandBody::Deposit { .. } => 3,
        CommandBody::Withdraw { .. } => 4,
        CommandBody::Credit { .. } => 5,
        CommandBody::SuspendAccount { .. } => 6,
        CommandBody::ResumeAccount { .. } => 7,
        CommandBody::Place(_) => 8,
        CommandBody::Cancel { .. } => 9,
        CommandBody::Reduce { .. } => 10,
        CommandBody::Move { .. } => 11,
        CommandBody::CreateAccountWithId { .. } => 12,
        CommandBody::CloseDay => 13,
        CommandBody::DayTrading(_) => 14,
        CommandBody::SetFairness(_) => 15,
        CommandBody::CreateMarginSymbol(_) => 16,
        CommandBody::SetMark { .. } => 17,
    }
}

/// A user of a day-trading entry: mostly one of two, so their commands meet (a BUY and
/// its COMMIT); sometimes a third, or a userid that is not valid.
fn dt_user_from(bytes: &mut Bytes<'_>) -> &'static str {
    match bytes.below(16) {
        0 => "no way",
        1 => "c_3-x",
        n => ["alice", "bob"][usize::from(n % 2)],
    }
}

/// A symbol argument: mostly one of two (so quotes are cached for the next commands),
/// sometimes a third, or text that is not a symbol.
fn dt_symbol_from(bytes: &mut Bytes<'_>) -> &'static str {
    match bytes.below(16) {
        0 => "abc",
        1 => "ABCD",
        n => ["S", "XYZ", "S", "AB"][usize::from(n % 4)],
    }
}

/// Builds one of the kinds [`body_from_bytes`] never makes: a new symbol (one time in
/// eight; mostly valid, some refused for each reason) or a day-trading entry.
pub fn rare_body_from_bytes(bytes: &mut Bytes<'_>) -> CommandBody {
    match bytes.below(16) {
        0 | 1 => return CommandBody::CreateSymbol(Box::new(symbol_spec_from(bytes))),
        2 => return CommandBody::CreateMarginSymbol(Box::new(margin_symbol_from(bytes))),
        _ => {}
    }
    CommandBody::DayTrading(Box::new(day_trading_from(bytes)))
}

/// A margin contract: mostly valid, some refused for each margin rule.
fn margin_symbol_from(bytes: &mut Bytes<'_>) -> MarginSymbol {
    let mut spec = symbol_spec_from(bytes);
    spec.quote = AssetId(3);
    spec.base = AssetId(4 + u32::from(bytes.below(2)));
    let mut margin = MarginSpec {
        initial_bp: 1_000,
        maintenance_bp: 500,
        multiplier: 1 + i64::from(bytes.below(3)),
        position_limit: Qty(spec.lot.0.max(1) * 100),
        mark: if bytes.below(2) == 0 { MarkSource::Operator } else { MarkSource::LastTrade },
        insurance: INSURANCE,
    };
    match bytes.below(12) {
        0 => margin.maintenance_bp = 0,
        1 => margin.maintenance_bp = margin.initial_bp + 1,
        2 => margin.initial_bp = 10_001,
        3 => margin.multiplier = 0,
        4 => margin.position_limit = Qty(i64::MAX / 2),
        5 => margin.insurance = AccountId(99),
        6 => margin.position_limit = Qty(-1),
        _ => {}
    }
    MarginSymbol { spec, margin }
}

fn symbol_spec_from(bytes: &mut Bytes<'_>) -> SymbolSpec {
    let (tick, lot) = [(1, 1), (5, 10), (2, 3)][usize::from(bytes.below(3))];
    let mut spec = SymbolSpec {
        // Few names, so some are taken (ACME/USD by the fixture).
        name: ["N0/USD", "N1/USD", "N2/USD", "ACME/USD"][usize::from(bytes.below(4))].into(),
        base: AssetId(1 + u32::from(bytes.below(2))),
        quote: AssetId(0),
        tick: Px(tick),
        lot: Qty(lot),
        px_min: Px(100 * tick),
        px_max: Px(10_000 * tick),
        fee_maker: Amount(i64::from(bytes.below(3)) - 1),
        fee_taker: Amount(i64::from(bytes.below(4))),
        policy: if bytes.below(2) == 0 { MatchPolicy::Fifo } else { MatchPolicy::ProRata },
    };
    match bytes.below(16) {
        0 => spec.name = "bad name!".into(),
        1 => spec.base = AssetId(0),
        2 => spec.quote = AssetId(9),
        3 => spec.tick = Px(0),
        4 => spec.lot = Qty(-1),
        5 => spec.px_min = Px(spec.px_max.0 + tick),
        6 => spec.px_min = Px(spec.px_min.0 + 1),
        7 => spec.px_max = Px(i64::MAX),
        8 => spec.fee_maker = Amount(spec.fee_taker.0 + 1),
        9 => spec.fee_taker = Amount(i64::MAX),
        10 => spec.name = "X".repeat(64),
        _ => {}
    }
    spec
}

fn pick<'a>(bytes: &mut Bytes<'_>, items: &[&'a str]) -> &'a str {
    items[usize::from(bytes.byte()) % items.len()]
}

/// An amount or price argument: mostly valid (a few cents to a few thousand dollars),
/// sometimes one the grammar refuses.
fn dt_amount_from(bytes: &mut Bytes<'_>) -> String {
    match bytes.below(16) {
        0 => pick(bytes, &["0", "0.00", "-5.00", "5.", ".5", "5.123", "", "abc", "1e3", "92233720368547758.08"]).into(),
        1 => "92233720368547758.07".into(),
        n => format!("{}.{:02}", u32::from(bytes.byte()) * u32::from(n), bytes.below(100)),
    }
}

fn dt_quote_from(bytes: &mut Bytes<'_>, symbol: Sym, userid: &str) -> DtQuote {
    let price = match bytes.below(16) {
        0 => 0,
        1 => crate::daytrading::QUOTE_PRICE_MAX + 1,
        2 => crate::daytrading::QUOTE_PRICE_MAX,
        n => i64::from(n) * (1 + i64::from(bytes.byte())),
    };
    DtQuote {
        symbol,
        price,
        userid: userid.into(),
        quote_server_time: u64::from(bytes.byte()) * 1_000,
        cryptokey: if bytes.below(16) == 0 { "\u{1}".into() } else { "key=".into() },
        source: [QuoteSource::Market, QuoteSource::Emulator, QuoteSource::LegacyTcp][usize::from(bytes.below(3))],
        transaction_num: u64::from(bytes.below(4)),
    }
}

/// A day-trading entry: a poller's quote one time in six, else one of the sixteen
/// commands, mostly with the right number of well-formed arguments for a few users and
/// symbols, sometimes carrying the quote a service fetched for it.
fn day_trading_from(bytes: &mut Bytes<'_>) -> DtRequest {
    let symbol_text = dt_symbol_from(bytes);
    let symbol = Sym::parse(symbol_text).unwrap_or(Sym(*b"S\0\0"));
    let userid = dt_user_from(bytes);
    if bytes.below(6) == 0 {
        return DtRequest::Quote(dt_quote_from(bytes, symbol, userid));
    }
    let kind = DtKind::ALL[usize::from(bytes.below(DtKind::ALL.len() as u8))];
    let mut args = vec![userid.to_owned()];
    match kind {
        DtKind::Add => args.push(dt_amount_from(bytes)),
        DtKind::Quote | DtKind::CancelSetBuy | DtKind::CancelSetSell => args.push(symbol_text.into()),
        DtKind::Buy
        | DtKind::Sell
        | DtKind::SetBuyAmount
        | DtKind::SetBuyTrigger
        | DtKind::SetSellAmount
        | DtKind::SetSellTrigger => {
            args.push(symbol_text.into());
            args.push(dt_amount_from(bytes));
        }
        DtKind::DumpLog => match bytes.below(3) {
            // The global form: the file name only.
            0 => args = vec![pick(bytes, &["./testLOG", "../x", ""]).into()],
            _ => args.push(pick(bytes, &["./userLOG", "a/b"]).into()),
        },
        DtKind::CommitBuy | DtKind::CommitSell | DtKind::CancelBuy | DtKind::CancelSell | DtKind::DisplaySummary => {}
    }
    match bytes.below(32) {
        0 => args.push("extra".into()),
        1 => {
            args.pop();
        }
        // Too long for the entry's bounds: refused before any record.
        2 => args.push("x".repeat(crate::daytrading::ARG_LEN_MAX + 1)),
        _ => {}
    }
    let quote = match bytes.below(3) {
        0 => Some(dt_quote_from(bytes, symbol, userid)),
        _ => None,
    };
    let transaction_num = match bytes.below(4) {
        0 => u64::from(bytes.byte()),
        _ => 0,
    };
    let (caller, admin) = match bytes.below(4) {
        0 => (String::new(), true),
        1 => ("mallory".into(), false),
        _ => (userid.into(), false),
    };
    DtRequest::Command(DtCommand { kind, args, transaction_num, caller, admin, quote })
}

/// `len` bytes from SplitMix64 seeded with `seed`: a command stream for [`run`] and the
/// property tests that reproduces from its seed.
pub fn seeded_bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// The fuzz entry point: drives the fixture with commands made from `data`, both
/// structured and decoded from raw bytes, comparing the two books throughout. The two
/// low bits of each header byte choose: the order-book and account commands of
/// [`body_from_bytes`] (0 and 2), raw bytes for the wire decoder (1), or
/// [`rare_body_from_bytes`] (3), which may first move the clock on by up to 90 seconds
/// (one time in 32: quotes and pending orders then expire now and then).
/// At the end a snapshot restored into both books must hash the same.
pub fn run(data: &[u8]) {
    let mut d = Differential::new();
    let mut bytes = Bytes::new(data);
    while !bytes.is_empty() {
        let header = bytes.byte();
        let client = usize::from(header >> 2) % CLIENTS;
        match header & 3 {
            1 => {
                // Raw bytes for the decoder; whatever decodes is applied as it stands, so
                // sequence numbers and clients are fuzzed too.
                let len = usize::from(bytes.byte());
                if let Ok(command) = codec::decode(bytes.take(len)) {
                    assert_eq!(
                        codec::decode(&codec::encode(&command)).as_ref(),
                        Ok(&command),
                        "codec does not round-trip"
                    );
                    d.apply(&command);
                }
            }
            3 => {
                if bytes.below(32) == 0 {
                    d.advance(u64::from(bytes.below(10)) * 10_000_000_000);
                }
                let body = rare_body_from_bytes(&mut bytes);
                d.apply_as(client, body);
            }
            _ => {
                let body = body_from_bytes(&mut bytes, &d.fast);
                d.apply_as(client, body);
            }
        }
    }
    d.assert_same_hash();
    let restored = d.restored();
    assert_eq!(restored.fast.state_hash(), d.fast.state_hash(), "a restored snapshot hashes differently");
    restored.assert_same_hash();
}

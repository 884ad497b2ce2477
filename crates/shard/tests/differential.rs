//! The differential test of the partitioned exchange: the same stamped commands
//! through one engine and through G groups, their messages delivered in an order drawn
//! from a seed, end in the same balances, books, trades, fees and supply, and every
//! command gets the same outcome (orders matched by the command that placed them:
//! each symbol part numbers its own).
//!
//! Clients behave as real ones must: a command that names an order is sent only once
//! the order's placement was acknowledged (its id comes from that acknowledgement).
//! Accounts are funded so that no decision depends on proceeds still on their way
//! back (the one thing that may differ from one engine; see bourse-shard's docs).

use std::collections::BTreeMap;

use bourse_engine::command::{
    Command, CommandBody, FairnessSetting, MatchPolicy, OrderKind, OrderRequest, Stp, SymbolSpec, Tif, FAIRNESS_NS_MAX,
};
use bourse_engine::{
    AccountId, Amount, AssetId, ClientId, Engine, EngineConfig, OrderId, OrderStatus, Outcome, Px, Qty, Reject, Side,
    SymbolId,
};
use bourse_shard::{Ack, Replicated, ShardMap, Summary, Trade};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const ACCOUNTS: u32 = 14;
const SYMBOLS: u32 = 5;
const ADMIN: ClientId = ClientId(0);

fn client_of(account: AccountId) -> ClientId {
    ClientId(u64::from(account.0) + 1)
}

/// The test's market and the commands drawn for it.
struct Flow {
    rng: ChaCha8Rng,
    ts: u64,
    seqs: BTreeMap<ClientId, u64>,
    /// Orders the engine accepted: (symbol, id, account).
    placed: Vec<(SymbolId, OrderId, AccountId)>,
    /// Accounts the operator suspended and has not resumed (each for a few commands).
    suspended: Vec<AccountId>,
}

impl Flow {
    fn new(seed: u64) -> Self {
        Flow {
            rng: ChaCha8Rng::seed_from_u64(seed),
            ts: 1_000,
            seqs: BTreeMap::new(),
            placed: Vec::new(),
            suspended: Vec::new(),
        }
    }

    fn command(&mut self, client: ClientId, body: CommandBody) -> Command {
        let seq = self.seqs.entry(client).or_default();
        *seq += 1;
        self.ts += 1_000;
        Command { client, seq: *seq, ts: self.ts, body }
    }

    fn setup(&mut self) -> Vec<Command> {
        let mut out = vec![self.command(ADMIN, CommandBody::CreateAsset { name: "USD".into(), decimals: 2 })];
        for s in 0..SYMBOLS {
            out.push(self.command(ADMIN, CommandBody::CreateAsset { name: format!("B{s}"), decimals: 0 }));
        }
        for s in 0..SYMBOLS {
            let lot = if s == 1 { 10 } else { 1 };
            out.push(self.command(
                ADMIN,
                CommandBody::CreateSymbol(Box::new(SymbolSpec {
                    name: format!("B{s}/USD"),
                    base: AssetId(1 + s),
                    quote: AssetId(0),
                    tick: Px(if s == 2 { 5 } else { 1 }),
                    lot: Qty(lot),
                    px_min: Px(10),
                    px_max: Px(10_000),
                    fee_maker: Amount(if s == 3 { -1 } else { 1 }),
                    fee_taker: Amount(3),
                    policy: if s == 4 { MatchPolicy::ProRata } else { MatchPolicy::Fifo },
                })),
            ));
        }
        for a in 0..ACCOUNTS {
            let account = AccountId(a);
            let cash = Amount(1_000_000_000_000);
            // Half the accounts are created with an external id and their cash at once.
            if a % 2 == 1 {
                let body = CommandBody::CreateAccountWithId {
                    external_id: 1_000 + u64::from(a),
                    asset: AssetId(0),
                    deposit: cash,
                };
                out.push(self.command(ADMIN, body));
            } else {
                out.push(self.command(ADMIN, CommandBody::CreateAccount));
                out.push(self.command(ADMIN, CommandBody::Deposit { account, asset: AssetId(0), amount: cash }));
            }
            for s in 0..SYMBOLS {
                out.push(self.command(
                    ADMIN,
                    CommandBody::Credit { account, asset: AssetId(1 + s), amount: Amount(10_000_000) },
                ));
            }
        }
        // The fairness delays, set through the log; and a setting past the bound.
        let fairness = FairnessSetting { hold_ns: 2_000_000, window_ns: 500_000 };
        out.push(self.command(ADMIN, CommandBody::SetFairness(fairness)));
        let too_long = FairnessSetting { hold_ns: FAIRNESS_NS_MAX + 1, window_ns: 0 };
        out.push(self.command(ADMIN, CommandBody::SetFairness(too_long)));
        // Refused alike everywhere: an external id taken, a negative deposit.
        let taken = CommandBody::CreateAccountWithId { external_id: 1_001, asset: AssetId(0), deposit: Amount(5) };
        out.push(self.command(ADMIN, taken));
        let negative = CommandBody::CreateAccountWithId { external_id: 7, asset: AssetId(0), deposit: Amount(-5) };
        out.push(self.command(ADMIN, negative));
        out
    }

    fn next(&mut self) -> Command {
        // A suspended account is resumed after a few commands; now and then the
        // operator suspends one (or one already suspended, or resumes one that is not).
        if !self.suspended.is_empty() && self.rng.gen_range(0..8) == 0 {
            let account = self.suspended.swap_remove(0);
            return self.command(ADMIN, CommandBody::ResumeAccount { account });
        }
        let account = AccountId(self.rng.gen_range(0..ACCOUNTS));
        let roll = self.rng.gen_range(0..100);
        if (94..96).contains(&roll) {
            let body = match self.rng.gen_range(0..6) {
                0 => CommandBody::ResumeAccount { account },
                _ => CommandBody::SuspendAccount { account },
            };
            match body {
                CommandBody::SuspendAccount { .. } if !self.suspended.contains(&account) => {
                    self.suspended.push(account)
                }
                CommandBody::ResumeAccount { .. } => self.suspended.retain(|&a| a != account),
                _ => {}
            }
            return self.command(ADMIN, body);
        }
        let body = if roll < 48 || self.placed.is_empty() {
            CommandBody::Place(self.request(account))
        } else if roll < 66 {
            let (symbol, order, owner) = self.pick_order(account);
            CommandBody::Cancel { account: owner, symbol, order }
        } else if roll < 74 {
            let (symbol, order, owner) = self.pick_order(account);
            let lot = if symbol == SymbolId(1) { 10 } else { 1 };
            CommandBody::Reduce { account: owner, symbol, order, qty_by: Qty(lot * self.rng.gen_range(1..20)) }
        } else if roll == 93 {
            // The operator closes the day: every Day order expires.
            return self.command(ADMIN, CommandBody::CloseDay);
        } else if roll < 93 {
            let (symbol, order, owner) = self.pick_order(account);
            let tick = if symbol == SymbolId(2) { 5 } else { 1 };
            let px = Px(tick * self.rng.gen_range(16..25) * 5);
            CommandBody::Move { account: owner, symbol, order, px }
        } else if roll < 98 {
            CommandBody::Withdraw { account, asset: AssetId(0), amount: Amount(self.rng.gen_range(1..1_000)) }
        } else {
            CommandBody::Deposit { account, asset: AssetId(self.rng.gen_range(0..=SYMBOLS)), amount: Amount(500) }
        };
        let owner = match &body {
            CommandBody::Place(request) => request.account,
            CommandBody::Cancel { account, .. }
            | CommandBody::Reduce { account, .. }
            | CommandBody::Move { account, .. }
            | CommandBody::Withdraw { account, .. }
            | CommandBody::Deposit { account, .. } => *account,
            other => unreachable!("{other:?}"),
        };
        self.command(client_of(owner), body)
    }

    /// A known order, mostly by its owner; sometimes another account's, sometimes
    /// an id no order has.
    fn pick_order(&mut self, account: AccountId) -> (SymbolId, OrderId, AccountId) {
        let (symbol, order, owner) = self.placed[self.rng.gen_range(0..self.placed.len())];
        match self.rng.gen_range(0..20) {
            0 => (symbol, order, account),
            1 => (symbol, OrderId(1 << 40), owner),
            _ => (symbol, order, owner),
        }
    }

    fn request(&mut self, account: AccountId) -> OrderRequest {
        let rng = &mut self.rng;
        let symbol = SymbolId(rng.gen_range(0..SYMBOLS));
        let (tick, lot) = match symbol.0 {
            1 => (1, 10),
            2 => (5, 1),
            _ => (1, 1),
        };
        let side = if rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
        let px = Px(tick * rng.gen_range(18..23) * 5);
        let mut qty = Qty(lot * rng.gen_range(1..30));
        let kind = match rng.gen_range(0..20) {
            0..=13 => OrderKind::Limit { px },
            14..=16 => OrderKind::Market { budget: (side == Side::Buy).then_some(Amount(rng.gen_range(50..20_000))) },
            17..=18 => OrderKind::StopLimit { trigger: Px(tick * rng.gen_range(18..23) * 5), px },
            _ => OrderKind::StopMarket {
                trigger: Px(tick * rng.gen_range(18..23) * 5),
                budget: (side == Side::Buy).then_some(Amount(rng.gen_range(50..20_000))),
            },
        };
        let resting = matches!(kind, OrderKind::Limit { .. } | OrderKind::StopLimit { .. });
        let tif = match rng.gen_range(0..10) {
            0..=5 if resting => Tif::Gtc,
            6 if resting => Tif::Day,
            7 | 8 => Tif::Ioc,
            9 => Tif::Fok,
            _ => Tif::Ioc,
        };
        let plain_rest = matches!(kind, OrderKind::Limit { .. }) && tif.rests();
        let post_only = plain_rest && rng.gen_range(0..8) == 0;
        let display_qty = (plain_rest && rng.gen_range(0..10) == 0).then(|| Qty(lot * rng.gen_range(1..5)));
        if rng.gen_range(0..40) == 0 {
            qty = Qty(0); // refused for its shape, in the account's part
        }
        let stp = [Stp::CancelResting, Stp::CancelIncoming, Stp::Allow][rng.gen_range(0..3)];
        OrderRequest { account, symbol, side, kind, qty, tif, post_only, display_qty, stp }
    }
}

/// The command with the engine's order id replaced by the partitioned exchange's.
fn translate(body: &CommandBody, ids: &BTreeMap<OrderId, OrderId>) -> CommandBody {
    let map = |order: &OrderId| ids.get(order).copied().unwrap_or(OrderId(order.0 | (1 << 41)));
    match body {
        CommandBody::Cancel { account, symbol, order } => {
            CommandBody::Cancel { account: *account, symbol: *symbol, order: map(order) }
        }
        CommandBody::Reduce { account, symbol, order, qty_by } => {
            CommandBody::Reduce { account: *account, symbol: *symbol, order: map(order), qty_by: *qty_by }
        }
        CommandBody::Move { account, symbol, order, px } => {
            CommandBody::Move { account: *account, symbol: *symbol, order: map(order), px: *px }
        }
        other => other.clone(),
    }
}

fn referenced(body: &CommandBody) -> Option<OrderId> {
    match body {
        CommandBody::Cancel { order, .. } | CommandBody::Reduce { order, .. } | CommandBody::Move { order, .. } => {
            Some(*order)
        }
        _ => None,
    }
}

struct Run {
    summary: Summary,
    trades: BTreeMap<SymbolId, Vec<Trade>>,
    outcomes: BTreeMap<(ClientId, u64), Outcome>,
}

/// The groups' entries committed in an order drawn from the seed, without faults.
/// Returns how many orders crossed a move's cut the slow way (see
/// [`bourse_shard::GroupMachine::cut_crossings`]).
fn differential(groups: u32, seed: u64, commands: usize) -> (u64, u64) {
    let run = compare(Replicated::new(groups, EngineConfig::default(), seed ^ 0x5eed, false), groups, seed, commands);
    crossings(&run)
}

/// With group 0 a meta group of its own (catalog, moves and cuts only): the same
/// engine's end, with no account balance and no order ever in group 0.
fn with_meta_group(groups: u32, seed: u64, commands: usize, faults: bool) -> (u64, u64) {
    let map = ShardMap::with_meta_group(groups);
    let run =
        compare(Replicated::with_map(map, EngineConfig::default(), seed ^ 0x3e7a, faults), groups, seed, commands);
    let meta = run.machines().next().expect("group 0");
    assert_eq!(meta.account.balances().count(), 0, "balances in the meta group");
    let engine = meta.symbol.engine();
    assert!(
        engine.open_order_records().is_empty() && engine.closed_order_records().next().is_none(),
        "orders in group 0"
    );
    crossings(&run)
}

fn crossings(run: &Replicated) -> (u64, u64) {
    run.machines().map(|machine| machine.cut_crossings()).fold((0, 0), |(r, b), (dr, db)| (r + dr, b + db))
}

/// One engine and the groups over the same flow, compared command by command and at
/// the end; returns the groups.
fn compare(mut run: Replicated, groups: u32, seed: u64, commands: usize) -> Replicated {
    run.record_trades();
    run.check_each_entry();
    let config = EngineConfig::default();
    let mut flow = Flow::new(seed);
    let mut engine: Engine = Engine::new(config);
    let mut rng = ChaCha8Rng::seed_from_u64(seed.wrapping_mul(31));

    let mut reference =
        Run { summary: Summary::of_engine(&engine), trades: BTreeMap::new(), outcomes: BTreeMap::new() };
    let mut outcomes: BTreeMap<(ClientId, u64), Outcome> = BTreeMap::new();
    // Engine order id → the partitioned exchange's, and the placing command → engine id.
    let mut ids: BTreeMap<OrderId, OrderId> = BTreeMap::new();
    let mut placed_by: BTreeMap<(ClientId, u64), OrderId> = BTreeMap::new();
    // Commands that name an order: their outcome's id is the order's.
    let mut naming: BTreeMap<(ClientId, u64), bool> = BTreeMap::new();
    let mut events = Vec::new();
    // Commands in the order they were sent, to report the first that differs.
    let mut sent = Vec::new();
    // The closes of the day, to check that some expired orders.
    let mut closes = Vec::new();
    // Client commands sent (as the engine and as the groups got them), to retry.
    let mut retries: Vec<(Command, Command)> = Vec::new();
    let mut retried = 0;
    // Answers to retries, from the sessions' memory.
    let mut repeats: Vec<Ack> = Vec::new();

    let absorb = |acks: Vec<Ack>,
                  outcomes: &mut BTreeMap<(ClientId, u64), Outcome>,
                  ids: &mut BTreeMap<OrderId, OrderId>,
                  placed_by: &BTreeMap<(ClientId, u64), OrderId>,
                  repeats: &mut Vec<Ack>| {
        for ack in acks {
            if ack.repeat {
                repeats.push(ack);
                continue;
            }
            if let (Some(&engine_id), Outcome::Ok { id }) = (placed_by.get(&(ack.client, ack.seq)), ack.outcome) {
                ids.insert(engine_id, OrderId(id));
            }
            assert!(outcomes.insert((ack.client, ack.seq), ack.outcome).is_none(), "two outcomes for {ack:?}");
        }
    };

    let setup = flow.setup();
    let total = setup.len() + commands;
    let mut setup = setup.into_iter();
    for _ in 0..total {
        let command = match setup.next() {
            Some(command) => command,
            None => flow.next(),
        };
        events.clear();
        let applied = engine.apply(&command, &mut events);
        reference.outcomes.insert((command.client, command.seq), applied.outcome);
        sent.push((command.client, command.seq));
        if command.body == CommandBody::CloseDay {
            closes.push((command.client, command.seq));
        }
        for trade in events.iter().filter_map(Trade::of) {
            reference.trades.entry(trade.symbol).or_default().push(trade);
        }
        if let (CommandBody::Place(request), Outcome::Ok { id }) = (&command.body, applied.outcome) {
            flow.placed.push((request.symbol, OrderId(id), request.account));
            placed_by.insert((command.client, command.seq), OrderId(id));
        }
        // Mostly live orders to name; a few closed ones stay, for refusals.
        {
            let open = |id| matches!(engine.order_status(id), Some(OrderStatus::Open | OrderStatus::Pending));
            let mut closed = 0;
            flow.placed.retain(|&(_, id, _)| {
                closed += usize::from(!open(id));
                open(id) || closed <= 4
            });
        }

        // A client names an order only once its placement was acknowledged.
        if let Some(order) = referenced(&command.body) {
            naming.insert((command.client, command.seq), matches!(command.body, CommandBody::Move { .. }));
            let placing = placed_by.iter().find(|(_, &id)| id == order).map(|(&key, _)| key);
            while placing.is_some_and(|key| !outcomes.contains_key(&key)) {
                assert!(run.step(), "the placement of {order} was never acknowledged");
                absorb(run.take_acks(), &mut outcomes, &mut ids, &placed_by, &mut repeats);
            }
        }
        let body = translate(&command.body, &ids);

        let submitted = Command { body, ..command.clone() };
        if let Some(outcome) = run.submit(submitted.clone()).expect("the flow uses supported commands") {
            outcomes.insert((command.client, command.seq), outcome);
        }
        // Now and then a client sends one of its recent commands again (a retry after a
        // lost acknowledgement): applied once, and answered again with the
        // outcome it first got once that is known.
        if command.client != ADMIN {
            retries.push((command.clone(), submitted));
            if rng.gen_range(0..25) == 0 {
                let (original, translated) =
                    retries[retries.len() - 1 - rng.gen_range(0..retries.len().min(40))].clone();
                events.clear();
                assert!(engine.apply(&original, &mut events).duplicate, "the engine applied a retry");
                assert_eq!(run.submit(translated).expect("supported"), None);
                retried += 1;
            }
        }
        for _ in 0..rng.gen_range(0..12) {
            run.step();
        }
        // Now and then a book moves to another group: its orders rest there and go on
        // matching as they would have where they were (one engine moves nothing).
        if groups > 1 && rng.gen_range(0..120) == 0 {
            let symbol = SymbolId(rng.gen_range(0..engine.symbols_len() as u32));
            let _ = run.move_symbol(symbol, rng.gen_range(0..groups as usize));
        }
        absorb(run.take_acks(), &mut outcomes, &mut ids, &placed_by, &mut repeats);
    }
    run.drain();
    absorb(run.take_acks(), &mut outcomes, &mut ids, &placed_by, &mut repeats);
    engine.check_invariants();
    let parts = run.groups();
    for part in &parts.symbols {
        part.engine().check_invariants();
        assert_eq!(part.merge.waiting(), 0, "forwards left in a merge");
    }
    reference.summary = Summary::of_engine(&engine);

    // Every command, the same outcome (order ids through the map).
    assert_eq!(outcomes.len(), reference.outcomes.len(), "some commands got no outcome");
    for key in &sent {
        let expected = reference.outcomes[key];
        let got = outcomes[key];
        let expected = match expected {
            Outcome::Ok { id } if naming.contains_key(key) || placed_by.contains_key(key) => {
                Outcome::Ok { id: ids[&OrderId(id)].0 }
            }
            other => other,
        };
        assert_eq!(got, expected, "command {key:?} (groups {groups}, seed {seed})");
    }
    // A retry answered from its session's memory got the answer the command first got.
    for repeat in &repeats {
        assert_eq!(repeat.outcome, outcomes[&(repeat.client, repeat.seq)], "the answer to a retry: {repeat:?}");
    }
    assert!(repeats.len() > retried / 2, "too few retries answered: {} of {retried}", repeats.len());
    // The flow reaches what it is meant to: moves that need more hold, and refusals
    // from both kinds of part.
    let moved = naming.iter().filter(|(key, &moving)| moving && matches!(reference.outcomes[key], Outcome::Ok { .. }));
    assert!(retried > commands / 50, "too few retries: {retried}");
    let moved = moved.count();
    assert!(moved > commands / 20, "too few moves applied: {moved}");
    let refused = |reject| reference.outcomes.values().filter(|&&o| o == Outcome::Rejected(reject)).count();
    for reject in [
        Reject::QtyMustBePositive,
        Reject::OrderNotOwned,
        Reject::OrderUnknown,
        Reject::FokCannotFill,
        Reject::AccountSuspended,
        Reject::AccountAlreadyInState,
        Reject::AccountIdTaken,
        Reject::AmountMustBePositive,
        Reject::FairnessInvalid,
    ] {
        assert!(refused(reject) > 0, "no {reject} refusal in the flow");
    }
    // A book that moved traded in more than one group: its trades in stamp order (each
    // group's in the order made, one group's all before the next's).
    let mut stamped: BTreeMap<SymbolId, Vec<(u64, Trade)>> = BTreeMap::new();
    for part in &parts.symbols {
        for &(stamp, trade) in part.trades() {
            stamped.entry(trade.symbol).or_default().push((stamp, trade));
        }
    }
    let trades: BTreeMap<SymbolId, Vec<Trade>> = stamped
        .into_iter()
        .map(|(symbol, mut trades)| {
            trades.sort_by_key(|&(stamp, _)| stamp);
            (symbol, trades.into_iter().map(|(_, trade)| trade).collect())
        })
        .collect();
    assert_eq!(trades, reference.trades, "trades differ (groups {groups}, seed {seed})");
    assert!(reference.trades.values().map(Vec::len).sum::<usize>() > commands / 20, "too few trades to tell");
    let summary = Summary::of_groups(&parts);
    assert_eq!(summary.balances, reference.summary.balances, "balances (groups {groups}, seed {seed})");
    assert_eq!(summary.fees, reference.summary.fees, "fees (groups {groups}, seed {seed})");
    assert_eq!(summary.supply, reference.summary.supply, "supply (groups {groups}, seed {seed})");
    assert_eq!(summary.books, reference.summary.books, "books (groups {groups}, seed {seed})");
    assert_eq!(summary.orders_resting, reference.summary.orders_resting);
    assert_eq!(summary.suspended, reference.summary.suspended, "suspended (groups {groups}, seed {seed})");
    assert_eq!(summary.external_ids, reference.summary.external_ids);
    assert_eq!(summary.external_ids.len(), ACCOUNTS as usize / 2);
    assert_eq!(summary.fairness, reference.summary.fairness);
    let expired = |key| matches!(reference.outcomes[key], Outcome::Ok { id } if id > 0);
    assert!(closes.iter().any(expired), "no close of the day expired an order");
    // The account parts know exactly the open buys a move may be charged for: resting
    // ones and waiting stop-limits (none stale after a cancel, a fill or an expiry).
    let open_buys: usize = (0..ACCOUNTS)
        .flat_map(|a| engine.open_orders(AccountId(a)))
        .filter(|view| view.record.side == Side::Buy)
        .filter(|view| {
            view.record.status == OrderStatus::Open || matches!(view.record.kind, OrderKind::StopLimit { .. })
        })
        .count();
    assert_eq!(parts.accounts.iter().map(|part| part.buys_known()).sum::<usize>(), open_buys, "buys known");
    assert!(summary.fairness.is_some());
    run
}

#[test]
fn one_group_matches_one_engine() {
    for seed in 1..=4 {
        differential(1, seed, 3_000);
    }
}

/// Books move with orders in flight on both sides of the cut: some sent to the old
/// group stamped past it (relayed with the book), some sent there after their group
/// applied the move (stamped at or below it).
fn assert_crossed(total: (u64, u64)) {
    eprintln!("orders across a move's cut: {} relayed with the book, {} sent behind the cut", total.0, total.1);
    assert!(total.0 > 0 && total.1 > 0, "no order crossed a move's cut the slow way: {total:?}");
}

#[test]
fn two_groups_match_one_engine_whatever_the_interleaving() {
    let mut total = (0, 0);
    for seed in 1..=12 {
        let (relayed, behind) = differential(2, seed, 3_000);
        total = (total.0 + relayed, total.1 + behind);
    }
    assert_crossed(total);
}

#[test]
fn three_and_four_groups_match_one_engine() {
    let mut total = (0, 0);
    for seed in 1..=8 {
        for groups in [3, 4] {
            let (relayed, behind) = differential(groups, seed, 3_000);
            total = (total.0 + relayed, total.1 + behind);
        }
    }
    assert_crossed(total);
}

#[test]
fn a_meta_group_and_data_groups_match_one_engine_with_and_without_faults() {
    let mut total = (0, 0);
    for seed in 1..=4 {
        for (groups, faults) in [(2, false), (3, false), (4, true)] {
            let (relayed, behind) = with_meta_group(groups, seed, 3_000, faults);
            total = (total.0 + relayed, total.1 + behind);
        }
    }
    // A meta group stamps a move's cut at its own latest tick, which its data groups
    // have passed by the time they apply the move: no order is sent behind the cut, but
    // many stamped past it are relayed with the book.
    eprintln!("orders across a move's cut: {} relayed with the book, {} sent behind the cut", total.0, total.1);
    assert!(total.0 > 0, "no order was relayed with a moving book: {total:?}");
}

/// The groups as logs and state machines: every message between groups is a numbered
/// output ingested by a committed entry. Ingests that resend what was applied, ingests
/// that would leave a gap, crashes rebuilt from a snapshot and the log, compactions and
/// trims of consumed outputs: the end is still one engine's, every command answered
/// once.
fn replicated(groups: u32, seed: u64, commands: usize) -> bourse_shard::Stats {
    let harness =
        compare(Replicated::new(groups, EngineConfig::default(), seed ^ 0xfa17, true), groups, seed, commands);
    for machine in harness.machines() {
        for source in (0..groups as usize).filter(|&s| s != machine.group()) {
            assert_eq!(
                machine.cursor(source),
                harness.machines().nth(source).expect("a group").produced(machine.group())
            );
        }
    }
    harness.stats
}

#[test]
fn replicated_groups_match_one_engine_through_resends_gaps_crashes_and_trims() {
    let mut total = bourse_shard::Stats::default();
    for (groups, seeds) in [(1, 1..=2), (2, 1..=5), (3, 1..=3), (4, 1..=3)] {
        for seed in seeds {
            let stats = replicated(groups, seed, 2_000);
            assert!(stats.crashes > 0 && stats.replayed > 0 && stats.snapshots > 0, "{stats:?}");
            total.resent += stats.resent;
            total.gaps += stats.gaps;
            total.trimmed += stats.trimmed;
            total.crashes += stats.crashes;
            total.ingests += stats.ingests;
            total.overtaken += stats.overtaken;
            total.repeated += stats.repeated;
            total.moved += stats.moved;
        }
    }
    assert!(total.moved > 20, "books moved between groups: {total:?}");
    assert!(total.resent > 100 && total.gaps > 10 && total.trimmed > 1_000 && total.ingests > 10_000, "{total:?}");
    assert!(total.overtaken > 100 && total.repeated > 100, "{total:?}");
    eprintln!("{total:?}");
}

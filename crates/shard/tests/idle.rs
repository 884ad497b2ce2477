//! A symbol part whose books were idle for longer than the engine remembers a client
//! (`client_expiry_secs`, a day of log time) still takes orders: the engine forgot the
//! part's own client, whose numbering then starts again. Found by the first
//! `bourse cluster up --groups`: its genesis is stamped long before the first order, and
//! every order was refused as `sequence_gap`. And a book moves out of a group that
//! gets no command after the move (see the second test).

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, EngineConfig, Outcome, Px, Qty, Side, SymbolId};
use bourse_shard::Replicated;

const DAY_NS: u64 = 86_400 * 1_000_000_000;

/// A symbol `name` of asset `base` in USD (asset 0), tick and lot 1, no fees.
fn create_symbol(name: &str, base: u32) -> CommandBody {
    CommandBody::CreateSymbol(Box::new(SymbolSpec {
        name: name.into(),
        base: AssetId(base),
        quote: AssetId(0),
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    }))
}

#[test]
fn orders_after_days_without_any_are_matched_not_refused_for_a_gap() {
    let mut groups = Replicated::new(2, EngineConfig::default(), 7, false);
    let mut seq = 0;
    let mut ts = 1_000 * DAY_NS;
    let mut submit = |groups: &mut Replicated, ts: u64, body: CommandBody| {
        seq += 1;
        let outcome = groups.submit(Command { client: ClientId(0), seq, ts, body }).expect("carried");
        groups.drain();
        outcome
    };
    submit(&mut groups, ts, CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
    submit(&mut groups, ts + 1, CommandBody::CreateAsset { name: "S".into(), decimals: 0 });
    submit(&mut groups, ts + 2, create_symbol("S/USD", 1));
    for a in 0..2 {
        submit(&mut groups, ts + 3, CommandBody::CreateAccount);
        let account = AccountId(a);
        submit(&mut groups, ts + 4, CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1_000_000) });
        submit(&mut groups, ts + 5, CommandBody::Credit { account, asset: AssetId(1), amount: Amount(1_000) });
    }
    groups.take_acks();
    // Three idle days, then a sell and a buy that cross, then three more and a sell,
    // each from a client of its own (the groups forget an idle client's session too).
    for (n, (days, account, side)) in
        [(3, 0, Side::Sell), (0, 1, Side::Buy), (3, 0, Side::Sell)].into_iter().enumerate()
    {
        ts += days * DAY_NS + 1_000;
        let request = OrderRequest::limit(AccountId(account), SymbolId(0), side, Px(100), Qty(5), Tif::Gtc);
        let command = Command { client: ClientId(10 + n as u64), seq: 1, ts, body: CommandBody::Place(request) };
        groups.submit(command).expect("carried");
        groups.drain();
        let acks = groups.take_acks();
        assert_eq!(acks.len(), 1, "{acks:?}");
        assert!(matches!(acks[0].outcome, Outcome::Ok { .. }), "after {days} idle days: {acks:?}");
    }
    groups.conservation().expect("every asset conserved");
    let summary = groups.summary();
    // The buy took the first sell; the second rests.
    assert_eq!(summary.orders_resting, 1, "{summary:?}");
    assert_eq!(summary.balances.get(&(AccountId(1), AssetId(1))), Some(&(1_005, 0)), "{summary:?}");
}

/// A book moves although the group it leaves gets no command after the move: that
/// group's watermark must pass the move's cut before it hands the book over, so its
/// front ticks past it (`GroupMachine::behind_a_cut`). Found by `groups_cli`: an order
/// of a group-1 account on a group-0 book left group 0's stamp (its tick to release the
/// order) past group 1's last one; the move of symbol 1's book out of group 1, cut at
/// group 0's stamp, then waited for good on the idle group 1.
#[test]
fn a_book_moves_out_of_a_group_that_is_idle_after_the_move() {
    let mut groups = Replicated::new(2, EngineConfig::default(), 7, false);
    groups.tick_as_members();
    let mut seq = 0;
    let ts = 1_000 * DAY_NS;
    let mut operate = |groups: &mut Replicated, body: CommandBody| {
        seq += 1;
        groups.submit(Command { client: ClientId(0), seq, ts, body }).expect("carried")
    };
    operate(&mut groups, CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
    for name in ["S", "T"] {
        operate(&mut groups, CommandBody::CreateAsset { name: name.into(), decimals: 0 });
    }
    for (name, base) in [("S/USD", 1), ("T/USD", 2)] {
        operate(&mut groups, create_symbol(name, base));
    }
    let map = bourse_shard::ShardMap::new(2);
    assert_eq!((map.symbol_group(SymbolId(0)), map.symbol_group(SymbolId(1))), (0, 1));
    for _ in 0..4 {
        operate(&mut groups, CommandBody::CreateAccount);
    }
    let account = (0..4).map(AccountId).find(|&a| map.account_group(a) == 1).expect("an account of group 1");
    let client = |seq, ts, body| Command { client: ClientId(10), seq, ts, body };
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1_000_000) };
    groups.submit(client(1, ts + 1_000, deposit)).expect("carried");
    // The group-1 account's order on group 0's book, the last command.
    let request = OrderRequest::limit(account, SymbolId(0), Side::Buy, Px(100), Qty(5), Tif::Gtc);
    groups.submit(client(2, ts + 2_000, CommandBody::Place(request))).expect("carried");
    groups.drain();
    assert!(groups.take_acks().iter().all(|ack| matches!(ack.outcome, Outcome::Ok { .. })));
    groups.move_symbol(SymbolId(1), 0).expect("the move is taken");
    groups.drain();
    for machine in groups.machines() {
        assert!(
            machine.symbol.leaving.is_empty() && machine.symbol.arriving.is_empty() && machine.moving().count() == 0,
            "group {}: the move is not done: leaving {:?}, arriving {:?}",
            machine.group(),
            machine.symbol.leaving,
            machine.symbol.arriving
        );
        assert_eq!(machine.account.symbol_group(SymbolId(1)), 0);
    }
    groups.conservation().expect("every asset conserved");
}

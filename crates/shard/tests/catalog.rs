//! Catalog and account commands sent to running groups: the catalog's group
//! (`CATALOG_GROUP`) applies each under its client's session and passes it on to every
//! other group in its output stream, so every group applies them in one order; and an
//! order never reaches a symbol part that has not yet applied the catalog command its
//! account part had (`Forward::catalog`), whatever the stamps say. The close of the
//! day goes the same way, as a cut at its stamp in every symbol part's merge.

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{
    AccountId, Amount, AssetId, ClientId, EngineConfig, Outcome, Px, Qty, Reject, Side, SymbolId, Timestamp,
};
use bourse_shard::machine::{conservation, Entry, Output};
use bourse_shard::{Ack, GroupMachine, Replicated, ShardMap, CATALOG_GROUP};

const T: Timestamp = 1_000_000_000_000;
const OPERATOR: ClientId = ClientId(9);

/// Three groups holding USD, S0–S2 (symbol `s` in group `s`) and four accounts, built
/// as the genesis builds them (its catalog commands through the catalog's group too).
fn groups() -> Vec<GroupMachine> {
    let mut replicated = Replicated::new(3, EngineConfig::default(), 0, false);
    let mut seq = 0;
    let mut submit = |body: CommandBody| {
        seq += 1;
        let outcome = replicated.submit(Command { client: ClientId(0), seq, ts: seq * 10, body }).expect("carried");
        assert!(matches!(outcome, Some(Outcome::Ok { .. })), "{outcome:?}");
    };
    submit(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 });
    for s in 0..3u32 {
        submit(CommandBody::CreateAsset { name: format!("S{s}"), decimals: 0 });
    }
    for s in 0..3u32 {
        submit(CommandBody::CreateSymbol(Box::new(SymbolSpec {
            name: format!("S{s}/USD"),
            base: AssetId(1 + s),
            quote: AssetId(0),
            tick: Px(1),
            lot: Qty(1),
            px_min: Px(1),
            px_max: Px(1_000_000),
            fee_maker: Amount(0),
            fee_taker: Amount(0),
            policy: MatchPolicy::Fifo,
        })));
    }
    for _ in 0..4 {
        submit(CommandBody::CreateAccount);
    }
    replicated.drain();
    replicated.machines().cloned().collect()
}

fn clients(machines: &mut [GroupMachine], g: usize, commands: Vec<Command>, tick: Timestamp) -> Vec<Ack> {
    let mut acks = Vec::new();
    machines[g].apply(&Entry::Clients { commands, tick }, &mut acks).expect("a client entry is never refused");
    acks
}

/// `to` ingests up to `max` of `from`'s outputs to it past its cursor.
fn ingest(machines: &mut [GroupMachine], from: usize, to: usize, max: usize) -> Vec<Ack> {
    let cursor = machines[to].cursor(from);
    let (start, outputs) = machines[from].outputs(to, cursor + 1, max);
    let mut acks = Vec::new();
    if !outputs.is_empty() {
        machines[to].apply(&Entry::Ingest { source: from, from: start, outputs }, &mut acks).expect("no gap");
    }
    acks
}

fn operator(seq: u64, ts: Timestamp, body: CommandBody) -> Command {
    Command { client: OPERATOR, seq, ts, body }
}

#[test]
fn a_catalog_command_applies_in_the_catalog_group_and_reaches_every_other_in_its_order() {
    let mut machines = groups();
    let before = machines[0].catalog();
    let sent_before: Vec<u64> = (0..3).map(|g| machines[0].produced(g)).collect();
    let commands = vec![
        operator(1, T, CommandBody::CreateAccount),
        operator(2, T + 1, CommandBody::CreateAsset { name: "X".into(), decimals: 0 }),
        // Refused (the name is taken): nothing is passed on.
        operator(3, T + 2, CommandBody::CreateAsset { name: "X".into(), decimals: 0 }),
    ];
    let acks = clients(&mut machines, CATALOG_GROUP, commands, T + 3);
    let outcomes: Vec<Outcome> = acks.iter().map(|ack| ack.outcome).collect();
    assert_eq!(
        outcomes,
        [Outcome::Ok { id: 4 }, Outcome::Ok { id: 4 }, Outcome::Rejected(Reject::NameTaken)],
        "the fifth account, the fifth asset, and a name taken"
    );
    assert_eq!(machines[0].catalog(), before + 2);
    for g in 1..3 {
        let sent = machines[0].outputs(g, sent_before[g] + 1, 100).1;
        let configs = sent.into_iter().filter(|o| matches!(o, Output::Config { .. }));
        assert_eq!(configs.count(), 2, "the accepted two go to group {g}, the refused one does not");
        assert_eq!(machines[g].catalog(), before, "group {g} has not ingested them yet");
        ingest(&mut machines, 0, g, 100);
    }
    for machine in &machines {
        assert_eq!(machine.catalog(), before + 2, "group {}", machine.group());
        assert_eq!(machine.account.accounts_known(), 5, "group {}", machine.group());
        let asset = machine.symbol.engine().asset_info(AssetId(4)).expect("every group knows the new asset");
        assert_eq!(asset.name, "X");
    }

    // The client's session with the catalog's group: a retry is answered from its
    // memory and applies nothing again; a number past the next is a gap.
    let produced = machines[0].produced(1);
    let retry = clients(&mut machines, CATALOG_GROUP, vec![operator(2, T + 4, CommandBody::CreateAccount)], T + 5);
    assert_eq!(retry.len(), 1);
    assert!(retry[0].repeat, "{retry:?}");
    assert_eq!(retry[0].outcome, Outcome::Ok { id: 4 }, "the first answer, not a new account");
    let gap = clients(&mut machines, CATALOG_GROUP, vec![operator(5, T + 6, CommandBody::CreateAccount)], T + 7);
    assert_eq!(gap[0].outcome, Outcome::Rejected(Reject::SequenceGap));
    assert_eq!(machines[0].catalog(), before + 2);
    assert_eq!(machines[0].account.accounts_known(), 5);
    let configs_since = machines[0].outputs(1, produced + 1, 100).1;
    assert!(configs_since.iter().all(|o| !matches!(o, Output::Config { .. })), "{configs_since:?}");

    // A group other than the catalog's applies no catalog command from its clients
    // (members send them to the catalog's group): one in its log does nothing.
    let elsewhere = clients(&mut machines, 1, vec![operator(1, T + 8, CommandBody::CreateAccount)], T + 9);
    assert!(elsewhere.is_empty(), "{elsewhere:?}");
    assert_eq!(machines[1].account.accounts_known(), 5);
    assert_eq!(machines[1].account.session(OPERATOR), 0);
}

#[test]
fn an_order_that_outruns_its_new_account_waits_in_the_merge_until_the_account_has_come() {
    let mut machines = groups();
    let map = ShardMap::new(3);
    // The catalog's group moves its watermark to T + 600, then creates accounts until
    // one lives in another group (A), all stamped from T + 1,000 on.
    clients(&mut machines, CATALOG_GROUP, Vec::new(), T + 600);
    let mut seq = 0;
    let account = loop {
        seq += 1;
        let acks = clients(
            &mut machines,
            CATALOG_GROUP,
            vec![operator(seq, T + 1_000 + seq, CommandBody::CreateAccount)],
            T + 1_000 + seq,
        );
        let Outcome::Ok { id } = acks[0].outcome else { panic!("{acks:?}") };
        let account = AccountId(id as u32);
        if map.account_group(account) != CATALOG_GROUP {
            break account;
        }
    };
    let a = map.account_group(account);
    // The book lives in the third group (S): neither the catalog's nor the account's.
    let s = 3 - a;
    let symbol = SymbolId(s as u32);
    assert_eq!(map.symbol_group(symbol), s);

    // A hears of the account, and its client (on a clock behind the catalog's group)
    // funds it and places a buy stamped before the account's creation.
    ingest(&mut machines, CATALOG_GROUP, a, 1_000);
    let trader = ClientId(21);
    let buy = OrderRequest::limit(account, symbol, Side::Buy, Px(100), Qty(5), Tif::Gtc);
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1_000_000) };
    let acks = clients(
        &mut machines,
        a,
        vec![
            Command { client: trader, seq: 1, ts: T + 500, body: deposit },
            Command { client: trader, seq: 2, ts: T + 501, body: CommandBody::Place(buy) },
        ],
        T + 502,
    );
    assert_eq!(acks.len(), 1, "the deposit answered, the buy on its way: {acks:?}");
    assert_eq!(acks[0].outcome, Outcome::Ok { id: 0 });

    // S has the buy and every source's watermark past its stamp (the catalog group's
    // T + 600, from before the account's creation), but not the account itself.
    ingest(&mut machines, a, s, 1_000);
    clients(&mut machines, s, Vec::new(), T + 700);
    ingest(&mut machines, CATALOG_GROUP, s, 1);
    assert!(machines[s].symbol.merge.floor() > T + 501, "the watermarks let the buy through");
    assert_eq!(machines[s].symbol.merge.waiting(), 1, "the buy waits for its account");
    assert!(machines[s].account.accounts_known() < machines[a].account.accounts_known());
    conservation(&machines.iter().collect::<Vec<_>>()).expect("the hold is in the merge");

    // The account reaches S: the buy applies and rests, and its answer goes back to A.
    ingest(&mut machines, CATALOG_GROUP, s, 1_000);
    assert_eq!(machines[s].symbol.merge.waiting(), 0);
    let answered = ingest(&mut machines, s, a, 1_000);
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!((answered[0].client, answered[0].seq), (trader, 2));
    assert!(matches!(answered[0].outcome, Outcome::Ok { .. }), "{answered:?}");
    let depth = machines[s].symbol.engine().depth(symbol, 1).expect("listed");
    assert_eq!(depth.bids, vec![(Px(100), Qty(5))]);
    for g in 0..3 {
        for from in 0..3 {
            if from != g {
                ingest(&mut machines, from, g, 1_000);
            }
        }
    }
    conservation(&machines.iter().collect::<Vec<_>>()).expect("every asset conserved");
}

/// Every group ticks to `tick`, then ingests everything the others have for it, until
/// nothing is left; the acknowledgements that came.
fn drain(machines: &mut [GroupMachine], tick: Timestamp) -> Vec<Ack> {
    let mut acks = Vec::new();
    for g in 0..machines.len() {
        acks.extend(clients(machines, g, Vec::new(), tick));
    }
    for _ in 0..6 {
        for to in 0..machines.len() {
            for from in (0..machines.len()).filter(|&from| from != to) {
                acks.extend(ingest(machines, from, to, 1_000));
            }
        }
    }
    acks
}

#[test]
fn a_close_of_the_day_is_a_cut_at_its_stamp_in_every_merge_whenever_it_arrives() {
    let mut machines = groups();
    let map = ShardMap::new(3);
    // The account lives in A, the book in S, and neither is the catalog's group.
    let account = (0..4).map(AccountId).find(|&a| map.account_group(a) != CATALOG_GROUP).expect("an account");
    let a = map.account_group(account);
    let s = 3 - a;
    let symbol = SymbolId(s as u32);
    let trader = ClientId(21);
    let day_buy =
        |px, qty| CommandBody::Place(OrderRequest::limit(account, symbol, Side::Buy, Px(px), Qty(qty), Tif::Day));
    let deposit = CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1_000_000) };
    let acks = clients(
        &mut machines,
        a,
        vec![
            Command { client: trader, seq: 1, ts: T, body: deposit },
            Command { client: trader, seq: 2, ts: T + 1, body: day_buy(100, 5) },
        ],
        T + 1,
    );
    assert_eq!(acks.len(), 1, "the deposit answered: {acks:?}");
    // The operator closes the day at T + 2, between the buy before it and one after.
    let closed = clients(&mut machines, CATALOG_GROUP, vec![operator(1, T + 2, CommandBody::CloseDay)], T + 2);
    assert!(closed.is_empty(), "answered once every group has reported: {closed:?}");
    assert_eq!(machines[0].account.closes_pending(), 1);
    assert!(machines[0].move_refused(symbol, a).is_some_and(|why| why.contains("close of the day")));
    clients(&mut machines, a, vec![Command { client: trader, seq: 3, ts: T + 3, body: day_buy(101, 3) }], T + 3);

    // S hears both buys before the cut: its merge still takes them in stamp order, the
    // cut between them.
    ingest(&mut machines, a, s, 1_000);
    ingest(&mut machines, CATALOG_GROUP, s, 1_000);
    let acks = drain(&mut machines, T + 10);
    let outcome = |client, seq| acks.iter().find(|ack| (ack.client, ack.seq) == (client, seq)).map(|ack| ack.outcome);
    assert_eq!(outcome(OPERATOR, 1), Some(Outcome::Ok { id: 1 }), "one Day order expired: {acks:?}");
    let Some(Outcome::Ok { id: first }) = outcome(trader, 2) else { panic!("{acks:?}") };
    assert!(matches!(outcome(trader, 3), Some(Outcome::Ok { .. })), "{acks:?}");
    let engine = machines[s].symbol.engine();
    assert_eq!(engine.depth(symbol, 5).expect("listed").bids, vec![(Px(101), Qty(3))], "the later buy rests");
    let record = engine.order(bourse_engine::OrderId(first)).expect("kept").record;
    assert_eq!(record.status, bourse_engine::OrderStatus::Expired);
    // The expired buy's hold is back; the resting one's is held.
    assert_eq!(machines[a].account.available(account, AssetId(0)), 1_000_000 - 303);
    for machine in &machines {
        assert_eq!(machine.account.closes_pending(), 0);
        assert_eq!(machine.symbol.merge.waiting(), 0);
    }
    assert_eq!(machines[0].move_refused(symbol, a), None);
    conservation(&machines.iter().collect::<Vec<_>>()).expect("every asset conserved");
    // A retry of the close is answered from the operator's session: nothing expires again.
    let retry = clients(&mut machines, CATALOG_GROUP, vec![operator(1, T + 11, CommandBody::CloseDay)], T + 11);
    assert_eq!(retry.len(), 1);
    assert!(retry[0].repeat);
    assert_eq!(retry[0].outcome, Outcome::Ok { id: 1 });
}

#[test]
fn a_close_is_refused_while_a_book_moves() {
    let mut machines = groups();
    let mut acks = Vec::new();
    machines[0].apply(&Entry::MoveSymbol { symbol: SymbolId(1), to: 2 }, &mut acks).expect("applied");
    let refused = clients(&mut machines, CATALOG_GROUP, vec![operator(1, T, CommandBody::CloseDay)], T);
    assert_eq!(refused.len(), 1);
    assert_eq!(refused[0].outcome, Outcome::Rejected(Reject::BookMoving));
    assert_eq!(machines[0].account.closes_pending(), 0);
    drain(&mut machines, T + 1);
    assert_eq!(machines[0].moving().count(), 0, "the book has come to group 2");
    clients(&mut machines, CATALOG_GROUP, vec![operator(2, T + 2, CommandBody::CloseDay)], T + 2);
    let acks = drain(&mut machines, T + 3);
    assert_eq!(acks.len(), 1, "{acks:?}");
    assert_eq!((acks[0].seq, acks[0].outcome), (2, Outcome::Ok { id: 0 }));
}

/// A book's orders on either side of its move's cut apply in stamp order, whichever
/// group each was sent to. The sell is sent by a group that has applied the move (to
/// the new group), the later buy by one that has not (to the old group, which relays
/// it with the book): one engine would match them, and so do the groups.
#[test]
fn orders_of_a_moving_book_apply_in_stamp_order_whichever_group_they_reached() {
    let mut machines = groups();
    let map = ShardMap::new(3);
    let (seller, buyer) = (AccountId(0), AccountId(2));
    assert_eq!((map.account_group(seller), map.account_group(buyer)), (CATALOG_GROUP, 2));
    // Symbol 1's book lives in group 1 and moves to group 2.
    let (symbol, old, new) = (SymbolId(1), 1, 2);
    let (alice, bob) = (ClientId(31), ClientId(32));
    let shares = CommandBody::Deposit { account: seller, asset: AssetId(2), amount: Amount(5) };
    clients(&mut machines, CATALOG_GROUP, vec![Command { client: alice, seq: 1, ts: T, body: shares }], T + 5);
    let cash = CommandBody::Deposit { account: buyer, asset: AssetId(0), amount: Amount(1_000) };
    clients(&mut machines, new, vec![Command { client: bob, seq: 1, ts: T + 1, body: cash }], T + 1);

    // The move, cut at the catalog's group's last stamp (T + 5).
    let mut acks = Vec::new();
    machines[CATALOG_GROUP].apply(&Entry::MoveSymbol { symbol, to: new }, &mut acks).expect("applied");
    // The catalog's group has applied it: its sell, stamped past the cut, goes to the
    // new group.
    let sell = OrderRequest::limit(seller, symbol, Side::Sell, Px(100), Qty(5), Tif::Gtc);
    let sell = Command { client: alice, seq: 2, ts: T + 10, body: CommandBody::Place(sell) };
    clients(&mut machines, CATALOG_GROUP, vec![sell], T + 10);
    assert!(machines[CATALOG_GROUP].outputs(new, 1, usize::MAX).1.iter().any(|output| matches!(
        output, Output::Forward(forward) if forward.stamp == T + 10
    )));
    // The new group has not heard of the move yet: its buy, stamped later still, goes
    // to the old group.
    let buy = OrderRequest::limit(buyer, symbol, Side::Buy, Px(100), Qty(5), Tif::Ioc);
    let buy = Command { client: bob, seq: 2, ts: T + 20, body: CommandBody::Place(buy) };
    clients(&mut machines, new, vec![buy], T + 20);
    let to_old = machines[new].outputs(old, 1, usize::MAX).1;
    assert!(to_old.iter().any(|output| matches!(output, Output::Forward(forward) if forward.stamp == T + 20)));

    let acks = drain(&mut machines, T + 30);
    let outcome = |client, seq| acks.iter().find(|ack| (ack.client, ack.seq) == (client, seq)).map(|ack| ack.outcome);
    assert!(matches!(outcome(alice, 2), Some(Outcome::Ok { .. })), "{acks:?}");
    assert!(matches!(outcome(bob, 2), Some(Outcome::Ok { .. })), "{acks:?}");
    assert_eq!(machines[0].moving().count(), 0, "the book has come");
    // The buy met the sell: the book is empty, the shares and the cash changed hands.
    let depth = machines[new].symbol.engine().depth(symbol, 5).expect("listed");
    assert!(depth.bids.is_empty() && depth.asks.is_empty(), "{depth:?}");
    assert_eq!(machines[new].account.available(buyer, AssetId(2)), 5);
    assert_eq!(machines[new].account.available(buyer, AssetId(0)), 500);
    assert_eq!(machines[CATALOG_GROUP].account.available(seller, AssetId(0)), 500);
    assert_eq!(machines[new].cut_crossings().0, 1, "the buy came with the book");
    for machine in &machines {
        assert_eq!(machine.symbol.merge.waiting(), 0);
    }
    conservation(&machines.iter().collect::<Vec<_>>()).expect("every asset conserved");
}

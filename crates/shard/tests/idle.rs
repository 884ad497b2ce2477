//! A symbol part whose books were idle for longer than the engine remembers a client
//! (`client_expiry_secs`, a day of log time) still takes orders: the engine forgot the
//! part's own client, whose numbering then starts again. Found by the first
//! `bourse cluster up --groups`: its genesis is stamped long before the first order, and
//! every order was refused as `sequence_gap`.

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, EngineConfig, Outcome, Px, Qty, Side, SymbolId};
use bourse_shard::Replicated;

const DAY_NS: u64 = 86_400 * 1_000_000_000;

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
    let spec = SymbolSpec {
        name: "S/USD".into(),
        base: AssetId(1),
        quote: AssetId(0),
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    };
    submit(&mut groups, ts + 2, CommandBody::CreateSymbol(Box::new(spec)));
    for a in 0..2 {
        submit(&mut groups, ts + 3, CommandBody::CreateAccount);
        let account = AccountId(a);
        submit(&mut groups, ts + 4, CommandBody::Deposit { account, asset: AssetId(0), amount: Amount(1_000_000) });
        submit(&mut groups, ts + 5, CommandBody::Credit { account, asset: AssetId(1), amount: Amount(1_000) });
    }
    groups.take_acks();
    // Three idle days, then a sell and a buy that cross, then three more and a cancel.
    for (days, account, side) in [(3, 0, Side::Sell), (0, 1, Side::Buy), (3, 0, Side::Sell)] {
        ts += days * DAY_NS + 1_000;
        let request = OrderRequest::limit(AccountId(account), SymbolId(0), side, Px(100), Qty(5), Tif::Gtc);
        submit(&mut groups, ts, CommandBody::Place(request));
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

//! Scenarios for accounts created with an id their owner chose
//! (`CreateAccountWithId`: one step, opening balance included, id unique for ever) and
//! for what closed order records tell (their closing stamp, the quantity a cancel
//! took). Run against both books.

#[macro_use]
mod common;

use bourse_engine::book::{Book, FastBook, ReferenceBook};
use bourse_engine::command::{CommandBody, MatchPolicy, Stp};
use bourse_engine::{
    AccountId, Amount, Applied, AssetId, Engine, EngineConfig, Event, OrderStatus, Outcome, Qty, Reject,
};
use common::{market, Harness, OrderRequestExt};

both_books!(
    an_account_with_an_id_opens_with_its_deposit_in_one_step,
    a_zero_deposit_opens_an_empty_account,
    a_taken_id_is_refused_and_changes_nothing,
    bad_deposits_are_refused_and_leave_the_id_free,
    the_account_bound_applies,
    external_ids_survive_snapshot_and_restore,
    a_cancelled_order_tells_when_and_how_much,
    a_filled_order_tells_when_it_filled,
    self_trade_prevention_closes_the_resting_order_at_the_incoming_stamp,
);

fn with_id(external_id: u64, asset: AssetId, deposit: i64) -> CommandBody {
    CommandBody::CreateAccountWithId { external_id, asset, deposit: Amount(deposit) }
}

fn an_account_with_an_id_opens_with_its_deposit_in_one_step<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let supply = h.engine.asset_info(m.usd).unwrap().supply.0;
    let applied = h.run(with_id(42, m.usd, 1_000));
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: 2 }, duplicate: false });
    let account = AccountId(2);
    assert_eq!(h.events, vec![Event::AccountCreated { account }, m.usd_balance(account, 1_000, 0)]);
    assert_eq!(h.engine.account_by_external_id(42), Some(account));
    assert_eq!(h.engine.account_external_id(account), Some(42));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().supply.0, supply + 1_000);
    // Accounts made the other way have no external id, and ids are not account numbers.
    assert_eq!(h.engine.account_external_id(m.accounts[0]), None);
    assert_eq!(h.engine.account_by_external_id(0), None);
    assert_eq!(h.engine.account_by_external_id(2), None);
    // The account trades like any other.
    h.place_ok(m.buy(account, 100, 10));
    assert_eq!(h.balance_of(account, m.usd), (0, 1_000));
}

fn a_zero_deposit_opens_an_empty_account<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let supply = h.engine.asset_info(m.usd).unwrap().supply;
    let id = h.ok(with_id(0, m.usd, 0));
    let account = AccountId(id as u32);
    assert_eq!(h.events, vec![Event::AccountCreated { account }]);
    assert_eq!(h.engine.balances(account), Some(&[][..]));
    assert_eq!(h.engine.account_by_external_id(0), Some(account));
    assert_eq!(h.engine.asset_info(m.usd).unwrap().supply, supply);
}

fn a_taken_id_is_refused_and_changes_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let first = AccountId(h.ok(with_id(u64::MAX, m.usd, 500)) as u32);
    h.reject(with_id(u64::MAX, m.usd, 700), Reject::AccountIdTaken);
    // Whatever the deposit and asset: the id decides first.
    h.reject(with_id(u64::MAX, AssetId(99), -1), Reject::AccountIdTaken);
    assert_eq!(h.engine.account_by_external_id(u64::MAX), Some(first));
    assert_eq!(h.balance_of(first, m.usd), (500, 0));
    assert_eq!(h.engine.accounts_len(), 2);
}

fn bad_deposits_are_refused_and_leave_the_id_free<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    h.reject(with_id(7, AssetId(99), 10), Reject::AssetUnknown);
    h.reject(with_id(7, m.usd, -1), Reject::AmountMustBePositive);
    h.reject(with_id(7, m.usd, i64::MAX), Reject::AmountOverflow);
    assert_eq!(h.engine.account_by_external_id(7), None);
    let account = AccountId(h.ok(with_id(7, m.usd, 1)) as u32);
    assert_eq!(h.engine.account_by_external_id(7), Some(account));
}

fn the_account_bound_applies<B: Book>() {
    let mut h = Harness::<B>::with_config(EngineConfig { accounts_max: 1, ..EngineConfig::default() });
    let usd = AssetId(h.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 8 }) as u32);
    h.ok(with_id(1, usd, 5));
    h.reject(with_id(2, usd, 5), Reject::LimitReached);
    h.reject(CommandBody::CreateAccount, Reject::LimitReached);
}

fn external_ids_survive_snapshot_and_restore<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    for external_id in [9, 3, 1 << 60] {
        h.ok(with_id(external_id, m.usd, 100));
    }
    let bytes = h.engine.snapshot();
    let fast = Engine::<FastBook>::restore(&bytes).unwrap();
    let reference = Engine::<ReferenceBook>::restore(&bytes).unwrap();
    assert_eq!(fast.state_hash(), h.engine.state_hash());
    assert_eq!(reference.state_hash(), h.engine.state_hash());
    for engine_ids in [
        [fast.account_by_external_id(9), fast.account_by_external_id(3), fast.account_by_external_id(1 << 60)],
        [
            reference.account_by_external_id(9),
            reference.account_by_external_id(3),
            reference.account_by_external_id(1 << 60),
        ],
    ] {
        assert_eq!(engine_ids, [Some(AccountId(1)), Some(AccountId(2)), Some(AccountId(3))]);
    }
    fast.check_invariants();
    reference.check_invariants();
    // A restored engine still refuses a taken id.
    h.engine = Engine::restore(&bytes).unwrap();
    h.reject(with_id(3, m.usd, 1), Reject::AccountIdTaken);
}

fn a_cancelled_order_tells_when_and_how_much<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let sell = h.place_ok(m.sell(a, 100, 10));
    let ts_sell = h.ts;
    h.place_ok(m.buy(b, 100, 4));
    let ts_buy = h.ts;
    let open = h.order_view(sell);
    assert_eq!((open.record.status, open.record.ts_closed, open.qty_cancelled), (OrderStatus::Open, 0, Qty(0)));
    h.ok(m.cancel(a, sell));
    let ts_cancel = h.ts;
    let view = h.order_view(sell);
    assert_eq!(view.record.status, OrderStatus::Cancelled);
    assert_eq!((view.record.ts, view.record.ts_closed), (ts_sell, ts_cancel));
    assert_eq!((view.record.qty_filled, view.qty_cancelled, view.qty_open), (Qty(4), Qty(6), Qty(0)));
    assert_eq!(view.record.fills.len(), 1);
    assert_eq!(view.record.fills[0].ts, ts_buy, "a fill carries the stamp of the incoming order");
    // A reduce is not a cancellation: only the remainder cancelled at the end counts.
    let sell = h.place_ok(m.sell(a, 100, 10));
    h.ok(m.reduce(a, sell, 3));
    h.ok(m.cancel(a, sell));
    let view = h.order_view(sell);
    assert_eq!((view.record.qty_reduced, view.qty_cancelled, view.record.ts_closed), (Qty(3), Qty(7), h.ts));
}

fn a_filled_order_tells_when_it_filled<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    let sell = h.place_ok(m.sell(a, 100, 5));
    let buy = h.place_ok(m.buy(b, 101, 5));
    let ts_buy = h.ts;
    for id in [sell, buy] {
        let view = h.order_view(id);
        assert_eq!(view.record.status, OrderStatus::Filled);
        assert_eq!((view.record.ts_closed, view.qty_cancelled), (ts_buy, Qty(0)));
        assert_eq!(view.record.fills.iter().map(|f| (f.px.0, f.qty.0, f.ts)).collect::<Vec<_>>(), [(100, 5, ts_buy)]);
    }
}

fn self_trade_prevention_closes_the_resting_order_at_the_incoming_stamp<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let sell = h.place_ok(m.sell(a, 100, 5));
    h.place_ok(m.buy(a, 100, 2).with_stp(Stp::CancelResting));
    let view = h.order_view(sell);
    assert_eq!((view.record.status, view.qty_cancelled, view.record.ts_closed), (OrderStatus::Cancelled, Qty(5), h.ts));
}

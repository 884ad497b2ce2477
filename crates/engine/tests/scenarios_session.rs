//! Scenarios for exactly-once delivery (duplicates, gaps, the bounded window of
//! remembered outcomes), admin commands (assets, accounts, deposits, withdrawals,
//! credits, suspension) and the state hash across books and snapshots. Run against
//! both books.

#[macro_use]
mod common;

use bourse_engine::book::{Book, FastBook, ReferenceBook};
use bourse_engine::command::{CommandBody, MatchPolicy, Stp, Tif};
use bourse_engine::{
    AccountId, Amount, Applied, AssetId, ClientId, Engine, EngineConfig, Event, Outcome, Reject, Side,
};
use common::{market, Harness, Market, OrderRequestExt, USD_START};

both_books!(
    duplicate_returns_the_original_outcome_and_changes_nothing,
    duplicate_of_a_rejected_command_returns_the_rejection,
    sequence_gap_is_rejected_and_not_recorded,
    refused_command_from_a_new_client_leaves_no_trace,
    sequence_too_old_beyond_the_window_of_remembered_outcomes,
    clients_are_sequenced_independently,
    create_commands_return_the_new_ids,
    deposit_credit_and_withdraw_change_balance_and_supply,
    suspend_and_resume_refuse_the_state_the_account_is_in,
    snapshot_restores_to_the_same_state_hash,
    new_clients_past_clients_max_are_refused_and_leave_no_trace,
    idle_clients_expire_in_log_time_and_free_their_places,
    expiry_is_the_same_after_a_snapshot,
);

fn duplicate_returns_the_original_outcome_and_changes_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.place_ok(m.sell(a, 100, 10));
    let request = m.buy(b, 100, 4);
    let id = h.place_ok(request);
    let (client, seq) = (h.client, h.seq);
    let hash = h.engine.state_hash();
    let applied = h.apply_as(client, seq, CommandBody::Place(request));
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: id.0 }, duplicate: true });
    assert!(h.events.is_empty(), "a duplicate emits nothing: {:?}", h.events);
    assert_eq!(h.engine.state_hash(), hash);
    // The key is (client, seq): whatever the body, the first outcome is the answer.
    let applied = h.apply_as(client, 1, CommandBody::CreateAccount);
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: u64::from(m.usd.0) }, duplicate: true });
    assert!(h.events.is_empty());
    assert_eq!(h.engine.state_hash(), hash);
}

fn duplicate_of_a_rejected_command_returns_the_rejection<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let body = CommandBody::Withdraw { account: a, asset: m.usd, amount: Amount(USD_START + 1) };
    h.reject(body.clone(), Reject::BalanceInsufficient);
    let hash = h.engine.state_hash();
    // Money arriving since does not change the remembered answer.
    let applied = h.apply_as(h.client, h.seq, body);
    assert_eq!(applied, Applied { outcome: Outcome::Rejected(Reject::BalanceInsufficient), duplicate: true });
    assert!(h.events.is_empty());
    assert_eq!(h.engine.state_hash(), hash);
}

fn sequence_gap_is_rejected_and_not_recorded<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let hash = h.engine.state_hash();
    let skipped = h.seq + 2;
    let applied = h.apply_as(h.client, skipped, CommandBody::Place(m.buy(a, 100, 1)));
    assert_eq!(applied, Applied { outcome: Outcome::Rejected(Reject::SequenceGap), duplicate: false });
    assert_eq!(h.events, vec![Event::Rejected { reject: Reject::SequenceGap }]);
    assert_eq!(h.engine.state_hash(), hash);
    // The missing command, then the refused one, both apply.
    let first = h.place_ok(m.buy(a, 100, 1));
    assert_eq!(h.seq, skipped - 1);
    let second = h.place_ok(m.buy(a, 100, 1));
    assert_eq!(h.seq, skipped);
    assert_eq!(second.0, first.0 + 1);
}

fn refused_command_from_a_new_client_leaves_no_trace<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let stranger = ClientId(77);
    let hash = h.engine.state_hash();
    let body = CommandBody::Deposit { account: m.accounts[0], asset: m.usd, amount: Amount(1) };
    let applied = h.apply_as(stranger, 2, body.clone());
    assert_eq!(applied.outcome, Outcome::Rejected(Reject::SequenceGap));
    assert_eq!(h.engine.state_hash(), hash, "a refused stranger changed the state");
    let applied = h.apply_as(stranger, 0, body.clone());
    assert_eq!(applied.outcome, Outcome::Rejected(Reject::SequenceTooOld));
    assert_eq!(h.events, vec![Event::Rejected { reject: Reject::SequenceTooOld }]);
    assert_eq!(h.engine.state_hash(), hash, "a refused stranger changed the state");
    let applied = h.apply_as(stranger, 1, body);
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: 0 }, duplicate: false });
}

fn sequence_too_old_beyond_the_window_of_remembered_outcomes<B: Book>() {
    let mut h = Harness::<B>::with_config(EngineConfig { outcomes_per_client_max: 3, ..EngineConfig::default() });
    // Six commands: two assets, a symbol, an account (seq 4), a deposit and a credit.
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    assert_eq!(h.seq, 6);
    let hash = h.engine.state_hash();
    let applied = h.apply_as(h.client, 3, CommandBody::CreateAccount);
    assert_eq!(applied, Applied { outcome: Outcome::Rejected(Reject::SequenceTooOld), duplicate: false });
    assert_eq!(h.events, vec![Event::Rejected { reject: Reject::SequenceTooOld }]);
    assert_eq!(h.engine.state_hash(), hash);
    let applied = h.apply_as(h.client, 4, CommandBody::CreateAccount);
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: u64::from(m.accounts[0].0) }, duplicate: true });
    assert_eq!(h.engine.state_hash(), hash);
    assert_eq!(h.engine.accounts_len(), 1);
    // The window moves on with every applied command, rejected ones included.
    h.reject(CommandBody::Place(m.buy(m.accounts[0], 0, 1)), Reject::PxOutOfBounds);
    let applied = h.apply_as(h.client, 4, CommandBody::CreateAccount);
    assert_eq!(applied.outcome, Outcome::Rejected(Reject::SequenceTooOld));
    let applied = h.apply_as(h.client, 7, CommandBody::CreateAccount);
    assert_eq!(applied, Applied { outcome: Outcome::Rejected(Reject::PxOutOfBounds), duplicate: true });
}

fn clients_are_sequenced_independently<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    let other = ClientId(2);
    let deposit = CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(5) };
    assert_eq!(h.apply_as(other, 1, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    assert_eq!(h.apply_as(other, 2, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    // Client 1 is at seq 6 (its set-up commands): 3 is a duplicate, 7 is next.
    assert!(h.apply_as(h.client, 3, deposit.clone()).duplicate);
    assert_eq!(h.seq, 6);
    h.ok(deposit);
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 15, 0));
}

fn create_commands_return_the_new_ids<B: Book>() {
    let mut h = Harness::<B>::default();
    assert_eq!(h.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }), 0);
    assert_eq!(h.events, vec![Event::AssetCreated { asset: AssetId(0) }]);
    assert_eq!(h.ok(CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }), 1);
    assert_eq!(h.ok(CommandBody::CreateAccount), 0);
    assert_eq!(h.events, vec![Event::AccountCreated { account: AccountId(0) }]);
    assert_eq!(h.ok(CommandBody::CreateAccount), 1);
    assert_eq!(h.engine.balances(AccountId(1)), Some(&[][..]));
    let info = h.engine.asset_info(AssetId(0)).unwrap();
    assert_eq!((info.name.as_str(), info.decimals, info.supply.0, info.fees.0), ("USD", 2, 0, 0));
    assert_eq!(h.engine.asset_by_name("ACME"), Some(AssetId(1)));
}

fn deposit_credit_and_withdraw_change_balance_and_supply<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 2);
    let (a, b) = (m.accounts[0], m.accounts[1]);
    h.ok(CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(500) });
    assert_eq!(h.events, vec![m.usd_balance(a, USD_START + 500, 0)]);
    h.ok(CommandBody::Credit { account: b, asset: m.acme, amount: Amount(7) });
    assert_eq!(h.events, vec![m.acme_balance(b, 10_007, 0)]);
    h.ok(CommandBody::Withdraw { account: a, asset: m.usd, amount: Amount(200) });
    assert_eq!(h.events, vec![m.usd_balance(a, USD_START + 300, 0)]);
    assert_eq!(h.engine.asset_info(m.usd).unwrap().supply.0, 2 * USD_START + 300);
    assert_eq!(h.engine.asset_info(m.acme).unwrap().supply.0, 20_007);
    // Crediting an asset the account never held opens that balance.
    let beta = AssetId(h.ok(CommandBody::CreateAsset { name: "BETA".into(), decimals: 0 }) as u32);
    h.ok(CommandBody::Credit { account: a, asset: beta, amount: Amount(3) });
    assert_eq!(h.balance_of(a, beta), (3, 0));
    // Withdrawing everything leaves a zero balance.
    h.ok(CommandBody::Withdraw { account: a, asset: beta, amount: Amount(3) });
    assert_eq!(h.balance_of(a, beta), (0, 0));
    assert_eq!(h.engine.asset_info(beta).unwrap().supply.0, 0);
}

fn suspend_and_resume_refuse_the_state_the_account_is_in<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let a = m.accounts[0];
    h.reject(CommandBody::ResumeAccount { account: a }, Reject::AccountAlreadyInState);
    assert_eq!(h.ok(CommandBody::SuspendAccount { account: a }), 0);
    assert_eq!(h.events, vec![Event::AccountSuspended { account: a }]);
    h.reject(CommandBody::SuspendAccount { account: a }, Reject::AccountAlreadyInState);
    h.ok(CommandBody::ResumeAccount { account: a });
    assert_eq!(h.events, vec![Event::AccountResumed { account: a }]);
    h.reject(CommandBody::ResumeAccount { account: a }, Reject::AccountAlreadyInState);
    // Deposits still reach a suspended account.
    h.ok(CommandBody::SuspendAccount { account: a });
    h.ok(CommandBody::Deposit { account: a, asset: m.usd, amount: Amount(1) });
    assert_eq!(h.balance_of(a, m.usd), (USD_START + 1, 0));
}

/// A market with resting orders, an iceberg, pending stops and a suspended account.
fn busy_market<B: Book>(h: &mut Harness<B>) -> Market {
    let m = market(h, 0, 0, MatchPolicy::Fifo, 3);
    let (a, b, c) = (m.accounts[0], m.accounts[1], m.accounts[2]);
    h.place_ok(m.sell(a, 101, 20).with_display(5));
    h.place_ok(m.sell(c, 101, 5));
    h.place_ok(m.buy(b, 99, 10));
    h.place_ok(m.buy(b, 101, 7).with_stp(Stp::Allow));
    h.place_ok(m.stop_limit(c, Side::Sell, 95, 94, 3));
    h.place_ok(m.stop_market(b, Side::Buy, 110, 2, Some(500)));
    h.place_ok(m.buy(c, 98, 4).with_tif(Tif::Ioc));
    h.ok(CommandBody::SuspendAccount { account: c });
    m
}

fn snapshot_restores_to_the_same_state_hash<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = busy_market(&mut h);
    let restored = Engine::<B>::restore(&h.engine.snapshot()).expect("snapshot restores");
    restored.check_invariants();
    assert_eq!(restored.state_hash(), h.engine.state_hash());
    // The restored engine carries on exactly like the original.
    let mut twin = Harness { engine: restored, client: h.client, seq: h.seq, ts: h.ts, events: Vec::new() };
    for harness in [&mut h, &mut twin] {
        harness.place_ok(m.buy(m.accounts[1], 101, 30));
    }
    assert_eq!(twin.events, h.events);
    assert_eq!(twin.engine.state_hash(), h.engine.state_hash());
}

/// Both books reach the same state hash after the same commands.
#[test]
fn both_books_reach_the_same_state_hash() {
    let mut fast = Harness::<FastBook>::default();
    let mut reference = Harness::<ReferenceBook>::default();
    busy_market(&mut fast);
    busy_market(&mut reference);
    assert_eq!(fast.engine.state_hash(), reference.engine.state_hash());
    let fast_from_reference = Engine::<FastBook>::restore(&reference.engine.snapshot()).expect("snapshot restores");
    assert_eq!(fast_from_reference.state_hash(), fast.engine.state_hash());
}

const SECOND: u64 = 1_000_000_000;

fn new_clients_past_clients_max_are_refused_and_leave_no_trace<B: Book>() {
    let mut h = Harness::<B>::with_config(EngineConfig { clients_max: 2, ..EngineConfig::default() });
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let deposit = CommandBody::Deposit { account: m.accounts[0], asset: m.usd, amount: Amount(5) };
    assert_eq!(h.apply_as(ClientId(2), 1, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    assert_eq!(h.engine.clients(), 2);
    let hash = h.engine.state_hash();
    let applied = h.apply_as(ClientId(3), 1, deposit.clone());
    assert_eq!(applied, Applied { outcome: Outcome::Rejected(Reject::LimitReached), duplicate: false });
    assert_eq!(h.events, vec![Event::Rejected { reject: Reject::LimitReached }]);
    assert_eq!(h.engine.state_hash(), hash, "a refused client changed the state");
    assert_eq!(h.engine.clients_expired_refused(), (0, 1));
    // The clients already known carry on.
    assert_eq!(h.apply_as(ClientId(2), 2, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    h.ok(deposit);
    assert_eq!(h.balance_of(m.accounts[0], m.usd), (USD_START + 15, 0));
}

fn idle_clients_expire_in_log_time_and_free_their_places<B: Book>() {
    let config = EngineConfig { clients_max: 2, client_expiry_secs: 80, ..EngineConfig::default() };
    let mut h = Harness::<B>::with_config(config);
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let deposit = CommandBody::Deposit { account: m.accounts[0], asset: m.usd, amount: Amount(5) };
    let start = h.ts;
    assert_eq!(h.apply_as(ClientId(2), 1, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    // Client 1 keeps trading; client 2 goes quiet. Sweeps run every 10 s of log time.
    for step in 1..=7 {
        h.ts = start + step * 10 * SECOND;
        h.ok(deposit.clone());
        assert_eq!(h.engine.clients(), 2, "expired early at step {step}");
    }
    h.ts = start + 80 * SECOND;
    h.ok(deposit.clone());
    assert_eq!(h.engine.clients(), 1, "client 2 was idle 80 s, the expiry");
    assert_eq!(h.engine.clients_expired_refused(), (1, 0));
    // Its place is free for a new client; client 2 itself is a stranger now: only its
    // first command would apply, anything later is a gap.
    assert_eq!(h.apply_as(ClientId(2), 2, deposit.clone()).outcome, Outcome::Rejected(Reject::SequenceGap));
    assert_eq!(h.apply_as(ClientId(3), 1, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    assert_eq!(h.engine.clients(), 2);
    assert_eq!(h.apply_as(ClientId(4), 1, deposit).outcome, Outcome::Rejected(Reject::LimitReached));
}

fn expiry_is_the_same_after_a_snapshot<B: Book>() {
    let config = EngineConfig { client_expiry_secs: 80, ..EngineConfig::default() };
    let mut h = Harness::<B>::with_config(config);
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let deposit = CommandBody::Deposit { account: m.accounts[0], asset: m.usd, amount: Amount(5) };
    let start = h.ts;
    for client in 2..6 {
        h.ts = start + client * 7 * SECOND;
        assert_eq!(h.apply_as(ClientId(client), 1, deposit.clone()).outcome, Outcome::Ok { id: 0 });
    }
    let restored = Engine::<B>::restore(&h.engine.snapshot()).expect("snapshot restores");
    let mut twin = Harness { engine: restored, client: h.client, seq: h.seq, ts: h.ts, events: Vec::new() };
    // Every 3 s of log time, each a command of client 1: the two must forget the same
    // clients at the same commands.
    for step in 1..=40 {
        for harness in [&mut h, &mut twin] {
            harness.ts = start + 35 * SECOND + step * 3 * SECOND;
            harness.ok(deposit.clone());
        }
        assert_eq!(twin.engine.clients(), h.engine.clients(), "step {step}");
        assert_eq!(twin.engine.state_hash(), h.engine.state_hash(), "step {step}");
    }
    assert_eq!(h.engine.clients(), 1, "clients 2 to 5 expired; client 1 kept trading");
}

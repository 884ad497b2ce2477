//! Scenarios for the fairness delays set through the log (`SetFairness`): the value
//! each index holds, the release times it gives (in log order even when the hold is
//! lowered), the exchange's own client (no session record), the bounds, and snapshots.
//! Run against both books.

#[macro_use]
mod common;

use bourse_engine::book::Book;
use bourse_engine::command::{CommandBody, FairnessSetting, MatchPolicy, FAIRNESS_NS_MAX};
use bourse_engine::{Applied, ClientId, Engine, Outcome, Reject};
use common::{market, Harness};

both_books!(
    no_hold_is_in_force_until_the_log_sets_one,
    the_exchanges_own_setting_leaves_no_client_record,
    a_lowered_hold_keeps_release_times_in_log_order,
    settings_past_the_limit_are_refused_and_change_nothing,
    the_exchanges_client_sends_settings_only,
    an_admin_setting_is_an_ordinary_exactly_once_command,
    a_snapshot_keeps_the_setting_and_its_floor,
);

const MS: u64 = 1_000_000;

fn setting(hold_ms: u64, window_ms: u64) -> CommandBody {
    CommandBody::SetFairness(FairnessSetting { hold_ns: hold_ms * MS, window_ns: window_ms * MS })
}

fn system<B: Book>(h: &mut Harness<B>, body: CommandBody) -> Applied {
    h.apply_as(ClientId::SYSTEM, 0, body)
}

fn no_hold_is_in_force_until_the_log_sets_one<B: Book>() {
    let mut h = Harness::<B>::default();
    assert_eq!(h.engine.fairness(), None);
    assert_eq!(h.engine.release_ts(5_000), None);
    let applied = system(&mut h, setting(3, 1));
    assert_eq!(applied, Applied { outcome: Outcome::Ok { id: 0 }, duplicate: false });
    assert_eq!(h.engine.fairness(), Some(FairnessSetting { hold_ns: 3 * MS, window_ns: MS }));
    assert_eq!(h.engine.release_ts(h.ts + 10), Some(h.ts + 10 + 3 * MS));
}

fn the_exchanges_own_setting_leaves_no_client_record<B: Book>() {
    let mut h = Harness::<B>::default();
    let clients = h.engine.clients();
    // Any seq, any number of times: a setting applied twice is applied once.
    for seq in [0, 7, 0] {
        let applied = h.apply_as(ClientId::SYSTEM, seq, setting(4, 0));
        assert_eq!(applied.outcome, Outcome::Ok { id: 0 });
        assert!(h.events.is_empty(), "a setting emits nothing: {:?}", h.events);
    }
    assert_eq!(h.engine.clients(), clients, "the exchange's client is not remembered");
}

fn a_lowered_hold_keeps_release_times_in_log_order<B: Book>() {
    let mut h = Harness::<B>::default();
    system(&mut h, setting(20, 0));
    let before = h.ts;
    assert_eq!(h.engine.release_ts(before), Some(before + 20 * MS));
    system(&mut h, setting(2, 0));
    // Whatever came before the lowering was stamped by its stamp and goes out by then
    // plus the old hold; stamped after it: held to that...
    let last_release = h.ts + 20 * MS;
    assert_eq!(h.engine.release_ts(h.ts), Some(last_release));
    assert_eq!(h.engine.release_ts(before + 5 * MS), Some(last_release));
    // ...and once past it, the new hold alone.
    assert_eq!(h.engine.release_ts(before + 30 * MS), Some(before + 32 * MS));
    assert!(before + 30 * MS > last_release);
    // Release times never decrease along the log, whatever the sequence of holds.
    let mut last = 0;
    for (i, hold) in [5u64, 1, 40, 0, 3, 3, 25, 2].into_iter().enumerate() {
        h.ts += (i as u64 % 3) * MS;
        system(&mut h, setting(hold, 0));
        for step in 0..50 {
            let ts = h.ts + step * MS / 2;
            let release = h.engine.release_ts(ts).unwrap();
            assert!(release >= last, "release {release} before {last} after hold {hold} ms");
            assert!(release >= ts + hold * MS);
            last = release;
        }
        h.ts += 25 * MS;
    }
}

fn settings_past_the_limit_are_refused_and_change_nothing<B: Book>() {
    let mut h = Harness::<B>::default();
    system(&mut h, setting(3, 1));
    let hash = h.engine.state_hash();
    for body in [
        CommandBody::SetFairness(FairnessSetting { hold_ns: FAIRNESS_NS_MAX + 1, window_ns: 0 }),
        CommandBody::SetFairness(FairnessSetting { hold_ns: 0, window_ns: u64::MAX }),
    ] {
        let applied = system(&mut h, body);
        assert_eq!(applied.outcome, Outcome::Rejected(Reject::FairnessInvalid));
    }
    assert_eq!(h.engine.state_hash(), hash);
    let at_the_limit = CommandBody::SetFairness(FairnessSetting { hold_ns: FAIRNESS_NS_MAX, window_ns: 0 });
    assert_eq!(system(&mut h, at_the_limit).outcome, Outcome::Ok { id: 0 });
}

fn the_exchanges_client_sends_settings_only<B: Book>() {
    let mut h = Harness::<B>::default();
    let m = market(&mut h, 0, 0, MatchPolicy::Fifo, 1);
    let hash = h.engine.state_hash();
    let applied = system(&mut h, CommandBody::Place(m.buy(m.accounts[0], 100, 1)));
    assert_eq!(applied.outcome, Outcome::Rejected(Reject::SystemCommandInvalid));
    assert_eq!(h.engine.state_hash(), hash);
}

fn an_admin_setting_is_an_ordinary_exactly_once_command<B: Book>() {
    let mut h = Harness::<B>::default();
    h.run(setting(6, 2));
    assert_eq!(h.engine.fairness(), Some(FairnessSetting { hold_ns: 6 * MS, window_ns: 2 * MS }));
    let (client, seq) = (h.client, h.seq);
    // Its resend is a duplicate, answered from the record.
    let applied = h.apply_as(client, seq, setting(9, 9));
    assert!(applied.duplicate);
    assert_eq!(h.engine.fairness().unwrap().hold_ns, 6 * MS);
}

fn a_snapshot_keeps_the_setting_and_its_floor<B: Book>() {
    let mut h = Harness::<B>::default();
    system(&mut h, setting(30, 1));
    system(&mut h, setting(1, 1));
    let restored = Engine::<B>::restore(&h.engine.snapshot()).expect("restores");
    assert_eq!(restored.state_hash(), h.engine.state_hash());
    assert_eq!(restored.fairness(), h.engine.fairness());
    for ts in [h.ts, h.ts + 10 * MS, h.ts + 40 * MS] {
        assert_eq!(restored.release_ts(ts), h.engine.release_ts(ts), "release of {ts}");
    }
}

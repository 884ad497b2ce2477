//! Property tests: the fast book and the reference book, driven by the same random
//! command streams, give identical outcomes, events and state hashes; every invariant
//! (including conservation of every asset) holds after every command; and a snapshot
//! restored mid-stream, into either book, continues exactly like the original.
//!
//! Streams come from bytes through `fuzzing::body_from_bytes`, the same generator the
//! fuzz target uses. Proptest keeps failing inputs in `proptest-regressions/`.

use bourse_engine::fuzzing::{body_from_bytes, Bytes, Differential, CLIENTS};
use proptest::prelude::*;

fn drive(d: &mut Differential, bytes: &mut Bytes<'_>, commands_max: usize) {
    for _ in 0..commands_max {
        if bytes.is_empty() {
            return;
        }
        let client = usize::from(bytes.below(CLIENTS as u8));
        let body = body_from_bytes(bytes, &d.fast);
        d.apply_as(client, body);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn prop_books_agree_on_random_streams(data in prop::collection::vec(any::<u8>(), 0..6000)) {
        let mut d = Differential::new();
        drive(&mut d, &mut Bytes::new(&data), usize::MAX);
        d.assert_same_hash();
    }

    #[test]
    fn prop_snapshot_restore_continues_identically(
        data in prop::collection::vec(any::<u8>(), 0..6000),
        split in 0usize..400,
    ) {
        let mut original = Differential::new();
        let mut bytes = Bytes::new(&data);
        drive(&mut original, &mut bytes, split);
        let mut restored = original.restored();
        prop_assert_eq!(restored.fast.state_hash(), original.fast.state_hash());
        prop_assert_eq!(restored.reference.state_hash(), original.fast.state_hash());
        while !bytes.is_empty() {
            let client = usize::from(bytes.below(CLIENTS as u8));
            let body = body_from_bytes(&mut bytes, &original.fast);
            let a = original.apply_as(client, body.clone());
            let b = restored.apply_as(client, body);
            prop_assert_eq!(a, b);
            prop_assert_eq!(original.events(), restored.events());
        }
        prop_assert_eq!(original.fast.state_hash(), restored.fast.state_hash());
    }
}

#[test]
fn seeded_long_streams_agree() {
    for seed in 0..12u64 {
        eprintln!("seeded stream: seed {seed}");
        let data = bourse_engine::fuzzing::seeded_bytes(seed, 60_000);
        let mut d = Differential::new();
        drive(&mut d, &mut Bytes::new(&data), usize::MAX);
        d.assert_same_hash();
    }
}

/// The generator reaches the close of the trading day with Day orders open, resting
/// and pending, so the differential checks above cover expiry (the harness itself
/// checks that each close expires exactly the open Day orders).
#[test]
fn seeded_streams_close_days_with_day_orders_open() {
    use bourse_engine::{CancelReason, Event, OrderStatus};
    let (mut closes, mut expired, mut expired_stops, mut expired_partly_filled) = (0, 0, 0, 0);
    for seed in 0..4u64 {
        let data = bourse_engine::fuzzing::seeded_bytes(seed, 60_000);
        let mut bytes = Bytes::new(&data);
        let mut d = Differential::new();
        while !bytes.is_empty() {
            let client = usize::from(bytes.below(CLIENTS as u8));
            let body = body_from_bytes(&mut bytes, &d.fast);
            let close = body == bourse_engine::command::CommandBody::CloseDay;
            let stops_before: Vec<_> = if close { pending_stops(&d) } else { Vec::new() };
            if close {
                // The one-pass list of open orders is the per-account lists, in order.
                let per_account: Vec<_> = (0..d.fast.accounts_len() as u32)
                    .flat_map(|account| d.fast.open_orders(bourse_engine::AccountId(account)))
                    .map(|view| (view.record.account, view.record.id))
                    .collect();
                let all: Vec<_> = d.fast.open_order_records().iter().map(|r| (r.account, r.id)).collect();
                assert_eq!(all, per_account);
            }
            d.apply_as(client, body);
            closes += usize::from(close);
            for event in d.events() {
                if let Event::Cancelled { order, reason: CancelReason::Expired, .. } = event {
                    expired += 1;
                    expired_stops += usize::from(stops_before.contains(order));
                    let view = d.fast.order(*order).expect("just closed");
                    assert_eq!(view.record.status, OrderStatus::Expired);
                    expired_partly_filled += usize::from(view.record.qty_filled.0 > 0);
                }
            }
        }
    }
    eprintln!(
        "{closes} closes expired {expired} orders ({expired_stops} stops, {expired_partly_filled} partly filled)"
    );
    assert!(closes > 10 && expired > 100 && expired_stops > 0 && expired_partly_filled > 0);
}

fn pending_stops(d: &Differential) -> Vec<bourse_engine::OrderId> {
    (0..d.fast.accounts_len() as u32)
        .flat_map(|account| d.fast.open_orders(bourse_engine::AccountId(account)))
        .filter(|view| view.record.status == bourse_engine::OrderStatus::Pending)
        .map(|view| view.record.id)
        .collect()
}

#[test]
fn fuzz_entry_point_survives_seeded_input() {
    for seed in 100..140u64 {
        eprintln!("fuzz input: seed {seed}");
        bourse_engine::fuzzing::run(&bourse_engine::fuzzing::seeded_bytes(seed, 4_000));
    }
}

/// The generator reaches every margin state the differential and invariant checks are
/// meant to cover: positions opened, reduced and flipped, marks set, accounts
/// liquidated (into the book and to the insurance account), shortfalls paid by the
/// insurance account, and margin orders refused for margin, limit and budget.
#[test]
fn seeded_streams_reach_margin_liquidations() {
    use bourse_engine::{Event, Reject};
    let (mut positions, mut flips, mut marks, mut liquidations, mut transfers, mut shortfalls) =
        (0, 0, 0, 0, 0, 0usize);
    let (mut refused_margin, mut refused_limit, mut refused_budget) = (0, 0, 0);
    for seed in 0..4u64 {
        let data = bourse_engine::fuzzing::seeded_bytes(seed, 60_000);
        let mut bytes = Bytes::new(&data);
        let mut d = Differential::new();
        let mut sizes = std::collections::BTreeMap::new();
        while !bytes.is_empty() {
            let client = usize::from(bytes.below(CLIENTS as u8));
            let body = body_from_bytes(&mut bytes, &d.fast);
            d.apply_as(client, body);
            for event in d.events() {
                match *event {
                    Event::Position { account, symbol, size, .. } => {
                        positions += 1;
                        let before: i64 = sizes.insert((account, symbol), size.0).unwrap_or(0);
                        flips += usize::from(before.signum() * size.0.signum() < 0);
                    }
                    Event::Mark { .. } => marks += 1,
                    Event::Liquidated { .. } => liquidations += 1,
                    Event::PositionTransferred { .. } => transfers += 1,
                    Event::Shortfall { covered, .. } => shortfalls += usize::from(covered.0 > 0),
                    Event::Rejected { reject: Reject::MarginInsufficient } => refused_margin += 1,
                    Event::Rejected { reject: Reject::PositionLimit } => refused_limit += 1,
                    Event::Rejected { reject: Reject::BudgetNotForMargin } => refused_budget += 1,
                    _ => {}
                }
            }
        }
        // The operator's report states the same conservation the invariants check.
        let report = d.fast.exchange_report();
        assert!(report.assets.iter().all(|a| a.balanced()), "{report:?}");
        let interest = report.symbols.iter().map(|s| s.open_interest).sum::<i64>();
        eprintln!("seed {seed}: open interest {interest}, symbols {:?}", report.symbols);
    }
    eprintln!(
        "{positions} position changes ({flips} flips), {marks} marks, {liquidations} liquidations, \
         {transfers} transfers to insurance, {shortfalls} shortfalls covered; refused: {refused_margin} margin, \
         {refused_limit} limit, {refused_budget} budget"
    );
    assert!(positions > 1_000 && flips > 10 && marks > 50);
    assert!(liquidations > 10 && transfers > 0);
    assert!(refused_margin > 10 && refused_limit > 0 && refused_budget > 0);
}

//! The simulator replays a seed exactly, passes on the code as it is, and catches each
//! planted bug within a few seeds (`make sim` runs hundreds of seeds).

use bourse_simulator::{run, Options, Plant, Profile, Report};

fn options(seed: u64) -> Options {
    Options { seed, ..Options::default() }
}

#[test]
fn a_seed_replays_exactly_and_another_seed_differs() {
    let first = run(options(7));
    let again = run(options(7));
    assert!(first.passed(), "{first}");
    assert_eq!(first.trace_hash, again.trace_hash);
    assert_eq!(first.state_hash, again.state_hash);
    assert_eq!(first.counts.acks, again.counts.acks);
    let other = run(options(8));
    assert_ne!(first.trace_hash, other.trace_hash);
}

#[test]
fn faults_strike_and_every_check_passes() {
    for seed in 1..=3 {
        let report = run(options(seed));
        assert!(report.passed(), "{report}");
        let c = &report.counts;
        assert!(c.crashes > 0 && c.partitions > 0 && c.lost > 0 && c.duplicated > 0, "{report}");
        assert!(c.acks > 50 && c.market_data > 50, "{report}");
        assert!(report.state_hash.is_some());
    }
}

#[test]
fn five_members_without_gateways_pass() {
    for seed in 1..=2 {
        let report = run(Options { seed, nodes: 5, gateways: 0, ..Options::default() });
        assert!(report.passed(), "{report}");
    }
}

#[test]
fn a_calm_run_has_no_faults_and_no_resends() {
    let report = run(Options { faults: Profile::Calm, ..options(3) });
    assert!(report.passed(), "{report}");
    assert_eq!((report.counts.faults, report.counts.crashes, report.counts.lost), (0, 0, 0), "{report}");
}

/// The first seed from 1 on (within `budget`) whose run fails.
fn first_failure(plant: Plant, budget: u64) -> Option<Report> {
    (1..=budget).map(|seed| run(Options { plant: Some(plant), ..options(seed) })).find(|report| !report.passed())
}

#[test]
fn planted_bugs_are_caught_within_a_few_seeds() {
    // What each is caught by: the simulator's checks, or the client library's window,
    // which ends a session whose node forgot a command it acknowledged.
    let forgotten = "the exchange forgot seq";
    let replay = "states differ from the log's replay";
    let cases = [
        (Plant::AckBeforeCommit, ["was acknowledged but is not in the state", forgotten]),
        (Plant::SkipDuplicateCheck, ["the applied deposits, issues and withdrawals add up to", replay]),
        (Plant::StaleSnapshot, [replay, forgotten]),
        (Plant::EarlyMarketData, ["before its release time", "before its release time"]),
    ];
    for (plant, findings) in cases {
        let report = first_failure(plant, 5).unwrap_or_else(|| panic!("{plant:?} was not caught in 5 seeds"));
        let found = report.violations.iter().any(|v| findings.iter().any(|finding| v.contains(finding)));
        assert!(found, "{plant:?}: {report}");
    }
}

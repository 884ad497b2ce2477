//! The partitioned exchange with a Raft group per shard, simulated (`bourse sim
//! --groups G`): a seed replays exactly, faults strike in every group, ingests resend
//! what was applied, commands that overtake their client's earlier ones are refused
//! and sent again, and every check passes (`make sim` runs more seeds).

use bourse_simulator::shards::{run, ShardOptions};

fn options(seed: u64, groups: u32) -> ShardOptions {
    ShardOptions { seed, groups, ..ShardOptions::default() }
}

#[test]
fn a_seed_replays_exactly() {
    let first = run(options(5, 2));
    let again = run(options(5, 2));
    assert!(first.passed(), "{first}");
    assert_eq!(first.trace_hash, again.trace_hash);
    assert_eq!(first.shard.answered, again.shard.answered);
    assert_ne!(first.trace_hash, run(options(6, 2)).trace_hash);
}

/// Group 0 a meta group of its own beside three data groups: the catalog, the moves
/// and the closes go through it under every fault, and it never holds an account's
/// funds or an order (the end checks).
#[test]
fn a_meta_group_beside_data_groups_passes_the_checks_under_faults() {
    for seed in [7, 8] {
        let report = run(ShardOptions { meta_group: true, ..options(seed, 4) });
        assert!(report.passed(), "{report}");
        let s = &report.shard;
        assert!(s.answered > 100 && s.outputs_applied > 1_000 && s.books_moved > 0 && s.days_closed > 0, "{report}");
    }
}

#[test]
fn groups_of_raft_members_pass_their_checks_under_faults() {
    for (seed, groups) in [(1, 2), (2, 3), (3, 4)] {
        let report = run(options(seed, groups));
        assert!(report.passed(), "{report}");
        let (c, s) = (&report.counts, &report.shard);
        assert!(c.crashes > 0 && c.partitions > 0 && c.lost > 0 && c.duplicated > 0, "{report}");
        assert!(s.leader_changes > groups as u64 && s.trims > 0, "{report}");
        // Commands crossed groups and came back, and ingests sent applied outputs again.
        assert!(s.answered > 100 && s.outputs_skipped > 0 && s.outputs_applied > 1_000, "{report}");
        // Clients kept several commands in flight, and some overtook an earlier one:
        // refused for the gap, sent again.
        assert!(s.overtaken > 0, "{report}");
    }
}

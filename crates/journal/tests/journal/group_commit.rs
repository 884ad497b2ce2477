//! Group commit: several producers, one writer, one fdatasync per group, acknowledgements
//! once each and in index order.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::thread;

use bourse_journal::{Entry, Error, GroupCommit, GroupCommitConfig, IndexRange, JournalConfig, Proposal};

use crate::common::*;

const PRODUCERS: u64 = 4;
const BATCHES_PER_PRODUCER: u64 = 40;

fn proposal(producer: u64, sequence: u64) -> Proposal {
    Proposal { timestamp_ns: producer * 1_000_000 + sequence, payload: format!("{producer}:{sequence}").into_bytes() }
}

fn payload_parse(payload: &[u8]) -> (u64, u64) {
    let text = std::str::from_utf8(payload).unwrap();
    let (producer, sequence) = text.split_once(':').unwrap();
    (producer.parse().unwrap(), sequence.parse().unwrap())
}

#[test]
fn many_producers_are_acknowledged_once_in_order_with_fewer_fsyncs() {
    // The real disk: slow fdatasyncs are what lets groups form. No inline commits.
    let config = GroupCommitConfig { queue_batches_max: 16, inline_commit_max_us: 0, ..Default::default() };
    let stats = many_producers(dir_disk(), config, false);
    assert_eq!(stats.inline_groups, 0);
    let entries_total = stats.group_entries.sum;
    assert!(stats.journal.syncs < entries_total, "{} fsyncs for {entries_total} entries", stats.journal.syncs);
}

/// With every group counted quick, producers that wait for their batches commit inline
/// whenever nothing is queued, racing each other and the writer: the same guarantees hold.
#[test]
fn producers_that_commit_inline_are_acknowledged_once_in_order() {
    let config = GroupCommitConfig { queue_batches_max: 16, inline_commit_max_us: 10_000_000, ..Default::default() };
    let stats = many_producers(dir_fast(), config, true);
    println!("{} of {} groups committed inline", stats.inline_groups, stats.groups);
    assert!(stats.inline_groups > 0, "no inline commit");
    assert!(stats.inline_groups < stats.groups, "the first groups are the writer's");
}

/// Several producers submit batches at once (when `closed_loop`, each waiting for every
/// other batch before the next); checks that every entry is acknowledged once, in index
/// order, each ticket naming its own batch, and that the log recovers the same.
fn many_producers(
    dir: tempfile::TempDir,
    config: GroupCommitConfig,
    closed_loop: bool,
) -> bourse_journal::GroupCommitStats {
    let mut random = SplitMix64::from_env("group_commit_many_producers", 0x6a0c_3e11);
    let batch_sizes: Vec<Vec<u64>> =
        (0..PRODUCERS).map(|_| (0..BATCHES_PER_PRODUCER).map(|_| random.range(1, 3)).collect()).collect();
    let entries_total: u64 = batch_sizes.iter().flatten().sum();
    let (journal, _) = open(dir.path(), JournalConfig::default());
    let durable: Arc<Mutex<Vec<Entry>>> = Arc::default();
    let durable_sink = Arc::clone(&durable);
    let group = GroupCommit::start(journal, config, move |entries| {
        durable_sink.lock().unwrap().extend(entries);
    })
    .unwrap();

    let acknowledged: Vec<Vec<(IndexRange, u64)>> = thread::scope(|scope| {
        let producers: Vec<_> = batch_sizes
            .iter()
            .enumerate()
            .map(|(producer, sizes)| {
                let handle = group.handle();
                scope.spawn(move || {
                    let mut sequence = 0;
                    let mut tickets = Vec::new();
                    for &size in sizes {
                        let batch: Vec<Proposal> =
                            (0..size).map(|offset| proposal(producer as u64, sequence + offset)).collect();
                        let ticket = handle.submit(batch).unwrap();
                        // Closed loop: every other batch waited for, so one may still be
                        // queued when the next is submitted (which must not overtake it).
                        match closed_loop && tickets.len() % 2 == 1 {
                            true => tickets.push((Ok(ticket.wait().unwrap()), sequence)),
                            false => tickets.push((Err(ticket), sequence)),
                        }
                        sequence += size;
                    }
                    let ranges: Vec<(IndexRange, u64)> = tickets
                        .into_iter()
                        .map(|(ticket, first_sequence)| (ticket.unwrap_or_else(|t| t.wait().unwrap()), first_sequence))
                        .collect();
                    // The durable index is published before any ticket resolves.
                    let last = ranges.last().unwrap().0.last;
                    assert!(handle.durable_index() >= last);
                    assert_eq!(handle.wait_durable(last).unwrap(), handle.durable_index());
                    ranges
                })
            })
            .collect();
        producers.into_iter().map(|producer| producer.join().unwrap()).collect()
    });
    let stats = group.handle().stats();
    let journal = group.shutdown().unwrap();

    // The callback saw every index exactly once, consecutive from 1, in order.
    let durable = durable.lock().unwrap().clone();
    assert_eq!(durable.len() as u64, entries_total);
    for (position, entry) in durable.iter().enumerate() {
        assert_eq!(entry.index, position as u64 + 1);
    }
    // Each ticket names the indexes holding exactly its batch; each producer's entries
    // are in its submission order.
    let mut by_producer: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
    for entry in &durable {
        let (producer, sequence) = payload_parse(&entry.payload);
        by_producer.entry(producer).or_default().push(sequence);
    }
    for (producer, ranges) in acknowledged.iter().enumerate() {
        for (range, first_sequence) in ranges {
            for (offset, index) in (range.first..=range.last).enumerate() {
                let entry = &durable[index as usize - 1];
                assert_eq!(payload_parse(&entry.payload), (producer as u64, first_sequence + offset as u64));
            }
        }
        let sequences = &by_producer[&(producer as u64)];
        assert!(sequences.windows(2).all(|pair| pair[0] + 1 == pair[1]), "producer {producer} out of order");
    }
    println!(
        "group commit: {entries_total} entries in {} batches, {} groups, {} fdatasyncs, largest group {} entries, fdatasync p50 <= {} ns",
        stats.batches,
        stats.groups,
        stats.journal.syncs,
        stats.group_entries.max,
        stats.journal.sync_latency_ns.quantile_upper_bound(500)
    );
    assert_eq!(stats.batches, PRODUCERS * BATCHES_PER_PRODUCER);
    assert_eq!(stats.group_entries.count, stats.groups);
    assert_eq!(stats.group_entries.sum, entries_total);
    assert_eq!(journal.durable_index(), entries_total);
    drop(journal);

    let (_, recovery) = open(dir.path(), JournalConfig::default());
    assert_eq!(recovered(recovery), durable);
    stats
}

#[test]
fn bad_batches_are_rejected_at_submission_and_stop_is_reported() {
    let dir = dir_fast();
    let (journal, _) = open(dir.path(), config_small());
    let config = GroupCommitConfig { batch_entries_max: 2, ..Default::default() };
    let group = GroupCommit::start(journal, config, |_| {}).unwrap();
    let handle = group.handle();
    assert!(matches!(handle.submit(Vec::new()), Err(Error::BatchEmpty)));
    let three = vec![proposal(0, 0), proposal(0, 1), proposal(0, 2)];
    assert!(matches!(handle.submit(three), Err(Error::BatchTooLarge { entries: 3, entries_max: 2 })));
    let oversized = Proposal { timestamp_ns: 0, payload: vec![0; 257] };
    assert!(matches!(handle.submit(vec![oversized]), Err(Error::PayloadTooLarge { payload_bytes: 257, .. })));
    let range = handle.submit(vec![proposal(0, 0), proposal(0, 1)]).unwrap().wait().unwrap();
    assert_eq!(range, IndexRange { first: 1, last: 2 });
    // A snapshot goes through the writer, after what was queued before it.
    handle.write_snapshot(2, b"state-2".to_vec()).unwrap();
    assert!(matches!(handle.write_snapshot(1, Vec::new()), Err(Error::SnapshotIndexBehind { .. })));
    let range = handle.submit(vec![proposal(0, 2)]).unwrap().wait().unwrap();
    assert_eq!(range, IndexRange { first: 3, last: 3 });
    let journal = group.shutdown().unwrap();
    assert_eq!((journal.last_index(), journal.snapshot_index()), (3, Some(2)));
    // Closed by its owner, which a producer can tell from a failure.
    assert!(matches!(handle.submit(vec![proposal(0, 3)]), Err(Error::WriterClosed)));
    assert!(matches!(handle.write_snapshot(3, Vec::new()), Err(Error::WriterClosed)));
    assert!(matches!(handle.wait_durable(4), Err(Error::WriterClosed)));
    assert_eq!(handle.wait_durable(3).unwrap(), 3);
}

#[test]
fn group_commit_continues_a_recovered_log() {
    let dir = dir_fast();
    log_build(dir.path(), config_small(), 7);
    let (journal, _) = open(dir.path(), config_small());
    let group = GroupCommit::start(journal, GroupCommitConfig::default(), |_| {}).unwrap();
    let handle = group.handle();
    assert_eq!(handle.durable_index(), 7);
    let range = handle.submit(vec![proposal(1, 1)]).unwrap().wait().unwrap();
    assert_eq!(range, IndexRange { first: 8, last: 8 });
    drop(group); // Drop stops the writer after committing what was queued.
    let (_, recovery) = open(dir.path(), config_small());
    assert_eq!(recovered(recovery).len(), 8);
}

#[test]
fn a_panicking_callback_stops_the_writer_without_stranding_waiters() {
    let dir = dir_fast();
    let (journal, _) = open(dir.path(), config_small());
    let group =
        GroupCommit::start(journal, GroupCommitConfig::default(), |_| panic!("deliberate callback bug")).unwrap();
    let handle = group.handle();
    let ticket = handle.submit(vec![proposal(0, 0)]).unwrap();
    assert!(matches!(ticket.wait(), Err(Error::WriterStopped)));
    assert!(matches!(handle.wait_durable(1), Err(Error::WriterStopped)));
    assert!(matches!(handle.submit(vec![proposal(0, 1)]), Err(Error::WriterStopped)));
    let shutdown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| group.shutdown()));
    assert!(shutdown.is_err(), "the callback's panic reaches the owner");
}

/// The same when the callback panics in an inline commit: the producer's `submit`
/// unwinds, and the journal is stopped for every other producer and waiter.
#[test]
fn a_callback_that_panics_in_an_inline_commit_stops_the_journal() {
    let dir = dir_fast();
    let (journal, _) = open(dir.path(), config_small());
    let config = GroupCommitConfig { inline_commit_max_us: 10_000_000, ..Default::default() };
    let group = GroupCommit::start(journal, config, |entries| {
        assert!(entries.iter().all(|entry| entry.index <= 20), "deliberate callback bug");
    })
    .unwrap();
    let handle = group.handle();
    for sequence in 0..20 {
        handle.submit(vec![proposal(0, sequence)]).unwrap().wait().unwrap();
    }
    assert!(handle.stats().inline_groups > 0, "the last of twenty were not inline");
    let submit = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handle.submit(vec![proposal(0, 20)])));
    assert!(submit.is_err(), "the inline callback's panic reaches its producer");
    assert!(matches!(handle.submit(vec![proposal(0, 21)]), Err(Error::WriterStopped)));
    assert!(matches!(handle.wait_durable(21), Err(Error::WriterStopped)));
    assert_eq!(handle.wait_durable(20).unwrap(), 20);
    let shutdown = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| group.shutdown()));
    assert!(shutdown.is_err(), "the callback's panic reaches the owner");
}

#[test]
fn segments_a_snapshot_prunes_are_deleted_off_the_writer_and_the_log_still_recovers() {
    let dir = dir_fast();
    let (journal, _) = open(dir.path(), config_small());
    let group = GroupCommit::start(journal, GroupCommitConfig::default(), |_| {}).unwrap();
    let handle = group.handle();
    let submit = |producer: u64, count: u64| {
        for sequence in 0..count {
            handle.submit(vec![proposal(producer, sequence)]).unwrap().wait().unwrap();
        }
    };
    submit(0, 200);
    handle.write_snapshot(150, b"state-150".to_vec()).unwrap();
    submit(1, 200);
    let segments_before = segment_paths(dir.path()).len();
    // The second snapshot prunes what the first covers, on a thread of its own.
    handle.write_snapshot(380, b"state-380".to_vec()).unwrap();
    submit(2, 10);
    let journal = group.shutdown().unwrap();
    // Shutdown waits for the deletions: only segments holding records after 150 are left.
    let first = journal.first_index();
    assert!(first > 1 && first <= 151, "first index {first}");
    let left = segment_paths(dir.path());
    assert!(left.len() < segments_before, "{} segments before the prune, {} after", segments_before, left.len());
    for path in &left {
        let first_of_file: u64 = path.file_stem().unwrap().to_string_lossy().parse().unwrap();
        assert!(first_of_file >= first, "{} should have been deleted", path.display());
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|item| item.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".pruned"))
        .collect();
    assert!(leftovers.is_empty(), "pruned segments not deleted: {leftovers:?}");
    drop(journal);
    let (journal, recovery) = open(dir.path(), config_small());
    assert_eq!(recovery.snapshot.as_ref().map(|s| s.index), Some(380));
    assert_eq!(recovered(recovery).len(), 30);
    assert_eq!(journal.last_index(), 410);
}

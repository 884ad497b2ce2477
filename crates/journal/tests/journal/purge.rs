//! Purgeable journals (the Raft log): whole-segment purges, restarts after a purge beyond
//! the end, recovery of a log that starts late, the refusal to mix purges and snapshots,
//! and reading through a `ReadView` from another thread while the owner appends.

use std::thread;

use bourse_journal::{Error, Journal};

use crate::common::*;

fn first_index_of(path: &std::path::Path) -> u64 {
    path.file_stem().unwrap().to_string_lossy().parse().unwrap()
}

fn open_purgeable(dir: &std::path::Path) -> (Journal, bourse_journal::Recovery) {
    Journal::open_purgeable(dir, config_small()).expect("open purgeable journal")
}

#[test]
fn purge_removes_only_segments_wholly_at_or_below_the_index() {
    let dir = dir_fast();
    let (mut journal, _) = open_purgeable(dir.path());
    journal.append(&entries(1, 120)).unwrap();
    journal.sync().unwrap();
    let segments_before = segment_paths(dir.path());
    journal.purge_through(50).unwrap();
    let first = journal.first_index();
    assert!(first > 1 && first <= 51, "first index {first}");
    let segments_after = segment_paths(dir.path());
    assert!(segments_after.len() < segments_before.len());
    assert_eq!(first_index_of(&segments_after[0]), first);
    for path in segments_before.iter().filter(|path| !segments_after.contains(path)) {
        assert!(first_index_of(path) < first);
    }
    // The records after the purge point are intact and the log continues.
    let read: Vec<_> = journal.read_range(51, 120).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(read, entries(51, 120));
    journal.append(&entries(121, 125)).unwrap();
    journal.sync().unwrap();
    // Purging again at the same index, or below, deletes nothing more.
    journal.purge_through(50).unwrap();
    journal.purge_through(10).unwrap();
    assert_eq!(journal.first_index(), first);
}

#[test]
fn a_purged_log_reopens_from_its_first_segment() {
    let dir = dir_fast();
    {
        let (mut journal, _) = open_purgeable(dir.path());
        journal.append(&entries(1, 120)).unwrap();
        journal.sync().unwrap();
        journal.purge_through(80).unwrap();
    }
    let (journal, recovery) = open_purgeable(dir.path());
    let first = journal.first_index();
    assert!(first > 1 && first <= 81, "first index {first}");
    assert_eq!(journal.last_index(), 120);
    assert_eq!(recovered(recovery), entries(first, 120));
    // A snapshot journal refuses the same files: its log must reach back to a snapshot.
    drop(journal);
    assert!(matches!(Journal::open(dir.path(), config_small()), Err(Error::LogStartUncovered { .. })));
}

#[test]
fn purge_beyond_the_end_restarts_the_log_after_it() {
    let dir = dir_fast();
    {
        let (mut journal, _) = open_purgeable(dir.path());
        journal.append(&entries(1, 30)).unwrap();
        journal.sync().unwrap();
        journal.purge_through(500).unwrap();
        assert_eq!((journal.first_index(), journal.last_index()), (501, 500));
        assert_eq!(segment_paths(dir.path()).len(), 1);
        journal.append(&entries(501, 505)).unwrap();
        journal.sync().unwrap();
    }
    let (journal, recovery) = open_purgeable(dir.path());
    assert_eq!((journal.first_index(), journal.last_index()), (501, 505));
    assert_eq!(recovered(recovery), entries(501, 505));
}

#[test]
fn purge_at_the_last_record_keeps_appending_in_place() {
    let dir = dir_fast();
    let (mut journal, _) = open_purgeable(dir.path());
    journal.append(&entries(1, 60)).unwrap();
    journal.purge_through(60).unwrap();
    assert_eq!(journal.last_index(), 60);
    journal.append(&entries(61, 62)).unwrap();
    journal.sync().unwrap();
    let read: Vec<_> = journal.read_range(61, 62).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(read, entries(61, 62));
}

#[test]
fn purges_and_snapshots_do_not_mix() {
    let dir = dir_fast();
    {
        let (mut journal, _) = open(dir.path(), config_small());
        journal.append(&entries(1, 10)).unwrap();
        assert!(matches!(journal.purge_through(5), Err(Error::PurgeNotEnabled)));
        journal.write_snapshot(5, b"state").unwrap();
    }
    // A directory with snapshots is not a purgeable journal.
    assert!(matches!(Journal::open_purgeable(dir.path(), config_small()), Err(Error::SnapshotsDisabled { .. })));

    let dir = dir_fast();
    let (mut journal, _) = open_purgeable(dir.path());
    journal.append(&entries(1, 10)).unwrap();
    assert!(matches!(journal.write_snapshot(5, b"state"), Err(Error::SnapshotsDisabled { .. })));
    // A refused call changes nothing and poisons nothing.
    assert!(!journal.is_poisoned());
    assert!(snapshot_free(dir.path()));
}

fn snapshot_free(dir: &std::path::Path) -> bool {
    files_with_suffix(dir, ".snap").is_empty()
}

#[test]
fn a_read_view_reads_from_another_thread_while_the_owner_appends() {
    let dir = dir_fast();
    let (mut journal, _) = open_purgeable(dir.path());
    journal.append(&entries(1, 40)).unwrap();
    let view = journal.read_view();
    assert_eq!((view.first_index(), view.last_index()), (1, 40));
    let reader = thread::spawn(move || {
        (0..20)
            .map(|_| view.read_range(1, 40).unwrap().collect::<Result<Vec<_>, _>>().unwrap())
            .all(|read| read == entries(1, 40))
    });
    // Appending (and rolling into new segments) meanwhile disturbs no reader.
    for index in 41..=200 {
        journal.append(&[entry(index)]).unwrap();
    }
    assert!(reader.join().unwrap());
    // A view sees only what was written when it was made.
    let view = journal.read_view();
    assert!(matches!(view.read_range(1, 201), Err(Error::RangeInvalid { .. })));
    assert_eq!(view.read_range(190, 200).unwrap().count(), 11);
}

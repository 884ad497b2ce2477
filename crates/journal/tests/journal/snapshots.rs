//! Snapshots: atomic write, retention, pruning, recovery from snapshot plus tail,
//! fallback from a corrupt snapshot, a snapshot ahead of the log, stray temporary files.

use std::fs;

use bourse_journal::{Error, Journal, JournalConfig};

use crate::common::*;

fn first_index_of(path: &std::path::Path) -> u64 {
    path.file_stem().unwrap().to_string_lossy().parse().unwrap()
}

/// A log of 1..=120 in small segments with snapshots at 20 and 90.
fn log_with_two_snapshots(dir: &std::path::Path) -> JournalConfig {
    let config = config_small();
    let (mut journal, _) = open(dir, config);
    journal.append(&entries(1, 60)).unwrap();
    journal.write_snapshot(20, b"state-20").unwrap();
    // One snapshot: the log still reaches back to 1, so a corrupt snapshot can fall back
    // to replaying everything.
    assert_eq!(journal.first_index(), 1);
    journal.append(&entries(61, 120)).unwrap();
    journal.sync().unwrap();
    journal.write_snapshot(90, b"state-90").unwrap();
    // Two snapshots: segments wholly covered by the older one (20) are gone, the one
    // holding 21 is kept.
    let first = journal.first_index();
    assert!(first > 1 && first <= 21, "first index {first}");
    for path in segment_paths(dir) {
        assert!(first_index_of(&path) >= first);
    }
    assert_eq!(journal.snapshot_index(), Some(90));
    config
}

#[test]
fn snapshot_prunes_and_recovery_starts_from_it() {
    let dir = dir_fast();
    let config = log_with_two_snapshots(dir.path());
    assert_eq!(snapshot_paths(dir.path()).len(), 2);
    let (journal, recovery) = open(dir.path(), config);
    let snapshot = recovery.snapshot.clone().unwrap();
    assert_eq!((snapshot.index, snapshot.bytes.as_slice()), (90, &b"state-90"[..]));
    assert_eq!(recovered(recovery), entries(91, 120));
    assert_eq!(journal.last_index(), 120);
}

#[test]
fn only_the_newest_two_snapshots_are_kept() {
    let dir = dir_fast();
    let config = log_with_two_snapshots(dir.path());
    let (mut journal, _) = open(dir.path(), config);
    journal.write_snapshot(100, b"state-100").unwrap();
    let names: Vec<String> = snapshot_paths(dir.path())
        .iter()
        .map(|path| path.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["snapshot-00000000000000000090.snap", "snapshot-00000000000000000100.snap"]);
    assert!(journal.first_index() > 21 && journal.first_index() <= 91);
    assert!(matches!(
        journal.write_snapshot(95, b"old"),
        Err(Error::SnapshotIndexBehind { index: 95, index_newest: 100 })
    ));
    // The same index again replaces it.
    journal.write_snapshot(100, b"state-100-again").unwrap();
    drop(journal);
    let (_, recovery) = open(dir.path(), config);
    assert_eq!(recovery.snapshot.as_ref().unwrap().bytes, b"state-100-again");
    assert_eq!(recovered(recovery), entries(101, 120));
}

#[test]
fn corrupt_newest_snapshot_falls_back_to_the_older_one() {
    let dir = dir_fast();
    let config = log_with_two_snapshots(dir.path());
    let newest = snapshot_paths(dir.path()).pop().unwrap();
    byte_flip(&newest, 35);
    let (journal, recovery) = open(dir.path(), config);
    assert_eq!(recovery.snapshot.as_ref().map(|snapshot| snapshot.index), Some(20));
    assert_eq!(recovery.snapshots_skipped.len(), 1);
    assert!(recovery.snapshots_skipped[0].to_string_lossy().ends_with("snapshot-00000000000000000090.snap.corrupt"));
    assert!(!newest.exists());
    assert_eq!(recovered(recovery), entries(21, 120));
    assert_eq!(journal.snapshot_index(), Some(20));
}

#[test]
fn every_snapshot_corrupt_with_a_pruned_log_is_a_typed_error() {
    let dir = dir_fast();
    let config = log_with_two_snapshots(dir.path());
    for path in snapshot_paths(dir.path()) {
        byte_flip(&path, 3);
    }
    match Journal::open(dir.path(), config) {
        Err(Error::LogStartUncovered { log_first_index, snapshot_index: 0 }) => assert!(log_first_index > 1),
        other => panic!("expected LogStartUncovered, got {other:?}"),
    }
}

#[test]
fn truncated_snapshot_is_skipped() {
    let dir = dir_fast();
    let config = log_with_two_snapshots(dir.path());
    let newest = snapshot_paths(dir.path()).pop().unwrap();
    let bytes = fs::read(&newest).unwrap();
    fs::write(&newest, &bytes[..bytes.len() - 1]).unwrap();
    let (_, recovery) = open(dir.path(), config);
    assert_eq!(recovery.snapshot.unwrap().index, 20);
}

#[test]
fn stray_temporary_files_and_half_deleted_pruned_segments_are_removed() {
    let dir = dir_fast();
    let config = config_small();
    log_build(dir.path(), config, 10);
    let snapshot_temp = dir.path().join("snapshot-00000000000000000005.snap.tmp");
    let segment_temp = dir.path().join("00000000000000000011.log.tmp");
    // A pruned segment is renamed out of the log before it is cut down and deleted; a
    // crash in between leaves it, cut anywhere, for recovery to finish.
    let segment_pruned = dir.path().join("00000000000000000001.log.pruned");
    let unrelated = dir.path().join("notes.txt");
    fs::write(&snapshot_temp, b"half a snapshot").unwrap();
    fs::write(&segment_temp, b"half a header").unwrap();
    fs::write(&segment_pruned, b"a segment cut mid-rec").unwrap();
    fs::write(&unrelated, b"left alone").unwrap();
    let (_, recovery) = open(dir.path(), config);
    assert_eq!(recovery.temp_files_removed.len(), 3);
    assert!(!snapshot_temp.exists() && !segment_temp.exists() && !segment_pruned.exists() && unrelated.exists());
    assert!(recovery.snapshot.is_none());
    assert_eq!(recovered(recovery), entries(1, 10));
}

#[test]
fn snapshot_ahead_of_the_log_restarts_the_log_after_it() {
    let dir = dir_fast();
    let config = config_small();
    let (mut journal, _) = open(dir.path(), config);
    journal.append(&entries(1, 10)).unwrap();
    journal.write_snapshot(50, b"state-50").unwrap();
    assert_eq!((journal.first_index(), journal.last_index(), journal.durable_index()), (51, 50, 50));
    assert!(matches!(journal.append(&[entry(11)]), Err(Error::IndexNotNext { index_expected: 51, .. })));
    journal.append(&[entry(51)]).unwrap();
    drop(journal);
    let (journal, recovery) = open(dir.path(), config);
    assert_eq!(recovery.snapshot.as_ref().unwrap().index, 50);
    assert!(!recovery.log_restarted);
    assert_eq!(recovered(recovery), vec![entry(51)]);
    assert_eq!(journal.first_index(), 51);
}

#[test]
fn log_that_lost_records_behind_a_snapshot_restarts_after_it() {
    let dir = dir_fast();
    let config = JournalConfig::default();
    let (mut journal, _) = open(dir.path(), config);
    journal.append(&entries(1, 10)).unwrap();
    journal.write_snapshot(10, b"state-10").unwrap();
    drop(journal);
    // As after a power loss: the snapshot is durable, the last records were not.
    let segment = segment_paths(dir.path()).remove(0);
    let offsets = record_offsets(&entries(1, 10));
    fs::write(&segment, &fs::read(&segment).unwrap()[..offsets[5] as usize + 7]).unwrap();
    let (mut journal, recovery) = open(dir.path(), config);
    assert!(recovery.log_restarted);
    assert_eq!(recovery.snapshot.as_ref().unwrap().index, 10);
    assert!(recovered(recovery).is_empty());
    assert_eq!((journal.first_index(), journal.last_index()), (11, 10));
    journal.append(&[entry(11)]).unwrap();
}

#[test]
fn snapshot_bad_input_is_rejected() {
    let dir = dir_fast();
    let config = JournalConfig { snapshot_bytes_max: 8, ..config_small() };
    let (mut journal, _) = open(dir.path(), config);
    journal.append(&entries(1, 10)).unwrap();
    assert!(matches!(journal.write_snapshot(5, &[0; 9]), Err(Error::SnapshotTooLarge { snapshot_bytes: 9, .. })));
    assert!(matches!(journal.write_snapshot(u64::MAX, b"x"), Err(Error::IndexOutOfRange { .. })));
    journal.write_snapshot(60, b"x").unwrap();
    journal.write_snapshot(61, b"y").unwrap();
    assert_eq!(journal.first_index(), 62);
    assert!(!journal.is_poisoned());
}

//! Append, sync, reopen, roll, truncate, and rejection of bad input.

use bourse_journal::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use bourse_journal::{Entry, Error, Journal, JournalConfig};

use crate::common::*;

#[test]
fn fresh_missing_directory_is_created_empty() {
    let root = dir_fast();
    let dir = root.path().join("a/b/journal");
    let (journal, recovery) = open(&dir, JournalConfig::default());
    assert!(dir.is_dir());
    assert_eq!((journal.first_index(), journal.last_index(), journal.durable_index()), (1, 0, 0));
    assert!(recovery.snapshot.is_none() && recovery.tail_cut.is_none() && !recovery.log_restarted);
    assert!(recovered(recovery).is_empty());
    assert_eq!(segment_paths(&dir).len(), 1);
    assert!(segment_paths(&dir)[0].ends_with("00000000000000000001.log"));
    drop(journal);
    // An empty log reopens empty.
    let (journal, recovery) = open(&dir, JournalConfig::default());
    assert_eq!(journal.last_index(), 0);
    assert!(recovered(recovery).is_empty());
}

#[test]
fn append_sync_reopen_round_trip() {
    let dir = dir_fast();
    let (mut journal, _) = open(dir.path(), JournalConfig::default());
    let written = entries(1, 100);
    for batch in written.chunks(10) {
        journal.append(batch).unwrap();
        assert_eq!(journal.durable_index(), batch[0].index - 1);
        assert_eq!(journal.sync().unwrap(), batch[9].index);
    }
    // Nothing new: no fdatasync.
    assert_eq!(journal.sync().unwrap(), 100);
    let stats = journal.stats().clone();
    assert_eq!((stats.syncs, stats.records_appended, stats.sync_latency_ns.count), (10, 100, 10));
    let range: Vec<Entry> = journal.read_range(40, 60).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(range, written[39..60]);
    assert_eq!(journal.read_range(101, 100).unwrap().count(), 0);
    assert!(matches!(journal.read_range(0, 5), Err(Error::RangeInvalid { .. })));
    assert!(matches!(journal.read_range(1, 101), Err(Error::RangeInvalid { .. })));
    drop(journal);

    let (journal, recovery) = open(dir.path(), JournalConfig::default());
    assert_eq!((journal.first_index(), journal.last_index(), journal.durable_index()), (1, 100, 100));
    assert_eq!(recovered(recovery), written);
}

#[test]
fn written_but_unsynced_records_survive_a_process_exit() {
    let dir = dir_fast();
    let (mut journal, _) = open(dir.path(), JournalConfig::default());
    journal.append(&entries(1, 5)).unwrap();
    assert_eq!(journal.durable_index(), 0);
    drop(journal);
    let (journal, recovery) = open(dir.path(), JournalConfig::default());
    // Recovery makes what it found durable.
    assert_eq!(journal.durable_index(), 5);
    assert_eq!(recovered(recovery), entries(1, 5));
}

#[test]
fn bad_input_is_rejected_and_changes_nothing() {
    let dir = dir_fast();
    let (mut journal, _) = open(dir.path(), config_small());
    assert!(matches!(journal.append(&[entry(2)]), Err(Error::IndexNotNext { index_expected: 1, index_found: 2 })));
    let oversized = Entry { index: 2, timestamp_ns: 0, payload: vec![0; 257] };
    match journal.append(&[entry(1), oversized]) {
        Err(Error::PayloadTooLarge { index: 2, payload_bytes: 257, payload_bytes_max: 256 }) => {}
        other => panic!("expected PayloadTooLarge, got {other:?}"),
    }
    assert_eq!(journal.last_index(), 0);
    assert_eq!(journal.stats().bytes_appended, 0);
    assert!(!journal.is_poisoned());
    // A payload exactly at the bound is fine, and the log goes on.
    let at_bound = Entry { index: 1, timestamp_ns: 0, payload: vec![7; 256] };
    journal.append(std::slice::from_ref(&at_bound)).unwrap();
    journal.append(&[]).unwrap();
    assert_eq!(journal.last_index(), 1);
    drop(journal);
    let (_, recovery) = open(dir.path(), config_small());
    assert_eq!(recovered(recovery), vec![at_bound]);
}

#[test]
fn config_out_of_bounds_is_rejected() {
    let dir = dir_fast();
    let config = JournalConfig { segment_bytes_max: 100, ..JournalConfig::default() };
    assert!(matches!(Journal::open(dir.path(), config), Err(Error::ConfigInvalid { field: "segment_bytes_max", .. })));
}

#[test]
fn segments_roll_past_the_bound() {
    let dir = dir_fast();
    let config = config_small();
    let (mut journal, _) = open(dir.path(), config);
    let written = entries(1, 200);
    for batch in written.chunks(7) {
        journal.append(batch).unwrap();
    }
    journal.sync().unwrap();
    let segments = segment_paths(dir.path());
    assert!(segments.len() > 5, "{} segments", segments.len());
    assert_eq!(journal.stats().segments_rolled, segments.len() as u64 - 1);
    // Each segment is within the bound and named after the first index it holds.
    let mut index_next = 1;
    for path in &segments {
        let bytes_len = std::fs::metadata(path).unwrap().len();
        assert!(bytes_len <= config.segment_bytes_max, "{} has {bytes_len} bytes", path.display());
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(name, format!("{index_next:020}.log"));
        let mut offset = SEGMENT_HEADER_BYTES as u64;
        while offset < bytes_len {
            offset += (RECORD_HEADER_BYTES + written[index_next as usize - 1].payload.len()) as u64;
            index_next += 1;
        }
        assert_eq!(offset, bytes_len);
    }
    assert_eq!(index_next, 201);
    drop(journal);
    let (journal, recovery) = open(dir.path(), config);
    assert_eq!(journal.last_index(), 200);
    assert_eq!(recovered(recovery), written);
}

#[test]
fn truncate_after_drops_the_suffix_across_segments() {
    let dir = dir_fast();
    let config = config_small();
    let (mut journal, _) = open(dir.path(), config);
    journal.append(&entries(1, 100)).unwrap();
    let segments_before = segment_paths(dir.path()).len();
    journal.truncate_after(37).unwrap();
    assert_eq!((journal.last_index(), journal.durable_index()), (37, 37));
    assert!(segment_paths(dir.path()).len() < segments_before);
    // Raft rewrites the suffix with other entries.
    let rewritten: Vec<Entry> =
        (38..=60).map(|index| Entry { index, timestamp_ns: 9, payload: format!("new-{index}").into_bytes() }).collect();
    journal.append(&rewritten).unwrap();
    journal.truncate_after(100).unwrap(); // beyond the end: nothing to do
    assert_eq!(journal.last_index(), 60);
    drop(journal);

    let (mut journal, recovery) = open(dir.path(), config);
    let mut expected = entries(1, 37);
    expected.extend(rewritten);
    assert_eq!(recovered(recovery), expected);
    // Truncating everything leaves an empty log that starts over at 1.
    journal.truncate_after(0).unwrap();
    assert_eq!((journal.first_index(), journal.last_index()), (1, 0));
    journal.append(&entries(1, 3)).unwrap();
    drop(journal);
    let (_, recovery) = open(dir.path(), config);
    assert_eq!(recovered(recovery), entries(1, 3));
}

#[test]
fn truncate_cannot_drop_what_a_snapshot_covers() {
    let dir = dir_fast();
    let (mut journal, _) = open(dir.path(), config_small());
    journal.append(&entries(1, 20)).unwrap();
    journal.write_snapshot(10, b"state").unwrap();
    assert!(matches!(journal.truncate_after(9), Err(Error::TruncateBelowSnapshot { index: 9, snapshot_index: 10 })));
    journal.truncate_after(10).unwrap();
    assert_eq!(journal.last_index(), 10);
}

#[test]
fn lowering_payload_bytes_max_never_cuts_records_written_under_a_higher_one() {
    let dir = dir_fast();
    let written = log_build(dir.path(), config_small(), 5);
    let config_lower = JournalConfig { payload_bytes_max: 4, ..config_small() };
    let (mut journal, recovery) = open(dir.path(), config_lower);
    assert!(recovery.tail_cut.is_none());
    assert_eq!(recovered(recovery), written);
    // The lower bound applies to new appends.
    assert!(matches!(journal.append(&[entry(6)]), Err(Error::PayloadTooLarge { index: 6, .. })));
}

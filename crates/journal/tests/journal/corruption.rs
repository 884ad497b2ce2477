//! Torn tails are cut; corruption anywhere else is a typed error naming file, offset and
//! expected index.

use std::fs;

use bourse_journal::format::SEGMENT_HEADER_BYTES;
use bourse_journal::{Error, Journal, JournalConfig, RecordFault};

use crate::common::*;

/// Records in the single-segment logs below.
const RECORD_COUNT: u64 = 5;

#[test]
fn torn_tail_cut_at_every_offset_of_the_last_record() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, RECORD_COUNT);
    let segment = segment_paths(dir.path()).remove(0);
    let pristine = fs::read(&segment).unwrap();
    let offsets = record_offsets(&written);
    let (last_start, end) = (offsets[RECORD_COUNT as usize - 1], offsets[RECORD_COUNT as usize]);
    assert_eq!(end, pristine.len() as u64);
    for cut in last_start..end {
        fs::write(&segment, &pristine[..cut as usize]).unwrap();
        let (mut journal, recovery) = open(dir.path(), config);
        match &recovery.tail_cut {
            None => assert_eq!(cut, last_start, "a clean end needs no cut"),
            Some(tail) => {
                assert_eq!((tail.offset, tail.bytes_cut), (last_start, cut - last_start), "cut at {cut}");
                assert_eq!(tail.path, segment);
            }
        }
        assert_eq!(recovered(recovery), written[..4], "cut at {cut}");
        assert_eq!(fs::metadata(&segment).unwrap().len(), last_start, "file truncated to the last valid record");
        // Appends continue cleanly after the cut.
        assert_eq!(journal.last_index(), 4);
        journal.append(&written[4..]).unwrap();
        journal.sync().unwrap();
        drop(journal);
        let (_, recovery) = open(dir.path(), config);
        assert!(recovery.tail_cut.is_none());
        assert_eq!(recovered(recovery), written, "cut at {cut}");
    }
}

#[test]
fn flipped_byte_in_the_last_record_is_cut() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, RECORD_COUNT);
    let segment = segment_paths(dir.path()).remove(0);
    let pristine = fs::read(&segment).unwrap();
    let offsets = record_offsets(&written);
    let last_start = offsets[RECORD_COUNT as usize - 1];
    for flip in last_start..pristine.len() as u64 {
        fs::write(&segment, &pristine).unwrap();
        byte_flip(&segment, flip);
        let (journal, recovery) = open(dir.path(), config);
        let tail = recovery.tail_cut.clone().unwrap_or_else(|| panic!("flip at {flip} not cut"));
        assert_eq!(tail.offset, last_start);
        assert!(
            matches!(tail.fault, RecordFault::HeaderChecksum | RecordFault::PayloadChecksum),
            "flip at {flip}: {:?}",
            tail.fault
        );
        assert_eq!(recovered(recovery), written[..4]);
        assert_eq!(journal.last_index(), 4);
    }
}

#[test]
fn flipped_byte_in_a_middle_record_is_a_typed_error() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, RECORD_COUNT);
    let segment = segment_paths(dir.path()).remove(0);
    let pristine = fs::read(&segment).unwrap();
    let offsets = record_offsets(&written);
    // Record 3 of 5: records 4 and 5 after it prove it is not a torn tail.
    for flip in offsets[2]..offsets[3] {
        fs::write(&segment, &pristine).unwrap();
        byte_flip(&segment, flip);
        match Journal::open(dir.path(), config) {
            Err(Error::RecordCorrupt { path, offset, index_expected, valid_record_offset_after, .. }) => {
                assert_eq!((path, offset, index_expected), (segment.clone(), offsets[2], 3), "flip at {flip}");
                assert_eq!(valid_record_offset_after, Some(offsets[3]));
            }
            other => panic!("flip at {flip}: expected RecordCorrupt, got {other:?}"),
        }
        // Nothing was cut: the file is as it was, for an operator to inspect.
        assert_eq!(fs::metadata(&segment).unwrap().len(), pristine.len() as u64);
    }
}

#[test]
fn corruption_in_a_non_last_segment_is_a_typed_error() {
    let config = config_small();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, 40);
    let segments = segment_paths(dir.path());
    assert!(segments.len() >= 3);
    let second_first: u64 = segments[1].file_stem().unwrap().to_string_lossy().parse().unwrap();
    // The last record of the first segment: a tail there is still the middle of the log.
    let offsets = record_offsets(&written[..second_first as usize - 1]);
    let last_start = offsets[offsets.len() - 2];
    let pristine = fs::read(&segments[0]).unwrap();
    byte_flip(&segments[0], last_start + 40);
    match Journal::open(dir.path(), config) {
        Err(Error::RecordCorrupt { path, offset, index_expected, .. }) => {
            assert_eq!((path, offset, index_expected), (segments[0].clone(), last_start, second_first - 1));
        }
        other => panic!("expected RecordCorrupt, got {other:?}"),
    }
    // A first segment cut short is no torn tail either.
    fs::write(&segments[0], &pristine[..pristine.len() - 3]).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), config),
        Err(Error::RecordCorrupt { fault: RecordFault::PayloadIncomplete { .. }, .. })
    ));
    fs::write(&segments[0], &pristine).unwrap();
    open(dir.path(), config);
}

#[test]
fn missing_middle_segment_is_a_gap() {
    let config = config_small();
    let dir = dir_fast();
    log_build(dir.path(), config, 40);
    let segments = segment_paths(dir.path());
    fs::remove_file(&segments[1]).unwrap();
    let third_first: u64 = segments[2].file_stem().unwrap().to_string_lossy().parse().unwrap();
    let second_first: u64 = segments[1].file_stem().unwrap().to_string_lossy().parse().unwrap();
    match Journal::open(dir.path(), config) {
        Err(Error::SegmentIndexGap { path, index_expected, index_found }) => {
            assert_eq!((path, index_expected, index_found), (segments[2].clone(), second_first, third_first));
        }
        other => panic!("expected SegmentIndexGap, got {other:?}"),
    }
}

#[test]
fn corrupt_segment_header_is_a_typed_error() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    log_build(dir.path(), config, 3);
    let segment = segment_paths(dir.path()).remove(0);
    byte_flip(&segment, 14);
    assert!(matches!(Journal::open(dir.path(), config), Err(Error::SegmentHeaderInvalid { .. })));
    byte_flip(&segment, 14);
    // A segment whose name disagrees with its header.
    fs::rename(&segment, dir.path().join("00000000000000000002.log")).unwrap();
    assert!(matches!(
        Journal::open(dir.path(), config),
        Err(Error::SegmentHeaderInvalid { reason: "header index differs from the file name", .. })
    ));
}

#[test]
fn valid_record_with_the_wrong_index_is_never_cut() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, RECORD_COUNT);
    let segment = segment_paths(dir.path()).remove(0);
    let mut bytes = fs::read(&segment).unwrap();
    let offsets = record_offsets(&written);
    // Append a copy of record 5 where record 6 belongs: checksums pass, the index does not.
    let last_record = bytes[offsets[4] as usize..].to_vec();
    bytes.extend_from_slice(&last_record);
    fs::write(&segment, &bytes).unwrap();
    match Journal::open(dir.path(), config) {
        Err(Error::RecordCorrupt {
            offset,
            index_expected: 6,
            fault: RecordFault::IndexMismatch { index_found: 5 },
            ..
        }) => {
            assert_eq!(offset, offsets[5]);
        }
        other => panic!("expected an index mismatch, got {other:?}"),
    }
}

#[test]
fn zero_filled_tail_is_cut() {
    let config = JournalConfig::default();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, RECORD_COUNT);
    let segment = segment_paths(dir.path()).remove(0);
    let mut bytes = fs::read(&segment).unwrap();
    let length_valid = bytes.len() as u64;
    bytes.resize(bytes.len() + 8192, 0);
    fs::write(&segment, &bytes).unwrap();
    let (_, recovery) = open(dir.path(), config);
    let tail = recovery.tail_cut.clone().unwrap();
    assert_eq!((tail.offset, tail.bytes_cut, tail.fault), (length_valid, 8192, RecordFault::HeaderChecksum));
    assert_eq!(recovered(recovery), written);
}

#[test]
fn torn_tail_in_the_last_of_several_segments_is_cut() {
    let config = config_small();
    let dir = dir_fast();
    let written = log_build(dir.path(), config, 40);
    let last = segment_paths(dir.path()).pop().unwrap();
    let bytes = fs::read(&last).unwrap();
    assert!(bytes.len() > SEGMENT_HEADER_BYTES + 10);
    fs::write(&last, &bytes[..bytes.len() - 10]).unwrap();
    let (journal, recovery) = open(dir.path(), config);
    assert!(recovery.tail_cut.is_some());
    assert_eq!(recovered(recovery), written[..39]);
    assert_eq!(journal.last_index(), 39);
}

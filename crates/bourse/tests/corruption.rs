//! A node's journal damaged on disk, then given to `bourse serve` and `bourse replay`.
//!
//! The journal is built by a real node (market setup and orders through Admin.Submit,
//! then SIGTERM), and each case works on its own copy of the data directory:
//! - a torn tail (the last segment cut short by a few bytes) or a flipped byte in the
//!   last record is cut with a warning: both commands start from every record but the
//!   last, and reach the state a fresh engine reaches from those records;
//! - a flipped byte in a record in the middle of the log (its header or its payload)
//!   is corruption no crash explains: both commands exit non-zero naming the file, the
//!   offset and the index, the node never listens, and the file is left as it was.
//!
//! Layout (crates/journal/src/format.rs): a 24-byte segment header, then records of a
//! 32-byte header (payload length at bytes 4..8, index at 8..16) and the payload.

mod support;

use std::path::{Path, PathBuf};

use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{Px, Qty, Side, SymbolId};
use support::{NodeProcess, ReplaySummary};

const SEGMENT_HEADER_BYTES: u64 = 24;
const RECORD_HEADER_BYTES: u64 = 32;
/// Orders placed after the market setup, so the log has a middle and an end.
const ORDERS_LEN: u64 = 30;
/// What the node logs when it cuts a torn or corrupt tail.
const TAIL_CUT_WARNING: &str = "cut a torn journal tail";

/// A stopped node's data directory and what `bourse replay` says of it.
struct Built {
    _dir: tempfile::TempDir,
    data: PathBuf,
    summary: ReplaySummary,
}

/// Runs a node, sets up a market, places orders, and stops it with SIGTERM.
fn journal_build() -> Built {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let mut admin = support::admin_connect(&node.url()).await;
        let market = support::market_setup(&mut admin, 2).await;
        for i in 0..ORDERS_LEN {
            let side = if i % 2 == 0 { Side::Buy } else { Side::Sell };
            let px = Px(1000 + (i as i64 % 7) - 3);
            let account = market.accounts[(i % 2) as usize];
            let order = OrderRequest::limit(account, SymbolId(market.symbol), side, px, Qty(1 + i as i64), Tif::Gtc);
            let ack = support::admin_submit(&mut admin, 50, i + 1, CommandBody::Place(order)).await;
            assert!(ack.log_index > 0, "{ack:?}");
        }
    });
    let (status, stderr) = node.terminate();
    assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
    let (summary, _) = support::bourse_replay(&data).unwrap_or_else(|f| panic!("replay: {}", f.stderr));
    Built { _dir: dir, data, summary }
}

/// One record of a segment file: where it starts and how long it is.
#[derive(Clone, Copy, Debug)]
struct RecordAt {
    offset: u64,
    bytes: u64,
    index: u64,
}

/// Walks the records of a segment file.
fn records(segment: &Path) -> Vec<RecordAt> {
    let bytes = std::fs::read(segment).unwrap();
    let mut found = Vec::new();
    let mut offset = SEGMENT_HEADER_BYTES as usize;
    while offset < bytes.len() {
        let payload = u32::from_le_bytes(bytes[offset + 4..offset + 8].try_into().unwrap()) as u64;
        let index = u64::from_le_bytes(bytes[offset + 8..offset + 16].try_into().unwrap());
        let record = RecordAt { offset: offset as u64, bytes: RECORD_HEADER_BYTES + payload, index };
        offset += record.bytes as usize;
        found.push(record);
    }
    assert_eq!(offset, bytes.len(), "records end where the file ends");
    found
}

/// A copy of the built data directory, and its one segment file.
fn copy_of(built: &Built) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    support::data_copy(&built.data, &data);
    let segments = support::segments(&data);
    assert_eq!(segments.len(), 1, "the test journal fits one segment: {segments:?}");
    let segment = segments[0].clone();
    (dir, data, segment)
}

fn byte_flip(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

fn truncate_by(path: &Path, bytes: u64) {
    let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    let len = file.metadata().unwrap().len();
    file.set_len(len - bytes).unwrap();
}

/// The state hash a fresh engine reaches from the first `index` records of the log.
fn hash_through(built: &Built, index: u64) -> String {
    let replay = support::replay_journal(&built.data, Some(index));
    assert_eq!(replay.index_last, index);
    replay.state_hash_hex()
}

/// A damaged last record is cut: `bourse replay` and `bourse serve` both start from the
/// records before it, with a warning, and the node reuses the cut record's index.
fn tail_cut_expect(built: &Built, damage: impl Fn(&Path, RecordAt)) {
    let last_index = built.summary.index;
    let expected_hash = hash_through(built, last_index - 1);

    let (_replay_dir, data, segment) = copy_of(built);
    let last = *records(&segment).last().unwrap();
    assert_eq!(last.index, last_index);
    damage(&segment, last);
    let (summary, stderr) = support::bourse_replay(&data).unwrap_or_else(|f| panic!("replay refused: {}", f.stderr));
    assert_eq!(summary, ReplaySummary { index: last_index - 1, state_hash: expected_hash }, "{stderr}");
    assert!(stderr.contains(TAIL_CUT_WARNING), "no warning on stderr:\n{stderr}");

    let (_serve_dir, data, segment) = copy_of(built);
    damage(&segment, last);
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ack = runtime.block_on(async {
        let mut admin = support::admin_connect(&node.url()).await;
        support::admin_submit(&mut admin, 99, 1, CommandBody::CreateAccount).await
    });
    assert_eq!(ack.log_index, last_index, "the next command takes the cut record's place");
    let (status, stderr) = node.terminate();
    assert!(status.success(), "SIGTERM exit {status}:\n{stderr}");
    assert!(stderr.contains(TAIL_CUT_WARNING), "no warning on stderr:\n{stderr}");
}

#[test]
fn torn_tail_is_cut_with_a_warning() {
    let built = journal_build();
    tail_cut_expect(&built, |segment, _| truncate_by(segment, 5));
}

#[test]
fn flipped_byte_in_the_last_record_is_cut_like_a_torn_tail() {
    let built = journal_build();
    tail_cut_expect(&built, |segment, last| byte_flip(segment, last.offset + last.bytes - 2));
}

#[test]
fn flipped_byte_in_a_middle_record_stops_serve_and_replay() {
    let built = journal_build();
    let (_dir, _, segment) = copy_of(&built);
    let all = records(&segment);
    let middle = all[all.len() / 2];
    assert!(middle.index < built.summary.index);
    let payload_at = middle.offset + RECORD_HEADER_BYTES + (middle.bytes - RECORD_HEADER_BYTES) / 2;
    // A payload byte (payload checksum), then a byte of the header's index field.
    for (what, offset) in [("payload", payload_at), ("header", middle.offset + 9)] {
        let (_dir, data, segment) = copy_of(&built);
        byte_flip(&segment, offset);
        let damaged = std::fs::read(&segment).unwrap();
        let expected = format!("corrupt record where index {} was expected", middle.index);
        let file_name = segment.file_name().unwrap().to_str().unwrap().to_string();

        let failure = match NodeProcess::try_start(&data, "127.0.0.1:0".parse().unwrap(), &[]) {
            Ok(node) => panic!("{what}: bourse serve started on a corrupt log:\n{}", node.stderr()),
            Err(failure) => failure,
        };
        assert!(!failure.status.success());
        for needle in [expected.as_str(), file_name.as_str(), &format!("at byte {}", middle.offset)] {
            assert!(failure.stderr.contains(needle), "{what}: serve stderr lacks {needle:?}:\n{}", failure.stderr);
        }

        let failure = match support::bourse_replay(&data) {
            Ok((summary, _)) => panic!("{what}: bourse replay accepted a corrupt log: {summary:?}"),
            Err(failure) => failure,
        };
        assert!(!failure.status.success());
        assert!(failure.stderr.contains(&expected), "{what}: replay stderr lacks {expected:?}:\n{}", failure.stderr);
        assert!(
            std::fs::read(&segment).unwrap() == damaged,
            "{what}: a refused start changed the segment file (recovery must not guess)"
        );
        println!("{what}: {}", failure.stderr.lines().last().unwrap_or(""));
    }
}

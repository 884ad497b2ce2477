//! Helpers shared by the journal's integration tests: directories, configs, entries,
//! file surgery and a seeded generator.

use std::fs;
use std::path::{Path, PathBuf};

use bourse_journal::format::{RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use bourse_journal::{Entry, Journal, JournalConfig, Recovery};
use tempfile::TempDir;

/// A scratch directory on tmpfs when there is one: tests check logic, not the disk, and
/// an fdatasync there costs nothing.
pub fn dir_fast() -> TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(dir) = tempfile::tempdir_in(shm) {
            return dir;
        }
    }
    tempfile::tempdir().expect("create a temporary directory")
}

/// A scratch directory on the real disk, for tests whose point is that fsyncs are slow.
pub fn dir_disk() -> TempDir {
    tempfile::tempdir().expect("create a temporary directory")
}

/// Tiny segments, so that a few dozen records roll over several times.
pub fn config_small() -> JournalConfig {
    JournalConfig { segment_bytes_max: 1024, payload_bytes_max: 256, snapshot_bytes_max: 1 << 20 }
}

/// A recognizable payload of a length that varies with the index.
pub fn payload_for(index: u64) -> Vec<u8> {
    let mut payload = format!("entry-{index}-").into_bytes();
    payload.resize(payload.len() + (index % 23) as usize, b'a' + (index % 26) as u8);
    payload
}

pub fn entry(index: u64) -> Entry {
    Entry { index, timestamp_ns: 1_000_000 + index * 1_000, payload: payload_for(index) }
}

pub fn entries(first: u64, last: u64) -> Vec<Entry> {
    (first..=last).map(entry).collect()
}

pub fn open(dir: &Path, config: JournalConfig) -> (Journal, Recovery) {
    Journal::open(dir, config).expect("open journal")
}

/// Every record recovery hands back, in order.
pub fn recovered(recovery: Recovery) -> Vec<Entry> {
    recovery.entries.collect::<Result<Vec<_>, _>>().expect("read recovered entries")
}

/// A journal holding `entries(1, count)`, synced and closed.
pub fn log_build(dir: &Path, config: JournalConfig, count: u64) -> Vec<Entry> {
    let (mut journal, _) = open(dir, config);
    let written = entries(1, count);
    journal.append(&written).unwrap();
    journal.sync().unwrap();
    written
}

/// Files in `dir` ending in `suffix`, sorted by name.
pub fn files_with_suffix(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|item| item.unwrap().path())
        .filter(|path| path.to_string_lossy().ends_with(suffix))
        .collect();
    paths.sort();
    paths
}

pub fn segment_paths(dir: &Path) -> Vec<PathBuf> {
    files_with_suffix(dir, ".log")
}

pub fn snapshot_paths(dir: &Path) -> Vec<PathBuf> {
    files_with_suffix(dir, ".snap")
}

/// Byte offset of each record in a segment holding `segment_entries`, plus the end.
pub fn record_offsets(segment_entries: &[Entry]) -> Vec<u64> {
    let mut offsets = vec![SEGMENT_HEADER_BYTES as u64];
    for entry in segment_entries {
        let end = offsets.last().unwrap() + (RECORD_HEADER_BYTES + entry.payload.len()) as u64;
        offsets.push(end);
    }
    offsets
}

/// Flips every bit of the byte at `offset` in `path`.
pub fn byte_flip(path: &Path, offset: u64) {
    let mut bytes = fs::read(path).unwrap();
    bytes[offset as usize] ^= 0xff;
    fs::write(path, bytes).unwrap();
}

/// A small seeded generator (SplitMix64): tests print the seed so a failure reproduces.
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// Seeded from `BOURSE_SEED` when set, else from `default_seed`; prints the seed.
    pub fn from_env(test_name: &str, default_seed: u64) -> Self {
        let seed = std::env::var("BOURSE_SEED").ok().and_then(|text| text.parse().ok()).unwrap_or(default_seed);
        println!("{test_name}: seed {seed} (set BOURSE_SEED to reproduce another)");
        Self { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut mixed = self.state;
        mixed = (mixed ^ (mixed >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        mixed = (mixed ^ (mixed >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        mixed ^ (mixed >> 31)
    }

    /// A value in `low ..= high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next_u64() % (high - low + 1)
    }
}

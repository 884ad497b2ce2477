//! A real process killed with SIGKILL in the middle of group commits: every entry it saw
//! acknowledged is recovered, in order, and the log continues.
//!
//! The test binary re-runs itself as the child (`crash_child`, which does nothing unless
//! `BOURSE_JOURNAL_CRASH_DIR` is set). The child prints `acked <index>` after each
//! ticket; the parent kills it once enough acknowledgements arrived.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bourse_journal::{Entry, GroupCommit, GroupCommitConfig, Proposal};

use crate::common::*;

const CHILD_DIR_VAR: &str = "BOURSE_JOURNAL_CRASH_DIR";
/// Acknowledgements the parent waits for before killing.
const ACKS_BEFORE_KILL: u64 = 300;
/// The child stops by itself after this long, should the parent be gone.
const CHILD_RUN_MAX: Duration = Duration::from_secs(30);
const PARENT_WAIT_MAX: Duration = Duration::from_secs(30);

fn crash_payload(index: u64) -> Vec<u8> {
    format!("crash-{index}").into_bytes()
}

/// The child: group commits forever (bounded in time), printing each acknowledgement.
#[test]
fn crash_child() {
    let Some(dir) = std::env::var_os(CHILD_DIR_VAR).map(PathBuf::from) else { return };
    let (journal, _) = open(&dir, config_small());
    let group = GroupCommit::start(journal, GroupCommitConfig::default(), |_| {}).unwrap();
    let handle = group.handle();
    let started = Instant::now();
    let mut index_next = 1;
    let mut stdout = std::io::stdout();
    while started.elapsed() < CHILD_RUN_MAX {
        let size = 1 + index_next % 4;
        let batch: Vec<Proposal> = (index_next..index_next + size)
            .map(|index| Proposal { timestamp_ns: index, payload: crash_payload(index) })
            .collect();
        let range = handle.submit(batch).unwrap().wait().unwrap();
        assert_eq!(range.first, index_next);
        index_next = range.last + 1;
        writeln!(stdout, "acked {}", range.last).unwrap();
        stdout.flush().unwrap();
    }
}

#[test]
fn sigkill_during_group_commit_loses_no_acknowledged_entry() {
    let dir = dir_fast();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["crash::crash_child", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_VAR, dir.path())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut acked_max = 0;
    let started = Instant::now();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(index) = line.unwrap().strip_prefix("acked ") {
            acked_max = index.parse().unwrap();
        }
        if acked_max >= ACKS_BEFORE_KILL || started.elapsed() > PARENT_WAIT_MAX {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(acked_max >= ACKS_BEFORE_KILL, "child acknowledged only {acked_max}");

    let (mut journal, recovery) = open(dir.path(), config_small());
    let recovered = recovered(recovery);
    println!("killed after ack {acked_max}; recovered {} entries", recovered.len());
    assert!(recovered.len() as u64 >= acked_max);
    for (position, entry) in recovered.iter().enumerate() {
        assert_eq!(entry.index, position as u64 + 1);
        assert_eq!(entry.payload, crash_payload(entry.index));
    }
    let next = recovered.len() as u64 + 1;
    journal.append(&[Entry { index: next, timestamp_ns: 0, payload: Vec::new() }]).unwrap();
    journal.sync().unwrap();
}

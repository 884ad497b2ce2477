//! A sink in the background (`SinkConfig::background`, what `bourse serve` and `bourse
//! demo` run): its threads, and the threads they start, are under `SCHED_IDLE`, and it
//! writes the same history as a sink at ordinary priority.

mod support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bourse_engine::EngineConfig;
use bourse_history::{Feed, LogEntry, Opened, Sink, SinkConfig};
use support::{dump, run_sink, small_config, sqlite_url, workload};

/// Linux's number for `SCHED_IDLE` (`sched.h`).
const SCHED_IDLE: u64 = 5;

/// The scheduling policy of each thread of this process whose name starts with
/// `history-`, by name.
fn history_threads() -> Vec<(String, u64)> {
    let mut threads = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(name) = std::fs::read_to_string(task.path().join("comm")) else { continue };
        let name = name.trim().to_owned();
        if !name.starts_with("history-") {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        // Fields after the parenthesised name; `policy` is field 41 of the whole line.
        let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
        threads.push((name, fields[41 - 3].parse().unwrap()));
    }
    threads
}

#[test]
fn a_background_sink_runs_under_sched_idle_and_writes_the_same_history() {
    let dir = tempfile::tempdir().unwrap();
    let log = workload(7, 3_000, 4, 1);
    let url = sqlite_url(dir.path(), "background.sqlite");
    let opened = Opened::open(&url).unwrap();
    let background = SinkConfig { background: true, ..small_config() };
    let sink = Sink::start(opened, EngineConfig::default(), background).unwrap();
    let sender = sink.sender();
    let head = log.entries.last().unwrap().index;
    let (first, rest) = log.entries.split_at(log.entries.len() / 2);
    let feed = |entries: &[LogEntry]| {
        for chunk in entries.chunks(37) {
            let entries = chunk.to_vec();
            sender.blocking_send(Feed::Entries { entries, head_index: head, head_ts: 0 }).unwrap();
        }
    };
    feed(first);
    // While it runs (its source still open): the recorder, the writer and the
    // checkpointer its first write started are all idle-class.
    let deadline = Instant::now() + Duration::from_secs(30);
    let threads = loop {
        let threads = history_threads();
        let names: Vec<&str> = threads.iter().map(|(n, _)| n.as_str()).collect();
        // Linux keeps 15 bytes of a thread's name.
        if ["history-recorder", "history-writer", "history-checkpoint"]
            .iter()
            .all(|n| names.contains(&&n[..n.len().min(15)]))
        {
            break threads;
        }
        assert!(Instant::now() < deadline, "the sink's threads were not all seen: {threads:?}");
        std::thread::sleep(Duration::from_millis(5));
    };
    assert!(threads.iter().all(|&(_, policy)| policy == SCHED_IDLE), "{threads:?}");
    feed(rest);
    drop(sender);
    let status = std::sync::Arc::clone(&sink.status);
    sink.finish().unwrap();
    assert_eq!(status.written_index.load(Ordering::Relaxed), head);

    let ordinary = sqlite_url(dir.path(), "ordinary.sqlite");
    run_sink(&ordinary, &log.entries, small_config()).finish().unwrap();
    assert_eq!(dump(&url), dump(&ordinary));
}

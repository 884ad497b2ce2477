//! A node's history after an upgrade, end to end through the binary. `bourse serve`'s
//! own history (`DATA/history.sqlite`, no `--history`) written by a build of another
//! schema version is set aside whole, where that build opens it, and a new one is
//! written from the log; a store the operator named with `--history` is refused and
//! left as it is.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use bourse_history::store::StoreError;
use bourse_history::{Progress, Store};
use support::{bourse_run, NodeProcess};

/// A two-file SQLite history with five entries' rows, marked as written by schema 7.
fn old_history(path: &Path) {
    let mut store = Store::open(&format!("sqlite:{}", path.display())).unwrap();
    let progress = Progress { applied_index: 5, applied_ts: 5_000, begins_at: 0 };
    store.write(&bourse_history::testing::entry_rows(1, 5), &progress, None).unwrap();
    store.query("UPDATE history_progress SET schema_version = 7", &[]).unwrap();
}

/// The schema version a store was refused for, if it was.
fn refused_version(path: &Path) -> Option<i64> {
    match Store::open(&format!("sqlite:{}", path.display())) {
        Err(StoreError::SchemaVersion { found, .. }) => Some(found),
        _ => None,
    }
}

#[test]
fn a_nodes_own_history_of_another_schema_is_set_aside_and_written_anew() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let own = data.join("history.sqlite");
    old_history(&own);
    assert_eq!(refused_version(&own), Some(7));

    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let addr = node.addr.to_string();
    let created = bourse_run(&["asset-create", "USD", "--node", &addr]);
    assert!(created.status.success(), "asset-create: {}", created.stderr);
    // The new history follows the log from its start: the asset's entry is in it.
    let started = Instant::now();
    loop {
        let mut store = Store::open(&format!("sqlite:{}", own.display())).unwrap();
        let assets = store.query("SELECT name FROM assets", &[]).unwrap();
        if assets.len() == 1 {
            assert_eq!(assets[0][0].text(), Some("USD"));
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "the new history never had the asset:\n{}", node.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, stderr) = node.terminate();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("kept aside"), "{stderr}");
    // The old one, both files, where a build of schema 7 opens them.
    let kept = data.join("history.sqlite.schema-7");
    assert!(kept.join("history-balances.sqlite").exists());
    assert_eq!(refused_version(&kept.join("history.sqlite")), Some(7));
}

#[test]
fn a_history_named_by_the_operator_of_another_schema_is_refused_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let named = dir.path().join("mine.sqlite");
    old_history(&named);
    let url = format!("sqlite:{}", named.display());
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &["--history", &url]);
    let (status, stderr) = node.terminate();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("history schema version 7, this build reads"), "{stderr}");
    assert!(stderr.contains("this node runs without history"), "{stderr}");
    assert!(!dir.path().join("mine.sqlite.schema-7").exists());
    assert_eq!(refused_version(&named), Some(7));
}

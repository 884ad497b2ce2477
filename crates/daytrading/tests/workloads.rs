//! Course workload files replayed through the real service by the workload driver: a
//! golden run of `1userWorkLoad` under the virtual clock compared byte for byte, and the
//! 10-user workload with users concurrent, its audit log validated, then the node's log
//! replayed: the same state hash, and a history rebuilt from the journal dumps the same
//! audit log byte for byte (no quote source is contacted on replay: the quotes are in
//! the log).
//!
//! The golden file is made by running this test with `BOURSE_DT_GOLDEN_WRITE=1` (then
//! read it, validate it, and commit it).

mod support;

use std::path::Path;

use bourse_daytrading::workload::{self, Mode, RunConfig};
use bourse_engine::EngineConfig;
use bourse_history::audit::{dump, DumpScope};
use support::{Exchange, Options};

fn driver(exchange: &Exchange, mode: Mode) -> RunConfig {
    let mut config = RunConfig::new(exchange.service.addr().to_string());
    config.key = Some(bourse_client::ApiKey(exchange.admin.clone()));
    config.mode = mode;
    config.progress = false;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_golden_run_of_the_one_user_workload_is_byte_identical() {
    let exchange = Exchange::start(Options { virtual_clock: true, ..Options::default() }).await;
    let load = workload::load(&support::workload_file("1userWorkLoad")).unwrap();
    let report = workload::run(&load, &driver(&exchange, Mode::Sequential)).await.unwrap();
    assert_eq!(report.commands, 99);
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    let dumped = report.dumps[0].dump.clone().expect("the global dump");
    assert_eq!(dumped.filename, "testLOG");
    let file = exchange.dump_dir.join("testLOG");
    support::xmllint(&file);
    let produced = std::fs::read(&file).unwrap();
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads/golden/1userWorkLoad.xml");
    if std::env::var_os("BOURSE_DT_GOLDEN_WRITE").is_some() {
        std::fs::create_dir_all(golden.parent().unwrap()).unwrap();
        std::fs::write(&golden, &produced).unwrap();
    }
    let expected = std::fs::read(&golden).expect("the golden file (BOURSE_DT_GOLDEN_WRITE=1 makes it)");
    assert!(produced == expected, "the audit log differs from {}", golden.display());
    exchange.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ten_user_workload_runs_concurrently_and_replays_to_the_same_state_and_log() {
    let exchange = Exchange::start(Options { trigger_poll_ms: 200, ..Options::default() }).await;
    let load = workload::load(&support::workload_file("10User_testWorkLoad")).unwrap();
    assert_eq!(load.users().len(), 10);
    let mut config = driver(&exchange, Mode::PerUser);
    config.streams = 3;
    let report = workload::run(&load, &config).await.unwrap();
    assert_eq!(report.commands, 9_999, "every command but the final DUMPLOG answered");
    assert!(report.failures.is_empty(), "{:?}", report.failures);
    assert_eq!(report.latency_us.values().map(|l| l.count).sum::<u64>(), 9_999);
    assert!(report.errors.contains_key("invalid amount"), "the workload's negative amounts: {:?}", report.errors);
    let response = &report.dumps[0];
    let dumped = response.dump.clone().expect("the global dump");
    let through = response.result.as_ref().unwrap().audit_seq;
    let file = exchange.dump_dir.join(&dumped.filename);
    support::xmllint(&file);
    let original = std::fs::read(&file).unwrap();
    assert_eq!(original.len() as u64, dumped.bytes);
    let text = String::from_utf8(original.clone()).unwrap();
    assert_eq!(text.matches("<userCommand>").count(), 10_000);
    // Each user's commands took effect in their numbering order.
    for user in load.users() {
        let numbers: Vec<u64> = load.lines.iter().filter(|l| l.user() == user).map(|l| l.number).collect();
        let logged: Vec<u64> = text
            .split("<userCommand>")
            .skip(1)
            .filter(|record| {
                record.split("</userCommand>").next().unwrap().contains(&format!("<username>{user}</username>"))
            })
            .map(|record| {
                let n = record.split("<transactionNum>").nth(1).unwrap().split('<').next().unwrap();
                n.parse().unwrap()
            })
            .collect();
        assert_eq!(logged, numbers, "{user}'s commands in order");
    }
    let (index, hash) = exchange.state().await;
    let (dir, data) = exchange.stop().await;

    // Replay: the journal alone gives the same state …
    let (_, _, recovered) = bourse_node::recover(&data, &bourse_node::NodeConfig::default()).unwrap();
    assert_eq!(recovered.index, index);
    assert_eq!(bourse_engine::hex(&recovered.state_hash), hash);
    // … and a history rebuilt from it the same audit log.
    let url = format!("sqlite:{}", dir.path().join("rebuilt.sqlite").display());
    let journal = bourse_node::journal_dir(&data);
    let progress = tokio::task::spawn_blocking({
        let url = url.clone();
        move || bourse_history::files::rebuild_from_journal(&journal, &url, EngineConfig::default(), Default::default())
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(progress.applied_index, index);
    let mut store = bourse_history::Store::open(&url).unwrap();
    let mut replayed = Vec::new();
    dump(&mut store, DumpScope { user: None, through_seq: through }, "bourse-dt", &mut replayed).unwrap();
    assert!(replayed == original, "the replayed audit log differs");
}

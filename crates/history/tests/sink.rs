//! The sink over both backends (SQLite in a temporary file, PostgreSQL started by the
//! test in a temporary directory on a free port): rows equal the events of an engine
//! the test runs itself, a restart mid-stream neither duplicates nor misses a row (after
//! a clean stop, and after a writer process is SIGKILLed mid-batch), a rebuild from
//! journal files equals the live history, and the queries answer what the events say.

mod support;

use std::collections::BTreeMap;

use bourse_engine::command::CommandBody;
use bourse_engine::{Event, OrderId, OrderStatus};
use bourse_history::store::Value;
use bourse_history::testing::{entry_rows, TempPostgres};
use bourse_history::{query, LogEntry, Store};
use support::{dump, run_sink, scripted_workload, sink_all, small_config, sqlite_url, workload, Workload};

const SEED: u64 = 0x5EED_0014;

fn int(v: &Value) -> i64 {
    v.int().expect("an integer")
}

fn text(v: &Value) -> &str {
    v.text().expect("a text")
}

/// Every table against the test engine's events.
fn check_rows_equal_events(url: &str, w: &Workload) {
    let tables = dump(url);
    let (mut trades, mut balances, mut accepted, mut cancelled, mut accounts) = (vec![], vec![], vec![], 0, vec![]);
    let (mut assets, mut symbols) = (0, 0);
    let mut before: BTreeMap<(u32, u32), (i64, i64)> = BTreeMap::new();
    let mut orders = Vec::new();
    // `moved` and `rested` rows: a move followed by its order's rest at the same price,
    // with no event that writes an order row in between, is one `moved` row carrying
    // the displayed quantity.
    let mut placed: Vec<(i64, i64, &str, i64, Option<i64>)> = Vec::new();
    for a in &w.applied {
        let mut moved_last = None;
        for event in &a.events {
            match *event {
                Event::Moved { order, px } => {
                    placed.push((a.index as i64, order.0 as i64, "moved", px.0, None));
                    moved_last = Some(placed.len() - 1);
                    continue;
                }
                Event::Rested { order, px, qty_visible, .. } => {
                    match moved_last.take() {
                        Some(i) if placed[i].1 == order.0 as i64 && placed[i].3 == px.0 => {
                            placed[i].4 = Some(qty_visible.0)
                        }
                        _ => placed.push((a.index as i64, order.0 as i64, "rested", px.0, Some(qty_visible.0))),
                    }
                    continue;
                }
                Event::Balance { .. }
                | Event::Rejected { .. }
                | Event::DayTrading(_)
                | Event::AssetCreated { .. }
                | Event::SymbolCreated { .. }
                | Event::AccountCreated { .. }
                | Event::AccountSuspended { .. }
                | Event::AccountResumed { .. } => {}
                // Any other event writes an order row.
                _ => moved_last = None,
            }
            match *event {
                Event::Trade { px, qty, maker_order, taker_order, fee_maker, fee_taker, .. } => trades.push((
                    a.index as i64,
                    a.ts as i64,
                    px.0,
                    qty.0,
                    maker_order.0 as i64,
                    taker_order.0 as i64,
                    fee_maker.0,
                    fee_taker.0,
                )),
                Event::Balance { account, asset, available, reserved } => {
                    let old = before.insert((account.0, asset.0), (available.0, reserved.0)).unwrap_or((0, 0));
                    balances.push((
                        a.index as i64,
                        a.ts as i64,
                        i64::from(account.0),
                        i64::from(asset.0),
                        available.0 - old.0,
                        reserved.0 - old.1,
                        available.0,
                        reserved.0,
                    ));
                }
                Event::Accepted { order, account, qty, .. } => {
                    accepted.push((
                        a.index as i64,
                        order.0 as i64,
                        i64::from(account.0),
                        qty.0,
                        a.command.client.0 as i64,
                        a.command.seq as i64,
                    ));
                    orders.push(order);
                }
                Event::Cancelled { .. } => cancelled += 1,
                Event::AssetCreated { .. } => assets += 1,
                Event::SymbolCreated { .. } => symbols += 1,
                Event::AccountCreated { account } => {
                    // An account opened with an id of its owner's keeps it in its row.
                    let external_id = match a.command.body {
                        CommandBody::CreateAccountWithId { external_id, .. } => Some(external_id as i64),
                        _ => None,
                    };
                    accounts.push((a.index as i64, i64::from(account.0), "created", external_id));
                }
                Event::AccountSuspended { account } => {
                    accounts.push((a.index as i64, i64::from(account.0), "suspended", None))
                }
                Event::AccountResumed { account } => {
                    accounts.push((a.index as i64, i64::from(account.0), "resumed", None))
                }
                _ => {}
            }
        }
    }
    assert!(trades.len() > 100 && balances.len() > 1_000 && accepted.len() > 500, "the workload is rich enough");
    let got: Vec<_> = tables["executions"]
        .iter()
        .map(|r| (int(&r[0]), int(&r[2]), int(&r[4]), int(&r[5]), int(&r[7]), int(&r[8]), int(&r[11]), int(&r[12])))
        .collect();
    assert_eq!(got, trades, "executions");
    let got: Vec<_> = tables["balance_movements"]
        .iter()
        .map(|r| (int(&r[0]), int(&r[2]), int(&r[3]), int(&r[4]), int(&r[5]), int(&r[6]), int(&r[7]), int(&r[8])))
        .collect();
    assert_eq!(got, balances, "balance movements");
    let got: Vec<_> = tables["orders"]
        .iter()
        .map(|r| (int(&r[0]), int(&r[3]), int(&r[4]), int(&r[11]), int(&r[16]), int(&r[17])))
        .collect();
    assert_eq!(got, accepted, "orders");
    let events = &tables["order_events"];
    let got: Vec<_> = events
        .iter()
        .filter(|r| matches!(text(&r[4]), "moved" | "rested"))
        .map(|r| (int(&r[0]), int(&r[3]), text(&r[4]), int(&r[5]), r[6].int()))
        .collect();
    assert_eq!(got, placed, "moves and rests");
    let merged = placed.iter().filter(|p| p.2 == "moved" && p.4.is_some()).count();
    assert!(merged > 20, "the workload moves orders that rest at once: {merged}");
    assert_eq!(events.iter().filter(|r| text(&r[4]) == "cancelled").count(), cancelled, "cancellations");
    assert_eq!(events.iter().filter(|r| text(&r[4]) == "fill").count(), 2 * trades.len(), "a fill per leg");
    assert!(accounts.iter().filter(|a| a.3.is_some()).count() >= 2, "the workload opens accounts with ids");
    let got: Vec<_> =
        tables["account_events"].iter().map(|r| (int(&r[0]), int(&r[3]), text(&r[4]), r[5].int())).collect();
    assert_eq!(got, accounts, "account events");
    assert_eq!(tables["assets"].len(), assets);
    assert_eq!(tables["symbols"].len(), symbols);
    // One `done` per order no longer open, none for the open ones.
    let done: BTreeMap<i64, usize> =
        events.iter().filter(|r| text(&r[4]) == "done").fold(BTreeMap::new(), |mut m, r| {
            *m.entry(int(&r[3])).or_default() += 1;
            m
        });
    for order in orders {
        let open = matches!(w.engine.order_status(order), Some(OrderStatus::Open | OrderStatus::Pending));
        let expected = usize::from(!open);
        assert_eq!(done.get(&(order.0 as i64)).copied().unwrap_or(0), expected, "done rows of order {order}");
    }
    // The last movement of every balance is the engine's balance at the end.
    for ((account, asset), (available, reserved)) in before {
        let balance = w.engine.balance(bourse_engine::AccountId(account), bourse_engine::AssetId(asset)).unwrap();
        assert_eq!((balance.available.0, balance.reserved.0), (available, reserved));
    }
    // Keys are unique per entry across tables.
    let mut keys = std::collections::BTreeSet::new();
    for rows in tables.values() {
        for r in rows {
            assert!(keys.insert((int(&r[0]), int(&r[1]))), "key ({}, {}) used twice", int(&r[0]), int(&r[1]));
        }
    }
}

fn rows_equal_events(url: &str) {
    let w = workload(SEED, 4_000, 6, 0);
    sink_all(url, &w.entries);
    check_rows_equal_events(url, &w);
    let mut store = Store::open(url).unwrap();
    let progress = query::progress(&mut store).unwrap().expect("a progress row");
    assert_eq!(progress.applied_index, w.entries.last().unwrap().index);
    assert_eq!(progress.applied_ts, w.engine.ts_last());
}

/// The sink stops cleanly after a prefix (`finish`: every part has committed the same
/// batches; a real kill is [`a_killed_writer_duplicates_nothing`]) and starts again
/// from what it saved: the rows are those of one uninterrupted run.
fn restart_mid_stream(url_live: &str, url_restarted: &str) {
    let w = workload(SEED ^ 1, 3_000, 4, 1);
    sink_all(url_live, &w.entries);
    for cut in [w.entries.len() / 3, w.entries.len() / 3 + 1, 2 * w.entries.len() / 3 + 7] {
        let sink = run_sink(url_restarted, &w.entries[..cut], small_config());
        sink.finish().unwrap();
    }
    // And a final run that is handed everything again: what is written is skipped.
    sink_all(url_restarted, &w.entries);
    assert_eq!(dump(url_restarted), dump(url_live));
}

/// The environment variable that makes this test binary a writer process: the URL of
/// the store it writes [`killed_writer_log`] into ([`writer_process`]).
const WRITER_URL: &str = "BOURSE_HISTORY_TEST_WRITER_URL";

/// How many times a writer is killed at least, and at most: after the first `KILLS`,
/// until one of the kills has fallen between the commits of a batch's parts.
const KILLS: u64 = 3;
const KILLS_MAX: u64 = 8;

/// The log the killed writers write: long enough (seconds of writing in a debug build,
/// dozens of transactions) that each kill lands while rows are being written, far from
/// either end.
fn killed_writer_log() -> Workload {
    workload(SEED ^ 5, 150_000, 4, 1)
}

/// Transactions of up to 20,000 rows (so a kill has time to land between the commits
/// of their parts) and a snapshot every 5,000 entries (so a restart resumes from one).
fn killed_writer_config() -> bourse_history::SinkConfig {
    bourse_history::SinkConfig {
        batch_rows_max: 5_000,
        transaction_rows_max: 20_000,
        snapshot_every_entries: 5_000,
        ..small_config()
    }
}

/// Not a test of its own: run again with [`WRITER_URL`] set, this binary is the writer
/// process of `*_a_killed_writer_duplicates_nothing`, which writes the whole of
/// [`killed_writer_log`] unless it is killed first. Without it, it does nothing.
#[test]
fn writer_process() {
    let Ok(url) = std::env::var(WRITER_URL) else { return };
    let sink = run_sink(&url, &killed_writer_log().entries, killed_writer_config());
    sink.finish().expect("the writer finishes");
}

/// Starts this test binary as a writer process on `url`.
fn spawn_writer(url: &str) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "writer_process", "--test-threads", "1", "--nocapture"])
        .env(WRITER_URL, url)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("start a writer process")
}

/// A writer process is killed (SIGKILL) again and again at later points of the log,
/// each time on the store the last one left, then a last one writes to the end. Each
/// kill waits until the other parts of a batch have committed and the first has not
/// (`schema::Part`: the first commits last), the window in which a crash leaves a batch
/// written in part; at least one kill must have landed in it. The rows are those a
/// clean one-shot write of the same log produces, table for table and row for row, no
/// key twice.
fn a_killed_writer_duplicates_nothing(url_clean: &str, url_killed: &str) {
    let w = killed_writer_log();
    let last = w.entries.last().unwrap().index;
    run_sink(url_clean, &w.entries, killed_writer_config()).finish().unwrap();
    let mut store = Store::open(url_killed).unwrap();
    // The progress rows as stored (not as the store reads them back to a sink): the
    // first part's, and the furthest of the others' (they commit before the first).
    let read = |store: &mut Store, sql: &str| store.query(sql, &[]).unwrap()[0][0].int().unwrap_or(0) as u64;
    let progress = |store: &mut Store| read(store, "SELECT MAX(applied_index) FROM history_progress");
    let parts = |store: &mut Store| read(store, "SELECT MAX(applied_index) FROM history_progress_parts");
    let (mut killed_at, mut in_part) = (0, 0);
    for kill in 1..=KILLS_MAX {
        if kill > KILLS && in_part > 0 {
            break;
        }
        let target = (last * kill / (KILLS_MAX + 1)).max(killed_at + 1);
        let mut writer = spawn_writer(url_killed);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let mut crossed = None;
        loop {
            if let Some(status) = writer.try_wait().unwrap() {
                assert!(!status.success(), "writer {kill} finished before it was killed: the log is too short");
                panic!("writer {kill} failed: {status}");
            }
            assert!(std::time::Instant::now() < deadline, "writer {kill} made no progress");
            let at = progress(&mut store);
            // Past the target, at the next batch the other parts have committed (or
            // after two seconds of waiting for one: then wherever the writer is).
            if at >= target {
                let since = *crossed.get_or_insert_with(std::time::Instant::now);
                if parts(&mut store) > at || since.elapsed() > std::time::Duration::from_secs(2) {
                    break;
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        writer.kill().unwrap();
        let status = writer.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9), "writer {kill}: {status}");
        let (at, parts_at) = (progress(&mut store), parts(&mut store));
        assert!(at >= target && at < last, "writer {kill} killed mid-way: progress {at}, log 1..={last}");
        eprintln!("writer {kill} killed at progress {at} of {last}, the other parts at {parts_at}");
        in_part += u64::from(parts_at > at);
        killed_at = at;
    }
    assert!(in_part > 0, "no kill landed between the commits of a batch's parts");
    let status = spawn_writer(url_killed).wait().unwrap();
    assert!(status.success(), "the last writer: {status}");
    let clean_progress = query::progress(&mut Store::open(url_clean).unwrap()).unwrap();
    assert_eq!(query::progress(&mut store).unwrap(), clean_progress, "the progress rows");
    assert_eq!((progress(&mut store), parts(&mut store)), (last, last));
    let (clean, killed) = (dump(url_clean), dump(url_killed));
    assert_eq!(clean.keys().collect::<Vec<_>>(), killed.keys().collect::<Vec<_>>());
    assert!(clean["order_events"].len() > 100_000, "the log is rich: {}", clean["order_events"].len());
    for (table, rows) in &clean {
        let got = &killed[table];
        let keys: std::collections::BTreeSet<(i64, i64)> = got.iter().map(|r| (int(&r[0]), int(&r[1]))).collect();
        assert_eq!(keys.len(), got.len(), "{table}: a key twice");
        assert_eq!(got.len(), rows.len(), "{table}: rows");
        if let Some(i) = (0..rows.len()).find(|&i| got[i] != rows[i]) {
            panic!("{table}: row {i} is {:?}, a clean write's is {:?}", got[i], rows[i]);
        }
    }
}

/// Two sinks write the same log into one database at the same time (as two `bourse
/// history run` on one store would): each transaction reads the progress under the
/// write lock and sends only the rows above it, so the rows are those of one run, and
/// no write fails on a key already there.
fn concurrent_writers_duplicate_nothing(url_live: &str, url_shared: &str) {
    let w = workload(SEED ^ 4, 3_000, 3, 1);
    sink_all(url_live, &w.entries);
    drop(Store::open(url_shared).unwrap()); // the schema, before two creators race
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| run_sink(url_shared, &w.entries, small_config()).finish().expect("a writer")))
            .collect();
        writers.into_iter().for_each(|writer| writer.join().expect("a writer thread"));
    });
    assert_eq!(dump(url_shared), dump(url_live));
    // A batch at or below the progress again: the store keeps what it has.
    let mut store = Store::open(url_shared).unwrap();
    let saved = store.saved().unwrap().unwrap();
    let mut recorder = bourse_history::Recorder::new(bourse_engine::EngineConfig::default());
    let mut rows = bourse_history::rows::Rows::default();
    for entry in &w.entries[..100] {
        recorder.apply(entry, Some(&mut rows)).unwrap();
    }
    let old = bourse_history::Progress { applied_index: w.entries[99].index, applied_ts: 0, begins_at: 0 };
    store.write(&rows, &old, None).unwrap();
    assert_eq!(store.saved().unwrap().unwrap().progress, saved.progress);
    assert_eq!(dump(url_shared), dump(url_live));
}

/// Rebuilding from a journal directory equals the live history.
fn rebuild_equals_live(url_live: &str, url_rebuilt: &str, journal: &std::path::Path) {
    let w = workload(SEED ^ 2, 2_500, 1, 1);
    sink_all(url_live, &w.entries);
    write_journal(journal, &w.entries);
    let progress = bourse_history::files::rebuild_from_journal(
        journal,
        url_rebuilt,
        bourse_engine::EngineConfig::default(),
        small_config(),
    )
    .unwrap();
    assert_eq!(progress.applied_index, w.entries.last().unwrap().index);
    assert_eq!(progress.begins_at, 0);
    assert_eq!(dump(url_rebuilt), dump(url_live));
    // A rebuild into a database that holds history is refused and changes nothing.
    let again = bourse_history::files::rebuild_from_journal(
        journal,
        url_rebuilt,
        bourse_engine::EngineConfig::default(),
        small_config(),
    );
    assert!(again.is_err());
    assert_eq!(dump(url_rebuilt), dump(url_live));
}

fn write_journal(dir: &std::path::Path, entries: &[LogEntry]) {
    let config = bourse_journal::JournalConfig { segment_bytes_max: 64 << 10, ..Default::default() };
    let (mut journal, _) = bourse_journal::Journal::open(dir, config).unwrap();
    for chunk in entries.chunks(100) {
        let records: Vec<_> = chunk
            .iter()
            .map(|e| bourse_journal::Entry { index: e.index, timestamp_ns: 0, payload: e.commands[0].clone() })
            .collect();
        journal.append(&records).unwrap();
        journal.sync().unwrap();
    }
}

/// The queries against sums the test computes from the events.
fn queries_answer(url: &str) {
    let w = workload(SEED ^ 3, 3_000, 3, 0);
    sink_all(url, &w.entries);
    let mut store = Store::open(url).unwrap();
    let (ts_first, ts_last) = (w.applied.first().unwrap().ts as i64, w.applied.last().unwrap().ts as i64);
    let mid = (ts_first + ts_last) / 2;
    for account in 0..4u32 {
        let statement = query::account_statement(&mut store, i64::from(account), mid, ts_last + 1, 100_000).unwrap();
        // Opening + movements = closing, asset by asset, and closing = the engine's.
        let mut sums: BTreeMap<i64, (i64, i64)> =
            statement.opening.iter().map(|b| (b.asset, (b.available, b.reserved))).collect();
        let mut expected_moves = 0;
        for a in w.applied.iter().filter(|a| a.ts as i64 >= mid) {
            expected_moves += a
                .events
                .iter()
                .filter(|e| matches!(e, Event::Balance { account: acc, .. } if acc.0 == account))
                .count();
        }
        assert_eq!(statement.movements.len(), expected_moves, "movements of account {account}");
        for m in &statement.movements {
            let s = sums.entry(m.asset).or_default();
            s.0 += m.delta_available;
            s.1 += m.delta_reserved;
            assert_eq!(*s, (m.available, m.reserved), "a movement's after-values follow from its delta");
            assert!(m.ts >= mid && m.ts <= ts_last);
        }
        for b in &statement.closing {
            let balance =
                w.engine.balance(bourse_engine::AccountId(account), bourse_engine::AssetId(b.asset as u32)).unwrap();
            assert_eq!((b.available, b.reserved), (balance.available.0, balance.reserved.0));
        }
        // An empty window: no movements, opening = closing.
        let empty = query::account_statement(&mut store, i64::from(account), mid, mid, 10).unwrap();
        assert!(empty.movements.is_empty());
        assert_eq!(empty.opening, empty.closing);
        let bounded = query::account_statement(&mut store, i64::from(account), 0, i64::MAX, 5).unwrap();
        let whole = query::account_statement(&mut store, i64::from(account), 0, i64::MAX, 100_000).unwrap();
        assert_eq!(bounded.movements, whole.movements[..5], "the first movements in log order, every asset merged");
        assert!(bounded.truncated && !whole.truncated);
        assert!(whole.movements.windows(2).all(|w| (w[0].log_index, w[0].pos) < (w[1].log_index, w[1].pos)));
    }
    // Trades of each symbol equal the trade events.
    for symbol in 0..2u32 {
        let expected = w
            .applied
            .iter()
            .flat_map(|a| a.events.iter())
            .filter(|e| matches!(e, Event::Trade { symbol: s, .. } if s.0 == symbol))
            .count();
        let (trades, truncated) = query::trades(&mut store, i64::from(symbol), 0, i64::MAX, 100_000).unwrap();
        assert_eq!((trades.len(), truncated), (expected, false));
    }
    assert_eq!(query::symbol_id(&mut store, "BETA/USD").unwrap(), Some(1));
    assert_eq!(query::symbol_id(&mut store, "NOPE/USD").unwrap(), None);
    // Every order: executed + cancelled + open = placed; status agrees with the engine.
    let mut checked = 0;
    for a in &w.applied {
        for event in &a.events {
            let Event::Accepted { order, qty, .. } = *event else { continue };
            let answer = query::order_query(&mut store, order.0 as i64).unwrap().expect("a known order");
            let executed: i64 = answer.executed.iter().map(|p| p.qty).sum();
            let cancelled: i64 = answer.cancelled.iter().map(|p| p.qty).sum();
            let engine_status = w.engine.order_status(order);
            match engine_status {
                Some(OrderStatus::Open | OrderStatus::Pending) => {
                    assert_eq!(answer.status, "open");
                    let view = w.engine.order(order).unwrap();
                    assert_eq!(answer.qty_open, view.qty_open.0, "open quantity of {order}");
                    assert_eq!(executed, view.record.qty_filled.0);
                }
                // Reduced lots count as cancelled parts.
                Some(OrderStatus::Filled) => {
                    assert_eq!((answer.status.as_str(), executed + cancelled), ("filled", qty.0))
                }
                Some(OrderStatus::Cancelled | OrderStatus::Expired) | None => assert_ne!(answer.status, "open"),
            }
            if answer.status != "open" {
                // Market buys by budget may end with lots neither filled nor cancelled
                // by name; everything else adds up.
                assert!(executed + cancelled <= qty.0);
            }
            // The engine's own order query, rebuilt from the rows field for field (open,
            // pending, filled, cancelled, expired; fills with fees and counter orders).
            let view = w.engine.order(order).expect("the test engine remembers every order of this workload");
            assert_eq!(query::order_view(&mut store, order.0 as i64).unwrap(), Some(view), "order {order}");
            let history = query::order_history(&mut store, order.0 as i64).unwrap().unwrap();
            assert_eq!(history.changes.first().map(|c| c.event.as_str()), Some("accepted"));
            assert_eq!(history.executions.len(), answer.executed.len());
            checked += 1;
        }
    }
    assert!(checked > 300);
    assert!(query::order_query(&mut store, i64::MAX).unwrap().is_none());
    assert!(query::order_view(&mut store, i64::MAX).unwrap().is_none());
    let _ = OrderId(0);
}

/// A move that rests at once is one `moved` row with the quantity it shows, and the
/// order views read it: an iceberg partly filled, then moved, shows a whole slice again
/// (the row's quantity, not what was left of the old slice); a plain order moved; a move
/// that crosses keeps `moved`, its fills and then `rested`.
fn moves_that_rest_at_once(url: &str) {
    use bourse_engine::command::{OrderRequest, Tif};
    use bourse_engine::{AccountId, Px, Qty, Side, SymbolId};
    let (acme, iceberg) = (SymbolId(0), OrderId(1));
    let limit = |account: u32, side: Side, px: i64, qty: i64| {
        OrderRequest::limit(AccountId(account), acme, side, Px(px), Qty(qty), Tif::Gtc)
    };
    // Order ids follow from the accepted events below; the script is written for them.
    let script = vec![
        CommandBody::Place(OrderRequest { display_qty: Some(Qty(10)), ..limit(0, Side::Sell, 1_000, 100) }),
        CommandBody::Place(limit(1, Side::Buy, 1_000, 4)),
        CommandBody::Move { account: AccountId(0), symbol: acme, order: iceberg, px: Px(1_010) },
        CommandBody::Place(limit(1, Side::Sell, 960, 5)),
        CommandBody::Place(limit(2, Side::Buy, 900, 5)),
        CommandBody::Move { account: AccountId(2), symbol: acme, order: OrderId(4), px: Px(905) },
        CommandBody::Place(limit(3, Side::Buy, 950, 25)),
        CommandBody::Move { account: AccountId(3), symbol: acme, order: OrderId(5), px: Px(960) },
    ];
    let w = scripted_workload(SEED, 0, 1, 1, script);
    let accepted: Vec<OrderId> = w
        .applied
        .iter()
        .flat_map(|a| &a.events)
        .filter_map(|e| if let Event::Accepted { order, .. } = *e { Some(order) } else { None })
        .collect();
    assert_eq!(accepted, [OrderId(1), OrderId(2), OrderId(3), OrderId(4), OrderId(5)], "the script's order ids");
    sink_all(url, &w.entries);
    let mut store = Store::open(url).unwrap();
    let changes = |store: &mut Store, order: u64| -> Vec<(String, Option<i64>, Option<i64>)> {
        let history = query::order_history(store, order as i64).unwrap().unwrap();
        history.changes.into_iter().map(|c| (c.event, c.px, c.qty)).collect()
    };
    let step = |e: &str, px: i64, qty: Option<i64>| (e.to_string(), Some(px), qty);
    let iceberg_changes = changes(&mut store, 1);
    assert_eq!(
        iceberg_changes[..4],
        [
            step("accepted", 1_000, Some(100)),
            step("rested", 1_000, Some(10)),
            step("fill", 1_000, Some(4)),
            step("moved", 1_010, Some(10))
        ]
    );
    assert_eq!(
        changes(&mut store, 4),
        [step("accepted", 900, Some(5)), step("rested", 900, Some(5)), step("moved", 905, Some(5))]
    );
    // The crossing move: moved without a quantity, the fills, then the rest of it rested.
    let crossing = changes(&mut store, 5);
    let kinds: Vec<&str> = crossing.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(kinds[..3], ["accepted", "rested", "moved"]);
    assert_eq!(crossing[2..], [step("moved", 960, None), step("fill", 960, Some(5)), step("rested", 960, Some(20))]);
    for order in accepted {
        assert_eq!(query::order_view(&mut store, order.0 as i64).unwrap(), w.engine.order(order), "order {order}");
    }
    let view = w.engine.order(iceberg).unwrap();
    assert_eq!((view.px_resting, view.qty_visible), (Some(Px(1_010)), Qty(10)), "the iceberg shows a whole slice");
}

fn progress_at(applied_index: u64, begins_at: u64) -> bourse_history::Progress {
    bourse_history::Progress { applied_index, applied_ts: applied_index * 1_000, begins_at }
}

/// The log indexes of a table's rows, in order.
fn indexes(store: &mut Store, table: &str) -> Vec<i64> {
    let sql = format!("SELECT log_index FROM {table} ORDER BY log_index, pos");
    store.query(&sql, &[]).unwrap().iter().map(|r| int(&r[0])).collect()
}

/// The other writers' parts (`balance_movements`; in PostgreSQL `order_events` too:
/// `schema::Part`) commit before the first's (`orders` and the rest): when the first
/// part fails (here on a duplicate key; in life, a crash between the commits), the
/// others are a batch ahead. The sink resumes after the first part's progress and
/// writes the batch again: the others skip what they have, every row is there once.
fn a_second_part_ahead_skips_what_it_has(url: &str) {
    let progress = |applied_index| progress_at(applied_index, 0);
    let mut store = Store::open(url).unwrap();
    // A bug: the order of entry 15 written with a progress of 10.
    let mut first = entry_rows(1, 10);
    first.orders.extend(entry_rows(15, 15).orders);
    store.write(&first, &progress(10), None).unwrap();
    // So the first part of the next batch fails on it; the others commit.
    assert!(store.write(&entry_rows(11, 20), &progress(20), None).is_err());
    assert_eq!(store.saved().unwrap().unwrap().progress, progress(10));
    assert_eq!(indexes(&mut store, "orders"), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15]);
    assert_eq!(indexes(&mut store, "balance_movements"), (1..=20).collect::<Vec<_>>());
    // Resumed after 10 (without the row written already): the rows again, in other
    // batches, and further.
    let mut later = entry_rows(15, 25);
    later.orders.retain(|r| r.key.log_index != 15);
    store.write_batches(&[entry_rows(11, 14), later], &progress(25), None).unwrap();
    assert_eq!(store.saved().unwrap().unwrap().progress, progress(25));
    for table in ["orders", "order_events", "balance_movements"] {
        assert_eq!(indexes(&mut store, table), (1..=25).collect::<Vec<_>>(), "{table}");
    }
}

/// The first write of a new history fails between the commits (here on a row of the
/// first part put there by hand; in life, a crash), so the other parts have rows and
/// the first none. The sink starts the history again, at an earlier snapshot this time
/// (a member that kept an older one): the other parts start again with it, and have
/// every row of the new start once — not the rows of the first try's start only, which
/// would leave the entries between the two starts without their balance movements.
fn a_second_part_beside_an_empty_first_starts_again(url: &str, other: &str) {
    let all = |store: &mut Store, from: i64, to: i64| {
        for table in ["orders", "order_events", "balance_movements"] {
            assert_eq!(indexes(store, table), (from..=to).collect::<Vec<_>>(), "{table}");
        }
    };
    let mut store = Store::open(url).unwrap();
    let stray = "INSERT INTO orders (log_index, pos, ts, order_id, account, symbol, side, kind, qty, tif, \
                 post_only, stp, client, seq) VALUES (8, 2, 8000, 8, 2, 1, 'buy', 'limit', 8, 'gtc', 0, 'none', 1, 8)";
    store.query(stray, &[]).unwrap();
    // Begun after a snapshot at 4: entries 5..=10.
    assert!(store.write(&entry_rows(5, 10), &progress_at(10, 5), None).is_err());
    assert!(store.saved().unwrap().is_none(), "the first part has no progress");
    assert_eq!(indexes(&mut store, "balance_movements"), (5..=10).collect::<Vec<_>>());
    store.query("DELETE FROM orders", &[]).unwrap();
    // Begun again after a snapshot at 2: entries 3..=12.
    store.write(&entry_rows(3, 12), &progress_at(12, 3), None).unwrap();
    assert_eq!(store.saved().unwrap().unwrap().progress, progress_at(12, 3));
    all(&mut store, 3, 12);
    // And a start after a later snapshot keeps none of the earlier start's rows either.
    let mut store = Store::open(other).unwrap();
    store.query(stray, &[]).unwrap();
    assert!(store.write(&entry_rows(1, 10), &progress_at(10, 1), None).is_err());
    store.query("DELETE FROM orders", &[]).unwrap();
    store.write(&entry_rows(7, 12), &progress_at(12, 7), None).unwrap();
    all(&mut store, 7, 12);
}

/// A row whose key is in the store already (which only a bug could send: rows above the
/// progress are new) fails its whole batch, also in the middle of a many-row INSERT: no
/// row of the batch is kept and the progress does not move.
fn a_duplicate_key_fails_the_batch(url: &str) {
    use bourse_history::rows::{OrderEventRow, RowKey, Rows};
    use bourse_history::Progress;
    let event = |log_index: i64, pos: i64| OrderEventRow {
        key: RowKey { log_index, pos, ts: log_index * 1_000 },
        order_id: 7 + pos % 3,
        event: "moved",
        px: Some(100 + pos),
        qty: None,
        qty_remaining: None,
        reason: None,
    };
    let progress = |applied_index: u64| Progress { applied_index, applied_ts: applied_index * 1_000, begins_at: 0 };
    let count = |store: &mut Store| int(&store.query("SELECT COUNT(*) FROM order_events", &[]).unwrap()[0][0]);
    let mut store = Store::open(url).unwrap();
    // A bug: rows of entry 20 written with a progress of 10.
    let first = Rows { order_events: (0..100).map(|pos| event(20, pos)).collect(), ..Rows::default() };
    store.write(&first, &progress(10), None).unwrap();
    assert_eq!(count(&mut store), 100);
    // The next batch holds 300 new rows and, among them, one of those again.
    let mut again = Rows { order_events: (0..150).map(|pos| event(21, pos)).collect(), ..Rows::default() };
    again.order_events.push(event(20, 42));
    again.order_events.extend((0..150).map(|pos| event(22, pos)));
    assert!(store.write(&again, &progress(22), None).is_err());
    assert_eq!(count(&mut store), 100);
    assert_eq!(store.saved().unwrap().unwrap().progress, progress(10));
    // Without the duplicate the batch is written, every row once.
    again.order_events.retain(|r| r.key.log_index != 20);
    store.write(&again, &progress(22), None).unwrap();
    assert_eq!(count(&mut store), 400);
    assert_eq!(store.saved().unwrap().unwrap().progress, progress(22));
}

#[test]
fn sqlite_a_duplicate_key_fails_the_batch() {
    let dir = tempfile::tempdir().unwrap();
    a_duplicate_key_fails_the_batch(&sqlite_url(dir.path(), "h.sqlite"));
}

#[test]
fn sqlite_a_second_part_ahead_skips_what_it_has() {
    let dir = tempfile::tempdir().unwrap();
    a_second_part_ahead_skips_what_it_has(&sqlite_url(dir.path(), "h.sqlite"));
}

#[test]
fn sqlite_a_second_part_beside_an_empty_first_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    a_second_part_beside_an_empty_first_starts_again(
        &sqlite_url(dir.path(), "h.sqlite"),
        &sqlite_url(dir.path(), "other.sqlite"),
    );
}

#[test]
fn sqlite_rows_equal_events() {
    let dir = tempfile::tempdir().unwrap();
    rows_equal_events(&sqlite_url(dir.path(), "h.sqlite"));
}

#[test]
fn sqlite_restart_mid_stream_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    restart_mid_stream(&sqlite_url(dir.path(), "live.sqlite"), &sqlite_url(dir.path(), "restarted.sqlite"));
}

#[test]
fn sqlite_a_killed_writer_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    a_killed_writer_duplicates_nothing(
        &sqlite_url(dir.path(), "clean.sqlite"),
        &sqlite_url(dir.path(), "killed.sqlite"),
    );
}

#[test]
fn sqlite_concurrent_writers_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    concurrent_writers_duplicate_nothing(
        &sqlite_url(dir.path(), "live.sqlite"),
        &sqlite_url(dir.path(), "shared.sqlite"),
    );
}

#[test]
fn sqlite_rebuild_equals_live() {
    let dir = tempfile::tempdir().unwrap();
    rebuild_equals_live(
        &sqlite_url(dir.path(), "live.sqlite"),
        &sqlite_url(dir.path(), "rebuilt.sqlite"),
        &dir.path().join("journal"),
    );
}

#[test]
fn sqlite_moves_that_rest_at_once() {
    let dir = tempfile::tempdir().unwrap();
    moves_that_rest_at_once(&sqlite_url(dir.path(), "h.sqlite"));
}

#[test]
fn sqlite_queries() {
    let dir = tempfile::tempdir().unwrap();
    queries_answer(&sqlite_url(dir.path(), "h.sqlite"));
}

/// One server for the PostgreSQL cases, each in a database of its own.
#[test]
fn postgres_all() {
    let server = TempPostgres::start().expect("start a temporary PostgreSQL");
    rows_equal_events(&server.database().unwrap());
    moves_that_rest_at_once(&server.database().unwrap());
    restart_mid_stream(&server.database().unwrap(), &server.database().unwrap());
    a_killed_writer_duplicates_nothing(&server.database().unwrap(), &server.database().unwrap());
    concurrent_writers_duplicate_nothing(&server.database().unwrap(), &server.database().unwrap());
    let dir = tempfile::tempdir().unwrap();
    rebuild_equals_live(&server.database().unwrap(), &server.database().unwrap(), &dir.path().join("journal"));
    queries_answer(&server.database().unwrap());
    a_duplicate_key_fails_the_batch(&server.database().unwrap());
    a_second_part_ahead_skips_what_it_has(&server.database().unwrap());
    a_second_part_beside_an_empty_first_starts_again(&server.database().unwrap(), &server.database().unwrap());
}

/// The sink's rows and the queries over `sslmode=verify-full` (every connection the
/// sink and the readers open goes through TLS, verified against the server's CA).
#[test]
fn postgres_over_verified_tls() {
    let server = TempPostgres::start_tls().expect("start a temporary PostgreSQL with TLS");
    let root = server.tls().expect("TLS files").ca.display().to_string();
    // `postgres://bourse@127.0.0.1:PORT/DB` → to `localhost`, verify-full.
    let verified = |url: String| {
        format!("{}?sslmode=verify-full&sslrootcert={root}", url.replacen("@127.0.0.1:", "@localhost:", 1))
    };
    let url = verified(server.database().unwrap());
    rows_equal_events(&url);
    let mut store = Store::open(&url).unwrap();
    let ssl = store.query("SELECT ssl::text FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[]).unwrap();
    assert_eq!(ssl, vec![vec![Value::Text("true".into())]], "the connection is TLS");
    queries_answer(&verified(server.database().unwrap()));
}

#[test]
fn bad_urls_are_refused() {
    assert!(Store::open("").is_err());
    assert!(Store::open("postgres://nobody@127.0.0.1:1/none").is_err());
}

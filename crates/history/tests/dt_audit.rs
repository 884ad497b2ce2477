//! Day-trading audit records through the sink into both backends: `dt_audit` rows go the
//! write path of every table (SQLite prepared inserts, PostgreSQL binary COPY, behind
//! the progress read under the write lock), so a sink restarted mid-stream or two sinks
//! on one store write each record once, and the audit document dumped from SQLite and
//! from PostgreSQL is the same, byte for byte, with the ledger's record count.

mod support;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::{DtCommand, DtKind, DtQuote, DtRequest, QuoteSource, Sym};
use bourse_engine::{codec, ClientId, Engine, EngineConfig};
use bourse_history::audit::{dump, DumpScope};
use bourse_history::testing::TempPostgres;
use bourse_history::{LogEntry, Store};
use support::{run_sink, sink_all, small_config, sqlite_url};

const USERS: [&str; 4] = ["oY01WVirLr", "abcDEF1234", "u_3", "z-4"];
const SYMBOLS: [&str; 3] = ["S", "AB", "XYZ"];

/// A seeded day-trading log: every kind of command (bad arguments too), quotes attached
/// to about half of QUOTE/BUY/SELL, poller quotes, 1 to 30 s between commands (so
/// pending orders expire), entries of 1 to 4 commands. Returns the entries and the
/// ledger's record count at the end.
fn dt_log(seed: u64, commands: usize) -> (Vec<LogEntry>, u64) {
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut engine: Engine = Engine::new(EngineConfig::default());
    let mut events = Vec::new();
    let mut ts = 1_767_225_600_000_000_000u64;
    let mut bodies = Vec::new();
    for n in 1..=commands as u64 {
        let user = USERS[(next() % 4) as usize];
        let symbol = SYMBOLS[(next() % 3) as usize];
        let amount = match next() % 10 {
            0 => "-5.00".to_owned(),
            1 => "abc".to_owned(),
            _ => format!("{}.{:02}", next() % 900 + 1, next() % 100),
        };
        let quote = |price: i64, n: u64| DtQuote {
            symbol: Sym::parse(symbol).unwrap(),
            price,
            userid: user.to_owned(),
            quote_server_time: ts / 1_000_000,
            cryptokey: format!("key{n}<&>"),
            source: QuoteSource::Emulator,
            transaction_num: n,
        };
        let price = (next() % 50_000 + 100) as i64;
        let request = if next() % 12 == 0 {
            DtRequest::Quote(quote(price, n))
        } else {
            let kind = DtKind::ALL[(next() % 16) as usize];
            let args: Vec<String> = match kind {
                DtKind::Add => vec![user.into(), if n < 8 { "50000.00".into() } else { amount }],
                DtKind::Quote | DtKind::CancelSetBuy | DtKind::CancelSetSell => vec![user.into(), symbol.into()],
                DtKind::DisplaySummary
                | DtKind::CommitBuy
                | DtKind::CancelBuy
                | DtKind::CommitSell
                | DtKind::CancelSell => vec![user.into()],
                DtKind::DumpLog if next() % 2 == 0 => vec!["./all".into()],
                DtKind::DumpLog => vec![user.into(), "mine".into()],
                _ => vec![user.into(), symbol.into(), amount],
            };
            let priced = matches!(kind, DtKind::Quote | DtKind::Buy | DtKind::Sell);
            let attached = (priced && next() % 2 == 0).then(|| quote(price, n));
            let admin = next() % 2 == 0;
            let command = DtCommand { kind, args, transaction_num: n, caller: String::new(), admin, quote: attached };
            DtRequest::Command(command)
        };
        ts += 1_000_000_000 * (1 + next() % 30);
        let command = Command { client: ClientId(1), seq: n, ts, body: CommandBody::DayTrading(Box::new(request)) };
        events.clear();
        engine.apply(&command, &mut events);
        bodies.push(codec::encode(&command));
    }
    let mut entries = Vec::new();
    let mut bodies = bodies.into_iter().peekable();
    let mut index = 1;
    while bodies.peek().is_some() {
        let n = 1 + (next() % 4) as usize;
        entries.push(LogEntry { index, commands: bodies.by_ref().take(n).collect() });
        index += 1;
    }
    (entries, engine.day_trading().audit_records())
}

fn document(url: &str, user: Option<&str>) -> (Vec<u8>, u64) {
    let mut store = Store::open(url).unwrap();
    let mut out = Vec::new();
    let stats = dump(&mut store, DumpScope { user, through_seq: u64::MAX }, "bourse-dt", &mut out).unwrap();
    (out, stats.records)
}

/// The document `whole` keeps only the records naming `user`: what that user's dump must be.
fn records_of(whole: &[u8], user: &str) -> String {
    let text = std::str::from_utf8(whole).unwrap();
    let mut out = String::new();
    let mut record = String::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("  <") || line.starts_with("    <") {
            record.push_str(line);
            if line.starts_with("  </") {
                if record.contains(&format!("<username>{user}</username>")) {
                    out.push_str(&record);
                }
                record.clear();
            }
        } else {
            out.push_str(line);
        }
    }
    out
}

/// A whole run, a run restarted at three cuts, and two concurrent sinks: the same
/// audit document; it has every record of the ledger.
fn one_backend(live: &str, restarted: &str, shared: &str) -> Vec<Vec<u8>> {
    let (entries, records) = dt_log(7, 3_000);
    assert!(records > 5_000, "a log rich in records: {records}");
    sink_all(live, &entries);
    let (whole, dumped) = document(live, None);
    assert_eq!(dumped, records);
    let text = String::from_utf8(whole.clone()).unwrap();
    for element in ["<userCommand>", "<quoteServer>", "<accountTransaction>", "<systemEvent>", "<errorEvent>"] {
        assert!(text.contains(element), "{element}");
    }
    assert!(text.contains("&lt;&amp;&gt;</cryptokey>"), "text is escaped");
    for cut in [entries.len() / 3, entries.len() / 2 + 1] {
        run_sink(restarted, &entries[..cut], small_config()).finish().unwrap();
    }
    sink_all(restarted, &entries);
    assert!(document(restarted, None).0 == whole, "a restarted sink wrote the same records once");
    drop(Store::open(shared).unwrap());
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2)
            .map(|_| scope.spawn(|| run_sink(shared, &entries, small_config()).finish().expect("a writer")))
            .collect();
        writers.into_iter().for_each(|w| w.join().expect("a writer thread"));
    });
    assert!(document(shared, None).0 == whole, "two sinks on one store wrote each record once");
    let mut out = vec![whole];
    for user in USERS {
        let (mine, _) = document(live, Some(user));
        let text = String::from_utf8(mine.clone()).unwrap();
        for other in USERS.iter().filter(|u| **u != user) {
            assert!(!text.contains(&format!("<username>{other}</username>")));
        }
        assert_eq!(text, records_of(&out[0], user), "a user's document is the whole one's records of the user");
        out.push(mine);
    }
    out
}

#[test]
fn audit_records_are_the_same_in_sqlite_and_postgresql() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite =
        one_backend(&sqlite_url(dir.path(), "live"), &sqlite_url(dir.path(), "re"), &sqlite_url(dir.path(), "sh"));
    let server = TempPostgres::start().expect("start a temporary PostgreSQL");
    let postgres = one_backend(&server.database().unwrap(), &server.database().unwrap(), &server.database().unwrap());
    assert_eq!(sqlite.len(), postgres.len());
    for (a, b) in sqlite.iter().zip(&postgres) {
        assert!(a == b, "SQLite and PostgreSQL dump different documents");
    }
}

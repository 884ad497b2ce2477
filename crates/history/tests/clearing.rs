//! The clearing report against the engine's own totals: a seeded stream on the fuzzing
//! fixture's whole market (spot pairs and margin contracts: positions, marks,
//! liquidations, the close of the day's settlements) is recorded by the sink, and the
//! report of every day — each closed day and the open one — must equal what an engine
//! replaying the same log says at the same point: its exchange report (supply, cash,
//! fees, bad debt, open cost per asset; open interest and mark per contract), every
//! account's balances, and the day's trades and settlements folded from its events.
//! The same log gives the same report in PostgreSQL; a tampered row makes it fail to
//! balance, loudly.

mod support;

use std::collections::BTreeMap;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::{AccountId, Engine, EngineConfig, Event, Side};
use bourse_history::clearing::{self, ClearingError, ClearingReport};
use bourse_history::testing::TempPostgres;
use bourse_history::Store;
use support::{dump, margin_workload, run_sink, sink_all, small_config, sqlite_url, Workload};

/// What an engine replaying the log says about one day.
#[derive(Default)]
struct Day {
    /// (account, symbol) → trades, bought, sold, fees, variation.
    legs: BTreeMap<(i64, i64), [i64; 5]>,
    /// symbol → trades, volume, notional.
    symbols: BTreeMap<i64, [i64; 3]>,
    /// symbol → settle price, open interest (the close's settlements).
    settlements: BTreeMap<i64, (i64, i64)>,
    /// The engine's report at the day's end.
    report: Option<bourse_engine::margin::ExchangeReport>,
    /// (account, asset) → available + reserved at the day's end.
    balances: BTreeMap<(i64, i64), i64>,
    /// (account, symbol) → margin position at the day's end.
    positions: BTreeMap<(i64, i64), i64>,
}

fn end_of_day(engine: &Engine, day: &mut Day) {
    day.report = Some(engine.exchange_report());
    for account in 0..engine.accounts_len() as u32 {
        for (asset, balance) in engine.balances(AccountId(account)).unwrap_or_default() {
            let total = balance.available.0 + balance.reserved.0;
            if total != 0 {
                day.balances.insert((i64::from(account), i64::from(asset.0)), total);
            }
        }
        for p in engine.position_reports(AccountId(account)).unwrap_or_default() {
            if p.size != 0 {
                day.positions.insert((i64::from(account), i64::from(p.symbol.0)), p.size);
            }
        }
    }
}

/// Replays the workload's commands, cutting days at each close.
fn engine_days(workload: &Workload) -> Vec<Day> {
    let mut engine = Engine::new(EngineConfig::default());
    let mut days = vec![Day::default()];
    let mut events = Vec::new();
    for applied in &workload.applied {
        let command = Command { ts: applied.ts, ..applied.command.clone() };
        events.clear();
        let closed = engine.days_closed();
        engine.apply(&command, &mut events);
        assert_eq!(events, applied.events, "the replay computes the workload's events");
        let day = days.last_mut().unwrap();
        for event in &events {
            match *event {
                Event::Trade {
                    symbol,
                    px,
                    qty,
                    taker_side,
                    maker_account,
                    taker_account,
                    fee_maker,
                    fee_taker,
                    ..
                } => {
                    let s = day.symbols.entry(i64::from(symbol.0)).or_default();
                    s[0] += 1;
                    s[1] += qty.0;
                    s[2] += px.0 * qty.0;
                    for (account, fee, buys) in [
                        (maker_account, fee_maker, taker_side == Side::Sell),
                        (taker_account, fee_taker, taker_side == Side::Buy),
                    ] {
                        let leg = day.legs.entry((i64::from(account.0), i64::from(symbol.0))).or_default();
                        leg[0] += 1;
                        leg[if buys { 1 } else { 2 }] += qty.0;
                        leg[3] += fee.0;
                    }
                }
                Event::Settled { account, symbol, variation, .. } => {
                    day.legs.entry((i64::from(account.0), i64::from(symbol.0))).or_default()[4] += variation.0;
                }
                Event::Settlement { symbol, px, open_interest } => {
                    day.settlements.insert(i64::from(symbol.0), (px.0, open_interest.0));
                }
                _ => {}
            }
        }
        if engine.days_closed() > closed {
            assert!(matches!(command.body, CommandBody::CloseDay));
            end_of_day(&engine, day);
            days.push(Day::default());
        }
    }
    end_of_day(&engine, days.last_mut().unwrap());
    days
}

/// The report of day `n` says what the engine says.
fn assert_report_matches(report: &ClearingReport, n: usize, day: &Day) {
    assert_eq!(report.day, n as u64);
    let engine = day.report.as_ref().unwrap();
    assert_eq!(report.closed, engine.days_closed == n as u64, "day {n}");

    // Per account and symbol: the day's trades, fees and variation margin.
    let mut legs: BTreeMap<(i64, i64), [i64; 5]> = BTreeMap::new();
    for line in &report.positions {
        assert_eq!(line.net_qty, line.bought - line.sold);
        assert_eq!(line.pnl, line.realized + line.variation);
        if !line.margin {
            assert_eq!((line.realized, line.variation), (0, 0), "a spot pair has no P&L lines");
        }
        let leg = [line.trades, line.bought, line.sold, line.fees, line.variation];
        if leg != [0; 5] {
            legs.insert((line.account, line.symbol), leg);
        }
    }
    let expected: BTreeMap<_, _> = day.legs.iter().filter(|(_, l)| **l != [0; 5]).map(|(k, v)| (*k, *v)).collect();
    assert_eq!(legs, expected, "day {n}: per account and symbol");
    let positions: BTreeMap<(i64, i64), i64> =
        report.positions.iter().filter(|l| l.position != 0).map(|l| ((l.account, l.symbol), l.position)).collect();
    assert_eq!(positions, day.positions, "day {n}: positions at the end");

    // Per symbol: trades, volume, notional; open interest and settlement.
    for line in &report.symbols {
        let traded = day.symbols.get(&line.symbol).copied().unwrap_or_default();
        assert_eq!([line.trades, line.volume, line.notional], traded, "day {n} symbol {}", line.name);
        let interest = engine.symbols.iter().find(|s| i64::from(s.symbol.0) == line.symbol);
        assert_eq!(line.margin, interest.is_some(), "day {n} symbol {}", line.name);
        if let Some(interest) = interest {
            assert_eq!(line.open_interest, Some(interest.open_interest), "day {n} symbol {}", line.name);
            let settlement = day.settlements.get(&line.symbol);
            assert_eq!(line.settle_px, settlement.map(|s| s.0), "day {n} symbol {}", line.name);
            if let Some(&(px, open_interest)) = settlement {
                assert_eq!(interest.mark.map(|m| m.0), Some(px));
                assert_eq!(open_interest, interest.open_interest);
            }
        }
    }

    // Per asset: the conservation line is the engine's totals.
    assert_eq!(report.assets.len(), engine.assets.len());
    for (line, totals) in report.assets.iter().zip(&engine.assets) {
        assert_eq!(line.asset, i64::from(totals.asset.0));
        assert_eq!(line.supply, totals.supply, "day {n} asset {}", line.name);
        assert_eq!(i128::from(line.cash), totals.available + totals.reserved, "day {n} asset {}", line.name);
        assert_eq!(line.fees, totals.fees, "day {n} asset {}", line.name);
        assert_eq!(line.bad_debt, totals.bad_debt, "day {n} asset {}", line.name);
        assert_eq!(i128::from(line.open_cost), totals.open_cost, "day {n} asset {}", line.name);
        assert!(line.balanced && totals.balanced());
    }

    // Per account and asset: the closing balances are the engine's.
    let closing: BTreeMap<(i64, i64), i64> =
        report.cash.iter().filter(|l| l.closing != 0).map(|l| ((l.account, l.asset), l.closing)).collect();
    assert_eq!(closing, day.balances, "day {n}: closing balances");
    assert!(report.imbalances.is_empty(), "day {n} does not balance: {:#?}", report.imbalances);
}

/// Every day's report from `url` against the engine.
fn reports_match(url: &str, workload: &Workload, days: &[Day]) -> Vec<ClearingReport> {
    let mut store = Store::open(url).unwrap();
    assert_eq!(clearing::days_closed(&mut store).unwrap() as usize, days.len() - 1);
    let mut reports = Vec::new();
    for (i, day) in days.iter().enumerate() {
        let report = clearing::report(&mut store, i as u64 + 1).unwrap();
        assert_report_matches(&report, i + 1, day);
        reports.push(report);
    }
    assert!(matches!(clearing::report(&mut store, days.len() as u64 + 1), Err(ClearingError::NoSuchDay { .. })));
    assert!(matches!(clearing::report(&mut store, 0), Err(ClearingError::NoSuchDay { .. })));
    let _ = workload;
    reports
}

/// The stream reaches what the report must get right: several days, margin trades,
/// variation settled both ways, liquidations and shortfalls.
fn assert_stream_covers(workload: &Workload, days: &[Day]) {
    let events = || workload.applied.iter().flat_map(|a| &a.events);
    let count = |f: fn(&Event) -> bool| events().filter(|e| f(e)).count();
    let margin_trades = count(|e| matches!(e, Event::Trade { symbol, .. } if symbol.0 >= 2));
    let transfers = count(|e| matches!(e, Event::PositionTransferred { .. }));
    let liquidations = count(|e| matches!(e, Event::Liquidated { .. }));
    let shortfalls = count(|e| matches!(e, Event::Shortfall { .. }));
    let gains = count(|e| matches!(e, Event::Settled { variation, .. } if variation.0 > 0));
    let losses = count(|e| matches!(e, Event::Settled { variation, .. } if variation.0 < 0));
    eprintln!(
        "{} days, {margin_trades} margin trades, {liquidations} liquidations, {transfers} transfers, \
         {shortfalls} shortfalls, variation {gains} paid / {losses} charged",
        days.len()
    );
    assert!(days.len() >= 4, "{} days", days.len());
    assert!(margin_trades >= 100 && liquidations >= 1 && transfers >= 1 && shortfalls >= 1);
    assert!(gains >= 1 && losses >= 1);
}

#[test]
fn every_days_report_equals_the_engines_totals() {
    let workload = margin_workload(3, 6_000, 4);
    let days = engine_days(&workload);
    assert_stream_covers(&workload, &days);
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path(), "history.sqlite");
    sink_all(&url, &workload.entries);
    reports_match(&url, &workload, &days);
}

/// A sink stopped and restarted mid-stream (resuming from its snapshot, replaying up to
/// its progress without rows) writes the same margin rows, so the same reports.
#[test]
fn a_restarted_sink_records_the_same_days() {
    let workload = margin_workload(3, 6_000, 4);
    let days = engine_days(&workload);
    let dir = tempfile::tempdir().unwrap();
    let live = sqlite_url(dir.path(), "live.sqlite");
    sink_all(&live, &workload.entries);
    let restarted = sqlite_url(dir.path(), "restarted.sqlite");
    let n = workload.entries.len();
    for cut in [n / 5, n / 3 + 1, n / 2 + 7, 4 * n / 5] {
        run_sink(&restarted, &workload.entries[..cut], small_config()).finish().unwrap();
    }
    sink_all(&restarted, &workload.entries);
    let (live_rows, restarted_rows) = (dump(&live), dump(&restarted));
    assert!(live_rows["margin_events"].len() > 400 && live_rows["trading_days"].len() == days.len() - 1);
    assert_eq!(restarted_rows, live_rows);
    assert_eq!(reports_match(&restarted, &workload, &days), reports_match(&live, &workload, &days));
}

/// PostgreSQL runs the same SQL to the same report.
#[test]
fn postgres_reports_the_same() {
    let workload = margin_workload(6, 6_000, 3);
    let days = engine_days(&workload);
    assert_stream_covers(&workload, &days);
    let dir = tempfile::tempdir().unwrap();
    let sqlite = sqlite_url(dir.path(), "history.sqlite");
    sink_all(&sqlite, &workload.entries);
    let server = TempPostgres::start().expect("start a temporary PostgreSQL");
    let postgres = server.database().unwrap();
    sink_all(&postgres, &workload.entries);
    let from_sqlite = reports_match(&sqlite, &workload, &days);
    let from_postgres = reports_match(&postgres, &workload, &days);
    assert_eq!(from_sqlite, from_postgres);
}

/// A row changed behind the sink's back: the report says what does not add up.
#[test]
fn a_tampered_history_does_not_balance() {
    let workload = margin_workload(28, 1_500, 2);
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path(), "history.sqlite");
    sink_all(&url, &workload.entries);
    let mut store = Store::open(&url).unwrap();
    let day = clearing::days_closed(&mut store).unwrap() + 1;
    assert!(clearing::report(&mut store, day).unwrap().imbalances.is_empty());
    // One fee taken twice over, its balance untouched.
    store
        .query(
            "UPDATE executions SET fee_taker = fee_taker + 7 WHERE (log_index, pos) = \
             (SELECT log_index, pos FROM executions WHERE symbol = 0 ORDER BY log_index DESC, pos DESC LIMIT 1)",
            &[],
        )
        .unwrap();
    // The day of that trade has the taker's cash line off by the fee; from that day on
    // the asset's conservation line is off too.
    let reports: Vec<ClearingReport> = (1..=day).map(|d| clearing::report(&mut store, d).unwrap()).collect();
    let accounts_off: Vec<&String> =
        reports.iter().flat_map(|r| &r.imbalances).filter(|i| i.starts_with("account ")).collect();
    assert_eq!(accounts_off.len(), 1, "{accounts_off:#?}");
    assert!(accounts_off[0].contains(" USD: "), "{}", accounts_off[0]);
    let last = reports.last().unwrap();
    assert!(last.imbalances.iter().any(|i| i.starts_with("asset USD: ")), "{:#?}", last.imbalances);
    assert_eq!(last.assets.iter().filter(|a| !a.balanced).count(), 1);

    // A history that begins at a snapshot cannot add up its days.
    store.query("UPDATE history_progress SET begins_at = 40", &[]).unwrap();
    assert!(matches!(clearing::report(&mut store, 1), Err(ClearingError::Partial(40))));
}

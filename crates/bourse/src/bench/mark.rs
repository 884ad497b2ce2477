//! `--workload mark`: mark-to-market of 100,000 margin positions in one symbol.
//!
//! The market: one margin contract (`FUT/USD`, 10% initial and 5% maintenance margin,
//! multiplier 1, the operator's mark), 100,000 accounts in pairs, each pair trading
//! 1–10 contracts at 100,000 so that one is long and one short, their cash between
//! 1.05× and 3× the initial margin (so their liquidation prices spread from about
//! 3% to 27% away from the price), and an insurance account. The book is then empty.
//!
//! Timed, each on a fresh copy of the prepared engine:
//! - **mark moves that liquidate nobody** (±1 around 100,000, alternating): what every
//!   mark costs with the liquidation index — a range of the index, not a pass over the
//!   positions;
//! - **a mark that liquidates about 1% of the accounts**: each liquidated position goes
//!   to the (empty) book and then to the insurance account;
//! - **the close of the day**, which settles every position's variation margin at the
//!   mark: the one pass over all 100,000 positions.

use std::time::{Duration, Instant};

use bourse_engine::command::{
    Command, CommandBody, MarginSpec, MarginSymbol, MarkSource, MatchPolicy, OrderRequest, SymbolSpec, Tif,
};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, Engine, Event, Outcome, Px, Qty, Side, SymbolId};
use serde_json::json;

use super::engine::EngineArgs;
use super::measure::median;
use super::report::{progress, round3, Report};

const POSITIONS: u32 = 100_000;
const PX: i64 = 100_000;
const SYMBOL: SymbolId = SymbolId(0);
const USD: AssetId = AssetId(0);
/// The insurance account comes after the traders.
const INSURANCE: AccountId = AccountId(POSITIONS);
/// Mark moves timed per cycle.
const MOVES: usize = 2_000;

struct Setup {
    engine: Engine,
    seq: u64,
    ts: u64,
}

impl Setup {
    fn apply(&mut self, body: CommandBody, events: &mut Vec<Event>) -> Outcome {
        self.seq += 1;
        self.ts += 1_000;
        events.clear();
        let command = Command { client: ClientId(1), seq: self.seq, ts: self.ts, body };
        self.engine.apply(&command, events).outcome
    }

    fn ok(&mut self, body: CommandBody, events: &mut Vec<Event>) {
        let outcome = self.apply(body.clone(), events);
        assert!(matches!(outcome, Outcome::Ok { .. }), "{body:?} gave {outcome:?}");
    }
}

fn build(seed: u64) -> Setup {
    let mut setup = Setup { engine: Engine::default(), seq: 0, ts: 1_700_000_000_000_000_000 };
    let mut events = Vec::new();
    setup.ok(CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }, &mut events);
    setup.ok(CommandBody::CreateAsset { name: "FUT".into(), decimals: 0 }, &mut events);
    for _ in 0..=POSITIONS {
        setup.ok(CommandBody::CreateAccount, &mut events);
    }
    let spec = SymbolSpec {
        name: "FUT/USD".into(),
        base: AssetId(1),
        quote: USD,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1_000),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(0),
        policy: MatchPolicy::Fifo,
    };
    let margin = MarginSpec {
        initial_bp: 1_000,
        maintenance_bp: 500,
        multiplier: 1,
        position_limit: Qty(1_000),
        mark: MarkSource::Operator,
        insurance: INSURANCE,
    };
    setup.ok(CommandBody::CreateMarginSymbol(Box::new(MarginSymbol { spec, margin })), &mut events);
    setup.ok(CommandBody::Deposit { account: INSURANCE, asset: USD, amount: Amount(1 << 50) }, &mut events);
    // A small deterministic mix from the seed: sizes 1..=10, cash 1.05x..3x the margin.
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    for pair in 0..POSITIONS / 2 {
        let (long, short) = (AccountId(2 * pair), AccountId(2 * pair + 1));
        let qty = 1 + (next() % 10) as i64;
        let margin = qty * PX / 10;
        for account in [long, short] {
            let cash = margin * (105 + (next() % 196) as i64) / 100;
            setup.ok(CommandBody::Deposit { account, asset: USD, amount: Amount(cash) }, &mut events);
        }
        let sell = OrderRequest::limit(short, SYMBOL, Side::Sell, Px(PX), Qty(qty), Tif::Gtc);
        setup.ok(CommandBody::Place(sell), &mut events);
        let buy = OrderRequest::limit(long, SYMBOL, Side::Buy, Px(PX), Qty(qty), Tif::Gtc);
        setup.ok(CommandBody::Place(buy), &mut events);
    }
    setup.ok(CommandBody::SetMark { symbol: SYMBOL, px: Px(PX) }, &mut events);
    setup
}

/// Times one command on `setup`'s engine; returns the time and how many of `count`'s
/// events it produced.
fn timed(
    setup: &mut Setup,
    body: CommandBody,
    events: &mut Vec<Event>,
    count: fn(&Event) -> bool,
) -> (Duration, usize) {
    setup.seq += 1;
    setup.ts += 1_000;
    events.clear();
    let command = Command { client: ClientId(1), seq: setup.seq, ts: setup.ts, body };
    let started = Instant::now();
    let applied = setup.engine.apply(&command, events);
    let elapsed = started.elapsed();
    assert!(matches!(applied.outcome, Outcome::Ok { .. }), "{command:?} gave {applied:?}");
    (elapsed, events.iter().filter(|e| count(e)).count())
}

pub fn run(args: &EngineArgs) -> Result<(), String> {
    let mut report = Report::new(args.json);
    report.say(format!(
        "bourse bench engine: workload mark, seed {}: {POSITIONS} margin positions in one symbol; {} cycles",
        args.seed, args.cycles
    ));
    progress(format!("opening {POSITIONS} positions"));
    let started = Instant::now();
    let prepared = build(args.seed);
    let summary = prepared.engine.exchange_report();
    let interest = summary.symbols[0];
    report.say(format!(
        "  prepared in {:.1} s: open interest {} contracts, {} long and {} short accounts",
        started.elapsed().as_secs_f64(),
        interest.open_interest,
        interest.longs,
        interest.shorts
    ));
    // The mark at which about 1% of the accounts are liquidated: the 1st percentile of
    // the longs' liquidation prices.
    let mut keys: Vec<i64> = (0..POSITIONS)
        .filter(|a| a % 2 == 0)
        .filter_map(|a| prepared.engine.position_reports(AccountId(a))?.first()?.liquidation_px)
        .map(|t| t as i64)
        .collect();
    keys.sort_unstable();
    let crash_px = keys[keys.len() - keys.len() / 50];
    let mut events = Vec::with_capacity(4 * POSITIONS as usize);
    let (mut quiet, mut crash, mut settle) = (Vec::new(), Vec::new(), Vec::new());
    let (mut liquidated, mut settled) = (0, 0);
    for cycle in 1..=args.cycles {
        let mut setup = Setup { engine: prepared.engine.clone(), seq: prepared.seq, ts: prepared.ts };
        let mut moves = Vec::with_capacity(MOVES);
        for i in 0..MOVES {
            let px = Px(PX + if i % 2 == 0 { 1 } else { -1 });
            let (elapsed, n) = timed(&mut setup, CommandBody::SetMark { symbol: SYMBOL, px }, &mut events, |e| {
                matches!(e, Event::Liquidated { .. })
            });
            if n != 0 {
                return Err(format!("a mark of {} liquidated {n} accounts", px.0));
            }
            moves.push(elapsed);
        }
        let (crash_time, n) =
            timed(&mut setup, CommandBody::SetMark { symbol: SYMBOL, px: Px(crash_px) }, &mut events, |e| {
                matches!(e, Event::Liquidated { .. })
            });
        liquidated = n;
        let (settle_time, n) =
            timed(&mut setup, CommandBody::CloseDay, &mut events, |e| matches!(e, Event::Settled { .. }));
        settled = n;
        if !setup.engine.exchange_report().assets.iter().all(|a| a.balanced()) {
            return Err("an asset does not balance after the close".into());
        }
        let move_median = median(&moves);
        let line = format!(
            "cycle {cycle}/{}: quiet mark {:.2} µs (median of {MOVES}); mark {crash_px} liquidating {liquidated} in \
             {:.2} ms; close of day settling {settled} positions in {:.2} ms",
            args.cycles,
            move_median.as_secs_f64() * 1e6,
            crash_time.as_secs_f64() * 1e3,
            settle_time.as_secs_f64() * 1e3
        );
        progress(&line);
        report.say(format!("  {line}"));
        quiet.push(move_median);
        crash.push(crash_time);
        settle.push(settle_time);
    }
    let (quiet, crash, settle) = (median(&quiet), median(&crash), median(&settle));
    report.say(format!(
        "  median: quiet mark {:.2} µs, liquidating mark {:.2} ms ({liquidated} accounts), close of day {:.2} ms \
         ({settled} positions)",
        quiet.as_secs_f64() * 1e6,
        crash.as_secs_f64() * 1e3,
        settle.as_secs_f64() * 1e3
    ));
    report.set("workload", "mark");
    report.set("seed", args.seed);
    report.set("positions", POSITIONS);
    report.set("cycles", args.cycles);
    report.set("mark_quiet_us", json!({ "median": round3(quiet.as_secs_f64() * 1e6), "moves": MOVES }));
    report.set(
        "mark_liquidating_ms",
        json!({ "median": round3(crash.as_secs_f64() * 1e3), "px": crash_px, "liquidated": liquidated }),
    );
    report.set("close_day_ms", json!({ "median": round3(settle.as_secs_f64() * 1e3), "settled": settled }));
    report.finish();
    Ok(())
}

//! `bourse clearing report`: a trading day's clearing report from the history store
//! (`bourse_history::clearing`), as text, CSV or JSON. A report that does not balance
//! is printed, then every failed check goes to stderr and the command fails.

use bourse_history::clearing::{self, ClearingReport, Point};
use bourse_history::Store;
use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum ClearingCommand {
    /// A trading day's clearing report: per account and symbol (net quantity, cash,
    /// fees, P&L), per account and asset (opening, flows, closing), per symbol (volume,
    /// VWAP, open interest, settle price), and the conservation line per asset.
    Report(ReportArgs),
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// The trading day: the N-th `close-day` closes day N; the day after the last close
    /// is reported so far. Default: the last day closed (the open day if none).
    #[arg(long)]
    day: Option<u64>,
    /// The history store: `postgres://…`, or a SQLite file (`sqlite:PATH` or a path).
    /// Default: the history `bourse serve` keeps in its default data directory.
    #[arg(long, default_value = "bourse-data/history.sqlite")]
    db: String,
    /// CSV: four tables (positions, cash, symbols, assets), each a header row naming
    /// it, separated by an empty line. (`--json`: one JSON object.)
    #[arg(long)]
    csv: bool,
}

pub fn run(command: ClearingCommand, json: bool) -> Result<(), String> {
    match command {
        ClearingCommand::Report(args) => report(args, json),
    }
}

fn report(args: ReportArgs, json: bool) -> Result<(), String> {
    if !args.db.starts_with("postgres") {
        let path = args.db.strip_prefix("sqlite:").unwrap_or(&args.db);
        if !std::path::Path::new(path).exists() {
            return Err(format!("no history store at {path} (give --db: a SQLite file or postgres://…)"));
        }
    }
    let mut store = Store::open(&args.db).map_err(|e| e.to_string())?;
    let day = match args.day {
        Some(day) => day,
        None => clearing::last_day(&mut store).map_err(|e| e.to_string())?,
    };
    let report = clearing::report(&mut store, day).map_err(|e| e.to_string())?;
    if args.csv {
        print!("{}", report.csv());
    } else if json {
        println!("{}", serde_json::to_string(&report).map_err(|e| e.to_string())?);
    } else {
        print_text(&report);
    }
    if report.imbalances.is_empty() {
        return Ok(());
    }
    for line in &report.imbalances {
        eprintln!("does not balance: {line}");
    }
    Err(format!(
        "the clearing report of day {} does not balance: {} checks failed",
        report.day,
        report.imbalances.len()
    ))
}

fn at(point: &Point) -> String {
    let time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(point.ts))
        .map(|t| t.replace_nanosecond(0).unwrap_or(t))
        .ok()
        .and_then(|t| t.format(&time::format_description::well_known::Rfc3339).ok())
        .unwrap_or_else(|| point.ts.to_string());
    format!("log index {} ({time})", point.log_index)
}

fn print_text(report: &ClearingReport) {
    let from = report.from.as_ref().map_or("the log's start".to_string(), at);
    match &report.to {
        Some(to) => println!("clearing report of trading day {}: from {from} to its close at {}", report.day, at(to)),
        None => println!("clearing report of trading day {} (open, so far): from {from}", report.day),
    }
    println!("\npositions: the day's trades per account and symbol (P&L: margin contracts)");
    println!(
        "  {:>7} {:<12} {:>6} {:>10} {:>10} {:>10} {:>11} {:>10} {:>14} {:>10} {:>12} {:>12} {:>12}",
        "account",
        "symbol",
        "trades",
        "bought",
        "sold",
        "net",
        "transferred",
        "position",
        "cash",
        "fees",
        "realized",
        "variation",
        "pnl"
    );
    for l in &report.positions {
        let (transferred, position) = match l.margin {
            true => (l.transferred.to_string(), l.position.to_string()),
            false => ("-".to_string(), "-".to_string()),
        };
        println!(
            "  {:>7} {:<12} {:>6} {:>10} {:>10} {:>10} {:>11} {:>10} {:>14} {:>10} {:>12} {:>12} {:>12}",
            l.account,
            l.symbol_name,
            l.trades,
            l.bought,
            l.sold,
            l.net_qty,
            transferred,
            position,
            l.cash,
            l.fees,
            l.realized,
            l.variation,
            l.pnl
        );
    }
    println!(
        "\ncash per account and asset: opening + deposits - withdrawals + trades - fees + pnl + shortfall = closing"
    );
    println!(
        "  {:>7} {:<6} {:>14} {:>12} {:>12} {:>14} {:>10} {:>12} {:>10} {:>14}",
        "account", "asset", "opening", "deposits", "withdrawals", "trades", "fees", "pnl", "shortfall", "closing"
    );
    for l in &report.cash {
        println!(
            "  {:>7} {:<6} {:>14} {:>12} {:>12} {:>14} {:>10} {:>12} {:>10} {:>14}{}",
            l.account,
            l.asset_name,
            l.opening,
            l.deposits,
            l.withdrawals,
            l.trades,
            l.fees,
            l.pnl,
            l.shortfall,
            l.closing,
            if l.balanced { "" } else { "  DOES NOT BALANCE" }
        );
    }
    println!("\nsymbols");
    println!(
        "  {:<12} {:>6} {:>10} {:>16} {:>12} {:>14} {:>10}",
        "symbol", "trades", "volume", "notional", "vwap", "open interest", "settle"
    );
    let dash = || "-".to_string();
    for l in &report.symbols {
        println!(
            "  {:<12} {:>6} {:>10} {:>16} {:>12} {:>14} {:>10}",
            l.name,
            l.trades,
            l.volume,
            l.notional,
            l.vwap.map_or_else(dash, |v| format!("{v:.4}")),
            l.open_interest.map_or_else(dash, |v| v.to_string()),
            l.settle_px.map_or_else(dash, |v| v.to_string())
        );
    }
    println!("\nconservation per asset at the day's end: cash + fees - bad debt - open cost = deposits - withdrawals");
    for l in &report.assets {
        println!(
            "  {:<6} {} + {} - {} - {} = {}: {}",
            l.name,
            l.cash,
            l.fees,
            l.bad_debt,
            l.open_cost,
            l.supply,
            if l.balanced { "balanced" } else { "DOES NOT BALANCE" }
        );
    }
}

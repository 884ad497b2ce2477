//! The day-trading audit log: its rows (from the ledger's audit records) and its XML
//! document (spec `day-trading.md` 9.1), streamed from the store for `DUMPLOG`.
//!
//! A record's row takes what the event carries (users by ledger index, amounts, the
//! transactionNum) and what the command that caused it says (the arguments of a
//! `userCommand` or `errorEvent`, the quote of a `quoteServer`). Rendering reads the rows
//! in key order (= log order) and writes one element per line with 2-space indentation,
//! LF line ends, text escaped; the document validates against the project's copy of
//! `logfile.xsd` (`crates/daytrading/schema/logfile.xsd`).
//!
//! Streaming: rows go from the database cursor to the writer one at a time (SQLite
//! steps a statement; PostgreSQL reads a portal), so a dump of millions of records holds
//! one row in memory.

use std::io::Write;

use bourse_engine::command::{Command, CommandBody};
use bourse_engine::daytrading::{cents_format, DtEvent, DtRequest};
use bourse_engine::Engine;

use crate::rows::{AuditRow, RowKey};
use crate::store::{Cell, Store, StoreError, Value};

/// The `dt_audit` row of one audit record of `command`, numbered `audit_seq`.
pub fn audit_row(engine: &Engine, command: &Command, record: DtEvent, key: RowKey, audit_seq: u64) -> AuditRow {
    let request = match &command.body {
        CommandBody::DayTrading(request) => Some(request.as_ref()),
        _ => None,
    };
    let dt_command = match request {
        Some(DtRequest::Command(c)) => Some(c),
        _ => None,
    };
    let quote = match request {
        Some(DtRequest::Command(c)) => c.quote.as_ref(),
        Some(DtRequest::Quote(q)) => Some(q),
        None => None,
    };
    let ledger = engine.day_trading();
    let name = |user: u32| ledger.user(user).map(|u| u.name.clone());
    let mut row = AuditRow {
        key,
        audit_seq: audit_seq as i64,
        record: "",
        stamp: (command.ts / 1_000_000) as i64,
        transaction_num: 0,
        command: None,
        username: None,
        symbol: None,
        filename: None,
        funds: None,
        price: None,
        quote_server_time: None,
        cryptokey: None,
        action: None,
        error_message: None,
    };
    let command_fields = |row: &mut AuditRow| {
        if let Some(c) = dt_command {
            let fields = c.audit_fields();
            row.command = Some(c.kind.name());
            row.username = fields.username.map(str::to_owned);
            row.symbol = fields.symbol.map(|s| s.as_str().to_owned());
            row.filename = fields.filename.map(str::to_owned);
            row.funds = fields.funds;
        }
    };
    match record {
        DtEvent::UserCommand { txn } => {
            row.record = "userCommand";
            row.transaction_num = txn as i64;
            command_fields(&mut row);
        }
        DtEvent::ErrorEvent { txn, error } => {
            row.record = "errorEvent";
            row.transaction_num = txn as i64;
            command_fields(&mut row);
            row.error_message = Some(error.message());
        }
        DtEvent::QuoteServer { owner, txn } => {
            row.record = "quoteServer";
            row.transaction_num = txn as i64;
            if let Some(q) = quote {
                row.price = Some(q.price);
                row.symbol = Some(q.symbol.as_str().to_owned());
                row.username = Some(q.userid.clone());
                row.quote_server_time = Some(q.quote_server_time as i64);
                row.cryptokey = Some(q.cryptokey.clone());
            }
            if let Some(owner) = owner {
                row.username = name(owner);
            }
        }
        DtEvent::AccountTransaction { user, txn, action, funds } => {
            row.record = "accountTransaction";
            row.transaction_num = txn as i64;
            row.action = Some(action.name());
            row.username = name(user);
            row.funds = Some(funds);
        }
        DtEvent::SystemEvent { user, txn, command, symbol, funds } => {
            row.record = "systemEvent";
            row.transaction_num = txn as i64;
            row.command = Some(command.name());
            row.username = name(user);
            row.symbol = Some(symbol.as_str().to_owned());
            row.funds = Some(funds);
        }
        DtEvent::Done { .. } => unreachable!("a command's result is not an audit record"),
    }
    row
}

/// The first line of every audit document, and the root element's.
const HEADER: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n";
const FOOTER: &str = "</log>\n";

/// The columns a dump reads, in [`write_row`]'s order.
const COLUMNS: &str = "record, stamp, transaction_num, command, username, symbol, filename, funds, price, \
                       quote_server_time, cryptokey, action, error_message";

/// Which records a dump holds: all of them, or one user's, up to an audit sequence
/// number (a `DUMPLOG` command's own `userCommand`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DumpScope<'a> {
    pub user: Option<&'a str>,
    pub through_seq: u64,
}

/// What a dump wrote.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DumpStats {
    pub records: u64,
    pub bytes: u64,
}

/// Counts the bytes that pass.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
pub enum DumpError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("writing the dump: {0}")]
    Io(#[from] std::io::Error),
}

/// Streams the audit document of `scope` from `store` into `out`, with `server` as every
/// record's `server`.
pub fn dump(store: &mut Store, scope: DumpScope<'_>, server: &str, out: impl Write) -> Result<DumpStats, DumpError> {
    let mut out = Counting { inner: std::io::BufWriter::with_capacity(1 << 16, out), bytes: 0 };
    out.write_all(HEADER.as_bytes())?;
    // Every number above i64::MAX means "everything" (the column is a BIGINT).
    let through = i64::try_from(scope.through_seq).unwrap_or(i64::MAX);
    let mut records = 0u64;
    let mut io_error = None;
    let mut each = |row: &[Value]| -> Result<(), StoreError> {
        if let Err(error) = write_row(&mut out, server, row) {
            io_error = Some(error);
            return Err(StoreError::Invalid("write failed".into()));
        }
        records += 1;
        Ok(())
    };
    let result = match scope.user {
        None => store.query_each(
            &format!("SELECT {COLUMNS} FROM dt_audit WHERE audit_seq <= ? ORDER BY log_index, pos"),
            &[Cell::Int(through)],
            &mut each,
        ),
        Some(user) => store.query_each(
            &format!("SELECT {COLUMNS} FROM dt_audit WHERE username = ? AND audit_seq <= ? ORDER BY log_index, pos"),
            &[Cell::Text(user), Cell::Int(through)],
            &mut each,
        ),
    };
    if let Some(error) = io_error {
        return Err(DumpError::Io(error));
    }
    result?;
    out.write_all(FOOTER.as_bytes())?;
    out.flush()?;
    Ok(DumpStats { records, bytes: out.bytes })
}

/// One record: `  <kind>`, its children at 4 spaces in the schema table's order, `  </kind>`.
fn write_row(out: &mut impl Write, server: &str, row: &[Value]) -> std::io::Result<()> {
    let text = |i: usize| row.get(i).and_then(Value::text);
    let int = |i: usize| row.get(i).and_then(Value::int);
    let record = text(0).unwrap_or("debugEvent");
    writeln!(out, "  <{record}>")?;
    writeln!(out, "    <timestamp>{}</timestamp>", int(1).unwrap_or(0))?;
    element(out, "server", Some(server))?;
    writeln!(out, "    <transactionNum>{}</transactionNum>", int(2).unwrap_or(0))?;
    let money = |v: Option<i64>| v.map(cents_format);
    match record {
        "quoteServer" => {
            element(out, "price", money(int(8)).as_deref())?;
            element(out, "stockSymbol", text(5))?;
            element(out, "username", text(4))?;
            if let Some(time) = int(9) {
                writeln!(out, "    <quoteServerTime>{time}</quoteServerTime>")?;
            }
            element(out, "cryptokey", text(10))?;
        }
        "accountTransaction" => {
            element(out, "action", text(11))?;
            element(out, "username", text(4))?;
            element(out, "funds", money(int(7)).as_deref())?;
        }
        _ => {
            element(out, "command", text(3))?;
            element(out, "username", text(4))?;
            element(out, "stockSymbol", text(5))?;
            element(out, "filename", text(6))?;
            element(out, "funds", money(int(7)).as_deref())?;
            element(out, "errorMessage", text(12))?;
        }
    }
    writeln!(out, "  </{record}>")
}

/// `    <name>escaped</name>`, or nothing for an absent value.
fn element(out: &mut impl Write, name: &str, value: Option<&str>) -> std::io::Result<()> {
    let Some(value) = value else { return Ok(()) };
    write!(out, "    <{name}>")?;
    escape(out, value)?;
    writeln!(out, "</{name}>")
}

fn escape(out: &mut impl Write, text: &str) -> std::io::Result<()> {
    let mut start = 0;
    for (i, b) in text.bytes().enumerate() {
        let entity = match b {
            b'&' => "&amp;",
            b'<' => "&lt;",
            b'>' => "&gt;",
            b'"' => "&quot;",
            b'\'' => "&apos;",
            _ => continue,
        };
        out.write_all(&text.as_bytes()[start..i])?;
        out.write_all(entity.as_bytes())?;
        start = i + 1;
    }
    out.write_all(&text.as_bytes()[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_render_one_element_per_line_escaped() {
        let row = vec![
            Value::Text("errorEvent".into()),
            Value::Int(1_732_270_000_000),
            Value::Int(7),
            Value::Text("ADD".into()),
            Value::Text("a<b&c".into()),
            Value::Null,
            Value::Null,
            Value::Int(-500),
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Null,
            Value::Text("invalid amount".into()),
        ];
        let mut out = Vec::new();
        write_row(&mut out, "bourse-dt", &row).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  <errorEvent>\n    <timestamp>1732270000000</timestamp>\n    <server>bourse-dt</server>\n    \
             <transactionNum>7</transactionNum>\n    <command>ADD</command>\n    <username>a&lt;b&amp;c</username>\n    \
             <funds>-5.00</funds>\n    <errorMessage>invalid amount</errorMessage>\n  </errorEvent>\n"
        );
    }
}

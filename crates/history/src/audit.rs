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

use crate::rows::{AuditEntryRow, AuditRow, RowKey};
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

/// The record kinds, by their code in the encoding.
const KINDS: [&str; 5] = ["userCommand", "quoteServer", "accountTransaction", "systemEvent", "errorEvent"];

/// The `dt_audit` row of one log entry's audit records (`records` is not empty, in log
/// order, numbered consecutively).
///
/// Encoding, per record: the kind's code (a byte, its index in `KINDS`), a byte of
/// presence bits for the optional fields, the stamp and transactionNum (zigzag varints),
/// then each present field in [`COLUMNS`] order: text as a varint length and its UTF-8
/// bytes, numbers as zigzag varints. One row per entry instead of one per record: the
/// sink writes half the rows (and half the by-user index entries) it did.
pub fn audit_entry(records: &[AuditRow]) -> AuditEntryRow {
    let first = &records[0];
    let username = first.username.clone().filter(|u| records.iter().all(|r| r.username.as_ref() == Some(u)));
    let mut out = Vec::with_capacity(64 * records.len());
    for r in records {
        let kind = KINDS.iter().position(|k| *k == r.record).unwrap_or(0);
        out.push(kind as u8);
        let texts = [r.command, r.username.as_deref(), r.symbol.as_deref(), r.filename.as_deref()];
        let numbers = [r.funds, r.price, r.quote_server_time];
        let tail = [r.cryptokey.as_deref(), r.action, r.error_message];
        let mut present = 0u16;
        let flags = texts.iter().map(Option::is_some).chain(numbers.iter().map(Option::is_some));
        for (bit, on) in flags.chain(tail.iter().map(Option::is_some)).enumerate() {
            present |= u16::from(on) << bit;
        }
        out.extend_from_slice(&present.to_le_bytes());
        varint(&mut out, r.stamp);
        varint(&mut out, r.transaction_num);
        for text in texts.into_iter().flatten() {
            bytes(&mut out, text.as_bytes());
        }
        for number in numbers.into_iter().flatten() {
            varint(&mut out, number);
        }
        for text in tail.into_iter().flatten() {
            bytes(&mut out, text.as_bytes());
        }
    }
    AuditEntryRow { key: first.key, audit_seq: first.audit_seq, username, records: out }
}

fn varint(out: &mut Vec<u8>, value: i64) {
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn bytes(out: &mut Vec<u8>, value: &[u8]) {
    varint(out, value.len() as i64);
    out.extend_from_slice(value);
}

/// Reads an entry's records back, each as the values of [`COLUMNS`] (what [`write_row`]
/// takes), with its username apart.
struct Decoder<'a> {
    input: &'a [u8],
}

impl Decoder<'_> {
    fn fail() -> StoreError {
        StoreError::Invalid("a dt_audit row's records are malformed".into())
    }

    fn byte(&mut self) -> Result<u8, StoreError> {
        let (&b, rest) = self.input.split_first().ok_or_else(Self::fail)?;
        self.input = rest;
        Ok(b)
    }

    fn varint(&mut self) -> Result<i64, StoreError> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok((v >> 1) as i64 ^ -((v & 1) as i64));
            }
        }
        Err(Self::fail())
    }

    fn text(&mut self) -> Result<String, StoreError> {
        let len = usize::try_from(self.varint()?).map_err(|_| Self::fail())?;
        if len > self.input.len() {
            return Err(Self::fail());
        }
        let (text, rest) = self.input.split_at(len);
        self.input = rest;
        String::from_utf8(text.to_vec()).map_err(|_| Self::fail())
    }

    /// The next record's values in [`COLUMNS`] order, or `None` at the end.
    fn record(&mut self) -> Result<Option<Vec<Value>>, StoreError> {
        if self.input.is_empty() {
            return Ok(None);
        }
        let kind = KINDS.get(usize::from(self.byte()?)).ok_or_else(Self::fail)?;
        let present = u16::from_le_bytes([self.byte()?, self.byte()?]);
        let on = |bit: u16| present & (1 << bit) != 0;
        let mut values = Vec::with_capacity(13);
        values.push(Value::Text((*kind).to_owned()));
        values.push(Value::Int(self.varint()?));
        values.push(Value::Int(self.varint()?));
        // command, username, symbol, filename; funds, price, quote_server_time;
        // cryptokey, action, error_message: the encoding's order is the columns'.
        for bit in 0..4 {
            values.push(if on(bit) { Value::Text(self.text()?) } else { Value::Null });
        }
        for bit in 4..7 {
            values.push(if on(bit) { Value::Int(self.varint()?) } else { Value::Null });
        }
        for bit in 7..10 {
            values.push(if on(bit) { Value::Text(self.text()?) } else { Value::Null });
        }
        Ok(Some(values))
    }
}

/// The first line of every audit document, and the root element's.
const HEADER: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<log>\n";
const FOOTER: &str = "</log>\n";

/// The values of a record, in [`write_row`]'s order (an entry's records decode to these):
/// record, stamp, transaction_num, command, username, symbol, filename, funds, price,
/// quote_server_time, cryptokey, action, error_message.
const USERNAME: usize = 4;

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
        let first = row.first().and_then(Value::int).ok_or_else(Decoder::fail)?;
        let Some(Value::Blob(encoded)) = row.get(1) else { return Err(Decoder::fail()) };
        let mut decoder = Decoder { input: encoded };
        let mut seq = first;
        while let Some(values) = decoder.record()? {
            if seq > through {
                break;
            }
            seq += 1;
            if scope.user.is_some() && values[USERNAME].text() != scope.user {
                continue;
            }
            if let Err(error) = write_row(&mut out, server, &values) {
                io_error = Some(error);
                return Err(StoreError::Invalid("write failed".into()));
            }
            records += 1;
        }
        Ok(())
    };
    // An entry whose records name several users (or none) has no username: a user's
    // dump reads those too and keeps the records that name the user.
    let result = match scope.user {
        None => store.query_each(
            "SELECT audit_seq, records FROM dt_audit WHERE audit_seq <= ? ORDER BY log_index, pos",
            &[Cell::Int(through)],
            &mut each,
        ),
        Some(user) => store.query_each(
            "SELECT audit_seq, records FROM dt_audit WHERE (username = ? OR username IS NULL) AND audit_seq <= ? \
             ORDER BY log_index, pos",
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

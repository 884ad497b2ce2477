//! The fuzz entry point (`crates/daytrading/fuzz`, `make fuzz`), also run over its corpus
//! on stable by `tests/fuzz_corpus.rs`: any bytes as a workload file, parsed in the
//! standard format (`[n] COMMAND,arg,…`) and, split at NUL bytes into `name\0text\0…`,
//! as the per-user split of the 2019 final. Never a panic; every line is a command or a
//! report, what is parsed reads back the same when written out again, split files are
//! numbered `1..` with `finalLOG` last, and each command's request encodes as the
//! generated `DayTradingRequest` does.

use bourse_protocol::proto;
use prost::Message;

use crate::workload::parse::{parse_split, parse_standard, Line, Workload};
use crate::workload::wire::encode_request;

/// Parses `data` both ways; panics on any broken rule.
pub fn parse_workload(data: &[u8]) {
    // A workload file is read as UTF-8; invalid bytes are replaced, so they still get here.
    let text = String::from_utf8_lossy(data);
    check_standard(&text);
    let mut parts = text.split('\0');
    let mut files = Vec::new();
    while let Some(name) = parts.next() {
        files.push((name.to_owned(), parts.next().unwrap_or_default().to_owned()));
    }
    check_split(files);
}

/// The lines that are not empty once a CR before the LF and trailing spaces are gone:
/// each becomes a command or a skipped report.
fn line_count(text: &str) -> usize {
    text.split('\n').filter(|line| !line.strip_suffix('\r').unwrap_or(line).trim_end_matches(' ').is_empty()).count()
}

fn check_standard(text: &str) {
    let workload = parse_standard(text);
    assert_eq!(workload.lines.len() + workload.skipped.len(), line_count(text), "a line was lost");
    let mut written = String::new();
    for line in &workload.lines {
        assert!(line.number >= 1);
        check_line(line);
        // The trailing space keeps a last argument ending in CR as it is.
        written.push_str(&format!("[{}] {} \n", line.number, command_text(line)));
    }
    let again = parse_standard(&written);
    assert_eq!(again.lines, workload.lines, "the lines written out read back differently");
    assert!(again.skipped.is_empty(), "{:?}", again.skipped);
    check_requests(&workload);
}

fn check_split(files: Vec<(String, String)>) {
    let expected = files.iter().map(|(_, text)| line_count(text)).sum::<usize>();
    let last = files.iter().filter(|(name, _)| name == "finalLOG").map(|(_, text)| text.clone()).collect::<Vec<_>>();
    let workload = parse_split(files);
    assert_eq!(workload.lines.len() + workload.skipped.len(), expected, "a line was lost");
    assert!(workload.warnings.is_empty());
    for (i, line) in workload.lines.iter().enumerate() {
        assert_eq!(line.number, i as u64 + 1, "split files are numbered in order");
        check_line(line);
    }
    // finalLOG's commands come last, in its order.
    let mut final_lines = Vec::new();
    for text in &last {
        let written: String =
            text.split('\n').map(|l| l.strip_prefix("$ ").map_or(String::new(), |c| format!("[1] {c}\n"))).collect();
        final_lines.extend(parse_standard(&written).lines);
    }
    let tail = &workload.lines[workload.lines.len() - final_lines.len()..];
    for (line, final_line) in tail.iter().zip(&final_lines) {
        assert_eq!((line.kind, &line.args), (final_line.kind, &final_line.args), "finalLOG is not last");
    }
    let users = workload.users();
    let distinct: std::collections::BTreeSet<&str> = users.iter().copied().collect();
    assert!(distinct.len() == users.len() && !distinct.contains(""), "{users:?}");
    check_requests(&workload);
}

/// `COMMAND,arg,…` of a line as a workload file has it.
fn command_text(line: &Line) -> String {
    let mut text = line.kind.name().to_owned();
    for arg in &line.args {
        text.push(',');
        text.push_str(arg);
    }
    text
}

fn check_line(line: &Line) {
    assert!(line.args.iter().all(|arg| !arg.contains([',', '\n'])), "{line:?}");
    if line.is_global_dump() {
        assert!(line.user().is_empty(), "{line:?}");
    }
}

/// The driver's hand-made encoding of each line is the generated one, and decodes back.
fn check_requests(workload: &Workload) {
    let mut encoded = Vec::new();
    let mut generated = proto::DayTradingRequests::default();
    for (id, line) in workload.lines.iter().enumerate() {
        encode_request(id as u64, line, &mut encoded);
        generated.requests.push(proto::DayTradingRequest {
            id: id as u64,
            command: bourse_protocol::daytrading::kind_wire(line.kind),
            args: line.args.clone(),
            transaction_num: line.number,
            caller: String::new(),
        });
    }
    assert_eq!(encoded, generated.encode_to_vec(), "a request encodes differently from the generated encoder");
    let decoded = proto::DayTradingRequests::decode(encoded.as_slice()).expect("own requests decode");
    assert_eq!(decoded, generated);
}

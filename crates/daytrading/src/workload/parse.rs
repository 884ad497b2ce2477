//! Workload files (spec 10): the standard format (`[n] COMMAND,arg,…`, one file) and
//! the per-user split of the 2019 final (`$ COMMAND,arg,…`, one file per user plus
//! `finalLOG`, as a directory or a `.tar.gz`).
//!
//! Arguments stay verbatim: the exchange checks them, so bad ones become logged
//! errors. A command name outside the sixteen, or a line that is not a command, is
//! reported and skipped (no audit record could name it). Split files are numbered the
//! spec's way: user files sorted bytewise, each user's first line in that order, then
//! each second line, … skipping users that ran out; `finalLOG` last.

use std::io::Read;
use std::path::Path;

use bourse_engine::daytrading::DtKind;

/// One command of a workload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Line {
    /// The transactionNum it is sent with.
    pub number: u64,
    pub kind: DtKind,
    /// Verbatim; userid first (the global `DUMPLOG`: the file name only).
    pub args: Vec<String>,
}

impl Line {
    /// The global `DUMPLOG` (sent only after everything else).
    pub fn is_global_dump(&self) -> bool {
        self.kind == DtKind::DumpLog && self.args.len() == 1
    }

    /// The user whose commands this line is among (empty for the global `DUMPLOG`).
    pub fn user(&self) -> &str {
        if self.is_global_dump() {
            ""
        } else {
            self.args.first().map_or("", String::as_str)
        }
    }
}

/// A parsed workload: its commands in number order, and what was reported.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    pub lines: Vec<Line>,
    /// Gaps and repeats in the numbering (the numbers are sent as given).
    pub warnings: Vec<String>,
    /// Lines skipped: unknown commands and lines that are not commands.
    pub skipped: Vec<String>,
}

impl Workload {
    /// Distinct users, in first-appearance order.
    pub fn users(&self) -> Vec<&str> {
        let mut seen = rustc_hash::FxHashSet::default();
        self.lines.iter().map(Line::user).filter(|u| !u.is_empty() && seen.insert(*u)).collect()
    }
}

/// Splits `COMMAND,arg,arg` into its kind and arguments.
fn command(text: &str) -> Result<(DtKind, Vec<String>), String> {
    let (kind, args) = command_kind(text)?;
    Ok((kind, args_of(args)))
}

/// `COMMAND,arg,arg`'s kind and the text of its arguments (`None`: no comma).
fn command_kind(text: &str) -> Result<(DtKind, Option<&str>), String> {
    let (name, args) = match text.as_bytes().iter().position(|&b| b == b',') {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let kind = DtKind::parse(name).ok_or_else(|| format!("unknown command {name:?}"))?;
    Ok((kind, args))
}

fn args_of(text: Option<&str>) -> Vec<String> {
    text.map_or_else(Vec::new, |args| fields(args, b',').map(str::to_owned).collect())
}

/// `text.split(sep)` for an ASCII `sep`, cheaper on short fields (a plain scan, no
/// searcher set up per call).
fn fields(text: &str, sep: u8) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let text = rest?;
        match text.as_bytes().iter().position(|&b| b == sep) {
            Some(at) => {
                rest = Some(&text[at + 1..]);
                Some(&text[..at])
            }
            None => {
                rest = None;
                Some(text)
            }
        }
    })
}

/// The lines of a text: LF-separated, a CR before the LF dropped, trailing spaces
/// stripped, empty lines skipped; with their line numbers (from 1).
fn text_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    fields(text, b'\n')
        .enumerate()
        .map(|(i, line)| (i + 1, line.strip_suffix('\r').unwrap_or(line).trim_end_matches(' ')))
        .filter(|(_, line)| !line.is_empty())
}

/// The standard format: `[n] COMMAND,arg,…`.
pub fn parse_standard(text: &str) -> Workload {
    let mut workload = Workload::default();
    let mut previous: Option<u64> = None;
    for (at, line) in text_lines(text) {
        let parsed = line
            .strip_prefix('[')
            .and_then(|rest| rest.split_once("] "))
            .and_then(|(n, rest)| Some((n.parse::<u64>().ok().filter(|&n| n >= 1)?, rest)));
        let Some((number, rest)) = parsed else {
            workload.skipped.push(format!("line {at}: not [n] COMMAND: {line:?}"));
            continue;
        };
        match previous {
            Some(p) if number == p => workload.warnings.push(format!("line {at}: number {number} repeated")),
            // Nothing follows the largest number without a gap (and p + 1 would overflow).
            Some(p) if Some(number) != p.checked_add(1) => {
                workload.warnings.push(format!("line {at}: {number} after {p}"))
            }
            None if number != 1 => workload.warnings.push(format!("line {at}: starts at {number}")),
            _ => {}
        }
        previous = Some(number);
        match command(rest) {
            Ok((kind, args)) => workload.lines.push(Line { number, kind, args }),
            Err(why) => workload.skipped.push(format!("line {at} [{number}]: {why}")),
        }
    }
    workload
}

/// The per-user split: `(file name, contents)` of every user file and `finalLOG`.
pub fn parse_split(mut files: Vec<(String, String)>) -> Workload {
    let mut workload = Workload::default();
    files.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    // Checked here, their arguments copied out when numbered: the lines' memory then
    // follows the number order, which the driver walks.
    let mut users: Vec<Vec<(DtKind, Option<&str>)>> = Vec::new();
    let mut last: Vec<(DtKind, Option<&str>)> = Vec::new();
    for (name, text) in &files {
        let mut commands = Vec::new();
        for (at, line) in text_lines(text) {
            let Some(rest) = line.strip_prefix("$ ") else {
                workload.skipped.push(format!("{name} line {at}: not $ COMMAND: {line:?}"));
                continue;
            };
            match command_kind(rest) {
                Ok(parsed) => commands.push(parsed),
                Err(why) => workload.skipped.push(format!("{name} line {at}: {why}")),
            }
        }
        if name == "finalLOG" {
            last.extend(commands);
        } else {
            users.push(commands);
        }
    }
    let mut number = 0;
    workload.lines.reserve(users.iter().map(Vec::len).sum::<usize>() + last.len());
    let rounds = users.iter().map(Vec::len).max().unwrap_or(0);
    let mut users: Vec<std::vec::IntoIter<_>> = users.into_iter().map(Vec::into_iter).collect();
    for _ in 0..rounds {
        for user in &mut users {
            if let Some((kind, args)) = user.next() {
                number += 1;
                workload.lines.push(Line { number, kind, args: args_of(args) });
            }
        }
    }
    for (kind, args) in last {
        number += 1;
        workload.lines.push(Line { number, kind, args: args_of(args) });
    }
    workload
}

/// Loads a workload: a standard file, a directory of split files, or a `.tar.gz` of
/// one.
pub fn load(path: &Path) -> Result<Workload, String> {
    let shown = path.display();
    if path.is_dir() {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(path).map_err(|e| format!("{shown}: {e}"))? {
            let entry = entry.map_err(|e| format!("{shown}: {e}"))?;
            if entry.file_type().map_err(|e| e.to_string())?.is_file() {
                let text =
                    std::fs::read_to_string(entry.path()).map_err(|e| format!("{}: {e}", entry.path().display()))?;
                files.push((entry.file_name().to_string_lossy().into_owned(), text));
            }
        }
        return Ok(parse_split(files));
    }
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if name.ends_with(".tar.gz") || name.ends_with(".tgz") {
        let file = std::fs::File::open(path).map_err(|e| format!("{shown}: {e}"))?;
        let mut archive = tar::Archive::new(flate2::read::GzDecoder::new(std::io::BufReader::new(file)));
        let mut files = Vec::new();
        for entry in archive.entries().map_err(|e| format!("{shown}: {e}"))? {
            let mut entry = entry.map_err(|e| format!("{shown}: {e}"))?;
            if !entry.header().entry_type().is_file() {
                continue;
            }
            let entry_path = entry.path().map_err(|e| format!("{shown}: {e}"))?.into_owned();
            let Some(file_name) = entry_path.file_name().map(|n| n.to_string_lossy().into_owned()) else { continue };
            let mut text = String::new();
            entry.read_to_string(&mut text).map_err(|e| format!("{shown}: {}: {e}", entry_path.display()))?;
            files.push((file_name, text));
        }
        return Ok(parse_split(files));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("{shown}: {e}"))?;
    Ok(parse_standard(&text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_split_as_str_split_does() {
        for text in ["", ",", "a", "a,", ",a", "a,,b", "ADD,oY01WVirLr,63511.53", "é,ü,,x\n", ",,,"] {
            for sep in [b',', b'\n'] {
                let ours: Vec<&str> = fields(text, sep).collect();
                let std: Vec<&str> = text.split(char::from(sep)).collect();
                assert_eq!(ours, std, "{text:?}");
            }
        }
    }

    #[test]
    fn the_standard_format() {
        let text = "[1] ADD,oY01WVirLr,63511.53 \r\n\n[2] BUY,oY01WVirLr,S,276.83 \n[4] FOO,x \n[4] QUOTE,u,S\nnonsense\n[5] DUMPLOG,./testLOG";
        let workload = parse_standard(text);
        assert_eq!(
            workload.lines,
            [
                Line { number: 1, kind: DtKind::Add, args: vec!["oY01WVirLr".into(), "63511.53".into()] },
                Line { number: 2, kind: DtKind::Buy, args: vec!["oY01WVirLr".into(), "S".into(), "276.83".into()] },
                Line { number: 4, kind: DtKind::Quote, args: vec!["u".into(), "S".into()] },
                Line { number: 5, kind: DtKind::DumpLog, args: vec!["./testLOG".into()] },
            ]
        );
        assert_eq!(workload.warnings, ["line 4: 4 after 2", "line 5: number 4 repeated"]);
        assert_eq!(workload.skipped, ["line 4 [4]: unknown command \"FOO\"", "line 6: not [n] COMMAND: \"nonsense\""]);
        assert!(workload.lines[3].is_global_dump() && workload.lines[3].user().is_empty());
        // Arguments are verbatim, empty ones included.
        assert_eq!(parse_standard("[1] ADD,,-5").lines[0].args, ["", "-5"]);
    }

    #[test]
    fn a_number_after_the_largest_is_a_gap() {
        // Found by the fuzz target: `p + 1` overflowed here.
        let workload = parse_standard("[18446744073709551615] ADD,a,1\n[1] ADD,b,1\n[1] QUOTE,b,S");
        assert_eq!(workload.lines.len(), 3);
        assert_eq!(
            workload.warnings,
            [
                "line 1: starts at 18446744073709551615",
                "line 2: 1 after 18446744073709551615",
                "line 3: number 1 repeated"
            ]
        );
    }

    #[test]
    fn split_files_are_numbered_round_robin_in_bytewise_order() {
        let files = vec![
            ("finalLOG".to_owned(), "$ DUMPLOG,./finalLOG\n".to_owned()),
            ("b".to_owned(), "$ ADD,b,1.00\n$ QUOTE,b,S\n$ COMMIT_BUY,b\n".to_owned()),
            ("A".to_owned(), "$ ADD,A,2.00\n".to_owned()),
            ("a".to_owned(), "$ ADD,a,3.00\n$ DISPLAY_SUMMARY,a\n$ SHOUT,a\n[1] ADD,a,1\n".to_owned()),
        ];
        let workload = parse_split(files);
        let numbered: Vec<(u64, &str, DtKind)> =
            workload.lines.iter().map(|l| (l.number, l.args[0].as_str(), l.kind)).collect();
        assert_eq!(
            numbered,
            [
                (1, "A", DtKind::Add),
                (2, "a", DtKind::Add),
                (3, "b", DtKind::Add),
                (4, "a", DtKind::DisplaySummary),
                (5, "b", DtKind::Quote),
                (6, "b", DtKind::CommitBuy),
                (7, "./finalLOG", DtKind::DumpLog),
            ]
        );
        assert_eq!(workload.users(), ["A", "a", "b"]);
        assert_eq!(
            workload.skipped,
            ["a line 3: unknown command \"SHOUT\"", "a line 4: not $ COMMAND: \"[1] ADD,a,1\""]
        );
    }

    #[test]
    fn a_directory_and_its_tar_gz_load_as_the_split_format() {
        let files = [
            ("finalLOG", "$ DUMPLOG,./finalLOG\n"),
            ("bb", "$ ADD,bb,1.00\n$ QUOTE,bb,S\n"),
            ("aa", "$ ADD,aa,2.00\n"),
        ];
        let dir = tempfile::tempdir().unwrap();
        let split = dir.path().join("split");
        std::fs::create_dir(&split).unwrap();
        let archive = dir.path().join("split.tar.gz");
        let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
            std::fs::File::create(&archive).unwrap(),
            Default::default(),
        ));
        for (name, text) in files {
            std::fs::write(split.join(name), text).unwrap();
            let mut header = tar::Header::new_gnu();
            header.set_size(text.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            builder.append_data(&mut header, format!("split/{name}"), text.as_bytes()).unwrap();
        }
        builder.into_inner().unwrap().finish().unwrap();
        let from_dir = load(&split).unwrap();
        let numbered: Vec<(u64, &str)> = from_dir.lines.iter().map(|l| (l.number, l.args[0].as_str())).collect();
        assert_eq!(numbered, [(1, "aa"), (2, "bb"), (3, "bb"), (4, "./finalLOG")]);
        assert_eq!(load(&archive).unwrap(), from_dir);
        assert!(load(&dir.path().join("missing")).unwrap_err().contains("missing"));
    }

    #[test]
    fn the_course_files_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let one = load(&dir.join("1userWorkLoad")).unwrap();
        assert_eq!((one.lines.len(), one.warnings.len(), one.skipped.len()), (100, 0, 0));
        assert_eq!(one.lines[99], Line { number: 100, kind: DtKind::DumpLog, args: vec!["./testLOG".into()] });
        let ten = load(&dir.join("10User_testWorkLoad")).unwrap();
        assert_eq!((ten.lines.len(), ten.users().len()), (10_000, 10));
        assert!(ten.lines.iter().any(|l| l.kind == DtKind::Add && l.args[1].starts_with('-')));
    }
}

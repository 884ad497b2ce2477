//! Random append / sync / snapshot / truncate / reopen sequences against an in-memory
//! model of what the log must hold. Proptest prints the failing case and keeps it in
//! `proptest-regressions/`.

use std::collections::BTreeMap;
use std::path::Path;

use bourse_journal::{Entry, Journal, SNAPSHOTS_KEPT};
use proptest::prelude::*;

use crate::common::*;

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<(u64, Vec<u8>)>),
    Sync,
    /// The index is picked among the valid ones (possibly ahead of the log) by `selector`.
    Snapshot {
        selector: u16,
        bytes: Vec<u8>,
    },
    Truncate {
        selector: u16,
    },
    Reopen,
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let payload = prop::collection::vec(any::<u8>(), 0..48);
    prop_oneof![
        5 => prop::collection::vec((any::<u64>(), payload), 1..8).prop_map(Op::Append),
        1 => Just(Op::Sync),
        2 => (any::<u16>(), prop::collection::vec(any::<u8>(), 0..16))
            .prop_map(|(selector, bytes)| Op::Snapshot { selector, bytes }),
        1 => any::<u16>().prop_map(|selector| Op::Truncate { selector }),
        1 => Just(Op::Reopen),
    ]
}

/// What the log must hold.
#[derive(Default)]
struct Model {
    last_index: u64,
    /// Every record not truncated away; the journal may have pruned a prefix.
    entries: BTreeMap<u64, Entry>,
    /// Kept snapshots, ascending.
    snapshots: Vec<(u64, Vec<u8>)>,
    /// After a snapshot ahead of the log, the log starts here.
    log_floor: u64,
}

impl Model {
    fn snapshot_newest(&self) -> Option<u64> {
        self.snapshots.last().map(|(index, _)| *index)
    }

    /// The journal's first index may not be above this: the log reaches back to the
    /// oldest kept snapshot, or to 1 before there are two.
    fn first_index_max(&self) -> u64 {
        let retained_from = if self.snapshots.len() == SNAPSHOTS_KEPT { self.snapshots[0].0 + 1 } else { 1 };
        retained_from.max(self.log_floor)
    }

    fn snapshot(&mut self, index: u64, bytes: Vec<u8>) {
        if self.snapshot_newest() == Some(index) {
            self.snapshots.pop();
        }
        self.snapshots.push((index, bytes));
        if self.snapshots.len() > SNAPSHOTS_KEPT {
            self.snapshots.remove(0);
        }
        if index > self.last_index {
            self.entries.clear();
            self.last_index = index;
            self.log_floor = index + 1;
        }
    }

    fn truncate_after(&mut self, index: u64) {
        self.entries.retain(|&entry_index, _| entry_index <= index);
        self.last_index = self.last_index.min(index);
    }
}

/// An index in `low ..= high` picked by `selector`.
fn pick(selector: u16, low: u64, high: u64) -> u64 {
    low + u64::from(selector) % (high - low + 1)
}

fn op_apply(journal: &mut Journal, model: &mut Model, dir: &Path, op: Op) {
    match op {
        Op::Append(records) => {
            let first = model.last_index + 1;
            let appended: Vec<Entry> = records
                .into_iter()
                .enumerate()
                .map(|(position, (timestamp_ns, payload))| Entry {
                    index: first + position as u64,
                    timestamp_ns,
                    payload,
                })
                .collect();
            journal.append(&appended).unwrap();
            model.last_index += appended.len() as u64;
            model.entries.extend(appended.into_iter().map(|entry| (entry.index, entry)));
        }
        Op::Sync => assert_eq!(journal.sync().unwrap(), model.last_index),
        Op::Snapshot { selector, bytes } => {
            let low = model.snapshot_newest().unwrap_or(0).max(journal.first_index() - 1);
            let index = pick(selector, low, model.last_index + 3);
            journal.write_snapshot(index, &bytes).unwrap();
            model.snapshot(index, bytes);
        }
        Op::Truncate { selector } => {
            let low = model.snapshot_newest().unwrap_or(0).max(journal.first_index() - 1);
            let index = pick(selector, low, model.last_index);
            journal.truncate_after(index).unwrap();
            model.truncate_after(index);
        }
        Op::Reopen => {
            let (reopened, recovery) = open(dir, config_small());
            let snapshot = recovery.snapshot.clone().map(|snapshot| (snapshot.index, snapshot.bytes));
            assert_eq!(snapshot.as_ref(), model.snapshots.last());
            assert!(recovery.tail_cut.is_none() && recovery.snapshots_skipped.is_empty());
            let after = snapshot.map_or(0, |(index, _)| index);
            let expected: Vec<Entry> = model.entries.range(after + 1..).map(|(_, entry)| entry.clone()).collect();
            assert_eq!(recovered(recovery), expected);
            *journal = reopened;
        }
    }
}

fn model_check(journal: &Journal, model: &Model, dir: &Path) {
    assert_eq!(journal.last_index(), model.last_index);
    assert_eq!(journal.snapshot_index(), model.snapshot_newest());
    let first = journal.first_index();
    assert!(first <= model.first_index_max(), "first index {first} above {}", model.first_index_max());
    assert!(first <= model.snapshot_newest().map_or(1, |index| index + 1));
    let held: Vec<Entry> = journal.read_range(first, model.last_index).unwrap().collect::<Result<_, _>>().unwrap();
    let expected: Vec<Entry> = model.entries.range(first..).map(|(_, entry)| entry.clone()).collect();
    assert_eq!(held, expected);
    assert_eq!(snapshot_paths(dir).len(), model.snapshots.len());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn prop_journal_matches_model(ops in prop::collection::vec(op_strategy(), 1..40)) {
        let dir = dir_fast();
        let (mut journal, _) = open(dir.path(), config_small());
        let mut model = Model::default();
        for op in ops {
            op_apply(&mut journal, &mut model, dir.path(), op);
            model_check(&journal, &model, dir.path());
        }
        // Whatever happened, a final reopen recovers the model.
        drop(journal);
        op_apply(&mut open(dir.path(), config_small()).0, &mut model, dir.path(), Op::Reopen);
    }
}

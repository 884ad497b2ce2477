//! Exactly-once: per-client sequence numbers and remembered outcomes.
//!
//! A client numbers its commands 1, 2, 3, …. The next expected number is applied; a
//! number already applied is a duplicate and is answered with its original outcome
//! (kept for the last `outcomes_per_client_max` commands of each client); a number past
//! the next expected one is refused with `sequence_gap` without being recorded, so the
//! client can resend the missing ones first. This keeps each client's commands in
//! order across retries and leader changes.
//!
//! A day-trading command's answer is more than its outcome (its transactionNum, the
//! figures it returns, the audit point a `DUMPLOG` reads up to), so its whole result
//! is kept beside the outcome for as long as the outcome is: a retry gets the answer
//! the first send got, never a bare outcome.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::daytrading::HistoryItem;
use crate::event::Outcome;
use crate::reject::Reject;
use crate::types::Timestamp;

/// One client's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The highest sequence number applied.
    pub seq_applied: u64,
    /// Outcomes of the last applied commands; the back is `seq_applied`'s.
    pub outcomes: VecDeque<PackedOutcome>,
    /// The results of the day-trading commands among those, by seq, oldest first.
    pub day_trading: VecDeque<(u64, HistoryItem)>,
    /// The log time of the last command applied, from which the record expires.
    pub ts_last: Timestamp,
}

/// An [`Outcome`] in eight bytes, so a client's window stays small in cache: the top
/// bit marks a rejection (its code in the low bits), otherwise the value is the id.
/// Ids never reach 2^63: they count commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackedOutcome(u64);

const REJECTED_BIT: u64 = 1 << 63;

impl PackedOutcome {
    pub fn pack(outcome: Outcome) -> Self {
        match outcome {
            Outcome::Ok { id } => {
                assert!(id & REJECTED_BIT == 0, "id {id} too large to pack");
                PackedOutcome(id)
            }
            Outcome::Rejected(reject) => PackedOutcome(REJECTED_BIT | u64::from(reject.code())),
        }
    }

    pub fn unpack(self) -> Outcome {
        if self.0 & REJECTED_BIT == 0 {
            return Outcome::Ok { id: self.0 };
        }
        let code = (self.0 & !REJECTED_BIT) as u16;
        Outcome::Rejected(Reject::from_code(code).expect("packed from a valid reject"))
    }
}

/// What to do with an incoming `(client, seq)`.
pub enum SessionCheck {
    Apply,
    Duplicate(Outcome),
    Refuse(Reject),
}

impl Session {
    pub fn check(&self, seq: u64) -> SessionCheck {
        if seq == self.seq_applied + 1 {
            return SessionCheck::Apply;
        }
        if seq > self.seq_applied {
            return SessionCheck::Refuse(Reject::SequenceGap);
        }
        let back = (self.seq_applied - seq) as usize;
        match self.outcomes.len().checked_sub(back + 1) {
            Some(i) => SessionCheck::Duplicate(self.outcomes[i].unpack()),
            None => SessionCheck::Refuse(Reject::SequenceTooOld),
        }
    }

    pub fn record(&mut self, seq: u64, outcome: Outcome, outcomes_max: usize, now: Timestamp) {
        debug_assert_eq!(seq, self.seq_applied + 1);
        self.seq_applied = seq;
        self.ts_last = now;
        if self.outcomes.len() == outcomes_max {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(PackedOutcome::pack(outcome));
        // Results leave with their outcomes.
        let oldest = self.seq_applied + 1 - self.outcomes.len() as u64;
        while self.day_trading.front().is_some_and(|&(seq, _)| seq < oldest) {
            self.day_trading.pop_front();
        }
    }

    /// Keeps the whole result of the day-trading command `seq`, just recorded.
    pub fn record_day_trading(&mut self, seq: u64, item: HistoryItem) {
        debug_assert_eq!(seq, self.seq_applied);
        self.day_trading.push_back((seq, item));
    }

    /// The result of the day-trading command `seq`, while its outcome is remembered.
    pub fn day_trading_result(&self, seq: u64) -> Option<HistoryItem> {
        let i = self.day_trading.binary_search_by_key(&seq, |&(s, _)| s).ok()?;
        Some(self.day_trading[i].1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daytrading::{DtKind, DtReturn};

    fn item(txn: u64) -> HistoryItem {
        HistoryItem { txn, stamp_ms: txn * 10, kind: DtKind::Add, error: None, ret: DtReturn::Cash { available: 1 } }
    }

    #[test]
    fn day_trading_results_are_kept_exactly_as_long_as_their_outcomes() {
        let mut session = Session::default();
        for seq in 1..=6 {
            session.record(seq, Outcome::Ok { id: 0 }, 3, seq);
            if seq % 2 == 0 {
                session.record_day_trading(seq, item(100 + seq));
            }
        }
        // Outcomes of 4, 5, 6 remain; of the results, 4's and 6's.
        assert!(matches!(session.check(3), SessionCheck::Refuse(Reject::SequenceTooOld)));
        assert!(matches!(session.check(4), SessionCheck::Duplicate(_)));
        assert_eq!(session.day_trading_result(2), None);
        assert_eq!(session.day_trading_result(4), Some(item(104)));
        assert_eq!(session.day_trading_result(5), None, "not a day-trading command");
        assert_eq!(session.day_trading_result(6), Some(item(106)));
        assert_eq!(session.day_trading.len(), 2);
    }
}

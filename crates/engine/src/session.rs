//! Exactly-once: per-client sequence numbers and remembered outcomes.
//!
//! A client numbers its commands 1, 2, 3, …. The next expected number is applied; a
//! number already applied is a duplicate and is answered with its original outcome
//! (kept for the last `outcomes_per_client_max` commands of each client); a number past
//! the next expected one is refused with `sequence_gap` without being recorded, so the
//! client can resend the missing ones first. This keeps each client's commands in
//! order across retries and leader changes.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::event::Outcome;
use crate::reject::Reject;

/// One client's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Session {
    /// The highest sequence number applied.
    pub seq_applied: u64,
    /// Outcomes of the last applied commands; the back is `seq_applied`'s.
    pub outcomes: VecDeque<Outcome>,
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
            Some(i) => SessionCheck::Duplicate(self.outcomes[i]),
            None => SessionCheck::Refuse(Reject::SequenceTooOld),
        }
    }

    pub fn record(&mut self, seq: u64, outcome: Outcome, outcomes_max: usize) {
        debug_assert_eq!(seq, self.seq_applied + 1);
        self.seq_applied = seq;
        if self.outcomes.len() == outcomes_max {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(outcome);
    }
}

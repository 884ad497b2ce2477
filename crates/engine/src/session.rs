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
    pub outcomes: VecDeque<PackedOutcome>,
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

    pub fn record(&mut self, seq: u64, outcome: Outcome, outcomes_max: usize) {
        debug_assert_eq!(seq, self.seq_applied + 1);
        self.seq_applied = seq;
        if self.outcomes.len() == outcomes_max {
            self.outcomes.pop_front();
        }
        self.outcomes.push_back(PackedOutcome::pack(outcome));
    }
}

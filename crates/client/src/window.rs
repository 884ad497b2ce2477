//! The in-flight window: every command of one client that has no final answer yet, in
//! seq order, and what to (re)send next. Pure state, no I/O, so the retry rules are
//! tested without a server.
//!
//! Rules (the engine's exactly-once contract, `bourse_engine` `session.rs`):
//! - Seqs are assigned here, 1, 2, 3, … without gaps, and a command keeps its seq for
//!   ever: a resend carries the original number, so the node applies it at most once and
//!   answers a repeat with the original outcome (`duplicate`).
//! - At most `inflight_max` commands are in the window (from the oldest unanswered one
//!   to the newest). With `inflight_max` at most the engine's outcome window (128), the
//!   oldest unanswered seq is always still remembered by the node, so `sequence_too_old`
//!   cannot happen to a client that keeps this bound.
//! - After a reconnect ([`Window::new_stream`]), or when the node answers `sequence_gap`
//!   to the latest send of a command on the current stream ([`Window::rewind`]),
//!   everything unanswered is resent from the oldest, in seq order. A gap answer to a
//!   send that has been superseded (the command was sent again since, or is about to be)
//!   is stale and ignored, so one lost command causes one resend round, not one per
//!   command behind it. Answers to one seq come back in the order of its sends on one
//!   stream (the node sequences a stream's commands in order), which is what lets a
//!   count of unanswered sends tell the latest answer apart.
//! - A command the node refused before the log (code 1000 or more, log index 0) did not
//!   use up its seq, and the commands behind it can never apply while that seq is a hole.
//!   Renumbering them would be unsafe (an earlier send with the old number may still be
//!   on its way), so the hole is filled instead: the refused command's caller hears the
//!   refusal, and the same seq is resent carrying a filler, a cancel of order 0, which the
//!   engine always rejects (`account_unknown`, `symbol_unknown` or `order_unknown`) and
//!   so records without changing anything. Its answer goes to no one.
//! - `sequence_gap` for the oldest unanswered command means the node has forgotten a
//!   command it acknowledged (everything before that seq was answered): the window
//!   cannot repair that, and [`AckEffect::Fatal`] says so.
//!
//! Complexity: O(1) amortised per command pushed, sent and answered; a rewind costs one
//! pass over the window when it is resent.

use std::collections::VecDeque;

use bourse_engine::command::CommandBody;
use bourse_engine::{Outcome, Reject};
use bourse_protocol::convert;
use bourse_protocol::proto;
use bourse_protocol::proto::client_command::Body;
use bourse_protocol::refusal::Refusal;

use crate::error::Error;
use crate::reply::Reply;

/// The largest window a client may keep: the engine's default outcome window
/// (`EngineConfig::outcomes_per_client_max`). A larger window could leave the oldest
/// unanswered seq older than anything the node still remembers.
pub const INFLIGHT_MAX_LIMIT: usize = 128;

/// The command that fills a seq the node refused before the log: a cancel of order 0,
/// which never exists (order ids start at 1), in an account that almost surely does not.
/// The engine rejects it and changes nothing but the client's exactly-once record.
pub fn filler_body() -> Body {
    Body::Cancel(proto::CancelOrder { account: u32::MAX, symbol: u32::MAX, order: 0 })
}

/// Whether a command is answered by now, and to whom its answer goes.
#[derive(Debug)]
enum Slot<T> {
    /// A caller's command; `T` says where its answer goes.
    Waiting(T),
    /// A filler for a refused seq: its answer goes to no one.
    Filler,
    /// Answered, waiting for the commands before it to be answered too.
    Done,
}

#[derive(Debug)]
struct Entry<T> {
    command: proto::ClientCommand,
    /// Sends of this command on the current stream that have no answer yet.
    sends_unanswered: u32,
    slot: Slot<T>,
}

/// What an ack did to the window.
#[derive(Debug)]
pub enum AckEffect<T> {
    /// Not about a command waiting for an answer (already answered, or a gap answer to a
    /// send that has been superseded): nothing to do.
    Stale,
    /// The final answer to a caller's command (`Err` for a refusal before the log, a
    /// forgotten outcome or an answer this version cannot read).
    Completed { token: T, result: Result<Reply, Error> },
    /// A filler was answered; no one is told.
    FillerDone,
    /// `sequence_gap` to the latest send of a command: the window was rewound and
    /// everything unanswered must be resent from the oldest.
    Rewound,
    /// The node contradicts what it acknowledged before; the session cannot go on.
    Fatal(Error),
}

/// The unanswered commands of one client, in seq order.
#[derive(Debug)]
pub struct Window<T> {
    inflight_max: usize,
    /// The seq of `entries[0]`; equals `seq_next` when the window is empty.
    seq_front: u64,
    /// The seq the next pushed command gets.
    seq_next: u64,
    entries: VecDeque<Entry<T>>,
    /// `entries[..cursor]` were sent since the last rewind, or are done.
    cursor: usize,
    /// How many times the window was rewound (for tests and statistics).
    rewinds: u64,
}

impl<T> Window<T> {
    /// An empty window whose first command gets seq 1.
    ///
    /// # Panics
    /// If `inflight_max` is 0 or above [`INFLIGHT_MAX_LIMIT`] (options are validated
    /// before a window is made).
    pub fn new(inflight_max: usize) -> Self {
        assert!((1..=INFLIGHT_MAX_LIMIT).contains(&inflight_max), "inflight_max {inflight_max} out of range");
        Window { inflight_max, seq_front: 1, seq_next: 1, entries: VecDeque::new(), cursor: 0, rewinds: 0 }
    }

    /// Commands in the window (unanswered ones and answered ones behind an unanswered one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.inflight_max
    }

    /// The seq the next pushed command gets.
    pub fn seq_next(&self) -> u64 {
        self.seq_next
    }

    /// How many times the window was rewound.
    pub fn rewinds(&self) -> u64 {
        self.rewinds
    }

    /// Whether some command waits to be sent on the current stream.
    pub fn has_unsent(&self) -> bool {
        self.entries.iter().skip(self.cursor).any(|entry| !matches!(entry.slot, Slot::Done))
    }

    /// Adds a command and returns its seq, or gives the token back when the window is
    /// full (callers hold a permit per slot, so that is a bug on their side).
    pub fn push(&mut self, body: &CommandBody, token: T) -> Result<u64, T> {
        if self.is_full() {
            return Err(token);
        }
        let seq = self.seq_next;
        self.seq_next += 1;
        let command = proto::ClientCommand { seq, body: Some(body.into()) };
        self.entries.push_back(Entry { command, sends_unanswered: 0, slot: Slot::Waiting(token) });
        Ok(seq)
    }

    /// The next commands to send on the current stream, at most `count_max`, in seq
    /// order.
    pub fn take_sendable(&mut self, count_max: usize) -> Vec<proto::ClientCommand> {
        let mut commands = Vec::new();
        while self.cursor < self.entries.len() && commands.len() < count_max {
            let entry = &mut self.entries[self.cursor];
            self.cursor += 1;
            if matches!(entry.slot, Slot::Done) {
                continue;
            }
            entry.sends_unanswered += 1;
            commands.push(entry.command.clone());
        }
        commands
    }

    /// Everything unanswered is to be sent again, from the oldest, in seq order (a gap on
    /// the current stream).
    pub fn rewind(&mut self) {
        self.rewinds += 1;
        self.cursor = 0;
    }

    /// A new stream: answers to the sends on the old one will never come, and everything
    /// unanswered is to be sent again, from the oldest, in seq order.
    pub fn new_stream(&mut self) {
        for entry in &mut self.entries {
            entry.sends_unanswered = 0;
        }
        self.rewind();
    }

    /// Takes every waiting token out with its seq (for failing them when the session
    /// ends); the window is left empty and its seqs used up, so nothing may be pushed
    /// after this.
    pub fn drain_tokens(&mut self) -> Vec<(u64, T)> {
        let tokens = self
            .entries
            .drain(..)
            .filter_map(|entry| match entry.slot {
                Slot::Waiting(token) => Some((entry.command.seq, token)),
                Slot::Filler | Slot::Done => None,
            })
            .collect();
        self.seq_front = self.seq_next;
        self.cursor = 0;
        tokens
    }

    /// Applies one ack. Returns its effect and how many slots were freed (answered
    /// commands leave the window only once every command before them is answered).
    pub fn on_ack(&mut self, ack: proto::Ack) -> (AckEffect<T>, usize) {
        let effect = self.on_ack_effect(ack);
        (effect, self.pop_done())
    }

    fn on_ack_effect(&mut self, ack: proto::Ack) -> AckEffect<T> {
        if ack.seq < self.seq_front || ack.seq >= self.seq_next {
            return AckEffect::Stale;
        }
        let index = (ack.seq - self.seq_front) as usize;
        let entry = &mut self.entries[index];
        entry.sends_unanswered = entry.sends_unanswered.saturating_sub(1);
        if matches!(entry.slot, Slot::Done) {
            return AckEffect::Stale;
        }
        let rejected = match &ack.outcome {
            Some(proto::ack::Outcome::Rejected(info)) => Some(info),
            _ => None,
        };
        match rejected {
            Some(info) if info.code >= Refusal::FieldMissing.code() => self.on_ack_refused(index, ack.seq, info),
            Some(info) if info.code == u32::from(Reject::SequenceGap.code()) => self.on_ack_gap(index, ack.seq),
            Some(info) if info.code == u32::from(Reject::SequenceTooOld.code()) => {
                self.complete(index, Err(Error::OutcomeForgotten { seq: ack.seq }))
            }
            _ => {
                let result = reply_from_ack(ack);
                self.complete(index, result)
            }
        }
    }

    /// A refusal before the log: the caller hears it and the seq is filled. A refusal of
    /// a filler is impossible (its shape is right) unless it answers an older send of
    /// the refused command, so it is stale.
    fn on_ack_refused(&mut self, index: usize, seq: u64, info: &proto::RejectInfo) -> AckEffect<T> {
        let entry = &mut self.entries[index];
        if !matches!(entry.slot, Slot::Waiting(_)) {
            return AckEffect::Stale;
        }
        let Slot::Waiting(token) = std::mem::replace(&mut entry.slot, Slot::Filler) else {
            unreachable!("checked just above");
        };
        entry.command.body = Some(filler_body());
        // The commands behind the hole were (or will be) answered sequence_gap: resend
        // from the filler on, in order. Their gap answers are then stale.
        self.cursor = self.cursor.min(index);
        self.rewinds += 1;
        let error = Error::Refused { seq, code: info.code, name: info.name.clone(), detail: info.detail.clone() };
        AckEffect::Completed { token, result: Err(error) }
    }

    fn on_ack_gap(&mut self, index: usize, seq: u64) -> AckEffect<T> {
        if index == 0 {
            return AckEffect::Fatal(Error::Protocol(format!(
                "sequence_gap for seq {seq}, the oldest unanswered: the exchange forgot seq {} that it acknowledged \
                 (a client idle past the exchange's client expiry, its [clients] expiry_secs, is forgotten): \
                 open a new session",
                seq - 1
            )));
        }
        // A newer send of this command is unanswered, or one is about to be made.
        if self.entries[index].sends_unanswered > 0 || index >= self.cursor {
            return AckEffect::Stale;
        }
        self.rewind();
        AckEffect::Rewound
    }

    fn complete(&mut self, index: usize, result: Result<Reply, Error>) -> AckEffect<T> {
        match std::mem::replace(&mut self.entries[index].slot, Slot::Done) {
            Slot::Waiting(token) => AckEffect::Completed { token, result },
            Slot::Filler => AckEffect::FillerDone,
            Slot::Done => unreachable!("done entries are stale"),
        }
    }

    fn pop_done(&mut self) -> usize {
        let mut freed = 0;
        while matches!(self.entries.front(), Some(Entry { slot: Slot::Done, .. })) {
            self.entries.pop_front();
            self.seq_front += 1;
            self.cursor = self.cursor.saturating_sub(1);
            freed += 1;
        }
        freed
    }
}

/// The engine outcome of a final ack.
pub fn reply_from_ack(ack: proto::Ack) -> Result<Reply, Error> {
    let outcome: Outcome = convert::outcome_from_ack(&ack)
        .map_err(|error| Error::Protocol(format!("unreadable ack for seq {}: {error}", ack.seq)))?;
    Ok(Reply {
        seq: ack.seq,
        outcome,
        log_index: ack.log_index,
        duplicate: ack.duplicate,
        gateway_ts: ack.gateway_ts,
        day_trading: ack.day_trading,
    })
}

#[cfg(test)]
mod tests {
    use bourse_engine::AccountId;

    use super::*;

    fn body(n: u32) -> CommandBody {
        CommandBody::SuspendAccount { account: AccountId(n) }
    }

    fn seqs(commands: &[proto::ClientCommand]) -> Vec<u64> {
        commands.iter().map(|command| command.seq).collect()
    }

    fn ack_ok(seq: u64, id: u64) -> proto::Ack {
        proto::Ack {
            day_trading: None,
            seq,
            log_index: 10 + seq,
            duplicate: false,
            outcome: Some(proto::ack::Outcome::OkId(id)),
            gateway_ts: 0,
        }
    }

    fn ack_reject(seq: u64, reject: Reject) -> proto::Ack {
        proto::Ack {
            day_trading: None,
            seq,
            log_index: 10 + seq,
            duplicate: false,
            outcome: Some(proto::ack::Outcome::Rejected(reject.into())),
            gateway_ts: 0,
        }
    }

    fn ack_refused(seq: u64) -> proto::Ack {
        let error = bourse_protocol::convert::ConvertError::FieldMissing { field: "ClientCommand.body" };
        convert::ack_refused(seq, &error)
    }

    fn window_with(count: u32, inflight_max: usize) -> Window<u32> {
        let mut window = Window::new(inflight_max);
        for n in 0..count {
            window.push(&body(n), n).expect("room");
        }
        window
    }

    fn completed(effect: AckEffect<u32>) -> (u32, Result<Reply, Error>) {
        match effect {
            AckEffect::Completed { token, result } => (token, result),
            other => panic!("expected a completion, got {other:?}"),
        }
    }

    #[test]
    fn seqs_start_at_one_and_have_no_gaps() {
        let mut window = window_with(3, 8);
        assert_eq!(window.seq_next(), 4);
        let sent = window.take_sendable(10);
        assert_eq!(seqs(&sent), [1, 2, 3]);
        assert_eq!(sent[1].body, Some((&body(1)).into()));
        assert!(window.take_sendable(10).is_empty(), "nothing is sent twice on one stream");
    }

    #[test]
    fn take_sendable_respects_the_batch_bound() {
        let mut window = window_with(5, 8);
        assert_eq!(seqs(&window.take_sendable(2)), [1, 2]);
        assert_eq!(seqs(&window.take_sendable(2)), [3, 4]);
        assert_eq!(seqs(&window.take_sendable(2)), [5]);
        assert!(!window.has_unsent());
    }

    #[test]
    fn a_full_window_refuses_until_the_oldest_is_answered() {
        let mut window = window_with(2, 2);
        assert!(window.is_full());
        assert_eq!(window.push(&body(9), 9), Err(9));
        window.take_sendable(10);
        // Answering the newer one first frees nothing: the window spans from the oldest.
        let (effect, freed) = window.on_ack(ack_ok(2, 0));
        assert_eq!(completed(effect).0, 1);
        assert_eq!(freed, 0);
        assert!(window.is_full());
        let (effect, freed) = window.on_ack(ack_ok(1, 0));
        assert_eq!(completed(effect).0, 0);
        assert_eq!(freed, 2);
        assert!(window.is_empty());
        assert_eq!(window.push(&body(9), 9), Ok(3));
    }

    #[test]
    fn answers_carry_the_outcome_and_flags() {
        let mut window = window_with(2, 8);
        window.take_sendable(10);
        let (token, result) = completed(window.on_ack(ack_ok(1, 77)).0);
        let reply = result.expect("ok");
        assert_eq!((token, reply.seq, reply.log_index, reply.duplicate), (0, 1, 11, false));
        assert_eq!(reply.outcome, Outcome::Ok { id: 77 });
        let mut duplicate = ack_reject(2, Reject::BalanceInsufficient);
        duplicate.duplicate = true;
        let (_, result) = completed(window.on_ack(duplicate).0);
        let reply = result.expect("a rejection is an answer");
        assert!(reply.duplicate);
        assert_eq!(reply.outcome, Outcome::Rejected(Reject::BalanceInsufficient));
    }

    #[test]
    fn a_rewind_resends_every_unanswered_command_in_order_with_its_original_seq() {
        let mut window = window_with(5, 8);
        let first = window.take_sendable(10);
        window.on_ack(ack_ok(1, 0));
        window.on_ack(ack_ok(3, 0)); // out of order: 2 still unanswered
        window.rewind();
        let again = window.take_sendable(10);
        assert_eq!(seqs(&again), [2, 4, 5]);
        for command in &again {
            let original = first.iter().find(|c| c.seq == command.seq).expect("sent before");
            assert_eq!(command, original, "a resend is byte for byte the original");
        }
    }

    #[test]
    fn answers_to_resends_are_delivered_once() {
        let mut window = window_with(2, 8);
        window.take_sendable(10);
        window.rewind();
        window.take_sendable(10);
        assert_eq!(completed(window.on_ack(ack_ok(1, 5)).0).0, 0);
        let mut repeat = ack_ok(1, 5);
        repeat.duplicate = true;
        assert!(matches!(window.on_ack(repeat).0, AckEffect::Stale), "already answered");
        assert!(matches!(window.on_ack(ack_ok(9, 0)).0, AckEffect::Stale), "never sent");
    }

    #[test]
    fn a_gap_rewinds_once_and_later_gaps_of_the_same_round_are_stale() {
        let mut window = window_with(4, 8);
        window.take_sendable(10);
        assert!(matches!(window.on_ack(ack_reject(2, Reject::SequenceGap)).0, AckEffect::Rewound));
        assert_eq!(window.rewinds(), 1);
        // 3 and 4 are about to be resent: their gaps are answered by the resend.
        assert!(matches!(window.on_ack(ack_reject(3, Reject::SequenceGap)).0, AckEffect::Stale));
        assert!(matches!(window.on_ack(ack_reject(4, Reject::SequenceGap)).0, AckEffect::Stale));
        assert_eq!(window.rewinds(), 1);
        assert_eq!(seqs(&window.take_sendable(10)), [1, 2, 3, 4], "resent from the first unanswered");
        // A gap to the resend rewinds again.
        assert!(matches!(window.on_ack(ack_reject(3, Reject::SequenceGap)).0, AckEffect::Rewound));
    }

    #[test]
    fn a_gap_answering_a_superseded_send_is_stale() {
        let mut window = window_with(3, 8);
        window.take_sendable(10);
        assert!(matches!(window.on_ack(ack_reject(2, Reject::SequenceGap)).0, AckEffect::Rewound));
        assert_eq!(seqs(&window.take_sendable(10)), [1, 2, 3]);
        // The first send of 3 is answered now; its resend is still unanswered.
        assert!(matches!(window.on_ack(ack_reject(3, Reject::SequenceGap)).0, AckEffect::Stale));
        assert_eq!(window.rewinds(), 1);
    }

    #[test]
    fn a_new_stream_forgets_sends_on_the_old_one() {
        let mut window = window_with(3, 8);
        window.take_sendable(10);
        window.take_sendable(10);
        window.new_stream();
        assert_eq!(seqs(&window.take_sendable(2)), [1, 2]);
        // 2 was sent once on this stream: its gap answer is the latest and rewinds.
        assert!(matches!(window.on_ack(ack_reject(2, Reject::SequenceGap)).0, AckEffect::Rewound));
        // 3 was not sent on this stream yet: stale.
        assert!(matches!(window.on_ack(ack_reject(3, Reject::SequenceGap)).0, AckEffect::Stale));
    }

    #[test]
    fn a_gap_is_never_delivered_as_an_answer() {
        let mut window = window_with(2, 8);
        window.take_sendable(10);
        window.on_ack(ack_reject(2, Reject::SequenceGap));
        assert_eq!(window.len(), 2);
        window.take_sendable(10);
        assert_eq!(completed(window.on_ack(ack_ok(1, 0)).0).0, 0);
        assert_eq!(completed(window.on_ack(ack_ok(2, 0)).0).0, 1);
        assert!(window.is_empty());
    }

    #[test]
    fn a_gap_for_the_oldest_unanswered_is_fatal() {
        let mut window = window_with(2, 8);
        window.take_sendable(10);
        window.on_ack(ack_ok(1, 0));
        assert!(matches!(window.on_ack(ack_reject(2, Reject::SequenceGap)).0, AckEffect::Fatal(Error::Protocol(_))));
    }

    #[test]
    fn a_refusal_before_the_log_is_told_and_its_seq_filled() {
        let mut window = window_with(3, 8);
        window.take_sendable(10);
        let (token, result) = completed(window.on_ack(ack_refused(2)).0);
        assert_eq!(token, 1);
        assert!(matches!(result, Err(Error::Refused { seq: 2, code: 1000, .. })), "{result:?}");
        // 3 comes back sequence_gap (2 was a hole): stale, the refusal already rewound.
        assert!(matches!(window.on_ack(ack_reject(3, Reject::SequenceGap)).0, AckEffect::Stale));
        let resend = window.take_sendable(10);
        assert_eq!(seqs(&resend), [2, 3], "resent from the hole on");
        assert_eq!(resend[0].body, Some(filler_body()));
        assert_eq!(resend[1].body, Some((&body(2)).into()), "the command behind keeps its body and seq");
        assert!(matches!(window.on_ack(ack_ok(1, 0)).0, AckEffect::Completed { token: 0, .. }));
        assert!(matches!(window.on_ack(ack_reject(2, Reject::AccountUnknown)).0, AckEffect::FillerDone));
        assert!(matches!(window.on_ack(ack_ok(3, 0)).0, AckEffect::Completed { token: 2, .. }));
        assert!(window.is_empty());
    }

    #[test]
    fn a_refusal_of_an_older_send_after_filling_is_stale() {
        let mut window = window_with(1, 8);
        window.take_sendable(10);
        window.on_ack(ack_refused(1));
        assert!(matches!(window.on_ack(ack_refused(1)).0, AckEffect::Stale));
    }

    #[test]
    fn a_forgotten_outcome_is_an_error_answer() {
        let mut window = window_with(1, 8);
        window.take_sendable(10);
        let (_, result) = completed(window.on_ack(ack_reject(1, Reject::SequenceTooOld)).0);
        assert!(matches!(result, Err(Error::OutcomeForgotten { seq: 1 })));
    }

    #[test]
    fn an_ack_without_outcome_is_a_protocol_error_answer() {
        let mut window = window_with(1, 8);
        window.take_sendable(10);
        let ack =
            proto::Ack { seq: 1, log_index: 3, duplicate: false, outcome: None, gateway_ts: 0, day_trading: None };
        let (_, result) = completed(window.on_ack(ack).0);
        assert!(matches!(result, Err(Error::Protocol(_))));
    }

    #[test]
    fn drain_hands_back_waiting_tokens_and_keeps_seqs_used() {
        let mut window = window_with(3, 8);
        window.take_sendable(10);
        window.on_ack(ack_ok(2, 0));
        window.on_ack(ack_refused(3));
        assert_eq!(window.drain_tokens(), [(1, 0)]);
        assert!(window.is_empty());
        assert_eq!(window.seq_next(), 4);
    }

    #[test]
    #[should_panic(expected = "out of range")]
    fn a_window_above_the_engine_outcome_window_is_refused() {
        let _ = Window::<u32>::new(INFLIGHT_MAX_LIMIT + 1);
    }

    /// A model node and a lossy connection, driven at random: commands are sent in
    /// batches, connections break (what was on the wire is lost, or still reaches the log
    /// late, interleaved with the new stream), a command is now and then lost on a stream
    /// that goes on, some commands are refused before the log. Whatever happens, every command is applied exactly once, in seq order, and every
    /// caller hears exactly one answer.
    mod simulation {
        use std::collections::VecDeque;

        use bourse_engine::AccountId;
        use rand::{Rng, SeedableRng};
        use rand_chacha::ChaCha8Rng;

        use super::*;

        const COMMANDS: u32 = 400;

        fn refused_before_log(body: &Body) -> bool {
            matches!(body, Body::SuspendAccount(target) if target.account % 17 == 5)
        }

        #[derive(Default)]
        struct Node {
            seq_applied: u64,
            outcomes: Vec<Outcome>,
            /// The bodies applied, in order.
            applied: Vec<Body>,
        }

        impl Node {
            fn handle(&mut self, command: &proto::ClientCommand) -> proto::Ack {
                let body = command.body.as_ref().expect("the client always sends a body");
                if refused_before_log(body) {
                    return ack_refused(command.seq);
                }
                let (outcome, duplicate) = if command.seq == self.seq_applied + 1 {
                    let outcome = match body {
                        Body::SuspendAccount(target) => Outcome::Ok { id: u64::from(target.account) },
                        _ => Outcome::Rejected(Reject::AccountUnknown),
                    };
                    self.seq_applied += 1;
                    self.outcomes.push(outcome);
                    self.applied.push(body.clone());
                    (outcome, false)
                } else if command.seq > self.seq_applied {
                    (Outcome::Rejected(Reject::SequenceGap), false)
                } else if self.seq_applied - command.seq >= INFLIGHT_MAX_LIMIT as u64 {
                    (Outcome::Rejected(Reject::SequenceTooOld), false)
                } else {
                    (self.outcomes[(command.seq - 1) as usize], true)
                };
                proto::Ack {
                    seq: command.seq,
                    log_index: 1,
                    duplicate,
                    outcome: Some(outcome.into()),
                    gateway_ts: 0,
                    day_trading: None,
                }
            }
        }

        struct World {
            rng: ChaCha8Rng,
            window: Window<u32>,
            node: Node,
            to_node: VecDeque<proto::ClientCommand>,
            to_client: VecDeque<proto::Ack>,
            /// Sent on a broken stream but already on their way into the log.
            late: VecDeque<proto::ClientCommand>,
            pushed: u32,
            answers: Vec<Option<Result<Reply, Error>>>,
            rewinds_by_gap: u32,
        }

        impl World {
            fn new(seed: u64, inflight_max: usize) -> Self {
                World {
                    rng: ChaCha8Rng::seed_from_u64(seed),
                    window: Window::new(inflight_max),
                    node: Node::default(),
                    to_node: VecDeque::new(),
                    to_client: VecDeque::new(),
                    late: VecDeque::new(),
                    pushed: 0,
                    answers: (0..COMMANDS).map(|_| None).collect(),
                    rewinds_by_gap: 0,
                }
            }

            fn client_receives(&mut self) {
                let Some(ack) = self.to_client.pop_front() else { return };
                match self.window.on_ack(ack).0 {
                    AckEffect::Completed { token, result } => {
                        let answer = &mut self.answers[token as usize];
                        assert!(answer.is_none(), "command {token} answered twice");
                        *answer = Some(result);
                    }
                    AckEffect::Rewound => self.rewinds_by_gap += 1,
                    AckEffect::Stale | AckEffect::FillerDone => {}
                    AckEffect::Fatal(error) => panic!("fatal: {error}"),
                }
            }

            fn break_connection(&mut self) {
                let reached_log = self.rng.gen_range(0..=self.to_node.len());
                self.late.extend(self.to_node.drain(..reached_log));
                self.to_node.clear();
                self.to_client.clear();
                self.window.new_stream();
            }

            fn step(&mut self, breaks: bool) {
                match self.rng.gen_range(0..100) {
                    0..=29 if self.pushed < COMMANDS && !self.window.is_full() => {
                        let n = self.pushed;
                        let seq = self.window.push(&CommandBody::SuspendAccount { account: AccountId(n) }, n);
                        assert_eq!(seq, Ok(u64::from(n) + 1));
                        self.pushed += 1;
                    }
                    30..=49 => {
                        let count = self.rng.gen_range(1..8);
                        let batch = self.window.take_sendable(count);
                        self.to_node.extend(batch);
                    }
                    50..=69 => {
                        if let Some(command) = self.to_node.pop_front() {
                            // Now and then a command is lost on its way (a leader change
                            // mid-forward) and the stream goes on without it.
                            if breaks && self.rng.gen_range(0..100) == 0 {
                                return;
                            }
                            let ack = self.node.handle(&command);
                            self.to_client.push_back(ack);
                        }
                    }
                    70..=79 => {
                        if let Some(command) = self.late.pop_front() {
                            let _lost_with_its_stream = self.node.handle(&command);
                        }
                    }
                    80..=97 => self.client_receives(),
                    98..=99 if breaks => self.break_connection(),
                    _ => {}
                }
            }

            fn run(&mut self) {
                for _ in 0..20_000 {
                    self.step(true);
                }
                let mut steps = 0;
                while self.pushed < COMMANDS || !self.window.is_empty() {
                    // The driver's answer timeout: everything sent, nothing coming back.
                    let stuck = self.to_node.is_empty() && self.to_client.is_empty() && !self.window.has_unsent();
                    if stuck && !self.window.is_empty() {
                        self.break_connection();
                    }
                    self.step(false);
                    steps += 1;
                    assert!(steps < 1_000_000, "no progress: window {:?}", self.window.len());
                }
            }

            fn check(&self) {
                let expected: Vec<Body> = (0..COMMANDS)
                    .map(|n| {
                        let body = (&CommandBody::SuspendAccount { account: AccountId(n) }).into();
                        if refused_before_log(&body) {
                            filler_body()
                        } else {
                            body
                        }
                    })
                    .collect();
                assert_eq!(self.node.applied, expected, "applied exactly once, in order");
                for (n, answer) in self.answers.iter().enumerate() {
                    let answer = answer.as_ref().unwrap_or_else(|| panic!("command {n} never answered"));
                    if refused_before_log(&expected[n]) || expected[n] == filler_body() {
                        assert!(matches!(answer, Err(Error::Refused { .. })), "{n}: {answer:?}");
                    } else {
                        let reply = answer.as_ref().expect("answered");
                        assert_eq!(reply.outcome, Outcome::Ok { id: n as u64 });
                        assert_eq!(reply.seq, n as u64 + 1);
                    }
                }
            }
        }

        #[test]
        fn prop_every_command_applies_exactly_once_whatever_the_connection_does() {
            let seed_base = 0x5eed_0000_u64;
            let mut rewinds_by_gap = 0;
            for seed in seed_base..seed_base + 200 {
                let inflight_max = [1, 4, 32, 128][(seed % 4) as usize];
                let mut world = World::new(seed, inflight_max);
                world.run();
                world.check();
                rewinds_by_gap += world.rewinds_by_gap;
                assert!(world.window.rewinds() >= u64::from(world.rewinds_by_gap));
            }
            assert!(rewinds_by_gap > 0, "the runs should exercise sequence_gap");
        }
    }
}

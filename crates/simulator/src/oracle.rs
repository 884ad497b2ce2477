//! What the checks know of the log, independently of the replicas: every committed
//! entry, the first time any replica applies it, compared with what every other
//! replica applies there and replayed into an engine of the simulator's own (the
//! node's core never sees it). The replay is the reference a replica's state is held
//! against at the end (replay equals original), and it knows each command's one
//! outcome. It also holds the fair sequencer to its promise, from the order gateway
//! commands took in the log and the time each reached the leader.

use std::collections::{BTreeMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::time::Duration;

use bourse_cluster::state_machine::Committed;
use bourse_cluster::NodeId;
use bourse_engine::event::Outcome;
use bourse_engine::{Engine, Reject};
use bourse_fairness::Stamp;

/// A gateway command's arrival on a node's link.
#[derive(Clone, Copy, Debug)]
pub struct Arrival {
    pub node: NodeId,
    /// Its stamp as the sequencer took it (a stamp further behind the leader's clock
    /// than the link's bound is moved up to it).
    pub stamp: Stamp,
    /// Virtual time.
    pub at: Duration,
}

/// Gateway commands already in the log, per term, kept for the sequencer check.
const LOGGED_KEPT: usize = 4096;

pub struct Oracle {
    engine: Engine,
    events: Vec<bourse_engine::Event>,
    /// The next index it applies.
    next: u64,
    /// Each (client, seq)'s one application.
    pub outcomes: BTreeMap<(u64, u64), Outcome>,
    /// Where and when each gateway command reached a node, earliest first.
    arrivals: BTreeMap<(u64, u64), Vec<Arrival>>,
    /// Per term, the gateway commands in the log, in log order: stamp and when the
    /// sequencer released it.
    logged: BTreeMap<u64, VecDeque<(Stamp, Duration)>>,
}

impl Oracle {
    pub fn new(engine: Engine) -> Oracle {
        Oracle {
            engine,
            events: Vec::new(),
            next: 1,
            outcomes: BTreeMap::new(),
            arrivals: BTreeMap::new(),
            logged: BTreeMap::new(),
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The last index replayed.
    pub fn applied(&self) -> u64 {
        self.next - 1
    }

    /// A gateway command of `client` reached a node's link reader.
    pub fn arrived(&mut self, client: u64, seq: u64, arrival: Arrival) {
        self.arrivals.entry((client, seq)).or_default().push(arrival);
    }

    /// An entry a replica is about to apply. Returns what it found wrong, and the number
    /// of commands newly applied.
    pub fn observe(
        &mut self,
        node: NodeId,
        entry: &Committed,
        proposed: Option<(Duration, NodeId)>,
        first: &mut BTreeMap<u64, (u64, u64, u64)>,
    ) -> (Vec<String>, u64) {
        let mut found = Vec::new();
        let digest = {
            let mut hasher = std::hash::DefaultHasher::new();
            if let Some(batch) = &entry.batch {
                batch.iter().for_each(|command| command.hash(&mut hasher));
            }
            hasher.finish()
        };
        let seen = *first.entry(entry.index).or_insert((entry.term, node, digest));
        if (seen.0, seen.2) != (entry.term, digest) {
            found.push(format!(
                "node {node} applied entry {} of term {}; node {} applied one of term {} there{}",
                entry.index,
                entry.term,
                seen.1,
                seen.0,
                if seen.0 == entry.term { " with other commands" } else { "" }
            ));
            return (found, 0);
        }
        if entry.index < self.next {
            return (found, 0);
        }
        if entry.index > self.next {
            found.push(format!(
                "node {node} applied entry {} before entry {} was applied anywhere",
                entry.index, self.next
            ));
            return (found, 0);
        }
        self.next += 1;
        let Some(batch) = &entry.batch else { return (found, 0) };
        let mut applied = 0;
        for bytes in batch.iter() {
            let command = match bourse_node::committed_command(&self.engine, bytes) {
                Ok(command) => command,
                Err(error) => {
                    found.push(format!("entry {} holds a command that does not decode: {error}", entry.index));
                    continue;
                }
            };
            self.events.clear();
            let result = self.engine.apply(&command, &mut self.events);
            // A number ahead of the next is refused unrecorded (the client sends it again
            // once the ones before are in): not an application.
            let unrecorded = matches!(result.outcome, Outcome::Rejected(Reject::SequenceGap | Reject::SequenceTooOld));
            if result.duplicate || unrecorded {
                continue;
            }
            applied += 1;
            let key = (command.client.0, command.seq);
            self.outcomes.insert(key, result.outcome);
            let violation = proposed.and_then(|(at, leader)| self.sequenced(key, entry.term, at, leader));
            found.extend(violation);
        }
        (found, applied)
    }

    /// The sequencer's promise, for a gateway command first applied from an entry of
    /// `term` that its leader proposed at `released` (the instant the sequencer released
    /// the command: in virtual time the core proposes, and Raft appends, at once):
    /// nothing released before it in that term had a later stamp and was released
    /// after this one had reached the leader (it would have been waiting then, with an
    /// earlier stamp, and the sequencer releases the earliest first). A command may
    /// reach a leader more than once (a copy dropped while the leader lost its quorum for
    /// a moment, then resent); which copy was released is not known, so the check takes
    /// this one's latest arrival there and the others' earliest stamps: it can only err
    /// towards passing.
    fn sequenced(&mut self, key: (u64, u64), term: u64, released: Duration, leader: NodeId) -> Option<String> {
        let copies: Vec<Arrival> =
            self.arrivals.get(&key)?.iter().filter(|a| a.node == leader && a.at <= released).copied().collect();
        let latest = *copies.iter().max_by_key(|a| a.at)?;
        let earliest_stamp = copies.iter().map(|a| a.stamp).min()?;
        let logged = self.logged.entry(term).or_default();
        let overtaken = logged.iter().find(|(stamp, at)| *stamp > latest.stamp && *at > latest.at);
        let found = overtaken.map(|(stamp, at)| {
            format!(
                "term {term}: the order stamped {} by gateway {}, at the leader since {:?}, was released after one \
                 stamped {} by gateway {}, released at {at:?}",
                latest.stamp.ts, latest.stamp.gateway, latest.at, stamp.ts, stamp.gateway
            )
        });
        logged.push_back((earliest_stamp, released));
        if logged.len() > LOGGED_KEPT {
            logged.pop_front();
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use bourse_cluster::state_machine::Committed;
    use bourse_cluster::Batch;
    use bourse_engine::command::{Command, CommandBody};
    use bourse_engine::{codec, ClientId, Engine, EngineConfig};
    use bourse_fairness::Stamp;

    use super::{Arrival, Oracle};

    const MS: Duration = Duration::from_millis(1);

    /// An entry of `term` at `index` with one command of `client`.
    fn entry(index: u64, term: u64, client: u64) -> Committed {
        let command = Command {
            client: ClientId(client),
            seq: 1,
            ts: 1_000 + index,
            body: CommandBody::CreateAsset { name: format!("A{index}"), decimals: 0 },
        };
        let mut batch = Batch::default();
        batch.push(&codec::encode(&command));
        Committed { index, term, batch: Some(batch) }
    }

    fn arrival(ts: u64, gateway: u32, at: Duration) -> Arrival {
        Arrival { node: 1, stamp: Stamp { ts, gateway, gateway_seq: 1 }, at }
    }

    /// Client 1's order (stamp 10, at the leader from 1 ms) and client 2's (stamp 20, at
    /// the leader from 2 ms), released in the order given, the second at `second_at`.
    fn run(first: u64, second: u64, second_at: Duration) -> Vec<String> {
        let mut oracle = Oracle::new(Engine::new(EngineConfig::default()));
        oracle.arrived(1, 1, arrival(10, 1, MS));
        oracle.arrived(2, 1, arrival(20, 2, 2 * MS));
        let mut first_seen = BTreeMap::new();
        let (mut found, _) = oracle.observe(1, &entry(1, 1, first), Some((3 * MS, 1)), &mut first_seen);
        found.extend(oracle.observe(1, &entry(2, 1, second), Some((second_at, 1)), &mut first_seen).0);
        found
    }

    #[test]
    fn an_order_released_after_a_later_stamp_it_was_waiting_behind_is_found() {
        // Client 2's later stamp released at 3 ms, while client 1's earlier one waited
        // there since 1 ms.
        let found = run(2, 1, 4 * MS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("stamped 10 by gateway 1"), "{found:?}");
        // In stamp order: nothing to find.
        assert!(run(1, 2, 4 * MS).is_empty());
    }

    #[test]
    fn an_order_that_arrived_after_the_later_stamp_left_may_follow_it() {
        let mut oracle = Oracle::new(Engine::new(EngineConfig::default()));
        oracle.arrived(2, 1, arrival(20, 2, 2 * MS));
        // Client 1's earlier stamp reached the leader at 5 ms, after client 2's left.
        oracle.arrived(1, 1, arrival(10, 1, 5 * MS));
        let mut first_seen = BTreeMap::new();
        assert!(oracle.observe(1, &entry(1, 1, 2), Some((3 * MS, 1)), &mut first_seen).0.is_empty());
        assert!(oracle.observe(1, &entry(2, 1, 1), Some((6 * MS, 1)), &mut first_seen).0.is_empty());
    }

    #[test]
    fn replicas_that_apply_other_commands_at_an_index_are_found() {
        let mut oracle = Oracle::new(Engine::new(EngineConfig::default()));
        let mut first_seen = BTreeMap::new();
        assert!(oracle.observe(1, &entry(1, 1, 1), None, &mut first_seen).0.is_empty());
        assert!(oracle.observe(2, &entry(1, 1, 1), None, &mut first_seen).0.is_empty());
        let found = oracle.observe(3, &entry(1, 1, 2), None, &mut first_seen).0;
        assert!(found[0].contains("node 3 applied entry 1 of term 1; node 1 applied one of term 1 there with other"));
        assert_eq!(oracle.applied(), 1);
        assert!(oracle.outcomes.contains_key(&(1, 1)));
    }
}

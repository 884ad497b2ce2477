//! The replicated log and exactly-once client sessions, as a finite model.
//!
//! What it abstracts, and how (the node does the same through openraft and the engine):
//!
//! - **Terms and leaders.** A replica becomes leader of term `t + 1` with the votes of a
//!   majority (itself included) whose terms are all below `t + 1` and whose logs are no
//!   more up to date than its own (last entry's term, then length): Raft's election
//!   restriction. A leader of an older term that has not heard of the new one goes on
//!   believing it leads, and clients may still reach it.
//! - **Replication.** A leader brings one follower's log to its own in one step (the
//!   follower takes the leader's term, drops what conflicts, and learns the leader's
//!   commit index). Message loss and delay are the
//!   orders in which these steps interleave, or never happen.
//! - **Commit.** A leader commits up to the longest prefix that a majority of replicas in
//!   its term hold and whose last entry is of its own term.
//! - **Apply.** Each replica applies committed entries in order through the engine's
//!   session check: a client's next sequence number takes effect (it is appended to the
//!   replica's state and its effects are emitted: fills, market data); a number already
//!   applied is a duplicate and changes nothing. A leader answers the client when it
//!   applies the client's command, new or duplicate.
//! - **Snapshots.** A leader may send its applied state (the state, the sessions, its
//!   applied index) to a follower, which installs it only when it is ahead of the
//!   follower's own; the entries it covers are not emitted again (subscribers resync
//!   from the snapshot).
//! - **Clients.** Each sends its commands in order, one outstanding, to any replica that
//!   believes it leads, and resends the same command (to the same or another replica)
//!   until it is answered: the retries a timeout or a failover causes.

use stateright::{Model, Property};

/// A command: `(client, sequence number)`, numbers from 1.
pub type Cmd = (u8, u8);

/// Planted mistakes, each off in the real protocol (see the crate docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// The leader answers a client as soon as it appends the command, before a majority
    /// holds it.
    pub ack_before_commit: bool,
    /// The state machine applies every committed command, even one whose number its
    /// session already applied.
    pub skip_duplicate_check: bool,
    /// A follower installs a snapshot even when it is older than what it has applied.
    pub install_older_snapshot: bool,
}

/// The model's size; every dimension is a bound of the search.
#[derive(Clone, Debug)]
pub struct Replication {
    pub replicas: usize,
    pub clients: usize,
    /// Commands each client sends.
    pub commands: u8,
    /// How often each command may be sent (1 = never retried).
    pub sends: u8,
    /// The highest term an election may reach.
    pub max_term: u8,
    pub bugs: Bugs,
}

impl Default for Replication {
    /// The bound `make test` checks: 3 replicas, one client with two commands, each sent
    /// up to twice, terms up to 2 (about 1.1 million states); `make test` also checks
    /// one command through terms up to 3, and five replicas with one command (with
    /// symmetry reduction, [`representative`]).
    fn default() -> Self {
        Replication { replicas: 3, clients: 1, commands: 2, sends: 2, max_term: 2, bugs: Bugs::default() }
    }
}

/// One log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Entry {
    pub term: u8,
    pub cmd: Cmd,
}

/// One replica.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Replica {
    pub term: u8,
    /// Believes it leads `term`.
    pub leader: bool,
    pub log: Vec<Entry>,
    /// Entries known committed.
    pub commit: usize,
    /// Entries applied (or covered by an installed snapshot).
    pub applied: usize,
    /// The state: each client's highest sequence number applied…
    pub sessions: Vec<u8>,
    /// …and the commands that took effect, in order.
    pub state: Vec<Cmd>,
    /// Effects this replica sent out (reports, market data), in order; never taken back.
    pub emitted: Vec<Cmd>,
}

/// One client.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// The number of the command outstanding (past `commands` once all are answered).
    pub next: u8,
    /// Times it has been sent.
    pub sent: u8,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub replicas: Vec<Replica>,
    pub clients: Vec<Client>,
    /// Commands answered to their clients, in the order answered.
    pub acked: Vec<Cmd>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client sends its outstanding command to a replica that believes it leads.
    Send {
        client: u8,
        to: u8,
    },
    /// A replica is elected for its term + 1 by the voters (bit set, itself included).
    Elect {
        candidate: u8,
        voters: u32,
    },
    Replicate {
        leader: u8,
        follower: u8,
    },
    Commit {
        leader: u8,
    },
    Apply {
        replica: u8,
    },
    InstallSnapshot {
        leader: u8,
        follower: u8,
    },
}

impl Replication {
    fn majority(&self) -> usize {
        self.replicas / 2 + 1
    }

    fn last_term(log: &[Entry]) -> u8 {
        log.last().map_or(0, |e| e.term)
    }

    /// Whether `a`'s log is at least as up to date as `b`'s.
    fn up_to_date(a: &[Entry], b: &[Entry]) -> bool {
        (Self::last_term(a), a.len()) >= (Self::last_term(b), b.len())
    }

    /// A follower takes the leader's term and log (what every message from a leader
    /// does); returns a copy of the leader and the follower.
    fn follow(state: &mut State, leader: u8, follower: u8) -> (Replica, &mut Replica) {
        let source = state.replicas[leader as usize].clone();
        let f = &mut state.replicas[follower as usize];
        f.term = source.term;
        f.leader = false;
        f.log = source.log.clone();
        (source, f)
    }

    fn ack(state: &mut State, cmd: Cmd) {
        let client = &mut state.clients[cmd.0 as usize];
        if client.next == cmd.1 {
            client.next += 1;
            client.sent = 0;
            state.acked.push(cmd);
        }
    }
}

impl Model for Replication {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let replica = Replica {
            term: 0,
            leader: false,
            log: Vec::new(),
            commit: 0,
            applied: 0,
            sessions: vec![0; self.clients],
            state: Vec::new(),
            emitted: Vec::new(),
        };
        vec![State {
            replicas: vec![replica; self.replicas],
            clients: vec![Client { next: 1, sent: 0 }; self.clients],
            acked: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let n = self.replicas;
        for (c, client) in state.clients.iter().enumerate() {
            if client.next <= self.commands && client.sent < self.sends {
                for (r, replica) in state.replicas.iter().enumerate() {
                    if replica.leader {
                        actions.push(Action::Send { client: c as u8, to: r as u8 });
                    }
                }
            }
        }
        for (r, replica) in state.replicas.iter().enumerate() {
            if replica.term < self.max_term {
                let term = replica.term + 1;
                // Every set of voters of majority size that includes the candidate.
                for voters in 0u32..(1 << n) {
                    if voters & (1 << r) == 0 || voters.count_ones() as usize != self.majority() {
                        continue;
                    }
                    let grant = (0..n).filter(|&v| voters & (1 << v) != 0 && v != r).all(|v| {
                        let voter = &state.replicas[v];
                        voter.term < term && Self::up_to_date(&replica.log, &voter.log)
                    });
                    if grant {
                        actions.push(Action::Elect { candidate: r as u8, voters });
                    }
                }
            }
            if replica.leader {
                for (f, follower) in state.replicas.iter().enumerate() {
                    if f == r || follower.term > replica.term {
                        continue;
                    }
                    if follower.term < replica.term
                        || follower.log != replica.log
                        || follower.commit < replica.commit.min(replica.log.len())
                    {
                        actions.push(Action::Replicate { leader: r as u8, follower: f as u8 });
                    }
                    let newer = replica.applied > follower.applied;
                    if newer || (self.bugs.install_older_snapshot && replica.applied < follower.applied) {
                        actions.push(Action::InstallSnapshot { leader: r as u8, follower: f as u8 });
                    }
                }
                actions.push(Action::Commit { leader: r as u8 });
            }
            if replica.applied < replica.commit.min(replica.log.len()) {
                actions.push(Action::Apply { replica: r as u8 });
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        match action {
            Action::Send { client, to } => {
                let c = &mut state.clients[client as usize];
                c.sent += 1;
                let cmd = (client, c.next);
                let leader = &mut state.replicas[to as usize];
                leader.log.push(Entry { term: leader.term, cmd });
                if self.bugs.ack_before_commit {
                    Self::ack(&mut state, cmd);
                }
            }
            Action::Elect { candidate, voters } => {
                let term = state.replicas[candidate as usize].term + 1;
                for (v, voter) in state.replicas.iter_mut().enumerate() {
                    if voters & (1 << v) != 0 {
                        voter.term = term;
                        voter.leader = v == candidate as usize;
                    }
                }
            }
            Action::Replicate { leader, follower } => {
                let (source, f) = Self::follow(&mut state, leader, follower);
                f.commit = f.commit.max(source.commit.min(source.log.len()));
            }
            Action::Commit { leader } => {
                // A follower's acknowledgement is its holding the leader's entries in the
                // leader's term (the reply's delay is the order of steps, as above).
                let l = &state.replicas[leader as usize];
                let holds = |i: usize| {
                    state
                        .replicas
                        .iter()
                        .filter(|r| r.term == l.term && r.log.len() >= i && r.log[..i] == l.log[..i])
                        .count()
                        >= self.majority()
                };
                let best = (l.commit + 1..=l.log.len())
                    .rev()
                    .find(|&i| l.log[i - 1].term == l.term && holds(i))
                    .unwrap_or(l.commit);
                if best == l.commit {
                    return None;
                }
                state.replicas[leader as usize].commit = best;
            }
            Action::Apply { replica } => {
                let r = &mut state.replicas[replica as usize];
                let cmd = r.log[r.applied].cmd;
                r.applied += 1;
                let session = &mut r.sessions[cmd.0 as usize];
                if cmd.1 == *session + 1 || (self.bugs.skip_duplicate_check && cmd.1 <= *session) {
                    *session = cmd.1;
                    r.state.push(cmd);
                    r.emitted.push(cmd);
                }
                // (A number past the next is refused with a gap; clients here never skip.)
                if r.leader && !self.bugs.ack_before_commit && cmd.1 <= r.sessions[cmd.0 as usize] {
                    Self::ack(&mut state, cmd);
                }
            }
            Action::InstallSnapshot { leader, follower } => {
                let (source, f) = Self::follow(&mut state, leader, follower);
                f.applied = source.applied;
                f.commit = f.commit.max(source.applied).min(f.log.len());
                f.sessions = source.sessions.clone();
                f.state = source.state.clone();
            }
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("an acknowledged command is never lost", |_, state: &State| {
                // Every command answered is in the log of each leader of the highest term
                // (Raft's leader completeness, for what clients were told).
                let top = state.replicas.iter().map(|r| r.term).max().unwrap_or(0);
                state.replicas.iter().filter(|r| r.leader && r.term == top).all(|leader| {
                    state.acked.iter().all(|cmd| leader.log.iter().any(|e| e.cmd == *cmd) || leader.state.contains(cmd))
                })
            }),
            Property::always("no command takes effect twice", |_, state: &State| {
                state.replicas.iter().all(|r| no_repeats(&r.emitted) && no_repeats(&r.state))
            }),
            Property::always("replicas apply the same commands in the same order", |_, state: &State| {
                state.replicas.iter().all(|a| {
                    state.replicas.iter().all(|b| {
                        let n = a.state.len().min(b.state.len());
                        a.state[..n] == b.state[..n]
                    })
                })
            }),
            Property::sometimes("every command is acknowledged", |model: &Replication, state: &State| {
                state.acked.len() == model.clients * model.commands as usize
            }),
        ]
    }
}

/// The state with its replicas in a canonical order: nothing in a state names a replica
/// (actions do, states do not), and every rule and property treats replicas alike, so
/// states that differ only by a permutation of replicas behave alike (symmetry
/// reduction, for `CheckerBuilder::symmetry_fn`).
pub fn representative(state: &State) -> State {
    let mut state = state.clone();
    state.replicas.sort();
    state
}

fn no_repeats(cmds: &[Cmd]) -> bool {
    cmds.iter().enumerate().all(|(i, c)| !cmds[..i].contains(c))
}

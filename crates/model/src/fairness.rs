//! The fair sequencer's window and hold-and-release, as a finite model over discrete time.
//!
//! Gateways stamp orders with the time (`now`; clocks agree here: a gateway's skew moves
//! its stamps and its release instants alike) and send them, with heartbeats carrying
//! their watermark, to the leader's sequencer over a FIFO link whose delay is anything
//! from 0 to `max_delay`. The sequencer is the production [`Resequencer`], rebuilt from the
//! model's state for each step: each order it releases becomes a log entry at
//! `t_m = now`, whose market data reaches each gateway after a delay of 0 to `max_delay`
//! and waits in the production [`HoldQueue`] until `t_m + hold`. Time advances one unit at
//! a time, only once nothing is due (sequencer and gateways act as soon as they can) and
//! no message in flight would exceed its delay bound.

use bourse_fairness::{HoldQueue, Resequencer, Stamp};
use stateright::{Model, Property};

/// Planted mistakes (see the crate docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Bugs {
    /// Gateways release market data as soon as it arrives, not at `t_m + hold`.
    pub release_early: bool,
}

/// The model's size and delays, in time units.
#[derive(Clone, Debug)]
pub struct Fairness {
    pub gateways: usize,
    /// Orders each gateway stamps.
    pub orders: u8,
    /// The sequencer's window d_s (0: off, arrival order).
    pub window: u64,
    /// The window the ordering property is checked against (the promise made to traders);
    /// `window` unless a test turns the sequencer off to show the property can fail.
    pub promised_window: u64,
    /// The gateways' hold d_h.
    pub hold: u64,
    /// The longest delay of a link, either way; above `window` and `hold`, so late
    /// arrivals are in the model.
    pub max_delay: u64,
    /// The last instant.
    pub horizon: u64,
    pub bugs: Bugs,
}

impl Default for Fairness {
    /// The bound `make test` checks: 2 gateways, one order each, window and hold 2, delays
    /// up to 3, time 0..=4 (about 107,000 states; two orders a gateway is past 10^7).
    fn default() -> Self {
        Fairness {
            gateways: 2,
            orders: 1,
            window: 2,
            promised_window: 2,
            hold: 2,
            max_delay: 3,
            horizon: 4,
            bugs: Bugs::default(),
        }
    }
}

/// A message from a gateway to the sequencer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Msg {
    Order { ts: u64, seq: u8 },
    Heartbeat { ts: u64 },
}

impl Msg {
    fn ts(self) -> u64 {
        match self {
            Msg::Order { ts, .. } | Msg::Heartbeat { ts } => ts,
        }
    }
}

/// An order as the sequencer saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Order {
    pub ts: u64,
    pub gateway: u8,
    pub seq: u8,
    pub arrived: u64,
}

impl Order {
    fn stamp(self) -> Stamp {
        Stamp { ts: self.ts, gateway: u32::from(self.gateway), gateway_seq: u64::from(self.seq) }
    }
}

/// A market data item (the log entry of the `item`-th order sequenced) at a gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Item {
    pub item: u8,
    pub t_m: u64,
    pub arrived: u64,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Gateway {
    pub stamped: u8,
    /// Sent, not yet at the sequencer (FIFO).
    pub to_sequencer: Vec<Msg>,
    /// The last instant it sent anything at.
    pub last_sent: Option<u64>,
    /// Market data in flight to it (FIFO), as `(item, t_m)`.
    pub feed: Vec<(u8, u64)>,
    /// In its hold queue.
    pub held: Vec<Item>,
    /// Released to its subscribers: `(item, t_m, arrived, released at)`.
    pub delivered: Vec<(Item, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    pub now: u64,
    pub gateways: Vec<Gateway>,
    /// The sequencer's buffer in arrival order, and each gateway's watermark.
    pub queued: Vec<Order>,
    pub watermarks: Vec<u64>,
    /// Orders in log order, with the instant each was sequenced (its t_m).
    pub sequenced: Vec<(Order, u64)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    Stamp(u8),
    Heartbeat(u8),
    /// The next message of a gateway's link reaches the sequencer.
    Arrive(u8),
    /// The sequencer releases its next order into the log.
    Sequence,
    /// The next market data item reaches a gateway.
    Feed(u8),
    /// A gateway releases its next due item.
    Release(u8),
    Tick,
}

impl Fairness {
    fn resequencer(&self, state: &State) -> Resequencer<usize> {
        let mut r = Resequencer::new(self.window, usize::MAX);
        for (g, &wm) in state.watermarks.iter().enumerate() {
            r.connect(g as u32);
            r.heartbeat(g as u32, wm);
        }
        for (i, o) in state.queued.iter().enumerate() {
            assert!(r.push(o.arrived, o.stamp(), i).is_ok(), "unbounded buffer");
        }
        r
    }

    fn release_ts(&self, t_m: u64) -> u64 {
        if self.bugs.release_early {
            t_m
        } else {
            t_m + self.hold
        }
    }

    fn hold_queue(&self, gateway: &Gateway) -> HoldQueue<usize> {
        let mut q = HoldQueue::new();
        for (i, item) in gateway.held.iter().enumerate() {
            q.push(item.arrived, self.release_ts(item.t_m), i);
        }
        q
    }
}

impl Model for Fairness {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let gateway = Gateway {
            stamped: 0,
            to_sequencer: Vec::new(),
            last_sent: None,
            feed: Vec::new(),
            held: Vec::new(),
            delivered: Vec::new(),
        };
        vec![State {
            now: 0,
            gateways: vec![gateway; self.gateways],
            queued: Vec::new(),
            watermarks: vec![0; self.gateways],
            sequenced: Vec::new(),
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        // Whether the sequencer or a gateway has something to do now (then time waits).
        let mut due = false;
        for (g, gateway) in state.gateways.iter().enumerate() {
            let g = g as u8;
            if gateway.stamped < self.orders {
                actions.push(Action::Stamp(g));
            }
            // At most one message an instant carries a new watermark; heartbeats only
            // while the gateway has orders left to stamp (after that it has no promise to
            // keep, as a gateway that disconnects).
            if gateway.last_sent.is_none_or(|t| t < state.now) && gateway.stamped < self.orders {
                actions.push(Action::Heartbeat(g));
            }
            if !gateway.to_sequencer.is_empty() {
                actions.push(Action::Arrive(g));
            }
            if !gateway.feed.is_empty() {
                actions.push(Action::Feed(g));
            }
            if self.hold_queue(gateway).pop_due(state.now).is_some() {
                due = true;
                actions.push(Action::Release(g));
            }
        }
        if self.resequencer(state).pop_ready(state.now).is_some() {
            due = true;
            actions.push(Action::Sequence);
        }
        let next = state.now + 1;
        let within = |ts: u64| ts + self.max_delay >= next;
        if state.now < self.horizon
            && !due
            && state
                .gateways
                .iter()
                .all(|g| g.to_sequencer.iter().all(|m| within(m.ts())) && g.feed.iter().all(|&(_, t_m)| within(t_m)))
        {
            actions.push(Action::Tick);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let now = state.now;
        match action {
            Action::Stamp(g) => {
                let gateway = &mut state.gateways[g as usize];
                gateway.stamped += 1;
                gateway.to_sequencer.push(Msg::Order { ts: now, seq: gateway.stamped });
                gateway.last_sent = Some(now);
            }
            Action::Heartbeat(g) => {
                let gateway = &mut state.gateways[g as usize];
                gateway.to_sequencer.push(Msg::Heartbeat { ts: now });
                gateway.last_sent = Some(now);
            }
            Action::Arrive(g) => {
                let msg = state.gateways[g as usize].to_sequencer.remove(0);
                let wm = &mut state.watermarks[g as usize];
                *wm = (*wm).max(msg.ts());
                if let Msg::Order { ts, seq } = msg {
                    state.queued.push(Order { ts, gateway: g, seq, arrived: now });
                }
            }
            Action::Sequence => {
                let released = self.resequencer(&state).pop_ready(now).expect("offered only when ready");
                let order = state.queued.remove(released.item);
                let item = state.sequenced.len() as u8;
                state.sequenced.push((order, now));
                for gateway in &mut state.gateways {
                    gateway.feed.push((item, now));
                }
            }
            Action::Feed(g) => {
                let gateway = &mut state.gateways[g as usize];
                let (item, t_m) = gateway.feed.remove(0);
                gateway.held.push(Item { item, t_m, arrived: now });
            }
            Action::Release(g) => {
                let gateway = &mut state.gateways[g as usize];
                let due = self.hold_queue(gateway).pop_due(now).expect("offered only when due");
                let item = gateway.held.remove(due.item);
                gateway.delivered.push((item, now));
            }
            Action::Tick => state.now += 1,
        }
        Some(state)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "orders that reach the sequencer within the window are sequenced in stamp order",
                |model: &Fairness, state: &State| {
                    state.sequenced.iter().enumerate().all(|(i, &(first, _))| {
                        state.sequenced[i + 1..].iter().all(|&(later, _)| {
                            // A later entry stamped before an earlier one must have arrived late.
                            later.stamp() >= first.stamp() || later.arrived >= later.ts + model.promised_window
                        })
                    })
                },
            ),
            Property::always("no market data leaves a gateway before t_m + d_h", |model: &Fairness, state: &State| {
                state.gateways.iter().all(|g| g.delivered.iter().all(|(item, at)| *at >= item.t_m + model.hold))
            }),
            Property::always(
                "market data that arrives in time leaves every gateway at t_m + d_h",
                |model: &Fairness, state: &State| {
                    state.gateways.iter().all(|g| {
                        g.delivered
                            .iter()
                            .all(|(item, at)| item.arrived > item.t_m + model.hold || *at == item.t_m + model.hold)
                    })
                },
            ),
            Property::sometimes("an order that arrived late is sequenced", |model: &Fairness, state: &State| {
                state.sequenced.iter().any(|(o, _)| o.arrived >= o.ts + model.window)
            }),
            Property::sometimes(
                "every order reaches every gateway's subscribers",
                |model: &Fairness, state: &State| {
                    let total = model.gateways * model.orders as usize;
                    state.gateways.iter().all(|g| g.delivered.len() == total)
                },
            ),
        ]
    }
}

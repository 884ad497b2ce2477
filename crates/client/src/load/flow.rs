//! The order flow of one load connection: a seeded random mix in the spirit of
//! exchange-core's 2020 benchmark (71% move, 12.6% GTC, 7.2% reduce, 7.2% cancel, 1.8%
//! IOC; its 0.06% FOK-by-budget goes to moves), over the connection's own accounts.
//!
//! Unlike the engine benchmark's generator (`bourse-sim`), this flow does not run an
//! engine of its own: it learns what the exchange did from the answers and reports it
//! gets back. A GTC order becomes known when its answer brings its id (`ok_id`); fills
//! and cancel reports shrink and forget orders; a move, reduce or cancel answered
//! `order_unknown` forgets the order too (it was filled or cancelled meanwhile). A
//! cancel or a reduce to zero forgets the order when it is sent, so no order is
//! cancelled twice.
//!
//! Prices: GTC buys rest in `[mid - band, mid - 1]` ticks and sells in
//! `[mid + 1, mid + band]`, so they never cross each other; trades come from IOCs, which
//! cross the whole band, and from the 3% of moves that reprice across the mid. The book
//! is kept near `open_orders_target` orders of this connection: above it, GTC turns into
//! cancel; below half of it, cancel turns into GTC.
//!
//! Every choice comes from one seeded `ChaCha8Rng`; the commands generated depend also on
//! the answers received, so two runs match only as far as the node's timing does.

use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, OrderId, Outcome, Px, Qty, Reject, Side, SymbolId};
use bourse_protocol::proto;
use rand::Rng;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rustc_hash::FxHashMap;

use crate::reply::Reply;

/// The book a flow trades in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowMarket {
    pub symbol: SymbolId,
    pub tick: i64,
    pub lot: i64,
    /// The price the book centres on; a multiple of `tick`.
    pub px_mid: i64,
    /// Ticks each side of the mid where GTC orders rest.
    pub band_ticks: i64,
}

/// Shares of the mix in parts per million: gtc, ioc, cancel, move, reduce.
const SHARES_PPM: [u32; 5] = [126_000, 18_000, 72_000, 712_000, 72_000];
/// Moves that reprice across the mid (and so may trade), per million moves.
const MOVE_CROSSING_PPM: u32 = 30_000;
/// Lots per GTC order, at most; IOCs take up to half of that.
const LOTS_MAX: i64 = 10;

/// What a command was, kept until its answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intent {
    /// A GTC order: its id becomes known from the answer.
    PlaceGtc { account: AccountId, side: Side, px: i64, qty: i64 },
    /// An IOC order: it never rests.
    PlaceIoc,
    /// A move, reduce or cancel of `order`.
    Modify { order: OrderId },
}

/// How many commands of each kind a flow generated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MixCounts {
    pub gtc: u64,
    pub ioc: u64,
    pub cancel: u64,
    pub moves: u64,
    pub reduce: u64,
}

impl MixCounts {
    pub fn total(&self) -> u64 {
        self.gtc + self.ioc + self.cancel + self.moves + self.reduce
    }
}

#[derive(Clone, Copy, Debug)]
struct OpenOrder {
    account: AccountId,
    side: Side,
    px: i64,
    qty_open: i64,
}

/// One connection's order flow and its view of its open orders.
pub struct OrderFlow {
    rng: ChaCha8Rng,
    market: FlowMarket,
    accounts: Vec<AccountId>,
    open_orders_target: usize,
    /// Open orders, for picking one at random; `index` maps an id to its position.
    open: Vec<OrderId>,
    index: FxHashMap<OrderId, (usize, OpenOrder)>,
    pending: FxHashMap<u64, Intent>,
    counts: MixCounts,
}

impl OrderFlow {
    /// # Panics
    /// If `accounts` is empty or the market's tick, lot or band is not positive.
    pub fn new(seed: u64, market: FlowMarket, accounts: Vec<AccountId>, open_orders_target: usize) -> Self {
        assert!(!accounts.is_empty(), "a flow needs an account");
        assert!(market.tick > 0 && market.lot > 0 && market.band_ticks > 0, "bad market {market:?}");
        OrderFlow {
            rng: ChaCha8Rng::seed_from_u64(seed),
            market,
            accounts,
            open_orders_target: open_orders_target.max(2),
            open: Vec::new(),
            index: FxHashMap::default(),
            pending: FxHashMap::default(),
            counts: MixCounts::default(),
        }
    }

    /// Orders this flow believes are open.
    pub fn open_orders(&self) -> usize {
        self.open.len()
    }

    /// Commands sent and not answered yet.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    pub fn counts(&self) -> MixCounts {
        self.counts
    }

    /// The next command and what to remember about it until its answer.
    pub fn next_command(&mut self) -> (CommandBody, Intent) {
        let mut kind = self.pick_kind();
        if self.open.is_empty() && kind >= 2 {
            kind = 0;
        }
        if kind == 0 && self.open.len() > self.open_orders_target {
            kind = 2;
        } else if kind == 2 && self.open.len() < self.open_orders_target / 2 {
            kind = 0;
        }
        match kind {
            0 => self.gtc(),
            1 => self.ioc(),
            2 => self.cancel(),
            3 => self.move_order(),
            _ => self.reduce(),
        }
    }

    /// Remembers the intent of the command sent as `seq`.
    pub fn on_sent(&mut self, seq: u64, intent: Intent) {
        self.pending.insert(seq, intent);
    }

    /// Learns from an answer: a new resting order's id, or an order that is gone.
    pub fn on_reply(&mut self, reply: &Reply) {
        let Some(intent) = self.pending.remove(&reply.seq) else { return };
        match (intent, reply.outcome) {
            (Intent::PlaceGtc { account, side, px, qty }, Outcome::Ok { id }) => {
                self.insert(OrderId(id), OpenOrder { account, side, px, qty_open: qty });
            }
            (Intent::Modify { order }, Outcome::Rejected(Reject::OrderUnknown | Reject::OrderNotOwned)) => {
                self.remove(order);
            }
            _ => {}
        }
    }

    /// A command that will get no answer.
    pub fn on_failed(&mut self, seq: u64) {
        self.pending.remove(&seq);
    }

    pub fn on_fill(&mut self, fill: &proto::FillReport) {
        let order = OrderId(fill.order);
        if let Some((_, open)) = self.index.get_mut(&order) {
            open.qty_open -= fill.qty;
            if open.qty_open <= 0 {
                self.remove(order);
            }
        }
    }

    pub fn on_cancel(&mut self, cancel: &proto::CancelReport) {
        self.remove(OrderId(cancel.order));
    }

    fn pick_kind(&mut self) -> usize {
        let mut draw = self.rng.gen_range(0..SHARES_PPM.iter().sum::<u32>());
        for (kind, share) in SHARES_PPM.iter().enumerate() {
            if draw < *share {
                return kind;
            }
            draw -= share;
        }
        unreachable!("draw is below the sum of the shares")
    }

    fn account(&mut self) -> AccountId {
        self.accounts[self.rng.gen_range(0..self.accounts.len())]
    }

    fn side(&mut self) -> Side {
        if self.rng.gen_bool(0.5) {
            Side::Buy
        } else {
            Side::Sell
        }
    }

    /// A price `ticks` away from the mid on the resting side of `side` (below for a buy).
    fn px_resting(&self, side: Side, ticks: i64) -> i64 {
        match side {
            Side::Buy => self.market.px_mid - ticks * self.market.tick,
            Side::Sell => self.market.px_mid + ticks * self.market.tick,
        }
    }

    fn gtc(&mut self) -> (CommandBody, Intent) {
        self.counts.gtc += 1;
        let (account, side) = (self.account(), self.side());
        let ticks = self.rng.gen_range(1..=self.market.band_ticks);
        let px = self.px_resting(side, ticks);
        let qty = self.rng.gen_range(1..=LOTS_MAX) * self.market.lot;
        let request = OrderRequest::limit(account, self.market.symbol, side, Px(px), Qty(qty), Tif::Gtc);
        (CommandBody::Place(request), Intent::PlaceGtc { account, side, px, qty })
    }

    fn ioc(&mut self) -> (CommandBody, Intent) {
        self.counts.ioc += 1;
        let (account, side) = (self.account(), self.side());
        // Across the whole band: a buy as high as the highest resting sell.
        let px = self.px_resting(side, -self.market.band_ticks);
        let qty = self.rng.gen_range(1..=LOTS_MAX / 2) * self.market.lot;
        let request = OrderRequest::limit(account, self.market.symbol, side, Px(px), Qty(qty), Tif::Ioc);
        (CommandBody::Place(request), Intent::PlaceIoc)
    }

    fn pick_open(&mut self) -> (OrderId, OpenOrder) {
        let order = self.open[self.rng.gen_range(0..self.open.len())];
        (order, self.index[&order].1)
    }

    fn cancel(&mut self) -> (CommandBody, Intent) {
        self.counts.cancel += 1;
        let (order, open) = self.pick_open();
        self.remove(order);
        let body = CommandBody::Cancel { account: open.account, symbol: self.market.symbol, order };
        (body, Intent::Modify { order })
    }

    fn move_order(&mut self) -> (CommandBody, Intent) {
        self.counts.moves += 1;
        let (order, open) = self.pick_open();
        let ticks = if self.rng.gen_range(0..1_000_000) < MOVE_CROSSING_PPM {
            -self.rng.gen_range(1..=3)
        } else {
            self.rng.gen_range(1..=self.market.band_ticks)
        };
        let px = self.px_resting(open.side, ticks);
        if let Some((_, entry)) = self.index.get_mut(&order) {
            entry.px = px;
        }
        let body = CommandBody::Move { account: open.account, symbol: self.market.symbol, order, px: Px(px) };
        (body, Intent::Modify { order })
    }

    fn reduce(&mut self) -> (CommandBody, Intent) {
        self.counts.reduce += 1;
        let (order, open) = self.pick_open();
        let lots_open = (open.qty_open / self.market.lot).max(1);
        let qty_by = self.rng.gen_range(1..=lots_open) * self.market.lot;
        if qty_by >= open.qty_open {
            self.remove(order);
        } else if let Some((_, entry)) = self.index.get_mut(&order) {
            entry.qty_open -= qty_by;
        }
        let body =
            CommandBody::Reduce { account: open.account, symbol: self.market.symbol, order, qty_by: Qty(qty_by) };
        (body, Intent::Modify { order })
    }

    fn insert(&mut self, order: OrderId, open: OpenOrder) {
        if self.index.contains_key(&order) {
            return;
        }
        self.index.insert(order, (self.open.len(), open));
        self.open.push(order);
    }

    fn remove(&mut self, order: OrderId) {
        let Some((position, _)) = self.index.remove(&order) else { return };
        self.open.swap_remove(position);
        if let Some(moved) = self.open.get(position) {
            self.index.get_mut(moved).expect("every open order is indexed").0 = position;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn market() -> FlowMarket {
        FlowMarket { symbol: SymbolId(3), tick: 5, lot: 10, px_mid: 100_000, band_ticks: 50 }
    }

    fn flow(seed: u64) -> OrderFlow {
        OrderFlow::new(seed, market(), vec![AccountId(7), AccountId(8)], 40)
    }

    /// Answers every command at once as an exchange that accepts everything would,
    /// numbering orders from 1.
    fn run(flow: &mut OrderFlow, commands: u64) -> Vec<CommandBody> {
        let mut bodies = Vec::new();
        let mut order_next = 1;
        for seq in 1..=commands {
            let (body, intent) = flow.next_command();
            flow.on_sent(seq, intent);
            let id = match body {
                CommandBody::Place(_) => {
                    order_next += 1;
                    order_next - 1
                }
                _ => 0,
            };
            flow.on_reply(&Reply {
                seq,
                outcome: Outcome::Ok { id },
                log_index: seq,
                duplicate: false,
                gateway_ts: 0,
                day_trading: None,
            });
            bodies.push(body);
        }
        bodies
    }

    #[test]
    fn the_same_seed_gives_the_same_flow() {
        assert_eq!(run(&mut flow(1), 2_000), run(&mut flow(1), 2_000));
        assert_ne!(run(&mut flow(1), 2_000), run(&mut flow(2), 2_000));
    }

    #[test]
    fn the_mix_is_mostly_moves_and_the_book_stays_near_its_target() {
        let mut flow = flow(5);
        let bodies = run(&mut flow, 20_000);
        let counts = flow.counts();
        assert_eq!(counts.total(), 20_000);
        let pct = |n: u64| n * 100 / counts.total();
        assert!((60..=75).contains(&pct(counts.moves)), "{counts:?}");
        assert!((8..=20).contains(&pct(counts.gtc)), "{counts:?}");
        assert!(counts.ioc > 0 && counts.reduce > 0 && counts.cancel > 0, "{counts:?}");
        assert!(flow.open_orders() <= 41 + 1, "open {}", flow.open_orders());
        assert!(flow.open_orders() >= 10, "open {}", flow.open_orders());
        assert_eq!(flow.pending(), 0);
        // Every price is on the tick, every quantity a positive multiple of the lot.
        for body in &bodies {
            match body {
                CommandBody::Place(request) => {
                    let bourse_engine::command::OrderKind::Limit { px } = request.kind else { panic!("limit only") };
                    assert_eq!(px.0 % 5, 0);
                    assert!(request.qty.0 > 0 && request.qty.0 % 10 == 0);
                    assert!([AccountId(7), AccountId(8)].contains(&request.account));
                }
                CommandBody::Move { px, .. } => assert_eq!(px.0 % 5, 0),
                CommandBody::Reduce { qty_by, .. } => assert!(qty_by.0 > 0 && qty_by.0 % 10 == 0),
                CommandBody::Cancel { .. } => {}
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    #[test]
    fn gtc_orders_rest_on_their_side_of_the_mid() {
        let mut flow = flow(9);
        for _ in 0..1_000 {
            if let (CommandBody::Place(request), Intent::PlaceGtc { side, px, .. }) = flow.next_command() {
                assert_eq!(request.side, side);
                match side {
                    Side::Buy => assert!((100_000 - 250..100_000).contains(&px)),
                    Side::Sell => assert!((100_001..=100_000 + 250).contains(&px)),
                }
            }
        }
    }

    #[test]
    fn orders_are_learned_from_answers_and_forgotten_from_reports() {
        let mut flow = flow(3);
        let (body, intent) = flow.gtc();
        let CommandBody::Place(request) = body else { panic!("a place") };
        flow.on_sent(1, intent);
        flow.on_reply(&Reply {
            day_trading: None,
            seq: 1,
            outcome: Outcome::Ok { id: 42 },
            log_index: 1,
            duplicate: false,
            gateway_ts: 0,
        });
        assert_eq!(flow.open_orders(), 1);
        let fill = |qty| proto::FillReport { order: 42, qty, ..Default::default() };
        flow.on_fill(&fill(request.qty.0 - request.qty.0.min(10)));
        assert_eq!(flow.open_orders(), usize::from(request.qty.0 > 10));
        flow.on_fill(&fill(10));
        assert_eq!(flow.open_orders(), 0);

        let (_, intent) = flow.gtc();
        flow.on_sent(2, intent);
        flow.on_reply(&Reply {
            day_trading: None,
            seq: 2,
            outcome: Outcome::Ok { id: 43 },
            log_index: 2,
            duplicate: false,
            gateway_ts: 0,
        });
        flow.on_cancel(&proto::CancelReport { order: 43, ..Default::default() });
        assert_eq!(flow.open_orders(), 0);

        let (_, intent) = flow.gtc();
        flow.on_sent(3, intent);
        flow.on_reply(&Reply {
            day_trading: None,
            seq: 3,
            outcome: Outcome::Ok { id: 44 },
            log_index: 3,
            duplicate: false,
            gateway_ts: 0,
        });
        let (_, intent) = flow.move_order();
        assert_eq!(intent, Intent::Modify { order: OrderId(44) });
        flow.on_sent(4, intent);
        let unknown = Outcome::Rejected(Reject::OrderUnknown);
        flow.on_reply(&Reply {
            seq: 4,
            outcome: unknown,
            log_index: 4,
            duplicate: false,
            gateway_ts: 0,
            day_trading: None,
        });
        assert_eq!(flow.open_orders(), 0, "an order the exchange does not know is forgotten");
    }

    #[test]
    fn a_rejected_place_is_not_remembered() {
        let mut flow = flow(4);
        let (_, intent) = flow.gtc();
        flow.on_sent(1, intent);
        let rejected = Outcome::Rejected(Reject::BalanceInsufficient);
        flow.on_reply(&Reply {
            seq: 1,
            outcome: rejected,
            log_index: 1,
            duplicate: false,
            gateway_ts: 0,
            day_trading: None,
        });
        assert_eq!((flow.open_orders(), flow.pending()), (0, 0));
    }
}

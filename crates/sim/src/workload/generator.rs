//! The order-flow generator: a seeded stream of valid commands with a target mix.
//!
//! Each step picks a book (uniformly), a side (uniformly) and a kind by the profile's
//! shares, drafts the command from the current state of its own engine, applies it to
//! that engine, and updates its view of the books from the events. So every command
//! names an order that really rests, belongs to the account that sends it, and carries
//! that client's next sequence number; the engine's answers (ids, fills) drive what
//! comes next, exactly as they will when the stream is replayed on a fresh copy of the
//! starting engine.
//!
//! Feedbacks keep the flow near its targets:
//! - book size: a GTC-or-cancel draw becomes a GTC more often when that side of the
//!   book is below `orders_per_side` and a cancel more often when above;
//! - book balance: when the book-size feedback has needed more GTC orders than the
//!   profile's share (trading drains the book faster than GTC minus cancel refills it),
//!   IOC sizes shrink, and they grow in the opposite case (by at most 8 times), so the
//!   GTC and cancel shares come out near their targets where that is possible;
//! - trading share: some GTC orders and moves cross the spread (to the best opposite
//!   price), with base chances derived from the profile, corrected by how far the
//!   running share of trading commands is from its target;
//! - prices: other GTC orders rest a random distance behind the touch, and other moves
//!   shift an order a few ticks, often toward the mid; neither crosses.
//!
//! IOC orders are limit orders a few ticks through the best opposite price; FOK-by-budget
//! orders are market orders whose budget is what the book would cost (buy) or pay
//! (sell) for their quantity at that moment, with a little slack.
//!
//! Known limits: an order may meet a resting order of its own account, in which case
//! self-trade prevention cancels the resting one; a FOK whose path holds its own order
//! can be refused (`fok_cannot_fill`). The report counts refusals by reason.

use bourse_engine::book::FastBook;
use bourse_engine::command::{Command, CommandBody, OrderKind, OrderRequest, Tif};
use bourse_engine::{AccountId, Amount, Engine, Event, Px, Qty, Side, SymbolId};
use rand::Rng;

use super::market::{px_offset, qty_random, Market};
use super::stats::{BookStats, Kind, MixStats};
use super::tracker::Resting;

/// The target mix of a flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Profile {
    pub name: &'static str,
    /// Share of each kind in parts per million, indexed by [`Kind::index`]; they sum
    /// to 1,000,000.
    pub shares_ppm: [u32; 6],
    /// Share of commands that should trade, in parts per million.
    pub traded_ppm: u32,
    /// Of the trading not done by IOC and FOK orders, the percentage done by GTC orders
    /// that cross (the rest by moves that cross). A crossing GTC leaves the number of
    /// resting orders unchanged (it takes one or rests), a crossing move lowers it (two
    /// resting orders meet, at least one is used up); this sets how fast trading drains
    /// the book against the GTC and cancel shares.
    pub traded_by_gtc_pct: u32,
}

const PPM: u32 = 1_000_000;

impl Profile {
    /// The kind whose cumulative share band contains `roll` (in `0..1_000_000`).
    fn kind_at(&self, roll: u32) -> Kind {
        let mut band_end = 0;
        for kind in Kind::ALL {
            band_end += self.shares_ppm[kind.index()];
            if roll < band_end {
                return kind;
            }
        }
        Kind::Move
    }

    pub fn share_pct(&self, kind: Kind) -> f64 {
        f64::from(self.shares_ppm[kind.index()]) / 10_000.0
    }

    pub fn traded_pct(&self) -> f64 {
        f64::from(self.traded_ppm) / 10_000.0
    }

    /// How often a GTC and a move must cross for the trading share to come out right,
    /// given that IOC and FOK orders nearly always trade and nothing else does.
    fn cross_base(&self) -> (f64, f64) {
        let always = self.shares_ppm[Kind::Ioc.index()] + self.shares_ppm[Kind::FokBudget.index()];
        let extra = f64::from(self.traded_ppm.saturating_sub(always));
        let by_gtc = extra * f64::from(self.traded_by_gtc_pct.min(100)) / 100.0;
        let gtc = f64::from(self.shares_ppm[Kind::Gtc.index()].max(1));
        let moves = f64::from(self.shares_ppm[Kind::Move.index()].max(1));
        ((by_gtc / gtc).clamp(0.0, 1.0), ((extra - by_gtc) / moves).clamp(0.0, 1.0))
    }
}

/// How strongly a side's distance from its target size tilts GTC-or-cancel draws: a
/// side 10% short adds 10 points to the chance of a GTC.
const BOOK_GAIN: f64 = 1.0;
/// How strongly a shortfall of trading commands raises the chance that a move crosses,
/// per command short.
const TRADED_GAIN: f64 = 0.02;
/// The IOC size feedback: every this many GTC orders generated beyond the profile's
/// share halve IOC sizes (the book was draining too fast), every as many short double them.
const IOC_SURPLUS_PER_OCTAVE: f64 = 200.0;
/// IOC sizes are scaled by at most 2^this either way.
const IOC_OCTAVES_MAX: f64 = 3.0;
/// Moves that do not cross step at most this many ticks at random.
const MOVE_STEP_TICKS_MAX: i64 = 3;
/// Moves toward the mid step this fraction (1/n) of their distance to it, at least a tick.
const MOVE_PULL_DIVISOR: i64 = 64;
/// IOC orders reach at most this many ticks beyond the best opposite price.
const IOC_DEPTH_TICKS_MAX: i64 = 2;
/// FOK-by-budget orders look this many levels deep for their price.
const FOK_LEVELS_MAX: usize = 64;

/// One command before it is sequenced.
struct Draft {
    kind: Kind,
    account: AccountId,
    body: CommandBody,
}

/// A flow generator with its own engine.
pub struct Generator {
    market: Market,
    engine: Engine<FastBook>,
    profile: Profile,
    events: Vec<Event>,
    mix: MixStats,
    book: BookStats,
    sample_every: u64,
    gtc_cross_base: f64,
    move_cross_base: f64,
}

impl Generator {
    /// A generator continuing from `engine`, whose state `market`'s tracker and clients
    /// must describe (typically: right after [`Market::apply_setup`]). Book size is
    /// sampled every `sample_every` commands.
    pub fn new(market: Market, engine: Engine<FastBook>, profile: Profile, sample_every: u64) -> Self {
        assert_eq!(market.tracker.resting_total(), engine.orders_resting(), "tracker and engine disagree");
        let books = u64::from(market.spec.symbols);
        Generator {
            market,
            engine,
            gtc_cross_base: profile.cross_base().0,
            move_cross_base: profile.cross_base().1,
            profile,
            events: Vec::new(),
            mix: MixStats::default(),
            book: BookStats::new(books),
            sample_every: sample_every.max(1),
        }
    }

    pub fn engine(&self) -> &Engine<FastBook> {
        &self.engine
    }

    pub fn market(&self) -> &Market {
        &self.market
    }

    pub fn mix(&self) -> &MixStats {
        &self.mix
    }

    pub fn book(&self) -> &BookStats {
        &self.book
    }

    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    pub fn into_engine(self) -> Engine<FastBook> {
        self.engine
    }

    /// The next `count` commands.
    pub fn generate(&mut self, count: u64) -> Vec<Command> {
        let mut commands = Vec::with_capacity(count as usize);
        for _ in 0..count {
            commands.push(self.next_command());
        }
        commands
    }

    /// Drafts, sequences and applies one command, and returns it.
    pub fn next_command(&mut self) -> Command {
        let symbol = SymbolId(self.market.rng.gen_range(0..self.market.spec.symbols));
        let draft = self.draft(symbol);
        let command = self.market.clients.user(draft.account, draft.body);
        self.events.clear();
        let resting_before = self.market.tracker.resting_total() as i64;
        let applied = self.engine.apply(&command, &mut self.events);
        self.market.tracker.observe(draft.account, &self.events);
        let resting_delta = self.market.tracker.resting_total() as i64 - resting_before;
        self.mix.record(draft.kind, &applied, &self.events, resting_delta);
        if self.mix.commands.is_multiple_of(self.sample_every) {
            self.sample_book();
        }
        command
    }

    fn sample_book(&mut self) {
        let orders = self.engine.orders_resting() as u64;
        let levels: usize = (0..self.market.spec.symbols).map(|s| self.engine.book_levels(SymbolId(s))).sum();
        self.book.record(orders, levels as u64);
    }

    fn draft(&mut self, symbol: SymbolId) -> Draft {
        let side = if self.market.rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
        let kind = self.profile.kind_at(self.market.rng.gen_range(0..PPM));
        let kind = match kind {
            Kind::Gtc | Kind::Cancel => self.gtc_or_cancel(symbol, side),
            other => other,
        };
        let tracker = &self.market.tracker;
        let book_empty = tracker.book_len(symbol) == 0;
        match kind {
            Kind::Cancel if tracker.len(symbol, side) > 0 => self.draft_cancel(symbol, side),
            Kind::Move if !book_empty => self.draft_move(symbol),
            Kind::Reduce if !book_empty => self.draft_reduce(symbol),
            Kind::Ioc => self.draft_ioc(symbol, side),
            Kind::FokBudget => self.draft_fok(symbol, side).unwrap_or_else(|| self.draft_ioc(symbol, side)),
            _ => self.draft_gtc(symbol, side),
        }
    }

    /// GTC or cancel, tilted toward whatever brings `side` back to its target size.
    fn gtc_or_cancel(&mut self, symbol: SymbolId, side: Side) -> Kind {
        let gtc = f64::from(self.profile.shares_ppm[Kind::Gtc.index()]);
        let cancel = f64::from(self.profile.shares_ppm[Kind::Cancel.index()]);
        let target = f64::from(self.market.spec.orders_per_side.max(1));
        let len = self.market.tracker.len(symbol, side) as f64;
        let p_gtc = (gtc / (gtc + cancel).max(1.0) + BOOK_GAIN * (target - len) / target).clamp(0.0, 1.0);
        if self.market.rng.gen_bool(p_gtc) {
            Kind::Gtc
        } else {
            Kind::Cancel
        }
    }

    /// The most aggressive price an order of `side` can rest at without trading.
    fn px_passive_best(&self, symbol: SymbolId, side: Side) -> i64 {
        let center = self.market.spec.px_center.0;
        match (side, self.engine.best(symbol, side.opposite()), self.engine.best(symbol, side)) {
            (Side::Buy, Some(ask), _) => ask.0 - 1,
            (Side::Sell, Some(bid), _) => bid.0 + 1,
            (_, None, Some(own)) => own.0,
            (Side::Buy, None, None) => center - 1,
            (Side::Sell, None, None) => center + 1,
        }
    }

    fn px_clamp(&self, px: i64) -> Px {
        Px(px.clamp(self.market.spec.px_min.0, self.market.spec.px_max.0))
    }

    fn draft_gtc(&mut self, symbol: SymbolId, side: Side) -> Draft {
        let best_opposite = self.engine.best(symbol, side.opposite());
        let px = match best_opposite {
            Some(best) if self.should_cross(self.gtc_cross_base) => best,
            _ => {
                let offset = px_offset(&mut self.market.rng, self.market.spec.px_spread_ticks);
                let best = self.px_passive_best(symbol, side);
                self.px_clamp(match side {
                    Side::Buy => best - offset,
                    Side::Sell => best + offset,
                })
            }
        };
        let account = self.market.account_for(symbol);
        let qty = qty_random(&mut self.market.rng);
        let request = OrderRequest::limit(account, symbol, side, px, qty, Tif::Gtc);
        Draft { kind: Kind::Gtc, account, body: CommandBody::Place(request) }
    }

    fn draft_ioc(&mut self, symbol: SymbolId, side: Side) -> Draft {
        let depth = self.market.rng.gen_range(0..=IOC_DEPTH_TICKS_MAX);
        let px = match (side, self.engine.best(symbol, side.opposite())) {
            (Side::Buy, Some(ask)) => ask.0 + depth,
            (Side::Sell, Some(bid)) => bid.0 - depth,
            (_, None) => self.market.spec.px_center.0,
        };
        let px = self.px_clamp(px);
        let account = self.market.account_for(symbol);
        let qty_drawn = qty_random(&mut self.market.rng).0 as f64;
        let qty = Qty(((qty_drawn * self.ioc_scale()).round() as i64).max(1));
        let request = OrderRequest::limit(account, symbol, side, px, qty, Tif::Ioc);
        Draft { kind: Kind::Ioc, account, body: CommandBody::Place(request) }
    }

    /// The factor on IOC sizes: below one while more GTC orders than the profile's share
    /// have been needed to keep the book at its size (trading drains it too fast), above
    /// one while fewer have.
    fn ioc_scale(&self) -> f64 {
        let expected = self.mix.commands as f64 * self.profile.share_pct(Kind::Gtc) / 100.0;
        let surplus = self.mix.by_kind[Kind::Gtc.index()] as f64 - expected;
        (-surplus / IOC_SURPLUS_PER_OCTAVE).clamp(-IOC_OCTAVES_MAX, IOC_OCTAVES_MAX).exp2()
    }

    /// A FOK market order priced from the book; `None` when the opposite side is empty.
    fn draft_fok(&mut self, symbol: SymbolId, side: Side) -> Option<Draft> {
        let depth = self.engine.depth(symbol, FOK_LEVELS_MAX)?;
        let levels = if side == Side::Buy { depth.asks } else { depth.bids };
        let want = qty_random(&mut self.market.rng).0;
        let (mut qty, mut value) = (0i64, 0i128);
        for (px, level_qty) in levels {
            let take = (want - qty).min(level_qty.0);
            qty += take;
            value += i128::from(px.0) * i128::from(take);
            if qty == want {
                break;
            }
        }
        if qty == 0 {
            return None;
        }
        let fees = i128::from(self.market.spec.fee_taker.0) * i128::from(qty);
        let slack = i128::from(self.market.rng.gen_range(0..=100)) * value / 10_000;
        let budget = match side {
            Side::Buy => value + fees + slack,
            Side::Sell => value - fees - slack,
        };
        let budget = Amount(i64::try_from(budget).ok().filter(|&b| b > 0)?);
        let account = self.market.account_for(symbol);
        // A margin contract's market orders hold margin at the price bound, not a budget.
        let budget = if self.market.spec.margin.is_some() { None } else { Some(budget) };
        let mut request = OrderRequest::market(account, symbol, side, Qty(qty), budget);
        request.tif = Tif::Fok;
        debug_assert!(matches!(request.kind, OrderKind::Market { .. }));
        Some(Draft { kind: Kind::FokBudget, account, body: CommandBody::Place(request) })
    }

    fn draft_cancel(&mut self, symbol: SymbolId, side: Side) -> Draft {
        let order = self.market.tracker.pick_side(symbol, side, &mut self.market.rng).expect("side has orders");
        let body = CommandBody::Cancel { account: order.account, symbol, order: order.id };
        Draft { kind: Kind::Cancel, account: order.account, body }
    }

    fn draft_reduce(&mut self, symbol: SymbolId) -> Draft {
        let (_, order) = self.market.tracker.pick(symbol, &mut self.market.rng).expect("book has orders");
        let qty_by = Qty(self.market.rng.gen_range(1..=order.qty.0.max(1)));
        let body = CommandBody::Reduce { account: order.account, symbol, order: order.id, qty_by };
        Draft { kind: Kind::Reduce, account: order.account, body }
    }

    fn draft_move(&mut self, symbol: SymbolId) -> Draft {
        let (side, order) = self.market.tracker.pick(symbol, &mut self.market.rng).expect("book has orders");
        let best_opposite = self.engine.best(symbol, side.opposite());
        let px = match best_opposite {
            Some(best) if self.should_cross(self.move_cross_base) => best,
            _ => self.px_drift(symbol, side, &order),
        };
        let body = CommandBody::Move { account: order.account, symbol, order: order.id, px };
        Draft { kind: Kind::Move, account: order.account, body }
    }

    /// Whether a GTC or move should cross: its base chance, raised while the flow has
    /// traded less than its target and lowered while it has traded more.
    fn should_cross(&mut self, base: f64) -> bool {
        let expected = self.mix.commands as f64 * f64::from(self.profile.traded_ppm) / f64::from(PPM);
        let deficit = expected - self.mix.traded as f64;
        let p = (base + TRADED_GAIN * deficit).clamp(0.0, 1.0);
        self.market.rng.gen_bool(p)
    }

    /// A new price a few ticks from the old one, half the time pulled toward the mid,
    /// never crossing.
    fn px_drift(&mut self, symbol: SymbolId, side: Side, order: &Resting) -> Px {
        let rng = &mut self.market.rng;
        let mid = match (self.engine.best(symbol, Side::Buy), self.engine.best(symbol, Side::Sell)) {
            (Some(bid), Some(ask)) => (bid.0 + ask.0) / 2,
            _ => order.px.0,
        };
        let distance = mid - order.px.0;
        let step = if distance != 0 && rng.gen_bool(0.5) {
            distance.signum() * (distance.abs() / MOVE_PULL_DIVISOR).max(1)
        } else {
            let size = rng.gen_range(1..=MOVE_STEP_TICKS_MAX);
            if rng.gen_bool(0.5) {
                size
            } else {
                -size
            }
        };
        let best = self.px_passive_best(symbol, side);
        let px = match side {
            Side::Buy => (order.px.0 + step).min(best),
            Side::Sell => (order.px.0 + step).max(best),
        };
        self.px_clamp(px)
    }
}

#[cfg(test)]
mod tests {
    use bourse_engine::EngineConfig;

    use super::*;
    use crate::workload::ec::EC2020;
    use crate::workload::scale::{scale_market_spec, SCALE_PROFILE};

    /// Every tracked order rests in the engine at the tracked price with the tracked
    /// quantity and owner, and the engine rests no other orders.
    fn assert_tracker_agrees(generator: &Generator) {
        let tracker = &generator.market().tracker;
        let engine = generator.engine();
        assert_eq!(tracker.resting_total(), engine.orders_resting());
        for symbol in (0..generator.market().spec.symbols).map(SymbolId) {
            for side in [Side::Buy, Side::Sell] {
                for pos in 0..tracker.len(symbol, side) {
                    let order = tracker.get(symbol, side, pos);
                    let view = engine.order(order.id).expect("tracked order is known");
                    assert_eq!(view.px_resting, Some(order.px), "order {}", order.id);
                    assert_eq!(view.qty_open, order.qty, "order {}", order.id);
                    assert_eq!((view.record.account, view.record.side), (order.account, side), "order {}", order.id);
                }
            }
        }
    }

    fn generator(spec: crate::workload::market::MarketSpec, profile: Profile, seed: u64) -> Generator {
        let mut market = Market::new(spec, seed);
        let mut engine = Engine::new(EngineConfig::default());
        market.apply_setup(&mut engine);
        Generator::new(market, engine, profile, 100)
    }

    #[test]
    fn the_tracker_follows_the_engine_on_one_book() {
        let mut generator = generator(crate::workload::ec::ec_market_spec(), EC2020, 3);
        for _ in 0..20 {
            generator.generate(500);
            assert_tracker_agrees(&generator);
        }
    }

    #[test]
    fn many_books_stay_near_their_size_with_few_rejections() {
        let mut generator = generator(scale_market_spec(2_000, 200, 5), SCALE_PROFILE, 5);
        assert_eq!(generator.engine().orders_resting(), 2_000);
        generator.generate(40_000);
        assert_tracker_agrees(&generator);
        let mix = generator.mix();
        assert!(mix.rejected * 1_000 < mix.commands, "{:?}", mix.rejects);
        let orders = generator.book().orders_avg();
        assert!((8.0..=12.0).contains(&orders), "{orders:.1} orders a book on average");
        assert!((mix.traded_pct() - SCALE_PROFILE.traded_pct()).abs() < 0.5, "{:.2}% traded", mix.traded_pct());
    }
}

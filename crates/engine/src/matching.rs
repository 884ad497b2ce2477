//! Matching: an incoming order against the opposite side of one book.
//!
//! Price-time (FIFO): the order at the front of the best level trades first.
//! Pro-rata: at each level the incoming quantity is split in proportion to the
//! displayed quantities, rounded down to whole lots; the lots left over go to the
//! level's orders in time priority. In both, self-trade prevention is the incoming
//! order's choice, an iceberg whose slice is used up shows a new slice at the back of
//! its level, and a market buy stops when its budget cannot pay for another lot.
//!
//! Settlement of a fill, for a buyer B and seller S at price p for q (n lots):
//! B pays p·q plus its fee from the quote it reserved and gets back at once what the
//! reservation held beyond that (price improvement, maker fee below taker fee); B
//! receives q of the base. S gives q of reserved base and receives p·q minus its fee.
//! The exchange receives both fees. Fees are per lot; the symbol rules (see
//! `validate_spec`) keep every term non-negative and every sum within the asset's
//! supply, which is at most `i64::MAX`.

use crate::book::{Book, FillEffect, RestingOrder};
use crate::command::{MarkSource, MatchPolicy, OrderRequest, Stp, SymbolSpec};
use crate::engine::{Engine, Fill, OrderStatus};
use crate::event::{CancelReason, Event};
use crate::margin::{Margin, MarginTerms};
use crate::order::hold_buy;
use crate::types::{notional, AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// The incoming order while it matches.
pub(crate) struct Taker {
    pub id: OrderId,
    pub account: AccountId,
    pub side: Side,
    /// Limit price; `None` for a market order.
    pub limit: Option<Px>,
    pub qty: Qty,
    /// A market buy's budget still reserved.
    pub budget: Option<i64>,
    pub stp: Stp,
    pub ts: Timestamp,
    pub traded: bool,
    /// A liquidation order: it holds nothing (see `margin.rs`).
    pub liquidation: bool,
}

impl Taker {
    pub fn new(id: OrderId, request: &OrderRequest, ts: Timestamp) -> Self {
        let (limit, budget) = request.kind.limit_and_budget();
        Taker {
            id,
            account: request.account,
            side: request.side,
            limit,
            qty: request.qty,
            budget: if request.side == Side::Buy { budget.map(|b| b.0) } else { None },
            stp: request.stp,
            ts,
            traded: false,
            liquidation: false,
        }
    }

    fn reaches(&self, maker_px: Px) -> bool {
        self.limit.is_none_or(|limit| self.side.crosses(limit, maker_px))
    }

    /// How much to take from `available` at `px`: bounded by the quantity left and,
    /// for a market buy, by the whole lots its budget can still pay for.
    fn qty_to_take(&self, terms: &Terms, px: Px, available: Qty) -> Qty {
        let qty = self.qty.min(available);
        match self.budget {
            Some(budget) => {
                let lot_cost = notional(px, Qty(terms.lot)) + i128::from(terms.fee_taker);
                let lots = i128::from(budget) / lot_cost;
                let affordable = i64::try_from(lots.saturating_mul(i128::from(terms.lot))).unwrap_or(i64::MAX);
                Qty(qty.0.min(affordable))
            }
            None => qty,
        }
    }

    /// What this order still holds.
    pub fn hold_remaining(&self, spec: &SymbolSpec, margin: Option<MarginTerms>) -> (AssetId, Amount) {
        if let Some(terms) = margin {
            if self.liquidation {
                return (spec.quote, Amount::ZERO);
            }
            let hold = terms.hold(terms.hold_px(self.limit), self.qty).expect("part of a hold that fitted");
            return (spec.quote, Amount(hold));
        }
        match (self.side, self.budget, self.limit) {
            (Side::Sell, _, _) => (spec.base, Amount(self.qty.0)),
            (Side::Buy, Some(budget), _) => (spec.quote, Amount(budget)),
            (Side::Buy, None, Some(px)) => {
                (spec.quote, hold_buy(spec, px, self.qty).expect("part of a hold that fitted"))
            }
            (Side::Buy, None, None) => unreachable!("a market buy always has a budget"),
        }
    }
}

/// The symbol terms matching needs, copied out so the engine can be borrowed mutably.
#[derive(Clone, Copy)]
pub(crate) struct Terms {
    base: AssetId,
    quote: AssetId,
    lot: i64,
    fee_maker: i64,
    fee_taker: i64,
    policy: MatchPolicy,
    margin: Option<MarginTerms>,
    /// A margin symbol whose mark is its last trade.
    mark_last_trade: bool,
}

impl Terms {
    fn of(spec: &SymbolSpec, margin: Option<&Margin>) -> Self {
        Terms {
            margin: margin.map(|m| MarginTerms::of(spec, &m.spec)),
            mark_last_trade: margin.is_some_and(|m| m.spec.mark == MarkSource::LastTrade),
            base: spec.base,
            quote: spec.quote,
            lot: spec.lot.0,
            fee_maker: spec.fee_maker.0,
            fee_taker: spec.fee_taker.0,
            policy: spec.policy,
        }
    }
}

/// Splits `want` (at most the level's visible total, a multiple of `lot`) across a
/// level's orders: each gets its share of whole lots in proportion to its visible
/// quantity, rounded down; the lots left go to the orders in time priority, each up
/// to its visible quantity. `out[i]` is order `i`'s allocation.
pub fn allocate_pro_rata(level: &[RestingOrder], want: Qty, lot: Qty, out: &mut Vec<Qty>) {
    out.clear();
    let total: i64 = level.iter().map(|o| o.qty_visible.0).sum();
    if want.0 >= total {
        out.extend(level.iter().map(|o| o.qty_visible));
        return;
    }
    let (lots_want, lots_total) = (i128::from(want.0 / lot.0), i128::from(total / lot.0));
    for order in level {
        let lots = lots_want * i128::from(order.qty_visible.0 / lot.0) / lots_total;
        out.push(Qty(lots as i64 * lot.0));
    }
    let mut left = want.0 - out.iter().map(|q| q.0).sum::<i64>();
    for (order, share) in level.iter().zip(out.iter_mut()) {
        if left == 0 {
            break;
        }
        let extra = left.min(order.qty_visible.0 - share.0);
        share.0 += extra;
        left -= extra;
    }
    debug_assert_eq!(left, 0, "pro-rata allocation left quantity over");
}

impl<B: Book> Engine<B> {
    /// Matches `taker` against the book. Returns why it stopped early, if it did
    /// (self-trade prevention or an exhausted budget); `None` means it filled or ran
    /// out of reachable liquidity.
    pub(crate) fn match_taker(
        &mut self,
        sym: SymbolId,
        taker: &mut Taker,
        events: &mut Vec<Event>,
    ) -> Option<CancelReason> {
        let symbol = &self.symbols[sym.0 as usize];
        let terms = Terms::of(&symbol.spec, symbol.margin.as_deref());
        match terms.policy {
            MatchPolicy::Fifo => self.match_fifo(sym, &terms, taker, events),
            MatchPolicy::ProRata => self.match_pro_rata(sym, &terms, taker, events),
        }
    }

    fn match_fifo(
        &mut self,
        sym: SymbolId,
        terms: &Terms,
        taker: &mut Taker,
        events: &mut Vec<Event>,
    ) -> Option<CancelReason> {
        let opposite = taker.side.opposite();
        while taker.qty.0 > 0 {
            let &maker = self.symbols[sym.0 as usize].book.front(opposite)?;
            if !taker.reaches(maker.px) {
                return None;
            }
            if maker.account == taker.account {
                match taker.stp {
                    Stp::Allow => {}
                    Stp::CancelResting => {
                        self.cancel_resting(sym, maker.id, CancelReason::SelfTrade, events);
                        continue;
                    }
                    Stp::CancelIncoming => return Some(CancelReason::SelfTrade),
                }
            }
            let qty = taker.qty_to_take(terms, maker.px, maker.qty_visible);
            if qty.0 == 0 {
                return Some(CancelReason::BudgetExhausted);
            }
            self.fill(sym, terms, &maker, taker, qty, events);
        }
        None
    }

    fn match_pro_rata(
        &mut self,
        sym: SymbolId,
        terms: &Terms,
        taker: &mut Taker,
        events: &mut Vec<Event>,
    ) -> Option<CancelReason> {
        let opposite = taker.side.opposite();
        let mut level = std::mem::take(&mut self.scratch);
        let mut shares = Vec::new();
        let stopped = loop {
            if taker.qty.0 == 0 {
                break None;
            }
            let book = &self.symbols[sym.0 as usize].book;
            let Some(px) = book.best(opposite).filter(|&px| taker.reaches(px)) else {
                break None;
            };
            book.level(opposite, px, &mut level);
            if taker.stp != Stp::Allow && level.iter().any(|o| o.account == taker.account) {
                if taker.stp == Stp::CancelIncoming {
                    break Some(CancelReason::SelfTrade);
                }
                for own in level.iter().filter(|o| o.account == taker.account) {
                    self.cancel_resting(sym, own.id, CancelReason::SelfTrade, events);
                }
                continue;
            }
            let want = taker.qty_to_take(terms, px, Qty(i64::MAX));
            if want.0 == 0 {
                break Some(CancelReason::BudgetExhausted);
            }
            allocate_pro_rata(&level, want, Qty(terms.lot), &mut shares);
            for (maker, &share) in level.iter().zip(&shares) {
                if share.0 > 0 {
                    self.fill(sym, terms, maker, taker, share, events);
                }
            }
        };
        self.scratch = level;
        stopped
    }

    /// One fill: settles balances and fees, records it on both orders, updates the
    /// book and the last price, and reports it.
    fn fill(
        &mut self,
        sym: SymbolId,
        terms: &Terms,
        maker: &RestingOrder,
        taker: &mut Taker,
        qty: Qty,
        events: &mut Vec<Event>,
    ) {
        let px = maker.px;
        let lots = qty.0 / terms.lot;
        let fee_maker = terms.fee_maker.checked_mul(lots).expect("fee bounded by notional");
        let fee_taker = terms.fee_taker.checked_mul(lots).expect("fee bounded by notional");
        if let Some(margin) = terms.margin {
            // A margin fill is reported first, then each side's hold release, position,
            // P&L and fee are settled (see `margin.rs`).
            self.report_trade(sym, terms, maker, taker, qty, fee_maker, fee_taker, events);
            // Every margin hold includes the taker fee of its quantity (`MarginTerms::hold`),
            // which is `fee_taker` for this fill's.
            let maker_release = margin.release_initial(maker.px, maker.qty_remaining(), qty) + fee_taker;
            let taker_release = if taker.liquidation {
                0
            } else {
                margin.release_initial(margin.hold_px(taker.limit), taker.qty, qty) + fee_taker
            };
            self.margin_fill(maker.account, sym, maker.side, qty, px, fee_maker, maker_release, true, events);
            self.margin_fill(taker.account, sym, taker.side, qty, px, fee_taker, taker_release, true, events);
            self.emit_balance(maker.account, terms.quote, events);
            if taker.account != maker.account {
                self.emit_balance(taker.account, terms.quote, events);
            }
            // The last trade is the mark of a last-trade symbol, and of an
            // operator-marked one until the operator first sets a mark.
            let margin = self.symbols[sym.0 as usize].margin.as_ref();
            let moves_mark = terms.mark_last_trade || margin.is_some_and(|m| m.mark_set.is_none());
            if moves_mark && self.marks_moved.last() != Some(&sym) {
                self.marks_moved.push(sym);
            }
        } else {
            let value = px.0.checked_mul(qty.0).expect("notional bounded by supply");
            match taker.side {
                Side::Buy => {
                    let paid = value + fee_taker;
                    let released = match taker.budget.as_mut() {
                        Some(budget) => {
                            *budget -= paid;
                            paid
                        }
                        None => value_held(terms, taker.limit.expect("limit buy"), qty),
                    };
                    self.settle_buyer(taker.account, terms, released, paid, qty);
                    self.settle_seller(maker.account, terms, qty, value - fee_maker);
                }
                Side::Sell => {
                    let released = value_held(terms, px, qty);
                    self.settle_buyer(maker.account, terms, released, value + fee_maker, qty);
                    self.settle_seller(taker.account, terms, qty, value - fee_taker);
                }
            }
            self.report_trade(sym, terms, maker, taker, qty, fee_maker, fee_taker, events);
            for account in [maker.account, taker.account] {
                self.emit_balance(account, terms.quote, events);
                self.emit_balance(account, terms.base, events);
            }
        }
        let ts = taker.ts;
        self.record_fill(maker.id, Fill { px, qty, fee: Amount(fee_maker), maker: true, counter_order: taker.id, ts });
        self.record_fill(taker.id, Fill { px, qty, fee: Amount(fee_taker), maker: false, counter_order: maker.id, ts });
        let symbol = &mut self.symbols[sym.0 as usize];
        symbol.last_px = Some(px);
        match symbol.book.fill(maker.id, qty) {
            FillEffect::Partial => {}
            FillEffect::Refreshed { qty_visible } => events.push(Event::Refreshed { order: maker.id, qty_visible }),
            FillEffect::Done(_) => {
                self.accounts[maker.account.0 as usize].open_orders -= 1;
                self.close_record(maker.id, OrderStatus::Filled);
            }
        }
        taker.qty.0 -= qty.0;
        taker.traded = true;
    }

    /// Collects both fees and reports the trade.
    #[allow(clippy::too_many_arguments)]
    fn report_trade(
        &mut self,
        sym: SymbolId,
        terms: &Terms,
        maker: &RestingOrder,
        taker: &Taker,
        qty: Qty,
        fee_maker: i64,
        fee_taker: i64,
        events: &mut Vec<Event>,
    ) {
        self.assets[terms.quote.0 as usize].fees.0 += fee_maker + fee_taker;
        events.push(Event::Trade {
            symbol: sym,
            px: maker.px,
            qty,
            taker_side: taker.side,
            maker_order: maker.id,
            taker_order: taker.id,
            maker_account: maker.account,
            taker_account: taker.account,
            fee_maker: Amount(fee_maker),
            fee_taker: Amount(fee_taker),
            maker_done: maker.qty_remaining() == qty,
        });
    }

    fn settle_buyer(&mut self, account: AccountId, terms: &Terms, released: i64, paid: i64, qty: Qty) {
        assert!(released >= paid, "a buy paid more than it reserved");
        let holder = &mut self.accounts[account.0 as usize];
        let quote = holder.balance_mut(terms.quote);
        quote.reserved.0 -= released;
        quote.available.0 += released - paid;
        assert!(quote.reserved.0 >= 0, "quote reservation went negative");
        holder.balance_mut(terms.base).available.0 += qty.0;
        if !holder.positions.is_empty() {
            // Cash that backs margin positions moved.
            self.margin_dirty.push((account, terms.quote));
        }
    }

    fn settle_seller(&mut self, account: AccountId, terms: &Terms, qty: Qty, proceeds: i64) {
        let holder = &mut self.accounts[account.0 as usize];
        let base = holder.balance_mut(terms.base);
        base.reserved.0 -= qty.0;
        assert!(base.reserved.0 >= 0, "base reservation went negative");
        holder.balance_mut(terms.quote).available.0 += proceeds;
        if !holder.positions.is_empty() {
            self.margin_dirty.push((account, terms.quote));
        }
    }

    fn record_fill(&mut self, id: OrderId, fill: Fill) {
        let record = self.orders.get_mut(&id).expect("a filled order has a record");
        record.qty_filled.0 += fill.qty.0;
        record.fills.push(fill);
    }

    /// Whether a fill-or-kill order can trade its whole quantity now (and within its
    /// budget), following exactly the rules matching will apply.
    pub(crate) fn fok_fillable(&self, request: &OrderRequest) -> bool {
        let symbol = &self.symbols[request.symbol.0 as usize];
        let terms = Terms::of(&symbol.spec, symbol.margin.as_deref());
        let (limit, budget) = request.kind.limit_and_budget();
        let need = request.qty.0;
        let cancel_incoming = request.stp == Stp::CancelIncoming;
        let mut levels: Vec<LevelLiquidity> = Vec::new();
        let mut usable_before = 0i64; // usable quantity of the levels before the last
        symbol.book.visit(request.side.opposite(), |order| {
            if limit.is_some_and(|limit| !request.side.crosses(limit, order.px)) {
                return false;
            }
            if levels.last().map(|l| l.px) != Some(order.px) {
                if let Some(level) = levels.last() {
                    usable_before = usable_before.saturating_add(level.usable(terms.policy));
                    if usable_before >= need {
                        return false;
                    }
                }
                levels.push(LevelLiquidity { px: order.px, remaining: 0, visible_before_own: 0, own_stops: false });
            }
            let level = levels.last_mut().expect("level pushed above");
            if order.account == request.account {
                match request.stp {
                    Stp::Allow => {}
                    Stp::CancelResting => return true,
                    Stp::CancelIncoming => {
                        level.own_stops = true;
                        return false;
                    }
                }
            }
            level.remaining = level.remaining.saturating_add(order.qty_remaining().0);
            if !level.own_stops {
                level.visible_before_own = level.visible_before_own.saturating_add(order.qty_visible.0);
            }
            // Without CancelIncoming nothing later in the level can cut it short, so
            // enough is enough; with it, only quantity shown ahead of any own order is
            // certain (an iceberg's next slice goes to the back, behind it).
            let certain = if cancel_incoming { level.visible_before_own } else { level.remaining };
            (terms.policy == MatchPolicy::ProRata && cancel_incoming) || usable_before.saturating_add(certain) < need
        });
        let (mut left, mut value) = (need, 0i128);
        for level in levels {
            let take = left.min(level.usable(terms.policy));
            value += notional(level.px, Qty(take));
            left -= take;
            if level.own_stops {
                break;
            }
        }
        if left > 0 {
            return false;
        }
        let fees = i128::from(terms.fee_taker) * i128::from(need / terms.lot);
        match (request.side, budget) {
            (Side::Buy, Some(budget)) => value + fees <= i128::from(budget.0),
            (Side::Sell, Some(proceeds_min)) => value - fees >= i128::from(proceeds_min.0),
            (_, None) => true,
        }
    }
}

/// What one price level offers a fill-or-kill order.
struct LevelLiquidity {
    px: Px,
    /// Visible plus hidden quantity of the orders it may trade with.
    remaining: i64,
    /// Visible quantity queued ahead of the first own order.
    visible_before_own: i64,
    /// An own order under CancelIncoming is at this level: matching stops here.
    own_stops: bool,
}

impl LevelLiquidity {
    /// What matching would take from this level at most. When an own order stops the
    /// incoming one, FIFO takes only what is shown ahead of it (an iceberg's refreshed
    /// slice goes behind it) and pro-rata takes nothing (the level never trades).
    fn usable(&self, policy: MatchPolicy) -> i64 {
        match (self.own_stops, policy) {
            (false, _) => self.remaining,
            (true, MatchPolicy::Fifo) => self.visible_before_own,
            (true, MatchPolicy::ProRata) => 0,
        }
    }
}

/// What a limit buy at `px` reserved for `qty`.
fn value_held(terms: &Terms, px: Px, qty: Qty) -> i64 {
    px.0 * qty.0 + terms.fee_taker * (qty.0 / terms.lot)
}

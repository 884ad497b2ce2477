//! Margin trading: margin symbols (futures), positions, mark prices, liquidation.
//!
//! A margin symbol's base asset is the contract: no balance of it moves. Its quote
//! asset is the settlement currency, and an account's cash in it (available plus
//! reserved) backs all its positions in symbols settled in that asset (cross margin).
//!
//! **Orders** hold, from available cash, their initial margin at their worst price
//! (the limit, or `px_max` for a market order) rounded up, plus the taker fee, for
//! either side: [`MarginTerms::hold`]. A fill releases the part of that hold its
//! quantity covered (`hold(r) − hold(r − q)`, so partial releases add up exactly).
//! Placing needs the hold available and, unless the order can only reduce the
//! position, `free = available + unrealised − hold` at least the initial margin of the
//! positions; and the position counting open orders as filled within the limit.
//!
//! **Positions** keep their signed size and cost (`Σ signed qty × px × m` of the open
//! size). A reducing trade realises `−d·px·m − removed` where `removed = cost × (−d) /
//! size` (truncated; exact when the position closes), paid into available cash with
//! the fee. Per trade the two sides' `realised − Δcost` sum to zero, so per asset
//!
//! `Σ cash + fees − bad debt − Σ open cost = supply`,
//!
//! which the invariants check. A loss beyond available cash (a trade far from the mark,
//! a liquidation) is a shortfall: the symbol's insurance account pays it, and what it
//! cannot is the asset's bad debt; no balance is ever negative.
//!
//! **Liquidation.** An account is liquidated in an asset when `10000 × (cash +
//! unrealised) < Σ |size| × mark × m × maintenance_bp`. Each open position is indexed
//! per symbol by the mark at which that becomes true, the other marks held where they
//! are ([`Engine::threshold`]): longs when `mark < t`, shorts when `mark ≥ t`, exact
//! integer comparisons. Only keys a mark within the symbol's price bounds can reach are
//! in the index (an account whose cash covers any move within the bounds is not). A
//! mark move therefore finds the accounts to liquidate by a
//! range of the index, O(log n + k), never a scan of the holders; the few accounts with
//! positions in two or more symbols of one asset (whose key moves with the other
//! marks) are listed per symbol and re-keyed on every mark move there. Liquidation
//! cancels the account's orders in those symbols, sends each position into the book as
//! an IOC order at its bankruptcy-bound price (where its equity would reach zero), and
//! passes what the book does not take to the insurance account at that price. Checks
//! run when a command ends (never inside a match), until nothing is left to do.
//!
//! **Bounds.** `px_max × position_limit × multiplier ≤ 2^53` ([`MARGIN_NOTIONAL_MAX`]),
//! so a position's cost and its hold fit `i64` with room; margin sums are formed in
//! `i128`, where the largest term is below 2^68.

use std::collections::BTreeSet;

use crate::account::{Account, Balance, Position};
use crate::book::Book;
use crate::command::{MarginSpec, MarginSymbol, MarkSource, OrderKind, OrderRequest, SymbolSpec, Tif, BP_ONE};
use crate::engine::{Engine, OrderStatus};
use crate::event::{CancelReason, Event};
use crate::matching::Taker;
use crate::reject::Reject;
use crate::types::{notional, AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId, Timestamp};

/// [`Engine::margin_settle`]'s work lists: the accounts to re-key, the symbols whose
/// mark moved, and the accounts to check for liquidation.
#[derive(Clone, Debug, Default)]
pub(crate) struct SettleScratch {
    dirty: Vec<(AccountId, AssetId)>,
    marks: Vec<SymbolId>,
    candidates: Vec<(AccountId, AssetId)>,
}

/// A margin symbol's rules and state beside its book.
#[derive(Clone, Debug)]
pub struct Margin {
    pub spec: MarginSpec,
    /// The operator's mark, once set ([`MarkSource::Operator`]).
    pub mark_set: Option<Px>,
    /// The liquidation index: `(threshold, account)`; longs liquidate when the mark is
    /// below their threshold, shorts when it is at or above. Derived.
    pub longs: BTreeSet<(i128, AccountId)>,
    pub shorts: BTreeSet<(i128, AccountId)>,
    /// Holders here with open positions in other symbols of the same settlement
    /// asset: re-keyed on every mark move here. Derived.
    pub multi: BTreeSet<AccountId>,
}

impl Margin {
    pub fn new(spec: MarginSpec) -> Self {
        Margin { spec, mark_set: None, longs: BTreeSet::new(), shorts: BTreeSet::new(), multi: BTreeSet::new() }
    }

    /// The mark price: the operator's (the last trade until one is set), or the last trade.
    pub fn mark(&self, last_px: Option<Px>) -> Option<Px> {
        match self.spec.mark {
            MarkSource::Operator => self.mark_set.or(last_px),
            MarkSource::LastTrade => last_px,
        }
    }
}

/// The margin terms matching and holds need, copied out of the symbol.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MarginTerms {
    pub multiplier: i64,
    pub initial_bp: u32,
    pub px_max: Px,
    pub fee_taker: i64,
    pub lot: i64,
}

impl MarginTerms {
    pub fn of(spec: &SymbolSpec, margin: &MarginSpec) -> Self {
        MarginTerms {
            multiplier: margin.multiplier,
            initial_bp: margin.initial_bp,
            px_max: spec.px_max,
            fee_taker: spec.fee_taker.0,
            lot: spec.lot.0,
        }
    }

    /// What a margin order of `qty` at `px` holds: its initial margin, rounded up, plus
    /// the taker fee it may pay. `None` past `i64` (an order over the position limit).
    #[inline]
    pub fn hold(&self, px: Px, qty: Qty) -> Option<i64> {
        self.initial(px, qty)?.checked_add(self.fee(qty)?)
    }

    /// The initial margin of `qty` at `px`, rounded up: the hold without the fee.
    #[inline(always)]
    pub fn initial(&self, px: Px, qty: Qty) -> Option<i64> {
        // In `i64` whenever the notional fits, as it does for every order within the
        // position limit (≤ 2^53): `ceil(a × bp / 10000) = (a / 10000) × bp + ceil((a %
        // 10000) × bp / 10000)` for `a ≥ 0`, no 128-bit division on the hot path.
        // Unsigned, so the divisions by the constant are a multiply and a shift each;
        // `(a / 10000) × bp ≤ a` (bp ≤ 10000) and the rest is below 10000, so nothing
        // overflows `u64`.
        let fast = px.0.checked_mul(qty.0).and_then(|a| a.checked_mul(self.multiplier)).filter(|&a| a >= 0);
        if let Some(a) = fast {
            return Some(self.initial_of(a));
        }
        let scaled = notional(px, qty) * i128::from(self.multiplier) * i128::from(self.initial_bp);
        i64::try_from(ceil_div(scaled, i128::from(BP_ONE))).ok()
    }

    /// `ceil(a × initial_bp / 10000)` for a notional `0 ≤ a ≤ i64::MAX` (see `initial`).
    #[inline(always)]
    fn initial_of(&self, a: i64) -> i64 {
        const ONE: u64 = BP_ONE as u64;
        let (a, bp) = (a as u64, u64::from(self.initial_bp));
        // Below 2^50 (the usual case; notionals may reach 2^53), `a × bp + 9999 <
        // 2^50 × 10000 + 9999 < 2^64`: one product and one division by the constant.
        // Above, the product is split around the division.
        if a < 1 << 50 {
            // `(x + 9999) / 10000`, not `x.div_ceil(10000)`: one multiply and shift, no
            // remainder to test (the bound keeps the sum within `u64`).
            #[allow(clippy::manual_div_ceil)]
            return ((a * bp + (ONE - 1)) / ONE) as i64;
        }
        // At most `a`, so within `i64`.
        ((a / ONE) * bp + ((a % ONE) * bp).div_ceil(ONE)) as i64
    }

    /// What moving a resting order of `qty` from `from` to `to` changes its hold by:
    /// `initial(to, qty) − initial(from, qty)` (the fee part depends on the quantity
    /// only), with one product of quantity and multiplier for both. `None` when the hold
    /// at `to` passes `i64`.
    #[inline]
    pub fn initial_change(&self, from: Px, to: Px, qty: Qty) -> Option<i64> {
        let notionals =
            qty.0.checked_mul(self.multiplier).and_then(|qm| Some((from.0.checked_mul(qm)?, to.0.checked_mul(qm)?)));
        match notionals {
            Some((a, b)) if a >= 0 && b >= 0 => Some(self.initial_of(b) - self.initial_of(a)),
            _ => Some(self.initial(to, qty)? - self.initial(from, qty).expect("hold fitted when placed")),
        }
    }

    /// The taker fee a hold of `qty` includes (quantities are whole lots).
    #[inline(always)]
    fn fee(&self, qty: Qty) -> Option<i64> {
        match self.fee_taker {
            0 => Some(0),
            fee => fee.checked_mul(qty.0 / self.lot),
        }
    }

    /// The hold's worst price for an order: its limit, or `px_max`.
    pub fn hold_px(&self, limit: Option<Px>) -> Px {
        limit.unwrap_or(self.px_max)
    }

    /// What a fill of `qty` out of `remaining` releases of a hold at `px`: the two
    /// initial margins' difference (each rounded, so partial releases add up to the
    /// hold exactly) and the fee of `qty`.
    pub fn release(&self, px: Px, remaining: Qty, qty: Qty) -> i64 {
        self.release_initial(px, remaining, qty) + self.fee(qty).expect("hold fitted when placed")
    }

    /// The initial-margin part of [`MarginTerms::release`]; a fill, which has worked out
    /// the taker fee of its quantity already, adds that.
    #[inline]
    pub fn release_initial(&self, px: Px, remaining: Qty, qty: Qty) -> i64 {
        let before = self.initial(px, remaining).expect("hold fitted when placed");
        let after = self.initial(px, Qty(remaining.0 - qty.0)).expect("hold fitted when placed");
        before - after
    }
}

/// Whether a liquidation key is within reach of a mark the symbol can have (marks stay
/// within `[px_min, px_max]`): a long's when some mark is below it, a short's when some
/// mark is at or above it. Keys out of reach stay out of the index.
pub(crate) fn in_band(spec: &SymbolSpec, key: i128, long: bool) -> bool {
    if long {
        key > i128::from(spec.px_min.0)
    } else {
        key <= i128::from(spec.px_max.0)
    }
}

/// The liquidation key of a position of signed size `s` (not zero), multiplier `m`
/// and maintenance rate `mb`, where `k` is the maintenance of the account's other
/// positions less `10000 × (cash + their unrealised P&L − this position's cost)`:
/// liquidation comes at `mark × d < k` for a long and `mark × d > −k` for a short,
/// with `d = |s| × m × (10000 ∓ mb)`, so the key is `ceil(k / d)`, or `floor(−k / d) + 1`.
#[inline(always)]
fn key_of(s: i128, m: i128, mb: i128, k: i128) -> i128 {
    let one = i128::from(BP_ONE);
    let d = if s > 0 { s * m * (one - mb) } else { -s * m * (one + mb) };
    // A 64-bit division when both fit (the usual case), else a 128-bit one.
    let small = |v: i128| i64::try_from(v).ok();
    match (small(k), small(d)) {
        (Some(k), Some(d)) if k > i64::MIN => {
            let key = if s > 0 { -((-k).div_euclid(d)) } else { (-k).div_euclid(d) + 1 };
            i128::from(key)
        }
        _ if s > 0 => ceil_div(k, d),
        _ => (-k).div_euclid(d) + 1,
    }
}

fn ceil_div(a: i128, b: i128) -> i128 {
    -((-a).div_euclid(b))
}

/// One account's margin figures in one settlement asset, over its open positions.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Totals {
    pub available: i128,
    pub reserved: i128,
    pub unrealized: i128,
    /// `Σ |size| × mark × m × maintenance_bp` (basis points not divided out).
    pub maintenance: i128,
    /// `Σ |size| × mark × m × initial_bp`.
    pub initial: i128,
    pub open: u32,
}

impl Totals {
    /// Adds a position of signed `size` and `cost` at `mark` (a flat one adds nothing).
    #[inline(always)]
    fn add(&mut self, size: i64, cost: i64, mark: i64, spec: &MarginSpec) {
        let value = i128::from(size) * i128::from(mark) * i128::from(spec.multiplier);
        self.unrealized += value - i128::from(cost);
        self.maintenance += value.abs() * i128::from(spec.maintenance_bp);
        self.initial += value.abs() * i128::from(spec.initial_bp);
    }

    pub fn liquidatable(&self) -> bool {
        i128::from(BP_ONE) * (self.available + self.reserved + self.unrealized) < self.maintenance
    }

    /// Free margin after holding `hold` more, in basis-point units.
    pub fn free_after(&self, hold: i128) -> i128 {
        i128::from(BP_ONE) * (self.available + self.unrealized - hold) - self.initial
    }
}

/// Applies a trade of signed `d` at `px` to a position; returns the P&L it realises.
fn trade_position(size: &mut i64, cost: &mut i64, d: i64, px: Px, multiplier: i64) -> i128 {
    let value = i128::from(d) * i128::from(px.0) * i128::from(multiplier);
    let s = *size;
    if s == 0 || (s > 0) == (d > 0) {
        *cost = i64::try_from(i128::from(*cost) + value).expect("cost bounded by the notional bound");
        *size += d;
        return 0;
    }
    if d.abs() <= s.abs() {
        // A 64-bit division when the product fits (the usual case), else a 128-bit one:
        // the same quotient, truncated towards zero.
        let removed = match cost.checked_mul(-d) {
            Some(product) => i128::from(product / s),
            None => i128::from(*cost) * i128::from(-d) / i128::from(s),
        };
        *cost = i64::try_from(i128::from(*cost) - removed).expect("part of a cost");
        *size += d;
        return -value - removed;
    }
    let realized = i128::from(s) * i128::from(px.0) * i128::from(multiplier) - i128::from(*cost);
    let rest = d + s;
    *size = rest;
    *cost = i64::try_from(i128::from(rest) * i128::from(px.0) * i128::from(multiplier))
        .expect("cost bounded by the notional bound");
    realized
}

/// The margin rules must make every hold and cost fit, and liquidation well defined.
pub(crate) fn validate_margin(spec: &SymbolSpec, margin: &MarginSpec) -> Result<(), Reject> {
    let rates_ok = margin.maintenance_bp >= 1
        && margin.maintenance_bp <= margin.initial_bp
        && margin.initial_bp <= BP_ONE
        && margin.maintenance_bp < BP_ONE;
    let shape_ok = margin.multiplier >= 1
        && margin.position_limit.0 > 0
        && margin.position_limit.0 % spec.lot.0 == 0
        && notional(spec.px_max, margin.position_limit) * i128::from(margin.multiplier)
            <= i128::from(crate::command::MARGIN_NOTIONAL_MAX);
    if rates_ok && shape_ok {
        Ok(())
    } else {
        Err(Reject::MarginSpecInvalid)
    }
}

impl<B: Book> Engine<B> {
    pub(crate) fn create_margin_symbol(
        &mut self,
        symbol: &MarginSymbol,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        self.check_new_symbol(&symbol.spec)?;
        validate_margin(&symbol.spec, &symbol.margin)?;
        self.account(symbol.margin.insurance)?;
        let id = self.push_symbol(&symbol.spec, Some(Box::new(Margin::new(symbol.margin))), events);
        self.insurers.insert((symbol.spec.quote, symbol.margin.insurance));
        Ok(id)
    }

    pub(crate) fn set_mark(&mut self, sym: SymbolId, px: Px, events: &mut Vec<Event>) -> Result<u64, Reject> {
        let symbol = self.symbol(sym)?;
        let settable = symbol.margin.as_ref().is_some_and(|m| m.spec.mark == MarkSource::Operator);
        if !settable {
            return Err(Reject::MarkNotSettable);
        }
        crate::order::check_px(&symbol.spec, px)?;
        let margin = self.symbols[sym.0 as usize].margin.as_mut().expect("checked above");
        margin.mark_set = Some(px);
        events.push(Event::Mark { symbol: sym, px });
        self.marks_moved.push(sym);
        Ok(0)
    }

    /// The symbol's margin terms, for a margin symbol.
    pub(crate) fn margin_terms(&self, sym: SymbolId) -> Option<MarginTerms> {
        let symbol = &self.symbols[sym.0 as usize];
        symbol.margin.as_ref().map(|margin| MarginTerms::of(&symbol.spec, &margin.spec))
    }

    /// The mark of a margin symbol (see [`Margin::mark`]).
    pub fn mark(&self, sym: SymbolId) -> Option<Px> {
        let symbol = self.symbols.get(sym.0 as usize)?;
        symbol.margin.as_ref()?.mark(symbol.last_px)
    }

    /// The account's margin figures in `asset`.
    pub(crate) fn totals(&self, account: AccountId, asset: AssetId) -> Totals {
        let holder = &self.accounts[account.0 as usize];
        self.totals_of(holder, holder.balance(asset), asset)
    }

    /// [`Engine::totals`] of a holder whose balance in `asset` the caller has found.
    #[inline]
    fn totals_of(&self, holder: &Account, balance: Balance, asset: AssetId) -> Totals {
        let mut totals = Totals {
            available: i128::from(balance.available.0),
            reserved: i128::from(balance.reserved.0),
            ..Totals::default()
        };
        for (sym, position) in &holder.positions {
            if position.size == 0 {
                continue;
            }
            let symbol = &self.symbols[sym.0 as usize];
            if symbol.spec.quote != asset {
                continue;
            }
            let margin = symbol.margin.as_ref().expect("positions are in margin symbols");
            let mark = margin.mark(symbol.last_px).expect("an open position has traded");
            totals.add(position.size, position.cost, mark.0, &margin.spec);
            totals.open += 1;
        }
        totals
    }

    /// The mark at which the account's position in `sym` tips it into liquidation, the
    /// other marks held: a long liquidates when the mark is below it, a short when the
    /// mark is at or above it.
    pub(crate) fn threshold(&self, account: AccountId, sym: SymbolId, totals: &Totals) -> Option<i128> {
        self.threshold_of(sym, self.accounts[account.0 as usize].position(sym)?, totals)
    }

    /// [`Engine::threshold`] of a position the caller holds already.
    #[inline]
    fn threshold_of(&self, sym: SymbolId, position: &Position, totals: &Totals) -> Option<i128> {
        if position.size == 0 {
            return None;
        }
        let symbol = &self.symbols[sym.0 as usize];
        let margin = symbol.margin.as_ref().expect("positions are in margin symbols");
        let mark = margin.mark(symbol.last_px).expect("an open position has traded");
        let (s, m, mb) =
            (i128::from(position.size), i128::from(margin.spec.multiplier), i128::from(margin.spec.maintenance_bp));
        let cost = i128::from(position.cost);
        let value = s * i128::from(mark.0) * m;
        let unrealized_others = totals.unrealized - (value - cost);
        let maintenance_others = totals.maintenance - value.abs() * mb;
        let k =
            maintenance_others - i128::from(BP_ONE) * (totals.available + totals.reserved + unrealized_others - cost);
        Some(key_of(s, m, mb, k))
    }

    /// [`Engine::threshold`] of an account's only open position in its settlement
    /// asset, whose `cash` there (available and reserved) the caller has: the other
    /// positions' terms are zero, so `k = 10000 × (cost − cash)` and no mark is needed.
    #[inline]
    fn threshold_alone(&self, sym: SymbolId, position: &Position, cash: i128) -> Option<i128> {
        if position.size == 0 {
            return None;
        }
        let margin = self.symbols[sym.0 as usize].margin.as_ref().expect("positions are in margin symbols");
        let (m, mb) = (i128::from(margin.spec.multiplier), i128::from(margin.spec.maintenance_bp));
        let k = i128::from(BP_ONE) * (i128::from(position.cost) - cash);
        Some(key_of(i128::from(position.size), m, mb, k))
    }

    fn exempt(&self, account: AccountId, asset: AssetId) -> bool {
        self.insurers.contains(&(asset, account))
    }

    /// Re-keys the account's positions in `asset` in the liquidation index; returns
    /// whether the account is (not exempt and) below maintenance margin now.
    pub(crate) fn margin_refresh(&mut self, account: AccountId, asset: AssetId) -> bool {
        let exempt = self.exempt(account, asset);
        let holder = &self.accounts[account.0 as usize];
        let open = holder
            .positions
            .iter()
            .filter(|(sym, position)| position.size != 0 && self.symbols[sym.0 as usize].spec.quote == asset)
            .count();
        // With one open position in the asset (or none), the common case, its key needs
        // only the cash: no marks, no totals over the positions.
        let totals = (!exempt && open >= 2).then(|| self.totals(account, asset));
        let cash = match totals {
            None => {
                let balance = holder.balance(asset);
                i128::from(balance.available.0) + i128::from(balance.reserved.0)
            }
            Some(_) => 0,
        };
        let mut crossed = false;
        // By index, not a collected list (no allocation per refresh): tidying may drop
        // the entry at `i`, and only that one.
        let mut i = 0;
        while let Some(&(sym, position)) = self.accounts[account.0 as usize].positions.get(i) {
            if self.symbols[sym.0 as usize].spec.quote != asset {
                i += 1;
                continue;
            }
            let threshold = match &totals {
                _ if exempt => None,
                Some(totals) => self.threshold_of(sym, &position, totals),
                None => self.threshold_alone(sym, &position, cash),
            };
            let positions = &mut self.accounts[account.0 as usize].positions;
            let position = &mut positions[i].1;
            let (old, was_long, size) = (position.threshold, position.indexed_long, position.size);
            position.threshold = threshold;
            position.indexed_long = size > 0;
            let keyed = threshold.is_some();
            if position.is_idle() {
                positions.remove(i);
            } else {
                i += 1;
            }
            let symbol = &mut self.symbols[sym.0 as usize];
            let spec = &symbol.spec;
            let margin = symbol.margin.as_mut().expect("positions are in margin symbols");
            // Only keys some mark within the price bounds reaches are indexed: an
            // account whose cash covers any move within them costs no B-tree work.
            let was = old.filter(|&key| in_band(spec, key, was_long)).map(|key| (key, was_long));
            let threshold = threshold.filter(|&key| in_band(spec, key, size > 0));
            if let (None, Some(key)) = (&totals, threshold) {
                // The only position: the account is below maintenance exactly when the
                // mark is past its key (a key out of band never is).
                let mark = i128::from(margin.mark(symbol.last_px).expect("an open position has traded").0);
                crossed |= if size > 0 { mark < key } else { mark >= key };
            }
            if was != threshold.map(|key| (key, size > 0)) {
                if let Some((old, long)) = was {
                    if long {
                        margin.longs.remove(&(old, account));
                    } else {
                        margin.shorts.remove(&(old, account));
                    }
                }
                if let Some(threshold) = threshold {
                    if size > 0 {
                        margin.longs.insert((threshold, account));
                    } else {
                        margin.shorts.insert((threshold, account));
                    }
                }
            }
            if keyed && open >= 2 {
                margin.multi.insert(account);
            } else if !margin.multi.is_empty() {
                margin.multi.remove(&account);
            }
        }
        match totals {
            Some(totals) => totals.liquidatable(),
            None => crossed,
        }
    }

    /// Adds or removes open order quantity in a margin position (one search of the
    /// account's positions: this runs for every order placed, filled or cancelled).
    #[inline]
    pub(crate) fn position_orders(&mut self, account: AccountId, sym: SymbolId, side: Side, qty: i64) {
        let positions = &mut self.accounts[account.0 as usize].positions;
        let Ok(i) = positions.binary_search_by_key(&sym, |(s, _)| *s) else {
            return self.position_orders_first(account, sym, side, qty);
        };
        let position = &mut positions[i].1;
        // Without a branch on the side, which is as likely one as the other.
        let buy = i64::from(side == Side::Buy);
        position.buying += qty * buy;
        position.selling += qty * (1 - buy);
        debug_assert!(position.buying >= 0 && position.selling >= 0, "open order quantity went negative");
        // Only taking open quantity away can leave the position idle.
        if qty < 0 && position.is_idle() {
            positions.remove(i);
        }
    }

    /// [`Engine::position_orders`] for an account with no position in `sym` yet (its
    /// first order there): opens an empty one, out of the common path.
    #[cold]
    #[inline(never)]
    fn position_orders_first(&mut self, account: AccountId, sym: SymbolId, side: Side, qty: i64) {
        self.accounts[account.0 as usize].position_index(sym);
        self.position_orders(account, sym, side, qty);
    }

    /// The checks a margin order must pass beyond its shape: no budget, the position
    /// limit, the hold available, and (unless it can only reduce) the free margin.
    pub(crate) fn margin_check_place(&self, request: &OrderRequest, terms: &MarginTerms) -> Result<i64, Reject> {
        let (limit, budget) = request.kind.limit_and_budget();
        if budget.is_some() {
            return Err(Reject::BudgetNotForMargin);
        }
        let symbol = &self.symbols[request.symbol.0 as usize];
        let margin = symbol.margin.as_ref().expect("a margin symbol");
        let holder = &self.accounts[request.account.0 as usize];
        let position = holder.position(request.symbol);
        let (size, buying, selling, cost) = position.map_or((0, 0, 0, 0), |p| (p.size, p.buying, p.selling, p.cost));
        let q = i128::from(request.qty.0);
        // The position and open quantity seen from the order's side (a sell's long is
        // negative), chosen without a branch: the side is as likely one as the other.
        let (along, open) = match request.side {
            Side::Buy => (size, buying),
            Side::Sell => (-size, selling),
        };
        let worst = i128::from(along) + i128::from(open) + q;
        if worst > i128::from(margin.spec.position_limit.0) {
            return Err(Reject::PositionLimit);
        }
        let hold = terms.hold(terms.hold_px(limit), request.qty).ok_or(Reject::AmountOverflow)?;
        let cash = holder.balance(symbol.spec.quote);
        if cash.available.0 < hold {
            return Err(Reject::BalanceInsufficient);
        }
        let reducing = (along < 0) & (i128::from(open) + q <= -i128::from(along));
        // An account whose only position is in this symbol (the common case) has its
        // margin figures from that position alone, as `totals` would sum them; worked
        // out whether or not the order can only reduce, so that neither that nor a flat
        // position (size and cost zero: the free margin is what stays available, which
        // covers the hold) is a branch — either is a coin toss in a mixed order flow.
        let alone = match holder.positions.as_slice() {
            [] => true,
            [(sym, _)] => *sym == request.symbol,
            _ => false,
        };
        let free = if alone {
            let mark = margin.mark(symbol.last_px).map_or(0, |px| px.0);
            let mut totals = Totals { available: i128::from(cash.available.0), ..Totals::default() };
            totals.add(size, cost, mark, &margin.spec);
            totals.free_after(i128::from(hold))
        } else if reducing {
            0
        } else {
            self.totals_of(holder, cash, symbol.spec.quote).free_after(i128::from(hold))
        };
        if !reducing & (free < 0) {
            return Err(Reject::MarginInsufficient);
        }
        Ok(hold)
    }

    /// Whether taking `more` out of available cash in `asset` keeps the account's
    /// margin: for withdrawals and for moves that hold more.
    pub(crate) fn margin_check_cash(&self, account: AccountId, asset: AssetId, more: i64) -> Result<(), Reject> {
        if self.margin_symbols == 0 {
            return Ok(());
        }
        let totals = self.totals(account, asset);
        if totals.open > 0 && totals.free_after(i128::from(more)) < 0 {
            return Err(Reject::MarginInsufficient);
        }
        Ok(())
    }

    /// Settles one side of a margin trade (or a transfer): releases `release` of the
    /// order's hold, applies the trade to the position, pays the realised P&L and the
    /// fee from available cash, and covers a shortfall. `order` says whether an order's
    /// open quantity is filled (false for a transfer).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn margin_fill(
        &mut self,
        account: AccountId,
        sym: SymbolId,
        side: Side,
        qty: Qty,
        px: Px,
        fee: i64,
        release: i64,
        order: bool,
        events: &mut Vec<Event>,
    ) {
        let symbol = &self.symbols[sym.0 as usize];
        let quote = symbol.spec.quote;
        let margin = symbol.margin.as_ref().expect("a margin symbol");
        let (multiplier, insurance) = (margin.spec.multiplier, margin.spec.insurance);
        let holder = &mut self.accounts[account.0 as usize];
        let at = holder.position_index(sym);
        let position = &mut holder.positions[at].1;
        if order {
            match side {
                Side::Buy => position.buying -= qty.0,
                Side::Sell => position.selling -= qty.0,
            }
        }
        let d = if side == Side::Buy { qty.0 } else { -qty.0 };
        let realized = trade_position(&mut position.size, &mut position.cost, d, px, multiplier);
        position.realized = i64::try_from(i128::from(position.realized) + realized).expect("realised P&L within i64");
        let (size, cost, realized_total) = (position.size, position.cost, position.realized);
        if position.is_idle() {
            holder.positions.remove(at);
        }
        let balance = holder.balance_mut(quote);
        balance.reserved.0 -= release;
        assert!(balance.reserved.0 >= 0, "margin reservation went negative");
        let available = i128::from(balance.available.0) + i128::from(release) + realized - i128::from(fee);
        balance.available.0 = i64::try_from(available).expect("cash within i64");
        events.push(Event::Position {
            account,
            symbol: sym,
            size: Qty(size),
            cost: Amount(cost),
            realized: Amount(realized_total),
        });
        if available < 0 {
            self.cover_shortfall(account, quote, insurance, events);
        }
        self.margin_dirty.push((account, quote));
    }

    /// An account's available cash went below zero: the insurance account pays what
    /// it can, the rest is the asset's bad debt.
    fn cover_shortfall(&mut self, account: AccountId, asset: AssetId, insurance: AccountId, events: &mut Vec<Event>) {
        let balance = self.accounts[account.0 as usize].balance_mut(asset);
        let short = -balance.available.0;
        balance.available.0 = 0;
        let covered = if insurance == account {
            0
        } else {
            let fund = self.accounts[insurance.0 as usize].balance_mut(asset);
            let covered = short.min(fund.available.0.max(0));
            fund.available.0 -= covered;
            covered
        };
        let bad_debt = short - covered;
        self.assets[asset.0 as usize].bad_debt.0 += bad_debt;
        events.push(Event::Shortfall { account, asset, covered: Amount(covered), bad_debt: Amount(bad_debt) });
        if covered > 0 {
            self.emit_balance(insurance, asset, events);
            self.margin_dirty.push((insurance, asset));
        }
    }

    /// After a command: re-keys the accounts it touched and the holders the marks it
    /// moved concern, and liquidates whoever fell below maintenance margin, until
    /// nothing is left (a liquidation's trades may move a last-trade mark).
    pub(crate) fn margin_settle(&mut self, ts: Timestamp, events: &mut Vec<Event>) {
        // Each round swaps the command's lists for the scratch's empty ones, so both
        // buffers of each list are kept and a command allocates nothing here once they
        // have grown.
        let mut work = std::mem::take(&mut self.margin_scratch);
        loop {
            std::mem::swap(&mut work.dirty, &mut self.margin_dirty);
            std::mem::swap(&mut work.marks, &mut self.marks_moved);
            if work.dirty.is_empty() && work.marks.is_empty() {
                break;
            }
            let SettleScratch { dirty, marks, candidates } = &mut work;
            marks.sort_unstable();
            marks.dedup();
            for &sym in marks.iter() {
                let symbol = &self.symbols[sym.0 as usize];
                let margin = symbol.margin.as_ref().expect("marks move in margin symbols");
                dirty.extend(margin.multi.iter().map(|&account| (account, symbol.spec.quote)));
            }
            dirty.sort_unstable();
            dirty.dedup();
            for &(account, asset) in dirty.iter() {
                if self.margin_refresh(account, asset) {
                    candidates.push((account, asset));
                }
            }
            for &sym in marks.iter() {
                let symbol = &self.symbols[sym.0 as usize];
                let margin = symbol.margin.as_ref().expect("marks move in margin symbols");
                let Some(mark) = margin.mark(symbol.last_px) else { continue };
                let mark = i128::from(mark.0);
                let quote = symbol.spec.quote;
                candidates.extend(margin.longs.range((mark + 1, AccountId(0))..).map(|&(_, a)| (a, quote)));
                candidates.extend(margin.shorts.range(..=(mark, AccountId(u32::MAX))).map(|&(_, a)| (a, quote)));
            }
            candidates.sort_unstable();
            candidates.dedup();
            for &(account, asset) in candidates.iter() {
                if !self.exempt(account, asset) && self.totals(account, asset).liquidatable() {
                    self.liquidate(account, asset, ts, events);
                }
            }
            dirty.clear();
            marks.clear();
            candidates.clear();
        }
        self.margin_scratch = work;
    }

    /// The price at which closing the account's whole position in `sym` leaves its
    /// equity at zero (the fee paid), the other positions at their marks: a sell may
    /// go no lower, a buy no higher. Rounded to a tick towards safety, within bounds.
    fn bankruptcy_px(&self, account: AccountId, sym: SymbolId, asset: AssetId) -> Px {
        let totals = self.totals(account, asset);
        let position = self.accounts[account.0 as usize].position(sym).copied().unwrap_or_default();
        let symbol = &self.symbols[sym.0 as usize];
        let (spec, margin) = (&symbol.spec, symbol.margin.as_ref().expect("a margin symbol"));
        let mark = margin.mark(symbol.last_px).expect("an open position has traded");
        let m = i128::from(margin.spec.multiplier);
        let s = i128::from(position.size);
        let cost = i128::from(position.cost);
        let unrealized_others = totals.unrealized - (s * i128::from(mark.0) * m - cost);
        let fee = i128::from(spec.fee_taker.0) * (s.abs() / i128::from(spec.lot.0));
        let cash = totals.available + unrealized_others;
        let tick = i128::from(spec.tick.0);
        let px = if s > 0 {
            let px = ceil_div(cost + fee - cash, s * m);
            ceil_div(px, tick) * tick
        } else {
            let px = (cash - cost - fee).div_euclid(-s * m);
            px.div_euclid(tick) * tick
        };
        Px(px.clamp(i128::from(spec.px_min.0), i128::from(spec.px_max.0)) as i64)
    }

    /// Daily settlement (part of the close of the trading day): every open margin
    /// position's variation margin `size × mark × m − cost` is paid into or out of its
    /// account's available cash, by account then symbol, and its cost reset to `size ×
    /// mark × m`. Equity does not move, so no liquidation key does either (a shortfall
    /// aside, which is covered as after a trade); each symbol's costs then sum to zero
    /// (its sizes do), so the conservation line is back to cash and fees. One pass over
    /// the accounts, once a day.
    pub(crate) fn settle_margin(&mut self, events: &mut Vec<Event>) {
        if self.margin_symbols == 0 {
            return;
        }
        let mut settled: std::collections::BTreeMap<SymbolId, (Px, i64)> = std::collections::BTreeMap::new();
        for i in 0..self.accounts.len() {
            let account = AccountId(i as u32);
            for j in 0..self.accounts[i].positions.len() {
                let (sym, position) = self.accounts[i].positions[j];
                if position.size == 0 {
                    continue;
                }
                let symbol = &self.symbols[sym.0 as usize];
                let margin = symbol.margin.as_ref().expect("positions are in margin symbols");
                let mark = margin.mark(symbol.last_px).expect("an open position has traded");
                let (quote, insurance, m) = (symbol.spec.quote, margin.spec.insurance, margin.spec.multiplier);
                let entry = settled.entry(sym).or_insert((mark, 0));
                entry.1 += position.size.max(0);
                let value = i128::from(position.size) * i128::from(mark.0) * i128::from(m);
                let variation = value - i128::from(position.cost);
                let holder = &mut self.accounts[i];
                holder.positions[j].1.cost = i64::try_from(value).expect("cost bounded by the notional bound");
                let balance = holder.balance_mut(quote);
                let available = i128::from(balance.available.0) + variation;
                balance.available.0 = i64::try_from(available).expect("cash within i64");
                events.push(Event::Settled {
                    account,
                    symbol: sym,
                    px: mark,
                    variation: Amount(i64::try_from(variation).expect("within the notional bound")),
                });
                if available < 0 {
                    self.cover_shortfall(account, quote, insurance, events);
                    self.margin_dirty.push((account, quote));
                }
                self.emit_balance(account, quote, events);
            }
        }
        for (symbol, (px, open_interest)) in settled {
            events.push(Event::Settlement { symbol, px, open_interest: Qty(open_interest) });
        }
    }

    /// Liquidates the account in `asset`: cancels its orders in that asset's margin
    /// symbols, closes each position into the book at its bankruptcy-bound price, and
    /// passes what the book does not take to the insurance account.
    fn liquidate(&mut self, account: AccountId, asset: AssetId, ts: Timestamp, events: &mut Vec<Event>) {
        events.push(Event::Liquidated { account, asset });
        let in_asset = |engine: &Self, sym: SymbolId| {
            let symbol = &engine.symbols[sym.0 as usize];
            symbol.margin.is_some() && symbol.spec.quote == asset
        };
        let holder = &self.accounts[account.0 as usize];
        let has_orders =
            holder.positions.iter().any(|(sym, p)| (p.buying > 0 || p.selling > 0) && in_asset(self, *sym));
        if has_orders {
            // O(open orders), only for an account being liquidated with orders open.
            let mut open: Vec<(SymbolId, OrderId, OrderStatus)> = self
                .orders
                .values()
                .filter(|record| record.account == account && in_asset(self, record.symbol))
                .map(|record| (record.symbol, record.id, record.status))
                .collect();
            open.sort_unstable_by_key(|&(sym, id, _)| (sym, id));
            for (sym, id, status) in open {
                match status {
                    OrderStatus::Open => self.cancel_resting(sym, id, CancelReason::Liquidation, events),
                    OrderStatus::Pending => self.cancel_stop(sym, id, CancelReason::Liquidation, events),
                    closed => unreachable!("order {id} is {closed:?} but has an open record"),
                }
            }
        }
        let positions: Vec<SymbolId> = self.accounts[account.0 as usize]
            .positions
            .iter()
            .filter(|(sym, p)| p.size != 0 && in_asset(self, *sym))
            .map(|(sym, _)| *sym)
            .collect();
        for sym in positions {
            let size = self.accounts[account.0 as usize].position(sym).map_or(0, |p| p.size);
            if size == 0 {
                continue;
            }
            let px = self.bankruptcy_px(account, sym, asset);
            let side = if size > 0 { Side::Sell } else { Side::Buy };
            let mut request = OrderRequest::limit(account, sym, side, px, Qty(size.abs()), Tif::Ioc);
            request.stp = crate::command::Stp::Allow;
            let id = OrderId(self.next_order_id);
            self.next_order_id += 1;
            events.push(Event::Accepted {
                order: id,
                account,
                symbol: sym,
                side,
                kind: OrderKind::Limit { px },
                qty: request.qty,
                ts,
            });
            self.orders.insert(id, crate::order::new_record(id, &request, false, ts));
            self.position_orders(account, sym, side, request.qty.0);
            let mut taker = Taker::new(id, &request, ts);
            taker.liquidation = true;
            self.match_taker(sym, &mut taker, events);
            let rest = taker.qty;
            if rest.0 > 0 {
                let quote = self.symbols[sym.0 as usize].spec.quote;
                self.cancel_remainder(
                    id,
                    account,
                    (sym, side),
                    (quote, Amount::ZERO),
                    rest,
                    CancelReason::Liquidation,
                    events,
                );
                let insurance = self.symbols[sym.0 as usize].margin.as_ref().expect("a margin symbol").spec.insurance;
                let qty = if side == Side::Sell { rest } else { Qty(-rest.0) };
                events.push(Event::PositionTransferred { symbol: sym, from: account, to: insurance, qty, px });
                self.margin_fill(account, sym, side, rest, px, 0, 0, false, events);
                self.margin_fill(insurance, sym, side.opposite(), rest, px, 0, 0, false, events);
                // The transfer realised P&L on both sides: their cash changed.
                self.emit_balance(account, quote, events);
                if insurance != account {
                    self.emit_balance(insurance, quote, events);
                }
            } else {
                self.close_record(id, OrderStatus::Filled);
            }
            if taker.traded {
                self.trigger_stops(sym, ts, events);
            }
        }
        self.margin_dirty.push((account, asset));
    }
}

/// One margin position as the reports show it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PositionReport {
    pub symbol: SymbolId,
    pub size: i64,
    pub cost: i64,
    pub realized: i64,
    pub buying: i64,
    pub selling: i64,
    /// The symbol's mark; `None` before its first trade or mark.
    pub mark: Option<Px>,
    /// `size × mark × multiplier − cost`.
    pub unrealized: i128,
    /// The position's initial and maintenance margin at the mark, in minor units
    /// (rounded up).
    pub initial_margin: i128,
    pub maintenance_margin: i128,
    /// The mark at which the account is liquidated, the other marks held (longs below
    /// it, shorts at or above it); `None` when flat, for the insurance account, or for
    /// a long that no positive mark liquidates.
    pub liquidation_px: Option<i128>,
}

/// One account's margin figures in one settlement asset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarginSummary {
    pub asset: AssetId,
    /// Available plus reserved.
    pub cash: i128,
    pub unrealized: i128,
    /// `cash + unrealized`.
    pub equity: i128,
    pub initial_margin: i128,
    pub maintenance_margin: i128,
    /// `available + unrealized − initial margin`: what new orders may still hold.
    pub free_margin: i128,
}

/// The exchange's totals of one asset: the conservation check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AssetTotals {
    pub asset: AssetId,
    /// Deposited and credited minus withdrawn.
    pub supply: i64,
    pub available: i128,
    pub reserved: i128,
    pub fees: i64,
    pub bad_debt: i64,
    /// `Σ cost` of the open positions in margin symbols settled in this asset.
    pub open_cost: i128,
}

impl AssetTotals {
    /// `available + reserved + fees − bad debt − open cost = supply`.
    pub fn balanced(&self) -> bool {
        self.available + self.reserved + i128::from(self.fees) - i128::from(self.bad_debt) - self.open_cost
            == i128::from(self.supply)
    }
}

/// A margin symbol's open interest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenInterest {
    pub symbol: SymbolId,
    pub mark: Option<Px>,
    /// The sum of the long positions (which equals that of the short ones).
    pub open_interest: i64,
    pub longs: u32,
    pub shorts: u32,
}

/// The exchange-wide report: totals per asset, open interest per margin symbol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExchangeReport {
    /// Trading days closed so far (the day trading now is the next).
    pub days_closed: u64,
    pub assets: Vec<AssetTotals>,
    pub symbols: Vec<OpenInterest>,
}

impl<B: Book> Engine<B> {
    /// An account's margin positions, valued at their marks; `None` for an unknown account.
    pub fn position_reports(&self, account: AccountId) -> Option<Vec<PositionReport>> {
        let holder = self.accounts.get(account.0 as usize)?;
        let mut reports = Vec::with_capacity(holder.positions.len());
        for (sym, position) in &holder.positions {
            let symbol = &self.symbols[sym.0 as usize];
            let margin = symbol.margin.as_ref().expect("positions are in margin symbols");
            let mark = margin.mark(symbol.last_px);
            let value = mark
                .map_or(0, |mark| i128::from(position.size) * i128::from(mark.0) * i128::from(margin.spec.multiplier));
            let unrealized = if position.size == 0 { 0 } else { value - i128::from(position.cost) };
            let one = i128::from(BP_ONE);
            reports.push(PositionReport {
                symbol: *sym,
                size: position.size,
                cost: position.cost,
                realized: position.realized,
                buying: position.buying,
                selling: position.selling,
                mark,
                unrealized,
                initial_margin: ceil_div(value.abs() * i128::from(margin.spec.initial_bp), one),
                maintenance_margin: ceil_div(value.abs() * i128::from(margin.spec.maintenance_bp), one),
                // A long no positive mark liquidates has a key at or below zero: none.
                liquidation_px: position.threshold.filter(|&t| t > 0),
            });
        }
        Some(reports)
    }

    /// An account's margin figures per settlement asset it has positions in.
    pub fn margin_summaries(&self, account: AccountId) -> Option<Vec<MarginSummary>> {
        let holder = self.accounts.get(account.0 as usize)?;
        let mut assets: Vec<AssetId> =
            holder.positions.iter().map(|(sym, _)| self.symbols[sym.0 as usize].spec.quote).collect();
        assets.sort_unstable();
        assets.dedup();
        let one = i128::from(BP_ONE);
        Some(
            assets
                .into_iter()
                .map(|asset| {
                    let totals = self.totals(account, asset);
                    let cash = totals.available + totals.reserved;
                    let initial_margin = ceil_div(totals.initial, one);
                    MarginSummary {
                        asset,
                        cash,
                        unrealized: totals.unrealized,
                        equity: cash + totals.unrealized,
                        initial_margin,
                        maintenance_margin: ceil_div(totals.maintenance, one),
                        free_margin: totals.available + totals.unrealized - initial_margin,
                    }
                })
                .collect(),
        )
    }

    /// Totals per asset and open interest per margin symbol: one pass over the
    /// accounts (an operator's report, not a trading path).
    pub fn exchange_report(&self) -> ExchangeReport {
        let mut assets: Vec<AssetTotals> = self
            .assets
            .iter()
            .enumerate()
            .map(|(i, asset)| AssetTotals {
                asset: AssetId(i as u32),
                supply: asset.supply.0,
                available: 0,
                reserved: 0,
                fees: asset.fees.0,
                bad_debt: asset.bad_debt.0,
                open_cost: 0,
            })
            .collect();
        let mut symbols: Vec<OpenInterest> = self
            .symbols
            .iter()
            .enumerate()
            .filter(|(_, symbol)| symbol.margin.is_some())
            .map(|(i, symbol)| OpenInterest {
                symbol: SymbolId(i as u32),
                mark: symbol.margin.as_ref().and_then(|m| m.mark(symbol.last_px)),
                open_interest: 0,
                longs: 0,
                shorts: 0,
            })
            .collect();
        for account in &self.accounts {
            for (asset, balance) in &account.balances {
                let totals = &mut assets[asset.0 as usize];
                totals.available += i128::from(balance.available.0);
                totals.reserved += i128::from(balance.reserved.0);
            }
            for (sym, position) in &account.positions {
                let quote = self.symbols[sym.0 as usize].spec.quote;
                assets[quote.0 as usize].open_cost += i128::from(position.cost);
                let Ok(i) = symbols.binary_search_by_key(sym, |s| s.symbol) else { continue };
                let interest = &mut symbols[i];
                if position.size > 0 {
                    interest.open_interest += position.size;
                    interest.longs += 1;
                } else if position.size < 0 {
                    interest.shorts += 1;
                }
            }
        }
        ExchangeReport { days_closed: self.days_closed, assets, symbols }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn terms(multiplier: i64, initial_bp: u32) -> MarginTerms {
        MarginTerms { multiplier, initial_bp, px_max: Px(i64::MAX), fee_taker: 0, lot: 1 }
    }

    /// `ceil(px × qty × m × bp / 10000)` exactly, in 128 bits.
    fn exact(px: i64, qty: i64, m: i64, bp: u32) -> i128 {
        ceil_div(i128::from(px) * i128::from(qty) * i128::from(m) * i128::from(bp), i128::from(BP_ONE))
    }

    proptest! {
        /// The hold's 64-bit paths round exactly as the 128-bit formula: notionals up to
        /// the bound and past it (where the 128-bit path takes over), and half the cases
        /// below 2^50 (where one product and one division do it).
        #[test]
        fn initial_margin_is_the_exact_ceiling(
            (px, qty, m) in prop_oneof![
                (1i64..=1 << 40, 1i64..=1 << 30, 1i64..=1_000),
                (1i64..=1 << 26, 1i64..=1 << 20, 1i64..=15),
            ],
            bp in 1u32..=BP_ONE,
        ) {
            let want = exact(px, qty, m, bp);
            prop_assert_eq!(terms(m, bp).initial(Px(px), Qty(qty)).map(i128::from), i64::try_from(want).ok().map(i128::from));
        }
    }

    #[test]
    fn initial_margin_at_the_edges() {
        for (px, qty, m, bp) in
            [(1, 1, 1, 1), (9_999, 1, 1, 1), (10_000, 1, 1, 1), (10_001, 1, 1, 10_000), (1 << 53, 1, 1, 10_000)]
                .into_iter()
                .chain([(1 << 50) - 1, 1 << 50].into_iter().flat_map(|px| [(px, 1, 1, 10_000), (px, 1, 1, 9_999)]))
        {
            assert_eq!(terms(m, bp).initial(Px(px), Qty(qty)).map(i128::from), Some(exact(px, qty, m, bp)));
        }
    }
}

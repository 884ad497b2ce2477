//! Order commands: place, cancel, reduce, move, the close of the trading day; and stop
//! triggering.
//!
//! Risk is checked here, before anything changes: a buy reserves its worst case in the
//! quote asset (limit price × quantity plus the taker fee, or its whole budget for a
//! market buy), a sell reserves its base quantity. Matching (in `matching.rs`) then
//! settles each fill against those reservations.
//!
//! GTC and Day orders may rest ([`Tif::rests`]); they differ only at the close of the
//! trading day, when [`CommandBody::CloseDay`](crate::command::CommandBody::CloseDay)
//! expires every open Day order: it scans the open order records (O(open orders), once
//! a day) and expires the Day ones by symbol id, then order id, never in hash-map order.

use crate::book::{Book, RestingOrder};
use crate::command::{OrderKind, OrderRequest, SymbolSpec, Tif};
use crate::engine::{Engine, OrderRecord, OrderStatus, StopOrder};
use crate::event::{CancelReason, Event};
use crate::margin::MarginTerms;
use crate::matching::Taker;
use crate::reject::Reject;
use crate::types::{
    amount_from_i128, notional, AccountId, Amount, AssetId, OrderId, Px, Qty, Side, SymbolId, Timestamp,
};

/// What a buy at `px` for `qty` reserves: its notional plus the taker fee it may pay.
pub(crate) fn hold_buy(spec: &SymbolSpec, px: Px, qty: Qty) -> Option<Amount> {
    let fee = i128::from(spec.fee_taker.0) * i128::from(qty.0 / spec.lot.0);
    amount_from_i128(notional(px, qty) + fee)
}

/// What a resting order currently holds.
pub(crate) fn hold_resting(spec: &SymbolSpec, margin: Option<MarginTerms>, order: &RestingOrder) -> (AssetId, Amount) {
    if let Some(terms) = margin {
        let hold = terms.hold(order.px, order.qty_remaining()).expect("hold fitted when placed");
        return (spec.quote, Amount(hold));
    }
    match order.side {
        Side::Buy => (spec.quote, hold_buy(spec, order.px, order.qty_remaining()).expect("hold fitted when placed")),
        Side::Sell => (spec.base, Amount(order.qty_remaining().0)),
    }
}

/// What a new order reserves, by asset.
pub(crate) fn hold_request(
    spec: &SymbolSpec,
    margin: Option<MarginTerms>,
    request: &OrderRequest,
) -> Result<(AssetId, Amount), Reject> {
    if let Some(terms) = margin {
        let (limit, _) = request.kind.limit_and_budget();
        let hold = terms.hold(terms.hold_px(limit), request.qty).ok_or(Reject::AmountOverflow)?;
        return Ok((spec.quote, Amount(hold)));
    }
    if request.side == Side::Sell {
        return Ok((spec.base, Amount(request.qty.0)));
    }
    let amount = match request.kind {
        OrderKind::Limit { px } | OrderKind::StopLimit { px, .. } => {
            hold_buy(spec, px, request.qty).ok_or(Reject::AmountOverflow)?
        }
        OrderKind::Market { budget } | OrderKind::StopMarket { budget, .. } => {
            budget.ok_or(Reject::MarketBuyRequiresBudget)?
        }
    };
    Ok((spec.quote, amount))
}

pub(crate) fn check_px(spec: &SymbolSpec, px: Px) -> Result<(), Reject> {
    if px.0 % spec.tick.0 != 0 {
        return Err(Reject::PxMustBeMultipleOfTick);
    }
    if px < spec.px_min || px > spec.px_max {
        return Err(Reject::PxOutOfBounds);
    }
    Ok(())
}

fn check_qty(spec: &SymbolSpec, qty: Qty) -> Result<(), Reject> {
    if qty.0 <= 0 {
        return Err(Reject::QtyMustBePositive);
    }
    if qty.0 % spec.lot.0 != 0 {
        return Err(Reject::QtyMustBeMultipleOfLot);
    }
    Ok(())
}

/// The shape rules of an order, independent of balances and the book.
fn check_request(spec: &SymbolSpec, margin: bool, request: &OrderRequest) -> Result<(), Reject> {
    check_qty(spec, request.qty)?;
    if margin && request.kind.limit_and_budget().1.is_some() {
        return Err(Reject::BudgetNotForMargin);
    }
    let (limit, budget) = match request.kind {
        OrderKind::Limit { px } => (Some(px), None),
        OrderKind::Market { budget } => (None, budget),
        OrderKind::StopLimit { trigger, px } => {
            check_px(spec, trigger)?;
            (Some(px), None)
        }
        OrderKind::StopMarket { trigger, budget } => {
            check_px(spec, trigger)?;
            (None, budget)
        }
    };
    match limit {
        Some(px) => check_px(spec, px)?,
        None if request.tif.rests() => return Err(Reject::MarketOrderCannotRest),
        None => {}
    }
    if let Some(budget) = budget {
        if budget.0 <= 0 {
            return Err(Reject::AmountMustBePositive);
        }
        if request.side == Side::Sell && request.tif != Tif::Fok {
            return Err(Reject::BudgetRequiresMarketOrFok);
        }
    } else if limit.is_none() && request.side == Side::Buy && !margin {
        // A margin order holds margin at `px_max` instead.
        return Err(Reject::MarketBuyRequiresBudget);
    }
    // GTC or Day: the reject names predate Day and keep their stable names.
    let resting_limit = matches!(request.kind, OrderKind::Limit { .. }) && request.tif.rests();
    if request.post_only && !resting_limit {
        return Err(Reject::PostOnlyRequiresGtcLimit);
    }
    if let Some(display) = request.display_qty {
        if !resting_limit {
            return Err(Reject::IcebergRequiresGtcLimit);
        }
        if display.0 <= 0 || display.0 % spec.lot.0 != 0 || display > request.qty {
            return Err(Reject::DisplayQtyInvalid);
        }
    }
    Ok(())
}

/// What a spot order reserves, by asset, after the same shape checks the engine's
/// place runs: the account groups of a partitioned exchange (`bourse-shard`) take the
/// hold before the order reaches its symbol's book.
pub fn spot_hold(spec: &SymbolSpec, request: &OrderRequest) -> Result<(AssetId, Amount), Reject> {
    check_request(spec, false, request)?;
    hold_request(spec, None, request)
}

impl<B: Book> Engine<B> {
    pub(crate) fn place(
        &mut self,
        request: &OrderRequest,
        ts: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        let holder = self.active_account(request.account)?;
        let symbol = self.symbol(request.symbol)?;
        let spec = &symbol.spec;
        check_request(spec, symbol.margin.is_some(), request)?;
        let stop = request.kind.trigger().is_some();
        let may_rest = stop || request.tif.rests();
        if may_rest && holder.open_orders >= self.config.orders_per_account_max {
            return Err(Reject::OpenOrdersLimit);
        }
        let margin = self.margin_terms(request.symbol);
        let hold = match &margin {
            // The margin checks include the hold's.
            Some(terms) => (spec.quote, Amount(self.margin_check_place(request, terms)?)),
            None => {
                let hold = hold_request(spec, None, request)?;
                if holder.balance(hold.0).available < hold.1 {
                    return Err(Reject::BalanceInsufficient);
                }
                hold
            }
        };
        if let OrderKind::Limit { px } = request.kind {
            let best = symbol.book.best(request.side.opposite());
            if request.post_only && best.is_some_and(|best| request.side.crosses(px, best)) {
                return Err(Reject::PostOnlyWouldTrade);
            }
        }
        if !stop && request.tif == Tif::Fok && !self.fok_fillable(request) {
            return Err(Reject::FokCannotFill);
        }

        let id = OrderId(self.next_order_id);
        self.next_order_id += 1;
        events.push(Event::Accepted {
            order: id,
            account: request.account,
            symbol: request.symbol,
            side: request.side,
            kind: request.kind,
            qty: request.qty,
            ts,
        });
        self.shift_hold(request.account, hold.0, hold.1 .0, events);
        self.orders.insert(id, new_record(id, request, stop, ts));
        if margin.is_some() {
            self.position_orders(request.account, request.symbol, request.side, request.qty.0);
        }
        if stop {
            self.accounts[request.account.0 as usize].open_orders += 1;
            self.add_stop(StopOrder { id, request: *request, ts });
            self.trigger_stops(request.symbol, ts, events);
        } else if self.execute_order(id, request, ts, events) {
            self.trigger_stops(request.symbol, ts, events);
        }
        Ok(id.0)
    }

    /// Matches an accepted order, then rests or cancels what is left. Its funds are
    /// already reserved. Returns whether it traded.
    pub(crate) fn execute_order(
        &mut self,
        id: OrderId,
        request: &OrderRequest,
        ts: Timestamp,
        events: &mut Vec<Event>,
    ) -> bool {
        let sym = request.symbol.0 as usize;
        let mut taker = Taker::new(id, request, ts);
        let stopped = self.match_taker(request.symbol, &mut taker, events);
        assert!(
            request.tif != Tif::Fok || taker.qty.0 == 0,
            "order {id}: the fill-or-kill check passed but matching left {} unfilled",
            taker.qty
        );
        // What the order still holds, worked out only where it is given back (an order
        // that rests keeps it).
        let hold_left =
            |engine: &Self| taker.hold_remaining(&engine.symbols[sym].spec, engine.margin_terms(request.symbol));
        if taker.qty.0 == 0 {
            let hold_left = hold_left(self);
            if hold_left.1 .0 > 0 {
                // A market buy that spent less than its budget gets the rest back.
                self.shift_hold(request.account, hold_left.0, -hold_left.1 .0, events);
            }
            self.close_record(id, OrderStatus::Filled);
            return taker.traded;
        }
        match (request.kind, stopped) {
            (OrderKind::Limit { px }, None) if request.tif.rests() => self.rest(request, id, px, taker.qty, ts, events),
            _ => {
                let reason = stopped.unwrap_or(CancelReason::Unfilled);
                self.cancel_remainder(
                    id,
                    request.account,
                    (request.symbol, request.side),
                    hold_left(self),
                    taker.qty,
                    reason,
                    events,
                );
            }
        }
        taker.traded
    }

    fn rest(&mut self, request: &OrderRequest, id: OrderId, px: Px, qty: Qty, ts: Timestamp, events: &mut Vec<Event>) {
        let display = request.display_qty.unwrap_or(Qty::ZERO);
        let qty_visible = if display.0 > 0 { display.min(qty) } else { qty };
        let order = RestingOrder {
            id,
            account: request.account,
            side: request.side,
            px,
            qty_visible,
            qty_hidden: Qty(qty.0 - qty_visible.0),
            display,
            ts,
            stp: request.stp,
            post_only: request.post_only,
        };
        self.symbols[request.symbol.0 as usize].book.insert(order);
        self.accounts[request.account.0 as usize].open_orders += 1;
        events.push(Event::Rested { order: id, symbol: request.symbol, side: request.side, px, qty_visible });
    }

    fn add_stop(&mut self, stop: StopOrder) {
        let filed = self.symbols[stop.request.symbol.0 as usize].stops.insert(stop);
        assert!(filed, "only stop orders wait for a trigger");
    }

    fn remove_stop(&mut self, sym: SymbolId, id: OrderId) -> StopOrder {
        self.symbols[sym.0 as usize].stops.remove(id).expect("stop exists")
    }

    /// Fires every stop whose trigger the last trade price has reached, oldest order
    /// first, and repeats while the triggered orders' own trades reach more triggers.
    pub(crate) fn trigger_stops(&mut self, sym: SymbolId, ts: Timestamp, events: &mut Vec<Event>) {
        loop {
            let symbol = &self.symbols[sym.0 as usize];
            let Some(last) = symbol.last_px else { return };
            let mut fired: Vec<OrderId> =
                symbol.stops.buys.range(..=(last, OrderId(u64::MAX))).map(|&(_, id)| id).collect();
            fired.extend(symbol.stops.sells.range((last, OrderId(0))..).map(|&(_, id)| id));
            if fired.is_empty() {
                return;
            }
            fired.sort_unstable();
            for id in fired {
                self.fire_stop(sym, id, last, ts, events);
            }
        }
    }

    fn fire_stop(&mut self, sym: SymbolId, id: OrderId, last: Px, ts: Timestamp, events: &mut Vec<Event>) {
        let stop = self.remove_stop(sym, id);
        events.push(Event::Triggered { order: id, last_px: last });
        let account = stop.request.account;
        self.accounts[account.0 as usize].open_orders -= 1;
        let mut request = stop.request;
        request.kind = match request.kind {
            OrderKind::StopLimit { px, .. } => OrderKind::Limit { px },
            OrderKind::StopMarket { budget, .. } => OrderKind::Market { budget },
            other => other,
        };
        self.orders.get_mut(&id).expect("stop has a record").status = OrderStatus::Open;
        if request.tif == Tif::Fok && !self.fok_fillable(&request) {
            let hold = hold_request(&self.symbols[sym.0 as usize].spec, self.margin_terms(sym), &stop.request)
                .expect("hold fitted when placed");
            self.cancel_remainder(id, account, (sym, request.side), hold, request.qty, CancelReason::Unfilled, events);
            return;
        }
        self.execute_order(id, &request, ts, events);
    }

    /// Finds an order of `account` in a symbol's book, telling apart unknown orders,
    /// other accounts' orders and pending stops.
    fn owned_resting(&self, account: AccountId, sym: SymbolId, id: OrderId) -> Result<RestingOrder, Reject> {
        let symbol = self.symbol(sym)?;
        let order = match symbol.book.get(id) {
            Some(order) => *order,
            None => {
                return Err(match symbol.stops.by_id.get(&id) {
                    Some(stop) if stop.request.account != account => Reject::OrderNotOwned,
                    Some(_) => Reject::OrderIsStop,
                    None => Reject::OrderUnknown,
                })
            }
        };
        if order.account != account {
            return Err(Reject::OrderNotOwned);
        }
        Ok(order)
    }

    pub(crate) fn cancel(
        &mut self,
        account: AccountId,
        sym: SymbolId,
        id: OrderId,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        self.account(account)?;
        let order = match self.owned_resting(account, sym, id) {
            Ok(order) => order,
            Err(Reject::OrderIsStop) => {
                self.cancel_stop(sym, id, CancelReason::Requested, events);
                return Ok(id.0);
            }
            Err(reject) => return Err(reject),
        };
        self.cancel_resting(sym, order.id, CancelReason::Requested, events);
        Ok(id.0)
    }

    /// Takes a pending stop out of its symbol's stops and releases what it held.
    pub(crate) fn cancel_stop(&mut self, sym: SymbolId, id: OrderId, reason: CancelReason, events: &mut Vec<Event>) {
        let stop = self.remove_stop(sym, id);
        let account = stop.request.account;
        let hold = hold_request(&self.symbols[sym.0 as usize].spec, self.margin_terms(sym), &stop.request)
            .expect("hold fitted when placed");
        self.accounts[account.0 as usize].open_orders -= 1;
        self.cancel_remainder(id, account, (sym, stop.request.side), hold, stop.request.qty, reason, events);
    }

    /// The close of the trading day: every open Day order expires (resting ones leave
    /// their book, pending stops their trigger index), by symbol id then order id, each
    /// releasing its hold exactly as a cancel would. GTC orders are untouched. Then
    /// every margin position's variation margin is settled at its mark (`margin.rs`).
    /// Returns how many orders expired.
    pub(crate) fn close_day(&mut self, events: &mut Vec<Event>) -> u64 {
        let mut day: Vec<(SymbolId, OrderId, OrderStatus)> = self
            .orders
            .values()
            .filter(|record| record.tif == Tif::Day)
            .map(|record| (record.symbol, record.id, record.status))
            .collect();
        day.sort_unstable_by_key(|&(sym, id, _)| (sym, id));
        for &(sym, id, status) in &day {
            match status {
                OrderStatus::Open => self.cancel_resting(sym, id, CancelReason::Expired, events),
                OrderStatus::Pending => self.cancel_stop(sym, id, CancelReason::Expired, events),
                closed => unreachable!("order {id} is {closed:?} but has an open record"),
            }
        }
        self.settle_margin(events);
        self.days_closed += 1;
        day.len() as u64
    }

    /// Takes a resting order out of its book and releases what it held.
    pub(crate) fn cancel_resting(&mut self, sym: SymbolId, id: OrderId, reason: CancelReason, events: &mut Vec<Event>) {
        let symbol = &mut self.symbols[sym.0 as usize];
        let order = symbol.book.remove(id).expect("cancelled order rests");
        let margin = symbol.margin.as_ref().map(|m| MarginTerms::of(&symbol.spec, &m.spec));
        let hold = hold_resting(&symbol.spec, margin, &order);
        self.accounts[order.account.0 as usize].open_orders -= 1;
        self.cancel_remainder(id, order.account, (sym, order.side), hold, order.qty_remaining(), reason, events);
    }

    pub(crate) fn reduce(
        &mut self,
        account: AccountId,
        sym: SymbolId,
        id: OrderId,
        qty_by: Qty,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        self.account(account)?;
        let order = self.owned_resting(account, sym, id)?;
        let spec = &self.symbols[sym.0 as usize].spec;
        check_qty(spec, qty_by)?;
        if qty_by >= order.qty_remaining() {
            self.cancel_resting(sym, id, CancelReason::ReducedToZero, events);
            return Ok(id.0);
        }
        let margin = self.margin_terms(sym);
        let released = match (margin, order.side) {
            (Some(terms), _) => (spec.quote, Amount(terms.release(order.px, order.qty_remaining(), qty_by))),
            (None, Side::Buy) => (spec.quote, hold_buy(spec, order.px, qty_by).expect("part of a hold that fitted")),
            (None, Side::Sell) => (spec.base, Amount(qty_by.0)),
        };
        if margin.is_some() {
            self.position_orders(account, sym, order.side, -qty_by.0);
        }
        self.symbols[sym.0 as usize].book.reduce(id, qty_by);
        self.orders.get_mut(&id).expect("resting order has a record").qty_reduced.0 += qty_by.0;
        events.push(Event::Reduced { order: id, qty_by, qty_remaining: Qty(order.qty_remaining().0 - qty_by.0) });
        self.shift_hold(account, released.0, -released.1 .0, events);
        Ok(id.0)
    }

    pub(crate) fn move_order(
        &mut self,
        account: AccountId,
        sym: SymbolId,
        id: OrderId,
        px: Px,
        ts: Timestamp,
        events: &mut Vec<Event>,
    ) -> Result<u64, Reject> {
        let holder = self.active_account(account)?;
        let order = self.owned_resting(account, sym, id)?;
        let symbol = &self.symbols[sym.0 as usize];
        let spec = &symbol.spec;
        check_px(spec, px)?;
        let best = symbol.book.best(order.side.opposite());
        if order.post_only && best.is_some_and(|best| order.side.crosses(px, best)) {
            return Err(Reject::PostOnlyWouldTrade);
        }
        let qty = order.qty_remaining();
        let margin = self.margin_terms(sym);
        let delta = match (margin, order.side) {
            // The fee part of the hold depends on the quantity only.
            (Some(terms), _) => terms.initial_change(order.px, px, qty).ok_or(Reject::AmountOverflow)?,
            (None, Side::Buy) => {
                // The taker-fee part of the hold depends on the quantity only, so the
                // hold changes by the price difference times the quantity.
                hold_buy(spec, px, qty).ok_or(Reject::AmountOverflow)?;
                (px.0 - order.px.0) * qty.0
            }
            (None, Side::Sell) => 0,
        };
        let quote = spec.quote;
        let slot = match margin {
            // A margin move changes its hold up or down as often (and in 28.5% of ec2020's
            // moves not at all, after rounding): its balance is found once, then checked
            // and changed without a branch on the change.
            Some(_) => {
                let slot = holder.balance_slot(quote).expect("a resting margin order holds cash");
                if delta > holder.balances[slot].1.available.0 {
                    return Err(Reject::BalanceInsufficient);
                }
                Some(slot)
            }
            None => {
                if delta > 0 && holder.balance(quote).available.0 < delta {
                    return Err(Reject::BalanceInsufficient);
                }
                None
            }
        };

        let crosses = best.is_some_and(|best| order.side.crosses(px, best));
        if crosses {
            self.symbols[sym.0 as usize].book.remove(id);
            self.accounts[account.0 as usize].open_orders -= 1;
        }
        events.push(Event::Moved { order: id, px });
        match slot {
            Some(slot) => self.shift_hold_at(account, quote, slot, delta, events),
            None if delta != 0 => self.shift_hold(account, quote, delta, events),
            None => {}
        }
        if !crosses {
            // The common case: nothing to trade, so the order changes level in place,
            // exactly as resting it again would.
            let qty_visible = if order.display.0 > 0 { order.display.min(qty) } else { qty };
            self.symbols[sym.0 as usize].book.reprice(id, px, qty_visible, Qty(qty.0 - qty_visible.0), ts);
            events.push(Event::Rested { order: id, symbol: sym, side: order.side, px, qty_visible });
            return Ok(id.0);
        }
        let request = OrderRequest {
            account,
            symbol: sym,
            side: order.side,
            kind: OrderKind::Limit { px },
            qty,
            // A resting order is GTC or Day; what rests again keeps its time in force.
            tif: self.orders.get(&id).expect("resting order has a record").tif,
            post_only: order.post_only,
            display_qty: (order.display.0 > 0).then_some(order.display),
            stp: order.stp,
        };
        if self.execute_order(id, &request, ts, events) {
            self.trigger_stops(sym, ts, events);
        }
        Ok(id.0)
    }
}

pub(crate) fn new_record(id: OrderId, request: &OrderRequest, stop: bool, ts: Timestamp) -> OrderRecord {
    OrderRecord {
        id,
        account: request.account,
        symbol: request.symbol,
        side: request.side,
        kind: request.kind,
        tif: request.tif,
        qty: request.qty,
        qty_filled: Qty::ZERO,
        qty_reduced: Qty::ZERO,
        status: if stop { OrderStatus::Pending } else { OrderStatus::Open },
        ts,
        fills: Vec::new(),
        ts_closed: 0,
    }
}

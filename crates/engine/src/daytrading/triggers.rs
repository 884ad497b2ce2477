//! Triggers (spec section 5): storing them with their reservations, the arming index,
//! and firing.
//!
//! A trigger is armed when it has an amount and a price. Armed triggers are indexed per
//! symbol by arming order — the ledger-wide position of the command that last set their
//! amount or price — and evaluated in that order (a) on every real quote of their
//! symbol and (b) once when set while armed, against the cached quote if still valid.
//! A buy trigger fires when p ≤ its price and ⌊reserve / p⌋ ≥ 1 (with 0 shares it stays
//! armed); a sell trigger when p ≥ its price. Both execute at the quoted p. A firing
//! that would take a user's cash or holding past i64 does not happen (the trigger stays
//! armed); no real amount reaches that.

use crate::event::Event;
use crate::types::Side;

use super::event::{Action, DtEvent, UserIdx};
use super::grammar::{DtKind, Sym};
use super::ledger::{BuyTrigger, SellTrigger};
use super::DayTrading;

impl DayTrading {
    /// Stores `trigger` as the user's buy trigger on `symbol` (its reserve is already
    /// taken) and files it in arming order when it has a price.
    pub(super) fn buy_trigger_store(&mut self, user: UserIdx, symbol: Sym, trigger: BuyTrigger) {
        if let Some(old) = self.users[user as usize].buy_triggers.insert(symbol, trigger) {
            self.disarm(symbol, old.arm_seq);
        }
        if trigger.price.is_some() {
            self.armed.entry(symbol).or_default().insert(trigger.arm_seq, (user, Side::Buy));
        }
    }

    pub(super) fn buy_trigger_remove(&mut self, user: UserIdx, symbol: Sym) -> Option<BuyTrigger> {
        let trigger = self.users[user as usize].buy_triggers.remove(&symbol)?;
        self.disarm(symbol, trigger.arm_seq);
        Some(trigger)
    }

    /// Stores `trigger` as the user's sell trigger on `symbol`, moving the holding's
    /// reservation from `reserved_before` shares to the trigger's; files it when armed.
    pub(super) fn sell_trigger_store(
        &mut self,
        user: UserIdx,
        symbol: Sym,
        trigger: SellTrigger,
        reserved_before: i64,
    ) {
        let holder = &mut self.users[user as usize];
        let after = trigger.shares_reserved;
        holder.holding_update(symbol, |h| {
            h.release(reserved_before);
            h.reserve(after);
        });
        if let Some(old) = holder.sell_triggers.insert(symbol, trigger) {
            self.disarm(symbol, old.arm_seq);
        }
        if trigger.price.is_some() {
            self.armed.entry(symbol).or_default().insert(trigger.arm_seq, (user, Side::Sell));
        }
    }

    pub(super) fn sell_trigger_remove(&mut self, user: UserIdx, symbol: Sym) -> Option<SellTrigger> {
        let trigger = self.users[user as usize].sell_triggers.remove(&symbol)?;
        self.disarm(symbol, trigger.arm_seq);
        Some(trigger)
    }

    /// Takes a trigger out of the arming index (a no-op for one that was not armed).
    fn disarm(&mut self, symbol: Sym, arm_seq: u64) {
        if let Some(triggers) = self.armed.get_mut(&symbol) {
            triggers.remove(&arm_seq);
            if triggers.is_empty() {
                self.armed.remove(&symbol);
            }
        }
    }

    /// The user and transactionNum of the earliest-armed trigger on `symbol`.
    pub(super) fn armed_first(&self, symbol: Sym) -> Option<(UserIdx, u64)> {
        let (_, &(user, side)) = self.armed.get(&symbol)?.iter().next()?;
        let holder = &self.users[user as usize];
        let txn = match side {
            Side::Buy => holder.buy_triggers[&symbol].txn,
            Side::Sell => holder.sell_triggers[&symbol].txn,
        };
        Some((user, txn))
    }

    /// Evaluates every armed trigger on `symbol` at the quoted `price`, in arming order.
    pub(super) fn fire_on_quote(&mut self, symbol: Sym, price: i64, events: &mut Vec<Event>) {
        let Some(triggers) = self.armed.get(&symbol) else { return };
        let mut order = std::mem::take(&mut self.scratch);
        order.clear();
        order.extend(triggers.values().copied());
        for &(user, side) in &order {
            self.fire_if_reached(user, symbol, side, price, events);
        }
        self.scratch = order;
    }

    /// Evaluates one trigger just set while armed, against the cached quote if valid.
    pub(super) fn fire_at_arming(
        &mut self,
        user: UserIdx,
        symbol: Sym,
        side: Side,
        now_ms: u64,
        events: &mut Vec<Event>,
    ) {
        let holder = &self.users[user as usize];
        let armed = match side {
            Side::Buy => holder.buy_triggers.get(&symbol).is_some_and(|t| t.price.is_some()),
            Side::Sell => holder.sell_triggers.get(&symbol).is_some_and(|t| t.price.is_some()),
        };
        if !armed {
            return;
        }
        if let Some(cached) = self.quote_valid(symbol, now_ms) {
            self.fire_if_reached(user, symbol, side, cached.price, events);
        }
    }

    fn fire_if_reached(&mut self, user: UserIdx, symbol: Sym, side: Side, price: i64, events: &mut Vec<Event>) {
        match side {
            Side::Buy => self.fire_buy(user, symbol, price, events),
            Side::Sell => self.fire_sell(user, symbol, price, events),
        }
    }

    /// A buy trigger at p: the reserve leaves reserved cash, shares arrive, the leftover
    /// returns to available cash.
    fn fire_buy(&mut self, user: UserIdx, symbol: Sym, price: i64, events: &mut Vec<Event>) {
        let holder = &self.users[user as usize];
        let Some(trigger) = holder.buy_triggers.get(&symbol).copied() else { return };
        let Some(limit) = trigger.price else { return };
        let shares = trigger.reserve / price;
        if price > limit || shares < 1 || holder.holding(symbol).total().checked_add(shares).is_none() {
            return;
        }
        let cost = shares * price;
        let leftover = trigger.reserve - cost;
        self.buy_trigger_remove(user, symbol);
        let holder = &mut self.users[user as usize];
        holder.cash.spend_reserved(trigger.reserve);
        holder.cash.available += leftover;
        holder.holding_update(symbol, |h| h.available += shares);
        self.cash_traded -= i128::from(cost);
        *self.shares_net.entry(symbol).or_default() += i128::from(shares);
        let txn = trigger.txn;
        let command = DtKind::SetBuyTrigger;
        self.record(events, DtEvent::SystemEvent { user, txn, command, symbol, funds: cost });
        self.record(events, DtEvent::AccountTransaction { user, txn, action: Action::Remove, funds: cost });
        if leftover > 0 {
            self.record(events, DtEvent::AccountTransaction { user, txn, action: Action::Release, funds: leftover });
        }
    }

    /// A sell trigger at p: its reserved shares are sold for shares × p.
    fn fire_sell(&mut self, user: UserIdx, symbol: Sym, price: i64, events: &mut Vec<Event>) {
        let holder = &self.users[user as usize];
        let Some(trigger) = holder.sell_triggers.get(&symbol).copied() else { return };
        let Some(limit) = trigger.price else { return };
        let shares = trigger.shares_reserved;
        let proceeds = i64::try_from(i128::from(shares) * i128::from(price)).ok();
        let fits = proceeds.is_some_and(|p| holder.cash.total().checked_add(p).is_some());
        if price < limit || !fits {
            return;
        }
        let proceeds = proceeds.expect("checked");
        self.sell_trigger_remove(user, symbol);
        let holder = &mut self.users[user as usize];
        holder.holding_update(symbol, |h| h.spend_reserved(shares));
        holder.cash.available += proceeds;
        self.cash_traded += i128::from(proceeds);
        *self.shares_net.entry(symbol).or_default() -= i128::from(shares);
        let txn = trigger.txn;
        let command = DtKind::SetSellTrigger;
        self.record(events, DtEvent::SystemEvent { user, txn, command, symbol, funds: proceeds });
        self.record(events, DtEvent::AccountTransaction { user, txn, action: Action::Add, funds: proceeds });
    }
}

//! The sixteen commands' checks and effects (spec section 2), each a handler that
//! checks everything in the spec's order before it changes anything, then writes its
//! `accountTransaction` records as it moves cash.
//!
//! Every command first checks its argument count and userid, then (except `ADD` and
//! the global `DUMPLOG`) that the user exists; [`DayTrading::execute`] does that and
//! dispatches. Arithmetic: products of a price and a share count are computed in i128;
//! a result that would not fit in i64 cents (a user's cash or a holding beyond
//! 2^63 − 1) is refused as `invalid amount`, which no real amount reaches.

use crate::event::Event;
use crate::types::Side;

use super::event::{Action, DtEvent, DtReturn, UserIdx};
use super::grammar::{amount_parse, filename_check, userid_valid, DtError, DtKind, Sym};
use super::ledger::{BuyTrigger, DtUser, Pending, SellTrigger};
use super::request::DtCommand;
use super::DayTrading;

type Outcome = Result<DtReturn, DtError>;

/// A parsed `SYM` argument.
fn symbol_arg(text: &str) -> Result<Sym, DtError> {
    Sym::parse(text).ok_or(DtError::InvalidSymbol)
}

/// A parsed amount or price argument, in cents.
fn amount_arg(text: &str) -> Result<i64, DtError> {
    amount_parse(text).ok_or(DtError::InvalidAmount)
}

/// `a + b` when the result fits.
fn add(a: i64, b: i64) -> Result<i64, DtError> {
    a.checked_add(b).ok_or(DtError::InvalidAmount)
}

/// `shares × price`, which callers have bounded by an amount that fits.
fn product(shares: i64, price: i64) -> i64 {
    i64::try_from(i128::from(shares) * i128::from(price)).expect("bounded by an amount in i64")
}

impl DayTrading {
    /// Checks the argument count, the userid and the user's existence, then runs the
    /// command's handler.
    pub(super) fn execute(
        &mut self,
        command: &DtCommand,
        user: Option<UserIdx>,
        txn: u64,
        now_ms: u64,
        events: &mut Vec<Event>,
    ) -> Outcome {
        let args = &command.args;
        if command.is_global_dump() {
            return self.dump_global(command);
        }
        if args.len() != command.kind.arity() {
            return Err(DtError::InvalidArguments);
        }
        if !userid_valid(&args[0]) {
            return Err(DtError::InvalidUser);
        }
        if command.kind == DtKind::Add {
            return self.add(&args[0], &args[1], txn, events);
        }
        let user = user.ok_or(DtError::UnknownUser)?;
        let at = At { user, txn, now_ms };
        match command.kind {
            DtKind::Add => unreachable!("handled above"),
            DtKind::Quote => self.quote(&args[1], now_ms),
            DtKind::Buy => self.buy(at, &args[1], &args[2], events),
            DtKind::CommitBuy => self.commit_buy(at, events),
            DtKind::CancelBuy => self.cancel_buy(at, events),
            DtKind::Sell => self.sell(at, &args[1], &args[2]),
            DtKind::CommitSell => self.commit_sell(at, events),
            DtKind::CancelSell => self.cancel_sell(at),
            DtKind::SetBuyAmount => self.set_buy_amount(at, &args[1], &args[2], events),
            DtKind::SetBuyTrigger => self.set_buy_trigger(at, &args[1], &args[2], events),
            DtKind::CancelSetBuy => self.cancel_set_buy(at, &args[1], events),
            DtKind::SetSellAmount => self.set_sell_amount(at, &args[1], &args[2], events),
            DtKind::SetSellTrigger => self.set_sell_trigger(at, &args[1], &args[2], events),
            DtKind::CancelSetSell => self.cancel_set_sell(at, &args[1]),
            DtKind::DisplaySummary => Ok(DtReturn::Summary),
            DtKind::DumpLog => self.dump_user(command),
        }
    }

    fn user_mut(&mut self, user: UserIdx) -> &mut DtUser {
        &mut self.users[user as usize]
    }

    fn cash_record(&mut self, at: At, action: Action, funds: i64, events: &mut Vec<Event>) {
        debug_assert!(funds > 0, "an accountTransaction carries a positive amount");
        self.record(events, DtEvent::AccountTransaction { user: at.user, txn: at.txn, action, funds });
    }

    fn add(&mut self, name: &str, amount: &str, txn: u64, events: &mut Vec<Event>) -> Outcome {
        let amount = amount_arg(amount)?;
        let user = match self.user_index.get(name) {
            Some(&user) => user,
            None => {
                // Creating needs only the amount; a new user's cash is then just it.
                let user = self.users.len() as UserIdx;
                self.users.push(DtUser::new(name));
                self.user_index.insert(name.to_owned(), user);
                user
            }
        };
        let cash = self.users[user as usize].cash;
        if add(cash.total(), amount).is_err() {
            return Err(DtError::InvalidAmount);
        }
        self.user_mut(user).cash.available += amount;
        self.cash_added += i128::from(amount);
        self.cash_record(At { user, txn, now_ms: 0 }, Action::Add, amount, events);
        Ok(DtReturn::Cash { available: self.users[user as usize].cash.available })
    }

    fn quote(&mut self, symbol: &str, now_ms: u64) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let cached = self.quote_valid(symbol, now_ms).ok_or(DtError::QuoteUnavailable)?;
        Ok(DtReturn::Quote {
            symbol,
            price: cached.price,
            arrival_ms: cached.arrival_ms,
            quote_server_time: cached.quote_server_time,
        })
    }

    fn buy(&mut self, at: At, symbol: &str, amount: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let amount = amount_arg(amount)?;
        let holder = &self.users[at.user as usize];
        let replaced = holder.pending_buy.map_or(0, |p| p.money);
        if i128::from(holder.cash.available) + i128::from(replaced) < i128::from(amount) {
            return Err(DtError::InsufficientFunds);
        }
        let price = self.quote_valid(symbol, at.now_ms).ok_or(DtError::QuoteUnavailable)?.price;
        let shares = amount / price;
        if shares < 1 {
            return Err(DtError::AmountBelowPrice);
        }
        add(holder.holding(symbol).total(), shares)?;
        let cost = product(shares, price);
        let holder = self.user_mut(at.user);
        if let Some(old) = holder.pending_buy.take() {
            holder.cash.release(old.money);
            self.cash_record(at, Action::Release, old.money, events);
        }
        let holder = self.user_mut(at.user);
        holder.cash.reserve(cost);
        holder.pending_buy = Some(Pending { symbol, price, shares, money: cost, stamp_ms: at.now_ms });
        self.cash_record(at, Action::Reserve, cost, events);
        let expires_ms = at.now_ms + u64::from(self.config.pending_ttl_ms);
        Ok(DtReturn::Pending { symbol, price, shares, money: cost, expires_ms })
    }

    fn commit_buy(&mut self, at: At, events: &mut Vec<Event>) -> Outcome {
        let holder = &self.users[at.user as usize];
        let pending = holder.pending_buy.ok_or(DtError::NoPendingBuy)?;
        add(holder.holding(pending.symbol).total(), pending.shares)?;
        let holder = self.user_mut(at.user);
        holder.pending_buy = None;
        holder.cash.spend_reserved(pending.money);
        holder.holding_update(pending.symbol, |h| h.available += pending.shares);
        self.cash_traded -= i128::from(pending.money);
        *self.shares_net.entry(pending.symbol).or_default() += i128::from(pending.shares);
        self.cash_record(at, Action::Remove, pending.money, events);
        Ok(DtReturn::Settled {
            symbol: pending.symbol,
            shares: pending.shares,
            price: pending.price,
            money: pending.money,
        })
    }

    fn cancel_buy(&mut self, at: At, events: &mut Vec<Event>) -> Outcome {
        let holder = self.user_mut(at.user);
        let pending = holder.pending_buy.take().ok_or(DtError::NoPendingBuy)?;
        holder.cash.release(pending.money);
        self.cash_record(at, Action::Release, pending.money, events);
        Ok(DtReturn::ReleasedCash { symbol: pending.symbol, money: pending.money })
    }

    fn sell(&mut self, at: At, symbol: &str, amount: &str) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let amount = amount_arg(amount)?;
        let holder = &self.users[at.user as usize];
        let replaced = holder.pending_sell.filter(|p| p.symbol == symbol).map_or(0, |p| p.shares);
        let held = holder.holding(symbol).available + replaced;
        if held < 1 {
            return Err(DtError::InsufficientShares);
        }
        let price = self.quote_valid(symbol, at.now_ms).ok_or(DtError::QuoteUnavailable)?.price;
        if i128::from(held) * i128::from(price) < i128::from(amount) {
            return Err(DtError::InsufficientShares);
        }
        let shares = amount / price;
        if shares < 1 {
            return Err(DtError::AmountBelowPrice);
        }
        let proceeds = product(shares, price);
        add(holder.cash.total(), proceeds)?;
        let holder = self.user_mut(at.user);
        if let Some(old) = holder.pending_sell.take() {
            holder.holding_update(old.symbol, |h| h.release(old.shares));
        }
        holder.holding_update(symbol, |h| h.reserve(shares));
        holder.pending_sell = Some(Pending { symbol, price, shares, money: proceeds, stamp_ms: at.now_ms });
        let expires_ms = at.now_ms + u64::from(self.config.pending_ttl_ms);
        Ok(DtReturn::Pending { symbol, price, shares, money: proceeds, expires_ms })
    }

    fn commit_sell(&mut self, at: At, events: &mut Vec<Event>) -> Outcome {
        let holder = &self.users[at.user as usize];
        let pending = holder.pending_sell.ok_or(DtError::NoPendingSell)?;
        add(holder.cash.total(), pending.money)?;
        let holder = self.user_mut(at.user);
        holder.pending_sell = None;
        holder.holding_update(pending.symbol, |h| h.spend_reserved(pending.shares));
        holder.cash.available += pending.money;
        self.cash_traded += i128::from(pending.money);
        *self.shares_net.entry(pending.symbol).or_default() -= i128::from(pending.shares);
        self.cash_record(at, Action::Add, pending.money, events);
        Ok(DtReturn::Settled {
            symbol: pending.symbol,
            shares: pending.shares,
            price: pending.price,
            money: pending.money,
        })
    }

    fn cancel_sell(&mut self, at: At) -> Outcome {
        let holder = self.user_mut(at.user);
        let pending = holder.pending_sell.take().ok_or(DtError::NoPendingSell)?;
        holder.holding_update(pending.symbol, |h| h.release(pending.shares));
        Ok(DtReturn::ReleasedShares { symbol: pending.symbol, shares: pending.shares })
    }

    fn set_buy_amount(&mut self, at: At, symbol: &str, amount: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let amount = amount_arg(amount)?;
        let holder = &self.users[at.user as usize];
        let current = holder.buy_triggers.get(&symbol).copied();
        let replaced = current.map_or(0, |t| t.reserve);
        if i128::from(holder.cash.available) + i128::from(replaced) < i128::from(amount) {
            return Err(DtError::InsufficientFunds);
        }
        if let Some(old) = current {
            self.user_mut(at.user).cash.release(old.reserve);
            self.cash_record(at, Action::Release, old.reserve, events);
        }
        self.user_mut(at.user).cash.reserve(amount);
        self.cash_record(at, Action::Reserve, amount, events);
        let price = current.and_then(|t| t.price);
        let trigger = BuyTrigger { reserve: amount, price, arm_seq: self.arm_seq_next(), txn: at.txn };
        self.buy_trigger_store(at.user, symbol, trigger);
        self.fire_at_arming(at.user, symbol, Side::Buy, at.now_ms, events);
        Ok(DtReturn::Amount { symbol, amount })
    }

    fn set_buy_trigger(&mut self, at: At, symbol: &str, price: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let price = amount_arg(price)?;
        let current = self.users[at.user as usize].buy_triggers.get(&symbol).copied().ok_or(DtError::NoBuyTrigger)?;
        let trigger = BuyTrigger { price: Some(price), arm_seq: self.arm_seq_next(), txn: at.txn, ..current };
        self.buy_trigger_store(at.user, symbol, trigger);
        self.fire_at_arming(at.user, symbol, Side::Buy, at.now_ms, events);
        Ok(DtReturn::BuyTrigger { symbol, amount: current.reserve, price })
    }

    fn cancel_set_buy(&mut self, at: At, symbol: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let trigger = self.buy_trigger_remove(at.user, symbol).ok_or(DtError::NoBuyTrigger)?;
        self.user_mut(at.user).cash.release(trigger.reserve);
        self.cash_record(at, Action::Release, trigger.reserve, events);
        Ok(DtReturn::ReleasedCash { symbol, money: trigger.reserve })
    }

    fn set_sell_amount(&mut self, at: At, symbol: &str, amount: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let amount = amount_arg(amount)?;
        let holder = &self.users[at.user as usize];
        let current = holder.sell_triggers.get(&symbol).copied();
        let reserved = current.map_or(0, |t| t.shares_reserved);
        let usable = holder.holding(symbol).available + reserved;
        if usable < 1 {
            return Err(DtError::InsufficientShares);
        }
        let price = current.and_then(|t| t.price);
        let shares = match price {
            Some(price) => {
                let shares = amount / price;
                if shares < 1 {
                    return Err(DtError::AmountBelowPrice);
                }
                if shares > usable {
                    return Err(DtError::InsufficientShares);
                }
                shares
            }
            None => 0,
        };
        let trigger = SellTrigger { amount, price, shares_reserved: shares, arm_seq: self.arm_seq_next(), txn: at.txn };
        self.sell_trigger_store(at.user, symbol, trigger, reserved);
        self.fire_at_arming(at.user, symbol, Side::Sell, at.now_ms, events);
        Ok(DtReturn::Amount { symbol, amount })
    }

    fn set_sell_trigger(&mut self, at: At, symbol: &str, price: &str, events: &mut Vec<Event>) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let price = amount_arg(price)?;
        let holder = &self.users[at.user as usize];
        let current = holder.sell_triggers.get(&symbol).copied().ok_or(DtError::NoSellTrigger)?;
        let shares = current.amount / price;
        if shares < 1 {
            return Err(DtError::AmountBelowPrice);
        }
        if holder.holding(symbol).available + current.shares_reserved < shares {
            return Err(DtError::InsufficientShares);
        }
        let trigger = SellTrigger {
            price: Some(price),
            shares_reserved: shares,
            arm_seq: self.arm_seq_next(),
            txn: at.txn,
            ..current
        };
        self.sell_trigger_store(at.user, symbol, trigger, current.shares_reserved);
        self.fire_at_arming(at.user, symbol, Side::Sell, at.now_ms, events);
        Ok(DtReturn::SellTrigger { symbol, amount: current.amount, price, shares })
    }

    fn cancel_set_sell(&mut self, at: At, symbol: &str) -> Outcome {
        let symbol = symbol_arg(symbol)?;
        let trigger = self.sell_trigger_remove(at.user, symbol).ok_or(DtError::NoSellTrigger)?;
        let shares = trigger.shares_reserved;
        if shares > 0 {
            self.user_mut(at.user).holding_update(symbol, |h| h.release(shares));
        }
        Ok(DtReturn::ReleasedShares { symbol, shares })
    }

    /// `DUMPLOG,userid,filename`: the user (checked by the caller), then the caller's
    /// right, then the file name. The service writes nothing until the entry commits.
    fn dump_user(&self, command: &DtCommand) -> Outcome {
        if !(command.admin || command.caller == command.args[0]) {
            return Err(DtError::NotAuthorized);
        }
        filename_check(&command.args[1]).ok_or(DtError::InvalidFilename)?;
        Ok(DtReturn::Dump { audit_seq: self.dump_point() })
    }

    /// `DUMPLOG,filename`: administrators only, then the file name.
    fn dump_global(&self, command: &DtCommand) -> Outcome {
        if !command.admin {
            return Err(DtError::NotAuthorized);
        }
        filename_check(&command.args[0]).ok_or(DtError::InvalidFilename)?;
        Ok(DtReturn::Dump { audit_seq: self.dump_point() })
    }

    /// The sequence number of the current command's `userCommand` record: the dump
    /// holds every record up to and including it.
    fn dump_point(&self) -> u64 {
        self.user_command_seq
    }

    /// The next arming-order position.
    fn arm_seq_next(&mut self) -> u64 {
        self.arm_seq += 1;
        self.arm_seq
    }
}

/// Who and when a handler acts for.
#[derive(Clone, Copy)]
pub(super) struct At {
    pub user: UserIdx,
    pub txn: u64,
    pub now_ms: u64,
}

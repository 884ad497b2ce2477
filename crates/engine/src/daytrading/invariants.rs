//! The ledger checks itself (run after every command in tests): see the module header
//! of `daytrading` for the list. Panics on the first broken rule.

use std::collections::BTreeMap;

use crate::types::Side;

use super::grammar::Sym;
use super::{DayTrading, UserIdx};

impl DayTrading {
    pub fn check_invariants(&self) {
        let mut cash_total: i128 = 0;
        let mut shares: BTreeMap<Sym, i128> = BTreeMap::new();
        let mut armed_count = 0usize;
        for (index, user) in self.users.iter().enumerate() {
            let name = &user.name;
            assert_eq!(self.user_index.get(name), Some(&(index as UserIdx)), "user {name} not indexed");
            assert!(user.cash.available >= 0 && user.cash.reserved >= 0, "user {name}: negative cash");
            assert!(user.cash.available.checked_add(user.cash.reserved).is_some(), "user {name}: cash overflows");
            let mut cash_held: i128 = user.pending_buy.map_or(0, |p| i128::from(p.money));
            if let Some(p) = user.pending_buy {
                assert!(p.shares >= 1 && i128::from(p.money) == i128::from(p.shares) * i128::from(p.price));
            }
            for (symbol, trigger) in &user.buy_triggers {
                assert!(trigger.reserve > 0, "user {name}: buy trigger {symbol} reserves nothing");
                cash_held += i128::from(trigger.reserve);
                self.check_armed(*symbol, trigger.price.is_some(), trigger.arm_seq, index, Side::Buy);
                armed_count += usize::from(trigger.price.is_some());
            }
            assert_eq!(cash_held, i128::from(user.cash.reserved), "user {name}: reserved cash is not the holds");
            cash_total += i128::from(user.cash.available) + i128::from(user.cash.reserved);
            let mut shares_held: BTreeMap<Sym, i64> = BTreeMap::new();
            if let Some(p) = user.pending_sell {
                assert!(p.shares >= 1 && i128::from(p.money) == i128::from(p.shares) * i128::from(p.price));
                *shares_held.entry(p.symbol).or_default() += p.shares;
            }
            for (symbol, trigger) in &user.sell_triggers {
                let expected = trigger.price.map_or(0, |price| trigger.amount / price);
                assert_eq!(trigger.shares_reserved, expected, "user {name}: sell trigger {symbol} reservation");
                *shares_held.entry(*symbol).or_default() += trigger.shares_reserved;
                self.check_armed(*symbol, trigger.price.is_some(), trigger.arm_seq, index, Side::Sell);
                armed_count += usize::from(trigger.price.is_some());
            }
            for (symbol, held) in &user.holdings {
                assert!(held.available >= 0 && held.reserved >= 0, "user {name}: negative {symbol} shares");
                assert!(held.available + held.reserved > 0, "user {name}: empty {symbol} holding kept");
                assert_eq!(held.reserved, shares_held.remove(symbol).unwrap_or(0), "user {name}: reserved {symbol}");
                *shares.entry(*symbol).or_default() += i128::from(held.total());
            }
            assert!(shares_held.values().all(|&n| n == 0), "user {name}: shares held without a holding");
            assert!(user.history.len() <= self.config.summary_history as usize + 1, "user {name}: history too long");
        }
        assert_eq!(armed_count, self.armed.values().map(|t| t.len()).sum::<usize>(), "arming index has extras");
        assert!(self.armed.values().all(|t| !t.is_empty()), "empty arming list kept");
        assert!(self.armed.values().flat_map(|t| t.keys()).all(|&seq| seq <= self.arm_seq));
        assert_eq!(cash_total, self.cash_added + self.cash_traded, "cash is not added plus sold minus bought");
        for (symbol, net) in &self.shares_net {
            assert_eq!(shares.remove(symbol).unwrap_or(0), *net, "{symbol} shares are not bought minus sold");
        }
        assert!(shares.is_empty(), "shares held that were never bought");
        assert!(self.users.len() <= self.config.users_max as usize, "more users than the bound");
    }

    fn check_armed(&self, symbol: Sym, priced: bool, arm_seq: u64, user: usize, side: Side) {
        let filed = self.armed.get(&symbol).and_then(|t| t.get(&arm_seq));
        if priced {
            assert_eq!(filed, Some(&(user as UserIdx, side)), "armed trigger {symbol} not filed");
        } else {
            assert!(filed.is_none_or(|f| *f != (user as UserIdx, side)), "unarmed trigger {symbol} filed");
        }
    }
}

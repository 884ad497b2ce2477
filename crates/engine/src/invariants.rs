//! `check_invariants`: the engine checks itself.
//!
//! Run after every command in property tests and fuzzing; it panics with the broken
//! rule. What it checks:
//! - every book's own structure (levels ordered and non-empty, links, index);
//! - no book is crossed after matching;
//! - each balance's `reserved` equals the holds of that account's open orders and stops;
//! - no balance is negative;
//! - per asset: the sum of all balances plus fees collected equals the supply;
//! - every open order has a record that agrees: filled + reduced + open = placed;
//! - each account's open-order count agrees with the books and stops;
//! - the external-id index agrees with the accounts' ids;
//! - closed order records carry a closing stamp at or after their acceptance, open
//!   ones none; only Day orders are ever expired.

use std::collections::BTreeMap;

use crate::book::Book;
use crate::command::Tif;
use crate::engine::{Engine, OrderStatus};
use crate::margin::MarginTerms;
use crate::order::{hold_request, hold_resting};
use crate::types::{AccountId, AssetId, Side};

impl<B: Book> Engine<B> {
    pub fn check_invariants(&self) {
        self.day_trading.check_invariants();
        let mut holds: BTreeMap<(AccountId, AssetId), i128> = BTreeMap::new();
        let mut open: BTreeMap<AccountId, u32> = BTreeMap::new();
        // Open order quantity per (account, symbol, side) in margin symbols.
        let mut pending: BTreeMap<(AccountId, usize, usize), i64> = BTreeMap::new();
        for (sym, symbol) in self.symbols.iter().enumerate() {
            let margin = symbol.margin.as_ref().map(|m| MarginTerms::of(&symbol.spec, &m.spec));
            symbol.book.check_invariants();
            if let (Some(bid), Some(ask)) = (symbol.book.best(Side::Buy), symbol.book.best(Side::Sell)) {
                assert!(bid < ask, "book {} crossed: bid {bid} ask {ask}", symbol.spec.name);
            }
            for side in [Side::Buy, Side::Sell] {
                symbol.book.visit(side, |order| {
                    let (asset, amount) = hold_resting(&symbol.spec, margin, order);
                    if margin.is_some() {
                        *pending.entry((order.account, sym, order.side.index())).or_default() +=
                            order.qty_remaining().0;
                    }
                    *holds.entry((order.account, asset)).or_default() += i128::from(amount.0);
                    *open.entry(order.account).or_default() += 1;
                    let record = self.orders.get(&order.id).expect("resting order has a record");
                    assert_eq!(record.status, OrderStatus::Open, "resting order {} not open", order.id);
                    assert_eq!(
                        record.qty_filled.0 + record.qty_reduced.0 + order.qty_remaining().0,
                        record.qty.0,
                        "order {} quantities do not add up",
                        order.id
                    );
                    true
                });
            }
            for stop in symbol.stops.by_id.values() {
                let request = &stop.request;
                assert!(request.kind.trigger().is_some(), "stop {} is not a stop order", stop.id);
                let (asset, amount) = hold_request(&symbol.spec, margin, request).expect("hold fitted when placed");
                if margin.is_some() {
                    *pending.entry((request.account, sym, request.side.index())).or_default() += request.qty.0;
                }
                *holds.entry((request.account, asset)).or_default() += i128::from(amount.0);
                *open.entry(request.account).or_default() += 1;
                assert_eq!(self.orders[&stop.id].status, OrderStatus::Pending, "stop {} not pending", stop.id);
            }
        }
        let mut totals = vec![0i128; self.assets.len()];
        let mut externals = 0;
        for (i, account) in self.accounts.iter().enumerate() {
            let id = AccountId(i as u32);
            if let Some(external_id) = account.external_id {
                externals += 1;
                assert_eq!(
                    self.accounts_by_external.get(&external_id),
                    Some(&id),
                    "account {id} external id unindexed"
                );
            }
            assert_eq!(account.open_orders, open.get(&id).copied().unwrap_or(0), "account {id} open-order count wrong");
            assert!(account.balances.windows(2).all(|w| w[0].0 < w[1].0), "account {id} balances unsorted");
            for (asset, balance) in &account.balances {
                assert!(balance.available.0 >= 0 && balance.reserved.0 >= 0, "account {id} negative in asset {asset}");
                let held = holds.get(&(id, *asset)).copied().unwrap_or(0);
                assert_eq!(
                    i128::from(balance.reserved.0),
                    held,
                    "account {id} reserved {asset} disagrees with its orders"
                );
                totals[asset.0 as usize] += i128::from(balance.available.0) + i128::from(balance.reserved.0);
            }
        }
        self.check_margin(&pending, &mut totals);
        for (i, asset) in self.assets.iter().enumerate() {
            assert!(asset.fees.0 >= 0, "fees of {} negative", asset.name);
            assert!(asset.bad_debt.0 >= 0, "bad debt of {} negative", asset.name);
            assert_eq!(
                totals[i] + i128::from(asset.fees.0) - i128::from(asset.bad_debt.0),
                i128::from(asset.supply.0),
                "asset {} not conserved",
                asset.name
            );
        }
        assert_eq!(self.accounts_by_external.len(), externals, "external-id index has strays");
        assert!(self.orders_closed.len() <= self.config.orders_closed_max as usize);
        for record in self.orders.values() {
            assert_eq!(record.ts_closed, 0, "open order {} has a closing stamp", record.id);
        }
        for record in &self.orders_closed {
            let (id, status) = (record.id, record.status);
            assert!(
                matches!(status, OrderStatus::Filled | OrderStatus::Cancelled | OrderStatus::Expired),
                "order {id} closed but {status:?}"
            );
            assert!(!self.orders.contains_key(&id), "order {id} both open and closed");
            assert!(record.ts_closed >= record.ts, "order {id} closed before it was accepted");
            assert!(status != OrderStatus::Expired || record.tif == Tif::Day, "order {id} expired but is not Day");
        }
        let live: usize = self.symbols.iter().map(|s| s.book.len() + s.stops.by_id.len()).sum();
        assert_eq!(self.orders.len(), live, "open order records disagree with books and stops");
        assert_eq!(self.sessions.len(), self.session_slots.len(), "session index disagrees");
        assert!(self.sessions.len() <= self.config.clients_max as usize, "more clients than clients_max");
        // Each sweep forgets the clients idle for the expiry and the next comes an
        // eighth of it later, so no record is older than 9/8 of it.
        let expiry = u64::from(self.config.client_expiry_secs) * 1_000_000_000;
        for (slot, (client, session)) in self.sessions.iter().enumerate() {
            assert_eq!(self.session_slots.get(client), Some(&(slot as u32)), "session index disagrees");
            assert!(session.ts_last <= self.ts_last, "client {client} applied a command after the last one");
            assert!(self.ts_last - session.ts_last < expiry + expiry / 8, "client {client} outlived its expiry");
        }
    }
}

impl<B: Book> Engine<B> {
    /// Margin positions and the liquidation index: every position's open order
    /// quantities match the books; sizes net to zero per symbol; ordinary accounts stay
    /// within the limit counting open orders as filled; each open position's index key
    /// is what it computes to now, and the index holds exactly those keys; no ordinary
    /// account is liquidatable once a command has ended. Subtracts every open
    /// position's cost from `totals` (see the conservation line in `margin.rs`).
    fn check_margin(&self, pending: &BTreeMap<(AccountId, usize, usize), i64>, totals: &mut [i128]) {
        let mut net = vec![0i128; self.symbols.len()];
        let mut keys = vec![(0usize, 0usize, 0usize); self.symbols.len()];
        let mut liquidatable = BTreeMap::new();
        for (i, account) in self.accounts.iter().enumerate() {
            let id = AccountId(i as u32);
            assert!(account.positions.windows(2).all(|w| w[0].0 < w[1].0), "account {id} positions unsorted");
            for (sym, position) in &account.positions {
                let symbol = &self.symbols[sym.0 as usize];
                let margin =
                    symbol.margin.as_ref().unwrap_or_else(|| panic!("account {id} has a position in spot {sym}"));
                assert!(!position.is_idle(), "account {id} keeps an idle position in {sym}");
                for (side, qty) in [(Side::Buy, position.buying), (Side::Sell, position.selling)] {
                    let open = pending.get(&(id, sym.0 as usize, side.index())).copied().unwrap_or(0);
                    assert_eq!(qty, open, "account {id} {side:?} quantity in {sym} disagrees with its orders");
                }
                net[sym.0 as usize] += i128::from(position.size);
                totals[symbol.spec.quote.0 as usize] -= i128::from(position.cost);
                if position.size == 0 {
                    assert_eq!(position.cost, 0, "account {id} flat in {sym} with a cost");
                }
                let exempt = self.insurers.contains(&(symbol.spec.quote, id));
                if !exempt {
                    let limit = margin.spec.position_limit.0;
                    assert!(
                        position.size + position.buying <= limit && position.selling - position.size <= limit,
                        "account {id} past the position limit in {sym}"
                    );
                }
                let totals = self.totals(id, symbol.spec.quote);
                let expected = if exempt { None } else { self.threshold(id, *sym, &totals) };
                assert_eq!(position.threshold, expected, "account {id} liquidation key in {sym} stale");
                if let Some(key) = expected {
                    let entry = &mut keys[sym.0 as usize];
                    if crate::margin::in_band(&symbol.spec, key, position.size > 0) {
                        let set = if position.size > 0 { &margin.longs } else { &margin.shorts };
                        assert!(set.contains(&(key, id)), "account {id} missing from the index of {sym}");
                        if position.size > 0 {
                            entry.0 += 1
                        } else {
                            entry.1 += 1
                        }
                    }
                    if totals.open >= 2 {
                        assert!(margin.multi.contains(&id), "account {id} missing from the multi list of {sym}");
                        entry.2 += 1;
                    }
                }
                if !exempt {
                    liquidatable.insert((id, symbol.spec.quote), totals.liquidatable());
                }
            }
        }
        for (sym, symbol) in self.symbols.iter().enumerate() {
            let Some(margin) = symbol.margin.as_ref() else { continue };
            assert_eq!(net[sym], 0, "positions in {} do not net to zero", symbol.spec.name);
            let (longs, shorts, multi) = keys[sym];
            assert_eq!(margin.longs.len(), longs, "stray long keys in {}", symbol.spec.name);
            assert_eq!(margin.shorts.len(), shorts, "stray short keys in {}", symbol.spec.name);
            assert_eq!(margin.multi.len(), multi, "stray multi entries in {}", symbol.spec.name);
        }
        for ((id, asset), yes) in liquidatable {
            assert!(!yes, "account {id} left below maintenance margin in asset {asset}");
        }
        assert!(self.margin_dirty.is_empty() && self.marks_moved.is_empty(), "margin work left over");
    }
}

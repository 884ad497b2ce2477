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
use crate::order::{hold_request, hold_resting};
use crate::types::{AccountId, AssetId, Side};

impl<B: Book> Engine<B> {
    pub fn check_invariants(&self) {
        self.day_trading.check_invariants();
        let mut holds: BTreeMap<(AccountId, AssetId), i128> = BTreeMap::new();
        let mut open: BTreeMap<AccountId, u32> = BTreeMap::new();
        for symbol in &self.symbols {
            symbol.book.check_invariants();
            if let (Some(bid), Some(ask)) = (symbol.book.best(Side::Buy), symbol.book.best(Side::Sell)) {
                assert!(bid < ask, "book {} crossed: bid {bid} ask {ask}", symbol.spec.name);
            }
            for side in [Side::Buy, Side::Sell] {
                symbol.book.visit(side, |order| {
                    let (asset, amount) = hold_resting(&symbol.spec, order);
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
                let (asset, amount) = hold_request(&symbol.spec, request).expect("hold fitted when placed");
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
        for (i, asset) in self.assets.iter().enumerate() {
            assert!(asset.fees.0 >= 0, "fees of {} negative", asset.name);
            assert_eq!(
                totals[i] + i128::from(asset.fees.0),
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

//! Accounts and their balances, one per asset, split into available and reserved.

use serde::{Deserialize, Serialize};

use crate::types::{Amount, AssetId, SymbolId};

/// One asset's balance in one account.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Balance {
    /// Free to trade or withdraw.
    pub available: Amount,
    /// Held by open orders.
    pub reserved: Amount,
}

/// An account: balances kept sorted by asset (accounts hold few assets, so a sorted
/// vector beats a map), a suspension flag, a count of open orders, and the id its owner
/// chose, when it was created with one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Account {
    pub suspended: bool,
    pub balances: Vec<(AssetId, Balance)>,
    /// Resting orders plus pending stops; derived, checked by the invariants.
    pub open_orders: u32,
    /// Set by `CreateAccountWithId`, never changed; unique among accounts.
    pub external_id: Option<u64>,
    /// Margin positions, sorted by symbol (see [`Position`]).
    pub positions: Vec<(SymbolId, Position)>,
}

/// One account's position in one margin symbol. Kept while it is open, has realised
/// P&L, or the account has open orders there.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Position {
    /// Signed contracts: positive long, negative short.
    pub size: i64,
    /// `Σ signed qty × px × multiplier` of the open size (0 when flat), in quote minor
    /// units: the average open price is `cost / (size × multiplier)`.
    pub cost: i64,
    /// P&L realised in this symbol so far (closing trades, settlements), in quote minor units.
    pub realized: i64,
    /// Open buy and sell orders' remaining quantities here; derived from the books.
    pub buying: i64,
    pub selling: i64,
    /// The liquidation index's key (see `margin.rs`); derived, `None` when flat or exempt.
    pub threshold: Option<i128>,
    /// Whether the key is in the index's longs (else its shorts); derived.
    pub indexed_long: bool,
}

impl Position {
    /// Nothing open, nothing pending, nothing realised and out of the index: the entry
    /// can go. (A closed position with realised P&L stays, for the reports, until a
    /// settlement pays its P&L out.)
    #[inline]
    pub fn is_idle(&self) -> bool {
        self.size == 0 && self.buying == 0 && self.selling == 0 && self.realized == 0 && self.threshold.is_none()
    }
}

impl Account {
    /// The balance of `asset`, zero when the account never held it.
    #[inline]
    pub fn balance(&self, asset: AssetId) -> Balance {
        match self.balances.binary_search_by_key(&asset, |(a, _)| *a) {
            Ok(i) => self.balances[i].1,
            Err(_) => Balance::default(),
        }
    }

    /// The balance of `asset`, created at zero when missing.
    #[inline]
    pub fn balance_mut(&mut self, asset: AssetId) -> &mut Balance {
        let i = self.balance_index(asset);
        &mut self.balances[i].1
    }

    /// Where the balance of `asset` is in `balances`, created at zero when missing.
    #[inline]
    pub fn balance_index(&mut self, asset: AssetId) -> usize {
        match self.balances.binary_search_by_key(&asset, |(a, _)| *a) {
            Ok(i) => i,
            Err(i) => {
                self.balances.insert(i, (asset, Balance::default()));
                i
            }
        }
    }

    /// The position in `symbol`, if the account has one.
    #[inline]
    pub fn position(&self, symbol: SymbolId) -> Option<&Position> {
        let i = self.positions.binary_search_by_key(&symbol, |(s, _)| *s).ok()?;
        Some(&self.positions[i].1)
    }

    /// The position in `symbol`, created flat when missing.
    #[inline]
    pub fn position_mut(&mut self, symbol: SymbolId) -> &mut Position {
        let i = self.position_index(symbol);
        &mut self.positions[i].1
    }

    /// Where the position in `symbol` is in `positions`, created flat when missing.
    #[inline]
    pub fn position_index(&mut self, symbol: SymbolId) -> usize {
        match self.positions.binary_search_by_key(&symbol, |(s, _)| *s) {
            Ok(i) => i,
            Err(i) => {
                self.positions.insert(i, (symbol, Position::default()));
                i
            }
        }
    }

    /// Moves `delta` from available to reserved (a negative `delta` back) and returns
    /// the balance after: one search of the balances. The caller checked that what it
    /// reserves is available.
    #[inline]
    pub fn shift(&mut self, asset: AssetId, delta: i64) -> Balance {
        let slot = self.balance_index(asset);
        self.shift_at(slot, delta)
    }

    /// Where the balance in `asset` is in `balances`, if the account has one: for a
    /// caller that checks a balance and then changes it ([`Account::shift_at`]).
    #[inline]
    pub fn balance_slot(&self, asset: AssetId) -> Option<usize> {
        self.balances.binary_search_by_key(&asset, |(a, _)| *a).ok()
    }

    /// [`Account::shift`] of the balance at `slot` (from [`Account::balance_slot`] or
    /// [`Account::balance_index`], with no balance added since).
    #[inline]
    pub fn shift_at(&mut self, slot: usize, delta: i64) -> Balance {
        let balance = &mut self.balances[slot].1;
        assert!(balance.available.0 >= delta && balance.reserved.0 >= -delta, "hold change beyond the balance");
        balance.available.0 -= delta;
        balance.reserved.0 += delta;
        *balance
    }
}

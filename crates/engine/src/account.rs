//! Accounts and their balances, one per asset, split into available and reserved.

use serde::{Deserialize, Serialize};

use crate::types::{Amount, AssetId};

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
}

impl Account {
    /// The balance of `asset`, zero when the account never held it.
    pub fn balance(&self, asset: AssetId) -> Balance {
        match self.balances.binary_search_by_key(&asset, |(a, _)| *a) {
            Ok(i) => self.balances[i].1,
            Err(_) => Balance::default(),
        }
    }

    /// The balance of `asset`, created at zero when missing.
    pub fn balance_mut(&mut self, asset: AssetId) -> &mut Balance {
        let i = match self.balances.binary_search_by_key(&asset, |(a, _)| *a) {
            Ok(i) => i,
            Err(i) => {
                self.balances.insert(i, (asset, Balance::default()));
                i
            }
        };
        &mut self.balances[i].1
    }

    /// Moves `amount` from available to reserved. The caller checked it is available.
    pub fn reserve(&mut self, asset: AssetId, amount: Amount) {
        let balance = self.balance_mut(asset);
        assert!(balance.available >= amount, "reserve beyond available");
        balance.available.0 -= amount.0;
        balance.reserved.0 += amount.0;
    }

    /// Moves `amount` from reserved back to available.
    pub fn release(&mut self, asset: AssetId, amount: Amount) {
        let balance = self.balance_mut(asset);
        assert!(balance.reserved >= amount, "release beyond reserved");
        balance.reserved.0 -= amount.0;
        balance.available.0 += amount.0;
    }
}

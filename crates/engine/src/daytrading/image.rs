//! The ledger in the engine's snapshot: everything that can influence a later event, in
//! a canonical order (users by index, which is creation order in the log; maps by
//! symbol). The userid index and the arming index are derived and rebuilt on restore.

use serde::{Deserialize, Serialize};

use crate::snapshot::SnapshotError;
use crate::types::Side;

use super::grammar::Sym;
use super::ledger::{CachedQuote, DtUser};
use super::{DayTrading, DtConfig, UserIdx};

#[derive(Serialize, Deserialize)]
pub(crate) struct DtImage {
    users: Vec<DtUser>,
    quotes: Vec<(Sym, CachedQuote)>,
    arm_seq: u64,
    txn_max: u64,
    audit_seq: u64,
    cash_added: i128,
    cash_traded: i128,
    shares_net: Vec<(Sym, i128)>,
}

impl DayTrading {
    pub(crate) fn image(&self) -> DtImage {
        DtImage {
            users: self.users.clone(),
            quotes: self.quotes.iter().map(|(s, q)| (*s, *q)).collect(),
            arm_seq: self.arm_seq,
            txn_max: self.txn_max,
            audit_seq: self.audit_seq,
            cash_added: self.cash_added,
            cash_traded: self.cash_traded,
            shares_net: self.shares_net.iter().map(|(s, n)| (*s, *n)).collect(),
        }
    }

    pub(crate) fn restore(config: DtConfig, image: DtImage) -> Result<DayTrading, SnapshotError> {
        let mut ledger = DayTrading::new(config);
        for (index, user) in image.users.iter().enumerate() {
            if ledger.user_index.insert(user.name.clone(), index as UserIdx).is_some() {
                return Err(SnapshotError::Inconsistent("day-trading user listed twice"));
            }
            let armed = user
                .buy_triggers
                .iter()
                .filter(|(_, t)| t.price.is_some())
                .map(|(s, t)| (*s, t.arm_seq, Side::Buy))
                .chain(
                    user.sell_triggers
                        .iter()
                        .filter(|(_, t)| t.price.is_some())
                        .map(|(s, t)| (*s, t.arm_seq, Side::Sell)),
                );
            for (symbol, arm_seq, side) in armed {
                if ledger.armed.entry(symbol).or_default().insert(arm_seq, (index as UserIdx, side)).is_some() {
                    return Err(SnapshotError::Inconsistent("two triggers share an arming position"));
                }
            }
        }
        ledger.users = image.users;
        ledger.quotes = image.quotes.into_iter().collect();
        ledger.arm_seq = image.arm_seq;
        ledger.txn_max = image.txn_max;
        ledger.audit_seq = image.audit_seq;
        ledger.cash_added = image.cash_added;
        ledger.cash_traded = image.cash_traded;
        ledger.shares_net = image.shares_net.into_iter().collect();
        Ok(ledger)
    }
}

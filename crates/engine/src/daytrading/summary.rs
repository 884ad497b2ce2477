//! `DISPLAY_SUMMARY`'s JSON (spec 8.1), written by hand so that it is byte-for-byte the
//! same everywhere: money as `d.dd` strings, stamps as integer ms, lists by symbol,
//! empty holdings left out. Every string in it is a userid, a symbol, a command name or
//! an error text, none of which needs escaping beyond what [`json_string`] does.

use std::fmt::Write;

use super::grammar::{cents_format, Sym};
use super::ledger::{DtUser, Pending};
use super::DayTrading;

/// A JSON string literal.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn money(out: &mut String, cents: i64) {
    json_string(out, &cents_format(cents));
}

impl DayTrading {
    /// The summary of user `name` as `DISPLAY_SUMMARY` numbered `txn` and stamped
    /// `as_of_ms` returns it: the current state, and the history before that command
    /// (when it is still in the user's history; otherwise all of it).
    pub fn summary_json(&self, name: &str, txn: u64, as_of_ms: u64) -> Option<String> {
        let (_, user) = self.user_by_name(name)?;
        let mut out = String::with_capacity(512);
        out.push_str("{\"user\":");
        json_string(&mut out, name);
        let _ = write!(out, ",\"transactionNum\":{txn},\"asOf\":{as_of_ms},\"cash\":{{\"available\":");
        money(&mut out, user.cash.available);
        out.push_str(",\"reserved\":");
        money(&mut out, user.cash.reserved);
        out.push_str("},\"holdings\":[");
        for (i, (symbol, held)) in user.holdings.iter().enumerate() {
            comma(&mut out, i);
            out.push_str("{\"symbol\":");
            json_string(&mut out, symbol.as_str());
            let _ = write!(out, ",\"available\":{},\"reserved\":{}}}", held.available, held.reserved);
        }
        out.push_str("],\"pendingBuy\":");
        self.pending_json(&mut out, user.pending_buy, "cost");
        out.push_str(",\"pendingSell\":");
        self.pending_json(&mut out, user.pending_sell, "proceeds");
        out.push_str(",\"buyTriggers\":[");
        for (i, (symbol, trigger)) in user.buy_triggers.iter().enumerate() {
            comma(&mut out, i);
            trigger_json(&mut out, *symbol, trigger.reserve, trigger.price);
            out.push('}');
        }
        out.push_str("],\"sellTriggers\":[");
        for (i, (symbol, trigger)) in user.sell_triggers.iter().enumerate() {
            comma(&mut out, i);
            trigger_json(&mut out, *symbol, trigger.amount, trigger.price);
            let _ = write!(out, ",\"reservedShares\":{}}}", trigger.shares_reserved);
        }
        out.push_str("],");
        history_json(&mut out, user, txn, self.config.summary_history as usize);
        out.push('}');
        Some(out)
    }

    fn pending_json(&self, out: &mut String, pending: Option<Pending>, money_name: &str) {
        let Some(p) = pending else {
            out.push_str("null");
            return;
        };
        out.push_str("{\"symbol\":");
        json_string(out, p.symbol.as_str());
        out.push_str(",\"price\":");
        money(out, p.price);
        let _ = write!(out, ",\"shares\":{},\"{money_name}\":", p.shares);
        money(out, p.money);
        let _ = write!(out, ",\"expiresAt\":{}}}", p.stamp_ms + u64::from(self.config.pending_ttl_ms));
    }
}

fn comma(out: &mut String, i: usize) {
    if i > 0 {
        out.push(',');
    }
}

/// A trigger's first fields (the caller closes the object).
fn trigger_json(out: &mut String, symbol: Sym, amount: i64, price: Option<i64>) {
    out.push_str("{\"symbol\":");
    json_string(out, symbol.as_str());
    out.push_str(",\"amount\":");
    money(out, amount);
    out.push_str(",\"triggerPrice\":");
    match price {
        Some(price) => money(out, price),
        None => out.push_str("null"),
    }
}

/// `"history":{"total":N,"recent":[…]}`: the commands before the one numbered `txn`,
/// newest first.
fn history_json(out: &mut String, user: &DtUser, txn: u64, shown_max: usize) {
    // The command itself and anything after it are not "before" it.
    let later = user.history.iter().rposition(|item| item.txn == txn).map_or(0, |at| user.history.len() - at);
    let kept = user.history.len() - later;
    let total = user.commands_total - later as u64;
    let _ = write!(out, "\"history\":{{\"total\":{total},\"recent\":[");
    for (i, item) in user.history.iter().take(kept).rev().take(shown_max).enumerate() {
        comma(out, i);
        let _ = write!(out, "{{\"transactionNum\":{},\"stamp\":{},\"command\":", item.txn, item.stamp_ms);
        json_string(out, item.kind.name());
        out.push_str(",\"outcome\":");
        json_string(out, item.error.map_or("ok", |e| e.message()));
        out.push('}');
    }
    out.push_str("]}");
}

//! `DISPLAY_SUMMARY`'s JSON (spec 8.1), written by hand so that it is byte-for-byte the
//! same everywhere: money as `d.dd` strings, stamps as integer ms, lists by symbol,
//! empty holdings left out. Every string in it is a userid, a symbol, a command name or
//! an error text, none of which needs escaping beyond what [`json_string`] does.

use super::grammar::Sym;
use super::ledger::{DtUser, Pending};
use super::DayTrading;

/// A JSON string literal. Most texts need no escape and are copied whole.
fn json_string(out: &mut String, text: &str) {
    out.push('"');
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push_str(text);
    } else {
        for c in text.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if (c as u32) < 0x20 => {
                    out.push_str("\\u00");
                    out.push(char::from(b"0123456789abcdef"[(c as usize) >> 4]));
                    out.push(char::from(b"0123456789abcdef"[(c as usize) & 15]));
                }
                c => out.push(c),
            }
        }
    }
    out.push('"');
}

/// An integer, written in place.
fn int(out: &mut String, value: impl itoa::Integer) {
    out.push_str(itoa::Buffer::new().format(value));
}

/// Money as a `"d.dd"` string (what `cents_format` gives), written in place.
fn money(out: &mut String, cents: i64) {
    let abs = cents.unsigned_abs();
    out.push('"');
    if cents < 0 {
        out.push('-');
    }
    int(out, abs / 100);
    out.push('.');
    let rest = (abs % 100) as u8;
    out.push(char::from(b'0' + rest / 10));
    out.push(char::from(b'0' + rest % 10));
    out.push('"');
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
        out.push_str(",\"transactionNum\":");
        int(&mut out, txn);
        out.push_str(",\"asOf\":");
        int(&mut out, as_of_ms);
        out.push_str(",\"cash\":{\"available\":");
        money(&mut out, user.cash.available);
        out.push_str(",\"reserved\":");
        money(&mut out, user.cash.reserved);
        out.push_str("},\"holdings\":[");
        for (i, (symbol, held)) in user.holdings.iter().enumerate() {
            comma(&mut out, i);
            out.push_str("{\"symbol\":");
            json_string(&mut out, symbol.as_str());
            out.push_str(",\"available\":");
            int(&mut out, held.available);
            out.push_str(",\"reserved\":");
            int(&mut out, held.reserved);
            out.push('}');
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
            out.push_str(",\"reservedShares\":");
            int(&mut out, trigger.shares_reserved);
            out.push('}');
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
        out.push_str(",\"shares\":");
        int(out, p.shares);
        out.push_str(",\"");
        out.push_str(money_name);
        out.push_str("\":");
        money(out, p.money);
        out.push_str(",\"expiresAt\":");
        int(out, p.stamp_ms + u64::from(self.config.pending_ttl_ms));
        out.push('}');
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
    out.push_str("\"history\":{\"total\":");
    int(out, total);
    out.push_str(",\"recent\":[");
    for (i, item) in user.history.iter().take(kept).rev().take(shown_max).enumerate() {
        comma(out, i);
        out.push_str("{\"transactionNum\":");
        int(out, item.txn);
        out.push_str(",\"stamp\":");
        int(out, item.stamp_ms);
        out.push_str(",\"command\":");
        json_string(out, item.kind.name());
        out.push_str(",\"outcome\":");
        json_string(out, item.error.map_or("ok", |e| e.message()));
        out.push('}');
    }
    out.push_str("]}");
}

#[cfg(test)]
mod tests {
    use super::super::grammar::cents_format;
    use super::*;

    #[test]
    fn money_in_place_is_cents_format_quoted() {
        for cents in [0, 1, 9, 10, 99, 100, 101, 12_345, 100_000_000, -1, -99, -100, -12_345, i64::MAX, i64::MIN] {
            let mut out = String::new();
            money(&mut out, cents);
            assert_eq!(out, format!("\"{}\"", cents_format(cents)), "{cents}");
        }
    }

    #[test]
    fn strings_are_escaped_only_where_json_needs_it() {
        let cases = [
            ("oY01WVirLr", "\"oY01WVirLr\""),
            ("", "\"\""),
            ("a\"b\\c", "\"a\\\"b\\\\c\""),
            ("tab\there\u{1}", "\"tab\\u0009here\\u0001\""),
            ("é", "\"é\""),
        ];
        for (text, json) in cases {
            let mut out = String::new();
            json_string(&mut out, text);
            assert_eq!(out, json, "{text:?}");
        }
    }
}

//! The day-trading command set's words: command names, error texts, symbols, and the
//! grammar of its arguments (spec `day-trading.md`, sections 1, 2 and 6).
//!
//! Arguments reach the engine verbatim as strings, so that it, not a front end, decides
//! which are bad and logs them exactly as the spec says; everything here is a total
//! function of its input (no panic on any string).

use serde::{Deserialize, Serialize};

/// The sixteen day-trading commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum DtKind {
    Add,
    Quote,
    Buy,
    CommitBuy,
    CancelBuy,
    Sell,
    CommitSell,
    CancelSell,
    SetBuyAmount,
    SetBuyTrigger,
    CancelSetBuy,
    SetSellAmount,
    SetSellTrigger,
    CancelSetSell,
    DisplaySummary,
    DumpLog,
}

impl DtKind {
    /// Every command, in the order of the spec's table.
    pub const ALL: [DtKind; 16] = [
        DtKind::Add,
        DtKind::Quote,
        DtKind::Buy,
        DtKind::CommitBuy,
        DtKind::CancelBuy,
        DtKind::Sell,
        DtKind::CommitSell,
        DtKind::CancelSell,
        DtKind::SetBuyAmount,
        DtKind::SetBuyTrigger,
        DtKind::CancelSetBuy,
        DtKind::SetSellAmount,
        DtKind::SetSellTrigger,
        DtKind::CancelSetSell,
        DtKind::DisplaySummary,
        DtKind::DumpLog,
    ];

    /// The command's name as workload files and the audit log spell it.
    pub const fn name(self) -> &'static str {
        match self {
            DtKind::Add => "ADD",
            DtKind::Quote => "QUOTE",
            DtKind::Buy => "BUY",
            DtKind::CommitBuy => "COMMIT_BUY",
            DtKind::CancelBuy => "CANCEL_BUY",
            DtKind::Sell => "SELL",
            DtKind::CommitSell => "COMMIT_SELL",
            DtKind::CancelSell => "CANCEL_SELL",
            DtKind::SetBuyAmount => "SET_BUY_AMOUNT",
            DtKind::SetBuyTrigger => "SET_BUY_TRIGGER",
            DtKind::CancelSetBuy => "CANCEL_SET_BUY",
            DtKind::SetSellAmount => "SET_SELL_AMOUNT",
            DtKind::SetSellTrigger => "SET_SELL_TRIGGER",
            DtKind::CancelSetSell => "CANCEL_SET_SELL",
            DtKind::DisplaySummary => "DISPLAY_SUMMARY",
            DtKind::DumpLog => "DUMPLOG",
        }
    }

    /// The command with this exact (case-sensitive) name.
    pub fn parse(name: &str) -> Option<DtKind> {
        DtKind::ALL.into_iter().find(|kind| kind.name() == name)
    }

    /// The number of arguments, userid included. `DUMPLOG` takes 1 (global) or 2 (one
    /// user's); this is its user form.
    pub fn arity(self) -> usize {
        match self {
            DtKind::CommitBuy
            | DtKind::CancelBuy
            | DtKind::CommitSell
            | DtKind::CancelSell
            | DtKind::DisplaySummary => 1,
            DtKind::Add | DtKind::Quote | DtKind::CancelSetBuy | DtKind::CancelSetSell | DtKind::DumpLog => 2,
            DtKind::Buy
            | DtKind::Sell
            | DtKind::SetBuyAmount
            | DtKind::SetBuyTrigger
            | DtKind::SetSellAmount
            | DtKind::SetSellTrigger => 3,
        }
    }

    /// Stable number of the command (its position in [`DtKind::ALL`] plus one).
    pub fn code(self) -> u8 {
        DtKind::ALL.iter().position(|k| *k == self).map_or(0, |i| i as u8 + 1)
    }

    pub fn from_code(code: u8) -> Option<DtKind> {
        DtKind::ALL.get(usize::from(code).checked_sub(1)?).copied()
    }
}

/// Why a day-trading command failed: the spec's fixed `errorMessage` texts. A failed
/// command is an ordinary, logged outcome (not an engine rejection): its `userCommand`
/// and `errorEvent` records are written and expired holds are still released.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[repr(u8)]
pub enum DtError {
    InvalidArguments = 1,
    InvalidUser = 2,
    UnknownUser = 3,
    InvalidSymbol = 4,
    InvalidAmount = 5,
    InvalidFilename = 6,
    NotAuthorized = 7,
    InsufficientFunds = 8,
    InsufficientShares = 9,
    AmountBelowPrice = 10,
    NoPendingBuy = 11,
    NoPendingSell = 12,
    NoBuyTrigger = 13,
    NoSellTrigger = 14,
    QuoteUnavailable = 15,
    /// Decided by the service after the command committed (the engine never writes a
    /// file): it appears in the response only.
    DumpFailed = 16,
}

impl DtError {
    pub const ALL: [DtError; 16] = [
        DtError::InvalidArguments,
        DtError::InvalidUser,
        DtError::UnknownUser,
        DtError::InvalidSymbol,
        DtError::InvalidAmount,
        DtError::InvalidFilename,
        DtError::NotAuthorized,
        DtError::InsufficientFunds,
        DtError::InsufficientShares,
        DtError::AmountBelowPrice,
        DtError::NoPendingBuy,
        DtError::NoPendingSell,
        DtError::NoBuyTrigger,
        DtError::NoSellTrigger,
        DtError::QuoteUnavailable,
        DtError::DumpFailed,
    ];

    /// The `errorMessage` text.
    pub const fn message(self) -> &'static str {
        match self {
            DtError::InvalidArguments => "invalid arguments",
            DtError::InvalidUser => "invalid user",
            DtError::UnknownUser => "unknown user",
            DtError::InvalidSymbol => "invalid symbol",
            DtError::InvalidAmount => "invalid amount",
            DtError::InvalidFilename => "invalid filename",
            DtError::NotAuthorized => "not authorized",
            DtError::InsufficientFunds => "insufficient funds",
            DtError::InsufficientShares => "insufficient shares",
            DtError::AmountBelowPrice => "amount below price",
            DtError::NoPendingBuy => "no pending buy",
            DtError::NoPendingSell => "no pending sell",
            DtError::NoBuyTrigger => "no buy trigger",
            DtError::NoSellTrigger => "no sell trigger",
            DtError::QuoteUnavailable => "quote unavailable",
            DtError::DumpFailed => "dump failed",
        }
    }

    /// The stable code (1 to 16): the engine's `Outcome::Ok { id }` of a failed command.
    pub fn code(self) -> u8 {
        self as u8
    }

    pub fn from_code(code: u64) -> Option<DtError> {
        DtError::ALL.into_iter().find(|e| u64::from(e.code()) == code)
    }
}

/// A stock symbol of the day-trading ledger: 1 to 3 upper-case ASCII letters, stored
/// left-aligned and zero-padded, so the derived byte order is name order.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Sym(pub [u8; 3]);

impl Sym {
    /// The symbol named `text` when it matches `[A-Z]{1,3}`.
    pub fn parse(text: &str) -> Option<Sym> {
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes.len() > 3 || !bytes.iter().all(u8::is_ascii_uppercase) {
            return None;
        }
        let mut sym = [0u8; 3];
        sym[..bytes.len()].copy_from_slice(bytes);
        Some(Sym(sym))
    }

    /// Whether the bytes are a symbol (a decoded command may carry any bytes).
    pub fn is_valid(&self) -> bool {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(3);
        len > 0 && self.0[..len].iter().all(u8::is_ascii_uppercase) && self.0[len..].iter().all(|&b| b == 0)
    }

    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(3);
        std::str::from_utf8(&self.0[..len]).unwrap_or("")
    }
}

impl std::fmt::Display for Sym {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest userid.
pub const USERID_LEN_MAX: usize = 64;
/// Longest file name (bytes).
pub const FILENAME_LEN_MAX: usize = 255;

/// `[A-Za-z0-9_-]{1,64}`.
pub fn userid_valid(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= USERID_LEN_MAX
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An amount or price argument in cents: `[0-9]+(\.[0-9]{1,2})?`, above zero, fitting
/// in i64 cents. `None` is `invalid amount` (zero, negative, malformed, more than two
/// decimals, overflowing).
pub fn amount_parse(text: &str) -> Option<i64> {
    let cents = decimal_parse(text)?;
    (cents > 0 && !text.starts_with('-')).then_some(cents)
}

/// A decimal with an optional leading `-` and at most two decimals, in cents, when it
/// fits in i64: what an audit record's `funds` shows of an amount argument (a negative
/// one keeps its sign; anything else is unparsable and left out).
pub fn decimal_parse(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (digits, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let fraction_cents = match fraction {
        None => 0,
        Some(f) if (1..=2).contains(&f.len()) && f.bytes().all(|b| b.is_ascii_digit()) => {
            let value: i64 = f.parse().ok()?;
            if f.len() == 1 {
                value * 10
            } else {
                value
            }
        }
        Some(_) => return None,
    };
    let mut whole_value: i64 = 0;
    for b in whole.bytes() {
        whole_value = whole_value.checked_mul(10)?.checked_add(i64::from(b - b'0'))?;
    }
    let cents = whole_value.checked_mul(100)?.checked_add(fraction_cents)?;
    Some(if negative { -cents } else { cents })
}

/// Cents as `d.dd` (`-d.dd` when negative).
pub fn cents_format(cents: i64) -> String {
    let abs = cents.unsigned_abs();
    let sign = if cents < 0 { "-" } else { "" };
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// A `DUMPLOG` file name, checked as the spec's `invalid filename` says: 1 to 255 bytes,
/// no `,` and no control character; after removing one leading `./` it must not be
/// empty, `.` or `..`, nor contain `/`. Returns the name to write under `dump_dir`.
pub fn filename_check(text: &str) -> Option<&str> {
    if text.is_empty() || text.len() > FILENAME_LEN_MAX || text.contains(',') || text.chars().any(char::is_control) {
        return None;
    }
    let name = text.strip_prefix("./").unwrap_or(text);
    if name.is_empty() || name == "." || name == ".." || name.contains('/') {
        return None;
    }
    Some(name)
}

/// Whether `text` can be written as XML 1.0 character data (escaped): no control
/// characters other than tab, and none of the characters XML 1.0 forbids. Values that
/// are not are left out of audit records rather than written invalid.
pub fn xml_text_valid(text: &str) -> bool {
    text.chars().all(|c| c == '\t' || (!c.is_control() && c != '\u{FFFE}' && c != '\u{FFFF}'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_follow_the_grammar() {
        assert_eq!(amount_parse("276.83"), Some(27_683));
        assert_eq!(amount_parse("5"), Some(500));
        assert_eq!(amount_parse("5.5"), Some(550));
        assert_eq!(amount_parse("007.05"), Some(705));
        assert_eq!(amount_parse("0.01"), Some(1));
        for bad in ["0", "0.00", "-5.00", "5.", ".5", "5.123", "", "abc", "+5", "1e3", "5 ", "92233720368547758.08"] {
            assert_eq!(amount_parse(bad), None, "{bad:?}");
        }
        assert_eq!(amount_parse("92233720368547758.07"), Some(i64::MAX));
        assert_eq!(decimal_parse("-5.00"), Some(-500));
        assert_eq!(decimal_parse("-0.5"), Some(-50));
        assert_eq!(decimal_parse("0"), Some(0));
        assert_eq!(decimal_parse("--5"), None);
    }

    #[test]
    fn cents_print_with_two_decimals() {
        assert_eq!(cents_format(27_683), "276.83");
        assert_eq!(cents_format(5), "0.05");
        assert_eq!(cents_format(-500), "-5.00");
        assert_eq!(cents_format(0), "0.00");
        assert_eq!(cents_format(i64::MIN), "-92233720368547758.08");
    }

    #[test]
    fn symbols_users_and_files() {
        assert_eq!(Sym::parse("S").unwrap().as_str(), "S");
        assert_eq!(Sym::parse("ABC").unwrap().as_str(), "ABC");
        assert!(Sym::parse("ABCD").is_none() && Sym::parse("abc").is_none() && Sym::parse("").is_none());
        assert!(Sym::parse("A") < Sym::parse("AB") && Sym::parse("AB") < Sym::parse("B"));
        assert!(!Sym([b'A', 0, b'B']).is_valid() && !Sym([0; 3]).is_valid() && Sym::parse("Z").unwrap().is_valid());
        assert!(userid_valid("oY01WVirLr") && userid_valid("a_b-c") && !userid_valid("a b") && !userid_valid(""));
        assert!(!userid_valid(&"x".repeat(65)));
        assert_eq!(filename_check("./testLOG"), Some("testLOG"));
        assert_eq!(filename_check("finalLOG"), Some("finalLOG"));
        for bad in ["", "./", ".", "..", "./..", "a/b", "../x", "a,b", "a\nb", &"x".repeat(256)] {
            assert_eq!(filename_check(bad), None, "{bad:?}");
        }
        for kind in DtKind::ALL {
            assert_eq!(DtKind::parse(kind.name()), Some(kind));
            assert_eq!(DtKind::from_code(kind.code()), Some(kind));
        }
        for error in DtError::ALL {
            assert_eq!(DtError::from_code(u64::from(error.code())), Some(error));
        }
    }
}

//! Values of the protocol (spec section 3): their grammar, their form as the engine's
//! scaled integers, and how computed numbers are written back (section 2.5).
//!
//! Every grammar is checked after trimming ASCII whitespace. Decimals are read digit by
//! digit into an `i128` (no binary floating point anywhere): fractional digits beyond
//! the allowed precision are accepted only when they are all zeros, and a value that
//! does not fit the engine's `i64` is invalid. Units (see the crate documentation):
//! shares in 10^-quantity_scale, prices in quote minor units per share unit, i.e.
//! 10^-price_scale dollars a share, cash in 10^-(quantity_scale + price_scale) dollars.

/// Fractional digits allowed in shares and prices; cash has their sum, so that every
/// `amount × limit` and every refund is an exact number of cash units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scales {
    pub quantity: u32,
    pub price: u32,
}

impl Scales {
    /// The protocol's defaults: 4 and 4 (cash 8).
    pub const DEFAULT: Scales = Scales { quantity: 4, price: 4 };

    /// Fractional digits of cash balances.
    pub fn cash(&self) -> u32 {
        self.quantity + self.price
    }

    /// Cash has at most 18 decimals (the engine's bound on an asset's decimals).
    pub fn validate(&self) -> Result<(), String> {
        if self.cash() > 18 {
            return Err(format!(
                "quantity_scale {} + price_scale {} exceeds 18 (cash decimals)",
                self.quantity, self.price
            ));
        }
        Ok(())
    }
}

impl Default for Scales {
    fn default() -> Self {
        Scales::DEFAULT
    }
}

fn trim(text: &str) -> &str {
    text.trim_matches(|c: char| c.is_ascii_whitespace())
}

/// An account id: `[0-9]{1,18}`, compared by integer value (`007` is `7`).
pub fn account_id(text: &str) -> Option<u64> {
    let text = trim(text);
    if text.is_empty() || text.len() > 18 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A symbol: `[A-Za-z0-9]{1,16}`, case-sensitive. Returns the trimmed name.
pub fn symbol(text: &str) -> Option<&str> {
    let text = trim(text);
    let valid = !text.is_empty() && text.len() <= 16 && text.bytes().all(|b| b.is_ascii_alphanumeric());
    valid.then_some(text)
}

/// A transaction id: `[0-9]{1,19}` (19 digits always fit a `u64`).
pub fn transaction_id(text: &str) -> Option<u64> {
    let text = trim(text);
    if text.is_empty() || text.len() > 19 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `-?[0-9]+(\.[0-9]+)?` (the minus only when `signed`) as an integer count of
/// 10^-`scale` units. `None` when the grammar fails, when a fractional digit past
/// `scale` is not zero, or when the value is too large for `i64` (so for the engine).
pub fn decimal(text: &str, scale: u32, signed: bool) -> Option<i64> {
    let text = trim(text);
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) if signed => (true, rest),
        Some(_) => return None,
        None => (false, text),
    };
    let (whole, fraction) = match digits.split_once('.') {
        Some((whole, fraction)) => (whole, Some(fraction)),
        None => (digits, None),
    };
    let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(whole) || fraction.is_some_and(|f| !all_digits(f)) {
        return None;
    }
    let fraction = fraction.unwrap_or("");
    let (kept, excess) = fraction.split_at(fraction.len().min(scale as usize));
    if excess.bytes().any(|b| b != b'0') {
        return None;
    }
    // Leading zeros are free; past 19 significant digits nothing fits an i64.
    let whole = whole.trim_start_matches('0');
    if whole.len() > 19 {
        return None;
    }
    let mut value: i128 = 0;
    for b in whole.bytes().chain(kept.bytes()) {
        value = value * 10 + i128::from(b - b'0');
    }
    value *= 10i128.pow(scale - kept.len() as u32);
    if negative {
        value = -value;
    }
    i64::try_from(value).ok()
}

/// A non-negative count of 10^-`scale` units as a plain decimal: no exponent, no sign,
/// no trailing fractional zeros, no trailing dot, a `0` before a leading dot.
pub fn format_scaled(value: i64, scale: u32) -> String {
    let magnitude = value.unsigned_abs();
    let unit = 10u64.pow(scale);
    let (whole, fraction) = (magnitude / unit, magnitude % unit);
    let sign = if value < 0 { "-" } else { "" };
    if fraction == 0 {
        return format!("{sign}{whole}");
    }
    let digits = format!("{fraction:0width$}", width = scale as usize);
    format!("{sign}{whole}.{}", digits.trim_end_matches('0'))
}

/// Whole seconds since the epoch of a log stamp in nanoseconds, rounded down.
pub fn seconds(ts_ns: u64) -> u64 {
    ts_ns / 1_000_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn account_ids_compare_by_value_and_keep_to_their_grammar() {
        assert_eq!(account_id("007"), Some(7));
        assert_eq!(account_id(" 42\n"), Some(42));
        assert_eq!(account_id("999999999999999999"), Some(999_999_999_999_999_999));
        for bad in ["", " ", "1234567890123456789", "-1", "+1", "1.0", "4 2", "x", "１"] {
            assert_eq!(account_id(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn symbols_are_alphanumeric_and_at_most_16() {
        assert_eq!(symbol(" SPY "), Some("SPY"));
        assert_eq!(symbol("abcdefghij123456"), Some("abcdefghij123456"));
        for bad in ["", "abcdefghij1234567", "BRK.B", "A B", "A/B", "É"] {
            assert_eq!(symbol(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn transaction_ids_fit_19_digits() {
        assert_eq!(transaction_id("0000000000000000001"), Some(1));
        assert_eq!(transaction_id("9999999999999999999"), Some(9_999_999_999_999_999_999));
        assert_eq!(transaction_id("10000000000000000000"), None);
        assert_eq!(transaction_id("-1"), None);
        assert_eq!(transaction_id("abc"), None);
    }

    #[test]
    fn decimals_scale_exactly_and_refuse_what_they_cannot_keep() {
        assert_eq!(decimal("25", 4, false), Some(250_000));
        assert_eq!(decimal("25.000000", 4, false), Some(250_000), "zeros past the scale are accepted");
        assert_eq!(decimal("0.0001", 4, false), Some(1));
        assert_eq!(decimal("0.00001", 4, false), None, "never rounded");
        assert_eq!(decimal("-4", 4, true), Some(-40_000));
        assert_eq!(decimal("-4", 4, false), None);
        assert_eq!(decimal("007.50", 4, false), Some(75_000));
        assert_eq!(decimal(" 1.5 ", 8, false), Some(150_000_000));
        assert_eq!(decimal("0000000000000000000000000001", 0, false), Some(1));
        for bad in ["", ".5", "5.", "1e3", "+1", "--1", "1.2.3", "0x10", "1,5", " - 1", "∞"] {
            assert_eq!(decimal(bad, 4, true), None, "{bad:?}");
        }
        assert_eq!(decimal("922337203685477.5807", 4, false), Some(i64::MAX));
        assert_eq!(decimal("922337203685477.5808", 4, false), None, "past i64");
        assert_eq!(decimal("99999999999999999999999", 0, false), None);
    }

    #[test]
    fn computed_numbers_are_minimal_decimals() {
        assert_eq!(format_scaled(1_250_000, 4), "125");
        assert_eq!(format_scaled(5_000, 4), "0.5");
        assert_eq!(format_scaled(1_456_700, 4), "145.67");
        assert_eq!(format_scaled(1, 4), "0.0001");
        assert_eq!(format_scaled(0, 4), "0");
        assert_eq!(format_scaled(12, 0), "12");
        assert_eq!(format_scaled(-40_000, 4), "-4");
        assert_eq!(format_scaled(i64::MAX, 8), "92233720368.54775807");
    }

    #[test]
    fn times_are_whole_seconds() {
        assert_eq!(seconds(1_732_270_800_999_999_999), 1_732_270_800);
    }
}

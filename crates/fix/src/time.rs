//! UTCTimestamp (`YYYYMMDD-HH:MM:SS.sss`) from the system clock, without a date crate.

use std::time::{SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// `ns` since the epoch as a FIX UTCTimestamp with milliseconds.
pub fn utc_timestamp(ns: u64) -> String {
    let ms_total = ns / 1_000_000;
    let (secs, ms) = (ms_total / 1_000, ms_total % 1_000);
    let (days, sec_of_day) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days as i64);
    format!(
        "{year:04}{month:02}{day:02}-{:02}:{:02}:{:02}.{ms:03}",
        sec_of_day / 3_600,
        sec_of_day % 3_600 / 60,
        sec_of_day % 60
    )
}

/// Howard Hinnant's days-to-civil algorithm (proleptic Gregorian).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_instants_format() {
        assert_eq!(utc_timestamp(0), "19700101-00:00:00.000");
        // 2024-02-29T23:59:59.123Z, a leap day.
        assert_eq!(utc_timestamp(1_709_251_199_123_000_000), "20240229-23:59:59.123");
        assert_eq!(utc_timestamp(1_735_689_600_000_000_000), "20250101-00:00:00.000");
    }
}

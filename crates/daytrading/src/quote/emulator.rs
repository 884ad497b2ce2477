//! The emulation of the legacy quote server (spec 7.2): prices and cryptokeys that
//! depend only on the seed, the symbol, the transactionNum asked with (n) and how many
//! earlier requests with the same (SYM, n) it answered (k); a latency drawn from the same
//! numbers, which delays the answer and never changes it.
//!
//! ```text
//! key       = FNV-1a-64( SYM "," dec(n) "," dec(k) )
//! r         = splitmix64( seed XOR key )
//! price     = price_min + (r mod (price_max - price_min + 1))          (cents)
//! cryptokey = base64( SHA-256( dec(seed) "," SYM "," userid "," dec(n) "," dec(k) ) )
//! latency   = drawn from the configured distribution using splitmix64(r)
//! ```
//!
//! The `legacy` latency: l = splitmix64(r); fast when l mod 100 < 66 (7 to 26 ms: 7 +
//! splitmix64(l) mod 20); otherwise 1, 2, 3 or 4 s by splitmix64(splitmix64(l)) mod 100
//! against the cumulative weights 60/85/95/100, plus the same 7 to 26 ms.
//!
//! Bounds: the (SYM, n) counts are kept for the last `COUNTS_MAX` pairs asked (a retry of
//! an older one counts from 0 again).

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use base64::Engine as _;
use bourse_engine::daytrading::{DtQuote, QuoteSource, Sym};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

/// (SYM, n) pairs whose answer counts are remembered.
pub const COUNTS_MAX: usize = 1 << 20;

/// FNV-1a, 64 bits.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64;
    for &b in bytes {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// One step of splitmix64 from state `x`.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// How long the emulator waits before it answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Latency {
    None,
    Fixed(Duration),
    Legacy(LegacyLatency),
}

/// The legacy server's latency: mostly fast, sometimes seconds (spec 7.2's numbers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyLatency {
    /// Percent of answers that are fast.
    pub fast_percent: u64,
    /// Every answer's extra delay: `jitter_min_ms` to `jitter_max_ms`.
    pub jitter_min_ms: u64,
    pub jitter_max_ms: u64,
    /// Slow answers: (seconds, weight in percent of the slow ones).
    pub slow: Vec<(u64, u64)>,
}

impl Default for LegacyLatency {
    fn default() -> Self {
        LegacyLatency {
            fast_percent: 66,
            jitter_min_ms: 7,
            jitter_max_ms: 26,
            slow: vec![(1, 60), (2, 25), (3, 10), (4, 5)],
        }
    }
}

impl std::str::FromStr for Latency {
    type Err = String;

    /// `none`, `fixed:MS` or `legacy`.
    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(Latency::None),
            "legacy" => Ok(Latency::Legacy(LegacyLatency::default())),
            _ => match text.strip_prefix("fixed:") {
                Some(ms) => ms.parse().map(|ms| Latency::Fixed(Duration::from_millis(ms))).map_err(|e| format!("{e}")),
                None => Err(format!("{text:?}: expected none, fixed:MS or legacy")),
            },
        }
    }
}

impl Latency {
    /// The delay of the answer whose draw is `r`.
    pub fn draw(&self, r: u64) -> Duration {
        match self {
            Latency::None => Duration::ZERO,
            Latency::Fixed(delay) => *delay,
            Latency::Legacy(legacy) => legacy.draw(splitmix64(r)),
        }
    }
}

impl LegacyLatency {
    fn draw(&self, l: u64) -> Duration {
        let span = self.jitter_max_ms.saturating_sub(self.jitter_min_ms) + 1;
        let jitter = self.jitter_min_ms + splitmix64(l) % span;
        if l % 100 < self.fast_percent {
            return Duration::from_millis(jitter);
        }
        let pick = splitmix64(splitmix64(l)) % 100;
        let total: u64 = self.slow.iter().map(|(_, w)| w).sum::<u64>().max(1);
        let mut cumulative = 0;
        let mut seconds = self.slow.last().map_or(0, |(s, _)| *s);
        for (s, weight) in &self.slow {
            cumulative += weight * 100 / total;
            if pick < cumulative {
                seconds = *s;
                break;
            }
        }
        Duration::from_millis(seconds * 1_000 + jitter)
    }
}

/// The emulator's settings (spec 12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EmulatorConfig {
    pub seed: u64,
    /// Cents.
    pub price_min: i64,
    pub price_max: i64,
    pub latency: Latency,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig { seed: 0, price_min: 100, price_max: 50_000, latency: Latency::None }
    }
}

/// One answer and how long to wait before giving it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub price: i64,
    pub cryptokey: String,
    pub delay: Duration,
}

/// The emulator: the config and the counts of answers per (SYM, n).
pub struct Emulator {
    config: EmulatorConfig,
    counts: Mutex<Counts>,
}

#[derive(Default)]
struct Counts {
    by_pair: FxHashMap<(Sym, u64), u64>,
    order: VecDeque<(Sym, u64)>,
}

impl Emulator {
    pub fn new(config: EmulatorConfig) -> Result<Emulator, String> {
        if config.price_min < 1 || config.price_max < config.price_min {
            return Err(format!(
                "emulator prices {}..{} cents: need 1 ≤ min ≤ max",
                config.price_min, config.price_max
            ));
        }
        Ok(Emulator { config, counts: Mutex::new(Counts::default()) })
    }

    pub fn config(&self) -> &EmulatorConfig {
        &self.config
    }

    /// The answer to the request (SYM, userid, n), counting it.
    pub fn answer(&self, symbol: Sym, userid: &str, n: u64) -> Answer {
        let k = {
            let mut counts = self.counts.lock().expect("emulator counts lock");
            let counts = &mut *counts;
            let k = match counts.by_pair.get_mut(&(symbol, n)) {
                Some(k) => {
                    *k += 1;
                    *k - 1
                }
                None => {
                    if counts.order.len() == COUNTS_MAX {
                        if let Some(old) = counts.order.pop_front() {
                            counts.by_pair.remove(&old);
                        }
                    }
                    counts.by_pair.insert((symbol, n), 1);
                    counts.order.push_back((symbol, n));
                    0
                }
            };
            k
        };
        self.answer_at(symbol, userid, n, k)
    }

    /// The answer to the (k+1)-th request (SYM, userid, n): a pure function.
    pub fn answer_at(&self, symbol: Sym, userid: &str, n: u64, k: u64) -> Answer {
        let seed = self.config.seed;
        let key = fnv1a64(format!("{symbol},{n},{k}").as_bytes());
        let r = splitmix64(seed ^ key);
        let span = (self.config.price_max - self.config.price_min + 1) as u64;
        let price = self.config.price_min + (r % span) as i64;
        let digest = Sha256::digest(format!("{seed},{symbol},{userid},{n},{k}").as_bytes());
        let cryptokey = base64::engine::general_purpose::STANDARD.encode(digest);
        Answer { price, cryptokey, delay: self.config.latency.draw(r) }
    }

    /// A quote for the ledger: the answer stamped `now_ms` (the service clock).
    pub fn quote(&self, symbol: Sym, userid: &str, n: u64, now_ms: u64) -> (DtQuote, Duration) {
        let answer = self.answer(symbol, userid, n);
        let quote = DtQuote {
            symbol,
            price: answer.price,
            userid: userid.to_owned(),
            quote_server_time: now_ms,
            cryptokey: answer.cryptokey,
            source: QuoteSource::Emulator,
            transaction_num: n,
        };
        (quote, answer.delay)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors computed independently (Python's hashlib and base64 over the spec's
    /// formulas), not by this code.
    #[test]
    fn prices_and_cryptokeys_match_hand_computed_vectors() {
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(fnv1a64(b"S,2,0"), 0xcb9c_33b9_4489_d0d4);
        let emulator = Emulator::new(EmulatorConfig::default()).unwrap();
        let s = Sym::parse("S").unwrap();
        let first = emulator.answer(s, "oY01WVirLr", 2);
        assert_eq!(first.price, 17_546);
        assert_eq!(first.cryptokey, "2O4sEO3jXYwLsPAJaQU91bd8XLUPd2fCEOsLVdIyAVU=");
        // The second request with the same (SYM, n) has k = 1.
        let second = emulator.answer(s, "oY01WVirLr", 2);
        assert_eq!(second.price, 31_955);
        assert_eq!(second.cryptokey, "qZec5gqcZeoDLHvM2BcTwqxHlYOqixT20Y7anYn/jjY=");
        let seeded = Emulator::new(EmulatorConfig { seed: 42, ..EmulatorConfig::default() }).unwrap();
        let abc = seeded.answer(Sym::parse("ABC").unwrap(), "u", 7);
        assert_eq!((abc.price, abc.cryptokey.as_str()), (17_275, "G0ZtRaLNhzuGEZI8k2Fhu+CrlTKXL1Yi0vK8fdaclWw="));
        assert_eq!(first.delay, Duration::ZERO);
    }

    #[test]
    fn the_price_ignores_the_user_and_the_latency() {
        let s = Sym::parse("XYZ").unwrap();
        let plain = Emulator::new(EmulatorConfig::default()).unwrap();
        let slow = Emulator::new(EmulatorConfig {
            latency: Latency::Legacy(LegacyLatency::default()),
            ..EmulatorConfig::default()
        })
        .unwrap();
        assert_eq!(plain.answer_at(s, "a", 5, 0).price, slow.answer_at(s, "b", 5, 0).price);
        assert_ne!(plain.answer_at(s, "a", 5, 0).cryptokey, plain.answer_at(s, "b", 5, 0).cryptokey);
        for n in 0..2_000 {
            let price = plain.answer_at(s, "a", n, 0).price;
            assert!((100..=50_000).contains(&price));
        }
    }

    #[test]
    fn legacy_latency_is_mostly_fast_sometimes_seconds() {
        let latency = Latency::Legacy(LegacyLatency::default());
        let delays: Vec<Duration> = (0..10_000u64).map(|i| latency.draw(splitmix64(i))).collect();
        let fast = delays.iter().filter(|d| d.as_millis() <= 26).count();
        assert!((6_300..6_900).contains(&fast), "{fast}");
        assert!(delays.iter().all(|d| d.as_millis() >= 7 && d.as_millis() <= 4_026));
        let mean_ms = delays.iter().map(|d| d.as_millis()).sum::<u128>() / delays.len() as u128;
        assert!((450..700).contains(&mean_ms), "mean {mean_ms} ms");
        assert_eq!("fixed:25".parse::<Latency>(), Ok(Latency::Fixed(Duration::from_millis(25))));
        assert!("slow".parse::<Latency>().is_err());
    }
}

//! Injected delay and clock error, per gateway and seeded.
//!
//! One machine has one clock and a near-instant loopback, so nothing is ever unfair unless we
//! make it so. Each gateway gets a [`Profile`]: a [`DelayModel`] for each direction
//! (gateway → sequencer "inbound", engine → gateway "outbound") and a [`ClockModel`] for the skewed
//! clock it stamps orders and releases market data with. A [`DelayLine`] applies a delay model to
//! a stream of items on its own thread.
//!
//! # Specs
//!
//! A [`ProfileSpec`] is parsed from a string (so a CLI flag can carry it): comma-separated
//! presets and `key=value` pairs, applied left to right (later ones win). One spec serves all
//! gateways; [`Profile::for_gateway`] turns it into each gateway's profile with its own seeded
//! draws.
//!
//! | Preset | Meaning |
//! |---|---|
//! | `none` | Resets everything: no delay, exact clock. The default. |
//! | `cloudex` | Cloud-like links after CloudEx and Onyx: both directions 50 µs base + log-normal jitter (median 20 µs, σ 0.5; so ≈ 70 µs median, ≈ 90 µs p90 one way); inbound also gets CloudEx's spike pattern, an extra 0, 400 or 200 µs changing every 6 s; clock `huygens` (CloudEx ran with Huygens). |
//! | `huygens` | Clock only: offset drawn per gateway from a Gaussian with σ = 50 ns (Huygens-synced clocks; CloudEx measured p99 ≈ 160 ns). |
//! | `ntp` | Clock only: offset drawn per gateway uniformly from 1–10 ms with a random sign (what CloudEx saw with NTP). |
//!
//! | Key | Value | Meaning |
//! |---|---|---|
//! | `in`, `out` | duration | Base delay, inbound / outbound. |
//! | `jitter` | duration | Median of the log-normal jitter, both directions (0 = none). |
//! | `in_jitter`, `out_jitter` | duration | The same, one direction. |
//! | `sigma` | number ≥ 0 | σ of the jitter's log-normal, both directions (default 0.5). |
//! | `spikes`, `out_spikes` | `A/B/C@PERIOD` or `none` | Extra delay stepping through A, B, C, … every PERIOD, inbound / outbound. List items without a unit are µs: `spikes=0/400/200@6s`. |
//! | `phase` | integer | Step the spike pattern starts at, both directions (wherever it appears in the spec). Gateway `i` is shifted by `i` more steps. |
//! | `clock` | `none`, `huygens`, `ntp` | The clock preset alone. |
//! | `offset` | signed duration | Fixed offset added to the drawn one, the same for every gateway (give gateways different specs to skew them apart). |
//! | `drift` | number, optional `ppm` | Drift bound: each gateway's drift is drawn uniformly from [−drift, +drift] ppm. Default 0. |
//! | `sync` | duration | How often drift is re-zeroed (default 1 s; 0 = never, which disables drift). |
//!
//! Durations are a number (decimals allowed) and a unit: `ns`, `us` (or `µs`), `ms`, `s`.
//! Example: `in=100us,jitter=20us,spikes=0/400/200@6s,out=50us,offset=1ms,drift=10ppm,clock=huygens`;
//! presets combine with keys: `cloudex,ntp`, `cloudex,jitter=0`.
//!
//! # Determinism
//!
//! [`Profile::for_gateway`] derives every draw from `(seed, gateway index, purpose)`, so a
//! gateway's clock and its delay seeds do not depend on other gateways or on the spec's other
//! keys. Spike steps are a function of true time, so all gateways step at the same instants.

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::clock::{true_now_ns, SkewedClock};
use crate::precise;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// Log-normal jitter added to a delay: `median × e^(σ·Z)`, Z standard normal. A median of 0 means
/// no jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Jitter {
    /// Median jitter, ns (0: none).
    pub median_ns: u64,
    /// σ of the underlying normal; 0.5 puts p90 at ≈ 1.9 × the median and p99 at ≈ 3.2 ×.
    pub sigma: f64,
}

impl Jitter {
    /// The σ used unless a spec says otherwise.
    pub const DEFAULT_SIGMA: f64 = 0.5;

    /// No jitter.
    pub const NONE: Jitter = Jitter { median_ns: 0, sigma: Self::DEFAULT_SIGMA };

    /// Draws one jitter value, ns.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        if self.median_ns == 0 {
            return 0;
        }
        let z = standard_normal(rng);
        // `as` saturates: an absurd draw becomes u64::MAX rather than wrapping.
        (self.median_ns as f64 * (self.sigma * z).exp()).round() as u64
    }
}

impl Default for Jitter {
    fn default() -> Self {
        Self::NONE
    }
}

/// A periodic extra delay: step `k` of true time (`true_ns / period`) adds
/// `extra_ns[(k + phase) % extra_ns.len()]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spikes {
    /// The extra delay of each step, ns.
    pub extra_ns: Vec<u64>,
    /// How long each step lasts, ns.
    pub period_ns: u64,
    /// The step the pattern is at when `true_ns / period` is a multiple of the pattern length.
    pub phase: u64,
}

impl Spikes {
    /// CloudEx's gateway → engine pattern: an extra 0, 400 or 200 µs, changing every 6 s.
    pub fn cloudex() -> Self {
        Self { extra_ns: vec![0, 400 * US, 200 * US], period_ns: 6 * SEC, phase: 0 }
    }

    /// The extra delay at true time `true_ns`.
    pub fn extra_at(&self, true_ns: u64) -> u64 {
        if self.extra_ns.is_empty() || self.period_ns == 0 {
            return 0;
        }
        let len = self.extra_ns.len() as u64;
        let step = (true_ns / self.period_ns) % len;
        self.extra_ns[((step + self.phase % len) % len) as usize]
    }
}

/// The delay of one direction of one gateway's link: base + jitter + spikes.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DelayModel {
    /// Constant delay, ns.
    pub base_ns: u64,
    /// Random delay on top.
    pub jitter: Jitter,
    /// Periodic extra delay on top.
    pub spikes: Option<Spikes>,
}

impl DelayModel {
    /// No delay.
    pub fn zero() -> Self {
        Self::default()
    }

    /// Whether every sample is 0 (then a [`DelayLine`] forwards on the sender's thread).
    pub fn is_zero(&self) -> bool {
        self.base_ns == 0
            && self.jitter.median_ns == 0
            && self.spikes.as_ref().is_none_or(|s| s.extra_ns.iter().all(|&e| e == 0))
    }

    /// Draws the delay of an item sent at true time `true_now_ns`, ns.
    pub fn sample<R: Rng + ?Sized>(&self, true_now_ns: u64, rng: &mut R) -> u64 {
        let spike = self.spikes.as_ref().map_or(0, |s| s.extra_at(true_now_ns));
        self.base_ns.saturating_add(self.jitter.sample(rng)).saturating_add(spike)
    }
}

/// Which distribution a gateway's clock offset is drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClockPreset {
    /// No random offset.
    #[default]
    None,
    /// Gaussian offset, σ = 50 ns.
    Huygens,
    /// Offset uniform in 1–10 ms, random sign.
    Ntp,
}

impl ClockPreset {
    /// Draws an offset, ns.
    pub fn draw_offset<R: Rng + ?Sized>(self, rng: &mut R) -> i64 {
        match self {
            ClockPreset::None => 0,
            ClockPreset::Huygens => (50.0 * standard_normal(rng)).round() as i64,
            ClockPreset::Ntp => {
                let magnitude = rng.gen_range(MS..=10 * MS) as i64;
                if rng.gen::<bool>() {
                    magnitude
                } else {
                    -magnitude
                }
            }
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "none" => Some(ClockPreset::None),
            "huygens" => Some(ClockPreset::Huygens),
            "ntp" => Some(ClockPreset::Ntp),
            _ => None,
        }
    }
}

/// The clock part of a [`ProfileSpec`], before the per-gateway draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClockSpec {
    /// Where the random part of the offset comes from.
    pub preset: ClockPreset,
    /// Fixed offset added to the drawn one, ns.
    pub offset_ns: i64,
    /// Drift bound, ppm: each gateway draws its drift uniformly from `[−bound, +bound]`.
    pub drift_ppm_bound: f64,
    /// Sync period, ns (0: never, no drift).
    pub sync_every_ns: u64,
}

impl Default for ClockSpec {
    fn default() -> Self {
        Self { preset: ClockPreset::None, offset_ns: 0, drift_ppm_bound: 0.0, sync_every_ns: SEC }
    }
}

/// One gateway's clock: the parameters of a [`SkewedClock`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClockModel {
    /// Offset from true time, ns (negative: behind).
    pub offset_ns: i64,
    /// Drift between syncs, ppm.
    pub drift_ppm: f64,
    /// Sync period, ns (0: never, no drift).
    pub sync_every_ns: u64,
}

impl ClockModel {
    /// The exact clock.
    pub fn none() -> Self {
        Self::default()
    }

    /// A Huygens-like clock: offset drawn from N(0, 50 ns) with a generator seeded by `seed`.
    pub fn huygens(seed: u64) -> Self {
        Self { offset_ns: ClockPreset::Huygens.draw_offset(&mut ChaCha8Rng::seed_from_u64(seed)), ..Self::none() }
    }

    /// An NTP-like clock: offset drawn uniformly from ±(1–10 ms) with a generator seeded by `seed`.
    pub fn ntp(seed: u64) -> Self {
        Self { offset_ns: ClockPreset::Ntp.draw_offset(&mut ChaCha8Rng::seed_from_u64(seed)), ..Self::none() }
    }

    /// The clock itself.
    pub fn skewed(&self) -> SkewedClock {
        SkewedClock::new(self.offset_ns, self.drift_ppm, self.sync_every_ns)
    }
}

/// What to inject, as parsed from a spec string (see the module docs); shared by all gateways.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ProfileSpec {
    /// Gateway → sequencer delay.
    pub inbound: DelayModel,
    /// Engine → gateway delay.
    pub outbound: DelayModel,
    /// Clock error.
    pub clock: ClockSpec,
}

impl ProfileSpec {
    /// The `cloudex` preset (see the module docs).
    pub fn cloudex() -> Self {
        let link = |spikes| DelayModel { base_ns: 50 * US, jitter: Jitter { median_ns: 20 * US, sigma: 0.5 }, spikes };
        Self {
            inbound: link(Some(Spikes::cloudex())),
            outbound: link(None),
            clock: ClockSpec { preset: ClockPreset::Huygens, ..ClockSpec::default() },
        }
    }

    fn apply_preset(&mut self, name: &str) -> Result<(), SpecError> {
        match name {
            "none" => *self = Self::default(),
            "cloudex" => *self = Self::cloudex(),
            "huygens" => self.clock.preset = ClockPreset::Huygens,
            "ntp" => self.clock.preset = ClockPreset::Ntp,
            _ => return Err(SpecError::UnknownPreset(name.to_owned())),
        }
        Ok(())
    }

    fn apply_key(&mut self, key: &str, value: &str, phase: &mut Option<u64>) -> Result<(), SpecError> {
        let bad = |reason: &str| SpecError::BadValue {
            key: key.to_owned(),
            value: value.to_owned(),
            reason: reason.to_owned(),
        };
        match key {
            "in" => self.inbound.base_ns = parse_duration(value).map_err(bad)?,
            "out" => self.outbound.base_ns = parse_duration(value).map_err(bad)?,
            "jitter" | "in_jitter" | "out_jitter" => {
                let median = parse_duration(value).map_err(bad)?;
                if key != "out_jitter" {
                    self.inbound.jitter.median_ns = median;
                }
                if key != "in_jitter" {
                    self.outbound.jitter.median_ns = median;
                }
            }
            "sigma" => {
                let sigma: f64 = value.parse().map_err(|_| bad("expected a number such as 0.5"))?;
                if !(sigma.is_finite() && (0.0..=10.0).contains(&sigma)) {
                    return Err(bad("sigma must be between 0 and 10"));
                }
                self.inbound.jitter.sigma = sigma;
                self.outbound.jitter.sigma = sigma;
            }
            "spikes" | "in_spikes" => self.inbound.spikes = parse_spikes(value).map_err(bad)?,
            "out_spikes" => self.outbound.spikes = parse_spikes(value).map_err(bad)?,
            "phase" => *phase = Some(value.parse().map_err(|_| bad("expected a non-negative integer"))?),
            "clock" => {
                self.clock.preset = ClockPreset::parse(value).ok_or_else(|| bad("expected none, huygens or ntp"))?
            }
            "offset" => self.clock.offset_ns = parse_signed_duration(value).map_err(bad)?,
            "drift" => {
                let number = value.strip_suffix("ppm").unwrap_or(value).trim();
                let ppm: f64 = number.parse().map_err(|_| bad("expected a number of ppm such as 10ppm"))?;
                if !(ppm.is_finite() && (0.0..=1e6).contains(&ppm)) {
                    return Err(bad("drift must be between 0 and 1000000 ppm"));
                }
                self.clock.drift_ppm_bound = ppm;
            }
            "sync" => self.clock.sync_every_ns = parse_duration(value).map_err(bad)?,
            _ => return Err(SpecError::UnknownKey(key.to_owned())),
        }
        Ok(())
    }
}

impl FromStr for ProfileSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, SpecError> {
        if s.trim().is_empty() {
            return Err(SpecError::Empty);
        }
        let mut spec = ProfileSpec::default();
        let mut phase = None;
        for token in s.split(',').map(str::trim) {
            if token.is_empty() {
                return Err(SpecError::EmptyItem);
            }
            match token.split_once('=') {
                Some((key, value)) => spec.apply_key(key.trim(), value.trim(), &mut phase)?,
                None => spec.apply_preset(token)?,
            }
        }
        if let Some(phase) = phase {
            for spikes in [&mut spec.inbound.spikes, &mut spec.outbound.spikes].into_iter().flatten() {
                spikes.phase = phase;
            }
        }
        Ok(spec)
    }
}

/// Why a spec string did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpecError {
    /// The spec is empty.
    Empty,
    /// Two commas in a row, or a leading or trailing comma.
    EmptyItem,
    /// A word that is neither a preset nor `key=value`.
    UnknownPreset(String),
    /// A key that is not recognised.
    UnknownKey(String),
    /// A known key with a value that does not parse.
    BadValue {
        /// The key.
        key: String,
        /// The value as written.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::Empty => write!(f, "empty injection profile (use `none` for no injection)"),
            SpecError::EmptyItem => write!(f, "empty item in injection profile (check for doubled or trailing commas)"),
            SpecError::UnknownPreset(word) => {
                write!(f, "unknown injection preset `{word}` (expected none, cloudex, huygens, ntp, or key=value)")
            }
            SpecError::UnknownKey(key) => write!(
                f,
                "unknown injection key `{key}` (expected in, out, jitter, in_jitter, out_jitter, sigma, \
                 spikes, out_spikes, phase, clock, offset, drift or sync)"
            ),
            SpecError::BadValue { key, value, reason } => write!(f, "bad value `{value}` for `{key}`: {reason}"),
        }
    }
}

impl std::error::Error for SpecError {}

/// Parses `12us`, `1.5ms`, `0`, … into ns. A bare 0 needs no unit; anything else does.
fn parse_duration(s: &str) -> Result<u64, &'static str> {
    parse_duration_default_unit(s, None)
}

fn parse_duration_default_unit(s: &str, default_unit_ns: Option<u64>) -> Result<u64, &'static str> {
    let s = s.trim();
    let split = s.find(|c: char| c.is_alphabetic()).unwrap_or(s.len());
    let (number, unit) = (s[..split].trim(), s[split..].trim());
    let unit_ns = match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => US,
        "ms" => MS,
        "s" => SEC,
        "" => match default_unit_ns {
            Some(unit) => unit,
            None if number.parse::<f64>() == Ok(0.0) => 1,
            None => return Err("missing unit (ns, us, ms or s)"),
        },
        _ => return Err("unknown unit (expected ns, us, ms or s)"),
    };
    if number.starts_with(['-', '+']) {
        return Err("must not be signed");
    }
    let value: f64 = number.parse().map_err(|_| "expected a number followed by a unit, such as 100us")?;
    let ns = (value * unit_ns as f64).round();
    if !ns.is_finite() || ns >= u64::MAX as f64 {
        return Err("too large");
    }
    Ok(ns as u64)
}

fn parse_signed_duration(s: &str) -> Result<i64, &'static str> {
    let s = s.trim();
    let (negative, magnitude) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let ns = i64::try_from(parse_duration(magnitude)?).map_err(|_| "too large")?;
    Ok(if negative { -ns } else { ns })
}

/// Parses `none` or `A/B/C@PERIOD`; list items without a unit are µs.
fn parse_spikes(s: &str) -> Result<Option<Spikes>, &'static str> {
    if s == "none" {
        return Ok(None);
    }
    let (list, period) = s.split_once('@').ok_or("expected LIST@PERIOD, such as 0/400/200@6s, or none")?;
    let extra_ns =
        list.split('/').map(|item| parse_duration_default_unit(item, Some(US))).collect::<Result<Vec<_>, _>>()?;
    let period_ns = parse_duration(period)?;
    if period_ns == 0 {
        return Err("the spike period must be positive");
    }
    Ok(Some(Spikes { extra_ns, period_ns, phase: 0 }))
}

/// One gateway's injection: its links' delays, its clock and the seeds for its delay lines.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// Gateway → sequencer delay.
    pub inbound: DelayModel,
    /// Engine → gateway delay.
    pub outbound: DelayModel,
    /// The gateway's clock.
    pub clock: ClockModel,
    /// Seed for the inbound [`DelayLine`].
    pub inbound_seed: u64,
    /// Seed for the outbound [`DelayLine`].
    pub outbound_seed: u64,
}

impl Profile {
    /// The profile of gateway `gateway_index` under `spec`, with draws seeded by `seed`: the clock
    /// offset and drift are drawn, and spike patterns are shifted by `gateway_index` steps.
    pub fn for_gateway(spec: &ProfileSpec, gateway_index: u32, seed: u64) -> Self {
        let rng = |purpose| ChaCha8Rng::seed_from_u64(derive_seed(seed, gateway_index, purpose));
        let shift = |model: &DelayModel| {
            let mut model = model.clone();
            if let Some(spikes) = &mut model.spikes {
                spikes.phase = spikes.phase.wrapping_add(u64::from(gateway_index));
            }
            model
        };
        let bound = spec.clock.drift_ppm_bound;
        let drift_ppm = if bound > 0.0 { rng(Purpose::Drift).gen_range(-bound..=bound) } else { 0.0 };
        let offset_ns = spec.clock.preset.draw_offset(&mut rng(Purpose::Offset)).saturating_add(spec.clock.offset_ns);
        Self {
            inbound: shift(&spec.inbound),
            outbound: shift(&spec.outbound),
            clock: ClockModel { offset_ns, drift_ppm, sync_every_ns: spec.clock.sync_every_ns },
            inbound_seed: derive_seed(seed, gateway_index, Purpose::Inbound),
            outbound_seed: derive_seed(seed, gateway_index, Purpose::Outbound),
        }
    }
}

#[derive(Clone, Copy)]
enum Purpose {
    Offset = 1,
    Drift = 2,
    Inbound = 3,
    Outbound = 4,
}

/// A seed for one purpose of one gateway, well mixed (SplitMix64's finaliser) so nearby inputs
/// give unrelated streams.
fn derive_seed(seed: u64, gateway_index: u32, purpose: Purpose) -> u64 {
    let mut z = seed ^ ((u64::from(gateway_index) << 8) | purpose as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for _ in 0..2 {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
    }
    z
}

/// A standard normal draw (Box–Muller).
fn standard_normal<R: Rng + ?Sized>(rng: &mut R) -> f64 {
    let u1 = 1.0 - rng.gen::<f64>(); // (0, 1]: ln is finite
    let u2 = rng.gen::<f64>();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A link that delays items by a [`DelayModel`] and keeps them in order.
///
/// Items are stamped with the true time when [`DelayLine::send`] is called; each item's due time
/// is `max(previous due, sent + sample)`, so the line is FIFO (like a TCP link: a slow item holds
/// up the ones behind it). A dedicated thread (timer slack lowered, see [`crate::precise`])
/// sleeps until each due time and hands the item to the sink.
///
/// A model that is always zero ([`DelayModel::is_zero`]) spawns no thread: `send` calls the sink
/// directly on the sender's thread, under a mutex. (No item is ever in flight then, so FIFO holds.)
///
/// Dropping the line closes it: the thread delivers everything already sent, each at its due time,
/// and the drop waits for that.
pub struct DelayLine<T: Send + 'static> {
    inner: Inner<T>,
}

type Sink<T> = Box<dyn FnMut(T) + Send>;

enum Inner<T> {
    Direct(Mutex<Sink<T>>),
    Threaded { tx: Option<mpsc::Sender<(u64, T)>>, thread: Option<JoinHandle<()>> },
}

impl<T: Send + 'static> DelayLine<T> {
    /// Starts a line named `name` (the thread's name) delaying by `model`, with jitter drawn from a
    /// generator seeded by `seed`, delivering to `sink`.
    pub fn spawn(
        name: &str,
        model: DelayModel,
        seed: u64,
        sink: impl FnMut(T) + Send + 'static,
    ) -> std::io::Result<Self> {
        if model.is_zero() {
            return Ok(Self { inner: Inner::Direct(Mutex::new(Box::new(sink))) });
        }
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name(name.to_owned()).spawn(move || {
            // Best effort: without it, wake-ups are up to 50 µs later (the default slack).
            let _ = precise::lower_timer_slack();
            run_line(rx, model, ChaCha8Rng::seed_from_u64(seed), sink);
        })?;
        Ok(Self { inner: Inner::Threaded { tx: Some(tx), thread: Some(thread) } })
    }

    /// Sends `item` down the line without blocking. Fails, handing the item back, only if the
    /// line's thread has died (its sink panicked).
    pub fn send(&self, item: T) -> Result<(), T> {
        match &self.inner {
            Inner::Direct(sink) => {
                let mut sink = sink.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                sink(item);
                Ok(())
            }
            Inner::Threaded { tx, .. } => match tx {
                Some(tx) => tx.send((true_now_ns(), item)).map_err(|mpsc::SendError((_, item))| item),
                None => Err(item),
            },
        }
    }

    /// Whether this line runs its own thread (false when its model is always zero).
    pub fn is_threaded(&self) -> bool {
        matches!(self.inner, Inner::Threaded { .. })
    }
}

impl<T: Send + 'static> Drop for DelayLine<T> {
    fn drop(&mut self) {
        if let Inner::Threaded { tx, thread } = &mut self.inner {
            drop(tx.take());
            if let Some(thread) = thread.take() {
                // A panic in the sink has already been reported on that thread.
                let _ = thread.join();
            }
        }
    }
}

impl<T: Send + 'static> fmt::Debug for DelayLine<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DelayLine").field("threaded", &self.is_threaded()).finish()
    }
}

/// The line's thread: queue arrivals with their due times, deliver each when due.
fn run_line<T>(rx: mpsc::Receiver<(u64, T)>, model: DelayModel, mut rng: ChaCha8Rng, mut sink: impl FnMut(T)) {
    let mut queue: VecDeque<(u64, T)> = VecDeque::new();
    let mut last_due = 0u64;
    let mut enqueue = |queue: &mut VecDeque<(u64, T)>, (sent, item): (u64, T)| {
        last_due = last_due.max(sent.saturating_add(model.sample(sent, &mut rng)));
        queue.push_back((last_due, item));
    };
    loop {
        if queue.is_empty() {
            match rx.recv() {
                Ok(msg) => enqueue(&mut queue, msg),
                Err(mpsc::RecvError) => return, // closed and drained
            }
        }
        // Nothing sent later can be due earlier (FIFO), so sleeping to the head's due time
        // never delays another item; new arrivals wait in the channel meanwhile.
        while let Ok(msg) = rx.try_recv() {
            enqueue(&mut queue, msg);
        }
        if let Some(&(due, _)) = queue.front() {
            precise::sleep_until_ns(due);
            let now = true_now_ns();
            while queue.front().is_some_and(|&(due, _)| due <= now) {
                if let Some((_, item)) = queue.pop_front() {
                    sink(item);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;
    use std::time::Duration;

    fn spec(s: &str) -> ProfileSpec {
        s.parse().unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn error(s: &str) -> String {
        s.parse::<ProfileSpec>().unwrap_err().to_string()
    }

    #[test]
    fn presets() {
        assert_eq!(spec("none"), ProfileSpec::default());
        assert!(spec("none").inbound.is_zero() && spec("none").outbound.is_zero());
        let c = spec("cloudex");
        assert_eq!(c.inbound.base_ns, 50 * US);
        assert_eq!(c.inbound.jitter, Jitter { median_ns: 20 * US, sigma: 0.5 });
        assert_eq!(c.inbound.spikes, Some(Spikes::cloudex()));
        assert_eq!(c.outbound.spikes, None);
        assert_eq!(c.clock.preset, ClockPreset::Huygens);
        assert_eq!(spec("ntp").clock.preset, ClockPreset::Ntp);
        assert!(spec("huygens").inbound.is_zero());
        let combined = spec("cloudex, ntp");
        assert_eq!((combined.inbound.base_ns, combined.clock.preset), (50 * US, ClockPreset::Ntp));
        assert_eq!(spec("cloudex,none"), ProfileSpec::default());
        assert_eq!(spec("cloudex,jitter=0").outbound.jitter.median_ns, 0);
    }

    #[test]
    fn full_example() {
        let s = spec("in=100us,jitter=20us,spikes=0/400/200@6s,out=50us,offset=1ms,drift=10ppm,clock=huygens");
        assert_eq!(s.inbound.base_ns, 100 * US);
        assert_eq!(s.outbound.base_ns, 50 * US);
        assert_eq!(s.inbound.jitter.median_ns, 20 * US);
        assert_eq!(s.outbound.jitter.median_ns, 20 * US);
        assert_eq!(s.inbound.spikes, Some(Spikes::cloudex()));
        assert_eq!(s.outbound.spikes, None);
        assert_eq!(
            s.clock,
            ClockSpec { preset: ClockPreset::Huygens, offset_ns: MS as i64, drift_ppm_bound: 10.0, sync_every_ns: SEC }
        );
    }

    #[test]
    fn keys_and_units() {
        let s = spec("in=1.5ms,out=250ns,in_jitter=3µs,sigma=0.25,offset=-2s,drift=3.5,sync=100ms");
        assert_eq!((s.inbound.base_ns, s.outbound.base_ns), (1_500_000, 250));
        assert_eq!((s.inbound.jitter.median_ns, s.outbound.jitter.median_ns), (3_000, 0));
        assert_eq!((s.inbound.jitter.sigma, s.outbound.jitter.sigma), (0.25, 0.25));
        assert_eq!(
            (s.clock.offset_ns, s.clock.drift_ppm_bound, s.clock.sync_every_ns),
            (-2 * SEC as i64, 3.5, 100 * MS)
        );
        let s = spec("phase=2,out_spikes=1ms/2us/0@500ms,spikes=5/6@1s");
        assert_eq!(s.outbound.spikes, Some(Spikes { extra_ns: vec![MS, 2 * US, 0], period_ns: 500 * MS, phase: 2 }));
        assert_eq!(s.inbound.spikes, Some(Spikes { extra_ns: vec![5 * US, 6 * US], period_ns: SEC, phase: 2 }));
        assert_eq!(spec("cloudex,spikes=none").inbound.spikes, None);
        assert_eq!(spec("in=0").inbound.base_ns, 0);
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        assert!(error("").contains("empty"));
        assert!(error("none,,cloudex").contains("empty item"));
        assert!(error("fast").contains("unknown injection preset `fast`"));
        assert!(error("latency=5us").contains("unknown injection key `latency`"));
        assert_eq!(error("in=100"), "bad value `100` for `in`: missing unit (ns, us, ms or s)");
        assert!(error("in=100mins").contains("unknown unit"));
        assert!(error("in=-5us").contains("signed"));
        assert!(error("in=fast").contains("`in`"));
        assert!(error("spikes=0/400/200").contains("LIST@PERIOD"));
        assert!(error("spikes=0/400@0s").contains("period"));
        assert!(error("sigma=-1").contains("sigma"));
        assert!(error("drift=lots").contains("ppm"));
        assert!(error("clock=gps").contains("huygens"));
        assert!(error("phase=-1").contains("integer"));
    }

    #[test]
    fn spikes_step_with_true_time_and_phase() {
        let s = Spikes::cloudex();
        assert_eq!(s.extra_at(0), 0);
        assert_eq!(s.extra_at(6 * SEC - 1), 0);
        assert_eq!(s.extra_at(6 * SEC), 400 * US);
        assert_eq!(s.extra_at(12 * SEC), 200 * US);
        assert_eq!(s.extra_at(18 * SEC), 0);
        let shifted = Spikes { phase: 1, ..Spikes::cloudex() };
        assert_eq!(shifted.extra_at(0), 400 * US);
        assert_eq!(shifted.extra_at(12 * SEC), 0);
    }

    #[test]
    fn delay_samples() {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let fixed = DelayModel { base_ns: 10 * US, ..DelayModel::zero() };
        assert_eq!(fixed.sample(0, &mut rng), 10 * US);
        let spiky = DelayModel { spikes: Some(Spikes::cloudex()), ..fixed.clone() };
        assert_eq!(spiky.sample(7 * SEC, &mut rng), 410 * US);
        assert!(!spiky.is_zero());
        assert!(DelayModel {
            spikes: Some(Spikes { extra_ns: vec![0, 0], period_ns: 1, phase: 0 }),
            ..DelayModel::zero()
        }
        .is_zero());

        // Log-normal jitter: the sample median is near the median, and σ spreads it.
        let jittery = DelayModel { base_ns: 0, jitter: Jitter { median_ns: 20 * US, sigma: 0.5 }, spikes: None };
        let mut samples: Vec<u64> = (0..20_000).map(|_| jittery.sample(0, &mut rng)).collect();
        samples.sort_unstable();
        let median = samples[samples.len() / 2] as f64;
        assert!((median / (20 * US) as f64 - 1.0).abs() < 0.05, "median {median}");
        let p90 = samples[samples.len() * 9 / 10] as f64;
        assert!((p90 / median - (0.5f64 * 1.2816).exp()).abs() < 0.1, "p90/median {}", p90 / median);
    }

    #[test]
    fn per_gateway_draws_are_seeded_and_distinct() {
        let s = spec("huygens,drift=10ppm,spikes=0/400/200@6s");
        let a = Profile::for_gateway(&s, 3, 42);
        assert_eq!(a, Profile::for_gateway(&s, 3, 42), "deterministic");
        assert_ne!(a.clock, Profile::for_gateway(&s, 4, 42).clock);
        assert_ne!(a.clock, Profile::for_gateway(&s, 3, 43).clock);
        assert_ne!(a.inbound_seed, a.outbound_seed);
        assert_eq!(a.inbound.spikes.as_ref().map(|s| s.phase), Some(3));
        assert!(a.clock.drift_ppm.abs() <= 10.0);
        // Same seed and gateway: the offset does not depend on the other keys.
        assert_eq!(Profile::for_gateway(&spec("huygens"), 3, 42).clock.offset_ns, a.clock.offset_ns);

        let offsets: Vec<f64> = (0..2_000).map(|g| Profile::for_gateway(&s, g, 7).clock.offset_ns as f64).collect();
        let mean = offsets.iter().sum::<f64>() / offsets.len() as f64;
        let sd = (offsets.iter().map(|o| (o - mean).powi(2)).sum::<f64>() / offsets.len() as f64).sqrt();
        assert!(mean.abs() < 5.0 && (sd - 50.0).abs() < 5.0, "mean {mean} sd {sd}");

        let ntp = spec("ntp,offset=-1ms");
        let mut signs = [0; 2];
        for g in 0..200 {
            let offset = Profile::for_gateway(&ntp, g, 7).clock.offset_ns + MS as i64;
            assert!((MS as i64..=10 * MS as i64).contains(&offset.abs()), "{offset}");
            signs[usize::from(offset > 0)] += 1;
        }
        assert!(signs[0] > 50 && signs[1] > 50, "{signs:?}");
        let exact = Profile::for_gateway(&spec("none"), 5, 1).clock;
        assert_eq!((exact.offset_ns, exact.drift_ppm), (0, 0.0));
    }

    #[test]
    fn clock_model_presets() {
        assert_eq!(ClockModel::none().skewed(), SkewedClock::exact());
        assert_eq!(ClockModel::huygens(9), ClockModel::huygens(9));
        assert!(ClockModel::huygens(9).offset_ns.abs() < 500);
        let ntp = ClockModel::ntp(9);
        assert!((MS as i64..=10 * MS as i64).contains(&ntp.offset_ns.abs()));
        let clock = ClockModel { offset_ns: 5, drift_ppm: 0.0, sync_every_ns: SEC }.skewed();
        assert_eq!(clock.at(100), 105);
    }

    #[test]
    fn delay_line_delays_and_keeps_order() {
        let (tx, rx) = channel();
        // Heavy jitter (σ 1.5) makes later samples often smaller: FIFO must still hold.
        let model = DelayModel { base_ns: 200 * US, jitter: Jitter { median_ns: 100 * US, sigma: 1.5 }, spikes: None };
        let line = DelayLine::spawn("test-delay", model, 5, move |(i, sent): (u32, u64)| {
            tx.send((i, sent, true_now_ns())).unwrap();
        })
        .unwrap();
        assert!(line.is_threaded());
        for i in 0..200 {
            line.send((i, true_now_ns())).unwrap();
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        drop(line); // delivers everything queued before returning
        let out: Vec<_> = rx.try_iter().collect();
        assert_eq!(out.iter().map(|o| o.0).collect::<Vec<_>>(), (0..200).collect::<Vec<_>>());
        assert!(out.iter().all(|&(_, sent, delivered)| delivered >= sent + 200 * US));
    }

    #[test]
    fn zero_delay_line_forwards_on_the_senders_thread() {
        let (tx, rx) = channel();
        let line = DelayLine::spawn("test-zero", DelayModel::zero(), 0, move |i: u32| {
            tx.send((i, std::thread::current().id())).unwrap();
        })
        .unwrap();
        assert!(!line.is_threaded());
        line.send(1).unwrap();
        assert_eq!(rx.try_recv().unwrap(), (1, std::thread::current().id()));
    }
}

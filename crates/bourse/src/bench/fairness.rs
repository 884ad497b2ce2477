//! `bourse bench fairness`: inbound and outbound unfairness, measured on one machine.
//!
//! One node (in this process) and several gateways (in this process too, each with its
//! own injected delays and clock error from `--profile`, seeded); traders spread over
//! the gateways send Poisson order flows at an open-loop rate. Each run of the sweep
//! starts everything afresh with one (d_s, d_h) pair and measures:
//!
//! - inbound unfairness: orders in the order the engine processed them (their order
//!   ids), each with the stamp its gateway gave it; the share stamped earlier than the
//!   order processed just before (CloudEx's ratio, `iur_prev`) and than the highest
//!   stamp processed so far (`iur_hwm`, stricter); also the same on true arrival
//!   times (clock error removed: only possible here, where the clock model is known);
//! - outbound unfairness: market data items (log entries with public events) that
//!   reached at least one gateway after their release time, and the delivery spread
//!   (latest minus earliest release of the same item across gateways, true clock);
//! - the cost: order acknowledgement latency from each order's intended send time, and
//!   how long after t_m market data went out.
//!
//! The recommended setting is the cheapest of the sweep that meets both targets
//! (unfairness under 0.1 %, delivery spread p99 under 100 µs).
//!
//! `--adaptive` adds a run whose node adapts d_h and d_s through the log (`[fairness]
//! adaptive`, within `--adaptive-hold-us` and `--adaptive-window-us`), to hold against
//! the fixed settings in the same sitting; `--hog N` keeps N threads spinning through
//! every run (a busy host). Each run reports the mean hold its releases had.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, Client, ClientOptions};
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{Px, Qty, Side};
use bourse_fairness::{true_now_ns, Profile, ProfileSpec, Spread, Unfairness};
use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::{Node, NodeConfig};
use clap::Args;
use hdrhistogram::Histogram;
use rand::{Rng, SeedableRng};

use super::host::CpuTimes;

#[derive(Args, Debug)]
pub struct FairnessArgs {
    /// Gateways, each with its own injected delays and clock.
    #[arg(long, default_value_t = 4)]
    gateways: u32,
    /// Traders per gateway.
    #[arg(long, default_value_t = 2)]
    traders: u32,
    /// Orders per second per trader (Poisson arrivals). The defaults (1,600 orders/s in
    /// all) leave some of a 2-core machine idle: everything runs in this one process, and
    /// a saturated machine measures its scheduler, not the mechanisms.
    #[arg(long, default_value_t = 200.0)]
    rate: f64,
    /// Seconds of trading per run.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Sequencing windows d_s to try, in µs.
    #[arg(long, value_delimiter = ',', default_value = "0,250,500,750,1000,2000,3000")]
    d_s: Vec<u64>,
    /// Hold times d_h to try, in µs. With as many values as --d-s the two lists are
    /// paired in order; otherwise every combination runs.
    #[arg(long, value_delimiter = ',', default_value = "0,250,500,750,1000,2000,3000")]
    d_h: Vec<u64>,
    /// Injection profile of every gateway (see bourse_fairness::inject): presets none,
    /// cloudex, huygens, ntp, and keys such as in=100us,jitter=20us,spikes=0/400/200@6s,
    /// out=50us,offset=1ms,drift=10ppm,clock=huygens.
    #[arg(long, default_value = "cloudex")]
    profile: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the node's data directories go (default: /dev/shm when it exists, so the
    /// shared disk's fdatasync times, milliseconds at their tail, do not stand in for
    /// the fairness mechanisms' own delays; otherwise the system's temp directory).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// SCHED_FIFO priority of the gateways' release threads (0: ordinary priority). Each
    /// thread wakes only at its release instants; at ordinary priority it can wait behind
    /// a busy worker thread's slice, which on a small machine shows as delivery spread.
    /// Needs CAP_SYS_NICE; when refused the run goes on at ordinary priority and says so.
    #[arg(long, default_value_t = 10)]
    release_priority: u8,
    /// Release jitter of every gateway, µs (`release_jitter_us`: each release put off by
    /// a pseudo-random 0 to this, drawn per entry and gateway). Runs with d_h 0
    /// (fairness off) get none.
    #[arg(long, default_value_t = 0)]
    release_jitter_us: u64,
    /// Fairness as traders see it: this many identical bots, one per gateway (instead
    /// of --gateways and --traders), racing for the same bargains (see `races.rs`); each
    /// (d_s, d_h) pair is a run, say `--d-s 0,1000 --d-h 0,3000` for off and on.
    #[arg(long, default_value_t = 0)]
    identical_traders: u32,
    /// With --identical-traders: bargains the maker offers per second.
    #[arg(long, default_value_t = 50.0)]
    races_per_sec: f64,
    /// After the fixed runs, one whose node adapts the hold and the window through the
    /// log ([fairness] adaptive); its d_s and d_h columns show where they ended.
    #[arg(long)]
    adaptive: bool,
    /// Bounds of the adaptive hold, µs: MIN,MAX.
    #[arg(long, value_delimiter = ',', default_value = "500,100000")]
    adaptive_hold_us: Vec<u64>,
    /// Bounds of the adaptive window, µs: MIN,MAX.
    #[arg(long, value_delimiter = ',', default_value = "100,10000")]
    adaptive_window_us: Vec<u64>,
    /// The adaptive delays' horizon, seconds: how long a delay seen keeps them up.
    #[arg(long, default_value_t = 30)]
    adaptive_horizon_secs: u64,
    /// Threads that spin through every run at ordinary priority: a CPU hog (2 on a
    /// 2-core machine takes both cores from the exchange as often as the scheduler lets).
    #[arg(long, default_value_t = 0)]
    hog: u32,
    /// Print one JSON object as the last line of stdout.
    #[arg(long)]
    json: bool,
}

/// Threads that spin until dropped.
struct Hog {
    stop: Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Hog {
    fn start(count: u32) -> Hog {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = (0..count)
            .map(|i| {
                let stop = Arc::clone(&stop);
                std::thread::Builder::new()
                    .name(format!("hog{i}"))
                    .spawn(move || {
                        let mut x = 0u64;
                        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                            for _ in 0..10_000 {
                                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
                            }
                        }
                    })
                    .expect("a hog thread")
            })
            .collect();
        Hog { stop, threads }
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The figures of one run.
#[derive(Clone, Debug)]
struct RunReport {
    /// Whether the node adapted the delays (then d_s and d_h are where they ended).
    adaptive: bool,
    d_s_us: u64,
    d_h_us: u64,
    /// The mean of release time minus stamp over the releases, µs.
    hold_mean_us: f64,
    orders: u64,
    iur_prev: f64,
    iur_hwm: f64,
    iur_prev_true: f64,
    iur_hwm_true: f64,
    items: u64,
    our: f64,
    spread_p50_us: f64,
    spread_p99_us: f64,
    spread_max_us: f64,
    latency_p50_us: f64,
    latency_p99_us: f64,
    market_delay_p50_us: f64,
    seconds: f64,
    /// The share of CPU time the hypervisor took from this machine during the run
    /// (`steal` in /proc/stat), when known: on a shared VM the tail of every figure
    /// here follows it.
    steal: Option<f64>,
    /// Every gateway's release thread ran at real-time priority.
    realtime: bool,
}

impl RunReport {
    fn json(&self) -> String {
        format!(
            concat!(
                "{{\"adaptive\": {}, \"d_s_us\": {}, \"d_h_us\": {}, \"hold_mean_us\": {:.1}, \"orders\": {}, \"inbound_unfairness\": {:.6}, ",
                "\"inbound_unfairness_strict\": {:.6}, \"inbound_unfairness_true_clock\": {:.6}, ",
                "\"inbound_unfairness_strict_true_clock\": {:.6}, \"items\": {}, \"outbound_unfairness\": {:.6}, ",
                "\"delivery_spread_us_p50\": {:.1}, \"delivery_spread_us_p99\": {:.1}, \"delivery_spread_us_max\": {:.1}, ",
                "\"latency_us_p50\": {:.1}, \"latency_us_p99\": {:.1}, \"market_data_delay_us_p50\": {:.1}, \"seconds\": {:.2}, \"host_steal\": {}, \"release_realtime\": {}}}"
            ),
            self.adaptive,
            self.d_s_us,
            self.d_h_us,
            self.hold_mean_us,
            self.orders,
            self.iur_prev,
            self.iur_hwm,
            self.iur_prev_true,
            self.iur_hwm_true,
            self.items,
            self.our,
            self.spread_p50_us,
            self.spread_p99_us,
            self.spread_max_us,
            self.latency_p50_us,
            self.latency_p99_us,
            self.market_delay_p50_us,
            self.seconds,
            self.steal.map_or("null".to_string(), |steal| format!("{steal:.4}")),
            self.realtime,
        )
    }

    fn meets_targets(&self) -> bool {
        self.iur_prev < 0.001 && self.iur_hwm < 0.001 && self.our < 0.001 && self.spread_p99_us < 100.0
    }
}

pub fn run(args: &FairnessArgs) -> Result<(), String> {
    if args.gateways == 0 || args.traders == 0 || args.d_s.is_empty() || args.d_h.is_empty() {
        return Err("--gateways, --traders, --d-s and --d-h must not be empty or zero".into());
    }
    if !(args.rate > 0.0 && args.seconds > 0.0) {
        return Err("--rate and --seconds must be positive".into());
    }
    if args.release_priority > 99 {
        return Err("--release-priority is 1 to 99, or 0 for ordinary priority".into());
    }
    let spec: ProfileSpec = args.profile.parse().map_err(|e| format!("--profile: {e}"))?;
    let pairs: Vec<(u64, u64)> = if args.d_s.len() == args.d_h.len() {
        args.d_s.iter().copied().zip(args.d_h.iter().copied()).collect()
    } else {
        args.d_s.iter().flat_map(|&s| args.d_h.iter().map(move |&h| (s, h))).collect()
    };
    if args.identical_traders > 0 {
        return run_races(args, &spec, &pairs);
    }
    eprintln!(
        "fairness: {} gateways x {} traders at {} orders/s each, {} s per run, profile {:?}, seed {}, node data in {}",
        args.gateways,
        args.traders,
        args.rate,
        args.seconds,
        args.profile,
        args.seed,
        args.data.as_ref().map_or("/dev/shm (or the temp directory)".into(), |d| d.display().to_string())
    );
    for g in 0..args.gateways {
        let profile = Profile::for_gateway(&spec, g, args.seed);
        eprintln!(
            "  gateway {}: to the leader {:?}; from it {:?}; clock offset {} ns, drift {:.3} ppm",
            g + 1,
            profile.inbound,
            profile.outbound,
            profile.clock.offset_ns,
            profile.clock.drift_ppm
        );
    }
    let adaptive = adaptive_table(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    let mut runs: Vec<(u64, u64, Option<bourse_node::FairnessToml>)> =
        pairs.iter().map(|&(d_s, d_h)| (d_s, d_h, None)).collect();
    if let Some(table) = adaptive {
        runs.push((table.window_max_us, table.hold_max_us, Some(table)));
    }
    if args.hog > 0 {
        eprintln!("  {} hog threads spin through every run", args.hog);
    }
    for (i, &(d_s, d_h, adaptive)) in runs.iter().enumerate() {
        match adaptive {
            None => eprintln!("run {}/{}: d_s {d_s} µs, d_h {d_h} µs", i + 1, runs.len()),
            Some(t) => eprintln!(
                "run {}/{}: adaptive, d_s {}..{} µs, d_h {}..{} µs, horizon {} s",
                i + 1,
                runs.len(),
                t.window_min_us,
                t.window_max_us,
                t.hold_min_us,
                t.hold_max_us,
                t.horizon_secs
            ),
        }
        let hog = Hog::start(args.hog);
        let report = runtime.block_on(one_run(args, &spec, d_s, d_h, adaptive));
        drop(hog);
        let report = report?;
        eprintln!(
            "  inbound {:.3}% (strict {:.3}%), outbound {:.3}%, spread p99 {:.0} µs, ack p50 {:.0} µs, mean hold {:.0} µs",
            report.iur_prev * 100.0,
            report.iur_hwm * 100.0,
            report.our * 100.0,
            report.spread_p99_us,
            report.latency_p50_us,
            report.hold_mean_us
        );
        reports.push(report);
    }
    print_table(&reports);
    let recommended = reports
        .iter()
        .filter(|r| r.meets_targets())
        .min_by_key(|r| (r.d_s_us + r.d_h_us, r.d_s_us))
        .or_else(|| reports.iter().min_by(|a, b| (a.iur_hwm + a.our).total_cmp(&(b.iur_hwm + b.our))));
    let recommended = recommended.expect("at least one run");
    println!(
        "recommended: d_s {} µs, d_h {} µs ({})",
        recommended.d_s_us,
        recommended.d_h_us,
        if recommended.meets_targets() { "meets every target" } else { "the fairest run; no run met every target" }
    );
    if args.json {
        let sweep: Vec<String> = reports.iter().map(RunReport::json).collect();
        let last = recommended.json();
        println!("{{\"sweep\": [{}], \"recommended\": {}, {}", sweep.join(", "), last, &last[1..]);
    }
    Ok(())
}

/// The `[fairness]` table of the `--adaptive` run, if asked for.
fn adaptive_table(args: &FairnessArgs) -> Result<Option<bourse_node::FairnessToml>, String> {
    if !args.adaptive {
        return Ok(None);
    }
    let [hold_min_us, hold_max_us] = args.adaptive_hold_us[..] else {
        return Err("--adaptive-hold-us is MIN,MAX".into());
    };
    let [window_min_us, window_max_us] = args.adaptive_window_us[..] else {
        return Err("--adaptive-window-us is MIN,MAX".into());
    };
    let table = bourse_node::FairnessToml {
        adaptive: true,
        hold_min_us,
        hold_max_us,
        window_min_us,
        window_max_us,
        horizon_secs: args.adaptive_horizon_secs,
        ..bourse_node::FairnessToml::default()
    };
    let config = NodeConfig { fairness: table, ..NodeConfig::default() };
    config.validate().map_err(|e| format!("--adaptive: {e}"))?;
    Ok(Some(table))
}

/// `--identical-traders N`: a race run per (d_s, d_h) pair.
fn run_races(args: &FairnessArgs, spec: &ProfileSpec, pairs: &[(u64, u64)]) -> Result<(), String> {
    if !(args.races_per_sec > 0.0 && args.races_per_sec <= 1_000.0) {
        return Err("--races-per-sec must be in (0, 1000]".into());
    }
    let data = data_parent(args.data.as_ref());
    let settings = super::races::RaceSettings {
        bots: args.identical_traders,
        spec,
        seed: args.seed,
        rate: args.races_per_sec,
        seconds: args.seconds,
        data: &data,
        release: Release::of(args),
    };
    eprintln!(
        "fairness races: {} identical bots, one per gateway, {} bargains/s for {} s per run, profile {:?}, seed {}, release jitter {} µs",
        args.identical_traders, args.races_per_sec, args.seconds, args.profile, args.seed, args.release_jitter_us
    );
    for g in 0..args.identical_traders {
        let profile = Profile::for_gateway(spec, g, args.seed);
        eprintln!(
            "  gateway {}: to the leader {:?}; clock offset {} ns",
            g + 1,
            profile.inbound,
            profile.clock.offset_ns
        );
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let mut reports = Vec::new();
    for (i, &(d_s, d_h)) in pairs.iter().enumerate() {
        eprintln!("run {}/{}: d_s {d_s} µs, d_h {d_h} µs", i + 1, pairs.len());
        let report = runtime.block_on(super::races::one_race_run(&settings, d_s, d_h))?;
        report.print();
        reports.push(report);
    }
    if args.json {
        let runs: Vec<serde_json::Value> = reports.iter().map(super::races::RaceReport::json).collect();
        println!("{}", serde_json::json!({ "seed": args.seed, "profile": args.profile, "runs": runs }));
    }
    Ok(())
}

fn print_table(reports: &[RunReport]) {
    println!(
        "{:>8} {:>6} {:>6} {:>7} {:>7} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>7}",
        "mode",
        "d_s",
        "d_h",
        "hold",
        "orders",
        "iur%",
        "iur_hwm%",
        "iur_t%",
        "hwm_t%",
        "items",
        "our%",
        "dws_p50",
        "dws_p99",
        "ack_p50",
        "md_p50",
        "steal%"
    );
    for r in reports {
        println!(
            "{:>8} {:>6} {:>6} {:>7.0} {:>7} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>9.3} {:>9.1} {:>9.1} {:>9.0} {:>9.0} {:>7}",
            if r.adaptive { "adaptive" } else { "fixed" },
            r.d_s_us,
            r.d_h_us,
            r.hold_mean_us,
            r.orders,
            r.iur_prev * 100.0,
            r.iur_hwm * 100.0,
            r.iur_prev_true * 100.0,
            r.iur_hwm_true * 100.0,
            r.items,
            r.our * 100.0,
            r.spread_p50_us,
            r.spread_p99_us,
            r.latency_p50_us,
            r.market_delay_p50_us,
            r.steal.map_or("-".to_string(), |steal| format!("{:.1}", steal * 100.0))
        );
    }
    println!(
        "(µs: d_s, d_h (adaptive: where they ended), hold (mean release time minus stamp), delivery spread dws, \
         ack latency, market data delay after t_m; _t: on true arrival times; steal%: CPU time the hypervisor took)"
    );
}

/// One accepted order as a trader saw it.
/// Where a run's node data goes: `--data`, else /dev/shm when it exists (so the
/// shared disk's fdatasync tail does not stand in for the fairness mechanisms' own
/// delays), else the system's temp directory.
fn data_parent(data: Option<&std::path::PathBuf>) -> std::path::PathBuf {
    match data {
        Some(dir) => dir.clone(),
        None if std::path::Path::new("/dev/shm").is_dir() => "/dev/shm".into(),
        None => std::env::temp_dir(),
    }
}

/// How the gateways' release threads run: their real-time priority, if any, and
/// their release jitter (µs).
#[derive(Clone, Copy, Debug)]
pub(super) struct Release {
    pub priority: Option<u8>,
    pub jitter_us: u64,
}

impl Release {
    fn of(args: &FairnessArgs) -> Release {
        Release {
            priority: (args.release_priority > 0).then_some(args.release_priority),
            jitter_us: args.release_jitter_us,
        }
    }
}

/// `count` open gateways on the node at `endpoints`, gateway g with the injected delays
/// and clock `spec` gives it for `seed`, holding market data `d_h` µs (with a probe of
/// its releases when `probe`); returned once every feed has started, with their
/// profiles.
pub(super) async fn open_gateways(
    endpoints: &[String],
    count: u32,
    d_h: u64,
    spec: &ProfileSpec,
    seed: u64,
    release: Release,
    probe: bool,
) -> Result<(Vec<Gateway>, Vec<Profile>), String> {
    let mut gateways = Vec::new();
    let mut profiles = Vec::new();
    for g in 0..count {
        let mut config = GatewayConfig::new(g + 1, "127.0.0.1:0".parse().expect("an address"), endpoints.to_vec());
        config.hold_us = d_h;
        config.open = true;
        config.probe = probe;
        config.heartbeat_us = 1_000;
        config.inject = Profile::for_gateway(spec, g, seed);
        config.release_priority = release.priority;
        if d_h > 0 {
            config.release_jitter_us = release.jitter_us;
            config.release_jitter_seed = seed;
        }
        profiles.push(config.inject.clone());
        gateways.push(Gateway::start(config, KeyStore::default()).await.map_err(|e| e.to_string())?);
    }
    let ready_by = Instant::now() + Duration::from_secs(10);
    while !gateways.iter().all(Gateway::market_ready) {
        if Instant::now() > ready_by {
            return Err("the gateways' feeds did not start".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((gateways, profiles))
}

struct Placed {
    order: u64,
    gateway: u32,
    gateway_ts: u64,
    latency_ns: u64,
}

async fn one_run(
    args: &FairnessArgs,
    spec: &ProfileSpec,
    d_s: u64,
    d_h: u64,
    adaptive: Option<bourse_node::FairnessToml>,
) -> Result<RunReport, String> {
    let dir = tempfile::Builder::new()
        .prefix("bourse-fairness-")
        .tempdir_in(data_parent(args.data.as_ref()))
        .map_err(|e| e.to_string())?;
    let config = NodeConfig {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("an address"),
        sequencer_window_us: d_s,
        fairness: adaptive.unwrap_or_default(),
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let endpoints = vec![node.addr.to_string()];
    let setup = SymbolSetup::default();
    let options = ClientOptions::default();
    let (market, assets) = setup_market(&endpoints, &setup, &options).await.map_err(|e| e.to_string())?;
    let admin =
        Client::connect(endpoints.clone(), random_client_id(), options.clone()).await.map_err(|e| e.to_string())?;
    let accounts =
        funded_accounts(&admin, args.gateways * args.traders, assets, &setup).await.map_err(|e| e.to_string())?;
    admin.close().await.map_err(|e| e.to_string())?;

    let release = Release::of(args);
    let (gateways, profiles) = open_gateways(&endpoints, args.gateways, d_h, spec, args.seed, release, true).await?;
    let clocks: Vec<_> = profiles.iter().map(|profile| profile.clock.skewed()).collect();
    for gateway in &gateways {
        gateway.probe().take();
    }
    let realtime = gateways.iter().all(Gateway::release_realtime);
    if args.release_priority > 0 && !realtime {
        eprintln!("  (release threads at ordinary priority: SCHED_FIFO was refused; see the log)");
    }

    let placed: Arc<Mutex<Vec<Placed>>> = Arc::default();
    let cpu_before = CpuTimes::read();
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(args.seconds);
    let mut tasks = Vec::new();
    for (i, &account) in accounts.iter().enumerate() {
        let g = i as u32 % args.gateways;
        let address = gateways[g as usize].addr().to_string();
        let client = Arc::new(
            Client::connect(vec![address], random_client_id(), options.clone()).await.map_err(|e| e.to_string())?,
        );
        let placed = Arc::clone(&placed);
        let seed = args.seed.wrapping_mul(1_000).wrapping_add(i as u64);
        let rate = args.rate;
        let (symbol, mid) = (market.symbol, market.px_mid);
        tasks.push(tokio::spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
            let mut next = Instant::now();
            let mut inflight = Vec::new();
            while next < end {
                tokio::time::sleep_until(next.into()).await;
                let intended = true_now_ns() - next.elapsed().as_nanos() as u64;
                let side = if rng.gen_bool(0.5) { Side::Buy } else { Side::Sell };
                let px = mid + rng.gen_range(-4..=4);
                let body = CommandBody::Place(OrderRequest::limit(account, symbol, side, Px(px), Qty(1), Tif::Gtc));
                let (client, placed) = (Arc::clone(&client), Arc::clone(&placed));
                inflight.push(tokio::spawn(async move {
                    if let Ok(reply) = client.submit(body).await {
                        if let Some(order) = reply.ok_id() {
                            let latency_ns = true_now_ns().saturating_sub(intended);
                            let record = Placed { order, gateway: g, gateway_ts: reply.gateway_ts, latency_ns };
                            placed.lock().expect("placed lock").push(record);
                        }
                    }
                }));
                let gap = -(1.0 - rng.gen::<f64>()).ln() / rate;
                next += Duration::from_secs_f64(gap);
            }
            for task in inflight {
                let _ = task.await;
            }
            if let Ok(client) = Arc::try_unwrap(client) {
                let _ = client.close().await;
            }
        }));
    }
    for task in tasks {
        task.await.map_err(|e| e.to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let steal = cpu_before.zip(CpuTimes::read()).and_then(|(before, after)| after.steal_since(&before));
    // Let the last releases happen.
    tokio::time::sleep(Duration::from_millis(50) + Duration::from_micros(d_h)).await;

    let mut placed = std::mem::take(&mut *placed.lock().expect("placed lock"));
    placed.sort_by_key(|p| p.order);
    let (mut stamped, mut truth) = (Unfairness::new(), Unfairness::new());
    let histogram =
        || Histogram::<u64>::new_with_bounds(1, bourse_fairness::metrics::SPREAD_MAX_NS, 3).expect("bounds");
    let mut latency = histogram();
    for p in &placed {
        stamped.observe(p.gateway_ts);
        truth.observe(clocks[p.gateway as usize].true_of(p.gateway_ts));
        latency.saturating_record(p.latency_ns);
    }

    let records: Vec<Vec<bourse_gateway::probe::Release>> = gateways.iter().map(|g| g.probe().take()).collect();
    let mut seen: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
    for list in &records {
        for r in list {
            *seen.entry(r.log_index).or_default() += 1;
        }
    }
    let mut spread = Spread::new(args.gateways);
    let mut market_delay = histogram();
    for list in &records {
        for r in list.iter().filter(|r| seen[&r.log_index] == args.gateways) {
            spread.observe(
                r.log_index,
                bourse_fairness::Delivery {
                    release_ts: r.release_ts,
                    late: r.arrived_late,
                    delivered_true_ns: r.released_true,
                },
            );
            market_delay.saturating_record(r.released_true.saturating_sub(r.ts));
        }
    }
    let summary = spread.summary();
    let (held, releases) = records
        .iter()
        .flatten()
        .fold((0u128, 0u64), |(sum, n), r| (sum + u128::from(r.release_ts.saturating_sub(r.ts)), n + 1));
    let hold_mean_us = if releases == 0 { 0.0 } else { held as f64 / releases as f64 / 1_000.0 };
    let (d_s, d_h) = match (adaptive, node.metrics.fairness.get()) {
        (Some(_), Some(setting)) => (setting.window_ns / 1_000, setting.hold_ns / 1_000),
        _ => (d_s, d_h),
    };
    for gateway in gateways {
        gateway.shutdown().await;
    }
    node.shutdown().await.map_err(|e| e.to_string())?;
    let us = |ns: u64| ns as f64 / 1_000.0;
    Ok(RunReport {
        adaptive: adaptive.is_some(),
        d_s_us: d_s,
        d_h_us: d_h,
        hold_mean_us,
        orders: placed.len() as u64,
        iur_prev: stamped.iur_prev().value(),
        iur_hwm: stamped.iur_hwm().value(),
        iur_prev_true: truth.iur_prev().value(),
        iur_hwm_true: truth.iur_hwm().value(),
        items: summary.complete,
        our: summary.late.value(),
        spread_p50_us: us(summary.p50_ns),
        spread_p99_us: us(summary.p99_ns),
        spread_max_us: us(summary.max_ns),
        latency_p50_us: us(latency.value_at_quantile(0.5)),
        latency_p99_us: us(latency.value_at_quantile(0.99)),
        market_delay_p50_us: us(market_delay.value_at_quantile(0.5)),
        seconds,
        steal,
        realtime,
    })
}

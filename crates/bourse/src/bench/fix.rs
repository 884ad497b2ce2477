//! `bourse bench fix`: orders per second and round-trip latency through FIX 4.4.
//!
//! One process runs a node (data on /dev/shm when there is one), a gateway and the
//! FIX front end in front of it (its session stores beside the node's data, fsynced
//! before every batch it sends); the gateway is linked to the node in memory, as `bourse
//! serve --gateway` runs them (`--layout grpc`: over loopback gRPC), and clients reach
//! the front end on loopback. Each of N sessions is one TCP
//! connection that logs on (ResetSeqNumFlag=Y) and keeps up to `--window`
//! NewOrderSingles unanswered: it sends until the window is full, then reads
//! ExecutionReports. A round trip is from writing a NewOrderSingle to reading its
//! first ExecutionReport (New, or Rejected, which counts as an error); the session's
//! commands are sequenced in order, so the reports come back in order. Sessions
//! alternate a buy and a sell of 1 at one price between two accounts of their own, so
//! every second order trades (its fills follow its New in the same batch).

use super::closed_loop::{self, Names, Round};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, Client, ClientOptions};
use bourse_fix::codec::{self, Message};
use bourse_fix::time::{now_ns, utc_timestamp};
use bourse_fix::{FixConfig, FixServer};
use bourse_node::{Node, NodeConfig};
use clap::Args;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Args, Debug)]
pub struct FixArgs {
    /// Concurrent FIX sessions (one connection each); a comma list runs one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    sessions: Vec<u32>,
    /// NewOrderSingles a session keeps unanswered, at most (1 is a closed loop).
    #[arg(long, default_value_t = 16)]
    window: usize,
    /// Seconds per round.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[command(flatten)]
    layout: closed_loop::LayoutArg,
    /// The data directories' parent (default /dev/shm when present): give a disk
    /// directory to pay for real fsyncs of the node's journal and the FIX stores.
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Send without fsyncing the FIX stores first (never outside a benchmark): what the
    /// store's fsync, and the hop to the blocking thread that does it, cost.
    #[arg(long)]
    no_store_fsync: bool,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// FIX sessions place orders.
const NAMES: Names = Names { clients: "sessions", done: "orders" };

pub fn run(args: &FixArgs) -> Result<(), String> {
    if args.sessions.is_empty() || args.sessions.contains(&0) || args.seconds <= 0.0 || args.window == 0 {
        return Err("--sessions needs positive counts, --seconds a positive time, --window at least 1".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let rounds = runtime.block_on(rounds(args))?;
    eprintln!(
        "workload: NewOrderSingle limit GTC qty 1, buy then sell at one price per session (every second order trades)"
    );
    eprintln!(
        "window {} per session; round trip = NewOrderSingle written → its first ExecutionReport read; node + gateway + FIX in this process",
        args.window
    );
    closed_loop::print_table(&NAMES, "", &rounds);
    if args.json {
        let rounds = closed_loop::json_rounds(&NAMES, "", &rounds);
        println!("{{\"bench\":\"fix\",\"window\":{},\"rounds\":{rounds}}}", args.window);
    }
    if rounds.iter().any(|round| round.errors > 0) {
        return Err("some orders were rejected (see errors)".into());
    }
    Ok(())
}

async fn rounds(args: &FixArgs) -> Result<Vec<Round>, String> {
    let dir = closed_loop::scratch_dir("bourse-bench-fix-", args.data.as_deref())?;
    let config = NodeConfig {
        data: dir.path().join("node"),
        listen: "127.0.0.1:0".parse().expect("an address"),
        sequencer_window_us: 0,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let endpoints = vec![node.addr.to_string()];
    let setup = SymbolSetup::default();
    let options = ClientOptions::default();
    let (_, assets) = setup_market(&endpoints, &setup, &options).await.map_err(|e| e.to_string())?;
    let sessions_max = *args.sessions.iter().max().expect("checked non-empty");
    let admin = Client::connect(endpoints.clone(), random_client_id(), options).await.map_err(|e| e.to_string())?;
    let accounts = funded_accounts(&admin, sessions_max * 2, assets, &setup).await.map_err(|e| e.to_string())?;
    admin.close().await.map_err(|e| e.to_string())?;

    let gateway = closed_loop::gateway(&node, args.layout.layout).await?;
    let mut fix_config = FixConfig::new("127.0.0.1:0".parse().expect("an address"), Vec::new(), dir.path().join("fix"));
    fix_config.upstream = bourse_port::Upstream::InProcess(gateway.local());
    fix_config.fsync = !args.no_store_fsync;
    let fix = FixServer::start(fix_config).await.map_err(|e| e.to_string())?;
    let mut rounds = Vec::new();
    for (index, &sessions) in args.sessions.iter().enumerate() {
        eprintln!("  {sessions} sessions for {} s …", args.seconds);
        let end = Instant::now() + Duration::from_secs_f64(args.seconds);
        let started = Instant::now();
        let mut tasks = Vec::new();
        for session in 0..sessions as usize {
            let plan = Plan {
                addr: fix.addr(),
                comp_id: format!("BENCH{index}-{session}"),
                symbol: setup.symbol.clone(),
                px: setup.px_mid,
                accounts: (accounts[2 * session].0, accounts[2 * session + 1].0),
                window: args.window,
                end,
            };
            tasks.push(tokio::spawn(session_loop(plan)));
        }
        let mut round = Round::new(None, sessions);
        for task in tasks {
            let (orders, errors, latency) = task.await.map_err(|e| e.to_string())??;
            round.add(orders, errors, &latency)?;
        }
        round.elapsed = started.elapsed();
        rounds.push(round);
    }
    fix.shutdown().await;
    gateway.shutdown().await;
    node.shutdown().await.map_err(|e| e.to_string())?;
    Ok(rounds)
}

/// What one session does.
struct Plan {
    addr: SocketAddr,
    comp_id: String,
    symbol: String,
    px: i64,
    accounts: (u32, u32),
    window: usize,
    end: Instant,
}

/// A minimal FIX initiator: numbers messages, reads frames.
struct Wire {
    stream: TcpStream,
    buf: Vec<u8>,
    comp_id: String,
    seq: u64,
}

impl Wire {
    fn message(&mut self, msg_type: &str, fields: &[(u32, &str)]) -> Vec<u8> {
        let mut message = Message::new(msg_type);
        message.push(49, &self.comp_id).push(56, "BOURSE").push_display(34, self.seq).push(52, utc_timestamp(now_ns()));
        for (tag, value) in fields {
            message.push(*tag, value);
        }
        self.seq += 1;
        message.encode()
    }

    async fn next(&mut self) -> Result<Message, String> {
        loop {
            match codec::frame(&self.buf) {
                Ok(Some(len)) => {
                    let (message, _) = Message::decode(&self.buf[..len]);
                    self.buf.drain(..len);
                    return Ok(message);
                }
                Ok(None) => {}
                Err(error) => return Err(format!("garbled from the server: {error}")),
            }
            self.buf.reserve(65_536);
            let read = tokio::time::timeout(Duration::from_secs(10), self.stream.read_buf(&mut self.buf)).await;
            match read {
                Ok(Ok(n)) if n > 0 => {}
                _ => return Err("the FIX connection closed or went quiet".into()),
            }
        }
    }
}

/// One session: logon, orders until `end`, the last answers, logout. Returns
/// (orders acknowledged New, orders rejected, round trips in µs).
async fn session_loop(plan: Plan) -> Result<(u64, u64, Histogram<u64>), String> {
    let stream = TcpStream::connect(plan.addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut wire = Wire { stream, buf: Vec::new(), comp_id: plan.comp_id.clone(), seq: 1 };
    let logon = wire.message("A", &[(98, "0"), (108, "30"), (141, "Y"), (554, "bench")]);
    wire.stream.write_all(&logon).await.map_err(|e| e.to_string())?;
    let answer = wire.next().await?;
    if answer.msg_type() != "A" {
        return Err(format!("logon refused: {:?}", answer.get_str(58)));
    }
    let (px, symbol) = (plan.px.to_string(), plan.symbol.clone());
    let accounts = [plan.accounts.0.to_string(), plan.accounts.1.to_string()];
    let mut latency = super::measure::new_histogram();
    let (mut orders, mut errors, mut count) = (0u64, 0u64, 0u64);
    let mut sent: VecDeque<Instant> = VecDeque::with_capacity(plan.window);
    loop {
        let sending = Instant::now() < plan.end;
        if !sending && sent.is_empty() {
            break;
        }
        if sending && sent.len() < plan.window {
            let mut batch = Vec::new();
            while sent.len() < plan.window {
                let turn = (count % 2) as usize;
                let cl_ord_id = format!("o{count}");
                count += 1;
                let side = if turn == 0 { "1" } else { "2" };
                let fields = [
                    (11, cl_ord_id.as_str()),
                    (1, accounts[turn].as_str()),
                    (55, symbol.as_str()),
                    (54, side),
                    (60, "20260101-00:00:00"),
                    (38, "1"),
                    (40, "2"),
                    (44, px.as_str()),
                    (59, "1"),
                ];
                batch.extend(wire.message("D", &fields));
                sent.push_back(Instant::now());
            }
            wire.stream.write_all(&batch).await.map_err(|e| e.to_string())?;
        }
        let message = wire.next().await?;
        if message.msg_type() == "8" && matches!(message.get(150), Some(b"0") | Some(b"8")) {
            let at = sent.pop_front().ok_or("an ExecutionReport for no order")?;
            latency.saturating_record(at.elapsed().as_micros() as u64);
            if message.get(150) == Some(b"0") {
                orders += 1;
            } else {
                errors += 1;
                if errors == 1 {
                    eprintln!("  rejected: {:?}", message.get_str(58));
                }
            }
        }
    }
    let logout = wire.message("5", &[]);
    wire.stream.write_all(&logout).await.map_err(|e| e.to_string())?;
    Ok((orders, errors, latency))
}

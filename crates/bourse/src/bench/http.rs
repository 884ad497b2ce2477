//! `bourse bench http`: orders per second and latency through the REST API.
//!
//! One process runs a node (data on /dev/shm when there is one), a gateway, and the
//! HTTP front end in front of it (the gateway linked to the node in memory, as `bourse
//! serve --gateway` runs them, or over loopback gRPC with `--layout grpc`); clients
//! reach it on loopback. N clients each hold one keep-alive
//! HTTP/1.1 connection and send `POST /v1/orders` one at a time (closed loop, as wrk
//! does: each measures request to response, so the percentiles are per request and
//! carry no open-loop intended-time correction). Clients alternate a buy and a sell at
//! the same price between two accounts of their own, so every second order trades.
//! Every answer must be 201: anything else is counted and reported as an error.

use super::closed_loop::{self, Names, Round};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bourse_client::load::{funded_accounts, setup_market, SymbolSetup};
use bourse_client::{random_client_id, Client, ClientOptions};
use bourse_engine::AccountId;
use bourse_http::{HttpConfig, HttpServer};
use bourse_node::{Node, NodeConfig};
use clap::Args;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;

#[derive(Args, Debug)]
pub struct HttpArgs {
    /// Concurrent clients (one connection each); a comma list runs one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,32")]
    clients: Vec<u32>,
    /// Seconds per round.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[command(flatten)]
    layout: closed_loop::LayoutArg,
    /// The node's data directory's parent (default /dev/shm when present).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

/// Each client places orders.
const NAMES: Names = Names { clients: "clients", done: "orders" };

pub fn run(args: &HttpArgs) -> Result<(), String> {
    if args.clients.is_empty() || args.clients.contains(&0) || args.seconds <= 0.0 {
        return Err("--clients needs positive counts and --seconds a positive time".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let rounds = runtime.block_on(rounds(args))?;
    eprintln!(
        "workload: POST /v1/orders, limit GTC qty 1, buy then sell at one price per client (every second order trades)"
    );
    eprintln!("closed loop, one keep-alive HTTP/1.1 connection per client; node + gateway + HTTP in this process");
    closed_loop::print_table(&NAMES, "", &rounds);
    if args.json {
        println!("{{\"bench\":\"http\",\"rounds\":{}}}", closed_loop::json_rounds(&NAMES, "", &rounds));
    }
    if rounds.iter().any(|round| round.errors > 0) {
        return Err("some requests were not answered 201 (see errors)".into());
    }
    Ok(())
}

async fn rounds(args: &HttpArgs) -> Result<Vec<Round>, String> {
    let dir = closed_loop::scratch_dir("bourse-bench-http-", args.data.as_deref())?;
    let config = NodeConfig {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("an address"),
        sequencer_window_us: 0,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let endpoints = vec![node.addr.to_string()];
    let setup = SymbolSetup::default();
    let options = ClientOptions::default();
    let (market, assets) = setup_market(&endpoints, &setup, &options).await.map_err(|e| e.to_string())?;
    let clients_max = *args.clients.iter().max().expect("checked non-empty");
    let admin = Client::connect(endpoints.clone(), random_client_id(), options).await.map_err(|e| e.to_string())?;
    let accounts = funded_accounts(&admin, clients_max * 2, assets, &setup).await.map_err(|e| e.to_string())?;
    admin.close().await.map_err(|e| e.to_string())?;

    let gateway = closed_loop::gateway(&node, args.layout.layout).await?;
    let mut http_config = HttpConfig::new("127.0.0.1:0".parse().expect("an address"), Vec::new());
    http_config.upstream = bourse_port::Upstream::InProcess(gateway.local());
    let http = HttpServer::start(http_config).await.map_err(|e| e.to_string())?;
    let mut rounds = Vec::new();
    for &clients in &args.clients {
        eprintln!("  {clients} clients for {} s …", args.seconds);
        rounds.push(round(http.addr(), market.symbol.0, setup.px_mid, &accounts, clients, args.seconds).await?);
    }
    http.shutdown().await;
    gateway.shutdown().await;
    node.shutdown().await.map_err(|e| e.to_string())?;
    Ok(rounds)
}

/// One round: `clients` clients on `addr` for `seconds`, client k trading between
/// `accounts[2k]` and `accounts[2k + 1]`.
pub(super) async fn round(
    addr: SocketAddr,
    symbol: u32,
    px: i64,
    accounts: &[AccountId],
    clients: u32,
    seconds: f64,
) -> Result<Round, String> {
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let tasks: Vec<_> = (0..clients as usize)
        .map(|client| {
            let pair = (accounts[2 * client].0, accounts[2 * client + 1].0);
            tokio::spawn(client_loop(addr, symbol, px, pair, end))
        })
        .collect();
    let mut round = Round::new(None, clients);
    for task in tasks {
        let (orders, errors, latency) = task.await.map_err(|e| e.to_string())??;
        round.add(orders, errors, &latency)?;
    }
    round.elapsed = started.elapsed();
    Ok(round)
}

/// One client: orders until `end`, on one connection. Returns (answered 201, other
/// answers, latency in µs).
async fn client_loop(
    addr: SocketAddr,
    symbol: u32,
    px: i64,
    (buyer, seller): (u32, u32),
    end: Instant,
) -> Result<(u64, u64, Histogram<u64>), String> {
    let stream = tokio::net::TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await.map_err(|e| e.to_string())?;
    tokio::spawn(connection);
    let bodies = [buyer, seller].map(|account| {
        let side = if account == buyer { "buy" } else { "sell" };
        Bytes::from(format!(
            "{{\"account\":{account},\"symbol\":\"{symbol}\",\"side\":\"{side}\",\"type\":\"limit\",\"qty\":1,\"px\":{px}}}"
        ))
    });
    let mut latency = super::measure::new_histogram();
    let (mut orders, mut errors) = (0u64, 0u64);
    let mut turn = 0usize;
    while Instant::now() < end {
        let request = hyper::Request::post("/v1/orders")
            .header("host", addr.to_string())
            .header("content-type", "application/json")
            .body(Full::new(bodies[turn % 2].clone()))
            .map_err(|e| e.to_string())?;
        turn += 1;
        let sent = Instant::now();
        let response = sender.send_request(request).await.map_err(|e| e.to_string())?;
        let status = response.status();
        response.into_body().collect().await.map_err(|e| e.to_string())?;
        latency.saturating_record(sent.elapsed().as_micros() as u64);
        if status == hyper::StatusCode::CREATED {
            orders += 1;
        } else {
            errors += 1;
        }
    }
    Ok((orders, errors, latency))
}

//! `bourse bench xml`: requests per second and latency through the XML exchange
//! protocol.
//!
//! One process runs a node (data on /dev/shm when there is one), a gateway, and the XML
//! front end in front of it (the gateway linked to the node in memory, as `bourse serve
//! --gateway` runs them, or over loopback gRPC with `--layout grpc`); clients reach it
//! on loopback. N clients each send `<transactions>`
//! requests holding one `<order>`, one at a time (closed loop: each measures request to
//! reply, so the percentiles are per request with no open-loop correction). Clients
//! alternate a buy and a sell of 1 share at the same price between two accounts of
//! their own, so every second order trades. Length-prefixed: one connection per client,
//! kept open. Bare: a new TCP connection per request (connect, send, read until the
//! server closes). Every reply must be one `<opened>`; anything else counts as an error.
//! With `--queries` every order is followed by a `<query>` of it (which must answer a
//! `<status>`), so half the requests are reads.

use super::closed_loop::{self, Names, Round};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_node::{Node, NodeConfig};
use bourse_xml::{Exchange, ExchangeConfig, Framing, NoHistory, XmlConfig, XmlServer};
use clap::{Args, ValueEnum};
use hdrhistogram::Histogram;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

#[derive(Args, Debug)]
pub struct XmlArgs {
    /// Concurrent clients; a comma list runs one round each.
    #[arg(long, value_delimiter = ',', default_value = "1,8,64")]
    clients: Vec<u32>,
    /// Seconds per round.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    #[command(flatten)]
    layout: closed_loop::LayoutArg,
    /// Reply framing; without it both are measured, length-prefixed first.
    #[arg(long, value_enum)]
    framing: Option<FramingArg>,
    /// Follow every order with a `<query>` of it (a request of its own), so half the
    /// requests read instead of write.
    #[arg(long)]
    queries: bool,
    /// Upstream order-entry sessions of the front end.
    #[arg(long, default_value_t = 2)]
    sessions: usize,
    /// The node's data directory's parent (default /dev/shm when present).
    #[arg(long)]
    data: Option<std::path::PathBuf>,
    /// Print one JSON object as the last line.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum FramingArg {
    Bare,
    Prefixed,
}

/// Each client sends requests.
const NAMES: Names = Names { clients: "clients", done: "requests" };

fn framing_name(framing: FramingArg) -> &'static str {
    match framing {
        FramingArg::Bare => "bare",
        FramingArg::Prefixed => "prefixed",
    }
}

pub fn run(args: &XmlArgs) -> Result<(), String> {
    if args.clients.is_empty() || args.clients.contains(&0) || args.seconds <= 0.0 {
        return Err("--clients needs positive counts and --seconds a positive time".into());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let rounds = runtime.block_on(rounds(args))?;
    eprintln!("workload: <transactions> with one <order> of 1 share, buy then sell at one price per client (every second order trades)");
    eprintln!("closed loop; prefixed: one kept-open connection per client; bare: a connection per request; node + gateway + XML front end in this process");
    closed_loop::print_table(&NAMES, "framing", &rounds);
    if args.json {
        println!("{{\"bench\":\"xml\",\"rounds\":{}}}", closed_loop::json_rounds(&NAMES, "framing", &rounds));
    }
    if rounds.iter().any(|round| round.errors > 0) {
        return Err("some requests were not answered <opened> (see errors)".into());
    }
    Ok(())
}

async fn rounds(args: &XmlArgs) -> Result<Vec<Round>, String> {
    let dir = closed_loop::scratch_dir("bourse-bench-xml-", args.data.as_deref())?;
    let config = NodeConfig {
        data: dir.path().to_path_buf(),
        listen: "127.0.0.1:0".parse().expect("an address"),
        sequencer_window_us: 0,
        ..NodeConfig::default()
    };
    let node = Node::start(config).await.map_err(|e| e.to_string())?;
    let gateway = closed_loop::gateway(&node, args.layout.layout).await?;
    let mut exchange_config = ExchangeConfig::new(Vec::new());
    exchange_config.upstream = bourse_port::Upstream::InProcess(gateway.local());
    exchange_config.sessions = args.sessions;
    let exchange = Arc::new(Exchange::connect(exchange_config, Arc::new(NoHistory)).await?);
    let listen: SocketAddr = "127.0.0.1:0".parse().expect("an address");
    let prefixed = XmlServer::start(XmlConfig::new(listen, Framing::Prefixed), Arc::clone(&exchange))
        .await
        .map_err(|e| e.to_string())?;
    let bare = XmlServer::start(XmlConfig::new(listen, Framing::Bare), Arc::clone(&exchange))
        .await
        .map_err(|e| e.to_string())?;

    let clients_max = *args.clients.iter().max().expect("checked non-empty");
    setup(prefixed.addr(), clients_max).await?;
    let framings = match args.framing {
        Some(framing) => vec![framing],
        None => vec![FramingArg::Prefixed, FramingArg::Bare],
    };
    let mut rounds = Vec::new();
    for framing in framings {
        let addr = if framing == FramingArg::Bare { bare.addr() } else { prefixed.addr() };
        for &clients in &args.clients {
            eprintln!("  {framing:?}, {clients} clients for {} s …", args.seconds);
            let end = Instant::now() + Duration::from_secs_f64(args.seconds);
            let started = Instant::now();
            let queries = args.queries;
            let tasks: Vec<_> =
                (0..clients).map(|client| tokio::spawn(client_loop(addr, framing, client, queries, end))).collect();
            let mut round = Round::new(Some(framing_name(framing)), clients);
            for task in tasks {
                let (requests, errors, latency) = task.await.map_err(|e| e.to_string())??;
                round.add(requests, errors, &latency)?;
            }
            round.elapsed = started.elapsed();
            rounds.push(round);
        }
    }
    bare.shutdown().await;
    prefixed.shutdown().await;
    gateway.shutdown().await;
    node.shutdown().await.map_err(|e| e.to_string())?;
    Ok(rounds)
}

/// Two accounts per client (ids 2c+1 and 2c+2) with cash, and shares for the sellers.
async fn setup(addr: SocketAddr, clients: u32) -> Result<(), String> {
    let mut connection = Connection::Prefixed(None);
    let mut create = String::from("<create>");
    for account in 1..=2 * clients {
        create.push_str(&format!("<account id=\"{account}\" balance=\"10000000\"/>"));
    }
    create.push_str("<symbol sym=\"BENCH\">");
    for client in 0..clients {
        create.push_str(&format!("<account id=\"{}\">100000000</account>", 2 * client + 2));
    }
    create.push_str("</symbol></create>");
    let reply = connection.request(addr, create.as_bytes()).await?;
    let created = reply.matches("<created").count();
    if created != 3 * clients as usize {
        return Err(format!("setup: {created} of {} results were <created>: {reply}", 3 * clients));
    }
    Ok(())
}

/// A client's way to send requests.
enum Connection {
    /// One kept-open connection (opened on first use).
    Prefixed(Option<BufReader<TcpStream>>),
    Bare,
}

impl Connection {
    async fn request(&mut self, addr: SocketAddr, body: &[u8]) -> Result<String, String> {
        let mut framed = format!("{}\n", body.len()).into_bytes();
        framed.extend_from_slice(body);
        match self {
            Connection::Bare => {
                let mut stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                stream.set_nodelay(true).map_err(|e| e.to_string())?;
                stream.write_all(&framed).await.map_err(|e| e.to_string())?;
                let mut reply = Vec::with_capacity(256);
                stream.read_to_end(&mut reply).await.map_err(|e| e.to_string())?;
                String::from_utf8(reply).map_err(|e| e.to_string())
            }
            Connection::Prefixed(slot) => {
                if slot.is_none() {
                    let stream = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
                    stream.set_nodelay(true).map_err(|e| e.to_string())?;
                    *slot = Some(BufReader::new(stream));
                }
                let stream = slot.as_mut().expect("connected above");
                stream.get_mut().write_all(&framed).await.map_err(|e| e.to_string())?;
                let mut line = String::new();
                stream.read_line(&mut line).await.map_err(|e| e.to_string())?;
                let length: usize = line.trim().parse().map_err(|_| format!("bad reply length line {line:?}"))?;
                let mut reply = vec![0; length];
                stream.read_exact(&mut reply).await.map_err(|e| e.to_string())?;
                String::from_utf8(reply).map_err(|e| e.to_string())
            }
        }
    }
}

/// One client: requests until `end`. Returns (answered <opened>, other answers, latency
/// in µs).
async fn client_loop(
    addr: SocketAddr,
    framing: FramingArg,
    client: u32,
    queries: bool,
    end: Instant,
) -> Result<(u64, u64, Histogram<u64>), String> {
    let mut connection = match framing {
        FramingArg::Bare => Connection::Bare,
        FramingArg::Prefixed => Connection::Prefixed(None),
    };
    let bodies = [(2 * client + 1, "1"), (2 * client + 2, "-1")].map(|(account, amount)| {
        format!(
            "<transactions id=\"{account}\"><order sym=\"BENCH\" amount=\"{amount}\" limit=\"100\"/></transactions>"
        )
    });
    let mut latency = super::measure::new_histogram();
    let (mut requests, mut errors) = (0u64, 0u64);
    let mut turn = 0usize;
    let mut last: Option<(u32, String)> = None;
    while Instant::now() < end {
        let query = match last.take() {
            Some((account, id)) if queries => {
                Some(format!("<transactions id=\"{account}\"><query id=\"{id}\"/></transactions>"))
            }
            _ => None,
        };
        let body = query.as_deref().unwrap_or(&bodies[turn % 2]);
        let sent = Instant::now();
        let reply = connection.request(addr, body.as_bytes()).await?;
        latency.saturating_record(sent.elapsed().as_micros() as u64);
        let ok = if query.is_some() {
            reply.contains("<status id=")
        } else {
            let account = 2 * client + 1 + (turn % 2) as u32;
            turn += 1;
            last = opened_id(&reply).map(|id| (account, id));
            reply.matches("<opened").count() == 1 && !reply.contains("<error")
        };
        if ok {
            requests += 1;
        } else {
            errors += 1;
        }
    }
    Ok((requests, errors, latency))
}

/// The `id` of the `<opened>` in a reply.
fn opened_id(reply: &str) -> Option<String> {
    let opened = &reply[reply.find("<opened")?..];
    let start = opened.find(" id=\"")? + 5;
    Some(opened[start..start + opened[start..].find('"')?].to_owned())
}

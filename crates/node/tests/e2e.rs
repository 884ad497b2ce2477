//! End to end over loopback: a node in this process, real gRPC clients, a real journal.

use bourse_engine::command::{Command, CommandBody, MatchPolicy, OrderRequest, SymbolSpec, Tif};
use bourse_engine::{AccountId, Amount, AssetId, ClientId, OrderId, Px, Qty, Side, SymbolId};
use bourse_node::{Node, NodeConfig};
use bourse_protocol::proto;
use bourse_protocol::proto::{
    admin_client::AdminClient, order_entry_client::OrderEntryClient, query_client::QueryClient,
};
use tokio_stream::StreamExt;

fn config(dir: &std::path::Path) -> NodeConfig {
    NodeConfig { data: dir.to_path_buf(), listen: "127.0.0.1:0".parse().unwrap(), ..NodeConfig::default() }
}

async fn admin(
    client: &mut AdminClient<tonic::transport::Channel>,
    id: u64,
    seq: u64,
    body: CommandBody,
) -> proto::Ack {
    let command = Command { client: ClientId(id), seq, ts: 0, body };
    client.submit(proto::SubmitRequest::from(&command)).await.expect("submit").into_inner()
}

fn ok_id(ack: &proto::Ack) -> u64 {
    match ack.outcome {
        Some(proto::ack::Outcome::OkId(id)) => id,
        ref other => panic!("not ok: {other:?}"),
    }
}

/// Creates USD, ACME, ACME/USD and two funded accounts through Admin.Submit.
async fn market(addr: std::net::SocketAddr) -> AdminClient<tonic::transport::Channel> {
    let mut admin_client = AdminClient::connect(format!("http://{addr}")).await.unwrap();
    let a = &mut admin_client;
    let usd = ok_id(&admin(a, 7, 1, CommandBody::CreateAsset { name: "USD".into(), decimals: 2 }).await);
    let acme = ok_id(&admin(a, 7, 2, CommandBody::CreateAsset { name: "ACME".into(), decimals: 0 }).await);
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: AssetId(acme as u32),
        quote: AssetId(usd as u32),
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(1),
        px_max: Px(1_000_000),
        fee_maker: Amount(0),
        fee_taker: Amount(1),
        policy: MatchPolicy::Fifo,
    };
    ok_id(&admin(a, 7, 3, CommandBody::CreateSymbol(Box::new(spec))).await);
    let mut seq = 4;
    for _ in 0..2 {
        let account = AccountId(ok_id(&admin(a, 7, seq, CommandBody::CreateAccount).await) as u32);
        admin(a, 7, seq + 1, CommandBody::Deposit { account, asset: AssetId(usd as u32), amount: Amount(1_000_000) })
            .await;
        admin(a, 7, seq + 2, CommandBody::Credit { account, asset: AssetId(acme as u32), amount: Amount(1_000) }).await;
        seq += 3;
    }
    admin_client
}

fn place(seq: u64, account: u32, side: Side, px: i64, qty: i64) -> proto::ClientCommand {
    let command = Command {
        client: ClientId(9),
        seq,
        ts: 0,
        body: CommandBody::Place(OrderRequest::limit(
            AccountId(account),
            SymbolId(0),
            side,
            Px(px),
            Qty(qty),
            Tif::Gtc,
        )),
    };
    proto::ClientCommand::from(&command)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trade_over_grpc_then_restart_recovers_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path())).await.unwrap();
    let addr = node.addr;
    market(addr).await;

    let mut order_entry = OrderEntryClient::connect(format!("http://{addr}")).await.unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    let mut replies =
        order_entry.session(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap().into_inner();
    sender
        .send(proto::ClientBatch {
            client_id: 9,
            commands: vec![place(1, 0, Side::Sell, 100, 10), place(2, 1, Side::Buy, 101, 4)],
        })
        .await
        .unwrap();
    let (mut acks, mut fills) = (Vec::new(), Vec::new());
    while acks.len() < 2 || fills.len() < 2 {
        let batch = replies.next().await.expect("stream open").expect("batch");
        acks.extend(batch.acks);
        fills.extend(batch.fills);
    }
    assert_eq!(acks.iter().map(|a| a.seq).collect::<Vec<_>>(), vec![1, 2]);
    assert!(acks.iter().all(|a| a.log_index > 0 && !a.duplicate));
    assert!(fills.iter().all(|f| f.px == 100 && f.qty == 4), "{fills:?}");

    // A resent command is answered from the exactly-once record and changes nothing.
    sender.send(proto::ClientBatch { client_id: 9, commands: vec![place(2, 1, Side::Buy, 101, 4)] }).await.unwrap();
    let duplicate = loop {
        let batch = replies.next().await.unwrap().unwrap();
        if let Some(ack) = batch.acks.into_iter().next() {
            break ack;
        }
    };
    assert!(duplicate.duplicate);
    assert_eq!(duplicate.outcome, acks[1].outcome);

    let mut query = QueryClient::connect(format!("http://{addr}")).await.unwrap();
    let balances = query.get_balances(proto::GetBalancesRequest { account: 1 }).await.unwrap().into_inner();
    let usd = balances.balances.iter().find(|b| b.asset == 0).unwrap();
    assert_eq!((usd.available, usd.reserved), (1_000_000 - 400 - 4, 0));
    let depth = query.get_depth(proto::GetDepthRequest { symbol: 0, levels_max: 5 }).await.unwrap().into_inner();
    assert_eq!(depth.asks.iter().map(|l| (l.px, l.qty)).collect::<Vec<_>>(), vec![(100, 6)]);
    let missing = query.get_order(proto::GetOrderRequest { order: 999 }).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);

    drop(sender);
    let index = depth.log_index;
    node.shutdown().await.unwrap();

    let restarted = Node::start(config(dir.path())).await.unwrap();
    assert_eq!(restarted.recovered.index, index);
    let hash = restarted.recovered.state_hash;
    restarted.shutdown().await.unwrap();
    let (_, _, replayed) = bourse_node::recover(dir.path(), &NodeConfig::default()).unwrap();
    assert_eq!((replayed.index, replayed.state_hash), (index, hash));
}

/// `/metrics` of a node, as text.
async fn metrics_text(addr: std::net::SocketAddr) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n").await.unwrap();
    let mut text = String::new();
    stream.read_to_string(&mut text).await.unwrap();
    text
}

fn metric(text: &str, name: &str) -> u64 {
    let line = text.lines().find(|line| line.starts_with(name) && line[name.len()..].starts_with(' '));
    line.unwrap_or_else(|| panic!("{name} not on /metrics")).rsplit(' ').next().unwrap().parse().unwrap()
}

/// On a RAM disk, lone commands are committed by the core thread itself, not handed to
/// the journal's writer (`bourse_group_commits_inline_total` counts them); they are
/// acknowledged only once durable all the same, and a restart recovers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lone_commands_on_a_ram_disk_are_committed_by_the_core_and_recovered() {
    let dir = tempfile::tempdir_in("/dev/shm").expect("/dev/shm, a RAM disk on Linux");
    let config = NodeConfig { metrics_listen: Some("127.0.0.1:0".parse().unwrap()), ..config(dir.path()) };
    let node = Node::start(config.clone()).await.unwrap();
    let mut admin_client = market(node.addr).await;
    let mut last = 0;
    // Eight quick groups in a row come first; a busy host (this binary's other tests
    // running beside it) spoils runs of them, so commands go on for up to 20 s.
    let mut text;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    for seq in 10..20_000 {
        if std::time::Instant::now() > until {
            break;
        }
        let ack = admin(&mut admin_client, 7, seq, CommandBody::CreateAccount).await;
        assert!(ack.log_index > last);
        last = ack.log_index;
        if seq % 10 == 0 {
            text = metrics_text(node.metrics_addr.unwrap()).await;
            if metric(&text, "bourse_group_commits_inline_total") > 0 {
                break;
            }
        }
    }
    // Read after the last acknowledgement, whichever way the loop ended.
    text = metrics_text(node.metrics_addr.unwrap()).await;
    let inline = metric(&text, "bourse_group_commits_inline_total");
    assert!(inline > 0, "no group committed inline:\n{text}");
    // Every acknowledged command is durable.
    assert!(metric(&text, "bourse_durable_index") >= last);
    node.shutdown().await.unwrap();

    let restarted = Node::start(config).await.unwrap();
    assert_eq!(restarted.recovered.index, last);
    restarted.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_core_batch_larger_than_the_journal_batch_is_logged_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    // The core takes whole client batches, so one batch of 10 goes past 4.
    let node = Node::start(NodeConfig { batch_commands_max: 4, ..config(dir.path()) }).await.unwrap();
    let addr = node.addr;
    market(addr).await;
    let mut order_entry = OrderEntryClient::connect(format!("http://{addr}")).await.unwrap();
    let commands = (1..=10).map(|seq| place(seq, 0, Side::Sell, 200 + seq as i64, 1)).collect();
    let batches = tokio_stream::iter(vec![proto::ClientBatch { client_id: 9, commands }]);
    let mut replies = order_entry.session(batches).await.unwrap().into_inner();
    let mut acks = Vec::new();
    while let Some(batch) = replies.next().await {
        acks.extend(batch.unwrap().acks);
    }
    assert_eq!(acks.iter().map(|a| a.seq).collect::<Vec<_>>(), (1..=10).collect::<Vec<_>>());
    let indexes: Vec<u64> = acks.iter().map(|a| a.log_index).collect();
    assert!(indexes.windows(2).all(|w| w[1] == w[0] + 1), "{indexes:?}");
    node.shutdown().await.unwrap();
}

/// A node dropped without `shutdown` (a test's end, a panicking caller) closes its
/// journal, and its fair sequencer may still hold a gateway's commands that it releases
/// after: the core stops quietly. It took the closed journal for a failed one and
/// aborted the whole process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_dropped_while_the_sequencer_holds_commands_stops_without_aborting_the_process() {
    use bourse_protocol::proto::gateway_link_client::GatewayLinkClient;
    let dir = tempfile::tempdir().unwrap();
    // The sequencer holds each stamped batch for 200 ms.
    let node = Node::start(NodeConfig { sequencer_window_us: 200_000, ..config(dir.path()) }).await.unwrap();
    let addr = node.addr;
    market(addr).await;
    let (up, receiver) = tokio::sync::mpsc::unbounded_channel();
    up.send(proto::GatewayUp { gateway: 1, ..Default::default() }).unwrap();
    let mut link = GatewayLinkClient::connect(format!("http://{addr}")).await.unwrap();
    let _down = link.link(tokio_stream::wrappers::UnboundedReceiverStream::new(receiver)).await.unwrap();
    // A second gateway that only says who it is: its clock never passes the stamps, so
    // they wait out the window.
    let (quiet, receiver) = tokio::sync::mpsc::unbounded_channel();
    quiet.send(proto::GatewayUp { gateway: 2, ..Default::default() }).unwrap();
    let mut link = GatewayLinkClient::connect(format!("http://{addr}")).await.unwrap();
    let _quiet_down = link.link(tokio_stream::wrappers::UnboundedReceiverStream::new(receiver)).await.unwrap();
    let ts = bourse_fairness::true_now_ns();
    for seq in 1..=10 {
        let batch = proto::StampedBatch {
            client_id: 9,
            gateway_ts: ts + seq,
            gateway_seq: seq,
            commands: vec![place(seq, 0, Side::Sell, 500, 1)],
            claim: None,
        };
        up.send(proto::GatewayUp { gateway: 1, batches: vec![batch], ..Default::default() }).unwrap();
    }
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    let held = node.metrics.fair_held.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(held, 10, "the sequencer holds the batches when the node is dropped");
    drop(node);
    // Past the window: whatever was held has gone to the core by now.
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn accounts_by_external_id_and_closed_orders_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path())).await.unwrap();
    let addr = node.addr;
    let mut admin_client = market(addr).await;
    let with_id =
        |external_id| CommandBody::CreateAccountWithId { external_id, asset: AssetId(0), deposit: Amount(500) };
    let created = admin(&mut admin_client, 8, 1, with_id(42)).await;
    assert_eq!(ok_id(&created), 2, "accounts 0 and 1 exist already");
    let taken = admin(&mut admin_client, 8, 2, with_id(42)).await;
    let Some(proto::ack::Outcome::Rejected(info)) = taken.outcome else { panic!("{taken:?}") };
    assert_eq!((info.code, info.name.as_str()), (33, "account_id_taken"));

    let mut query = QueryClient::connect(format!("http://{addr}")).await.unwrap();
    let found = query.get_account(proto::GetAccountRequest { external_id: 42 }).await.unwrap().into_inner();
    assert_eq!((found.account, found.external_id), (2, 42));
    assert!(found.log_index >= taken.log_index);
    let missing = query.get_account(proto::GetAccountRequest { external_id: 2 }).await.unwrap_err();
    assert_eq!(missing.code(), tonic::Code::NotFound);
    let balances = query.get_balances(proto::GetBalancesRequest { account: 2 }).await.unwrap().into_inner();
    assert_eq!(balances.balances.iter().map(|b| (b.asset, b.available)).collect::<Vec<_>>(), [(0, 500)]);

    // A cancelled order says when it was cancelled and how much the cancel took.
    let sell = OrderRequest::limit(AccountId(0), SymbolId(0), Side::Sell, Px(150), Qty(10), Tif::Gtc);
    let order = ok_id(&admin(&mut admin_client, 8, 3, CommandBody::Place(sell)).await);
    let cancel = CommandBody::Cancel { account: AccountId(0), symbol: SymbolId(0), order: OrderId(order) };
    admin(&mut admin_client, 8, 4, cancel).await;
    let info = query.get_order(proto::GetOrderRequest { order }).await.unwrap().into_inner().order.unwrap();
    assert_eq!((info.status, info.qty_cancelled), (proto::OrderStatus::Cancelled as i32, 10));
    assert!(info.ts_closed > info.ts, "closed at the cancel's stamp, after the order's: {info:?}");
    node.shutdown().await.unwrap();
}

fn day_trading(seq: u64, kind: bourse_engine::daytrading::DtKind, args: &[&str]) -> proto::ClientCommand {
    use bourse_engine::daytrading::{DtCommand, DtRequest};
    let command = DtCommand {
        kind,
        args: args.iter().map(|a| a.to_string()).collect(),
        transaction_num: 0,
        caller: args[0].to_owned(),
        admin: false,
        quote: None,
    };
    let body = CommandBody::DayTrading(Box::new(DtRequest::Command(command)));
    proto::ClientCommand::from(&Command { client: ClientId(11), seq, ts: 0, body })
}

/// Sends `commands` as client 11 on a new session and returns their acks.
async fn session_acks(addr: std::net::SocketAddr, commands: Vec<proto::ClientCommand>) -> Vec<proto::Ack> {
    let mut order_entry = OrderEntryClient::connect(format!("http://{addr}")).await.unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel(16);
    let mut replies =
        order_entry.session(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap().into_inner();
    let count = commands.len();
    sender.send(proto::ClientBatch { client_id: 11, commands }).await.unwrap();
    let mut acks = Vec::new();
    while acks.len() < count {
        acks.extend(replies.next().await.expect("stream open").expect("batch").acks);
    }
    acks
}

/// Exactly once means the same answer: a day-trading command resent on a new session
/// (as after a broken link) is answered with the result its first send got — the
/// transactionNum the engine gave it, the figures, and for DUMPLOG the audit point the
/// dump reads up to — not with a bare outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_day_trading_command_gets_its_first_answer_whole() {
    use bourse_engine::daytrading::DtKind;
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path())).await.unwrap();
    let addr = node.addr;
    let commands = vec![
        day_trading(1, DtKind::Add, &["alice01", "100.00"]),
        day_trading(2, DtKind::Add, &["alice01", "23.45"]),
        day_trading(3, DtKind::CommitBuy, &["alice01"]),
        day_trading(4, DtKind::DumpLog, &["alice01", "alice.xml"]),
    ];
    let first = session_acks(addr, commands.clone()).await;
    assert!(first.iter().all(|a| !a.duplicate), "{first:?}");
    let results: Vec<proto::DayTradingResult> =
        first.iter().map(|a| *a.day_trading.clone().expect("a result")).collect();
    assert_eq!(results.iter().map(|r| r.transaction_num).collect::<Vec<_>>(), vec![1, 2, 3, 4]);
    assert_eq!(results[1].amount, Some(12_345), "the cash after the second ADD");
    assert_ne!(results[2].error_code, 0, "COMMIT_BUY without a pending buy fails");
    assert!(results[3].audit_seq > 0, "DUMPLOG reads up to its own record");

    // Other commands move the ledger on before the resend.
    let later = vec![day_trading(5, DtKind::Add, &["alice01", "1.00"])];
    assert_eq!(session_acks(addr, later).await[0].day_trading.as_ref().unwrap().amount, Some(12_445));

    let again = session_acks(addr, commands).await;
    for (first, again) in first.iter().zip(&again) {
        assert!(again.duplicate, "{again:?}");
        assert_eq!(again.outcome, first.outcome);
        assert_eq!(again.day_trading, first.day_trading, "seq {}: the answer of the first send", first.seq);
    }
    node.shutdown().await.unwrap();
}

async fn day_trading_config(addr: std::net::SocketAddr) -> proto::GetDayTradingConfigReply {
    let mut query = QueryClient::connect(format!("http://{addr}")).await.unwrap();
    query.get_day_trading_config(proto::GetDayTradingConfigRequest {}).await.unwrap().into_inner()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_day_trading_settings_are_configured_then_kept_by_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let with = |quote_ttl_ms: u32| {
        let mut config = config(dir.path());
        config.engine.day_trading.quote_ttl_ms = quote_ttl_ms;
        config.snapshot_every_commands = 1;
        config
    };
    // A new data directory: the engine applies, and the node reports, the configured ones.
    let node = Node::start(with(1_500)).await.unwrap();
    let settings = day_trading_config(node.addr).await;
    assert_eq!((settings.quote_ttl_ms, settings.pending_ttl_ms), (1_500, 60_000));
    market(node.addr).await;
    node.shutdown().await.unwrap();
    // Restored from a snapshot, the engine keeps the values its log was applied under,
    // and reports those: a configuration that now says otherwise is overruled.
    let restarted = Node::start(with(3_000)).await.unwrap();
    assert!(restarted.recovered.snapshot_index.is_some(), "a snapshot was taken");
    assert_eq!(day_trading_config(restarted.addr).await.quote_ttl_ms, 1_500);
    restarted.shutdown().await.unwrap();
}

fn rejected(ack: &proto::Ack) -> Option<u32> {
    match &ack.outcome {
        Some(proto::ack::Outcome::Rejected(info)) => Some(info.code),
        _ => None,
    }
}

/// The `[clients]` table through a node: a new client past `max` is refused
/// (`limit_reached`) and counted; clients idle past `expiry_secs` of log time are
/// forgotten at the next command's sweep and counted, which frees their places; a
/// forgotten client's later seq is a gap, while its first would apply anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_records_are_capped_and_expire_in_log_time() {
    use std::sync::atomic::Ordering::Relaxed;
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path());
    config.clients = bourse_node::config::ClientsToml { max: 3, expiry_secs: 1 };
    let node = Node::start(config).await.unwrap();
    // Client 7 sets the market up: accounts 0 and 1, USD is asset 0.
    let mut a = market(node.addr).await;
    let deposit = || CommandBody::Deposit { account: AccountId(0), asset: AssetId(0), amount: Amount(5) };
    assert_eq!(rejected(&admin(&mut a, 8, 1, deposit()).await), None);
    assert_eq!(rejected(&admin(&mut a, 9, 1, deposit()).await), None);
    let limit_reached = u32::from(bourse_engine::Reject::LimitReached.code());
    assert_eq!(rejected(&admin(&mut a, 10, 1, deposit()).await), Some(limit_reached), "a fourth client");
    assert_eq!((node.metrics.clients.load(Relaxed), node.metrics.clients_refused.load(Relaxed)), (3, 1));

    // A second and a quarter later the three are idle past the expiry: the next command,
    // client 10's, sweeps them away and takes a place.
    tokio::time::sleep(std::time::Duration::from_millis(1_250)).await;
    assert_eq!(rejected(&admin(&mut a, 10, 1, deposit()).await), None);
    assert_eq!((node.metrics.clients.load(Relaxed), node.metrics.clients_expired.load(Relaxed)), (1, 3));
    let gap = u32::from(bourse_engine::Reject::SequenceGap.code());
    assert_eq!(rejected(&admin(&mut a, 8, 2, deposit()).await), Some(gap), "client 8 is a stranger now");
    assert_eq!(rejected(&admin(&mut a, 8, 1, deposit()).await), None, "whose first command applies anew");
    node.shutdown().await.unwrap();
}

/// The exchange's own client id (which sends the adaptive hold's settings outside
/// exactly-once) is nobody else's: Admin.Submit and an OrderEntry session refuse it, and
/// an admin's SetFairness under an ordinary id is an ordinary command, and the values it
/// sets are what the node holds in force (`Node::metrics`, shown on /metrics).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_exchanges_own_client_id_is_refused_and_an_admin_may_pin_the_fairness_delays() {
    use bourse_engine::command::FairnessSetting;
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path())).await.unwrap();
    let mut admin_client = AdminClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let setting = FairnessSetting { hold_ns: 2_000_000, window_ns: 500_000 };
    let command = Command { client: ClientId::SYSTEM, seq: 1, ts: 0, body: CommandBody::SetFairness(setting) };
    let refused = admin_client.submit(proto::SubmitRequest::from(&command)).await.expect_err("reserved");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{refused:?}");
    assert!(refused.message().contains("reserved"), "{refused:?}");
    let mut order_entry = OrderEntryClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let (sender, receiver) = tokio::sync::mpsc::channel(4);
    let mut replies =
        order_entry.session(tokio_stream::wrappers::ReceiverStream::new(receiver)).await.unwrap().into_inner();
    let wire = proto::ClientCommand::from(&command);
    sender.send(proto::ClientBatch { client_id: ClientId::SYSTEM.0, commands: vec![wire] }).await.unwrap();
    let status = replies.next().await.expect("an answer").expect_err("refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    assert_eq!(node.metrics.fairness.get(), None, "nothing was set");
    // An operator pins the delays as an ordinary (exactly-once) command.
    let ack = admin(&mut admin_client, 7, 1, CommandBody::SetFairness(setting)).await;
    assert_eq!(ok_id(&ack), 0);
    assert_eq!(node.metrics.fairness.get(), Some(setting));
    assert_eq!(node.metrics.fairness.changes(), 1);
    let too_long = FairnessSetting { hold_ns: 11_000_000_000, window_ns: 0 };
    let ack = admin(&mut admin_client, 7, 2, CommandBody::SetFairness(too_long)).await;
    assert_eq!(rejected(&ack), Some(bourse_engine::Reject::FairnessInvalid.code().into()));
    assert_eq!(node.metrics.fairness.get(), Some(setting));
    node.shutdown().await.unwrap();
}

//! Many connections at once, and connections that drop: every acknowledged order exists
//! exactly once, read-your-writes holds across connections, and cash and shares are
//! conserved.

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use bourse_client::{ClientOptions, QueryClient};
use bourse_engine::AccountId;
use support::{frame, opened_ids, read_framed, Exchange2};
use tokio::io::AsyncWriteExt;

const CONNECTIONS: u64 = 64;
const ORDERS_EACH: u64 = 12;

/// Sum over accounts of (cash, shares of `symbol`), available plus reserved, in engine
/// units, and the assets' supplies.
async fn totals(x: &Exchange2, accounts: impl Iterator<Item = u64>, symbol: &str) -> ((i64, i64), (i64, i64)) {
    let mut query = QueryClient::connect(vec![x.node.addr.to_string()], ClientOptions::default()).await.unwrap();
    let assets = query.assets().await.unwrap().assets;
    let id_of = |name: &str| assets.iter().find(|a| a.name == name).unwrap();
    let (usd, sym) = (id_of("USD"), id_of(symbol));
    let (mut cash, mut shares) = (0, 0);
    for external in accounts {
        let account = query.account_by_external_id(external).await.unwrap().account;
        for balance in query.balances(AccountId(account)).await.unwrap().balances {
            if balance.asset == usd.id {
                cash += balance.available + balance.reserved;
            } else if balance.asset == sym.id {
                shares += balance.available + balance.reserved;
            }
        }
    }
    ((cash, shares), (usd.supply, sym.supply))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_connections_at_once_lose_and_double_nothing() {
    let x = Arc::new(Exchange2::start().await);
    let mut create = String::from("<create>");
    for id in 1..=CONNECTIONS {
        create.push_str(&format!("<account id=\"{id}\" balance=\"1000\"/>"));
    }
    create.push_str("<symbol sym=\"C\">");
    for id in 1..=CONNECTIONS {
        create.push_str(&format!("<account id=\"{id}\">100</account>"));
    }
    create.push_str("</symbol></create>");
    let reply = x.bare(&create).await;
    assert_eq!(reply.matches("<created").count(), 2 * CONNECTIONS as usize, "{reply}");

    // Each connection alternates buys and sells at crossing prices, half of them in
    // bare mode (a connection per request), half length-prefixed; after each order it
    // queries it, possibly on another connection, and must find it.
    let mut tasks = Vec::new();
    for id in 1..=CONNECTIONS {
        let x = Arc::clone(&x);
        tasks.push(tokio::spawn(async move {
            let mut framed = x.connect().await;
            let mut acked = Vec::new();
            for n in 0..ORDERS_EACH {
                let (amount, limit) = if (id + n) % 2 == 0 { ("1.5", "10.25") } else { ("-1.5", "10") };
                let body = format!(
                    "<transactions id=\"{id}\"><order sym=\"C\" amount=\"{amount}\" limit=\"{limit}\"/></transactions>"
                );
                let reply = if id % 2 == 0 { framed.request(&body).await } else { x.bare(&body).await };
                let ids = opened_ids(&reply);
                assert_eq!(ids.len(), 1, "{reply}");
                let query = format!("<transactions id=\"{id}\"><query id=\"{}\"/></transactions>", ids[0]);
                let status = if id % 2 == 0 { x.bare(&query).await } else { framed.request(&query).await };
                assert!(status.contains(&format!("<status id=\"{}\"", ids[0])), "read-your-writes: {status}");
                acked.extend(ids);
            }
            acked
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    let unique: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "a transaction id was given twice");
    assert_eq!(all.len() as u64, CONNECTIONS * ORDERS_EACH);
    // Every acknowledged order exists once in the engine, owned by its account.
    let mut query = QueryClient::connect(vec![x.node.addr.to_string()], ClientOptions::default()).await.unwrap();
    for id in &unique {
        query.order(bourse_engine::OrderId(*id)).await.unwrap();
    }
    let ((cash, shares), (cash_supply, share_supply)) = totals(&x, 1..=CONNECTIONS, "C").await;
    assert_eq!((cash, shares), (CONNECTIONS as i64 * 1000 * 100_000_000, CONNECTIONS as i64 * 100 * 10_000));
    assert_eq!((cash, shares), (cash_supply, share_supply), "no fees: everything is in the accounts");
    Arc::try_unwrap(x).ok().expect("tasks are done").stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_loses_no_acknowledged_order() {
    let x = Exchange2::start().await;
    x.bare("<create><account id=\"1\" balance=\"100000\"/></create>").await;
    // Pipeline many orders, read some replies, then drop the connection with the rest
    // unanswered (some still being executed).
    const SENT: usize = 40;
    let mut stream = tokio::net::TcpStream::connect(x.framed.addr()).await.unwrap();
    let mut bytes = Vec::new();
    for n in 0..SENT {
        let body = format!("<transactions id=\"1\"><order sym=\"D\" amount=\"1\" limit=\"{}\"/></transactions>", n + 1);
        bytes.extend(frame(body.as_bytes()));
    }
    stream.write_all(&bytes).await.unwrap();
    let mut acked = Vec::new();
    for _ in 0..10 {
        acked.extend(opened_ids(&read_framed(&mut stream).await.unwrap()));
    }
    drop(stream);
    assert_eq!(acked.len(), 10);
    // Whatever the front end was doing finishes; the acknowledged ten are all there,
    // each once, and nothing was placed twice.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let mut framed = x.connect().await;
    for id in &acked {
        let reply = framed.request(&format!("<transactions id=\"1\"><query id=\"{id}\"/></transactions>")).await;
        assert!(reply.contains("<open shares=\"1\"/>"), "{reply}");
    }
    let mut query = QueryClient::connect(vec![x.node.addr.to_string()], ClientOptions::default()).await.unwrap();
    let account = query.account_by_external_id(1).await.unwrap().account;
    let open = query.open_orders(AccountId(account)).await.unwrap().orders;
    let limits: BTreeSet<i64> = open.iter().map(|o| o.px_resting.unwrap()).collect();
    assert_eq!(limits.len(), open.len(), "no order was placed twice");
    assert!((10..=SENT).contains(&open.len()), "{} orders open", open.len());
    for id in &acked {
        assert!(open.iter().any(|o| o.id == *id), "acknowledged order {id} is open");
    }
    x.stop().await;
}

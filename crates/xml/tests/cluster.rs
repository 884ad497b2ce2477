//! Read-your-writes on a replicated exchange: a 3-node Raft cluster in this process, a
//! gateway whose queries go to a follower (listed first), and the XML front end. A
//! follower applies a commit a heartbeat or so after the leader acknowledged it, so a
//! plain read there can miss an order just placed; every `<query>` right after its
//! `<order>` must still find it.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bourse_gateway::{Gateway, GatewayConfig, KeyStore};
use bourse_node::config::RaftConfig;
use bourse_node::{Node, NodeConfig};
use bourse_protocol::proto;
use bourse_xml::{Exchange, ExchangeConfig, Framing, NoHistory, XmlConfig, XmlServer};
use support::{opened_id, Framed};

fn free_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], bourse_node::ports::free_local_port().unwrap()))
}

async fn role(api: SocketAddr) -> Option<String> {
    let mut client = proto::cluster_client::ClusterClient::connect(format!("http://{api}")).await.ok()?;
    Some(client.status(proto::ClusterStatusRequest {}).await.ok()?.into_inner().role)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_after_an_order_sees_it_even_when_a_follower_answers() {
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let addrs: Vec<(SocketAddr, SocketAddr)> = (0..3).map(|_| (free_addr(), free_addr())).collect();
    let bootstrap: Vec<String> =
        addrs.iter().enumerate().map(|(i, (api, raft))| format!("{}={api}/{raft}", i + 1)).collect();
    let mut nodes = Vec::new();
    for (i, (api, raft)) in addrs.iter().enumerate() {
        let config = NodeConfig {
            data: dirs[i].path().to_path_buf(),
            listen: *api,
            sequencer_window_us: 0,
            raft: Some(RaftConfig {
                id: i as u64 + 1,
                listen: *raft,
                bootstrap: bootstrap.clone(),
                ..RaftConfig::default()
            }),
            ..NodeConfig::default()
        };
        nodes.push(Node::start(config).await.unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    let leader = loop {
        let mut found = None;
        for (i, (api, _)) in addrs.iter().enumerate() {
            if role(*api).await.as_deref() == Some("leader") {
                found = Some(i);
            }
        }
        if let Some(i) = found {
            break i;
        }
        assert!(Instant::now() < deadline, "no leader was elected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // A follower first: the gateway's link follows the leader's hint, its queries stay
    // with the first member that answers.
    let mut cluster: Vec<String> = addrs.iter().map(|(api, _)| api.to_string()).collect();
    let follower = (leader + 1) % 3;
    cluster.swap(0, follower);
    let mut keys = KeyStore::default();
    let key = keys.add_process_key("xml-front-end", true);
    let mut gateway_config = GatewayConfig::new(1, "127.0.0.1:0".parse().unwrap(), cluster);
    gateway_config.hold_us = 0;
    let gateway = Gateway::start(gateway_config, keys).await.unwrap();
    let mut exchange_config = ExchangeConfig::new(vec![gateway.addr().to_string()]);
    exchange_config.key = Some(bourse_client::ApiKey(key));
    let exchange = Arc::new(Exchange::connect(exchange_config, Arc::new(NoHistory)).await.unwrap());
    let server =
        XmlServer::start(XmlConfig::new("127.0.0.1:0".parse().unwrap(), Framing::Prefixed), exchange).await.unwrap();

    let mut framed = Framed::connect(server.addr()).await;
    framed.request("<create><account id=\"1\" balance=\"100000\"/></create>").await;
    let mut other = Framed::connect(server.addr()).await;
    for n in 1..=100 {
        let order = format!("<transactions id=\"1\"><order sym=\"R\" amount=\"1\" limit=\"{n}\"/></transactions>");
        let id = opened_id(&framed.request(&order).await);
        // On the same connection and on another one.
        for connection in [&mut framed, &mut other] {
            let reply =
                connection.request(&format!("<transactions id=\"1\"><query id=\"{id}\"/></transactions>")).await;
            assert!(
                reply.contains(&format!("<status id=\"{id}\">")) && reply.contains("<open shares=\"1\"/>"),
                "{reply}"
            );
        }
    }
    server.shutdown().await;
    gateway.shutdown().await;
    for node in nodes {
        node.shutdown().await.unwrap();
    }
}

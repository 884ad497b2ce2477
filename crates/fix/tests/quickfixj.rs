//! Interop: QuickFIX/J 2.3.2 (a FIX engine no one here wrote, validating everything it
//! receives against its FIX 4.4 data dictionary) trades through the FIX front end of a
//! real node and gateway, over TLS (its SSL initiator verifying the front end's
//! certificate against the test's CA and the host name): logon, orders that rest, fill and are cancelled, a replace, a
//! dropped connection after which a fill made while it was away is resent from the
//! store, a resent NewOrderSingle that must not become a second order, market data, a
//! Day order that expires when this side closes the trading day, a position in a margin
//! contract read with RequestForPositions (its AO and AP validated by QuickFIX/J's
//! dictionary), logout. The Java side (`interop/`) asserts what it receives; this side builds it
//! with Maven offline (`scripts/deps/fix.sh` resolved its artifacts), runs it, trades
//! against it while it is away, and checks the exchange's books and balances after.

mod support;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use bourse_client::{random_client_id, ApiKey, Client, ClientOptions};
use bourse_engine::command::{CommandBody, OrderRequest, Tif};
use bourse_engine::{AccountId, Px, Qty, Side, SymbolId};
use support::Exchange;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Builds the interop client; returns its class path.
fn build_interop() -> String {
    let build = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fix-interop");
    let pom = concat!(env!("CARGO_MANIFEST_DIR"), "/interop/pom.xml");
    let status = std::process::Command::new("mvn")
        .args(["-B", "-q", "-o", "-f", pom])
        .arg(format!("-Dinterop.build={}", build.display()))
        .args(["package", "dependency:copy-dependencies"])
        .status()
        .expect("mvn runs (scripts/deps/fix.sh installs Maven and Java 17)");
    assert!(status.success(), "the interop client did not build offline: run scripts/deps/fix.sh");
    format!("{}:{}/*", build.join("fix-interop-0.1.0.jar").display(), build.join("dependency").display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickfixj_trades_through_the_fix_front_end() {
    let class_path = tokio::task::spawn_blocking(build_interop).await.unwrap();
    let exchange = Exchange::start_tls().await;
    exchange.margin_market().await;
    let store = tempfile::tempdir().unwrap();
    // QuickFIX/J trusts the test's CA through a PKCS#12 trust store made by keytool.
    let trust_dir = tempfile::tempdir().unwrap();
    let trust = trust_dir.path().join("trust.p12");
    let ca = exchange.ca.clone().expect("the test's CA");
    let keytool = std::process::Command::new("keytool")
        .args(["-importcert", "-noprompt", "-alias", "bourse-ca", "-storetype", "PKCS12", "-storepass", "interop"])
        .arg("-file")
        .arg(&ca)
        .arg("-keystore")
        .arg(&trust)
        .output()
        .expect("keytool runs (a JDK's)");
    assert!(keytool.status.success(), "keytool: {}", String::from_utf8_lossy(&keytool.stderr));
    let mut java = tokio::process::Command::new("java")
        .args(["-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", &class_path, "bourse.interop.Interop"])
        .arg(exchange.fix_addr.port().to_string())
        .arg(&exchange.alice)
        .arg(store.path())
        .arg(&trust)
        .arg("interop")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("java runs");
    let mut stdin = java.stdin.take().unwrap();
    let mut lines = BufReader::new(java.stdout.take().unwrap()).lines();
    let outcome = tokio::time::timeout(Duration::from_secs(90), async {
        let mut output = Vec::new();
        while let Some(line) = lines.next_line().await.unwrap() {
            println!("interop: {line}");
            output.push(line.clone());
            if line == "DROPPED" {
                sell_while_away(&exchange).await;
                stdin.write_all(b"go\n").await.unwrap();
                stdin.flush().await.unwrap();
            }
            if line == "DAY" {
                assert_eq!(exchange.close_day().await, 1, "the client's Day order expires");
                stdin.write_all(b"go\n").await.unwrap();
                stdin.flush().await.unwrap();
            }
            if line == "PASS" || line.starts_with("FAIL") {
                break;
            }
        }
        output
    })
    .await
    .expect("the interop client finished within 90 s");
    assert_eq!(outcome.last().map(String::as_str), Some("PASS"), "{outcome:#?}");
    assert!(java.wait().await.unwrap().success());

    // The exchange's side: account 1 bought 4 at 150 and 5 at 140 as the maker (fee 0)
    // and has nothing open; account 0 sold 9 as the taker (1 cent a share) and offers 1.
    let usd_start = 1_000_000;
    assert_eq!(exchange.balance(1, 0).await, (usd_start - 600 - 700, 0));
    assert_eq!(exchange.balance(1, 1).await, (9, 0));
    assert_eq!(exchange.balance(0, 0).await, (usd_start + 600 - 4 + 700 - 5, 0));
    assert_eq!(exchange.balance(0, 1).await, (90, 1));
    let mut query = exchange.query(&exchange.admin).await;
    assert!(query.open_orders(AccountId(1)).await.unwrap().orders.is_empty());
    let open = query.open_orders(AccountId(0)).await.unwrap().orders;
    assert_eq!((open.len(), open[0].px_resting, open[0].qty_open), (1, Some(160), 1));
    // FUT/USD: account 1 bought 2 at 100 from account 0.
    for (account, size) in [(1, 2), (0, -2)] {
        let report = query.account_report(AccountId(account)).await.unwrap();
        let sizes: Vec<_> = report.positions.iter().map(|p| (p.symbol, p.size, p.cost)).collect();
        assert_eq!(sizes, [(1, size, size * 100 * 1_000)], "account {account}");
    }
    exchange.stop().await;
}

/// While the FIX client is away, account 0 sells 5 at 140 into its resting buy.
async fn sell_while_away(exchange: &Exchange) {
    let options = ClientOptions { api_key: Some(ApiKey(exchange.alice.clone())), ..ClientOptions::default() };
    let client = Client::connect(vec![exchange.gateway.addr().to_string()], random_client_id(), options).await.unwrap();
    let sell = OrderRequest::limit(AccountId(0), SymbolId(0), Side::Sell, Px(140), Qty(5), Tif::Ioc);
    let reply = client.submit(CommandBody::Place(sell)).await.unwrap();
    assert!(reply.ok_id().is_some(), "{reply:?}");
    let order =
        exchange.query(&exchange.admin).await.order(bourse_engine::OrderId(reply.ok_id().unwrap())).await.unwrap();
    assert_eq!(order.order.unwrap().qty_filled, 5, "the sell traded with the FIX client's resting buy");
}

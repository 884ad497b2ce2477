//! Every rule of the spec's sections 3 to 9, as golden reply bytes, against a real node
//! and gateway: creating accounts and shares, orders, queries and cancels, every error
//! text and the order in which checks decide it, and the accounting table (reservations,
//! execution at the resting order's price, refunds, cancels, conservation) read back
//! from the engine.

mod support;

use bourse_client::{ClientOptions, QueryClient};
use bourse_engine::AccountId;
use support::{opened_id, request_error, results, Exchange2};

/// A query client straight to the node (to read the engine's own numbers).
async fn node_query(x: &Exchange2) -> QueryClient {
    QueryClient::connect(vec![x.node.addr.to_string()], ClientOptions::default()).await.unwrap()
}

/// (available, reserved) of `asset` for XML account `external_id`, in engine units.
async fn balance(x: &Exchange2, external_id: u64, asset: &str) -> (i64, i64) {
    let mut query = node_query(x).await;
    let account = query.account_by_external_id(external_id).await.unwrap().account;
    let assets = query.assets().await.unwrap().assets;
    let Some(asset) = assets.iter().find(|a| a.name == asset) else { return (0, 0) };
    let balances = query.balances(AccountId(account)).await.unwrap().balances;
    balances.iter().find(|b| b.asset == asset.id).map_or((0, 0), |b| (b.available, b.reserved))
}

/// The log stamp of an order's fills and closing, in whole seconds.
async fn order_times(x: &Exchange2, id: u64) -> (Vec<u64>, u64) {
    let info = node_query(x).await.order(bourse_engine::OrderId(id)).await.unwrap().order.unwrap();
    (info.fills.iter().map(|f| f.ts / 1_000_000_000).collect(), info.ts_closed / 1_000_000_000)
}

const USD: i64 = 100_000_000; // one dollar in cash units (8 decimals)
const SHARE: i64 = 10_000; // one share in base units (4 decimals)

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_spec_example_in_both_framings() {
    let x = Exchange2::start().await;
    let body = "<create>\n  <account id=\"42\" balance=\"1000\"/>\n  <symbol sym=\"ACME\">\n    <account id=\"42\">10</account>\n  </symbol>\n</create>\n";
    let expected = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<results>\n  <created id=\"42\"/>\n  <created sym=\"ACME\" id=\"42\"/>\n</results>\n";
    assert_eq!(x.bare(body).await, expected);
    assert_eq!(expected.len(), 113);
    assert_eq!(balance(&x, 42, "USD").await, (1000 * USD, 0));
    assert_eq!(balance(&x, 42, "ACME").await, (10 * SHARE, 0));
    // Again, length-prefixed: the account exists now, the symbol mints more shares.
    let mut framed = x.connect().await;
    let reply = framed.request(body).await;
    assert_eq!(
        reply,
        results(&["  <error id=\"42\">Account already exists</error>", "  <created sym=\"ACME\" id=\"42\"/>"])
    );
    assert_eq!(balance(&x, 42, "USD").await, (1000 * USD, 0), "the existing account is untouched");
    assert_eq!(balance(&x, 42, "ACME").await, (20 * SHARE, 0));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_accounts_every_rule_and_error() {
    let x = Exchange2::start().await;
    let reply = x
        .bare(
            "<create>\
               <account id=\"007\" balance=\"0\"/>\
               <account id=\"7\" balance=\"5\"/>\
               <account id=\" 8 \" balance=\" 0.00000001 \"/>\
               <account id=\"9\" balance=\"1.000000000\"/>\
               <account id=\"10\" balance=\"1.000000001\"/>\
               <account id=\"10\" balance=\"-1\"/>\
               <account id=\"10\" balance=\"1e3\"/>\
               <account id=\"1234567890123456789\" balance=\"1\"/>\
               <account id=\"x\" balance=\"bad\"/>\
               <account balance=\"1\"/>\
               <account id=\"11\"/>\
               <account/>\
               <account id=\"12\" balance=\"92233720368.54775807\"/>\
               <account id=\"13\" balance=\"92233720368.54775808\"/>\
               <account id=\"14\" balance=\"1\" extra=\"ignored\">text ignored<nested/></account>\
               <bogus id=\"1\"/>\
               <p:account id=\"15\" balance=\"1\"/>\
             </create>",
        )
        .await;
    let expected = results(&[
        "  <created id=\"007\"/>",
        "  <error id=\"7\">Account already exists</error>",
        "  <created id=\" 8 \"/>",
        "  <created id=\"9\"/>",
        "  <error id=\"10\">Invalid balance</error>",
        "  <error id=\"10\">Invalid balance</error>",
        "  <error id=\"10\">Invalid balance</error>",
        "  <error id=\"1234567890123456789\">Invalid account id</error>",
        "  <error id=\"x\">Invalid account id</error>",
        "  <error>Missing attribute: id</error>",
        "  <error id=\"11\">Missing attribute: balance</error>",
        "  <error>Missing attribute: id</error>",
        "  <error id=\"12\">Invalid balance</error>",
        "  <error id=\"13\">Invalid balance</error>",
        "  <created id=\"14\"/>",
        "  <error>Unknown element: bogus</error>",
        "  <error>Unknown element: p:account</error>",
    ]);
    assert_eq!(reply, expected);
    assert_eq!(balance(&x, 7, "USD").await, (0, 0), "007 and 7 are one account, made empty");
    assert_eq!(balance(&x, 8, "USD").await, (1, 0));
    // 12's balance is i64::MAX cash units: with the cash already deposited the exchange
    // could not hold it (an asset's supply is at most i64::MAX); 13's does not fit at all.
    let reply = x.bare("<create><account id=\"12\" balance=\"92233720368.54775806\"/></create>").await;
    assert_eq!(reply, results(&["  <error id=\"12\">Invalid balance</error>"]));
    assert_eq!(x.bare("<create/>").await, results(&[]));
    assert_eq!(x.bare("<create>\n</create>").await, results(&[]));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_symbols_every_rule_and_error() {
    let x = Exchange2::start().await;
    x.bare("<create><account id=\"1\" balance=\"0\"/><account id=\"2\" balance=\"0\"/></create>").await;
    let reply = x
        .bare(
            "<create>\
               <symbol sym=\"ACME\">\
                 <account id=\"1\">10</account>\
                 <account id=\"1\">0.5</account>\
                 <account id=\"2\"> 1.0000 </account>\
                 <account id=\"3\">1</account>\
                 <account id=\"x\">1</account>\
                 <account id=\"2\">0</account>\
                 <account id=\"2\">-1</account>\
                 <account id=\"2\">0.00001</account>\
                 <account id=\"2\">abc</account>\
                 <account>1</account>\
                 <other/>\
               </symbol>\
               <symbol sym=\"BAD.SYM\"><account id=\"1\">1</account><account id=\"x\">y</account></symbol>\
               <symbol><account id=\"1\">1</account><account>1</account></symbol>\
               <symbol sym=\"abcdefghijklmnopq\"><account id=\"1\">1</account></symbol>\
               <symbol sym=\"EMPTY\"/>\
               <symbol sym=\"a&amp;b\"><account id=\"1\">1</account></symbol>\
             </create>",
        )
        .await;
    let expected = results(&[
        "  <created sym=\"ACME\" id=\"1\"/>",
        "  <created sym=\"ACME\" id=\"1\"/>",
        "  <created sym=\"ACME\" id=\"2\"/>",
        "  <error sym=\"ACME\" id=\"3\">Account does not exist</error>",
        "  <error sym=\"ACME\" id=\"x\">Invalid account id</error>",
        "  <error sym=\"ACME\" id=\"2\">Invalid share amount</error>",
        "  <error sym=\"ACME\" id=\"2\">Invalid share amount</error>",
        "  <error sym=\"ACME\" id=\"2\">Invalid share amount</error>",
        "  <error sym=\"ACME\" id=\"2\">Invalid share amount</error>",
        "  <error sym=\"ACME\">Missing attribute: id</error>",
        "  <error>Unknown element: other</error>",
        "  <error sym=\"BAD.SYM\" id=\"1\">Invalid symbol</error>",
        "  <error sym=\"BAD.SYM\" id=\"x\">Invalid symbol</error>",
        "  <error id=\"1\">Missing attribute: sym</error>",
        "  <error>Missing attribute: sym</error>",
        "  <error sym=\"abcdefghijklmnopq\" id=\"1\">Invalid symbol</error>",
        "  <error sym=\"a&amp;b\" id=\"1\">Invalid symbol</error>",
    ]);
    assert_eq!(reply, expected);
    assert_eq!(balance(&x, 1, "ACME").await, (10 * SHARE + SHARE / 2, 0), "listed twice, credited twice");
    assert_eq!(balance(&x, 2, "ACME").await, (SHARE, 0));
    // A symbol with no accounts was still registered: its shares can be credited later
    // and it can be sold (nothing to sell yet: insufficient shares, not an unknown symbol).
    let reply = x.bare("<transactions id=\"1\"><order sym=\"EMPTY\" amount=\"-1\" limit=\"1\"/></transactions>").await;
    assert_eq!(reply, results(&["  <error sym=\"EMPTY\" amount=\"-1\" limit=\"1\">Insufficient shares</error>"]));
    let mut query = node_query(&x).await;
    assert!(query.symbol_by_name("EMPTY/USD").await.unwrap().is_some());
    assert!(query.symbol_by_name("BAD.SYM/USD").await.unwrap().is_none());
    // Symbols are case-sensitive.
    let reply = x.bare("<create><symbol sym=\"acme\"><account id=\"1\">1</account></symbol></create>").await;
    assert_eq!(reply, results(&["  <created sym=\"acme\" id=\"1\"/>"]));
    assert_eq!(balance(&x, 1, "acme").await, (SHARE, 0));
    assert_eq!(balance(&x, 1, "ACME").await, (10 * SHARE + SHARE / 2, 0));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_request_level_errors_and_an_unknown_acting_account() {
    let x = Exchange2::start().await;
    assert_eq!(x.bare("<transactions><query id=\"1\"/></transactions>").await, request_error("Missing attribute: id"));
    assert_eq!(x.bare("<transactions id=\"1\"/>").await, request_error("Empty transactions"));
    assert_eq!(x.bare("<transactions id=\"1\"> text </transactions>").await, request_error("Empty transactions"));
    for id in ["99", "abc", ""] {
        let reply = x
            .bare(&format!(
                "<transactions id=\"{id}\">\
                   <order sym=\"ACME\" amount=\"1\" limit=\"1\"/>\
                   <order sym=\"ACME\" amount=\"x\" limit=\"1\"/>\
                   <order amount=\"1\" limit=\"1\"/>\
                   <query id=\"1\"/><cancel id=\"2\"/><query/><nope/>\
                 </transactions>"
            ))
            .await;
        let expected = results(&[
            "  <error sym=\"ACME\" amount=\"1\" limit=\"1\">Account does not exist</error>",
            "  <error sym=\"ACME\" amount=\"x\" limit=\"1\">Invalid amount</error>",
            "  <error amount=\"1\" limit=\"1\">Missing attribute: sym</error>",
            "  <error id=\"1\">Account does not exist</error>",
            "  <error id=\"2\">Account does not exist</error>",
            "  <error>Missing attribute: id</error>",
            "  <error>Unknown element: nope</error>",
        ]);
        assert_eq!(reply, expected, "acting account {id:?}");
    }
    let mut query = node_query(&x).await;
    assert!(query.symbol_by_name("ACME/USD").await.unwrap().is_none(), "nothing was executed");
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn order_validation_in_the_order_section_9_gives() {
    let x = Exchange2::start().await;
    x.bare("<create><account id=\"1\" balance=\"100\"/><symbol sym=\"ACME\"><account id=\"1\">10</account></symbol></create>")
        .await;
    let reply = x
        .bare(
            "<transactions id=\"1\">\
               <order/>\
               <order sym=\"bad!\" limit=\"0\"/>\
               <order sym=\"bad!\" amount=\"0\" limit=\"0\"/>\
               <order sym=\"ACME\" amount=\"0\" limit=\"0\"/>\
               <order sym=\"ACME\" amount=\"-0\" limit=\"1\"/>\
               <order sym=\"ACME\" amount=\"1.00001\" limit=\"1\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"0\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"-1\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"1.00001\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"1.00000\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"abc\"/>\
               <order sym=\"ACME\" amount=\"+1\" limit=\"1\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"1\" junk=\"x\">text</order>\
             </transactions>",
        )
        .await;
    let lines: Vec<&str> = reply.lines().collect();
    let expected_errors = [
        "  <error>Missing attribute: sym</error>",
        "  <error sym=\"bad!\" limit=\"0\">Missing attribute: amount</error>",
        "  <error sym=\"bad!\" amount=\"0\" limit=\"0\">Invalid symbol</error>",
        "  <error sym=\"ACME\" amount=\"0\" limit=\"0\">Invalid amount</error>",
        "  <error sym=\"ACME\" amount=\"-0\" limit=\"1\">Invalid amount</error>",
        "  <error sym=\"ACME\" amount=\"1.00001\" limit=\"1\">Invalid amount</error>",
        "  <error sym=\"ACME\" amount=\"1\" limit=\"0\">Invalid limit</error>",
        "  <error sym=\"ACME\" amount=\"1\" limit=\"-1\">Invalid limit</error>",
        "  <error sym=\"ACME\" amount=\"1\" limit=\"1.00001\">Invalid limit</error>",
    ];
    assert_eq!(&lines[2..11], expected_errors, "{reply}");
    assert!(lines[11].starts_with("  <opened sym=\"ACME\" amount=\"1\" limit=\"1.00000\" id=\""), "{reply}");
    assert_eq!(lines[12], "  <error sym=\"ACME\" amount=\"1\" limit=\"abc\">Invalid limit</error>");
    assert_eq!(lines[13], "  <error sym=\"ACME\" amount=\"+1\" limit=\"1\">Invalid amount</error>");
    assert!(lines[14].starts_with("  <opened sym=\"ACME\" amount=\"1\" limit=\"1\" id=\""), "{reply}");
    assert_eq!(lines.len(), 16);
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reservations_funds_and_shares() {
    let x = Exchange2::start().await;
    x.bare(
        "<create><account id=\"1\" balance=\"100\"/><account id=\"2\" balance=\"0\"/>\
         <symbol sym=\"ACME\"><account id=\"2\">10</account></symbol></create>",
    )
    .await;
    // A buy may take the cash to exactly 0; one more cent is refused.
    let reply = x
        .bare(
            "<transactions id=\"1\">\
               <order sym=\"ACME\" amount=\"8\" limit=\"12.5\"/>\
               <order sym=\"ACME\" amount=\"0.0001\" limit=\"0.0001\"/>\
             </transactions>",
        )
        .await;
    let id = opened_id(&reply);
    assert_eq!(
        reply,
        results(&[
            &format!("  <opened sym=\"ACME\" amount=\"8\" limit=\"12.5\" id=\"{id}\"/>"),
            "  <error sym=\"ACME\" amount=\"0.0001\" limit=\"0.0001\">Insufficient funds</error>",
        ])
    );
    assert_eq!(balance(&x, 1, "USD").await, (0, 100 * USD));
    // Sells reserve shares; shares reserved by resting sells are not available.
    let reply = x
        .bare(
            "<transactions id=\"2\">\
               <order sym=\"ACME\" amount=\"-6\" limit=\"13\"/>\
               <order sym=\"ACME\" amount=\"-4.0001\" limit=\"13\"/>\
               <order sym=\"ACME\" amount=\"-4\" limit=\"13\"/>\
               <order sym=\"NEVER\" amount=\"-1\" limit=\"1\"/>\
             </transactions>",
        )
        .await;
    let ids = support::opened_ids(&reply);
    assert_eq!(
        reply,
        results(&[
            &format!("  <opened sym=\"ACME\" amount=\"-6\" limit=\"13\" id=\"{}\"/>", ids[0]),
            "  <error sym=\"ACME\" amount=\"-4.0001\" limit=\"13\">Insufficient shares</error>",
            &format!("  <opened sym=\"ACME\" amount=\"-4\" limit=\"13\" id=\"{}\"/>", ids[1]),
            "  <error sym=\"NEVER\" amount=\"-1\" limit=\"1\">Insufficient shares</error>",
        ])
    );
    assert_eq!(balance(&x, 2, "ACME").await, (0, 10 * SHARE));
    assert!(ids[0] > id && ids[1] > ids[0], "transaction ids increase in acceptance order");
    // A buy of a symbol never created is accepted and rests.
    x.bare("<create><account id=\"3\" balance=\"10\"/></create>").await;
    let reply = x.bare("<transactions id=\"3\"><order sym=\"NEWCO\" amount=\"2\" limit=\"5\"/></transactions>").await;
    let new = opened_id(&reply);
    let reply = x.bare(&format!("<transactions id=\"3\"><query id=\"{new}\"/></transactions>")).await;
    assert_eq!(reply, results(&[&format!("  <status id=\"{new}\">"), "    <open shares=\"2\"/>", "  </status>"]));
    assert_eq!(balance(&x, 3, "USD").await, (0, 10 * USD));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matching_executes_at_the_resting_price_and_refunds_the_difference() {
    let x = Exchange2::start().await;
    x.bare(
        "<create>\
           <account id=\"1\" balance=\"1000\"/><account id=\"2\" balance=\"1000\"/><account id=\"3\" balance=\"1000\"/>\
           <symbol sym=\"ACME\"><account id=\"1\">100</account><account id=\"3\">100</account></symbol>\
         </create>",
    )
    .await;
    // 1 sells 10 at 12, then 3 sells 5 at 12: same price, 1 first.
    let sell_1 = opened_id(
        &x.bare("<transactions id=\"1\"><order sym=\"ACME\" amount=\"-10\" limit=\"12\"/></transactions>").await,
    );
    let sell_3 = opened_id(
        &x.bare("<transactions id=\"3\"><order sym=\"ACME\" amount=\"-5\" limit=\"12\"/></transactions>").await,
    );
    // 2 buys 4 at 13: executes at 12 (the resting price), refund 4 × 1.
    let buy = opened_id(
        &x.bare("<transactions id=\"2\"><order sym=\"ACME\" amount=\"4\" limit=\"13\"/></transactions>").await,
    );
    let (times, _) = order_times(&x, buy).await;
    let t = times[0];
    assert_eq!(balance(&x, 2, "USD").await, (1000 * USD - 48 * USD, 0), "paid 4 × 12, reserved 4 × 13, refunded 4");
    assert_eq!(balance(&x, 2, "ACME").await, (4 * SHARE, 0));
    assert_eq!(balance(&x, 1, "USD").await, (1048 * USD, 0));
    assert_eq!(balance(&x, 1, "ACME").await, (90 * SHARE, 6 * SHARE));
    // A partly filled resting order keeps its priority: the next buy of 8 takes 1's
    // remaining 6 before 3's.
    let buy_2 = opened_id(
        &x.bare("<transactions id=\"2\"><order sym=\"ACME\" amount=\"8\" limit=\"12\"/></transactions>").await,
    );
    let (times_2, _) = order_times(&x, buy_2).await;
    let t2 = times_2[0];
    let reply =
        x.bare(&format!("<transactions id=\"1\"><query id=\"{sell_1}\"/><query id=\"{buy}\"/></transactions>")).await;
    assert_eq!(
        reply,
        results(&[
            &format!("  <status id=\"{sell_1}\">"),
            &format!("    <executed shares=\"4\" price=\"12\" time=\"{t}\"/>"),
            &format!("    <executed shares=\"6\" price=\"12\" time=\"{t2}\"/>"),
            "  </status>",
            &format!("  <error id=\"{buy}\">Unknown transaction</error>"),
        ]),
        "a fully executed order has no open part; another account's order reads as unknown"
    );
    let reply = x.bare(&format!("<transactions id=\"3\"><query id=\"{sell_3}\"/></transactions>")).await;
    assert_eq!(
        reply,
        results(&[
            &format!("  <status id=\"{sell_3}\">"),
            "    <open shares=\"3\"/>",
            &format!("    <executed shares=\"2\" price=\"12\" time=\"{t2}\"/>"),
            "  </status>",
        ])
    );
    let reply = x.bare(&format!("<transactions id=\"2\"><query id=\"{buy_2}\"/></transactions>")).await;
    assert_eq!(
        reply,
        results(&[
            &format!("  <status id=\"{buy_2}\">"),
            &format!("    <executed shares=\"6\" price=\"12\" time=\"{t2}\"/>"),
            &format!("    <executed shares=\"2\" price=\"12\" time=\"{t2}\"/>"),
            "  </status>",
        ]),
        "one executed per fill, never merged, even at one price"
    );
    // An incoming sell receives the resting bid's price.
    let bid = opened_id(
        &x.bare("<transactions id=\"2\"><order sym=\"ACME\" amount=\"2\" limit=\"11.5\"/></transactions>").await,
    );
    let ask = opened_id(
        &x.bare("<transactions id=\"3\"><order sym=\"ACME\" amount=\"-2\" limit=\"10\"/></transactions>").await,
    );
    let (times, _) = order_times(&x, ask).await;
    let reply = x.bare(&format!("<transactions id=\"3\"><query id=\"{ask}\"/></transactions>")).await;
    assert_eq!(
        reply,
        results(&[
            &format!("  <status id=\"{ask}\">"),
            &format!("    <executed shares=\"2\" price=\"11.5\" time=\"{}\"/>", times[0]),
            "  </status>",
        ])
    );
    let _ = bid;
    // Conservation: cash only from account creation, shares only from credits.
    let mut cash = 0;
    let mut shares = 0;
    for id in 1..=3 {
        let (available, reserved) = balance(&x, id, "USD").await;
        cash += available + reserved;
        let (available, reserved) = balance(&x, id, "ACME").await;
        shares += available + reserved;
    }
    assert_eq!((cash, shares), (3000 * USD, 200 * SHARE));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_returns_the_reservation_and_reports_what_happened() {
    let x = Exchange2::start().await;
    x.bare(
        "<create><account id=\"1\" balance=\"100\"/><account id=\"2\" balance=\"100\"/>\
         <symbol sym=\"X\"><account id=\"2\">10</account></symbol></create>",
    )
    .await;
    let buy = opened_id(
        &x.bare("<transactions id=\"1\"><order sym=\"X\" amount=\"10\" limit=\"2.5\"/></transactions>").await,
    );
    let sell =
        opened_id(&x.bare("<transactions id=\"2\"><order sym=\"X\" amount=\"-3\" limit=\"2\"/></transactions>").await);
    assert_eq!(balance(&x, 1, "USD").await, (75 * USD, 7 * 5 * USD / 2), "3 sold to it at its own 2.5, 7 resting");
    let reply = x
        .bare(&format!(
            "<transactions id=\"1\"><cancel id=\"{buy}\"/><cancel id=\"{buy}\"/><query id=\"{buy}\"/>\
             <cancel id=\"{sell}\"/><cancel id=\"999999\"/><cancel id=\"abc\"/><query id=\"-1\"/></transactions>"
        ))
        .await;
    let (fills, closed) = order_times(&x, buy).await;
    let status = [
        format!("    <canceled shares=\"7\" time=\"{closed}\"/>"),
        format!("    <executed shares=\"3\" price=\"2.5\" time=\"{}\"/>", fills[0]),
    ];
    assert_eq!(
        reply,
        results(&[
            &format!("  <canceled id=\"{buy}\">"),
            &status[0],
            &status[1],
            "  </canceled>",
            &format!("  <error id=\"{buy}\">Nothing to cancel</error>"),
            &format!("  <status id=\"{buy}\">"),
            &status[0],
            &status[1],
            "  </status>",
            &format!("  <error id=\"{sell}\">Unknown transaction</error>"),
            "  <error id=\"999999\">Unknown transaction</error>",
            "  <error id=\"abc\">Unknown transaction</error>",
            "  <error id=\"-1\">Unknown transaction</error>",
        ])
    );
    assert_eq!(balance(&x, 1, "USD").await, (100 * USD - 3 * 5 * USD / 2, 0), "the reservation came back");
    // Fully executed: nothing to cancel; a cancelled order never executes later.
    let reply = x.bare(&format!("<transactions id=\"2\"><cancel id=\"{sell}\"/></transactions>")).await;
    assert_eq!(reply, results(&[&format!("  <error id=\"{sell}\">Nothing to cancel</error>")]));
    x.bare("<transactions id=\"2\"><order sym=\"X\" amount=\"-1\" limit=\"1\"/></transactions>").await;
    assert_eq!(balance(&x, 1, "X").await, (3 * SHARE, 0));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_trade_is_allowed_and_fractions_are_written_minimally() {
    let x = Exchange2::start().await;
    x.bare(
        "<create><account id=\"5\" balance=\"1\"/><symbol sym=\"F\"><account id=\"5\">1</account></symbol></create>",
    )
    .await;
    let sell = opened_id(
        &x.bare("<transactions id=\"5\"><order sym=\"F\" amount=\"-0.5\" limit=\"0.2500\"/></transactions>").await,
    );
    let reply = x.bare("<transactions id=\"5\"><order sym=\"F\" amount=\"0.25\" limit=\"1\"/></transactions>").await;
    let buy = opened_id(&reply);
    let (times, _) = order_times(&x, buy).await;
    let reply =
        x.bare(&format!("<transactions id=\"5\"><query id=\"{sell}\"/><query id=\"{buy}\"/></transactions>")).await;
    assert_eq!(
        reply,
        results(&[
            &format!("  <status id=\"{sell}\">"),
            "    <open shares=\"0.25\"/>",
            &format!("    <executed shares=\"0.25\" price=\"0.25\" time=\"{}\"/>", times[0]),
            "  </status>",
            &format!("  <status id=\"{buy}\">"),
            &format!("    <executed shares=\"0.25\" price=\"0.25\" time=\"{}\"/>", times[0]),
            "  </status>",
        ])
    );
    // 1 - 0.25 × 1 reserved + 0.25 × (1 - 0.25) refunded + 0.25 × 0.25 received.
    assert_eq!(balance(&x, 5, "USD").await, (USD, 0));
    assert_eq!(balance(&x, 5, "F").await, (SHARE * 3 / 4, SHARE / 4));
    x.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_made_elsewhere_are_refused_not_misread() {
    let x = Exchange2::start().await;
    x.bare(
        "<create><account id=\"1\" balance=\"1\"/><symbol sym=\"ACME\"><account id=\"1\">1</account></symbol></create>",
    )
    .await;
    let other = |quantity, price, quote: &str| {
        let mut config = bourse_xml::ExchangeConfig::new(vec![x.gateway.addr().to_string()]);
        config.key = Some(bourse_client::ApiKey(x.key.clone()));
        config.scales = bourse_xml::Scales { quantity, price };
        config.quote_asset = quote.to_owned();
        config
    };
    let history = std::sync::Arc::new(bourse_xml::NoHistory);
    // USD has 8 decimals: a front end with cash of 4 decimals must not start on it.
    let refused = bourse_xml::Exchange::connect(other(2, 2, "USD"), history.clone()).await.err().unwrap();
    assert!(refused.contains("USD exists with 8 decimals") && refused.contains("quote asset"), "{refused}");
    // Under another quote asset it starts, but asset ACME has 4 decimals, not 2: the
    // symbol is refused rather than traded at a hundred times its price.
    let exchange = bourse_xml::Exchange::connect(other(2, 2, "EUR"), history).await.unwrap();
    assert_eq!(exchange.symbol("ACME", true).await, Err(bourse_xml::exchange::SymbolProblem::Incompatible));
    let fresh = exchange.symbol("OTHER", true).await.unwrap().unwrap();
    assert_eq!(exchange.symbol("OTHER", false).await.unwrap(), Some(fresh), "made once, then remembered");
    // And the first front end's USD symbols are untouched by it.
    let reply = x.bare("<transactions id=\"1\"><order sym=\"ACME\" amount=\"-1\" limit=\"1\"/></transactions>").await;
    assert!(reply.contains("<opened"), "{reply}");
    x.stop().await;
}

/// Numbers past what the engine's types hold are refused by name, never clamped or
/// wrapped: an amount, a limit, an account id and a transaction id out of range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_range_values_are_refused_not_clamped() {
    let x = Exchange2::start().await;
    x.bare("<create><account id=\"1\" balance=\"100\"/><symbol sym=\"ACME\"><account id=\"1\">10</account></symbol></create>")
        .await;
    let reply = x
        .bare(
            "<transactions id=\"1\">\
               <order sym=\"ACME\" amount=\"99999999999999999999\" limit=\"1\"/>\
               <order sym=\"ACME\" amount=\"1\" limit=\"99999999999999999999\"/>\
               <cancel id=\"18446744073709551616\"/>\
             </transactions>",
        )
        .await;
    let expected = results(&[
        "  <error sym=\"ACME\" amount=\"99999999999999999999\" limit=\"1\">Invalid amount</error>",
        "  <error sym=\"ACME\" amount=\"1\" limit=\"99999999999999999999\">Invalid limit</error>",
        "  <error id=\"18446744073709551616\">Unknown transaction</error>",
    ]);
    assert_eq!(reply, expected);
    let reply = x.bare("<create><account id=\"18446744073709551616\" balance=\"1\"/></create>").await;
    assert!(reply.contains("<error id=\"18446744073709551616\""), "{reply}");
    x.stop().await;
}

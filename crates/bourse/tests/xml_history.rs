//! The XML order query past the engine's memory, end to end through the binary: a
//! `bourse serve` node (its history sink writes DATA/history.sqlite) and a `bourse
//! gateway run --xml-framed … --history …` in front. An order partly executed then
//! cancelled, and one wholly executed, are queried over XML; `bourse load` then closes
//! orders until both are out of the engine's memory (its ring of 10,000 closed orders;
//! the node's own order query no longer knows them); the same XML queries then answer
//! exactly as before, from the history store. Another account's query of the order, and an id
//! that never existed, still read as unknown.

mod support;

use std::io::BufReader;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::{bourse_run, xml_request as request, GatewayProcess, NodeProcess};

const WAIT_MAX: Duration = Duration::from_secs(30);

/// The ids of the `<opened …>` results of a reply, in order.
fn opened_ids(reply: &str) -> Vec<String> {
    reply
        .split("<opened ")
        .skip(1)
        .map(|rest| {
            let id = rest.split(" id=\"").nth(1).unwrap_or_else(|| panic!("an opened id in {reply}"));
            id.split('"').next().unwrap().to_string()
        })
        .collect()
}

fn query(conn: &mut BufReader<TcpStream>, account: &str, id: &str) -> String {
    request(conn, &format!("<transactions id=\"{account}\"><query id=\"{id}\"/></transactions>"))
}

#[test]
fn xml_order_query_answers_from_the_history_once_the_engine_forgot_the_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let node = NodeProcess::start(&data, "127.0.0.1:0".parse().unwrap(), &[]);
    let history = data.join("history.sqlite");
    let cluster = node.addr.to_string();
    let gateway = GatewayProcess::start(
        [
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--cluster",
            &cluster,
            "--open",
            "--hold-us",
            "0",
            "--xml-framed",
            "127.0.0.1:0",
            "--history",
            history.to_str().unwrap(),
        ],
        "XML exchange protocol on ",
    );
    let mut conn = BufReader::new(TcpStream::connect(&gateway.addr).unwrap());

    let created = request(
        &mut conn,
        "<create><account id=\"1\" balance=\"100000\"/><account id=\"2\" balance=\"100000\"/>\
         <symbol sym=\"ACME\"><account id=\"2\">1000</account></symbol></create>",
    );
    assert_eq!(created.matches("<created").count(), 3, "{created}");
    // A: a buy of 10, 4 executed against a sell, the rest cancelled.
    let a = opened_ids(&request(
        &mut conn,
        "<transactions id=\"1\"><order sym=\"ACME\" amount=\"10\" limit=\"5\"/></transactions>",
    ));
    let sold =
        request(&mut conn, "<transactions id=\"2\"><order sym=\"ACME\" amount=\"-4\" limit=\"5\"/></transactions>");
    assert!(sold.contains("<opened"), "{sold}");
    let cancelled = request(&mut conn, &format!("<transactions id=\"1\"><cancel id=\"{}\"/></transactions>", a[0]));
    assert!(cancelled.contains("<canceled") && cancelled.contains("<executed"), "{cancelled}");
    // B: a sell of 3 that rests, then a buy that takes all of it in two parts.
    let b = opened_ids(&request(
        &mut conn,
        "<transactions id=\"2\"><order sym=\"ACME\" amount=\"-3\" limit=\"4.5\"/></transactions>",
    ));
    request(
        &mut conn,
        "<transactions id=\"1\"><order sym=\"ACME\" amount=\"1\" limit=\"6\"/>\
         <order sym=\"ACME\" amount=\"2\" limit=\"6\"/></transactions>",
    );
    let (a, b) = (a[0].clone(), b[0].clone());
    let live_a = query(&mut conn, "1", &a);
    let live_b = query(&mut conn, "2", &b);
    assert!(live_a.contains("<canceled shares=\"6\"") && live_a.contains("<executed shares=\"4\""), "{live_a}");
    assert_eq!(live_b.matches("<executed").count(), 2, "{live_b}");
    assert!(!live_b.contains("<open") && !live_b.contains("<canceled"), "{live_b}");

    // `bourse load` closes orders until the engine (10,000 closed orders kept) has
    // forgotten both.
    let forgotten = |id: &str| !bourse_run(&["order", id, "--node", &cluster, "--json"]).status.success();
    for round in 0.. {
        assert!(round < 20, "the engine still remembers orders {a} and {b}");
        if forgotten(&a) && forgotten(&b) {
            break;
        }
        let load = bourse_run(&["load", "--target", &cluster, "--seconds", "0.5", "--connections", "2", "--seed", "7"]);
        assert!(load.status.success(), "bourse load: {}", load.stderr);
    }
    let known = query(&mut conn, "1", "999999999999");
    assert!(known.contains("Unknown transaction"), "{known}");

    // The history sink follows the node; once it has written the last cancel the
    // answers are the live ones.
    let started = Instant::now();
    loop {
        let (now_a, now_b) = (query(&mut conn, "1", &a), query(&mut conn, "2", &b));
        if now_a == live_a && now_b == live_b {
            break;
        }
        assert!(
            started.elapsed() < WAIT_MAX,
            "the history's answers differ from the live ones:\n{now_a}\n{live_a}\n{now_b}\n{live_b}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Only the order's own account reads it; an unknown id is unknown.
    let other = query(&mut conn, "2", &a);
    assert!(other.contains("Unknown transaction"), "{other}");
    let never = query(&mut conn, "1", "999999");
    assert!(never.contains("Unknown transaction"), "{never}");
    drop(gateway);
    let (status, stderr) = node.terminate();
    assert!(status.success(), "{stderr}");
}

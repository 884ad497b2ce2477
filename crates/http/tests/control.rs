//! The cluster and demo routes exist only where whoever runs the nodes gave the server a
//! Control (`bourse demo`, tested end to end in crates/bourse/tests/demo.rs): a gateway's
//! HTTP server answers them 404 with a typed error, and never kills anything.

mod support;

use support::Exchange;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_control_the_cluster_and_demo_routes_are_not_found() {
    let exchange = Exchange::start().await;
    let admin = exchange.client(&exchange.admin);
    for (method, path) in [
        ("GET", "/v1/cluster"),
        ("POST", "/v1/cluster/nodes/1/kill"),
        ("GET", "/v1/demo/stats"),
        ("GET", "/v1/demo/stats?since=5"),
        ("GET", "/v1/demo/guest"),
    ] {
        let (status, body) = admin.request(method, path, None).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["error"]["name"], "not_found", "{method} {path}: {body}");
    }
    let (status, body) = admin.request("GET", "/v1/demo/stats?since=-1", None).await;
    assert_eq!(status, 400, "a malformed since: {body}");
    exchange.stop().await;
}

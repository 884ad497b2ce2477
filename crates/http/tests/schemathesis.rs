//! The OpenAPI document exercised by schemathesis, a property-based API tester nobody
//! here wrote: it reads `/openapi.json`, generates requests for every operation (valid
//! and invalid, and stateful sequences that follow links), and checks every answer.
//! The run must find no server error, and every status code, content type and body
//! must be one the document declares. It runs over HTTPS (verifying the server's
//! certificate against the test's CA), once with an admin's key and once with a
//! non-admin's, so the refusals (403, 404 for another key's order) are exercised too.
//!
//! schemathesis comes from PyPI (pinned) into a virtual environment under the target
//! directory, made on first use; it needs only `python3` with `venv`.

mod support;

use std::path::PathBuf;
use std::process::Command;

use support::Exchange;

const SCHEMATHESIS: &str = "schemathesis==4.32.5";

/// The `st` program of a virtual environment with schemathesis, made if missing.
fn schemathesis() -> PathBuf {
    let venv = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("schemathesis-4.32.5");
    let st = venv.join("bin/st");
    if st.exists() {
        return st;
    }
    let status = Command::new("python3").args(["-m", "venv"]).arg(&venv).status().expect("python3 runs");
    assert!(status.success(), "python3 -m venv {} failed", venv.display());
    let status = Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet", "--disable-pip-version-check", SCHEMATHESIS])
        .status()
        .expect("pip runs");
    assert!(status.success(), "pip install {SCHEMATHESIS} failed");
    st
}

#[test]
fn schemathesis_finds_no_server_error_and_no_undocumented_answer() {
    let st = schemathesis();
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let exchange = runtime.block_on(async {
        let exchange = Exchange::start_with_day_trading_tls().await;
        exchange.market().await;
        // A day trader with cash and a share, so the day-trading routes get past "unknown user".
        let trader = format!("/v1/daytrading/users/{}", support::DT_USER);
        let admin = exchange.client(&exchange.admin);
        admin.expect(200, "POST", &format!("{trader}/add"), Some(serde_json::json!({"amount": "1000.00"}))).await;
        // Resting orders, so stateful runs find orders to read, move and cancel.
        let alice = exchange.client(&exchange.alice);
        alice.expect(201, "POST", "/v1/orders", Some(support::limit(0, "sell", 5, 150))).await;
        alice.expect(201, "POST", "/v1/orders", Some(support::limit(1, "buy", 5, 140))).await;
        // A margin contract (insurance: account 2) in which alice's accounts hold
        // positions, so the reports answer with positions, margin and open interest.
        use serde_json::json;
        admin.expect(201, "POST", "/v1/assets", Some(json!({"name": "FUT", "decimals": 0}))).await;
        assert_eq!(admin.expect(201, "POST", "/v1/accounts", None).await["id"], 2);
        let margin = json!({"initial_bp": 1000, "maintenance_bp": 500, "multiplier": 10, "position_limit": 1000,
            "mark": "operator", "insurance": 2});
        let future = json!({"name": "FUT/USD", "base": "FUT", "quote": "USD", "tick": 1, "lot": 1, "px_min": 10,
            "px_max": 10000, "margin": margin});
        admin.expect(201, "POST", "/v1/symbols", Some(future)).await;
        let order = |account: u32, side: &str| {
            json!({"account": account, "symbol": "FUT/USD", "side": side, "type": "limit", "qty": 2, "px": 100})
        };
        alice.expect(201, "POST", "/v1/orders", Some(order(0, "sell"))).await;
        alice.expect(201, "POST", "/v1/orders", Some(order(1, "buy"))).await;
        exchange
    });
    let url = format!("https://127.0.0.1:{}/openapi.json", exchange.http.addr().port());
    let ca = exchange.ca.clone().expect("the test's CA");
    let seed = std::env::var("BOURSE_SCHEMATHESIS_SEED").unwrap_or_else(|_| "20261125".into());
    println!("schemathesis seed {seed} (BOURSE_SCHEMATHESIS_SEED to change)");
    let mut failed = Vec::new();
    for (who, key) in [("admin", &exchange.admin), ("non-admin", &exchange.alice)] {
        // One worker: with two threads, hypothesis' descriptions of lambdas call
        // `ast.parse` at once, and CPython 3.11 fails that now and then ("AST constructor
        // recursion depth mismatch"), an error of the tester, not of the API.
        let output = Command::new(&st)
            .args(["run", &url, "--max-examples", "25", "--workers", "1", "--seed", &seed, "--no-color"])
            .args([
                "--checks",
                "not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance",
            ])
            .arg("--tls-verify")
            .arg(&ca)
            .arg("--header")
            .arg(format!("Authorization: Bearer {key}"))
            .output()
            .expect("schemathesis runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        println!("--- schemathesis with the {who} key ---\n{stdout}");
        eprintln!("{}", String::from_utf8_lossy(&output.stderr));
        if !output.status.success() || !stdout.contains("passed") {
            failed.push(who);
        }
    }
    runtime.block_on(exchange.stop());
    assert!(failed.is_empty(), "schemathesis found failures with the {failed:?} key (see above)");
}

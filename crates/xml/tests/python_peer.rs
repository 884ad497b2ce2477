//! "A real peer no one here wrote": a client written from the spec with Python's
//! standard library only (sockets, `xml.etree.ElementTree` parsing every reply),
//! `tests/peer.py`, drives both listeners of a real node + gateway + XML front end.

mod support;

use support::Exchange2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_client_trades_through_both_framings() {
    let x = Exchange2::start().await;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/peer.py");
    let output = tokio::process::Command::new("python3")
        .arg(script)
        .arg(x.bare.addr().to_string())
        .arg(x.framed.addr().to_string())
        .output()
        .await
        .expect("python3 runs (it is on every machine this project builds on)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "peer.py failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("every check passed"), "{stdout}");
    x.stop().await;
}

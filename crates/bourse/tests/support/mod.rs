//! Shared helpers of the process-level tests: a `bourse serve` child process, the
//! market setup through Admin.Submit, and an independent replay of a node's journal.
//!
//! Every wait is bounded: a node that hangs, never prints its address or never exits
//! fails the test with its stderr instead of hanging CI. A [`NodeProcess`] dropped while
//! its child still runs (a failing test) kills the child, so no node outlives its test.
//!
//! Each test binary uses a different part of this module.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bourse_engine::command::{Command, CommandBody, MatchPolicy, SymbolSpec};
use bourse_engine::{codec, AccountId, Amount, Applied, AssetId, ClientId, Engine, Event, Px, Qty};
use bourse_journal::{Journal, JournalConfig, TailCut};
use bourse_protocol::proto;
use bourse_protocol::proto::admin_client::AdminClient;
use tonic::transport::Channel;

/// How long a node may take to print its address, or to exit once asked.
pub const PROCESS_WAIT_MAX: Duration = Duration::from_secs(30);
/// How long one RPC may take before the test calls the node hung.
pub const RPC_WAIT_MAX: Duration = Duration::from_secs(10);

/// The line `bourse serve` prints once it accepts connections.
const LISTENING_PREFIX: &str = "bourse node listening on ";

pub fn bourse_bin() -> &'static str {
    env!("CARGO_BIN_EXE_bourse")
}

/// The journal directory inside a node's data directory.
pub fn journal_dir(data: &Path) -> PathBuf {
    data.join("journal")
}

/// A `bourse serve` child process with its stderr collected in the background.
pub struct NodeProcess {
    child: Option<Child>,
    pub addr: SocketAddr,
    stderr: Arc<Mutex<String>>,
    /// Copies the child's stderr into `stderr`; done once the child has exited.
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    /// Every line the child printed on stdout so far.
    stdout: Arc<Mutex<Vec<String>>>,
}

/// A `bourse serve` that exited before it listened.
#[derive(Debug)]
pub struct StartFailure {
    pub status: ExitStatus,
    pub stderr: String,
}

/// A `bourse gateway run` child, killed when dropped, and the address it announced.
pub struct GatewayProcess {
    child: Child,
    /// The first word after `announce` on its stdout.
    pub addr: String,
    /// Its stdout so far.
    pub stdout: Arc<Mutex<Vec<String>>>,
}

impl GatewayProcess {
    /// Starts `bourse gateway run ARGS…` and waits for the stdout line that begins with
    /// `announce` (say "day-trading service on "); its stdout is echoed with a prefix.
    pub fn start<I, A>(args: I, announce: &'static str) -> GatewayProcess
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        GatewayProcess::spawn(&["gateway", "run"], args, announce)
    }

    /// Starts `bourse serve ARGS…` (secure by default: no `--plaintext` added), as
    /// [`GatewayProcess::start`] does `gateway run`.
    pub fn serve<I, A>(args: I, announce: &'static str) -> GatewayProcess
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        GatewayProcess::spawn(&["serve"], args, announce)
    }

    fn spawn<I, A>(command: &[&str], args: I, announce: &'static str) -> GatewayProcess
    where
        I: IntoIterator<Item = A>,
        A: AsRef<std::ffi::OsStr>,
    {
        let mut child = Process::new(bourse_bin())
            .args(command)
            .args(args)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn bourse gateway run");
        let stdout = child.stdout.take().expect("piped stdout");
        let (lines, addresses) = mpsc::channel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&seen);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                println!("gateway | {line}");
                kept.lock().expect("stdout lock").push(line.clone());
                if let Some(rest) = line.strip_prefix(announce) {
                    let _ = lines.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
                }
            }
        });
        let started = Instant::now();
        loop {
            if let Ok(addr) = addresses.recv_timeout(Duration::from_millis(20)) {
                return GatewayProcess { child, addr, stdout: seen };
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                panic!("bourse {command:?} exited with {status} before printing {announce:?}");
            }
            assert!(started.elapsed() < Duration::from_secs(60), "bourse {command:?} never printed {announce:?}");
        }
    }
}

impl GatewayProcess {
    /// The first word after `prefix` on a line it printed already.
    pub fn printed(&self, prefix: &str) -> Option<String> {
        let lines = self.stdout.lock().expect("stdout lock");
        lines
            .iter()
            .find_map(|line| line.strip_prefix(prefix).and_then(|rest| rest.split_whitespace().next()))
            .map(str::to_owned)
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl NodeProcess {
    /// Runs a CLI verb against this node with `--json` and returns its last line, which
    /// must say it succeeded.
    pub fn verb(&self, args: &[&str]) -> serde_json::Value {
        let addr = self.addr.to_string();
        let mut all = args.to_vec();
        all.extend(["--node", &addr, "--json"]);
        let finished = bourse_run(&all);
        assert!(finished.status.success(), "bourse {}: {}\n{}", args.join(" "), finished.stdout, finished.stderr);
        let last =
            finished.stdout.lines().last().unwrap_or_else(|| panic!("bourse {} printed nothing", args.join(" ")));
        serde_json::from_str(last).unwrap_or_else(|e| panic!("bourse {}: {e}: {last}", args.join(" ")))
    }

    /// Starts `bourse serve --data DATA --listen LISTEN ARGS…` and waits for its address.
    pub fn start(data: &Path, listen: SocketAddr, args: &[&str]) -> NodeProcess {
        match NodeProcess::try_start(data, listen, args) {
            Ok(node) => node,
            Err(failure) => panic!("bourse serve exited with {} before listening:\n{}", failure.status, failure.stderr),
        }
    }

    /// Like [`NodeProcess::start`], but a node that exits before listening is a value.
    pub fn try_start(data: &Path, listen: SocketAddr, args: &[&str]) -> Result<NodeProcess, StartFailure> {
        let mut child = Process::new(bourse_bin())
            .arg("serve")
            .arg("--data")
            .arg(data)
            .arg("--listen")
            .arg(listen.to_string())
            // These tests are about the node, not its TLS (tests/security.rs, pki_cli.rs).
            .arg("--plaintext")
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bourse serve");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stderr_pipe = child.stderr.take().expect("piped stderr");
        let stderr_sink = Arc::clone(&stderr);
        let stderr_reader = std::thread::spawn(move || drain(stderr_pipe, &stderr_sink));
        let (lines, addresses) = mpsc::channel();
        let stdout_pipe = child.stdout.take().expect("piped stdout");
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stdout_sink = Arc::clone(&stdout);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout_pipe).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix(LISTENING_PREFIX) {
                    let _ = lines.send(addr.trim().to_string());
                }
                stdout_sink.lock().expect("stdout lock").push(line);
            }
        });
        let mut node =
            NodeProcess { child: Some(child), addr: listen, stderr, stderr_reader: Some(stderr_reader), stdout };
        let started = Instant::now();
        loop {
            if let Ok(addr) = addresses.recv_timeout(Duration::from_millis(20)) {
                node.addr = addr.parse().expect("the node prints a socket address");
                return Ok(node);
            }
            if let Some(status) = node.child_mut().try_wait().expect("try_wait") {
                node.child = None;
                node.stderr_join();
                return Err(StartFailure { status, stderr: node.stderr() });
            }
            if started.elapsed() > PROCESS_WAIT_MAX {
                panic!("bourse serve did not listen within {PROCESS_WAIT_MAX:?}:\n{}", node.stderr());
            }
        }
    }

    /// The first word after `prefix` on a line the node printed (the address of a front
    /// end that starts after the node listens, say), waiting for the line.
    pub fn announced(&self, prefix: &str) -> String {
        let started = Instant::now();
        loop {
            let found = self.stdout.lock().expect("stdout lock").iter().find_map(|line| {
                line.strip_prefix(prefix).map(|rest| rest.split_whitespace().next().unwrap_or_default().to_owned())
            });
            if let Some(found) = found {
                return found;
            }
            assert!(started.elapsed() < PROCESS_WAIT_MAX, "bourse serve never printed {prefix:?}:\n{}", self.stderr());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    fn child_mut(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// Waits until the exited child's stderr is copied to its end.
    fn stderr_join(&mut self) {
        if let Some(reader) = self.stderr_reader.take() {
            reader.join().expect("stderr reader");
        }
    }

    /// Everything the node wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// SIGKILL: the process dies at once, with whatever it had not made durable.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().expect("SIGKILL");
        child.wait().expect("reap");
    }

    /// Sends SIGTERM: the node should finish, answer what it owes, and exit 0.
    pub fn term(&self) {
        let pid = self.pid();
        let sent = Process::new("kill").arg("-TERM").arg(pid.to_string()).status().expect("run kill");
        assert!(sent.success(), "kill -TERM {pid} failed");
    }

    /// Waits for the exit. Returns the status and the whole stderr.
    pub fn wait(mut self) -> (ExitStatus, String) {
        let status = wait_exit(self.child_mut(), "bourse serve");
        self.child = None;
        self.stderr_join();
        (status, self.stderr())
    }

    /// SIGTERM, then waits for the exit. Returns the status and the whole stderr.
    pub fn terminate(self) -> (ExitStatus, String) {
        self.term();
        self.wait()
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Copies a pipe into `sink` until it closes.
fn drain(mut pipe: impl Read, sink: &Mutex<String>) {
    let mut buffer = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut buffer) {
        if n == 0 {
            break;
        }
        sink.lock().expect("stderr lock").push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
}

/// Waits for a child to exit, killing it and failing the test past [`PROCESS_WAIT_MAX`].
fn wait_exit(child: &mut Child, what: &str) -> ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        if started.elapsed() > PROCESS_WAIT_MAX {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not exit within {PROCESS_WAIT_MAX:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What a finished `bourse` command printed.
pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `bourse ARGS…` to completion within [`PROCESS_WAIT_MAX`].
pub fn bourse_run(args: &[&str]) -> Finished {
    let mut child = Process::new(bourse_bin())
        .args(args)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn bourse");
    let (stdout, stderr) = (Arc::new(Mutex::new(String::new())), Arc::new(Mutex::new(String::new())));
    let stdout_pipe = child.stdout.take().expect("piped stdout");
    let stderr_pipe = child.stderr.take().expect("piped stderr");
    let (out_sink, err_sink) = (Arc::clone(&stdout), Arc::clone(&stderr));
    let readers = [
        std::thread::spawn(move || drain(stdout_pipe, &out_sink)),
        std::thread::spawn(move || drain(stderr_pipe, &err_sink)),
    ];
    let status = wait_exit(&mut child, &format!("bourse {}", args.join(" ")));
    for reader in readers {
        reader.join().expect("pipe reader");
    }
    let take = |text: &Mutex<String>| text.lock().expect("lock").clone();
    Finished { status, stdout: take(&stdout), stderr: take(&stderr) }
}

/// What `bourse replay DIR --json` says: the last index and the state hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplaySummary {
    pub index: u64,
    pub state_hash: String,
}

/// Runs `bourse replay DATA --json`: `Ok` with its summary, or `Err` with its stderr.
pub fn bourse_replay(data: &Path) -> Result<(ReplaySummary, String), Finished> {
    let finished = bourse_run(&["replay", data.to_str().expect("utf-8 path"), "--json"]);
    if !finished.status.success() {
        return Err(finished);
    }
    let last = finished.stdout.lines().last().unwrap_or_else(|| panic!("replay printed nothing:\n{}", finished.stderr));
    let json: serde_json::Value = serde_json::from_str(last).expect("the last line is JSON");
    let summary = ReplaySummary {
        index: json["index"].as_u64().expect("index"),
        state_hash: json["state_hash"].as_str().expect("state_hash").to_string(),
    };
    Ok((summary, finished.stderr))
}

/// Bounds an RPC or a stream read: a node that stops answering fails the test.
pub async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(RPC_WAIT_MAX, future).await {
        Ok(value) => value,
        Err(_) => panic!("{what}: no answer within {RPC_WAIT_MAX:?}"),
    }
}

pub async fn admin_connect(url: &str) -> AdminClient<Channel> {
    bounded("connect", AdminClient::connect(url.to_string())).await.expect("connect to the node")
}

/// One command through Admin.Submit.
pub async fn admin_submit(admin: &mut AdminClient<Channel>, client: u64, seq: u64, body: CommandBody) -> proto::Ack {
    let command = Command { client: ClientId(client), seq, ts: 0, body };
    bounded("Admin.Submit", admin.submit(proto::SubmitRequest::from(&command)))
        .await
        .unwrap_or_else(|status| panic!("Admin.Submit {command:?}: {status}"))
        .into_inner()
}

/// The id an accepted command created; panics on a rejection.
pub fn ok_id(ack: &proto::Ack) -> u64 {
    match ack.outcome {
        Some(proto::ack::Outcome::OkId(id)) => id,
        ref other => panic!("command refused: {other:?} (ack {ack:?})"),
    }
}

/// The market every test trades on: USD, ACME, ACME/USD and funded accounts.
#[derive(Clone, Debug)]
pub struct Market {
    pub usd: AssetId,
    pub acme: AssetId,
    pub symbol: u32,
    pub accounts: Vec<AccountId>,
    /// The admin client's next seq.
    pub admin_seq_next: u64,
}

/// The client id the setup commands use.
pub const ADMIN_CLIENT: u64 = 7;
/// Lowest and highest price of ACME/USD, in cents.
pub const PX_MIN: i64 = 1;
pub const PX_MAX: i64 = 1_000_000;

/// Creates the assets, the symbol and `accounts_len` accounts, each with plenty of both assets.
pub async fn market_setup(admin: &mut AdminClient<Channel>, accounts_len: usize) -> Market {
    let mut seq = 0;
    let mut next = || {
        seq += 1;
        seq
    };
    let usd = AssetId(ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), asset("USD", 2)).await) as u32);
    let acme = AssetId(ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), asset("ACME", 0)).await) as u32);
    let spec = SymbolSpec {
        name: "ACME/USD".into(),
        base: acme,
        quote: usd,
        tick: Px(1),
        lot: Qty(1),
        px_min: Px(PX_MIN),
        px_max: Px(PX_MAX),
        fee_maker: Amount(0),
        fee_taker: Amount(1),
        policy: MatchPolicy::Fifo,
    };
    let symbol = ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), CommandBody::CreateSymbol(Box::new(spec))).await);
    let mut accounts = Vec::new();
    for _ in 0..accounts_len {
        let account =
            AccountId(ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), CommandBody::CreateAccount).await) as u32);
        let deposit = CommandBody::Deposit { account, asset: usd, amount: Amount(1_000_000_000_000) };
        ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), deposit).await);
        let credit = CommandBody::Credit { account, asset: acme, amount: Amount(1_000_000_000) };
        ok_id(&admin_submit(admin, ADMIN_CLIENT, next(), credit).await);
        accounts.push(account);
    }
    Market { usd, acme, symbol: symbol as u32, accounts, admin_seq_next: next() }
}

fn asset(name: &str, decimals: u8) -> CommandBody {
    CommandBody::CreateAsset { name: name.into(), decimals }
}

/// One logged command as a fresh engine applied it.
#[derive(Clone, Debug)]
pub struct Replayed {
    pub command: Command,
    pub applied: Applied,
}

/// An independent replay of a journal: the engine after it and every record applied.
pub struct Replay {
    pub engine: Engine,
    /// The snapshot the replay started from (0: the log's start).
    pub snapshot_index: u64,
    /// By log index, every record after `snapshot_index`.
    pub records: BTreeMap<u64, Replayed>,
    pub index_last: u64,
    /// The torn tail recovery cut from the copy, if any.
    pub tail_cut: Option<TailCut>,
}

impl Replay {
    pub fn state_hash_hex(&self) -> String {
        bourse_engine::hex(&self.engine.state_hash())
    }
}

/// Replays the journal of `data` with a fresh engine, on a copy so the node's own files
/// stay untouched. Snapshots are ignored while the log still starts at index 1, so every
/// record is checked; a log pruned behind a snapshot starts from the oldest snapshot
/// the log still reaches back to. Stops after `index_max` records when given.
pub fn replay_journal(data: &Path, index_max: Option<u64>) -> Replay {
    let copy = tempfile::tempdir().expect("temp dir");
    let (log_first_index, snapshots) = journal_copy(&journal_dir(data), copy.path());
    let snapshot_index = if log_first_index <= 1 {
        0
    } else {
        // The oldest snapshot that still joins the log; the newer ones are removed so
        // that recovery starts from it.
        *snapshots
            .keys()
            .find(|&&index| index + 1 >= log_first_index)
            .unwrap_or_else(|| panic!("log starts at {log_first_index} but no snapshot reaches it: {snapshots:?}"))
    };
    for (&index, name) in &snapshots {
        if log_first_index <= 1 || index != snapshot_index {
            std::fs::remove_file(copy.path().join(name)).expect("remove snapshot from the copy");
        }
    }
    let (_journal, recovery) = Journal::open(copy.path(), JournalConfig::default()).expect("open the journal copy");
    let mut engine = match &recovery.snapshot {
        Some(snapshot) => {
            assert_eq!(snapshot.index, snapshot_index);
            Engine::restore(&snapshot.bytes).expect("snapshot restores")
        }
        None => Engine::default(),
    };
    let mut records = BTreeMap::new();
    let mut events: Vec<Event> = Vec::new();
    let mut index_last = snapshot_index;
    for entry in recovery.entries {
        let entry = entry.expect("journal entry reads back");
        if index_max.is_some_and(|max| entry.index > max) {
            break;
        }
        assert_eq!(entry.index, index_last + 1, "records are consecutive");
        let command = codec::decode(&entry.payload).expect("logged command decodes");
        assert_eq!(command.ts, entry.timestamp_ns, "record timestamp is the command's");
        events.clear();
        let applied = engine.apply(&command, &mut events);
        records.insert(entry.index, Replayed { command, applied });
        index_last = entry.index;
    }
    Replay { engine, snapshot_index, records, index_last, tail_cut: recovery.tail_cut }
}

/// Copies the segment and snapshot files of a journal; returns the first segment's first
/// index and the snapshots by index (file names).
fn journal_copy(from: &Path, to: &Path) -> (u64, BTreeMap<u64, String>) {
    let mut segment_first = u64::MAX;
    let mut snapshots = BTreeMap::new();
    for item in std::fs::read_dir(from).expect("list journal") {
        let item = item.expect("journal entry");
        let name = item.file_name().into_string().expect("utf-8 file name");
        if let Some(index) = name.strip_suffix(".log").and_then(|stem| stem.parse::<u64>().ok()) {
            segment_first = segment_first.min(index);
        } else if let Some(index) =
            name.strip_prefix("snapshot-").and_then(|rest| rest.strip_suffix(".snap")).and_then(|i| i.parse().ok())
        {
            snapshots.insert(index, name.clone());
        } else {
            continue;
        }
        std::fs::copy(item.path(), to.join(&name)).expect("copy journal file");
    }
    assert!(segment_first != u64::MAX, "no segment in {}", from.display());
    (segment_first, snapshots)
}

/// The segment files of a journal, oldest first.
pub fn segments(data: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(journal_dir(data))
        .expect("list journal")
        .map(|item| item.expect("journal entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "log"))
        .collect();
    files.sort();
    files
}

/// Copies a whole data directory (one level of subdirectories, as a node writes them).
pub fn data_copy(from: &Path, to: &Path) {
    for item in std::fs::read_dir(from).expect("list data dir") {
        let item = item.expect("data dir entry");
        let target = to.join(item.file_name());
        if item.file_type().expect("file type").is_dir() {
            std::fs::create_dir_all(&target).expect("create dir");
            data_copy(&item.path(), &target);
        } else {
            std::fs::copy(item.path(), &target).expect("copy file");
        }
    }
}

/// Runs `node web/e2e/SCRIPT ARGS…` against Debian's Chromium at `chromium`, calling
/// `tick` about every 100 ms while it runs (a test drains a child's output there), and
/// fails the test past `limit`. Returns its exit status and its report: the JSON object
/// on the last line of its stdout (progress goes to stderr, shown as it comes).
pub fn run_browser_script(
    script: &str,
    args: &[&std::ffi::OsStr],
    chromium: &Path,
    limit: Duration,
    mut tick: impl FnMut(),
) -> (ExitStatus, serde_json::Value) {
    let web = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../web");
    let mut browser = Process::new("node")
        .arg(format!("e2e/{script}"))
        .args(args)
        .current_dir(web)
        .env("BOURSE_CHROMIUM", chromium)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("running node e2e/{script}: {e}"));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = browser.try_wait().expect("waiting for the browser script") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = browser.kill();
            panic!("the browser script {script} ran for more than {} s", limit.as_secs());
        }
        tick();
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut output = String::new();
    browser.stdout.take().expect("its stdout").read_to_string(&mut output).expect("its output");
    let report: serde_json::Value = serde_json::from_str(output.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("the browser script's last line is not JSON ({e}): {output}"));
    println!("browser: {report}");
    (status, report)
}

/// One XML request on a length-prefixed connection (`--xml-framed`); the reply document.
pub fn xml_request(conn: &mut std::io::BufReader<std::net::TcpStream>, body: &str) -> String {
    use std::io::{BufRead, Read, Write};
    let stream = conn.get_mut();
    stream.write_all(format!("{}\n{body}", body.len()).as_bytes()).unwrap();
    let mut line = String::new();
    conn.read_line(&mut line).unwrap();
    let len: usize = line.trim().parse().unwrap_or_else(|_| panic!("a length line, got {line:?}"));
    let mut reply = vec![0; len];
    conn.read_exact(&mut reply).unwrap();
    String::from_utf8(reply).unwrap()
}

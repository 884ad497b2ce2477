//! A throwaway PostgreSQL server for tests and benchmarks: `initdb` into a temporary
//! directory, `postgres` on a free loopback port (for tests fsync off: the data is
//! thrown away; benchmarks keep the durable defaults), stopped and deleted on drop.
//!
//! The server binaries are looked for in `$BOURSE_PG_BIN`, then in
//! `/usr/lib/postgresql/<version>/bin` (Debian's `postgresql` package;
//! `scripts/deps/postgres.sh` installs it). PostgreSQL refuses to run as root, so under
//! root the server runs as the `postgres` user the package creates.
//!
//! [`TempPostgres::start_tls`] starts one with TLS on as well: a CA made with
//! `bourse-pki` in the temporary directory, a server certificate for `127.0.0.1` and
//! `localhost`, and a client certificate the server accepts ([`TempPostgres::tls`]).
//! Plaintext connections to it still work (its `pg_hba.conf` trusts both).
//!
//! Every connection here is opened through `store::pg_tls`, so a URL with
//! `sslmode=verify-full&sslrootcert=…` works with [`create_database`] and
//! [`drop_database`] too.
//!
//! Also [`entry_rows`], rows of made-up entries for the stores' own tests.

use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bourse_pki::{Ca, Identity, Role, TlsFiles};

use crate::store::pg_tls;

/// How long the server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running temporary server.
pub struct TempPostgres {
    dir: tempfile::TempDir,
    port: u16,
    child: Child,
    databases: std::sync::atomic::AtomicU32,
    /// With TLS on: the CA's certificate and a client's certificate and key.
    tls: Option<TlsFiles>,
}

fn bin_dir() -> io::Result<PathBuf> {
    if let Some(dir) = std::env::var_os("BOURSE_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .map(|dirs| {
            dirs.filter_map(|d| d.ok()).map(|d| d.path().join("bin")).filter(|b| b.join("initdb").exists()).collect()
        })
        .unwrap_or_default();
    found.sort();
    found.pop().ok_or_else(|| {
        io::Error::new(io::ErrorKind::NotFound, "no PostgreSQL server binaries (run scripts/deps/postgres.sh)")
    })
}

/// The uid and gid to run the server as: ours, or `postgres`'s when we are root.
fn run_as() -> io::Result<Option<(u32, u32)>> {
    let uid = rustix_uid();
    if uid != 0 {
        return Ok(None);
    }
    let passwd = std::fs::read_to_string("/etc/passwd")?;
    for line in passwd.lines() {
        let fields: Vec<&str> = line.split(':').collect();
        if fields.len() > 3 && fields[0] == "postgres" {
            let parse = |s: &str| s.parse::<u32>().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e));
            return Ok(Some((parse(fields[2])?, parse(fields[3])?)));
        }
    }
    Err(io::Error::new(io::ErrorKind::NotFound, "running as root and there is no postgres user to run the server as"))
}

/// The effective uid, from /proc (no libc call needed).
fn rustix_uid() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(2)?.parse().ok()))
        .unwrap_or(0)
}

fn command(bin: &Path, program: &str, user: Option<(u32, u32)>) -> Command {
    let mut command = Command::new(bin.join(program));
    if let Some((uid, gid)) = user {
        command.uid(uid).gid(gid);
    }
    command.env("LC_ALL", "C").env_remove("PGDATA");
    command
}

fn free_port() -> io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl TempPostgres {
    /// Creates and starts a server with fsync off (tests); returns once it accepts
    /// connections.
    pub fn start() -> io::Result<TempPostgres> {
        TempPostgres::start_with(false)
    }

    /// With `durable`, the server keeps PostgreSQL's defaults (fsync and synchronous
    /// commit on), as a production server would: what benchmarks measure.
    pub fn start_with(durable: bool) -> io::Result<TempPostgres> {
        TempPostgres::start_inner(durable, false)
    }

    /// A server (fsync off) with TLS on: its certificate, for `127.0.0.1` and
    /// `localhost`, is issued by a CA made for it in its directory (see [`tls`](Self::tls)
    /// for the files a client needs). Clients may present a certificate of that CA, and
    /// one that presents a certificate of another is refused; plaintext connections are
    /// accepted as by [`start`](Self::start).
    pub fn start_tls() -> io::Result<TempPostgres> {
        TempPostgres::start_inner(false, true)
    }

    fn start_inner(durable: bool, tls: bool) -> io::Result<TempPostgres> {
        let bin = bin_dir()?;
        let user = run_as()?;
        let dir = tempfile::Builder::new().prefix("bourse-pg-").tempdir()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let output = command(&bin, "initdb", user)
            .args(["-D"])
            .arg(&data)
            .args(["-U", "bourse", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C"])
            .output()?;
        if !output.status.success() {
            return Err(io::Error::other(format!("initdb failed: {}", String::from_utf8_lossy(&output.stderr))));
        }
        let (tls_args, tls) = if tls { server_tls(dir.path(), user)? } else { (Vec::new(), None) };
        let port = free_port()?;
        let log = std::fs::File::create(dir.path().join("server.log"))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(dir.path().join("server.log"), Some(uid), Some(gid))?;
        }
        let child = command(&bin, "postgres", user)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-h", "127.0.0.1", "-k"])
            .arg(dir.path())
            .args(if durable {
                ["-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on"]
            } else {
                ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"]
            })
            // WAL buffers of 64 MB rather than the default 4 MB (1/32 of shared_buffers),
            // as a server taking bulk COPY is set up: with the default, the backends write
            // and wait for WAL themselves every few megabytes (docs/BENCHMARKS.md).
            .args(["-c", "max_connections=50", "-c", "shared_buffers=128MB", "-c", "wal_buffers=64MB"])
            .args(&tls_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        let server = TempPostgres { dir, port, child, databases: Default::default(), tls };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> io::Result<()> {
        let started = Instant::now();
        loop {
            if pg_tls::connect(&self.url_of("postgres")).is_ok() {
                return Ok(());
            }
            if started.elapsed() > START_TIMEOUT {
                let log = std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default();
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("PostgreSQL did not start:\n{log}")));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn url_of(&self, database: &str) -> String {
        format!("postgres://bourse@127.0.0.1:{}/{database}", self.port)
    }

    /// The URL of the default database.
    pub fn url(&self) -> String {
        self.url_of("postgres")
    }

    /// Creates a new empty database and returns its URL (tests each take their own).
    pub fn database(&self) -> io::Result<String> {
        let n = self.databases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        create_database(&self.url(), &format!("history_{n}"))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// With TLS on ([`start_tls`](Self::start_tls)): `ca`, the CA's certificate to
    /// verify the server with (`sslrootcert`), and `cert` and `key`, a client
    /// certificate of that CA (`sslcert`, `sslkey`).
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    /// The postmaster's process id (benchmarks read the server's CPU time under /proc).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TempPostgres {
    fn drop(&mut self) {
        // Immediate shutdown (SIGQUIT): the postmaster stops its backends and exits; the
        // data directory is deleted next, so nothing needs a clean checkpoint.
        let stopped = Command::new("kill").args(["-QUIT", &self.child.id().to_string()]).status();
        if !stopped.is_ok_and(|s| s.success()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// Creates the database `name` on the server of `url` (a database to connect to, as a
/// user who may create databases) and returns the URL of the new one.
pub fn create_database(url: &str, name: &str) -> io::Result<String> {
    let mut client = pg_tls::connect(url).map_err(io::Error::other)?;
    client.batch_execute(&format!("CREATE DATABASE {name}")).map_err(io::Error::other)?;
    Ok(with_database(url, name))
}

/// Drops the database `name` on the server of `url`, closing its sessions.
pub fn drop_database(url: &str, name: &str) -> io::Result<()> {
    let mut client = pg_tls::connect(url).map_err(io::Error::other)?;
    client.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).map_err(io::Error::other)
}

/// Makes the server's TLS files in `dir`: a CA (`dir/ca`), the server's certificate
/// and key (`server.crt`, `server.key`, mode 0600, owned by the server's `user`, as
/// PostgreSQL insists), the CA's certificate for checking clients' (`root.crt`), and a
/// client certificate. Returns the server's `-c` options and the client's files.
fn server_tls(dir: &Path, user: Option<(u32, u32)>) -> io::Result<(Vec<String>, Option<TlsFiles>)> {
    use std::os::unix::fs::PermissionsExt;
    let ca = Ca::init(&dir.join("ca")).map_err(io::Error::other)?;
    let hosts = ["127.0.0.1".to_string(), "localhost".to_string()];
    // Clients check only the host names (SAN) of the server's certificate; the identity
    // a bourse-pki certificate carries as well is an observer's, which grants nothing.
    let server = Identity::new(Role::Observer, "postgres").map_err(io::Error::other)?;
    let issued = ca.issue(&server, &hosts, &dir.join("tls")).map_err(io::Error::other)?;
    let client = Identity::new(Role::Observer, "history").map_err(io::Error::other)?;
    let client = ca.issue(&client, &[], &dir.join("tls")).map_err(io::Error::other)?;
    let mut args = vec!["-c".to_string(), "ssl=on".to_string()];
    for (from, to, option, mode) in [
        (&issued.files.cert, "server.crt", "ssl_cert_file", 0o644),
        (&issued.files.key, "server.key", "ssl_key_file", 0o600),
        (&issued.files.ca, "root.crt", "ssl_ca_file", 0o644),
    ] {
        let to = dir.join(to);
        std::fs::copy(from, &to)?;
        std::fs::set_permissions(&to, std::fs::Permissions::from_mode(mode))?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&to, Some(uid), Some(gid))?;
        }
        args.extend(["-c".to_string(), format!("{option}={}", to.display())]);
    }
    Ok((args, Some(client.files)))
}

/// `postgres://user@host:port/db?options` with the database `name` instead of `db`.
fn with_database(url: &str, name: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let options = path.split_once('?').map_or(String::new(), |(_, options)| format!("?{options}"));
    format!("{scheme}://{authority}/{name}{options}")
}

/// Rows of entries `from..=to`, made up for the stores' tests: an order (order id the
/// log index; the first part in both backends), an order event (the first part in
/// SQLite, and in PostgreSQL one of the other three by its order id) and a balance
/// movement (SQLite's second part, and one of PostgreSQL's other three by its
/// account) each (`schema::Part`).
pub fn entry_rows(from: i64, to: i64) -> crate::rows::Rows {
    use crate::rows::{BalanceRow, OrderEventRow, OrderRow, RowKey, Rows};
    let mut rows = Rows::default();
    for log_index in from..=to {
        let key = |pos| RowKey { log_index, pos, ts: log_index * 1_000 };
        rows.orders.push(OrderRow {
            key: key(2),
            order_id: log_index,
            account: log_index % 3,
            symbol: 1,
            side: "buy",
            kind: "limit",
            px: Some(100),
            trigger_px: None,
            budget: None,
            qty: log_index,
            tif: "gtc",
            post_only: false,
            display_qty: None,
            stp: "none",
            client: 1,
            seq: log_index,
        });
        rows.order_events.push(OrderEventRow {
            key: key(0),
            // Order ids in different runs of 256: PostgreSQL's three other parts.
            order_id: (log_index % 5) * 256 + 1,
            event: "rested",
            px: Some(100),
            qty: Some(log_index),
            qty_remaining: None,
            reason: None,
        });
        rows.balances.push(BalanceRow {
            key: key(1),
            account: log_index % 3,
            asset: 1,
            delta_available: -1,
            delta_reserved: 1,
            available: 1_000 - log_index,
            reserved: log_index,
            cause: "accepted",
            order_id: Some((log_index % 5) * 256 + 1),
        });
    }
    rows
}

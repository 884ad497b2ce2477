//! How the history connects to PostgreSQL: over TLS with the server's certificate
//! verified (libpq's `sslmode=verify-full`), or in plaintext only to this machine.
//!
//! Every connection the crate makes to PostgreSQL goes through [`PgConnect`] (the
//! store's first and writer connections, `testing`'s helpers). It reads libpq's TLS
//! parameters from the URL's query itself — `tokio-postgres` knows neither
//! `verify-ca`/`verify-full` nor the file parameters — strips them, hands the rest of
//! the URL to `postgres::Config`, and builds a rustls client configuration (ring
//! provider, TLS 1.2 and 1.3) from the files they name:
//!
//! ```text
//! postgres://bourse@db.example:5432/history?sslmode=verify-full&sslrootcert=/etc/bourse/pg-ca.pem
//!     &sslcert=/etc/bourse/pg-client.pem&sslkey=/etc/bourse/pg-client.key   (the last two optional)
//! ```
//!
//! | `sslmode`          | loopback host or Unix socket          | any other host                        |
//! |--------------------|---------------------------------------|---------------------------------------|
//! | (none)             | plaintext; with `sslrootcert` or `sslcert`: as `verify-full` | `verify-full`  |
//! | `verify-full`      | TLS; chain checked against `sslrootcert`, and the host name against the certificate (Unix socket: refused) | same |
//! | `verify-ca`        | TLS; chain checked, host name not (Unix socket: refused) | same                    |
//! | `disable`          | plaintext                             | refused                               |
//! | `allow`, `prefer`, `require` | refused: they do not verify the server                      | refused  |
//!
//! "Loopback" is `localhost`, 127.0.0.0/8 or `::1`, judged on where the bytes go
//! (`hostaddr` when given, else `host`); with several hosts, every one must be. TLS
//! needs `sslrootcert=FILE` (PEM, one or more CA certificates): this build has no
//! system or bundled roots, so a TLS URL without it is refused before connecting.
//! `sslcert=FILE` with `sslkey=FILE` (PEM) present a client certificate, for servers
//! that authenticate by it (`hostssl … cert` in `pg_hba.conf`). With `hostaddr`, the
//! bytes go to that address and `verify-full` checks `host` against the certificate,
//! as libpq does.
//!
//! Errors name the parameter and the file; none carries the URL, so no password
//! reaches a message or a log.
//!
//! Not supported: `sslrootcert=system`, `sslcrl`, `sslpassword` (encrypted keys) and
//! libpq's check of the key file's permissions; TLS over a Unix socket (PostgreSQL
//! offers none).

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use postgres::config::{Host, SslMode};
use postgres::{Client, Config, NoTls};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{Result, StoreError};

/// What protects a connection, as chosen from the URL (see the module's table).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Plaintext, to a loopback host or a Unix socket only.
    Plaintext,
    /// TLS; the chain is verified, the host name is not (`sslmode=verify-ca`).
    VerifyCa,
    /// TLS; the chain and the host name are verified (`sslmode=verify-full`).
    VerifyFull,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Plaintext => "disable",
            Mode::VerifyCa => "verify-ca",
            Mode::VerifyFull => "verify-full",
        }
    }
}

/// A parsed PostgreSQL URL: the connection's configuration and its TLS, checked
/// against the rules of the module's table. Cheap to clone; each [`connect`](Self::connect)
/// opens a new connection.
#[derive(Clone)]
pub struct PgConnect {
    config: Config,
    mode: Mode,
    /// The `sslrootcert` file, for messages.
    root: Option<PathBuf>,
    /// The `sslcert` file, for messages.
    client_cert: Option<String>,
    tls: Option<MakeRustlsConnect>,
}

impl std::fmt::Debug for PgConnect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the config: it holds the password.
        f.debug_struct("PgConnect").field("hosts", &self.hosts()).field("mode", &self.mode).finish_non_exhaustive()
    }
}

/// The libpq TLS parameters read from a URL's query.
#[derive(Default, Debug)]
struct TlsParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
    sslcert: Option<String>,
    sslkey: Option<String>,
}

/// Opens a connection to the PostgreSQL `url` (see [`PgConnect::parse`]).
pub fn connect(url: &str) -> Result<Client> {
    PgConnect::parse(url)?.connect()
}

impl PgConnect {
    /// Reads `url` (`postgres://…` or `postgresql://…`), its TLS parameters and their
    /// files; refuses what the module's table refuses. Connects to nothing.
    pub fn parse(url: &str) -> Result<PgConnect> {
        let (stripped, params) = strip_tls_params(url)?;
        let mut config: Config = stripped.parse()?;
        let local = is_local(&config);
        let files_given = params.sslrootcert.is_some() || params.sslcert.is_some() || params.sslkey.is_some();
        let hosts = hosts_of(&config);
        let mode = match params.sslmode.as_deref() {
            None if local && !files_given => Mode::Plaintext,
            None | Some("verify-full") => Mode::VerifyFull,
            Some("verify-ca") => Mode::VerifyCa,
            Some("disable") if !local => {
                return Err(invalid(format!(
                    "sslmode=disable: plaintext to PostgreSQL is allowed only on this machine (a loopback \
                     host or a Unix socket), not to {hosts}; use sslmode=verify-full with sslrootcert=FILE"
                )))
            }
            Some("disable") if files_given => {
                return Err(invalid(
                    "sslmode=disable contradicts sslrootcert/sslcert/sslkey: drop them, or use sslmode=verify-full"
                        .to_string(),
                ))
            }
            Some("disable") => Mode::Plaintext,
            Some(weak @ ("allow" | "prefer" | "require")) => {
                return Err(invalid(format!(
                    "sslmode={weak} does not verify the PostgreSQL server's certificate (anyone on the path \
                     could pose as the server): use sslmode=verify-full with sslrootcert=FILE (the CA that \
                     issued the server's certificate)"
                )))
            }
            Some(other) => {
                return Err(invalid(format!(
                    "sslmode={other} is not a TLS mode this build knows: use verify-full (or verify-ca; or \
                     disable, for a loopback host only)"
                )))
            }
        };
        if mode == Mode::Plaintext {
            config.ssl_mode(SslMode::Disable);
            return Ok(PgConnect { config, mode, root: None, client_cert: None, tls: None });
        }
        if config.get_hosts().iter().any(|host| !matches!(host, Host::Tcp(_))) {
            return Err(invalid(format!(
                "sslmode={}: PostgreSQL offers no TLS over a Unix socket; connect to a TCP host, or leave \
                 sslmode out for the socket",
                mode.name()
            )));
        }
        if config.get_hosts().len() < config.get_hostaddrs().len() {
            return Err(invalid(format!(
                "sslmode={}: a host name is needed for each hostaddr, to verify the server's certificate against",
                mode.name()
            )));
        }
        let Some(root) = params.sslrootcert.map(PathBuf::from) else {
            return Err(invalid(format!(
                "sslmode={} to {hosts} needs sslrootcert=FILE: the PEM certificate of the CA that issued the \
                 server's certificate (this build trusts no system roots){}",
                mode.name(),
                if params.sslmode.is_none() {
                    " (TLS with verify-full is the default for a host that is not loopback)"
                } else {
                    ""
                },
            )));
        };
        let client_config = client_config(mode, &root, params.sslcert.as_deref(), params.sslkey.as_deref())?;
        config.ssl_mode(SslMode::Require);
        let tls = Some(MakeRustlsConnect::new(client_config));
        Ok(PgConnect { config, mode, root: Some(root), client_cert: params.sslcert, tls })
    }

    /// How the connections are protected.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Opens a new connection.
    pub fn connect(&self) -> Result<Client> {
        let connected = match &self.tls {
            Some(tls) => self.config.connect(tls.clone()),
            None => self.config.connect(NoTls),
        };
        connected.map_err(|e| self.connect_error(e))
    }

    /// The hosts (and addresses) of the URL, for messages: `localhost:5432`.
    fn hosts(&self) -> String {
        hosts_of(&self.config)
    }

    /// A failed handshake's rustls error, said with what was verified against what;
    /// any other error as it is.
    fn connect_error(&self, error: postgres::Error) -> StoreError {
        let Some(tls_error) = rustls_error(&error) else { return StoreError::Postgres(error) };
        let root = self.root.as_deref().map_or_else(String::new, |root| root.display().to_string());
        match tls_error {
            rustls::Error::InvalidCertificate(_) => invalid(format!(
                "PostgreSQL at {}: the server's certificate failed verification (sslmode={}, against the CA in \
                 sslrootcert={root}): {tls_error}",
                self.hosts(),
                self.mode.name()
            )),
            rustls::Error::AlertReceived(_) if self.client_cert.is_some() => invalid(format!(
                "PostgreSQL at {}: TLS handshake failed (sslmode={}, sslrootcert={root}): {tls_error} (did the \
                 server refuse the client certificate in sslcert={}?)",
                self.hosts(),
                self.mode.name(),
                self.client_cert.as_deref().unwrap_or_default()
            )),
            _ => invalid(format!(
                "PostgreSQL at {}: TLS handshake failed (sslmode={}, sslrootcert={root}): {tls_error}",
                self.hosts(),
                self.mode.name()
            )),
        }
    }
}

fn invalid(message: String) -> StoreError {
    StoreError::Invalid(message)
}

/// The URL without `sslmode`, `sslrootcert`, `sslcert` and `sslkey`, and their values
/// (percent-decoded). The query is found as `postgres::Config` finds it: the first `?`
/// after the credentials (which end at the first `@`).
fn strip_tls_params(url: &str) -> Result<(String, TlsParams)> {
    let Some(after_scheme) = url.strip_prefix("postgres://").or_else(|| url.strip_prefix("postgresql://")) else {
        return Err(invalid("a PostgreSQL URL starts with postgres:// or postgresql://".to_string()));
    };
    let authority_from = url.len() - after_scheme.len() + after_scheme.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[authority_from..].find('?').map(|q| authority_from + q) else {
        return Ok((url.to_string(), TlsParams::default()));
    };
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    for pair in url[question + 1..].split('&').filter(|pair| !pair.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let slot = match percent_decode(key, "a URL parameter's name")?.as_str() {
            "sslmode" => &mut params.sslmode,
            "sslrootcert" => &mut params.sslrootcert,
            "sslcert" => &mut params.sslcert,
            "sslkey" => &mut params.sslkey,
            _ => {
                kept.push(pair);
                continue;
            }
        };
        *slot = Some(percent_decode(value, key)?);
    }
    let mut stripped = url[..question].to_string();
    if !kept.is_empty() {
        stripped.push('?');
        stripped.push_str(&kept.join("&"));
    }
    Ok((stripped, params))
}

/// `%XX` escapes decoded; the result must be UTF-8.
fn percent_decode(s: &str, what: &str) -> Result<String> {
    let bad = || invalid(format!("{what}: a malformed %-escape or not UTF-8 in the URL"));
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3).ok_or_else(bad)?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

/// Whether every connection the config makes stays on this machine: to a Unix socket,
/// or to a loopback address or `localhost` (`hostaddr` decides where one goes when
/// given). A URL with no host at all is local: it connects nowhere.
fn is_local(config: &Config) -> bool {
    let (hosts, addrs) = (config.get_hosts(), config.get_hostaddrs());
    (0..hosts.len().max(addrs.len())).all(|i| match (addrs.get(i), hosts.get(i)) {
        (Some(addr), _) => is_loopback(addr),
        (None, Some(Host::Unix(_))) => true,
        (None, Some(Host::Tcp(name))) => {
            let name = name.trim_start_matches('[').trim_end_matches(']');
            name.eq_ignore_ascii_case("localhost") || name.parse::<IpAddr>().is_ok_and(|addr| is_loopback(&addr))
        }
        (None, None) => false,
    })
}

/// 127.0.0.0/8, `::1` and `::ffff:127.x.y.z`.
fn is_loopback(addr: &IpAddr) -> bool {
    addr.to_canonical().is_loopback()
}

/// `host:port` of each host (its `hostaddr` in brackets), comma separated, for messages.
fn hosts_of(config: &Config) -> String {
    let (hosts, addrs, ports) = (config.get_hosts(), config.get_hostaddrs(), config.get_ports());
    let described: Vec<String> = (0..hosts.len().max(addrs.len()))
        .map(|i| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            let host = match hosts.get(i) {
                Some(Host::Tcp(name)) => format!("{name}:{port}"),
                Some(Host::Unix(dir)) => format!("the Unix socket in {}", dir.display()),
                None => String::new(),
            };
            match addrs.get(i) {
                Some(addr) if host.is_empty() => format!("{addr}:{port}"),
                Some(addr) => format!("{host} (hostaddr {addr})"),
                None => host,
            }
        })
        .collect();
    if described.is_empty() {
        "no host".to_string()
    } else {
        described.join(", ")
    }
}

/// The crypto provider of every configuration: ring, as `bourse-pki`'s.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The client configuration of `mode` (a TLS one): trusting the certificates in `root`,
/// presenting `cert` with `key` when given.
fn client_config(mode: Mode, root: &Path, cert: Option<&str>, key: Option<&str>) -> Result<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for certificate in read_certificates(root, "sslrootcert")? {
        roots
            .add(certificate)
            .map_err(|e| invalid(format!("sslrootcert={}: not a usable CA certificate: {e}", root.display())))?;
    }
    let provider = provider();
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| invalid(format!("sslrootcert={}: {e}", root.display())))?;
    let verifier: Arc<dyn ServerCertVerifier> = match mode {
        Mode::VerifyCa => Arc::new(ChainOnly(webpki)),
        _ => webpki,
    };
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid(format!("TLS: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    match (cert, key) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(_), None) => Err(invalid("sslcert is given without sslkey=FILE (its private key, PEM)".to_string())),
        (None, Some(_)) => Err(invalid("sslkey is given without sslcert=FILE (its certificate, PEM)".to_string())),
        (Some(cert), Some(key)) => {
            let chain = read_certificates(Path::new(cert), "sslcert")?;
            let key_der = PrivateKeyDer::from_pem_file(key)
                .map_err(|e| invalid(format!("sslkey={key}: cannot read a PEM private key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| invalid(format!("sslcert={cert} with sslkey={key}: {e}")))
        }
    }
}

/// The PEM certificates in `path` (at least one), for the parameter `what`.
fn read_certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let cannot =
        |e: &dyn std::fmt::Display| invalid(format!("{what}={}: cannot read PEM certificates: {e}", path.display()));
    let certificates = CertificateDer::pem_file_iter(path)
        .map_err(|e| cannot(&e))?
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| cannot(&e))?;
    if certificates.is_empty() {
        return Err(invalid(format!("{what}={}: holds no PEM certificate", path.display())));
    }
    Ok(certificates)
}

/// The rustls error under a connection's error, if the TLS handshake failed: it sits in
/// an `io::Error` (tokio-rustls), whose `source` skips it, hence the `get_ref`.
fn rustls_error(error: &postgres::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = next {
        if let Some(found) = current.downcast_ref::<rustls::Error>() {
            return Some(found);
        }
        if let Some(found) = current
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(found);
        }
        next = current.source();
    }
    None
}

/// `sslmode=verify-ca`: the chain is verified as by `verify-full` (the webpki
/// verifier), and only its verdict that the certificate does not name the host is
/// overruled (rustls checks the name last, after the chain, its validity and its
/// usage, so nothing else is skipped). The handshake's signatures are verified as usual.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            verdict => verdict,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[rustls::DistinguishedName]> {
        self.0.root_hint_subjects()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(url: &str) -> String {
        match PgConnect::parse(url) {
            Ok(connect) => panic!("{url} was accepted as {connect:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn loopback_and_sockets_default_to_plaintext() {
        for url in [
            "postgres://bourse@127.0.0.1:5432/history",
            "postgres://bourse@127.3.2.1/history",
            "postgresql://bourse:secret@localhost/history",
            "postgres://bourse@LOCALHOST:5433/history?connect_timeout=5",
            "postgres://bourse@[::1]:5432/history",
            "postgres://bourse@/history?host=/var/run/postgresql",
            "postgres://bourse@127.0.0.1,localhost/history",
            "postgres://bourse@db.example/history?hostaddr=127.0.0.1",
            "postgres://bourse@127.0.0.1/history?sslmode=disable",
        ] {
            let connect = PgConnect::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(connect.mode(), Mode::Plaintext, "{url}");
        }
    }

    #[test]
    fn a_host_that_is_not_loopback_needs_a_root_and_no_plaintext() {
        // No sslmode: verify-full, which needs the CA to verify against.
        let error = refused("postgres://bourse:hunter2@db.example:5432/history");
        assert!(error.contains("sslrootcert=FILE") && error.contains("db.example:5432"), "{error}");
        assert!(!error.contains("hunter2"), "the password leaked: {error}");
        // Explicit plaintext to another machine.
        for url in [
            "postgres://bourse:hunter2@db.example/history?sslmode=disable",
            "postgres://bourse@10.0.0.5/history?sslmode=disable",
            "postgres://bourse@127.0.0.1,db.example/history?sslmode=disable",
            "postgres://bourse@localhost/history?hostaddr=192.0.2.1&sslmode=disable",
        ] {
            let error = refused(url);
            assert!(error.contains("sslmode=disable") && error.contains("only on this machine"), "{url}: {error}");
            assert!(!error.contains("hunter2"), "the password leaked: {error}");
        }
        // One host that is not loopback among loopback ones is enough to need TLS.
        assert!(refused("postgres://bourse@127.0.0.1,db.example/h").contains("sslrootcert=FILE"));
    }

    #[test]
    fn modes_that_do_not_verify_are_refused() {
        for mode in ["require", "prefer", "allow"] {
            for host in ["127.0.0.1", "db.example"] {
                let error = refused(&format!("postgres://bourse@{host}/history?sslmode={mode}"));
                assert!(error.contains(&format!("sslmode={mode} does not verify")), "{error}");
                assert!(error.contains("sslmode=verify-full"), "{error}");
            }
        }
        assert!(refused("postgres://bourse@db.example/h?sslmode=verify_full").contains("not a TLS mode"));
    }

    #[test]
    fn tls_parameters_are_checked_before_connecting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.pem");
        let error =
            refused(&format!("postgres://bourse@db.example/h?sslmode=verify-full&sslrootcert={}", missing.display()));
        assert!(error.contains("sslrootcert=") && error.contains("missing.pem"), "{error}");
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let error = refused(&format!("postgres://bourse@db.example/h?sslrootcert={}", empty.display()));
        assert!(error.contains("holds no PEM certificate"), "{error}");
        // TLS over a Unix socket, and contradictions.
        assert!(refused("postgres://bourse@/h?host=/tmp&sslmode=verify-full").contains("Unix socket"));
        assert!(refused("postgres://bourse@127.0.0.1/h?sslmode=disable&sslrootcert=/x.pem").contains("contradicts"));
        assert!(refused("postgres://bourse@db.example/h?hostaddr=192.0.2.1,192.0.2.2&sslrootcert=/x.pem")
            .contains("a host name is needed for each hostaddr"));
        assert!(refused("mysql://db.example/h").contains("postgres://"));
    }

    #[test]
    fn a_root_and_client_files_make_a_tls_config() {
        let dir = tempfile::tempdir().unwrap();
        let ca = bourse_pki::Ca::init(&dir.path().join("ca")).unwrap();
        let identity = bourse_pki::Identity::new(bourse_pki::Role::Observer, "history").unwrap();
        let issued = ca.issue(&identity, &[], &dir.path().join("out")).unwrap();
        let root = issued.files.ca.display().to_string();
        let connect = PgConnect::parse(&format!("postgres://bourse@db.example/h?sslrootcert={root}")).unwrap();
        assert_eq!(connect.mode(), Mode::VerifyFull, "no sslmode: verify-full");
        // A root on a loopback host asks for TLS too.
        let connect = PgConnect::parse(&format!("postgres://bourse@127.0.0.1/h?sslrootcert={root}")).unwrap();
        assert_eq!(connect.mode(), Mode::VerifyFull);
        let (cert, key) = (issued.files.cert.display(), issued.files.key.display());
        let url = format!(
            "postgres://bourse@db.example/h?connect_timeout=3&sslmode=verify-ca&sslrootcert={root}&sslcert={cert}&sslkey={key}"
        );
        assert_eq!(PgConnect::parse(&url).unwrap().mode(), Mode::VerifyCa);
        // A key alone, or a certificate that is no key.
        let error = refused(&format!("postgres://bourse@db.example/h?sslrootcert={root}&sslkey={key}"));
        assert!(error.contains("sslkey is given without sslcert"), "{error}");
        let error = refused(&format!("postgres://bourse@db.example/h?sslrootcert={root}&sslcert={cert}&sslkey={cert}"));
        assert!(error.contains("sslkey=") && error.contains("private key"), "{error}");
    }

    #[test]
    fn the_tls_parameters_are_stripped_and_the_rest_kept() {
        let (stripped, params) = strip_tls_params(
            "postgres://u:p%3Fq@h:1/db?connect_timeout=5&sslmode=verify-full&sslrootcert=%2Fa%20b%2Fca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(stripped, "postgres://u:p%3Fq@h:1/db?connect_timeout=5&application_name=x");
        assert_eq!(params.sslmode.as_deref(), Some("verify-full"));
        assert_eq!(params.sslrootcert.as_deref(), Some("/a b/ca.pem"));
        let (stripped, _) = strip_tls_params("postgres://h/db?sslmode=disable").unwrap();
        assert_eq!(stripped, "postgres://h/db");
        // A '?' in the password is not the query.
        let (stripped, params) = strip_tls_params("postgres://u:a?b@h/db?sslmode=verify-ca").unwrap();
        assert_eq!((stripped.as_str(), params.sslmode.as_deref()), ("postgres://u:a?b@h/db", Some("verify-ca")));
        assert!(strip_tls_params("postgres://h/db?sslrootcert=%zz").is_err());
    }
}

//! TLS for the client-facing listeners of `bourse gateway run` (HTTPS and WSS, FIX over
//! TLS, the XML protocol's TLS ports), and the rule that plaintext listeners bind
//! loopback unless the operator says `--allow-plaintext`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use bourse_pki::{EdgeFiles, EdgeTls, Identity};
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct EdgeArgs {
    /// The certificate (PEM, leaf first) that the client ports present: the gateway's
    /// gRPC port, --http (HTTPS and WSS), --fix and the XML TLS ports. Default with the
    /// cluster's CA (--pki; `serve`: its own): the gateway's certificate, if issued with the hosts clients dial
    /// (`bourse pki issue --role gateway --id N --host …`); clients then trust the CA's
    /// ca.pem (`bourse --ca FILE`, or `--pki DIR`).
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Serve plaintext client listeners on addresses other than loopback. API keys and
    /// FIX passwords then cross the network in clear text: only behind a TLS proxy or on
    /// a network nobody else reaches.
    #[arg(long)]
    allow_plaintext: bool,
}

/// The limits of the REST and FIX listeners (`bourse gateway run`).
#[derive(Args, Debug, Clone)]
pub struct EdgeLimits {
    /// REST and FIX listeners: connections served at once; more wait in the kernel's
    /// backlog.
    #[arg(long, value_name = "N", default_value_t = bourse_port::ListenerLimits::DEFAULT.connections_max)]
    edge_connections_max: usize,
    /// REST and FIX listeners: connections one API key holds at once (counted from the
    /// request or Logon that names it); past it a REST request is answered 429
    /// `too_many_connections` and a Logon refused, and the connection closed.
    #[arg(long, value_name = "N", default_value_t = bourse_port::ListenerLimits::DEFAULT.connections_per_key_max)]
    edge_connections_per_key_max: usize,
    /// REST and FIX listeners: the time for the TLS handshake and then for the first
    /// request (REST: each request's headers; FIX: the whole Logon), in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    edge_first_request_timeout_ms: u64,
    /// REST listener: the most a connection may go without a byte either way, in
    /// milliseconds (FIX sessions are held to their heartbeats).
    #[arg(long, value_name = "MS", default_value_t = 300_000)]
    edge_idle_timeout_ms: u64,
    /// REST listener: the largest request body, in bytes (default 2 MiB; FIX messages
    /// are bounded by the codec, 64 KiB).
    #[arg(long, value_name = "BYTES")]
    edge_request_bytes_max: Option<usize>,
}

impl EdgeLimits {
    /// `base` (a front end's defaults) with these limits, checked.
    pub fn apply(&self, base: bourse_port::ListenerLimits) -> Result<bourse_port::ListenerLimits, String> {
        let limits = bourse_port::ListenerLimits {
            connections_max: self.edge_connections_max,
            connections_per_key_max: self.edge_connections_per_key_max,
            first_request_timeout: std::time::Duration::from_millis(self.edge_first_request_timeout_ms),
            idle_timeout: std::time::Duration::from_millis(self.edge_idle_timeout_ms),
            request_bytes_max: self.edge_request_bytes_max.unwrap_or(base.request_bytes_max),
            ..base
        };
        limits.validate().map_err(|e| format!("--edge-{}", e.replace('_', "-")))?;
        Ok(limits)
    }
}

/// A client-facing listener, for the plaintext rule.
pub struct Listen {
    pub flag: &'static str,
    pub addr: Option<SocketAddr>,
    /// Whether it serves TLS when the gateway has a certificate.
    pub tls_capable: bool,
}

impl EdgeArgs {
    /// The certificate the listeners present: `--tls-cert`, else `identity`'s from the
    /// CA in `pki` when it names hosts (one that names none could not be verified by any
    /// client: the listeners then serve plaintext, so loopback only, and a note says
    /// so), else none.
    pub fn load(&self, pki: Option<(&Path, &Identity)>) -> Result<Option<EdgeTls>, String> {
        let files = match (&self.tls_cert, &self.tls_key, pki) {
            (Some(cert), Some(key), _) => EdgeFiles { cert: cert.clone(), key: key.clone() },
            (_, _, Some((dir, identity))) => {
                let files = EdgeFiles::issued(dir, identity);
                let hosts = bourse_pki::certificate_hosts(&files.cert).map_err(|e| format!("--pki: {e}"))?;
                if hosts.is_empty() {
                    eprintln!(
                        "bourse: note: {identity}'s certificate ({}) names no host, so the client listeners serve \
                         plaintext (loopback only); to serve TLS, issue it with the hosts clients dial \
                         (`bourse pki issue --dir {} --role {} --id {} --host NAME`) or give --tls-cert/--tls-key",
                        files.cert.display(),
                        dir.display(),
                        identity.role.as_str(),
                        identity.id,
                    );
                    return Ok(None);
                }
                files
            }
            _ => return Ok(None),
        };
        let shown = files.cert.display().to_string();
        EdgeTls::load(files).map(Some).map_err(|e| format!("the client listeners' certificate {shown}: {e}"))
    }

    /// Refuses a listener that would serve plaintext on an address other than loopback,
    /// unless `--allow-plaintext`.
    pub fn check_plaintext(&self, tls: bool, listens: impl IntoIterator<Item = Listen>) -> Result<(), String> {
        if self.allow_plaintext {
            return Ok(());
        }
        let plaintext = listens.into_iter().filter(|listen| !(tls && listen.tls_capable));
        let Some(listen) = plaintext.into_iter().find(|l| l.addr.is_some_and(|addr| !addr.ip().is_loopback())) else {
            return Ok(());
        };
        let addr = listen.addr.expect("found by its address");
        let how = if listen.tls_capable {
            "give --tls-cert and --tls-key (or --pki with a gateway certificate naming its hosts) to serve TLS"
        } else {
            "it has no TLS of its own yet: keep it on loopback, behind a TLS proxy"
        };
        Err(format!(
            "{} {addr}: a plaintext listener binds loopback only, since API keys would cross the network in \
             clear text; {how}, or give --allow-plaintext",
            listen.flag
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(allow_plaintext: bool) -> EdgeArgs {
        EdgeArgs { tls_cert: None, tls_key: None, allow_plaintext }
    }

    fn listen(flag: &'static str, addr: &str, tls_capable: bool) -> Listen {
        Listen { flag, addr: Some(addr.parse().unwrap()), tls_capable }
    }

    #[test]
    fn plaintext_binds_loopback_unless_allowed() {
        let http = |addr| listen("--http", addr, true);
        assert!(args(false).check_plaintext(false, [http("127.0.0.1:1")]).is_ok());
        assert!(args(false).check_plaintext(false, [http("[::1]:1")]).is_ok());
        let refused = args(false).check_plaintext(false, [http("0.0.0.0:1")]).unwrap_err();
        assert!(refused.contains("--http 0.0.0.0:1") && refused.contains("--allow-plaintext"), "{refused}");
        assert!(args(false).check_plaintext(true, [http("0.0.0.0:1")]).is_ok(), "TLS may bind anywhere");
        assert!(args(true).check_plaintext(false, [http("0.0.0.0:1")]).is_ok());
        let day_trading = listen("--day-trading", "10.0.0.1:1", false);
        let refused = args(false).check_plaintext(true, [day_trading]).unwrap_err();
        assert!(refused.contains("--day-trading 10.0.0.1:1") && refused.contains("no TLS"), "{refused}");
    }
}

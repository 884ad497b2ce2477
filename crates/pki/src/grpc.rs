//! Mutual TLS under tonic: the incoming connections of a gRPC server, each with the
//! identity its peer's certificate names, and the connector a gRPC client dials with.
//!
//! tonic's own TLS takes a fixed configuration; these take a [`Reloadable`] one, so a
//! new CRL or a renewed certificate applies to the next handshake without a restart,
//! and a reload ends the connections made before it (each [`Conn`] watches the reload
//! count), so a revoked peer's open connections do not outlive its revocation: the
//! others reconnect within a round trip, through a new handshake.
//!
//! Server: [`incoming`] accepts on a listener, runs each handshake in a task of its own
//! (bounded by [`HANDSHAKE_MAX`], so a peer that connects and stalls holds nothing) and
//! yields the connections that completed it; hand the stream to
//! `Server::serve_with_incoming_shutdown`. Every request then carries a [`PeerInfo`] in
//! its extensions (tonic's `Connected`): the peer's address and, with TLS, its
//! [`Identity`]. Without TLS (a loopback benchmark) the identity is `None`.
//!
//! Client: [`Connector`] is a `tower::Service<Uri>` for
//! `Endpoint::connect_with_connector`: it dials the URI's host and port, verifies the
//! server's certificate against the CA and CRL and its name against the host dialed,
//! presents its own certificate, and checks the server names the role it expects.
//!
//! Both speak HTTP/2 after TLS and announce it with ALPN `h2`, as gRPC requires.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::tls::{client_config, server_config, Reloadable, TlsFiles};
use crate::{peer_identity, Alpn, EdgeTls, Identity, PkiError, Role};

/// How long a TLS handshake may take before the connection is dropped.
pub const HANDSHAKE_MAX: Duration = Duration::from_secs(5);

/// Connections that finished their handshake and wait for the server to take them.
const ACCEPTED_QUEUE: usize = 128;

/// A server configuration for gRPC: [`server_config`] with ALPN `h2`.
pub fn grpc_server_config(files: &TlsFiles) -> Result<Arc<ServerConfig>, PkiError> {
    let mut config = Arc::unwrap_or_clone(server_config(files)?);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration for gRPC: [`client_config`] with ALPN `h2`.
pub fn grpc_client_config(files: &TlsFiles) -> Result<Arc<ClientConfig>, PkiError> {
    let mut config = Arc::unwrap_or_clone(client_config(files)?);
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

impl Reloadable<ServerConfig> {
    /// [`grpc_server_config`], reloadable.
    pub fn grpc_server(files: TlsFiles) -> Result<Reloadable<ServerConfig>, PkiError> {
        Reloadable::new(files, grpc_server_config)
    }
}

impl Reloadable<ClientConfig> {
    /// [`grpc_client_config`], reloadable.
    pub fn grpc_client(files: TlsFiles) -> Result<Reloadable<ClientConfig>, PkiError> {
        Reloadable::new(files, grpc_client_config)
    }
}

/// Who is at the other end of a connection: a request's extension on the server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerInfo {
    pub remote: Option<SocketAddr>,
    /// From the peer's verified certificate; `None` on a plaintext connection.
    pub identity: Option<Identity>,
}

/// A server's TLS: the configuration the next handshake uses, and the reload count
/// (a connection accepted under an older count is ended).
#[derive(Clone)]
pub struct ServerTls {
    pub config: Arc<Reloadable<ServerConfig>>,
    pub reloads: watch::Receiver<u64>,
}

/// An accepted connection, plaintext or TLS, with its peer.
pub struct Conn {
    io: Io,
    peer: PeerInfo,
    /// Resolves at the next reload of the server's TLS: the connection then fails.
    reloaded: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
    /// Set when `reloaded` resolved.
    ended: bool,
}

enum Io {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl Conn {
    pub fn peer(&self) -> &PeerInfo {
        &self.peer
    }

    /// An error once the server's TLS was reloaded after this connection was made (and
    /// on every call after: the finished future is dropped, never polled again).
    fn check_reload(&mut self, cx: &mut Context<'_>) -> Result<(), io::Error> {
        if let Some(reloaded) = self.reloaded.as_mut() {
            if reloaded.as_mut().poll(cx).is_ready() {
                self.reloaded = None;
                self.ended = true;
            }
        }
        if self.ended {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the certificates were reloaded: connect again through a new handshake",
            ));
        }
        Ok(())
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.peer.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_reload(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check_reload(cx) {
            return Poll::Ready(Err(e));
        }
        match &mut this.io {
            Io::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Fires when `reloads` moves past the value it holds now; never if its sender goes.
fn next_reload(mut reloads: watch::Receiver<u64>) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
    reloads.borrow_and_update();
    Box::pin(async move {
        if reloads.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    })
}

/// Counts of what [`incoming`] refused, for a server's metrics.
#[derive(Debug, Default)]
pub struct AcceptStats {
    /// Handshakes that failed or timed out (no certificate, another CA's, a revoked one).
    pub handshakes_failed: std::sync::atomic::AtomicU64,
}

/// The connections accepted on `listener`: with `tls`, those whose mutual TLS handshake
/// succeeded (the others are logged, counted in `stats`, and dropped); without, every
/// one. Every connection has TCP_NODELAY (an ack batch must not wait for the peer's
/// delayed ACK). The stream ends when `listener` fails for good or the receiver goes.
pub fn incoming(
    listener: TcpListener,
    tls: Option<ServerTls>,
    stats: Arc<AcceptStats>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Conn>> {
    accept(listener, tls.map(Handshake::Mutual), stats)
}

/// The connections accepted on a client-facing listener: with `tls`, those whose
/// handshake (server certificate only: clients prove themselves with an API key)
/// succeeded within [`HANDSHAKE_MAX`]; without, every one. Their [`PeerInfo`] names no
/// identity.
pub fn incoming_edge(
    listener: TcpListener,
    tls: Option<EdgeTls>,
    stats: Arc<AcceptStats>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Conn>> {
    accept(listener, tls.map(Handshake::Edge), stats)
}

/// The TLS a listener's connections go through.
#[derive(Clone)]
enum Handshake {
    Mutual(ServerTls),
    Edge(EdgeTls),
}

fn accept(
    listener: TcpListener,
    tls: Option<Handshake>,
    stats: Arc<AcceptStats>,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<Conn>> {
    let (accepted, stream) = mpsc::channel(ACCEPTED_QUEUE);
    tokio::spawn(async move {
        loop {
            let (tcp, remote) = tokio::select! {
                result = listener.accept() => match result {
                    Ok(pair) => pair,
                    Err(error) => {
                        // Out of descriptors and the like: pause rather than spin.
                        tracing::warn!(%error, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = accepted.closed() => return,
            };
            let _ = tcp.set_nodelay(true);
            let Some(tls) = tls.clone() else {
                let conn = Conn {
                    io: Io::Plain(tcp),
                    peer: PeerInfo { remote: Some(remote), identity: None },
                    reloaded: None,
                    ended: false,
                };
                if accepted.send(Ok(conn)).await.is_err() {
                    return;
                }
                continue;
            };
            let (accepted, stats) = (accepted.clone(), Arc::clone(&stats));
            tokio::spawn(async move {
                let refused = match handshake(tls, tcp, remote).await {
                    Ok(conn) => {
                        let _ = accepted.send(Ok(conn)).await;
                        return;
                    }
                    Err(refused) => refused,
                };
                stats.handshakes_failed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                tracing::info!(%remote, %refused, "gRPC connection refused");
            });
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(stream)
}

/// One connection's handshake, within [`HANDSHAKE_MAX`]: the connection, or why not.
async fn handshake(tls: Handshake, tcp: TcpStream, remote: SocketAddr) -> Result<Conn, String> {
    let (config, reloaded) = match &tls {
        Handshake::Mutual(tls) => (tls.config.current(), Some(next_reload(tls.reloads.clone()))),
        Handshake::Edge(tls) => (tls.config(Alpn::H2), None),
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    let stream = match tokio::time::timeout(HANDSHAKE_MAX, acceptor.accept(tcp)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(error)) => return Err(format!("TLS handshake: {error}")),
        Err(_) => return Err(format!("no TLS handshake within {HANDSHAKE_MAX:?}")),
    };
    let identity = match tls {
        Handshake::Mutual(_) => {
            Some(peer_identity(stream.get_ref().1).ok_or("the client's certificate names no identity")?)
        }
        Handshake::Edge(_) => None,
    };
    let peer = PeerInfo { remote: Some(remote), identity };
    Ok(Conn { io: Io::Tls(Box::new(stream)), peer, reloaded, ended: false })
}

/// Dials gRPC servers over TLS, for `Endpoint::connect_with_connector` (give the
/// endpoint an `http://host:port` URI: the TLS is this connector's): over mutual TLS
/// to the cluster's members ([`Connector::issued`]), or trusting a CA only, without a
/// certificate of its own, to a gateway's client port ([`Connector::trusting`]).
#[derive(Clone)]
pub struct Connector {
    dial: Dial,
    /// The role the server's certificate must name (mutual TLS only).
    expect: Option<Role>,
}

#[derive(Clone)]
enum Dial {
    Mutual(Arc<Reloadable<ClientConfig>>),
    Trusting { config: Arc<ClientConfig>, ca: std::path::PathBuf },
}

impl Connector {
    pub fn new(config: Arc<Reloadable<ClientConfig>>, expect: Role) -> Connector {
        Connector { dial: Dial::Mutual(config), expect: Some(expect) }
    }

    /// A connector with the certificate `bourse pki` issued to `identity` in the CA
    /// directory `dir`, dialing servers of role `expect`.
    pub fn issued(dir: &std::path::Path, identity: &Identity, expect: Role) -> Result<Connector, PkiError> {
        let config = Reloadable::grpc_client(TlsFiles::issued(dir, identity))?;
        Ok(Connector::new(Arc::new(config), expect))
    }

    /// A connector that presents no certificate and accepts a server whose certificate
    /// chains to a CA certificate in the PEM file `ca` and names the host dialed: a
    /// gateway's client port, where the API key says who the client is.
    pub fn trusting(ca: &std::path::Path) -> Result<Connector, PkiError> {
        let mut roots = rustls::RootCertStore::empty();
        use rustls::pki_types::pem::PemObject;
        let certs = rustls::pki_types::CertificateDer::pem_file_iter(ca)
            .and_then(|iter| iter.collect::<Result<Vec<_>, _>>())
            .map_err(|source| PkiError::Pem { path: ca.to_path_buf(), what: "certificates", source })?;
        if certs.is_empty() {
            return Err(PkiError::CertificateInvalid(format!("{}: no certificate in it", ca.display())));
        }
        for cert in certs {
            roots.add(cert)?;
        }
        let mut config = ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Connector { dial: Dial::Trusting { config: Arc::new(config), ca: ca.to_path_buf() }, expect: None })
    }

    /// The reloadable configuration of a mutual TLS connector (reload it to pick up a
    /// new CRL or certificate); `None` for [`Connector::trusting`].
    pub fn config(&self) -> Option<&Arc<Reloadable<ClientConfig>>> {
        match &self.dial {
            Dial::Mutual(config) => Some(config),
            Dial::Trusting { .. } => None,
        }
    }

    /// Whether two connectors share one configuration.
    pub fn same(&self, other: &Connector) -> bool {
        match (&self.dial, &other.dial) {
            (Dial::Mutual(a), Dial::Mutual(b)) => Arc::ptr_eq(a, b),
            (Dial::Trusting { config: a, .. }, Dial::Trusting { config: b, .. }) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Dials `host:port` and completes the handshake.
    pub async fn connect(&self, host: &str, port: u16) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let tcp = TcpStream::connect((host, port)).await?;
        tcp.set_nodelay(true)?;
        let name = rustls::pki_types::ServerName::try_from(host.to_owned()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: not a name TLS can check: {e}"))
        })?;
        let config = match &self.dial {
            Dial::Mutual(config) => config.current(),
            Dial::Trusting { config, .. } => Arc::clone(config),
        };
        let connector = tokio_rustls::TlsConnector::from(config);
        let stream = tokio::time::timeout(HANDSHAKE_MAX, connector.connect(name, tcp))
            .await
            .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, format!("no TLS handshake within {HANDSHAKE_MAX:?}")))?
            .map_err(|e| io::Error::new(e.kind(), format!("TLS with {host}:{port}: {e}")))?;
        let Some(expect) = self.expect else { return Ok(stream) };
        match peer_identity(stream.get_ref().1) {
            Some(identity) if identity.role == expect => Ok(stream),
            other => Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!(
                    "TLS with {host}:{port}: the server is {}, not a {expect}",
                    other.map_or("unnamed".to_string(), |i| i.to_string()),
                ),
            )),
        }
    }
}

/// Connects `endpoint`: over mutual TLS with `tls`, in plaintext without (the one
/// place every gRPC client of the project chooses between the two).
pub async fn connect(
    endpoint: tonic::transport::Endpoint,
    tls: Option<&Connector>,
) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    match tls {
        Some(tls) => endpoint.connect_with_connector(tls.clone()).await,
        None => endpoint.connect().await,
    }
}

impl std::fmt::Debug for Connector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (&self.dial, self.expect) {
            (Dial::Mutual(config), Some(expect)) => {
                write!(f, "Connector({}, expecting {expect})", config.files().cert.display())
            }
            (Dial::Mutual(config), None) => write!(f, "Connector({})", config.files().cert.display()),
            (Dial::Trusting { ca, .. }, _) => write!(f, "Connector(trusting {})", ca.display()),
        }
    }
}

type Connecting = Pin<
    Box<dyn Future<Output = io::Result<hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>>> + Send>,
>;

impl tower_service::Service<http::Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = io::Error;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            let host = uri
                .host()
                .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host")))?
                .to_owned();
            let port = uri.port_u16().unwrap_or(443);
            Ok(hyper_util::rt::TokioIo::new(connector.connect(&host, port).await?))
        })
    }
}

//! Who may call what on a node's gRPC port.
//!
//! With the cluster's PKI the port is mutual TLS ([`bourse_pki::grpc::incoming`]): every
//! connection belongs to the identity its certificate names, and every call is checked
//! against the table below before any service sees it. A call no role of the caller
//! may make is answered `PERMISSION_DENIED` naming the method, the caller and the roles
//! that may; it never reaches the core.
//!
//! | service, method                        | roles                               |
//! |----------------------------------------|-------------------------------------|
//! | `OrderEntry.Session`                   | gateway, operator                   |
//! | `GatewayLink.Link`                     | gateway (under its own id only)     |
//! | `GatewayLink.Feed`                     | gateway, observer                   |
//! | `Admin.Submit`                         | operator                            |
//! | `Cluster.AddNode`, `RemoveNode`, `TransferLeader` | operator                 |
//! | `Cluster.Status`                       | node, gateway, operator, observer   |
//! | `Query.*`, `MarketData.*`              | gateway, operator, observer         |
//! | `Log.Follow`                           | observer, node                      |
//!
//! Inside order entry and the link, administrative commands (everything but placing,
//! cancelling, reducing and moving orders) are taken from operators, and from the
//! gateways the node's configuration names (`admin_gateways`: those that relay their
//! admin keys' commands); from any other gateway they are refused before the log with
//! code 1004 `not_authorized` ([`may_administer`]).
//!
//! On a gateway link every client is claimed before its batches are taken, and the claim
//! is checked ([`ClientKeys::check`]): a client of an API key, proved with the key, or
//! one in the gateway's own namespace. A direct caller's client ids are namespaced by
//! its identity ([`client_in_namespace`]).
//!
//! Without the PKI (a loopback benchmark: the configuration refuses anything else)
//! connections carry no identity and every call is let through.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bourse_pki::grpc::PeerInfo;
use bourse_pki::{Identity, Role};
use tonic::Status;

use Role::{Gateway, Node, Observer, Operator};

/// The roles that may call `path` (`/package.Service/Method`); `None` for a path no
/// service of the node serves (the router answers it `UNIMPLEMENTED`).
pub fn allowed(path: &str) -> Option<&'static [Role]> {
    let (service, method) = path.strip_prefix('/')?.split_once('/')?;
    let service = service.strip_prefix("bourse.v1.")?;
    Some(match (service, method) {
        ("OrderEntry", _) => &[Gateway, Operator],
        ("GatewayLink", "Link") => &[Gateway],
        ("GatewayLink", _) => &[Gateway, Observer],
        ("Admin", _) => &[Operator],
        ("Cluster", "Status") => &[Node, Gateway, Operator, Observer],
        ("Cluster", _) => &[Operator],
        ("Query" | "MarketData", _) => &[Gateway, Operator, Observer],
        ("Log", _) => &[Observer, Node],
        _ => return None,
    })
}

/// Whether `identity` may call `path`: `Err` with the status that refuses it.
pub fn authorize(path: &str, identity: &Identity) -> Result<(), Status> {
    match allowed(path) {
        None => Ok(()),
        Some(roles) if roles.contains(&identity.role) => Ok(()),
        Some(roles) => {
            let roles: Vec<&str> = roles.iter().map(|r| r.as_str()).collect();
            Err(Status::permission_denied(format!("{path} is not for {identity}: only for {}", roles.join(", "))))
        }
    }
}

/// The identity a request came with, when its connection has one.
pub fn identity_of<T>(request: &tonic::Request<T>) -> Option<&Identity> {
    request.extensions().get::<PeerInfo>().and_then(|peer| peer.identity.as_ref())
}

/// A gateway link must come under the id its certificate names: `gateway 3` may open
/// the link of gateway 3 only.
pub fn check_gateway_id(identity: Option<&Identity>, claimed: u32) -> Result<(), Status> {
    match identity {
        None => Ok(()),
        Some(identity) if identity.role == Gateway && identity.id == claimed.to_string() => Ok(()),
        Some(identity) => Err(Status::permission_denied(format!(
            "{identity} may not link as gateway {claimed}: a link is opened under the id its certificate names"
        ))),
    }
}

/// Whether `identity` may send administrative commands in order entry or on its link:
/// no identity (in process, plaintext on loopback), an operator, or a gateway named in
/// `admin_gateways`.
pub fn may_administer(identity: Option<&Identity>, admin_gateways: &[u32]) -> bool {
    match identity {
        None => true,
        Some(identity) if identity.role == Operator => true,
        Some(identity) if identity.role == Gateway => {
            identity.id.parse::<u32>().is_ok_and(|id| admin_gateways.contains(&id))
        }
        Some(_) => false,
    }
}

/// Whether `body` is an administrative command: anything but an order's place, cancel,
/// reduce or move.
pub fn is_administrative(body: &bourse_engine::command::CommandBody) -> bool {
    use bourse_engine::command::CommandBody::{Cancel, Move, Place, Reduce};
    !matches!(body, Place(_) | Cancel { .. } | Reduce { .. } | Move { .. })
}

/// The client id a direct caller's `client` (an `OrderEntry` session, an `Admin.Submit`)
/// stands for in the engine: its exactly-once session lives in the namespace of the
/// caller's identity, so no caller can register, pre-empt or read another's session.
///
/// - Without an identity (in process, plaintext on loopback): `client` itself.
/// - With one (an operator's tools, a load generator under a gateway certificate): a
///   hash of the identity and `client`, which no other caller can reach but by a 2^64
///   search.
///
/// The clients a gateway relays on its link are not namespaced here: the gateway
/// claims each ([`ClientKeys::check`]), with its API key or in its own namespace.
pub fn client_in_namespace(identity: Option<&Identity>, client: u64) -> u64 {
    match identity {
        None => client,
        Some(identity) => {
            let mut hasher = blake3::Hasher::new();
            hasher.update(b"bourse node client namespace\0");
            hasher.update(identity.uri().as_bytes());
            hasher.update(&[0]);
            hasher.update(&client.to_le_bytes());
            let bytes = hasher.finalize();
            u64::from_le_bytes(bytes.as_bytes()[..8].try_into().expect("8 bytes")).max(1)
        }
    }
}

/// The API key file the node checks gateways' claims of clients against
/// (`client_keys`; the file the gateways read), re-read on SIGHUP.
pub struct ClientKeys {
    path: Option<std::path::PathBuf>,
    store: std::sync::RwLock<Option<Arc<bourse_keys::KeyStore>>>,
}

impl ClientKeys {
    /// Reads the key file at `path`, if one is configured.
    pub fn load(path: Option<&std::path::Path>) -> Result<ClientKeys, String> {
        let keys = ClientKeys { path: path.map(std::path::Path::to_path_buf), store: Default::default() };
        keys.reload()?;
        Ok(keys)
    }

    /// Re-reads the key file: a key added since is claimable, a removed one no longer
    /// (sessions claimed before keep their link until it ends).
    pub fn reload(&self) -> Result<(), String> {
        let Some(path) = &self.path else { return Ok(()) };
        if !path.exists() {
            tracing::warn!(path = %path.display(), "the client key file does not exist: no key's client can be claimed");
        }
        let store = bourse_keys::KeyStore::load(path).map_err(|e| e.to_string())?;
        tracing::info!(path = %path.display(), keys = store.len(), "client keys read");
        *self.store.write().expect("client keys lock") = Some(Arc::new(store));
        Ok(())
    }

    /// Whether gateway `gateway` may carry the session `claim` names: a client of a key
    /// in the file (with the key to prove it), or an id in the gateway's own namespace.
    /// Without a key file, a claim with a key is the gateway's word (the gateways are
    /// then trusted with their keys' clients); the gateway's own namespace holds still.
    pub fn check(&self, gateway: u32, claim: &bourse_keys::Claim) -> Result<(), String> {
        let store = self.store.read().expect("client keys lock").clone();
        match store {
            Some(store) => store.check_claim(gateway, claim),
            None if claim.key.is_empty() => bourse_keys::KeyStore::default().check_claim(gateway, claim),
            None => Ok(()),
        }
    }
}

/// The tower layer that applies [`authorize`] to every call of a TLS server.
#[derive(Clone)]
pub struct AuthorizeLayer {
    pub refused: Arc<AtomicU64>,
}

impl<S> tower_layer::Layer<S> for AuthorizeLayer {
    type Service = Authorize<S>;

    fn layer(&self, inner: S) -> Authorize<S> {
        Authorize { inner, refused: Arc::clone(&self.refused) }
    }
}

#[derive(Clone)]
pub struct Authorize<S> {
    inner: S,
    refused: Arc<AtomicU64>,
}

type ResponseFuture<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B> tower_service::Service<http::Request<B>> for Authorize<S>
where
    S: tower_service::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = ResponseFuture<Self::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let peer = request.extensions().get::<PeerInfo>();
        let verdict = match peer.and_then(|p| p.identity.as_ref()) {
            Some(identity) => authorize(request.uri().path(), identity),
            // A TLS server's connections all carry an identity (incoming() drops those
            // whose certificate names none); none here means plaintext on loopback.
            None => Ok(()),
        };
        match verdict {
            Ok(()) => Box::pin(self.inner.call(request)),
            Err(status) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                tracing::info!(path = request.uri().path(), peer = ?peer, reason = status.message(), "call refused");
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn who(role: Role, id: &str) -> Identity {
        Identity::new(role, id).expect("identity")
    }

    #[test]
    fn the_table_grants_each_role_only_its_calls() {
        let gateway = who(Gateway, "1");
        let operator = who(Operator, "ops");
        let observer = who(Observer, "history");
        let node = who(Node, "2");
        let ok = |path: &str, who: &Identity| authorize(path, who).is_ok();
        assert!(ok("/bourse.v1.OrderEntry/Session", &gateway));
        assert!(!ok("/bourse.v1.OrderEntry/Session", &observer));
        assert!(ok("/bourse.v1.OrderEntry/Session", &operator));
        assert!(!ok("/bourse.v1.OrderEntry/Session", &node));
        assert!(ok("/bourse.v1.Admin/Submit", &operator));
        assert!(!ok("/bourse.v1.Admin/Submit", &gateway));
        assert!(!ok("/bourse.v1.Admin/Submit", &node));
        assert!(ok("/bourse.v1.Cluster/Status", &node));
        assert!(ok("/bourse.v1.Cluster/Status", &observer));
        assert!(!ok("/bourse.v1.Cluster/TransferLeader", &gateway));
        assert!(!ok("/bourse.v1.Cluster/AddNode", &node));
        assert!(ok("/bourse.v1.Cluster/RemoveNode", &operator));
        assert!(ok("/bourse.v1.Log/Follow", &observer));
        assert!(ok("/bourse.v1.Log/Follow", &node));
        assert!(!ok("/bourse.v1.Log/Follow", &gateway));
        assert!(ok("/bourse.v1.GatewayLink/Link", &gateway));
        assert!(!ok("/bourse.v1.GatewayLink/Link", &observer));
        assert!(ok("/bourse.v1.GatewayLink/Feed", &observer));
        assert!(ok("/bourse.v1.Query/GetBalances", &gateway));
        assert!(!ok("/bourse.v1.Query/GetBalances", &node));
        assert!(ok("/bourse.v1.MarketData/Subscribe", &observer));
        // Not a node's path: the router answers it.
        assert_eq!(allowed("/grpc.health.v1.Health/Check"), None);
        let refused = authorize("/bourse.v1.Admin/Submit", &gateway).unwrap_err();
        assert_eq!(refused.code(), tonic::Code::PermissionDenied);
        assert!(refused.message().contains("gateway 1") && refused.message().contains("operator"), "{refused:?}");
    }

    #[test]
    fn every_direct_caller_has_a_client_namespace_of_its_own() {
        let (ops, other) = (who(Operator, "ops"), who(Operator, "other"));
        assert_eq!(client_in_namespace(None, 42), 42);
        let gateway = client_in_namespace(Some(&who(Gateway, "1")), 42);
        assert_ne!(gateway, 42);
        assert_ne!(gateway, client_in_namespace(Some(&who(Gateway, "2")), 42));
        let mine = client_in_namespace(Some(&ops), 42);
        assert_ne!(mine, 42);
        assert_eq!(mine, client_in_namespace(Some(&ops), 42), "the same every time, on every node");
        assert_ne!(mine, client_in_namespace(Some(&other), 42));
        assert_ne!(mine, client_in_namespace(Some(&ops), 43));
    }

    #[test]
    fn administrative_commands_come_from_operators_and_named_gateways_only() {
        let admin_gateways = [1, 7];
        assert!(may_administer(None, &admin_gateways));
        assert!(may_administer(Some(&who(Operator, "ops")), &admin_gateways));
        assert!(may_administer(Some(&who(Gateway, "7")), &admin_gateways));
        assert!(!may_administer(Some(&who(Gateway, "2")), &admin_gateways));
        assert!(!may_administer(Some(&who(Gateway, "load")), &admin_gateways));
        assert!(!may_administer(Some(&who(Observer, "1")), &admin_gateways));
        use bourse_engine::command::CommandBody;
        use bourse_engine::{AccountId, OrderId, SymbolId};
        let cancel = CommandBody::Cancel { account: AccountId(0), symbol: SymbolId(0), order: OrderId(0) };
        assert!(!is_administrative(&cancel));
        assert!(is_administrative(&CommandBody::CreateAccount));
        assert!(is_administrative(&CommandBody::CloseDay));
    }

    #[test]
    fn a_gateway_links_under_its_own_id_only() {
        assert!(check_gateway_id(Some(&who(Gateway, "3")), 3).is_ok());
        assert!(check_gateway_id(Some(&who(Gateway, "3")), 4).is_err());
        assert!(check_gateway_id(Some(&who(Gateway, "03")), 3).is_err());
        assert!(check_gateway_id(Some(&who(Operator, "3")), 3).is_err());
        assert!(check_gateway_id(None, 7).is_ok());
    }
}

//! The group API's wire: length-prefixed postcard frames over TCP, mutual TLS with the
//! cluster's CA unless the group runs in plaintext (loopback only).
//!
//! A connection carries requests one at a time; each request has one reply. Who may
//! ask what is decided by the peer's certificate: members of other groups (`node`) read
//! outputs and state, the operator and gateways submit client commands, an observer
//! reads state.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bourse_engine::command::Command;
use bourse_engine::{AccountId, AssetId, ClientId, OrderId, OrderRecord, Outcome, Px, Qty, SymbolId};
use bourse_pki::{Identity, ReloadableClientConfig, ReloadableServerConfig, Role};
use bourse_shard::machine::Output;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

/// How a member's answer says a move it proposed was not seen done in time (its entry
/// may have gone with a leader change): the client sends it again.
pub const MOVE_NOT_SEEN: &str = "was not seen done";

/// The longest frame either side accepts (a whole group's state, for the checks).
pub const FRAME_MAX: u32 = 256 << 20;
/// A TLS handshake that takes longer is given up.
const HANDSHAKE_MAX: Duration = Duration::from_secs(5);

/// What a client or another group asks of a member.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Request {
    /// Client commands for accounts of this group, each numbered in its client's
    /// session with the group; answered once each is applied (or refused).
    Submit { commands: Vec<Command> },
    /// This member's outputs to group `to` numbered `from` on, at most `max`. With none
    /// to give, no merge waiting and this group's cursor into `to`'s outputs still at
    /// `consumed` (what the asker last heard), the member holds the request up to
    /// `wait_ms` for one of them to change (a long poll: an idle exchange costs no round
    /// trips).
    Outputs { to: usize, from: u64, max: u32, wait_ms: u32, consumed: u64 },
    /// Who leads, how far this member has applied, and with `machine` its whole state.
    State { machine: bool },
    /// A read of the group's state, answered by its leader after a read index (the
    /// state at an index no older than the request).
    Query(Query),
    /// Move `symbol`'s book to group `to` (asked of the catalog's group, group 0);
    /// answered once the book has come there. `again`: a resend of a move whose answer
    /// was lost; one already taken (the book placed in `to`) is waited for, not refused.
    Move { symbol: SymbolId, to: usize, again: bool },
}

/// What a client may read of a group.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Query {
    /// `symbol`'s book, up to `levels` price levels a side (asked of the symbol's group).
    Book { symbol: SymbolId, levels: u32 },
    /// An order of `symbol`, asked of the symbol's group: as the book knows it, or as
    /// the asked group's record of it has it (a record stays where its order closed,
    /// so a closed order of a moved book may be in a group the book left: see
    /// [`Query::Record`]).
    Order { symbol: SymbolId, order: OrderId },
    /// What this group holds of `account`: its available balances when the group owns
    /// it, and what its orders in this group's books reserve, with those orders. The
    /// account's whole balance is its group's available plus every group's reserved,
    /// each read at its own group's index.
    Account { account: AccountId },
    /// The asked group's own record of `order`, whatever book it was of and wherever
    /// that book lives now: how a client finds an order that closed in a group its
    /// book has left ([`crate::client::GroupClient::order`]).
    Record { order: OrderId },
}

/// A [`Query`]'s answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answered {
    Book {
        bids: Vec<(Px, Qty)>,
        asks: Vec<(Px, Qty)>,
        last_px: Option<Px>,
    },
    /// `None`: this group's books never had it, or have forgotten it (closed orders are
    /// kept up to the engine's `orders_closed_max`).
    Order(Option<OrderState>),
    Account(AccountState),
}

/// An order as its symbol's group knows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderState {
    pub record: OrderRecord,
    /// The price it rests at, while it rests.
    pub px_resting: Option<Px>,
    /// Resting in the book or waiting as a stop.
    pub qty_open: Qty,
}

/// What one group holds of an account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AccountState {
    /// This group owns the account: `available` and `suspended` are its own.
    pub owned: bool,
    pub available: Vec<(AssetId, i64)>,
    pub suspended: bool,
    /// What its orders in this group's books hold, by asset.
    pub reserved: Vec<(AssetId, i64)>,
    /// Its open orders in this group's books.
    pub orders: Vec<OrderState>,
}

/// A command's answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    /// Applied (or refused by the exchange: the outcome says so). `repeat`: the command
    /// had been applied before and this is its session's memory of the outcome.
    Done { client: ClientId, seq: u64, outcome: Outcome, repeat: bool },
    /// Not taken: this member does not lead its group; send to the leader (its API
    /// address when known).
    NotLeader { leader: Option<String> },
    /// Taken, but not answered in time (a leader change, a slow cross-group order):
    /// send it again, with the same number; a command applied already is answered from
    /// its session's memory.
    Pending,
    /// Refused before the log: the command does not belong to this group, or the
    /// partitioned exchange does not carry it.
    Refused(String),
}

/// A member's answer to one [`Request`].
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum Reply {
    Submitted(Vec<Answer>),
    /// `start`: the number of the first output (at most `from`, at least the first one
    /// kept); `consumed`: how far this member's group has applied the asker's outputs;
    /// `waiting`: this member's merge holds forwards that wait for watermarks.
    Outputs {
        start: u64,
        outputs: Vec<Output>,
        consumed: u64,
        waiting: bool,
    },
    State(State),
    /// `index`: the applied log index the answer was read at.
    Queried {
        index: u64,
        answer: Answered,
    },
    /// This member does not lead its group, which a query needs: ask the leader (its API
    /// address when known).
    NotLeader {
        leader: Option<String>,
    },
    /// The symbol asked about lives in another group now: ask that one.
    Elsewhere {
        group: usize,
    },
    /// The book moved, from group `from` (for a resend whose move was taken already,
    /// the last move's; `None` when the book was there with no move on record), and
    /// was in its new group `millis` after the request came.
    Moved {
        from: Option<usize>,
        millis: u64,
    },
    /// The request was not understood or not allowed.
    Error(String),
}

/// A member's view of itself.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct State {
    pub group: usize,
    pub node: u64,
    pub leading: bool,
    pub term: u64,
    pub leader: Option<String>,
    /// Raft log indexes: applied and committed.
    pub applied: u64,
    pub committed: u64,
    /// The postcard-encoded `GroupMachine`, when asked for.
    pub machine: Option<Vec<u8>>,
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(w: &mut W, value: &T) -> io::Result<()> {
    let body = postcard::to_allocvec(value).map_err(io::Error::other)?;
    let len = u32::try_from(body.len()).ok().filter(|&n| n <= FRAME_MAX).ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, format!("a frame of {} bytes is over the limit", body.len()))
    })?;
    let mut framed = Vec::with_capacity(4 + body.len());
    framed.extend_from_slice(&len.to_le_bytes());
    framed.extend_from_slice(&body);
    w.write_all(&framed).await?;
    w.flush().await
}

/// Reads one frame; `None` at a clean end of the stream.
pub async fn read_frame<R: AsyncRead + Unpin, T: for<'de> Deserialize<'de>>(r: &mut R) -> io::Result<Option<T>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(error) if error.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(error) => return Err(error),
    }
    let len = u32::from_le_bytes(len);
    if len > FRAME_MAX {
        return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a frame of {len} bytes is over the limit")));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    postcard::from_bytes(&body).map(Some).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// A stream either side of TLS or none.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

/// Accepts a connection: the TLS handshake and the peer's identity (`None` in
/// plaintext, where every peer is trusted as on loopback).
pub async fn accept(
    stream: TcpStream,
    tls: Option<&ReloadableServerConfig>,
) -> Result<(Box<dyn Io>, Option<Identity>), String> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let Some(tls) = tls else { return Ok((Box::new(stream), None)) };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.current());
    let stream = tokio::time::timeout(HANDSHAKE_MAX, acceptor.accept(stream))
        .await
        .map_err(|_| format!("no TLS handshake within {HANDSHAKE_MAX:?}"))?
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let identity = bourse_pki::peer_identity(stream.get_ref().1).ok_or("the peer's certificate names no identity")?;
    Ok((Box::new(stream), Some(identity)))
}

/// Connects to a member at `addr` (`host:port`), checking over TLS that it is one.
pub async fn connect(addr: &str, tls: Option<&Arc<ReloadableClientConfig>>) -> Result<Box<dyn Io>, String> {
    let stream = tokio::time::timeout(HANDSHAKE_MAX, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("{addr}: connect timed out"))?
        .map_err(|e| format!("{addr}: {e}"))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let Some(tls) = tls else { return Ok(Box::new(stream)) };
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host).trim_start_matches('[').trim_end_matches(']');
    let name = rustls::pki_types::ServerName::try_from(host.to_owned())
        .map_err(|e| format!("{host}: not a name TLS can check: {e}"))?;
    let connector = tokio_rustls::TlsConnector::from(tls.current());
    let stream = tokio::time::timeout(HANDSHAKE_MAX, connector.connect(name, stream))
        .await
        .map_err(|_| format!("{addr}: no TLS handshake within {HANDSHAKE_MAX:?}"))?
        .map_err(|e| format!("{addr}: TLS: {e}"))?;
    match bourse_pki::peer_identity(stream.get_ref().1) {
        Some(identity) if identity.role == Role::Node => Ok(Box::new(stream)),
        other => {
            Err(format!("{addr}: the peer is {}, not a member", other.map_or("unnamed".into(), |i| i.to_string())))
        }
    }
}

/// May `peer` make `request`? (`None`: plaintext on loopback, anyone may.)
pub fn allowed(peer: Option<&Identity>, request: &Request) -> Result<(), String> {
    let Some(peer) = peer else { return Ok(()) };
    let ok = match request {
        Request::Submit { .. } => matches!(peer.role, Role::Operator | Role::Gateway),
        Request::Outputs { .. } => peer.role == Role::Node,
        Request::State { .. } => true,
        Request::Query(_) => matches!(peer.role, Role::Operator | Role::Gateway | Role::Observer),
        Request::Move { .. } => peer.role == Role::Operator,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{peer} may not {}",
            match request {
                Request::Submit { .. } => "submit commands (operators and gateways may)",
                Request::Outputs { .. } => "read a group's outputs (members of other groups may)",
                Request::State { .. } => "read state",
                Request::Query(_) => "read accounts, orders and books (operators, gateways and observers may)",
                Request::Move { .. } => "move a book between groups (operators may)",
            }
        ))
    }
}

/// One connection to a member, for a client or another group: requests one at a time.
pub struct Connection {
    io: Box<dyn Io>,
}

impl Connection {
    pub async fn open(addr: &str, tls: Option<&Arc<ReloadableClientConfig>>) -> Result<Connection, String> {
        Ok(Connection { io: connect(addr, tls).await? })
    }

    /// Sends `request` and reads its reply within `timeout`.
    pub async fn call(&mut self, request: &Request, timeout: Duration) -> Result<Reply, String> {
        let exchange = async {
            write_frame(&mut self.io, request).await.map_err(|e| e.to_string())?;
            read_frame::<_, Reply>(&mut self.io).await.map_err(|e| e.to_string())?.ok_or_else(|| "closed".to_string())
        };
        tokio::time::timeout(timeout, exchange).await.map_err(|_| format!("no reply within {timeout:?}"))?
    }
}

#[cfg(test)]
mod tests {
    use bourse_engine::{AccountId, SymbolId};
    use bourse_pki::{Identity, Role};

    use super::{allowed, Query, Request};

    #[test]
    fn a_peer_may_ask_what_its_role_allows_and_is_told_what_it_may_not() {
        let peer = |role| Identity::new(role, "x".to_string()).expect("an identity");
        let submit = Request::Submit { commands: Vec::new() };
        let outputs = Request::Outputs { to: 0, from: 1, max: 1, wait_ms: 0, consumed: 0 };
        let query = Request::Query(Query::Account { account: AccountId(1) });
        let book = Request::Query(Query::Book { symbol: SymbolId(0), levels: 5 });
        let moving = Request::Move { symbol: SymbolId(0), to: 1, again: false };
        for (role, may) in [
            (Role::Operator, [true, false, true, true, true]),
            (Role::Gateway, [true, false, true, true, false]),
            (Role::Observer, [false, false, true, true, false]),
            (Role::Node, [false, true, false, false, false]),
        ] {
            for (request, may) in [&submit, &outputs, &query, &book, &moving].into_iter().zip(may) {
                let answer = allowed(Some(&peer(role)), request);
                assert_eq!(answer.is_ok(), may, "{role:?} asking {request:?}: {answer:?}");
                if let Err(refused) = answer {
                    assert!(refused.contains("may"), "{refused}");
                }
            }
        }
        // Plaintext on loopback: every peer is trusted.
        assert!(allowed(None, &submit).is_ok());
    }
}

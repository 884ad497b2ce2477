//! Order entry in the same process: a front end that runs inside a gateway's process
//! (the day-trading service, say) opens its sessions on the gateway without a network
//! hop. The gateway runs the very session it runs for a gRPC caller — the key from
//! the request's metadata, its checks and limits, its stamp — and the [`Client`] keeps
//! all of its own behaviour (window, exactly-once seqs, resends after a broken
//! session); only protobuf encoding, HTTP/2 and the loopback socket are left out, and
//! with them about a third of the front end's work per command (docs/BENCHMARKS.md).
//!
//! [`Client`]: crate::Client

use std::pin::Pin;
use std::sync::Arc;

use bourse_protocol::proto;

/// A stream of messages or of the status that ended it: one direction of a session.
pub type MessageStream<T> = Pin<Box<dyn tokio_stream::Stream<Item = Result<T, tonic::Status>> + Send + 'static>>;

/// What a gateway offers to front ends in its process: `OrderEntry.Session`, typed.
pub trait LocalOrderEntry: Send + Sync + 'static {
    /// The gateway's name in logs (its listen address).
    fn name(&self) -> String;

    /// Opens a session as `OrderEntry.Session` would: the request's metadata carries
    /// the API key; the answer is the stream of server batches.
    fn session(
        &self,
        request: tonic::Request<MessageStream<proto::ClientBatch>>,
    ) -> Result<MessageStream<proto::ServerBatch>, tonic::Status>;
}

/// A handle on a gateway in this process (cheap to clone).
#[derive(Clone)]
pub struct LocalGateway(pub Arc<dyn LocalOrderEntry>);

impl std::fmt::Debug for LocalGateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LocalGateway({})", self.0.name())
    }
}

//! [`QueryPool`]: one shared query connection for many concurrent callers.

use std::future::Future;
use std::pin::Pin;

use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::query::QueryClient;

/// How a pool opens its connection.
type Connect = Box<dyn Fn() -> Pin<Box<dyn Future<Output = Result<QueryClient>> + Send>> + Send + Sync>;

/// A query connection opened on first use and shared: each call runs on a clone of it
/// (one HTTP/2 connection carries them all at once, so calls do not wait for one
/// another). A clone knows where it last got an answer (it may have failed over), so
/// the next call starts there; after a call found no endpoint available, the next one
/// connects afresh.
pub struct QueryPool {
    connect: Connect,
    slot: Mutex<Option<QueryClient>>,
}

impl QueryPool {
    /// A pool whose connection `connect` opens.
    pub fn new<F, Fut>(connect: F) -> QueryPool
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<QueryClient>> + Send + 'static,
    {
        QueryPool { connect: Box::new(move || Box::pin(connect())), slot: Mutex::new(None) }
    }

    /// Runs `call` on a clone of the connection; `linearizable` asks the leader after a
    /// read-index round.
    pub async fn call<T, F>(&self, linearizable: bool, call: F) -> Result<T>
    where
        F: for<'a> FnOnce(&'a mut QueryClient) -> Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>,
    {
        let shared = {
            let mut slot = self.slot.lock().await;
            if slot.is_none() {
                *slot = Some((self.connect)().await?);
            }
            slot.clone().expect("connected above")
        };
        let mut client = shared.linearizable(linearizable);
        let result = call(&mut client).await;
        let unavailable = matches!(result, Err(Error::Unavailable { .. }));
        *self.slot.lock().await = (!unavailable).then(|| client.linearizable(false));
        result
    }
}

//! One key's order entry.

use std::time::Duration;

use bourse_client::{random_client_id, ApiKey, Client, Error, Reply};
use bourse_engine::command::CommandBody;
use tokio::sync::{broadcast, Mutex};

use crate::{OrderEvent, OrderEvents, Refusal, Upstream};

/// Events of a key's orders buffered for its subscribers.
const EVENTS_BUFFER: usize = 4_096;

/// One key's order-entry session: an exactly-once [`Client`], opened on first use and
/// opened anew with a new client id after it ended (a client whose session ended cannot
/// trust its seqs to be gapless). Commands of one key share its client's window. The
/// fills and cancellations of its orders are handed to every subscriber.
pub struct KeySession {
    key: Option<ApiKey>,
    upstream: Upstream,
    client: Mutex<Option<Client>>,
    events: broadcast::Sender<OrderEvent>,
}

impl KeySession {
    pub fn new(upstream: Upstream, key: Option<ApiKey>) -> KeySession {
        let (events, _) = broadcast::channel(EVENTS_BUFFER);
        KeySession { key, upstream, client: Mutex::new(None), events }
    }

    pub fn key(&self) -> Option<&ApiKey> {
        self.key.as_ref()
    }

    /// The events of this key's orders placed through this session, from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<OrderEvent> {
        self.events.subscribe()
    }

    /// Sends one command and waits until it is committed and applied (or refused).
    pub async fn submit(&self, body: CommandBody) -> Result<Reply, Error> {
        let client = self.client().await?;
        let result = client.submit(body).await;
        if let Err(Error::Closed | Error::Unavailable { .. }) = &result {
            // The session is over: the next command opens a new one.
            let mut slot = self.client.lock().await;
            if slot.as_ref().is_some_and(|c| c.client_id() == client.client_id()) {
                slot.take();
            }
        }
        result
    }

    /// [`KeySession::submit`], sending again for up to `patience` a command refused for
    /// the session's rate or in-flight limit ([`Refusal::is_transient`]).
    pub async fn submit_patiently(&self, body: CommandBody, patience: Duration) -> Result<Reply, Error> {
        let started = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(1);
        loop {
            match self.submit(body.clone()).await {
                Err(Error::Refused { code, .. })
                    if Refusal::from_code(code).is_some_and(Refusal::is_transient) && started.elapsed() < patience =>
                {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other,
            }
        }
    }

    /// The open client, or a new one.
    pub async fn client(&self) -> Result<Client, Error> {
        let mut slot = self.client.lock().await;
        if let Some(client) = slot.as_ref() {
            return Ok(client.clone());
        }
        let client = self.upstream.client(random_client_id(), crate::Port::options(self.key.clone())).await?;
        if let Some(events) = client.events() {
            let sender = self.events.clone();
            tokio::spawn(async move {
                let mut events = OrderEvents(events);
                while let Some(event) = events.recv().await {
                    // No subscriber is not an error: the events are simply not wanted now.
                    let _ = sender.send(event);
                }
            });
        }
        *slot = Some(client.clone());
        Ok(client)
    }
}

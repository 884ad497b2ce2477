//! The TCP listener and its connections (spec sections 2 and 11).
//!
//! One task per connection, so a slow or broken connection delays no other. At most
//! `limits.connections_max` are served at once; further ones wait in the accept backlog
//! (`bourse_port::Listener` is not polled while the limit is reached). Per connection:
//!
//! - **bare**: one request, its reply, then the sending side is shut down and whatever
//!   the client still sends is read and discarded for up to 1 s before closing, so that
//!   unread bytes cannot make the kernel reset the connection and destroy the reply;
//! - **length-prefixed**: requests one after another (pipelined requests wait in the
//!   read buffer), each reply framed as `M\n` + document, until the client closes, the
//!   idle timeout passes, or a framing error puts the stream out of step.
//!
//! A framing error is answered when a reply makes sense (`Malformed length line`,
//! `Request too large`) and closes the connection; a well-framed body that is not a
//! valid request is answered and, in length-prefixed mode, the connection stays open.
//! Writing a reply may take at most `limits.io_timeout` (the spec's read timeout).

use std::sync::Arc;
use std::time::Duration;

use bourse_port::{EdgeRead, EdgeStream, EdgeWrite, Listener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::exchange::Exchange;
use crate::framing::{prefixed, FrameError, FrameReader};
use crate::{execute, parse, reply, Framing, XmlConfig};

/// How long a closing bare connection keeps reading what the client still sends.
const LINGER: Duration = Duration::from_secs(1);

pub(crate) struct Shared {
    pub config: XmlConfig,
    pub exchange: Arc<Exchange>,
}

pub(crate) async fn accept_loop(listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    loop {
        let connection = tokio::select! {
            connection = listener.accept() => connection,
            _ = stop.wait_for(|stopping| *stopping) => return,
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            let keys = connection.keys();
            let Ok((stream, slot)) = connection.open().await else { return };
            serve(stream, &shared, keys.stats()).await;
            drop(slot);
        });
    }
}

async fn serve(stream: EdgeStream, shared: &Shared, stats: &bourse_port::ListenerStats) {
    let (read, mut write) = stream.into_split();
    let mut frames = FrameReader::new(read);
    let config = &shared.config;
    let framing = config.framing;
    loop {
        let limits = &config.limits;
        let body = match frames.next(limits.request_bytes_max, limits.idle_timeout, limits.io_timeout).await {
            Ok(body) => body,
            Err(error) => {
                let counter = match error {
                    FrameError::Idle => Some(&stats.idle_closed),
                    FrameError::ReadTimeout => Some(&stats.deadlines),
                    FrameError::TooLarge => Some(&stats.oversize),
                    _ => None,
                };
                if let Some(counter) = counter {
                    counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let Some(text) = error.reply_text() {
                    let _ = send(&mut write, framing, &reply::request_error(text), limits.io_timeout).await;
                }
                if matches!(error, FrameError::Closed) {
                    return;
                }
                break;
            }
        };
        let document = match parse::parse(&body, config.max_children) {
            Ok(request) => reply::document(&execute::execute(&shared.exchange, request).await),
            Err(error) => reply::request_error(&error.to_string()),
        };
        if send(&mut write, framing, &document, limits.io_timeout).await.is_err() {
            return;
        }
        if framing == Framing::Bare {
            break;
        }
    }
    close(frames, write).await;
}

async fn send(write: &mut EdgeWrite, framing: Framing, document: &[u8], timeout: Duration) -> Result<(), ()> {
    let bytes = match framing {
        Framing::Bare => std::borrow::Cow::Borrowed(document),
        Framing::Prefixed => std::borrow::Cow::Owned(prefixed(document)),
    };
    match tokio::time::timeout(timeout, write.write_all(&bytes)).await {
        Ok(Ok(())) => Ok(()),
        _ => Err(()),
    }
}

/// Shuts the sending side, then discards what the client still sends until it closes
/// or `LINGER` passes.
async fn close(mut frames: FrameReader<EdgeRead>, mut write: EdgeWrite) {
    let _ = write.shutdown().await;
    let mut sink = [0u8; 4096];
    let _ = tokio::time::timeout(LINGER, async {
        while let Ok(read @ 1..) = frames.get_mut().read(&mut sink).await {
            let _ = read;
        }
    })
    .await;
}

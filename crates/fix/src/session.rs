//! The FIX session layer: one [`SessionCore`] per counterparty, one connection at a
//! time attached to it.
//!
//! A `SessionCore` lives from the first Logon of a SenderCompID until the process
//! ends. It owns the session's [`Store`], the order state ([`Orders`]) and the upstream
//! gRPC session ([`Upstream`]). Every outgoing message is numbered, recorded in the
//! store and queued for the attached connection under one lock, so queue order is seq
//! order; with no connection attached (the client is away) the message is only stored,
//! and the client gets it by ResendRequest after its next Logon.
//!
//! A connection is a reader task (this module's [`Connection`]: framing, sequence
//! checks, the session messages, dispatch of application messages) and a writer task
//! that takes batches of queued messages, fsyncs the store once per batch and writes
//! them (group commit: the fsync covers every record written before it). The fsync
//! runs inline while the store's device has synced fast (a RAM disk, a drive with
//! power-loss protection), else on tokio's blocking pool (see [`SessionCore::sync`]).
//!
//! Sequence rules (FIX 4.4 session protocol): a message with the expected MsgSeqNum is
//! processed; a higher one triggers one ResendRequest (from the expected seq, to
//! infinity) and is dropped, since the resend brings it again; a lower one is ignored
//! with PossDupFlag=Y and ends the session (Logout) without. SequenceReset in reset
//! mode moves the expected seq whatever its own MsgSeqNum. A malformed message with a
//! readable MsgSeqNum is answered with Reject (35=3) and counted; a garbled one (bad
//! BodyLength or CheckSum) is dropped unanswered, as the protocol says.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bourse_client::{random_client_id, ApiKey, Client, QueryClient};
use bourse_port::{EdgeRead, EdgeStream, EdgeWrite};
use bourse_protocol::proto;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

use crate::codec::{self, FieldError, Message, RejectReason};
use crate::orders::Orders;
use crate::store::Store;
use crate::tags::{self, msg};
use crate::time::{now_ns, utc_timestamp};
use crate::Shared;

/// Bytes read from a socket at a time.
const READ_CHUNK: usize = 64 * 1024;
/// Bytes a writer puts on the socket in one batch, at most.
const WRITE_BATCH_MAX: usize = 1 << 20;
/// An fsync of the store at most this long counts as fast (see [`SessionCore::sync`]):
/// a tokio worker may block about this long without starving its other tasks.
const FAST_SYNC: Duration = Duration::from_micros(50);
/// Fast fsyncs in a row after which the store is synced inline, not on the blocking pool.
const FAST_SYNCS_INLINE: u32 = 8;

/// The upstream side of a session: the gateway, with the key given at Logon.
pub struct Upstream {
    pub key: String,
    pub client: Client,
    /// Queries of this session (a clone per call: clones share the connection).
    pub query: QueryClient,
    /// Symbol names, shared by every session of the front end.
    catalog: Arc<bourse_port::Catalog>,
    /// Set when the order-entry session ended for good (its events stream closed).
    pub ended: AtomicBool,
}

impl Upstream {
    /// Proves `key` with a query (the gateway answers UNAUTHENTICATED for an unknown
    /// one), then opens the order-entry session on the front-end port.
    async fn connect(
        upstream: &bourse_port::Upstream,
        catalog: &Arc<bourse_port::Catalog>,
        key: String,
    ) -> Result<(Upstream, bourse_client::Events), String> {
        let options = bourse_port::Port::options(Some(ApiKey(key.clone())));
        let mut query = upstream.query(options.clone()).await.map_err(|e| e.to_string())?;
        let symbols = query.symbols().await.map_err(|e| match e {
            bourse_client::Error::Status { code: tonic::Code::Unauthenticated, .. } => "unknown API key".to_string(),
            other => other.to_string(),
        })?;
        catalog.learn_symbols(symbols.symbols);
        let client = upstream.client(random_client_id(), options).await.map_err(|e| e.to_string())?;
        let events = client.events().expect("a new client's events");
        let catalog = Arc::clone(catalog);
        let upstream = Upstream { key, client, query, catalog, ended: AtomicBool::new(false) };
        Ok((upstream, events))
    }

    /// Symbol `id`, asking the gateway when it is not known yet.
    pub async fn symbol_by_id(&self, id: u32) -> Option<proto::SymbolInfo> {
        // The catalog takes a number for an id or a name: only an id match counts.
        if let Some(known) = self.catalog.find_symbol(&id.to_string()).filter(|s| s.id == id) {
            return Some(known);
        }
        let symbols = self.query.clone().symbols().await.ok()?.symbols;
        let found = symbols.iter().find(|s| s.id == id).cloned();
        self.catalog.learn_symbols(symbols);
        found
    }

    /// The symbol called `name`, asking the gateway when it is not known yet.
    pub async fn symbol(&self, name: &str) -> Option<proto::SymbolInfo> {
        if name.parse::<u32>().is_ok() {
            // FIX names symbols; a number is no symbol's name (the catalog would take it as an id).
            return None;
        }
        self.catalog.symbol(&self.query, name).await.ok().flatten()
    }
}

/// Where a store's fsyncs run: inline once [`FAST_SYNCS_INLINE`] in a row took at most
/// [`FAST_SYNC`], on the blocking pool from the first one that took longer.
#[derive(Default)]
struct SyncPace {
    /// Fast fsyncs in a row, up to [`FAST_SYNCS_INLINE`].
    fast: AtomicU32,
}

impl SyncPace {
    fn inline(&self) -> bool {
        self.fast.load(Ordering::Relaxed) >= FAST_SYNCS_INLINE
    }

    fn record(&self, took: Duration) {
        if took <= FAST_SYNC {
            let _ = self
                .fast
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| (n < FAST_SYNCS_INLINE).then_some(n + 1));
        } else {
            self.fast.store(0, Ordering::Relaxed);
        }
    }
}

/// One attached connection.
struct Conn {
    id: u64,
    outbox: mpsc::Sender<Vec<u8>>,
    kill: Arc<Notify>,
    last_sent: Instant,
}

pub(crate) struct State {
    pub store: Store,
    conn: Option<Conn>,
    pub orders: Orders,
    pub upstream: Option<Arc<Upstream>>,
    conn_ids: u64,
}

/// The lasting half of a FIX session (see the module header).
pub struct SessionCore {
    /// The counterparty's CompID (their SenderCompID, our TargetCompID).
    pub their_id: String,
    pub our_id: String,
    fsync: bool,
    /// Whether the store is synced inline.
    sync_pace: SyncPace,
    outbox_max: usize,
    state: Mutex<State>,
}

impl SessionCore {
    fn open(shared: &Shared, their_id: &str) -> std::io::Result<SessionCore> {
        let config = &shared.config;
        let store = Store::open(&config.data, their_id, &config.comp_id)?;
        let orders = Orders::rebuild(&store)?;
        Ok(SessionCore {
            their_id: their_id.to_owned(),
            our_id: config.comp_id.clone(),
            fsync: config.fsync,
            sync_pace: SyncPace::default(),
            outbox_max: config.outbox_max,
            state: Mutex::new(State { store, conn: None, orders, upstream: None, conn_ids: 0 }),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().expect("FIX session lock poisoned by a panic")
    }

    pub fn connected(&self) -> bool {
        self.lock().conn.is_some()
    }

    /// Numbers, records and queues `message` (35 first, no header): see [`Self::send_locked`].
    pub fn send(&self, message: Message) {
        let mut state = self.lock();
        self.send_locked(&mut state, message);
    }

    /// Makes the store's records durable before the messages they hold go out; false
    /// when it cannot (logged). Inline once the device has synced fast
    /// [`FAST_SYNCS_INLINE`] times in a row, else on the blocking pool: a slow sync
    /// must not hold a tokio worker, and a fast one is not worth the two hand-offs
    /// between threads (24 µs of one order's round trip here, docs/BENCHMARKS.md).
    async fn sync(&self) -> bool {
        if !self.fsync {
            return true;
        }
        let file = self.lock().store.file();
        let timed = move || {
            let started = Instant::now();
            file.sync_data().map(|()| started.elapsed())
        };
        let result = if self.sync_pace.inline() {
            timed()
        } else {
            match tokio::task::spawn_blocking(timed).await {
                Ok(result) => result,
                Err(_) => return false,
            }
        };
        match result {
            Ok(took) => {
                self.sync_pace.record(took);
                true
            }
            Err(error) => {
                tracing::error!(session = %self.their_id, %error, "FIX store sync failed: disconnecting");
                false
            }
        }
    }

    /// Numbers `message`, records it in the store (with its bytes when it is an
    /// application message other than market data and position reports, which are
    /// gap-filled on resend: stale figures are worse than none),
    /// and queues it for the connection if one is attached. A store that cannot be
    /// written ends the connection: nothing is sent that could not be resent.
    pub(crate) fn send_locked(&self, state: &mut State, message: Message) {
        let seq = state.store.next_sender();
        let bytes = self.with_header(seq, &message, None).encode();
        let msg_type = message.msg_type();
        let keep = !msg::is_admin(msg_type)
            && !matches!(
                msg_type,
                msg::MARKET_DATA_SNAPSHOT
                    | msg::MARKET_DATA_INCREMENTAL
                    | msg::MARKET_DATA_REQUEST_REJECT
                    | msg::REQUEST_FOR_POSITIONS_ACK
                    | msg::POSITION_REPORT
            );
        if let Err(error) = state.store.record_sent(seq, keep.then_some(bytes.as_slice())) {
            tracing::error!(session = %self.their_id, %error, "FIX store write failed: disconnecting");
            self.detach_locked(state, None);
            return;
        }
        match state.conn.as_mut() {
            Some(conn) => {
                conn.last_sent = Instant::now();
                if conn.outbox.try_send(bytes).is_err() {
                    tracing::warn!(session = %self.their_id, "FIX client too slow to read: disconnecting");
                    self.detach_locked(state, None);
                }
            }
            None => {
                // No writer will sync this: do it here (only while the client is away).
                if self.fsync {
                    if let Err(error) = state.store.sync() {
                        tracing::error!(session = %self.their_id, %error, "FIX store sync failed");
                    }
                }
            }
        }
    }

    /// `message` with the standard header: 35, 49, 56, 34, [43, 122 for resends,] 52.
    fn with_header(&self, seq: u64, message: &Message, orig_sending_time: Option<&[u8]>) -> Message {
        let mut out = Message { fields: Vec::with_capacity(message.fields.len() + 6) };
        out.fields.push((tags::MSG_TYPE, message.msg_type().as_bytes().to_vec()));
        out.push(tags::SENDER_COMP_ID, &self.our_id).push(tags::TARGET_COMP_ID, &self.their_id);
        out.push_display(tags::MSG_SEQ_NUM, seq);
        if let Some(orig) = orig_sending_time {
            out.push(tags::POSS_DUP_FLAG, "Y").push(tags::ORIG_SENDING_TIME, orig);
        }
        out.push(tags::SENDING_TIME, utc_timestamp(now_ns()));
        out.fields.extend(message.fields.iter().skip(1).cloned());
        out
    }

    /// Answers a ResendRequest for `begin..=end` (0: everything sent): stored
    /// application messages again with PossDupFlag=Y and OrigSendingTime, and
    /// SequenceReset-GapFill over session messages, market data and position reports.
    fn resend(&self, begin: u64, end: u64) {
        let mut state = self.lock();
        let last = state.store.next_sender() - 1;
        let Some((begin, end)) = resend_bounds(begin, end, last) else { return };
        let stored = match state.store.sent_between(begin, end) {
            Ok(stored) => stored,
            Err(error) => {
                tracing::error!(session = %self.their_id, %error, "FIX store read failed: disconnecting");
                self.detach_locked(&mut state, None);
                return;
            }
        };
        let mut out = Vec::new();
        let mut cursor = begin;
        for (seq, bytes) in stored {
            if seq > cursor {
                out.extend(self.gap_fill(cursor, seq));
            }
            let (original, _) = Message::decode(&bytes);
            let sent_at = original.get(tags::SENDING_TIME).unwrap_or(b"19700101-00:00:00.000").to_vec();
            let mut body = Message::new(original.msg_type());
            body.fields.extend(original.fields.iter().filter(|(t, _)| !is_header_tag(*t)).cloned());
            out.extend(self.with_header(seq, &body, Some(&sent_at)).encode());
            cursor = seq + 1;
        }
        if cursor <= end {
            out.extend(self.gap_fill(cursor, end + 1));
        }
        tracing::info!(session = %self.their_id, begin, end, "FIX resend");
        if let Some(conn) = state.conn.as_mut() {
            conn.last_sent = Instant::now();
            if conn.outbox.try_send(out).is_err() {
                self.detach_locked(&mut state, None);
            }
        }
    }

    fn gap_fill(&self, seq: u64, new_seq: u64) -> Vec<u8> {
        let mut reset = Message::new(msg::SEQUENCE_RESET);
        reset.push(tags::GAP_FILL_FLAG, "Y").push_display(tags::NEW_SEQ_NO, new_seq);
        let now = utc_timestamp(now_ns());
        self.with_header(seq, &reset, Some(now.as_bytes())).encode()
    }

    /// Ends the attached connection (if it is `only`, when given).
    fn detach_locked(&self, state: &mut State, only: Option<u64>) {
        if let Some(conn) = &state.conn {
            if only.is_none_or(|id| id == conn.id) {
                conn.kill.notify_one();
                state.conn = None;
            }
        }
    }

    /// Ends the attached connection with a Logout saying `text` (which goes out before
    /// the connection closes).
    pub(crate) fn log_out(&self, text: &str) {
        let mut state = self.lock();
        if state.conn.is_some() {
            let mut logout = Message::new(msg::LOGOUT);
            logout.push(tags::TEXT, text);
            self.send_locked(&mut state, logout);
            tracing::info!(session = %self.their_id, text, "FIX logout");
        }
        self.detach_locked(&mut state, None);
    }

    fn detach(&self, id: u64) {
        let mut state = self.lock();
        self.detach_locked(&mut state, Some(id));
    }

    fn next_target(&self) -> u64 {
        self.lock().store.next_target()
    }

    fn set_next_target(&self, next: u64) {
        let mut state = self.lock();
        if let Err(error) = state.store.set_next_target(next) {
            tracing::error!(session = %self.their_id, %error, "FIX store write failed: disconnecting");
            self.detach_locked(&mut state, None);
        }
    }

    fn idle_since(&self, id: u64) -> Option<Instant> {
        self.lock().conn.as_ref().filter(|c| c.id == id).map(|c| c.last_sent)
    }

    pub fn upstream(&self) -> Option<Arc<Upstream>> {
        self.lock().upstream.clone()
    }
}

fn is_header_tag(tag: u32) -> bool {
    matches!(tag, 35 | 49 | 56 | 34 | 43 | 52 | 122 | 97)
}

/// Accepts connections until the server shuts down.
pub(crate) async fn accept_loop(shared: Arc<Shared>, listener: bourse_port::Listener) {
    loop {
        let connection = listener.accept().await;
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            tracing::debug!(peer = %connection.peer, "FIX connection");
            let keys = connection.keys();
            let Ok((stream, slot)) = connection.open().await else { return };
            run_connection(shared, stream, keys).await;
            drop(slot);
        });
    }
}

/// What the reader got.
enum Read {
    Message(Message, Option<FieldError>),
    Closed,
    Idle,
}

struct Reader {
    read: EdgeRead,
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start (consumed bytes are dropped before a read,
    /// not after each message).
    start: usize,
}

impl Reader {
    /// The next framed message; garbled bytes are skipped (logged) as the protocol says.
    async fn next(&mut self, wait: Duration) -> Read {
        loop {
            let unread = &self.buf[self.start..];
            match codec::frame(unread) {
                Ok(Some(len)) => {
                    let (message, error) = Message::decode(&unread[..len]);
                    self.start += len;
                    return Read::Message(message, error);
                }
                Ok(None) => {}
                Err(error) => {
                    let skip = codec::resync(unread);
                    tracing::warn!(%error, skipped = skip, "FIX: garbled bytes ignored");
                    self.start += skip;
                    continue;
                }
            }
            self.buf.drain(..self.start);
            self.start = 0;
            self.buf.reserve(READ_CHUNK);
            match tokio::time::timeout(wait, self.read.read_buf(&mut self.buf)).await {
                Err(_) => return Read::Idle,
                Ok(Ok(0)) | Ok(Err(_)) => return Read::Closed,
                Ok(Ok(_)) => {}
            }
        }
    }
}

async fn run_connection(shared: Arc<Shared>, stream: EdgeStream, keys: Arc<bourse_port::KeyConnections>) {
    let (read, mut write) = stream.into_split();
    let mut reader = Reader { read, buf: Vec::with_capacity(READ_CHUNK), start: 0 };
    // The whole Logon within the limit, however slowly its bytes arrive.
    let wait = shared.config.limits.first_request_timeout;
    let (logon, error) = match tokio::time::timeout(wait, reader.next(wait)).await {
        Ok(Read::Message(logon, error)) => (logon, error),
        Ok(Read::Closed) => return,
        Ok(Read::Idle) | Err(_) => {
            keys.stats().deadlines.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return;
        }
    };
    let Some((mut connection, outbox, _hold)) = self::logon(&shared, logon, error, &mut write, &keys).await else {
        let _ = write.shutdown().await;
        return;
    };
    let core = Arc::clone(&connection.core);
    tokio::spawn(write_loop(Arc::clone(&core), outbox, write));
    connection.run(&mut reader).await;
    core.detach(connection.id);
    connection.market.stop_all();
}

/// Writes queued messages: one fsync of the store per batch, then the bytes.
async fn write_loop(core: Arc<SessionCore>, mut outbox: mpsc::Receiver<Vec<u8>>, mut write: EdgeWrite) {
    let mut batch = Vec::with_capacity(READ_CHUNK);
    while let Some(first) = outbox.recv().await {
        batch.clear();
        batch.extend_from_slice(&first);
        while batch.len() < WRITE_BATCH_MAX {
            match outbox.try_recv() {
                Ok(more) => batch.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if !core.sync().await {
            break;
        }
        // The flush matters under TLS: the session may keep the last record buffered
        // when the socket was full.
        if write.write_all(&batch).await.is_err() || write.flush().await.is_err() {
            break;
        }
    }
    let _ = write.shutdown().await;
}

/// Handles the Logon that opens a connection: checks, the key upstream, sequence
/// numbers, and attaches the connection. `None`: the connection is to be closed (a
/// Logout was written if the session could be identified).
async fn logon(
    shared: &Arc<Shared>,
    logon: Message,
    error: Option<FieldError>,
    write: &mut EdgeWrite,
    keys: &Arc<bourse_port::KeyConnections>,
) -> Option<(Connection, mpsc::Receiver<Vec<u8>>, bourse_port::KeyHold)> {
    let config = &shared.config;
    let LogonFields { their_id, our_id, heartbeat, seq, key, reset } =
        match check_logon(&logon, error.as_ref(), &config.comp_id) {
            Ok(fields) => fields,
            Err(LogonRefusal::Close) => return None,
            Err(LogonRefusal::Logout { their_id, our_id, text }) => {
                let _ = write.write_all(&logout_unknown(their_id, our_id, text)).await;
                return None;
            }
        };
    let refuse_unknown = |text: &str| logout_unknown(their_id, our_id, text);
    // Counted against its key before the key is proven upstream: a key that logs on
    // without end is refused here, without costing the gateway a session.
    let hold = match keys.take(&key) {
        Ok(hold) => hold,
        Err(text) => {
            let _ = write.write_all(&refuse_unknown(&text)).await;
            return None;
        }
    };
    let upstream = match prove_key(shared, their_id, key.clone()).await {
        Ok(upstream) => upstream,
        Err(text) => {
            let _ = write.write_all(&refuse_unknown(&text)).await;
            return None;
        }
    };
    // Bound only once proven, so an invalid key cannot claim a CompID.
    match crate::store::bind_owner(&config.data, their_id, our_id, &key) {
        Ok(true) => {}
        Ok(false) => {
            let _ = write.write_all(&refuse_unknown("this SenderCompID belongs to another API key")).await;
            return None;
        }
        Err(error) => {
            tracing::error!(their_id, %error, "FIX: the session's owner file cannot be written");
            return None;
        }
    }
    let core = match session_core(shared, their_id) {
        Ok(core) => core,
        Err(error) => {
            tracing::error!(their_id, %error, "FIX: the session store cannot be opened");
            return None;
        }
    };
    if let Some((upstream, events)) = upstream {
        install_upstream(&core, upstream, events).await;
    }
    let refuse = |core: &SessionCore, text: &str| {
        let mut state = core.lock();
        let seq = state.store.next_sender();
        let mut logout = Message::new(msg::LOGOUT);
        logout.push(tags::TEXT, text);
        let bytes = core.with_header(seq, &logout, None).encode();
        let _ = state.store.record_sent(seq, None).and_then(|()| state.store.sync());
        tracing::warn!(session = %core.their_id, text, "FIX Logon refused");
        bytes
    };
    let (outbox_tx, outbox) = mpsc::channel(core.outbox_max);
    let kill = Arc::new(Notify::new());
    let attached = attach(
        &core,
        seq,
        reset,
        heartbeat,
        Conn { id: 0, outbox: outbox_tx, kill: Arc::clone(&kill), last_sent: Instant::now() },
    );
    let (id, resend_until, upstream) = match attached {
        Ok(attached) => attached,
        Err(text) => {
            let bytes = refuse(&core, &text);
            let _ = write.write_all(&bytes).await;
            return None;
        }
    };
    tracing::info!(session = %core.their_id, reset, seq, "FIX logon");
    let connection = Connection {
        market: crate::market::Subscriptions::new(Arc::clone(&core), upstream),
        core,
        id,
        kill,
        heartbeat,
        last_received: Instant::now(),
        test_request: None,
        resend_until,
        shutdown: shared.shutdown.clone(),
        keys: Arc::clone(keys),
    };
    Some((connection, outbox, hold))
}

/// What a Logon says, checked.
#[derive(Debug)]
pub(crate) struct LogonFields<'a> {
    /// Their SenderCompID (not empty) and our CompID.
    pub their_id: &'a str,
    pub our_id: &'a str,
    /// HeartBtInt (108), 1 to 3600 s.
    pub heartbeat: Duration,
    pub seq: u64,
    /// The API key: Password (554), else RawData (96).
    pub key: String,
    /// ResetSeqNumFlag (141).
    pub reset: bool,
}

/// Why a Logon is refused.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LogonRefusal<'a> {
    /// Not a valid Logon for this acceptor: closed without a word.
    Close,
    /// A Logout with this text (see [`logout_unknown`]), then closed.
    Logout { their_id: &'a str, our_id: &'a str, text: &'static str },
}

/// The checks of the first message of a connection that need neither the store nor
/// the upstream: a Logon (decoded without error) to `comp_id`, with a HeartBtInt, a
/// MsgSeqNum and a key.
pub(crate) fn check_logon<'a>(
    logon: &'a Message,
    error: Option<&FieldError>,
    comp_id: &str,
) -> Result<LogonFields<'a>, LogonRefusal<'a>> {
    if error.is_some() || logon.msg_type() != msg::LOGON {
        tracing::warn!(?error, msg_type = logon.msg_type(), "FIX: the first message is not a valid Logon; closing");
        return Err(LogonRefusal::Close);
    }
    let (Some(their_id), Some(our_id)) = (logon.get_str(tags::SENDER_COMP_ID), logon.get_str(tags::TARGET_COMP_ID))
    else {
        tracing::warn!("FIX: Logon without SenderCompID or TargetCompID; closing");
        return Err(LogonRefusal::Close);
    };
    if our_id != comp_id || their_id.is_empty() {
        tracing::warn!(their_id, our_id, "FIX: Logon for another CompID; closing");
        return Err(LogonRefusal::Close);
    }
    let refuse = |text| Err(LogonRefusal::Logout { their_id, our_id, text });
    let heartbeat = match logon.get_u64(tags::HEART_BT_INT) {
        Ok(Some(secs @ 1..=3_600)) => Duration::from_secs(secs),
        _ => return refuse("HeartBtInt (108) must be 1 to 3600 seconds"),
    };
    let seq = match logon.get_u64(tags::MSG_SEQ_NUM) {
        Ok(Some(seq)) => seq,
        _ => return refuse("MsgSeqNum (34) missing or not a number"),
    };
    let key = logon.get_str(tags::PASSWORD).or_else(|| logon.get_str(tags::RAW_DATA)).map(str::to_owned);
    let Some(key) = key else {
        return refuse("Logon needs the API key in Password (554) or RawData (96)");
    };
    let reset = logon.flag(tags::RESET_SEQ_NUM_FLAG);
    Ok(LogonFields { their_id, our_id, heartbeat, seq, key, reset })
}

/// The Logout refusing a Logon before its key is proven: nothing touches a session's
/// store until then, so it has MsgSeqNum 1 and no store records it.
pub(crate) fn logout_unknown(their_id: &str, our_id: &str, text: &str) -> Vec<u8> {
    tracing::warn!(their_id, text, "FIX Logon refused");
    let mut logout = Message::new(msg::LOGOUT);
    logout.push(tags::SENDER_COMP_ID, our_id).push(tags::TARGET_COMP_ID, their_id).push(tags::MSG_SEQ_NUM, "1");
    logout.push(tags::SENDING_TIME, utc_timestamp(now_ns())).push(tags::TEXT, text);
    logout.encode()
}

/// Checks the Logon's sequence numbers (resetting them on ResetSeqNumFlag), attaches
/// `conn` and answers with Logon, and a ResendRequest when the Logon's seq is ahead.
/// Returns the connection's id, the seq a resend must reach, and the upstream; or the
/// text of the Logout that refuses the Logon.
fn attach(
    core: &SessionCore,
    seq: u64,
    reset: bool,
    heartbeat: Duration,
    mut conn: Conn,
) -> Result<(u64, Option<u64>, Arc<Upstream>), String> {
    let mut state = core.lock();
    if state.conn.is_some() {
        return Err("this session is already logged on from another connection".into());
    }
    if reset {
        if seq != 1 {
            return Err("ResetSeqNumFlag=Y needs MsgSeqNum 1".into());
        }
        if let Err(error) = state.store.reset() {
            tracing::error!(session = %core.their_id, %error, "FIX store reset failed");
            return Err("the session store cannot be reset".into());
        }
    }
    let expected = state.store.next_target();
    if seq < expected {
        return Err(format!("MsgSeqNum too low, expecting {expected} but received {seq}"));
    }
    let upstream = state.upstream.clone().ok_or("no upstream session")?;
    state.conn_ids += 1;
    conn.id = state.conn_ids;
    let id = conn.id;
    state.conn = Some(conn);
    let mut reply = Message::new(msg::LOGON);
    reply.push(tags::ENCRYPT_METHOD, "0").push_display(tags::HEART_BT_INT, heartbeat.as_secs());
    if reset {
        reply.push(tags::RESET_SEQ_NUM_FLAG, "Y");
    }
    core.send_locked(&mut state, reply);
    if seq == expected {
        if let Err(error) = state.store.set_next_target(seq + 1) {
            tracing::error!(session = %core.their_id, %error, "FIX store write failed");
        }
        return Ok((id, None, upstream));
    }
    // The Logon itself is part of the gap the counterparty fills.
    let mut request = Message::new(msg::RESEND_REQUEST);
    request.push_display(tags::BEGIN_SEQ_NO, expected).push(tags::END_SEQ_NO, "0");
    core.send_locked(&mut state, request);
    Ok((id, Some(seq), upstream))
}

/// The session of `their_id`, opened (store replayed) on first use.
fn session_core(shared: &Shared, their_id: &str) -> std::io::Result<Arc<SessionCore>> {
    let mut sessions = shared.sessions.lock().expect("sessions lock");
    if let Some(core) = sessions.get(their_id) {
        return Ok(Arc::clone(core));
    }
    let core = Arc::new(SessionCore::open(shared, their_id)?);
    sessions.insert(their_id.to_owned(), Arc::clone(&core));
    Ok(core)
}

/// Proves `key` upstream: `None` when the session already has a live upstream for it,
/// else a new upstream session (which the caller installs).
async fn prove_key(
    shared: &Shared,
    their_id: &str,
    key: String,
) -> Result<Option<(Upstream, bourse_client::Events)>, String> {
    let existing = shared.sessions.lock().expect("sessions lock").get(their_id).and_then(|core| core.upstream());
    if let Some(upstream) = existing {
        if upstream.key == key && !upstream.ended.load(Ordering::Acquire) {
            return Ok(None);
        }
    }
    Upstream::connect(&shared.config.upstream, &shared.catalog, key).await.map(Some)
}

/// Gives `core` a new upstream session, then asks the exchange about the orders the
/// session's reports left open: fills and cancellations an earlier upstream session
/// would have reported (before a restart, say) are reported now.
async fn install_upstream(core: &Arc<SessionCore>, upstream: Upstream, events: bourse_client::Events) {
    let upstream = Arc::new(upstream);
    core.lock().upstream = Some(Arc::clone(&upstream));
    tokio::spawn(crate::orders::pump_events(Arc::downgrade(core), Arc::clone(&upstream), events));
    crate::orders::reconcile(core, &upstream).await;
}

/// What the reader of a logged-on connection does with an inbound message, decided
/// from its header, its decode error and the MsgSeqNum expected next alone (the rules
/// of the module header).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Inbound {
    /// A Logout with this text, then the end: MsgSeqNum missing or unreadable, or too
    /// low without PossDupFlag.
    Close(String),
    /// SenderCompID or TargetCompID not the session's: a Reject, a Logout, the end.
    WrongCompId { seq: u64 },
    /// SequenceReset in reset mode, whatever its MsgSeqNum: see [`reset_target`].
    Reset { seq: u64 },
    /// Ahead of the expected seq: a ResendRequest (once), the message dropped.
    TooHigh { seq: u64 },
    /// Below the expected seq with PossDupFlag: ignored.
    Duplicate,
    /// The expected seq but malformed: a Reject, and counted.
    Malformed { seq: u64, error: FieldError },
    /// The expected seq: processed.
    InSequence { seq: u64 },
}

/// Classifies an inbound message (see [`Inbound`]).
pub(crate) fn inbound(
    message: &Message,
    error: Option<FieldError>,
    their_id: &str,
    our_id: &str,
    expected: u64,
) -> Inbound {
    let seq = match message.get_u64(tags::MSG_SEQ_NUM) {
        Ok(Some(seq)) => seq,
        _ => return Inbound::Close("MsgSeqNum (34) missing or not a number".into()),
    };
    if message.get_str(tags::SENDER_COMP_ID) != Some(their_id) || message.get_str(tags::TARGET_COMP_ID) != Some(our_id)
    {
        return Inbound::WrongCompId { seq };
    }
    if message.msg_type() == msg::SEQUENCE_RESET && !message.flag(tags::GAP_FILL_FLAG) && error.is_none() {
        return Inbound::Reset { seq };
    }
    if seq > expected {
        return Inbound::TooHigh { seq };
    }
    if seq < expected {
        if message.flag(tags::POSS_DUP_FLAG) {
            return Inbound::Duplicate;
        }
        return Inbound::Close(format!("MsgSeqNum too low, expecting {expected} but received {seq}"));
    }
    match error {
        Some(error) => Inbound::Malformed { seq, error },
        None => Inbound::InSequence { seq },
    }
}

/// SequenceReset in reset mode: the next expected seq becomes NewSeqNo, never lower
/// than `expected` (an error is the Reject).
pub(crate) fn reset_target(message: &Message, expected: u64) -> Result<u64, FieldError> {
    match message.require_u64(tags::NEW_SEQ_NO)? {
        new if new >= expected => Ok(new),
        new => Err(FieldError::new(
            RejectReason::ValueIncorrect,
            Some(tags::NEW_SEQ_NO),
            format!("NewSeqNo {new} is below the expected {expected}"),
        )),
    }
}

/// SequenceReset-GapFill with MsgSeqNum `seq`: the next expected seq, NewSeqNo, which
/// must move it forward (an error is the Reject).
pub(crate) fn gap_fill_target(message: &Message, seq: u64) -> Result<u64, FieldError> {
    match message.require_u64(tags::NEW_SEQ_NO)? {
        new if new > seq => Ok(new),
        _ => Err(FieldError::new(
            RejectReason::ValueIncorrect,
            Some(tags::NEW_SEQ_NO),
            "a gap fill must move the seq forward",
        )),
    }
}

/// A ResendRequest's BeginSeqNo and EndSeqNo (0 when absent or unreadable).
pub(crate) fn resend_range(message: &Message) -> (u64, u64) {
    let begin = message.get_u64(tags::BEGIN_SEQ_NO).ok().flatten().unwrap_or(0);
    let end = message.get_u64(tags::END_SEQ_NO).ok().flatten().unwrap_or(0);
    (begin, end)
}

/// The seqs a ResendRequest for `begin..=end` (0: to the last) replays when `last` is
/// the last seq sent: none when the range is empty.
pub(crate) fn resend_bounds(begin: u64, end: u64, last: u64) -> Option<(u64, u64)> {
    let end = if end == 0 || end > last { last } else { end };
    (begin != 0 && begin <= end).then_some((begin, end))
}

/// The Reject (35=3) of message `seq` of type `ref_msg_type` ("" when unknown).
pub(crate) fn reject_message(seq: u64, ref_msg_type: &str, error: &FieldError) -> Message {
    let mut reject = Message::new(msg::REJECT);
    reject.push_display(tags::REF_SEQ_NUM, seq);
    if let Some(tag) = error.tag {
        reject.push_display(tags::REF_TAG_ID, tag);
    }
    if !ref_msg_type.is_empty() {
        reject.push(tags::REF_MSG_TYPE, ref_msg_type);
    }
    reject.push_display(tags::SESSION_REJECT_REASON, error.reason as u32).push(tags::TEXT, &error.text);
    reject
}

/// The BusinessMessageReject (35=j) of an in-sequence message of a type this acceptor
/// does not serve.
pub(crate) fn unsupported(seq: u64, msg_type: &str) -> Message {
    let mut reject = Message::new(msg::BUSINESS_MESSAGE_REJECT);
    reject
        .push_display(tags::REF_SEQ_NUM, seq)
        .push(tags::REF_MSG_TYPE, msg_type)
        .push(tags::BUSINESS_REJECT_REASON, "3")
        .push(tags::TEXT, format!("MsgType {msg_type} is not supported"));
    reject
}

/// What one message asks the reader to do next.
enum Flow {
    Continue,
    Close,
}

/// The reader side of a logged-on connection.
pub(crate) struct Connection {
    core: Arc<SessionCore>,
    id: u64,
    kill: Arc<Notify>,
    heartbeat: Duration,
    last_received: Instant,
    /// A TestRequest we sent and when, while unanswered.
    test_request: Option<(String, Instant)>,
    /// We asked for a resend up to this seq (at least) and have not got there yet.
    resend_until: Option<u64>,
    market: crate::market::Subscriptions,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// The listener's counters (a connection ended for silence is counted).
    keys: Arc<bourse_port::KeyConnections>,
}

impl Connection {
    async fn run(&mut self, reader: &mut Reader) {
        let tick = self.heartbeat.min(Duration::from_secs(1));
        loop {
            let mut shutdown = self.shutdown.clone();
            let kill = Arc::clone(&self.kill);
            let read = tokio::select! {
                biased;
                () = kill.notified() => return,
                _ = shutdown.wait_for(|stop| *stop) => None,
                read = reader.next(tick) => Some(read),
            };
            let Some(read) = read else {
                self.logout("the exchange is shutting down");
                return;
            };
            match read {
                Read::Closed => return,
                Read::Idle => {}
                Read::Message(message, error) => {
                    self.last_received = Instant::now();
                    if let Flow::Close = self.on_message(message, error).await {
                        return;
                    }
                }
            }
            if let Flow::Close = self.keep_alive() {
                return;
            }
        }
    }

    /// Heartbeats when we have been quiet, a TestRequest when they have, and the end
    /// when a TestRequest went unanswered for a heartbeat interval.
    fn keep_alive(&mut self) -> Flow {
        let now = Instant::now();
        if self.test_request.as_ref().is_some_and(|(_, sent)| self.last_received > *sent) {
            // Anything received answers that the counterparty is alive.
            self.test_request = None;
        }
        if let Some((_, sent)) = &self.test_request {
            if now.duration_since(*sent) >= self.heartbeat {
                self.logout("no answer to TestRequest");
                self.keys.stats().idle_closed.fetch_add(1, Ordering::Relaxed);
                return Flow::Close;
            }
        } else if now.duration_since(self.last_received) >= self.heartbeat + self.heartbeat / 5 {
            let id = format!("T{}", now_ns());
            let mut request = Message::new(msg::TEST_REQUEST);
            request.push(tags::TEST_REQ_ID, &id);
            self.core.send(request);
            self.test_request = Some((id, now));
        }
        match self.core.idle_since(self.id) {
            Some(last_sent) if now.duration_since(last_sent) >= self.heartbeat => {
                self.core.send(Message::new(msg::HEARTBEAT));
                Flow::Continue
            }
            Some(_) => Flow::Continue,
            None => Flow::Close,
        }
    }

    fn logout(&self, text: &str) {
        let mut logout = Message::new(msg::LOGOUT);
        logout.push(tags::TEXT, text);
        self.core.send(logout);
        tracing::info!(session = %self.core.their_id, text, "FIX logout");
    }

    fn reject(&self, seq: u64, ref_msg_type: &str, error: &FieldError) {
        self.core.send(reject_message(seq, ref_msg_type, error));
    }

    async fn on_message(&mut self, message: Message, error: Option<FieldError>) -> Flow {
        let msg_type = message.msg_type().to_owned();
        let expected = self.core.next_target();
        match inbound(&message, error, &self.core.their_id, &self.core.our_id, expected) {
            Inbound::Close(text) => {
                self.logout(&text);
                Flow::Close
            }
            Inbound::WrongCompId { seq } => {
                self.reject(
                    seq,
                    &msg_type,
                    &FieldError::new(RejectReason::CompIdProblem, Some(tags::SENDER_COMP_ID), "CompID problem"),
                );
                self.logout("SenderCompID or TargetCompID does not match the session");
                Flow::Close
            }
            Inbound::Reset { seq } => self.sequence_reset(seq, &message),
            Inbound::TooHigh { seq } => self.too_high(seq, expected, &msg_type, &message),
            Inbound::Duplicate => Flow::Continue,
            Inbound::Malformed { seq, error } => {
                self.reached(seq);
                self.reject(seq, &msg_type, &error);
                self.core.set_next_target(seq + 1);
                Flow::Continue
            }
            Inbound::InSequence { seq } => {
                self.reached(seq);
                let (flow, next) = self.dispatch(seq, &msg_type, &message).await;
                self.core.set_next_target(next);
                flow
            }
        }
    }

    /// An in-sequence message arrived: a resend we asked for is over once it reaches
    /// the seq that made us ask.
    fn reached(&mut self, seq: u64) {
        if self.resend_until.is_some_and(|until| seq >= until) {
            self.resend_until = None;
        }
    }

    /// A message ahead of the expected seq: ask once for the missing ones (the resend
    /// brings this one again), but answer a ResendRequest and a Logout at once.
    fn too_high(&mut self, seq: u64, expected: u64, msg_type: &str, message: &Message) -> Flow {
        if msg_type == msg::RESEND_REQUEST {
            self.on_resend_request(message);
        }
        if msg_type == msg::LOGOUT {
            self.logout("logout confirmed");
            return Flow::Close;
        }
        if self.resend_until.is_none() {
            let mut request = Message::new(msg::RESEND_REQUEST);
            request.push_display(tags::BEGIN_SEQ_NO, expected).push(tags::END_SEQ_NO, "0");
            self.core.send(request);
            self.resend_until = Some(seq);
        }
        Flow::Continue
    }

    /// SequenceReset in reset mode: the expected seq becomes NewSeqNo, never lower.
    fn sequence_reset(&mut self, seq: u64, message: &Message) -> Flow {
        match reset_target(message, self.core.next_target()) {
            Ok(new) => self.core.set_next_target(new),
            Err(error) => self.reject(seq, msg::SEQUENCE_RESET, &error),
        }
        Flow::Continue
    }

    fn on_resend_request(&self, message: &Message) {
        let (begin, end) = resend_range(message);
        self.core.resend(begin, end);
    }

    /// Processes an in-sequence message; returns the next expected seq.
    async fn dispatch(&mut self, seq: u64, msg_type: &str, message: &Message) -> (Flow, u64) {
        let next = seq + 1;
        match msg_type {
            msg::HEARTBEAT => {
                if let Some((id, _)) = &self.test_request {
                    if message.get_str(tags::TEST_REQ_ID) == Some(id.as_str()) {
                        self.test_request = None;
                    }
                }
            }
            msg::TEST_REQUEST => {
                let mut heartbeat = Message::new(msg::HEARTBEAT);
                if let Some(id) = message.get(tags::TEST_REQ_ID) {
                    heartbeat.push(tags::TEST_REQ_ID, id);
                }
                self.core.send(heartbeat);
            }
            msg::RESEND_REQUEST => self.on_resend_request(message),
            msg::REJECT => {
                tracing::warn!(session = %self.core.their_id, text = message.get_str(tags::TEXT), "FIX Reject received")
            }
            msg::SEQUENCE_RESET => match gap_fill_target(message, seq) {
                Ok(new) => return (Flow::Continue, new),
                Err(error) => self.reject(seq, msg_type, &error),
            },
            msg::LOGOUT => {
                self.core.set_next_target(next);
                self.logout("logout confirmed");
                return (Flow::Close, next);
            }
            msg::LOGON => {
                self.logout("already logged on");
                return (Flow::Close, next);
            }
            msg::NEW_ORDER_SINGLE | msg::ORDER_CANCEL_REQUEST | msg::ORDER_CANCEL_REPLACE_REQUEST => {
                if let Err(error) = crate::orders::on_message(&self.core, msg_type, message).await {
                    self.reject(seq, msg_type, &error);
                }
            }
            msg::MARKET_DATA_REQUEST => {
                if let Err(error) = self.market.on_request(message).await {
                    self.reject(seq, msg_type, &error);
                }
            }
            msg::REQUEST_FOR_POSITIONS => {
                if let Err(error) = crate::positions::on_request(&self.core, message).await {
                    self.reject(seq, msg_type, &error);
                }
            }
            _ => self.core.send(unsupported(seq, msg_type)),
        }
        (Flow::Continue, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_is_synced_inline_only_after_fast_syncs_in_a_row() {
        let pace = SyncPace::default();
        let fast = FAST_SYNC / 2;
        let slow = FAST_SYNC * 10;
        for _ in 0..FAST_SYNCS_INLINE - 1 {
            pace.record(fast);
            assert!(!pace.inline());
        }
        pace.record(fast);
        assert!(pace.inline());
        // Many more fast ones: still inline, and one slow sync ends it at once.
        for _ in 0..100 {
            pace.record(fast);
        }
        assert!(pace.inline());
        pace.record(slow);
        assert!(!pace.inline());
        // A slow one in the middle of a run starts the count again.
        for _ in 0..FAST_SYNCS_INLINE - 1 {
            pace.record(fast);
        }
        pace.record(slow);
        for _ in 0..FAST_SYNCS_INLINE - 1 {
            pace.record(fast);
        }
        assert!(!pace.inline());
        pace.record(fast);
        assert!(pace.inline());
    }
}

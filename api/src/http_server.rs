//! The HTTP/1.1 server loop: connections accepted under a bound, slow and idle clients shed.
//!
//! - At most [`ServerLimits::connections_max`] connections are open. When a new one arrives at
//!   the bound, one is closed to make room: of those not working (no request in flight: a client
//!   that has not finished sending its headers, or a keep-alive connection between requests; or
//!   a request still waiting for its body, of which nothing is done yet, so dropping it loses
//!   nothing), the one that has waited longest. When every connection is busy working, the new one is
//!   answered `503 server_busy` with `Retry-After` and closed. So partial requests cannot lock normal
//!   clients out (the descriptors they hold are reclaimed first), and the process never runs out
//!   of file descriptors because of them.
//! - A client has [`ServerLimits::header_read_timeout`] to send a request's headers: from the
//!   connection's opening for its first request, from the first byte for a later one. A
//!   keep-alive connection with nothing sent for longer than [`ServerLimits::idle_timeout`] is
//!   closed. (hyper's own header timer is not used: it also runs while a keep-alive connection
//!   waits for its next request, which would cut every idle connection at the header deadline.)
//! - Body reads have their own deadline in the extractors (`json::Json`, `408`).
//!
//! Every limit is a named setting of `gpunex serve` (`docs/api.md`, "Limits").

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tower::ServiceExt;

use crate::metrics::ConnectionStats;

/// How many clients, and how slow, the server tolerates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServerLimits {
    pub connections_max: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    /// Requests one token may have in flight at once; more are `429 too_many_requests`.
    pub requests_in_flight_per_token_max: usize,
}

impl Default for ServerLimits {
    fn default() -> Self {
        ServerLimits {
            connections_max: 1_024,
            header_read_timeout: Duration::from_secs(10),
            body_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(60),
            requests_in_flight_per_token_max: 64,
        }
    }
}

/// The deadline for reading a request's body, set on every request by the server loop (the
/// body extractors read it; a request without one, in tests through `oneshot`, gets the default).
#[derive(Debug, Clone, Copy)]
pub struct BodyReadTimeout(pub Duration);

/// The count of this connection's requests waiting for their bodies, for the extractors: a
/// connection only waiting for bodies may be closed when the server is full.
#[derive(Debug, Clone)]
pub struct BodyReading(Arc<AtomicUsize>);

impl BodyReading {
    /// Counts one body being read until the returned guard is dropped.
    pub fn start(&self) -> BodyReadingGuard {
        self.0.fetch_add(1, Ordering::SeqCst);
        BodyReadingGuard(self.0.clone())
    }
}

pub struct BodyReadingGuard(Arc<AtomicUsize>);

impl Drop for BodyReadingGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Requests in flight per token, bounded: one token cannot take every worker.
#[derive(Clone, Default)]
pub struct TokenLoad {
    counts: Arc<Mutex<HashMap<uuid::Uuid, usize>>>,
}

/// One request counted against its token until dropped.
pub struct TokenSlot {
    load: TokenLoad,
    token_id: uuid::Uuid,
}

impl TokenLoad {
    /// A slot for one more request of `token_id`, or `None` when it has `max` in flight.
    pub fn enter(&self, token_id: uuid::Uuid, max: usize) -> Option<TokenSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let count = counts.entry(token_id).or_insert(0);
        if *count >= max {
            return None;
        }
        *count += 1;
        Some(TokenSlot {
            load: self.clone(),
            token_id,
        })
    }
}

impl Drop for TokenSlot {
    fn drop(&mut self) {
        let mut counts = self.load.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = counts.get_mut(&self.token_id) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.token_id);
            }
        }
    }
}

/// How long a shutdown waits for in-flight requests before closing their connections.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);
/// How long the accept loop waits at a time for a closing connection to free its slot.
const ROOM_WAIT: Duration = Duration::from_millis(100);
/// How long a full server with no connection to spare waits before answering `server_busy`.
const BUSY_AFTER: Duration = Duration::from_secs(1);
/// How often it looks again meanwhile.
const BUSY_POLL: Duration = Duration::from_millis(10);
/// How long a `server_busy` answer reads what the client sent before closing, so the close does
/// not reset the connection before the client reads the answer.
const BUSY_DRAIN: Duration = Duration::from_millis(500);
/// A connection that started waiting this recently is closed to make room only when no other
/// can be: a client sending a request at a normal pace is not cut off.
const EVICTION_GRACE: Duration = Duration::from_secs(1);
/// How often idle connections are looked for.
const IDLE_SWEEP_INTERVAL: Duration = Duration::from_millis(500);
/// How long `accept` pauses when the process is out of descriptors anyway.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// One open connection as the table sees it.
struct Slot {
    in_flight: Arc<AtomicUsize>,
    reading_body: Arc<AtomicUsize>,
    /// Milliseconds since the table's epoch, plus one, when the client began sending the
    /// headers of a request not yet started; 0 when it is not sending any.
    headers_since_ms: Arc<AtomicU64>,
    /// Milliseconds since the table's epoch of the last request start or end.
    last_activity_ms: Arc<AtomicU64>,
    close: tokio::sync::watch::Sender<Close>,
    /// Told to close; its slot is freed when its socket is.
    closing: bool,
    peer: SocketAddr,
}

/// The open connections.
#[derive(Clone)]
struct Table {
    slots: Arc<Mutex<HashMap<u64, Slot>>>,
    next_id: Arc<AtomicU64>,
    epoch: Instant,
    limits: ServerLimits,
    /// Notified whenever a slot is freed.
    released: Arc<tokio::sync::Notify>,
    /// What `GET /metrics` reports of connections.
    stats: Arc<ConnectionStats>,
}

/// What a connection task holds of its slot.
struct Admitted {
    id: u64,
    in_flight: Arc<AtomicUsize>,
    reading_body: Arc<AtomicUsize>,
    headers_since_ms: Arc<AtomicU64>,
    last_activity_ms: Arc<AtomicU64>,
    close: tokio::sync::watch::Receiver<Close>,
}

impl Table {
    fn new(limits: ServerLimits, stats: Arc<ConnectionStats>) -> Table {
        Table {
            slots: Arc::default(),
            next_id: Arc::default(),
            epoch: Instant::now(),
            limits,
            released: Arc::default(),
            stats,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// When the table is full, tells the connection that can best spare its slot to close (the
    /// one idle or waiting for a body longest); true if room is coming (a connection is
    /// closing), false if every connection is busy working.
    fn make_room(&self) -> bool {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() < self.limits.connections_max {
            return true;
        }
        if slots.values().any(|slot| slot.closing) {
            return true;
        }
        // Among connections not working (idle, or only waiting for a body), the one waiting
        // longest; one that became so within the grace (a client mid-way through sending a
        // request at normal speed) only if there is no other.
        let now = self.now_ms();
        let grace_ms = u64::try_from(EVICTION_GRACE.as_millis()).unwrap_or(u64::MAX);
        let idlest = slots
            .iter()
            .filter(|(_, slot)| {
                let in_flight = slot.in_flight.load(Ordering::SeqCst);
                in_flight == 0 || in_flight == slot.reading_body.load(Ordering::SeqCst)
            })
            .map(|(id, slot)| {
                let since = slot.last_activity_ms.load(Ordering::SeqCst);
                (now.saturating_sub(since) < grace_ms, since, *id)
            })
            .min()
            .map(|(_, _, id)| id);
        match idlest.and_then(|id| slots.get_mut(&id)) {
            Some(slot) => {
                slot.closing = true;
                tracing::debug!(
                    peer = %slot.peer,
                    in_flight = slot.in_flight.load(Ordering::SeqCst),
                    reading_body = slot.reading_body.load(Ordering::SeqCst),
                    "closing a connection to make room"
                );
                let _ = slot.close.send(Close::Idle);
                self.stats.closed_for_room.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    /// A slot for a new connection, or `None` when the table is full.
    fn admit(&self, peer: SocketAddr) -> Option<Admitted> {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        if slots.len() >= self.limits.connections_max {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let (close, watch) = tokio::sync::watch::channel(Close::Open);
        let slot = Slot {
            in_flight: Arc::default(),
            reading_body: Arc::default(),
            // A new connection owes its first request's headers from now.
            headers_since_ms: Arc::new(AtomicU64::new(self.now_ms() + 1)),
            last_activity_ms: Arc::new(AtomicU64::new(self.now_ms())),
            close,
            closing: false,
            peer,
        };
        let admitted = Admitted {
            id,
            in_flight: slot.in_flight.clone(),
            reading_body: slot.reading_body.clone(),
            headers_since_ms: slot.headers_since_ms.clone(),
            last_activity_ms: slot.last_activity_ms.clone(),
            close: watch,
        };
        slots.insert(id, slot);
        self.stats.accepted.fetch_add(1, Ordering::Relaxed);
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        Some(admitted)
    }

    /// Frees a connection's slot once its socket is closed.
    fn release(&self, id: u64) {
        let removed = self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        if removed.is_some() {
            self.stats.open.fetch_sub(1, Ordering::Relaxed);
        }
        self.released.notify_waiters();
    }

    /// Closes connections idle longer than the idle timeout, and those whose request headers
    /// have not all arrived within the header deadline.
    fn sweep(&self) {
        let idle_ms = u64::try_from(self.limits.idle_timeout.as_millis()).unwrap_or(u64::MAX);
        let headers_ms =
            u64::try_from(self.limits.header_read_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = self.now_ms();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        for slot in slots.values_mut() {
            if slot.closing || slot.in_flight.load(Ordering::SeqCst) != 0 {
                continue;
            }
            let headers_since = slot.headers_since_ms.load(Ordering::SeqCst);
            let counter =
                if headers_since != 0 && now.saturating_sub(headers_since - 1) > headers_ms {
                    &self.stats.closed_header_timeout
                } else if headers_since == 0
                    && now.saturating_sub(slot.last_activity_ms.load(Ordering::SeqCst)) > idle_ms
                {
                    &self.stats.closed_idle
                } else {
                    continue;
                };
            slot.closing = true;
            let _ = slot.close.send(Close::Idle);
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn close_all(&self) {
        for slot in self
            .slots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let _ = slot.close.send(Close::Shutdown);
        }
    }

    fn open(&self) -> usize {
        self.slots.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// A request in flight on a connection, from its headers to the end of its response body.
struct Busy {
    in_flight: Arc<AtomicUsize>,
    last_activity_ms: Arc<AtomicU64>,
    epoch: Instant,
}

impl Busy {
    fn start(
        in_flight: Arc<AtomicUsize>,
        last_activity_ms: Arc<AtomicU64>,
        epoch: Instant,
    ) -> Busy {
        in_flight.fetch_add(1, Ordering::SeqCst);
        let busy = Busy {
            in_flight,
            last_activity_ms,
            epoch,
        };
        busy.touch();
        busy
    }

    fn touch(&self) {
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_activity_ms.store(now, Ordering::SeqCst);
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.touch();
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Why a connection is told to close: it was idle and its slot is needed or it idled too long
/// (closed at once: nothing is in flight), or the server is stopping (graceful).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    Open,
    Idle,
    Shutdown,
}

/// The answer to a connection the server has no room for: a `503 server_busy` problem document.
fn busy_answer() -> Vec<u8> {
    let problem = gpunex_wire::Problem {
        type_uri: format!(
            "{}{}",
            crate::error::ERROR_TYPE_BASE,
            crate::error::ErrorCode::ServerBusy
        ),
        title: "service unavailable".to_owned(),
        status: crate::error::status_of(crate::error::ErrorCode::ServerBusy).as_u16(),
        detail: "every connection the server allows is busy; retry in a second".to_owned(),
        code: crate::error::ErrorCode::ServerBusy.as_str().to_owned(),
        errors: Vec::new(),
    };
    let body = serde_json::to_vec(&problem).unwrap_or_default();
    let mut answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: {}\r\nRetry-After: {}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n",
        crate::error::PROBLEM_CONTENT_TYPE,
        crate::error::RETRY_AFTER_SECONDS,
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    answer
}

/// Serves `app` on `listener` until `shutdown` resolves, then lets in-flight requests finish.
/// Connection figures go to `stats` (`AppState::metrics`).
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: ServerLimits,
    stats: Arc<ConnectionStats>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let table = Table::new(limits, stats);
    let busy = busy_answer();
    let sweeper = {
        let table = table.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(IDLE_SWEEP_INTERVAL);
            loop {
                tick.tick().await;
                table.sweep();
            }
        })
    };
    let mut shutdown = std::pin::pin!(shutdown);
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Accept only with a slot free, so the sockets open never exceed the bound by more than
        // the one answered `server_busy`.
        // When every connection is busy, wait a little for one to finish or start waiting on a
        // body (clients queue in the listen backlog meanwhile) before answering `server_busy`.
        let full_since = Instant::now();
        while table.open() >= limits.connections_max && full_since.elapsed() < BUSY_AFTER {
            if table.make_room() {
                let released = table.released.notified();
                let _ = tokio::time::timeout(ROOM_WAIT, released).await;
            } else {
                tokio::time::sleep(BUSY_POLL).await;
            }
        }
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (mut stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                tracing::warn!(%error, "cannot accept a connection");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        let Some(admitted) = table.admit(peer) else {
            tracing::warn!(%peer, open = table.open(), "no connection to spare: answered server_busy");
            table.stats.refused_busy.fetch_add(1, Ordering::Relaxed);
            let answer = busy.clone();
            tokio::spawn(async move {
                let _ = stream.write_all(&answer).await;
                let _ = stream.shutdown().await;
                let mut sink = [0_u8; 4096];
                let _ = tokio::time::timeout(BUSY_DRAIN, async {
                    while matches!(tokio::io::AsyncReadExt::read(&mut stream, &mut sink).await, Ok(n) if n > 0) {}
                })
                .await;
            });
            continue;
        };
        let table = table.clone();
        let app = app.clone();
        connections.spawn(async move {
            let id = admitted.id;
            connection(stream, peer, app, &table, admitted).await;
            table.release(id);
        });
        // Reap finished connection tasks so the set does not grow.
        while connections.try_join_next().is_some() {}
    }
    table.close_all();
    let drained = tokio::time::timeout(SHUTDOWN_GRACE, async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            open = table.open(),
            "shutdown grace ran out; closing connections"
        );
        connections.abort_all();
    }
    sweeper.abort();
    Ok(())
}

async fn connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: axum::Router,
    table: &Table,
    admitted: Admitted,
) {
    let Admitted {
        in_flight,
        reading_body,
        headers_since_ms,
        last_activity_ms,
        mut close,
        ..
    } = admitted;
    let stream = Watched {
        inner: stream,
        in_flight: in_flight.clone(),
        headers_since_ms: headers_since_ms.clone(),
        epoch: table.epoch,
    };
    let epoch = table.epoch;
    let body_read_timeout = table.limits.body_read_timeout;
    let service = tower::service_fn(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            request.extensions_mut().insert(ConnectInfo(peer));
            request
                .extensions_mut()
                .insert(BodyReadTimeout(body_read_timeout));
            request
                .extensions_mut()
                .insert(BodyReading(reading_body.clone()));
            // Held until the response's body is sent or dropped: the connection is busy till then.
            let busy = Busy::start(in_flight.clone(), last_activity_ms.clone(), epoch);
            // The headers are in.
            headers_since_ms.store(0, Ordering::SeqCst);
            let app = app.clone();
            async move {
                let response = app.oneshot(request).await?;
                Ok::<_, std::convert::Infallible>(response.map(|body| {
                    axum::body::Body::new(http_body_util::BodyExt::map_frame(body, move |frame| {
                        let _ = &busy;
                        frame
                    }))
                }))
            }
        },
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    // The header deadline is the sweep's (see the module's notes); hyper's is off.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    let conn = builder.serve_connection(
        TokioIo::new(stream),
        hyper_util::service::TowerToHyperService::new(service),
    );
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(error) = result {
                tracing::debug!(%error, %peer, "connection ended");
            }
        }
        reason = async { close.wait_for(|close| *close != Close::Open).await.map(|r| *r) } => {
            // An idle connection is dropped at once; a stopping server lets requests finish.
            if matches!(reason, Ok(Close::Shutdown)) {
                conn.as_mut().graceful_shutdown();
                let _ = tokio::time::timeout(SHUTDOWN_GRACE, conn).await;
            }
        }
    }
}

/// A connection's socket, noting when a client that has no request in flight starts sending one
/// (its first bytes start the header deadline).
struct Watched {
    inner: tokio::net::TcpStream,
    in_flight: Arc<AtomicUsize>,
    headers_since_ms: Arc<AtomicU64>,
    epoch: Instant,
}

impl tokio::io::AsyncRead for Watched {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let poll = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(poll, std::task::Poll::Ready(Ok(())))
            && buf.filled().len() > before
            && self.in_flight.load(Ordering::SeqCst) == 0
        {
            let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
            // Only the first bytes of a request start its deadline.
            let _ = self.headers_since_ms.compare_exchange(
                0,
                now.saturating_add(1),
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
        poll
    }
}

impl tokio::io::AsyncWrite for Watched {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

//! One accepted connection's life: the requests open on it, when it went idle, whether its
//! socket has been unwritable, and the task that closes it when one of those says so.
//!
//! # What "idle" means
//!
//! A connection is idle while no request is open on it: none whose response has not been
//! written to its end (or dropped). A request counts from the moment hyper hands it to the
//! service (its head complete) until its response body is finished or dropped. So an HTTP/2
//! connection that has sent only its preface, or SETTINGS and PINGs, is idle from the moment
//! it was accepted; an HTTP/1.1 connection between two requests is idle, and so is one that
//! has not finished sending a request head (its header-read timeout may close it first).
//! Bytes received do not make a connection busy: a peer that sends a PING every second with
//! no stream open is still closed after the idle timeout.
//!
//! # Why one timer per connection and no wake-up per request
//!
//! A request ending only stores the time in an atomic (when it was the last one open). The
//! connection's task sleeps until the earliest instant something could be due (the idle
//! deadline if nothing is open, the send deadline if a write is blocked, otherwise one timeout
//! from now) and re-checks when it fires: a closing decision is exact to the timer's
//! resolution, and a request costs three atomic operations and a clock read.
//!
//! # Progress, and connections that make none
//!
//! An HTTP/2 peer can keep a connection busy without taking anything from it: it opens streams
//! with a flow-control window of zero, so every answer waits for window that never comes, and
//! it opens a new stream before the send timeout resets the last one (or resets it itself). No
//! request on it ever ends as the peer wants it to, yet one is always open, so the connection
//! is never idle. So each connection also keeps the instant since which its answers have been
//! waiting on the peer with none taken: set when an answer starts waiting while none was,
//! cleared only by progress (an answer, or a frame of one, taken by the peer). A stream that
//! ends while its answer waits (reset by the peer or by the send timeout) is not progress, and
//! does not clear it: opening a new stuck stream, before or after the old one ends, does not
//! reset the connection's clock. An answer counts as taken when the stream's task gives it to
//! the connection in the same poll that made it ready (there was window for it), or when the
//! body is asked for its next frame after a data frame (the peer took the last one).
//!
//! A connection whose answers have waited on the peer for twice the send timeout with none
//! taken is dropped (its streams cannot end gracefully; a lone stuck stream is reset at one
//! send timeout, and its connection stays usable); and when a connection must go to make room
//! (the connection limit, or no file descriptor left), the one that has given nothing for the
//! longest goes: idle the longest, or making no progress the longest (its answers waiting on
//! the peer, or its socket refusing writes), whichever began first; one making no progress is
//! dropped at once. A young connection (a TLS handshake under way, a request head on its way)
//! is never picked over an older one that gives nothing.
//!
//! # Closing
//!
//! An idle connection, an evicted one (to make room under the connection limit, or to get a
//! file descriptor back) and every connection at shutdown are closed gracefully: HTTP/1.1
//! closes at once when idle or after the response in progress, HTTP/2 is sent `GOAWAY` and its
//! open streams run to their end. HTTP/2's graceful close waits for the peer to answer a PING
//! before it closes, so a peer that answers nothing would keep it open: once nothing is open,
//! a closing connection gets [`CLOSE_GRACE`] more, then its socket is dropped. A connection
//! whose socket has refused every write for the send timeout is dropped at once: the peer is
//! not reading, and nothing more can be said to it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower_service::Service;

use super::stall::StreamClock;

/// How long a connection asked to close gracefully may stay open once no request is open on
/// it, before its socket is dropped (an HTTP/2 peer that does not answer the closing PING).
pub(super) const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The timeouts a connection's task enforces.
#[derive(Clone, Copy, Debug)]
pub(super) struct ConnLimits {
    /// No request open for this long: close.
    pub(super) idle: Duration,
    /// The socket refused every write for this long: drop.
    pub(super) send: Duration,
}

/// What the accept loop and a connection's task share about that connection.
#[derive(Debug)]
pub(super) struct ConnShared {
    id: u64,
    /// The server's time origin: instants below are milliseconds since it.
    base: Instant,
    /// Requests open on the connection.
    open: AtomicUsize,
    /// When the last request open on it ended (or when it was accepted).
    idle_since_ms: AtomicU64,
    /// When a write first found the socket full, plus one (0: writes are going through).
    write_blocked_ms: AtomicU64,
    /// HTTP/2 answers now waiting on the peer (window to be sent in).
    waiting: AtomicUsize,
    /// Since when answers have waited on the peer with none taken, plus one (0: progress).
    stalled_ms: AtomicU64,
    /// Asked to close gracefully (idle, evicted or shutting down).
    close: AtomicBool,
    /// Asked to drop at once (the shutdown grace ran out).
    abort: AtomicBool,
    /// Wakes the connection's task to look at `close` and `abort`.
    wake: Notify,
}

impl ConnShared {
    fn ms_since_base(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX)
    }

    fn at(&self, ms: u64) -> Instant {
        self.base
            .checked_add(Duration::from_millis(ms))
            .unwrap_or(self.base)
    }

    /// When the connection went idle, if no request is open.
    fn idle_since(&self) -> Option<Instant> {
        if self.open.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(self.at(self.idle_since_ms.load(Ordering::Acquire)))
    }

    /// A write found the socket full (the first of a run of such writes is kept).
    pub(super) fn write_blocked(&self) {
        if self.write_blocked_ms.load(Ordering::Relaxed) == 0 {
            let now = self.ms_since_base(Instant::now()).saturating_add(1);
            self.write_blocked_ms.store(now, Ordering::Relaxed);
        }
    }

    /// A write went through.
    pub(super) fn write_went_through(&self) {
        if self.write_blocked_ms.load(Ordering::Relaxed) != 0 {
            self.write_blocked_ms.store(0, Ordering::Relaxed);
        }
    }

    fn write_blocked_since(&self) -> Option<Instant> {
        match self.write_blocked_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.at(ms - 1)),
        }
    }

    /// An HTTP/2 answer started waiting on the peer.
    fn answer_waiting(&self) {
        if self.waiting.fetch_add(1, Ordering::AcqRel) == 0
            && self.stalled_ms.load(Ordering::Relaxed) == 0
        {
            let now = self.ms_since_base(Instant::now()).saturating_add(1);
            self.stalled_ms.store(now, Ordering::Relaxed);
        }
    }

    /// An HTTP/2 answer stopped waiting on the peer: taken by it (`progress`), or its stream
    /// ended without the peer taking it.
    fn answer_not_waiting(&self, progress: bool) {
        let left = self
            .waiting
            .fetch_sub(1, Ordering::AcqRel)
            .saturating_sub(1);
        if progress {
            // Answers still waiting are counted from now.
            let since = if left > 0 {
                self.ms_since_base(Instant::now()).saturating_add(1)
            } else {
                0
            };
            self.stalled_ms.store(since, Ordering::Relaxed);
        }
    }

    /// Since when answers have waited on the peer with none taken, if one waits now.
    fn stalled_since(&self) -> Option<Instant> {
        if self.waiting.load(Ordering::Acquire) == 0 {
            return None;
        }
        match self.stalled_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => Some(self.at(ms - 1)),
        }
    }

    /// Since when the connection has made no progress: answers waiting on the peer with none
    /// taken, or a socket refusing every write.
    fn no_progress_since(&self) -> Option<Instant> {
        match (self.stalled_since(), self.write_blocked_since()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn request_started(self: &Arc<Self>) -> OpenRequest {
        self.open.fetch_add(1, Ordering::AcqRel);
        OpenRequest { conn: self.clone() }
    }
}

/// Every open connection, for the connection limit, evictions and shutdown.
#[derive(Debug)]
pub(super) struct Registry {
    base: Instant,
    conns: Mutex<Conns>,
    /// Notified when the last connection ends.
    empty: Notify,
}

#[derive(Debug, Default)]
struct Conns {
    next_id: u64,
    map: HashMap<u64, Arc<ConnShared>>,
    /// Connections not asked to close.
    live: usize,
}

/// What the accept loop does with a new connection under the connection limit.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Admit {
    /// Room for it.
    Room,
    /// The limit is reached: the connection that had given nothing for the longest (idle, or
    /// making no progress) was asked to close.
    Evicted,
    /// The limit is reached and every connection is making progress: refuse it.
    Full,
}

impl Registry {
    pub(super) fn new() -> Registry {
        Registry {
            base: Instant::now(),
            conns: Mutex::new(Conns::default()),
            empty: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Conns> {
        // Every change under the lock is a few plain assignments that cannot panic half-way.
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open connections (closing ones included).
    pub(super) fn len(&self) -> usize {
        self.lock().map.len()
    }

    /// Whether a new connection fits under `max` (live connections), evicting the connection
    /// that has given nothing for the longest (idle, or making no progress) to make room.
    pub(super) fn admit(&self, max: Option<usize>) -> Admit {
        let Some(max) = max else {
            return Admit::Room;
        };
        let mut conns = self.lock();
        if conns.live < max {
            return Admit::Room;
        }
        if Self::evict_locked(&mut conns, false) {
            Admit::Evicted
        } else {
            Admit::Full
        }
    }

    /// Asks the connection that has given nothing for the longest (idle, or making no
    /// progress) to close, with `abort` (to get a file descriptor back) or when it makes no
    /// progress by dropping its socket at once; false if every connection is busy and making
    /// progress.
    pub(super) fn evict_one(&self, abort: bool) -> bool {
        Self::evict_locked(&mut self.lock(), abort)
    }

    fn evict_locked(conns: &mut Conns, abort: bool) -> bool {
        // The connection that has given nothing for the longest: idle, or making no progress.
        // A connection making no progress cannot close gracefully (its streams never end), so
        // it is dropped; and a young one (a TLS handshake under way, a request head on its
        // way) is never picked over one that has given nothing for longer.
        let victim = conns
            .map
            .values()
            .filter(|c| !c.close.load(Ordering::Acquire))
            .filter_map(|c| match (c.idle_since(), c.no_progress_since()) {
                (Some(idle), Some(stuck)) if stuck < idle => Some((stuck, true, c)),
                (Some(idle), _) => Some((idle, false, c)),
                (None, Some(stuck)) => Some((stuck, true, c)),
                (None, None) => None,
            })
            .min_by_key(|(since, _, _)| *since)
            .map(|(_, stuck, c)| (c.clone(), stuck));
        let Some((victim, stuck)) = victim else {
            return false;
        };
        Self::mark_closing(conns, &victim);
        if abort || stuck {
            victim.abort.store(true, Ordering::Release);
        }
        victim.wake.notify_one();
        true
    }

    fn mark_closing(conns: &mut Conns, conn: &ConnShared) {
        if !conn.close.swap(true, Ordering::AcqRel) {
            conns.live -= 1;
        }
    }

    /// Registers a new connection.
    pub(super) fn open(self: &Arc<Self>) -> Arc<ConnShared> {
        let mut conns = self.lock();
        let id = conns.next_id;
        conns.next_id += 1;
        let now = Instant::now();
        let conn = Arc::new(ConnShared {
            id,
            base: self.base,
            open: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(
                u64::try_from(now.saturating_duration_since(self.base).as_millis())
                    .unwrap_or(u64::MAX),
            ),
            write_blocked_ms: AtomicU64::new(0),
            waiting: AtomicUsize::new(0),
            stalled_ms: AtomicU64::new(0),
            close: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            wake: Notify::new(),
        });
        conns.map.insert(id, conn.clone());
        conns.live += 1;
        conn
    }

    /// The connection decided to close by itself (idle, or its socket is unwritable).
    fn closing(&self, conn: &ConnShared) {
        Self::mark_closing(&mut self.lock(), conn);
    }

    /// The connection's task ended.
    fn ended(&self, conn: &ConnShared) {
        let mut conns = self.lock();
        if conns.map.remove(&conn.id).is_some() && !conn.close.load(Ordering::Acquire) {
            conns.live -= 1;
        }
        if conns.map.is_empty() {
            self.empty.notify_waiters();
        }
    }

    /// Asks every connection to close gracefully (`abort`: to drop its socket at once).
    pub(super) fn close_all(&self, abort: bool) {
        let mut conns = self.lock();
        let all: Vec<_> = conns.map.values().cloned().collect();
        for conn in all {
            Self::mark_closing(&mut conns, &conn);
            if abort {
                conn.abort.store(true, Ordering::Release);
            }
            conn.wake.notify_one();
        }
    }

    /// Waits until every connection has ended.
    pub(super) async fn all_ended(&self) {
        loop {
            let mut empty = pin!(self.empty.notified());
            empty.as_mut().enable();
            if self.lock().map.is_empty() {
                return;
            }
            empty.await;
        }
    }
}

/// Drives one connection (`conn`, closed gracefully by `graceful`) until it ends or one of its
/// limits closes it; unregisters it at the end.
pub(super) async fn drive<F, E>(
    conn: F,
    mut graceful: impl FnMut(Pin<&mut F>),
    shared: Arc<ConnShared>,
    registry: Arc<Registry>,
    limits: ConnLimits,
) -> Result<(), E>
where
    F: Future<Output = Result<(), E>>,
{
    let _ended = Ended {
        shared: &shared,
        registry: &registry,
    };
    let mut conn = pin!(conn);
    let timer = tokio::time::sleep(limits.idle.min(limits.send));
    let mut timer = pin!(timer);
    // Since when the connection has been closing gracefully.
    let mut closing: Option<Instant> = None;
    loop {
        tokio::select! {
            biased;
            ended = conn.as_mut() => return ended,
            () = shared.wake.notified() => {}
            () = timer.as_mut() => {}
        }
        let now = Instant::now();
        if shared.abort.load(Ordering::Acquire) {
            tracing::debug!("connection dropped: evicted, or the shutdown grace ran out");
            return Ok(());
        }
        if let Some(since) = shared.write_blocked_since() {
            if now.saturating_duration_since(since) >= limits.send {
                tracing::debug!(
                    blocked_ms = now.saturating_duration_since(since).as_millis(),
                    "connection dropped: the peer read nothing for the send timeout"
                );
                registry.closing(&shared);
                return Ok(());
            }
        }
        let stalled_since = shared.stalled_since();
        if let Some(since) = stalled_since {
            // Twice the send timeout: a lone stuck stream is reset first (at one send timeout),
            // and the connection stays usable; one re-armed again and again is not.
            if now.saturating_duration_since(since) >= limits.send * 2 {
                tracing::debug!(
                    stalled_ms = now.saturating_duration_since(since).as_millis(),
                    "connection dropped: the peer took none of its answers for the send timeout"
                );
                registry.closing(&shared);
                return Ok(());
            }
        }
        let idle_since = shared.idle_since();
        if closing.is_none() {
            let idle_out =
                idle_since.is_some_and(|since| now.saturating_duration_since(since) >= limits.idle);
            if idle_out || shared.close.load(Ordering::Acquire) {
                if idle_out {
                    tracing::trace!("connection idle for the idle timeout: closing");
                }
                registry.closing(&shared);
                graceful(conn.as_mut());
                closing = Some(now);
            }
        } else if idle_since.is_some_and(|since| {
            closing.is_some_and(|c| now.saturating_duration_since(since.max(c)) >= CLOSE_GRACE)
        }) {
            tracing::debug!("connection dropped: still open after a graceful close");
            return Ok(());
        }
        // Sleep until the next instant anything could be due.
        let mut next = now + limits.idle.min(limits.send);
        if let Some(since) = idle_since {
            let due = match closing {
                Some(c) => since.max(c) + CLOSE_GRACE,
                None => since + limits.idle,
            };
            next = next.min(due.max(now));
        }
        if let Some(since) = shared.write_blocked_since() {
            next = next.min((since + limits.send).max(now));
        }
        if let Some(since) = stalled_since {
            next = next.min((since + limits.send * 2).max(now));
        }
        timer.as_mut().reset(next);
    }
}

/// Why a connection ended before HTTP began on it.
#[cfg(feature = "tls")]
#[derive(Debug)]
pub(super) enum HandshakeEnd<E> {
    /// The handshake failed (plaintext sent to a TLS port, a certificate refused, a hang-up).
    Failed(E),
    /// The handshake did not finish within its timeout.
    TimedOut(Duration),
    /// The connection was asked to close (evicted, or the server is shutting down).
    Closed,
}

#[cfg(feature = "tls")]
impl<E: std::fmt::Display> std::fmt::Display for HandshakeEnd<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HandshakeEnd::Failed(error) => write!(f, "handshake failed: {error}"),
            HandshakeEnd::TimedOut(timeout) => {
                write!(
                    f,
                    "handshake not finished within {} ms",
                    timeout.as_millis()
                )
            }
            HandshakeEnd::Closed => f.write_str("closed during the handshake"),
        }
    }
}

/// Runs a connection's handshake for at most `timeout`, in the connection's task, giving up if
/// the connection is asked to close meanwhile. On success the connection stays registered for
/// [`drive`]; otherwise it is unregistered here (its socket is dropped with the handshake).
#[cfg(feature = "tls")]
pub(super) async fn handshake<F, T, E>(
    handshake: F,
    shared: &ConnShared,
    registry: &Registry,
    timeout: Duration,
) -> Result<T, HandshakeEnd<E>>
where
    F: Future<Output = Result<T, E>>,
{
    let ended = Ended { shared, registry };
    let mut handshake = pin!(handshake);
    let timer = tokio::time::sleep(timeout);
    let mut timer = pin!(timer);
    let result = loop {
        tokio::select! {
            biased;
            done = handshake.as_mut() => break done.map_err(HandshakeEnd::Failed),
            () = timer.as_mut() => break Err(HandshakeEnd::TimedOut(timeout)),
            () = shared.wake.notified() => {
                if shared.close.load(Ordering::Acquire) || shared.abort.load(Ordering::Acquire) {
                    break Err(HandshakeEnd::Closed);
                }
            }
        }
    };
    if result.is_ok() {
        // Still open: `drive` unregisters it when it ends.
        std::mem::forget(ended);
    }
    result
}

/// Unregisters a connection when its task ends, however it ends.
struct Ended<'a> {
    shared: &'a ConnShared,
    registry: &'a Registry,
}

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.registry.ended(self.shared);
    }
}

/// A request open on a connection: counted out when dropped (with its response body, or with
/// its future if it never produced one).
#[derive(Debug)]
struct OpenRequest {
    conn: Arc<ConnShared>,
}

impl Drop for OpenRequest {
    fn drop(&mut self) {
        // The time is stored before the count goes down, so whoever sees the count at zero
        // sees the end of the last request (two ending at once both store a recent time).
        let now = self.conn.ms_since_base(Instant::now());
        self.conn.idle_since_ms.store(now, Ordering::Release);
        self.conn.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The service of one connection: counts each request open from its call to the end of its
/// response body.
#[derive(Clone, Debug)]
pub(super) struct Counted<S> {
    pub(super) inner: S,
    pub(super) conn: Arc<ConnShared>,
}

impl<S, ReqBody, B> Service<Request<ReqBody>> for Counted<S>
where
    S: Service<Request<ReqBody>, Response = Response<B>>,
{
    type Response = Response<CountedBody<B>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        let open = self.conn.request_started();
        CountedFuture {
            inner: self.inner.call(req),
            open: Some(open),
        }
    }
}

pin_project_lite::pin_project! {
    /// The response future of [`Counted`].
    #[derive(Debug)]
    pub(super) struct CountedFuture<F> {
        #[pin]
        inner: F,
        open: Option<OpenRequest>,
    }
}

impl<F, B, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<CountedBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let response = std::task::ready!(this.inner.poll(cx))?;
        let open = this.open.take();
        // On HTTP/2 this runs in the stream's own task: its answer now waits to be sent.
        let clock = StreamClock::current();
        if let (Some(clock), Some(open)) = (&clock, &open) {
            clock.waiting();
            open.conn.answer_waiting();
        }
        let waiting = clock.is_some() && open.is_some();
        Poll::Ready(Ok(response.map(|inner| CountedBody {
            inner,
            clock,
            open,
            waiting,
        })))
    }
}

pin_project_lite::pin_project! {
    /// A response body that keeps its request counted open until it is dropped, and on
    /// HTTP/2 tells its stream's clock and its connection when it waits on the peer.
    #[derive(Debug)]
    pub(super) struct CountedBody<B> {
        #[pin]
        inner: B,
        clock: Option<Arc<StreamClock>>,
        open: Option<OpenRequest>,
        // Counted in its connection's answers waiting on the peer.
        waiting: bool,
    }

    impl<B> PinnedDrop for CountedBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if *this.waiting
                && let Some(open) = this.open
            {
                // Taken by the peer only if it went out in the poll that made it ready.
                let taken = this.clock.as_ref().is_some_and(|c| c.sent_at_once());
                open.conn.answer_not_waiting(taken);
            }
        }
    }
}

impl<B: Body> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let poll = this.inner.poll_frame(cx);
        if let Some(clock) = this.clock {
            // Data given: hyper asks again once the peer has taken it (window to send more).
            let waits = matches!(&poll, Poll::Ready(Some(Ok(frame))) if frame.is_data());
            if waits {
                clock.waiting();
            } else {
                clock.not_waiting();
            }
            if waits != *this.waiting
                && let Some(open) = this.open
            {
                *this.waiting = waits;
                if waits {
                    open.conn.answer_waiting();
                } else {
                    // Asked again after a data frame: the peer took it.
                    open.conn.answer_not_waiting(true);
                }
            }
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A socket whose writes tell the connection's [`ConnShared`] when the peer stops reading (a
/// write finds the socket full) and when it reads again (a write goes through).
#[derive(Debug)]
pub(super) struct Tracked<I> {
    pub(super) io: I,
    pub(super) conn: Arc<ConnShared>,
}

impl<I> Tracked<I> {
    fn note<T>(&self, poll: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        match &poll {
            Poll::Pending => self.conn.write_blocked(),
            Poll::Ready(_) => self.conn.write_went_through(),
        }
        poll
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Tracked<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Tracked<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note(poll)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let poll = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note(poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

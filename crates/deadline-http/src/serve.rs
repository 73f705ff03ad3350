//! A small HTTP server for a tower service: [`serve`] for a listener, [`serve_connection`] for
//! one connection. Each connection speaks HTTP/1.1 or cleartext HTTP/2 with prior knowledge
//! (h2c, what gRPC clients send over plain TCP), told apart by its first bytes (hyper-util's
//! `auto` builder), on the same port.
//!
//! What it sets, and why:
//!
//! - **`TCP_NODELAY` on every accepted socket.** With Nagle's algorithm on, a response written
//!   in two pieces (head, then body) can wait for the client's delayed ACK: about 40 ms, the size
//!   of the margins this project is about.
//! - **A 30 s header-read timeout, with a timer** ([`ServeOptions::header_read_timeout`] changes
//!   it). hyper only enforces it when given a timer; without one a client that never finishes its
//!   headers (one byte a second, say) holds a connection, a file descriptor and a task forever.
//!   A slow client costs only that: it holds no worker slot, since the request reaches the
//!   service only once its headers are complete.
//! - **A bound on the protocol sniff.** The `auto` builder first reads a connection's opening
//!   bytes to pick the protocol (the whole 24-byte HTTP/2 preface, or a byte that differs from
//!   it), and that read has no timeout of its own. So a connection that has not shown its
//!   protocol within the header-read timeout of being accepted (nothing sent, or half a
//!   preface) is closed. Then HTTP/1.1's own header timer takes over.
//! - **An idle timeout, 60 s by default** ([`ServeOptions::idle_timeout`]). A connection with
//!   no request open for that long is closed: HTTP/1.1 between requests, and HTTP/2 with no
//!   stream open, including one that sent its 24-byte preface and nothing else (the header
//!   timer never runs for HTTP/2). gRPC clients connect ahead of their first call and keep the
//!   connection between calls: they are sent `GOAWAY` and reconnect when they next call.
//! - **HTTP/2 keep-alive PINGs** ([`ServeOptions::keep_alive`], every 20 s of silence, 20 s to
//!   answer): a peer that has vanished without closing (a host gone, a NAT entry dropped) is
//!   found and its connection closed, even while a stream is open on it.
//! - **A send timeout, 30 s by default** ([`ServeOptions::send_timeout`]): a connection whose
//!   socket has refused every write for that long (the peer stopped reading) is dropped, and an
//!   HTTP/2 stream whose answer has waited that long for flow-control window (the peer opened
//!   it with a window of zero, or never grants more) is reset, its task and buffers freed.
//! - **A connection limit, 1,024 by default** ([`ServeOptions::max_connections`]): at the
//!   limit, the connection that has given nothing for the longest is closed to make room:
//!   idle the longest, or making no progress the longest (its answers waiting on the peer
//!   with none taken, or its socket refusing writes; dropped at once), whichever began first;
//!   when every connection is busy and making progress, new connections are closed as soon as
//!   they are accepted. File descriptors are a limit too:
//!   when accepting fails for want of one, a connection is dropped by the same rule, so
//!   neither idle nor stuck connections can lock new clients out.
//! - **At most 100 concurrent HTTP/2 streams per connection** by default
//!   ([`ServeOptions::max_concurrent_streams`]; hyper's own default is 200). With the
//!   connection limit it bounds what clients can hold open at once: 102,400 streams at the
//!   defaults, each of which costs the service's own answer state.
//! - **Accept errors back off** (100 ms) and are logged at most once a second, with the count
//!   of errors the line stands for. So are HTTP/2 connections closed for breaking the
//!   protocol's rules (a rapid-reset flood, say: h2 sends `GOAWAY` and logs a warning per
//!   connection of its own, which `deadline service` filters out for this line).
//! - **Hang-up detection stays on.** `half_close` is left off, so when a client closes its
//!   connection hyper drops the request's future, and the enforce layer stops the work (see
//!   [`enforce`](crate::enforce#caller-hang-up-what-is-detected)).
//! - **Graceful shutdown.** When `shutdown` completes, the listener is closed, idle connections
//!   are closed, and in-flight requests get up to [`SHUTDOWN_GRACE`] to finish
//!   ([`ServeOptions::shutdown_grace`]); then the connections still open are dropped, which
//!   drops their requests. An HTTP/2 connection is sent `GOAWAY`: the streams already open run
//!   to their end, new ones are refused (safe for the client to retry elsewhere: they were
//!   never processed).
//! - **TLS on the same terms** (`serve_tls`, feature `tls`). The protocol is the one ALPN
//!   negotiated (HTTP/2 for `h2`, HTTP/1.1 otherwise), with no sniffing; the handshake runs in
//!   the connection's task, bounded by [`ServeOptions::tls_handshake_timeout`] (the header-read
//!   timeout by default), and a failed one (plaintext sent to the port) closes the connection.
//!   The connection limit counts a connection from its acceptance, handshake included, and
//!   every other bound here applies once HTTP begins.
//! - **HTTP/2 resets are hang-ups.** When a client resets one stream (`RST_STREAM`: the attempt
//!   was abandoned), hyper drops that request's future alone, and the enforce layer reports it
//!   hung up; the other streams on the connection go on.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tower_service::Service;

use crate::error::BoxError;
use crate::log_limit::LogLimit;

mod conn;
mod stall;

use conn::{Admit, ConnLimits, Counted, Registry, Tracked};
use stall::StreamExec;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`serve`] waits for in-flight requests after `shutdown` before returning anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long a connection may stay with no request open before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// After how long without hearing from an HTTP/2 peer the server sends it a PING.
pub const KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(20);

/// How long an HTTP/2 peer has to answer a keep-alive PING before its connection is closed.
pub const KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a connection's socket may refuse every write before the connection is dropped.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// How many connections may be open at once, by default.
pub const MAX_CONNECTIONS: usize = 1024;

/// How many HTTP/2 streams a peer may have open at once on one connection, by default.
pub const MAX_CONCURRENT_STREAMS: u32 = 100;

/// After an accept error that is not about one connection (such as running out of file
/// descriptors), wait this long before accepting again, rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// After dropping an idle connection to get a file descriptor back, wait this long before
/// accepting again.
const EVICTED_BACKOFF: Duration = Duration::from_millis(5);

/// Settings of [`serve_with`]. Each has a default that bounds what a client can hold; the
/// builder methods below say what it is and what a change does.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// How long a client may take to send a request's headers before its connection is closed
    /// (default [`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
    /// How long a connection may stay with no request open (default [`IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// HTTP/2 keep-alive: the silence after which a PING is sent and the time to answer it
    /// (default [`KEEP_ALIVE_INTERVAL`], [`KEEP_ALIVE_TIMEOUT`]); `None`: no PINGs.
    pub keep_alive: Option<(Duration, Duration)>,
    /// How long a connection's socket may refuse every write (default [`SEND_TIMEOUT`]).
    pub send_timeout: Duration,
    /// Connections open at once (default [`MAX_CONNECTIONS`]; `None`: as many as file
    /// descriptors allow).
    pub max_connections: Option<usize>,
    /// HTTP/2 streams a peer may have open at once on one connection (default
    /// [`MAX_CONCURRENT_STREAMS`]).
    pub max_concurrent_streams: u32,
    /// How long shutdown waits for requests in flight (default [`SHUTDOWN_GRACE`]).
    pub shutdown_grace: Duration,
    /// How long a TLS handshake may take, from the socket's acceptance (default `None`: the
    /// header-read timeout). Used by `serve_tls` (feature `tls`) only.
    pub tls_handshake_timeout: Option<Duration>,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            header_read_timeout: HEADER_READ_TIMEOUT,
            idle_timeout: IDLE_TIMEOUT,
            keep_alive: Some((KEEP_ALIVE_INTERVAL, KEEP_ALIVE_TIMEOUT)),
            send_timeout: SEND_TIMEOUT,
            max_connections: Some(MAX_CONNECTIONS),
            max_concurrent_streams: MAX_CONCURRENT_STREAMS,
            shutdown_grace: SHUTDOWN_GRACE,
            tls_handshake_timeout: None,
        }
    }
}

impl ServeOptions {
    /// Sets how long a client may take to send a request's headers (default
    /// [`HEADER_READ_TIMEOUT`], 30 s). It also bounds how long a new connection may take to show
    /// its protocol, and an HTTP/1.1 connection's wait between two requests.
    pub fn header_read_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.header_read_timeout = timeout;
        self
    }

    /// Sets how long a connection may stay with no request open before it is closed gracefully
    /// (default [`IDLE_TIMEOUT`], 60 s). A request is open from its complete head to the end
    /// of its response; bytes alone (HTTP/2 SETTINGS or PINGs) do not keep a connection open.
    /// Zero is taken as 1 ms.
    pub fn idle_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.idle_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets HTTP/2 keep-alive: after `interval` without a frame from the peer, the server sends
    /// a PING, and closes the connection if no answer comes within `timeout` (default
    /// [`KEEP_ALIVE_INTERVAL`] and [`KEEP_ALIVE_TIMEOUT`], 20 s each). `None` turns the PINGs
    /// off. HTTP/1.1 has no PING: its idle connections are bounded by the idle and header-read
    /// timeouts.
    pub fn keep_alive(mut self, keep_alive: Option<(Duration, Duration)>) -> ServeOptions {
        self.keep_alive = keep_alive;
        self
    }

    /// Sets how long a connection's socket may refuse every write (the peer reads nothing)
    /// before the connection is dropped, and how long an HTTP/2 stream's answer may wait for
    /// flow-control window before the stream is reset (default [`SEND_TIMEOUT`], 30 s). Zero is
    /// taken as 1 ms.
    pub fn send_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.send_timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Sets how many connections may be open at once (default [`MAX_CONNECTIONS`], 1,024;
    /// `None`: no limit but file descriptors). A connection beyond the limit closes the
    /// connection that has given nothing for the longest to make room: idle the longest, or
    /// making no progress the longest (answers waiting on the peer with none taken, or a
    /// socket refusing writes), whichever began first; when every connection is busy and making
    /// progress, it is closed as soon as it is accepted. Keep it
    /// below the process's file limit, so that the limit, not the file table, decides.
    /// `Some(0)` is taken as 1.
    pub fn max_connections(mut self, max: Option<usize>) -> ServeOptions {
        self.max_connections = max.map(|max| max.max(1));
        self
    }

    /// Sets how many HTTP/2 streams a peer may have open at once on one connection (default
    /// [`MAX_CONCURRENT_STREAMS`], 100); the server advertises it in its SETTINGS and refuses
    /// streams beyond it. Zero is taken as 1.
    pub fn max_concurrent_streams(mut self, max: u32) -> ServeOptions {
        self.max_concurrent_streams = max.max(1);
        self
    }

    /// Sets how long shutdown waits for requests in flight before dropping their connections
    /// (default [`SHUTDOWN_GRACE`], 10 s).
    pub fn shutdown_grace(mut self, grace: Duration) -> ServeOptions {
        self.shutdown_grace = grace;
        self
    }

    /// Sets how long a TLS handshake may take, counted from the socket's acceptance, before the
    /// connection is closed (default: the header-read timeout). It bounds a client that
    /// connects and sends nothing, or stops half-way through the handshake. Only `serve_tls`
    /// (feature `tls`) does a handshake. Zero is taken as 1 ms.
    pub fn tls_handshake_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.tls_handshake_timeout = Some(timeout.max(Duration::from_millis(1)));
        self
    }

    /// The TLS handshake timeout in force: the one set, or the header-read timeout.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    fn handshake_timeout(&self) -> Duration {
        self.tls_handshake_timeout
            .unwrap_or(self.header_read_timeout)
    }
}

/// HTTP/1.1 and h2c on one connection builder, each with a timer (hyper enforces its timeouts
/// only with one).
fn builder(options: &ServeOptions) -> auto::Builder<StreamExec> {
    let mut builder = auto::Builder::new(StreamExec {
        send_timeout: options.send_timeout,
    });
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    let mut http2 = builder.http2();
    http2
        .timer(TokioTimer::new())
        .max_concurrent_streams(options.max_concurrent_streams);
    if let Some((interval, timeout)) = options.keep_alive {
        http2
            .keep_alive_interval(Some(interval))
            .keep_alive_timeout(timeout);
    }
    builder
}

/// The HTTP/2 connection preface: the `auto` builder reads until it has seen all of it, or a
/// byte that differs (then the connection is HTTP/1.1).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An accepted socket that must show its protocol within the header-read timeout (see the
/// [module docs](self)): until the bytes read hold the whole HTTP/2 preface, or a byte that
/// differs from it, a read that finds nothing also polls the timer, and fails the connection
/// once it fires. From then on the timer is gone and a read costs one `Option` check more than
/// the bare socket's: no other task, no per-request work.
#[derive(Debug)]
struct FirstBytes {
    stream: Tracked<TcpStream>,
    /// Preface bytes matched so far, and the timer; `None` once the protocol is known.
    sniff: Option<(usize, Pin<Box<Sleep>>)>,
}

impl AsyncRead for FirstBytes {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.stream).poll_read(cx, buf);
        let Some((matched, silence)) = self.sniff.as_mut() else {
            return poll;
        };
        let new = &buf.filled()[before..];
        if !new.is_empty() {
            let want = &H2_PREFACE[*matched..];
            let n = new.len().min(want.len());
            if new[..n] != want[..n] || *matched + n == H2_PREFACE.len() {
                // The protocol is known: the server's own timers take over.
                self.sniff = None;
            } else {
                *matched += n;
            }
        } else if poll.is_pending() && silence.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the protocol was not shown within the header-read timeout",
            )));
        }
        poll
    }
}

impl AsyncWrite for FirstBytes {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// Serves `service` over HTTP/1.1 and h2c on every connection `listener` accepts, until `shutdown`
/// completes; then stops accepting and waits (up to [`SHUTDOWN_GRACE`]) for open connections to
/// finish their requests. Connections are bounded as the [module docs](self) say, with the
/// defaults of [`ServeOptions`].
///
/// Each connection runs on its own task. Accept errors are logged and accepting goes on, so
/// this returns `Ok` once shut down; the `io::Result` is for errors setting up the listener.
///
/// ```no_run
/// use deadline_http::{EnforceDeadlineLayer, serve};
/// use tower::{ServiceBuilder, service_fn};
///
/// # #[tokio::main] async fn main() -> std::io::Result<()> {
/// let service = ServiceBuilder::new()
///     .layer(EnforceDeadlineLayer::new("inventory").slots(8))
///     .service(service_fn(|_req| async {
///         Ok::<_, std::convert::Infallible>(http::Response::new("ok".to_string()))
///     }));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// println!("listening on http://{}", listener.local_addr()?);
/// serve(listener, service, std::future::pending()).await
/// # }
/// ```
pub async fn serve<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve_with(listener, service, shutdown, ServeOptions::default()).await
}

/// As [`serve`], with [`ServeOptions`] (such as a shorter header-read timeout).
pub async fn serve_with<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    accept_loop(listener, service, shutdown, options, None).await
}

/// As [`serve_with`], speaking TLS on every connection: after the handshake, HTTP/2 if ALPN
/// chose `h2`, HTTP/1.1 otherwise (see [`tls`](crate::tls) for the rules and
/// [`server_config_from_pem`](crate::tls::server_config_from_pem) for a configuration offering
/// both). The handshake runs in the connection's task, bounded by
/// [`ServeOptions::tls_handshake_timeout`]; a connection that fails it (plaintext HTTP sent to
/// the port, say) is logged at debug level and closed. Every other bound of the
/// [module docs](self) applies to TLS connections as well, the connection limit counting a
/// connection from its acceptance.
///
/// ```no_run
/// use deadline_http::serve::{ServeOptions, serve_tls};
/// use deadline_http::tls::server_config_from_pem;
/// use tower::service_fn;
///
/// # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let tls = server_config_from_pem("cert.pem", "key.pem")?;
/// let service = service_fn(|req: http::Request<_>| async move {
///     let version = format!("{:?}", req.version());
///     Ok::<_, std::convert::Infallible>(http::Response::new(version))
/// });
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// serve_tls(listener, tls, service, std::future::pending(), ServeOptions::default()).await?;
/// # Ok(()) }
/// ```
#[cfg(feature = "tls")]
pub async fn serve_tls<S, B>(
    listener: TcpListener,
    tls: Arc<rustls::ServerConfig>,
    service: S,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    accept_loop(listener, service, shutdown, options, Some(acceptor)).await
}

/// What a connection is accepted with: a TLS acceptor, or nothing to do before HTTP.
#[cfg(feature = "tls")]
type Acceptor = tokio_rustls::TlsAcceptor;
#[cfg(not(feature = "tls"))]
type Acceptor = std::convert::Infallible;

/// The accept loop of [`serve_with`] and `serve_tls`: cleartext with sniffing when `tls` is
/// `None`.
async fn accept_loop<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: impl Future<Output = ()>,
    options: ServeOptions,
    tls: Option<Acceptor>,
) -> io::Result<()>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    // Fails early, and names the address in logs.
    let local = listener.local_addr()?;
    let builder = builder(&options);
    let registry = Arc::new(Registry::new());
    let limits = ConnLimits {
        idle: options.idle_timeout,
        send: options.send_timeout,
    };
    let accept_errors = LogLimit::new(Duration::from_secs(1));
    let refusals = LogLimit::new(Duration::from_secs(1));
    let broken = Arc::new(LogLimit::new(Duration::from_secs(1)));
    let mut shutdown = pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) if is_connection_error(&error) => {
                tracing::debug!(%local, %error, "accept: connection failed");
                continue;
            }
            Err(error) => {
                // Out of file descriptors: an idle connection, or one making no progress,
                // gives one back.
                let evicted = is_out_of_fds(&error) && registry.evict_one(true);
                if let Some(errors) = accept_errors.hit() {
                    tracing::warn!(
                        %local,
                        %error,
                        errors,
                        open = registry.len(),
                        evicted,
                        "accept failed; backing off (errors: how many since the last such line)"
                    );
                }
                let backoff = if evicted {
                    EVICTED_BACKOFF
                } else {
                    ACCEPT_BACKOFF
                };
                tokio::select! {
                    () = tokio::time::sleep(backoff) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        if registry.admit(options.max_connections) == Admit::Full {
            if let Some(refused) = refusals.hit() {
                tracing::warn!(
                    %local,
                    refused,
                    max_connections = options.max_connections,
                    "connection limit reached and every connection making progress: refusing \
                     new connections (refused: how many since the last such line)"
                );
            }
            drop(stream);
            continue;
        }
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY");
        }
        let shared = registry.open();
        let service = Counted {
            inner: service.clone(),
            conn: shared.clone(),
        };
        #[cfg(feature = "tls")]
        if let Some(acceptor) = &tls {
            let handshake = acceptor.accept(Tracked {
                io: stream,
                conn: shared.clone(),
            });
            let tls_conn = TlsConn {
                builder: builder.clone(),
                handshake_timeout: options.handshake_timeout(),
                registry: registry.clone(),
                limits,
                peer,
                broken: broken.clone(),
            };
            tokio::spawn(tls_conn.run(handshake, service, shared));
            continue;
        }
        #[cfg(not(feature = "tls"))]
        let _ = &tls;
        let stream = FirstBytes {
            stream: Tracked {
                io: stream,
                conn: shared.clone(),
            },
            sniff: Some((0, Box::pin(tokio::time::sleep(options.header_read_timeout)))),
        };
        let connection = builder
            .serve_connection(TokioIo::new(stream), TowerToHyperService::new(service))
            .into_owned();
        let registry = registry.clone();
        let broken = broken.clone();
        tokio::spawn(async move {
            let graceful =
                |connection: Pin<&mut _>| auto::Connection::graceful_shutdown(connection);
            let ended = conn::drive(connection, graceful, shared, registry, limits).await;
            if let Err(error) = ended {
                log_ended(peer, &*error, &broken);
            }
        });
    }
    drop(listener);
    tracing::debug!(%local, open = registry.len(), "shutting down");
    registry.close_all(false);
    tokio::select! {
        () = registry.all_ended() => {}
        () = tokio::time::sleep(options.shutdown_grace) => {
            tracing::warn!(
                %local,
                open = registry.len(),
                "connections still open after the shutdown grace period: dropping them"
            );
            registry.close_all(true);
            let _ = tokio::time::timeout(Duration::from_secs(1), registry.all_ended()).await;
        }
    }
    Ok(())
}

/// One TLS connection's task: the handshake, then HTTP in the protocol ALPN chose.
#[cfg(feature = "tls")]
struct TlsConn {
    builder: auto::Builder<StreamExec>,
    handshake_timeout: Duration,
    registry: Arc<Registry>,
    limits: ConnLimits,
    peer: std::net::SocketAddr,
    broken: Arc<LogLimit>,
}

#[cfg(feature = "tls")]
impl TlsConn {
    async fn run<S, B>(
        self,
        handshake: tokio_rustls::Accept<Tracked<TcpStream>>,
        service: Counted<S>,
        shared: Arc<conn::ConnShared>,
    ) where
        S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let TlsConn {
            builder,
            handshake_timeout,
            registry,
            limits,
            peer,
            broken,
        } = self;
        let stream = match conn::handshake(handshake, &shared, &registry, handshake_timeout).await {
            Ok(stream) => stream,
            Err(error) => {
                tracing::debug!(%peer, %error, "TLS connection closed before HTTP");
                return;
            }
        };
        let h2 = stream.get_ref().1.alpn_protocol() == Some(crate::tls::ALPN_H2);
        // No sniffing: the protocol is the one ALPN chose (HTTP/1.1 when none was).
        let builder = if h2 {
            builder.http2_only()
        } else {
            builder.http1_only()
        };
        let connection =
            builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(service));
        let graceful = |connection: Pin<&mut _>| auto::Connection::graceful_shutdown(connection);
        let ended = conn::drive(connection, graceful, shared, registry, limits).await;
        if let Err(error) = ended {
            log_ended(peer, &*error, &broken);
        }
    }
}

/// Logs how a connection ended with an error: at debug level, except an HTTP/2 connection the
/// server sent `GOAWAY` for an error of the peer's (a rapid-reset flood, a protocol error),
/// which is a warning at most once a second with the count of such connections.
fn log_ended(
    peer: std::net::SocketAddr,
    error: &(dyn std::error::Error + 'static),
    broken: &LogLimit,
) {
    let mut source = Some(error);
    while let Some(e) = source {
        if let Some(h2) = e.downcast_ref::<h2::Error>()
            && h2.is_go_away()
            && !h2.is_remote()
        {
            if let Some(closed) = broken.hit() {
                tracing::warn!(
                    %peer,
                    reason = ?h2.reason(),
                    closed,
                    "HTTP/2 connection closed: the peer broke the protocol's rules (a reset \
                     flood, say); closed: how many since the last such line"
                );
            }
            return;
        }
        source = e.source();
    }
    tracing::debug!(%peer, %error, "connection ended with an error");
}

/// Serves `service` over HTTP/1.1 or h2c on one connection, with the same settings as [`serve`]
/// (header-read timeout with a timer, hang-up detection on) except the bound on the protocol
/// sniff, which is the caller's, as is `TCP_NODELAY` on a socket. For custom accept loops
/// (TLS, Unix sockets) and for tests over `tokio::io::duplex`.
pub async fn serve_connection<I, S, B>(io: I, service: S) -> Result<(), BoxError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    builder(&ServeOptions::default())
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(service))
        .await
}

/// Accepting failed for want of a file descriptor (the process's limit or the system's).
fn is_out_of_fds(error: &io::Error) -> bool {
    // EMFILE and ENFILE on Linux and the BSDs.
    matches!(error.raw_os_error(), Some(23 | 24))
}

/// Errors about one incoming connection, not the listener: accept the next one at once.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

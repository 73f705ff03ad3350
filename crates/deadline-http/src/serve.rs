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
//!   preface) is closed. Then HTTP/1.1's own header timer takes over; an HTTP/2 connection that
//!   has sent its preface may stay idle with no stream open (gRPC clients connect ahead of
//!   their first call and keep the connection between calls).
//! - **Hang-up detection stays on.** `half_close` is left off, so when a client closes its
//!   connection hyper drops the request's future, and the enforce layer stops the work (see
//!   [`enforce`](crate::enforce#caller-hang-up-what-is-detected)).
//! - **Graceful shutdown.** When `shutdown` completes, the listener is closed, idle connections
//!   are closed, and in-flight requests get up to [`SHUTDOWN_GRACE`] to finish. An HTTP/2
//!   connection is sent `GOAWAY`: the streams already open run to their end, new ones are
//!   refused (safe for the client to retry elsewhere: they were never processed).
//! - **HTTP/2 resets are hang-ups.** When a client resets one stream (`RST_STREAM`: the attempt
//!   was abandoned), hyper drops that request's future alone, and the enforce layer reports it
//!   hung up; the other streams on the connection go on.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use http_body::Body;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Sleep;
use tower_service::Service;

use crate::error::BoxError;

/// How long a client may take to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`serve`] waits for in-flight requests after `shutdown` before returning anyway.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// After an accept error that is not about one connection (such as running out of file
/// descriptors), wait this long before accepting again, rather than spinning.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Settings of [`serve_with`].
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct ServeOptions {
    /// How long a client may take to send a request's headers before its connection is closed
    /// (default [`HEADER_READ_TIMEOUT`]).
    pub header_read_timeout: Duration,
}

impl Default for ServeOptions {
    fn default() -> ServeOptions {
        ServeOptions {
            header_read_timeout: HEADER_READ_TIMEOUT,
        }
    }
}

impl ServeOptions {
    /// Sets how long a client may take to send a request's headers.
    pub fn header_read_timeout(mut self, timeout: Duration) -> ServeOptions {
        self.header_read_timeout = timeout;
        self
    }
}

/// HTTP/1.1 and h2c on one connection builder, each with a timer (hyper enforces its timeouts
/// only with one).
fn builder(options: &ServeOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout);
    builder.http2().timer(TokioTimer::new());
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
    stream: TcpStream,
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
        self.stream.is_write_vectored()
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
/// finish their requests.
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
    // Fails early, and names the address in logs.
    let local = listener.local_addr()?;
    let builder = builder(&options);
    let graceful = GracefulShutdown::new();
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
                tracing::warn!(%local, %error, "accept failed; retrying");
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        if let Err(error) = stream.set_nodelay(true) {
            tracing::debug!(%peer, %error, "could not set TCP_NODELAY");
        }
        let stream = FirstBytes {
            stream,
            sniff: Some((0, Box::pin(tokio::time::sleep(options.header_read_timeout)))),
        };
        let connection = builder.serve_connection(
            TokioIo::new(stream),
            TowerToHyperService::new(service.clone()),
        );
        let connection = graceful.watch(connection.into_owned());
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    tracing::debug!(%local, open = graceful.count(), "shutting down");
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {
            tracing::warn!(%local, "connections still open after the shutdown grace period");
        }
    }
    Ok(())
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

/// Errors about one incoming connection, not the listener: accept the next one at once.
fn is_connection_error(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

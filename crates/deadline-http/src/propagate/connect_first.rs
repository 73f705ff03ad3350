//! The pool of [`DeadlineClient::https`](super::DeadlineClient::https): the connection is made
//! (or taken from the pool) first, and the request's budget is stamped once it is ready, right
//! before the request is written.
//!
//! # Why not hyper-util's pooled client
//!
//! The call loop stamps each attempt's `Deadline-Budget-Ms` when it plans the attempt, then hands
//! the request to the client below. hyper-util's pooled client connects *after* it has the
//! request: when it has no idle connection it dials, and the time the TCP connect and, for
//! `https://`, the TLS handshake take (a round trip or two, more on a loaded or distant peer)
//! is spent from the callee's budget without the callee being told. The callee would then
//! plan its own work and calls as if it had time the caller no longer waits for.
//!
//! This pool turns the order around. Each attempt's request carries the budget it was planned
//! with and when (a [`LateStamp`] in its extensions, put there by the call loop for this client
//! only); the pool first gets a connection, idle or newly dialed and through its handshake,
//! and only then writes the budget headers again from what is left: the planned budget less the
//! time since it was planned. So the budget a callee reads was true when the request left. The
//! cleartext clients ([`DeadlineClient::new`](super::DeadlineClient::new),
//! [`h2c`](super::DeadlineClient::h2c)) keep hyper-util's pool and its hot path, unchanged.
//!
//! # Connections
//!
//! One pool per client (its clones share it), keyed by scheme and authority. The protocol is
//! the one ALPN negotiated: `h2` is spoken as HTTP/2 (one connection per host carries every
//! call, each a stream), anything else (`http/1.1`, or no ALPN) as HTTP/1.1 (one request at a
//! time per connection; a busy connection is skipped and another dialed). Calls to a host known
//! to speak HTTP/2 that find no connection wait for one dial and share what it made. A client made for
//! gRPC offers `h2` alone and speaks HTTP/2. An `http://` URL is dialed in cleartext by the
//! same pool (HTTP/1.1, or HTTP/2 with prior knowledge for a client made for gRPC), and is
//! stamped the same way. Every socket has `TCP_NODELAY` set, and HTTP/2 connections are PINGed
//! as [`h2c`](super::DeadlineClient::h2c)'s are.
//!
//! # Eviction
//!
//! As with the cleartext pool ([`evict`](super::evict)): an attempt dropped at or after the end
//! of its wait (it timed out) takes the connection it was sent on out of the pool, and the next
//! call dials. An attempt dropped before (a hedge that lost, a caller that hung up) leaves it.
//! Closed connections are dropped from the pool as it is searched.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::uri::{Authority, PathAndQuery, Scheme};
use http::{HeaderValue, Request, Response, Uri, Version};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tower_service::Service;

use super::attempt::LateStamp;
use super::body::AttemptEnd;
use super::evict::{H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT};
use crate::error::BoxError;
use crate::tls::{ALPN_H2, ALPN_HTTP1};

/// The client below [`DeadlineClient::https`](super::DeadlineClient::https): connects, then
/// stamps, then writes. Cloning shares the pool.
#[derive(Clone)]
pub(super) struct ConnectFirst {
    pool: Arc<Pool>,
}

impl fmt::Debug for ConnectFirst {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectFirst")
            .field("http2_only", &self.pool.http2_only)
            .finish_non_exhaustive()
    }
}

/// The connections, and how new ones are made.
struct Pool {
    /// The TLS configuration, its ALPN protocols set.
    tls: TlsConnector,
    /// Speak HTTP/2 whatever ALPN said (a client made for gRPC).
    http2_only: bool,
    hosts: Mutex<HashMap<Key, Host>>,
    next_id: AtomicU64,
}

/// Connections are shared by scheme and authority.
type Key = (bool, Authority);

/// The connections to one host.
#[derive(Default)]
struct Host {
    conns: Vec<Conn>,
    /// The last connection made to it speaks HTTP/2: one connection carries every call, so
    /// calls that find none wait for one dial instead of each dialing its own.
    http2: bool,
    /// Held while an HTTP/2 connection is dialed.
    dialing: Arc<tokio::sync::Mutex<()>>,
}

/// One pooled connection.
struct Conn {
    id: u64,
    sender: Sender,
}

enum Sender {
    Http1(http1::SendRequest<Full<Bytes>>),
    Http2(http2::SendRequest<Full<Bytes>>),
}

impl Sender {
    fn is_closed(&self) -> bool {
        match self {
            Sender::Http1(s) => s.is_closed(),
            Sender::Http2(s) => s.is_closed(),
        }
    }
}

/// Why a connection could not be made.
#[derive(Debug)]
struct ConnectError {
    authority: Authority,
    what: &'static str,
    source: BoxError,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} to {}: {}", self.what, self.authority, self.source)
    }
}

// The message already holds the cause's own, so `source` is left empty: a report printing the
// chain would say it twice.
impl std::error::Error for ConnectError {}

/// A request this client cannot send.
#[derive(Debug)]
struct BadUri(Uri);

impl fmt::Display for BadUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not an absolute http:// or https:// URI: {}", self.0)
    }
}

impl std::error::Error for BadUri {}

impl ConnectFirst {
    /// A client over `tls` (its ALPN protocols replaced): offering `h2` alone and speaking
    /// HTTP/2 when `http2_only`, else offering `h2` then `http/1.1`.
    pub(super) fn new(tls: Arc<ClientConfig>, http2_only: bool) -> ConnectFirst {
        let mut config = (*tls).clone();
        config.alpn_protocols = if http2_only {
            vec![ALPN_H2.to_vec()]
        } else {
            vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()]
        };
        ConnectFirst {
            pool: Arc::new(Pool {
                tls: TlsConnector::from(Arc::new(config)),
                http2_only,
                hosts: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
            }),
        }
    }
}

impl Service<Request<Full<Bytes>>> for ConnectFirst {
    type Response = Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Incoming>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        Box::pin(Arc::clone(&self.pool).send(request))
    }
}

/// Takes an attempt's connection out of the pool when the attempt is dropped at or after the
/// end of its wait (it timed out).
struct Evict {
    pool: Arc<Pool>,
    key: Key,
    id: u64,
    until: Instant,
    armed: bool,
}

impl Drop for Evict {
    fn drop(&mut self) {
        if !self.armed || Instant::now() < self.until {
            return;
        }
        let mut hosts = self.pool.hosts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(host) = hosts.get_mut(&self.key) {
            host.conns.retain(|c| c.id != self.id);
        }
    }
}

impl Pool {
    async fn send(
        self: Arc<Pool>,
        mut request: Request<Full<Bytes>>,
    ) -> Result<Response<Incoming>, BoxError> {
        let uri = request.uri();
        let tls = match uri.scheme() {
            Some(s) if *s == Scheme::HTTPS => true,
            Some(s) if *s == Scheme::HTTP => false,
            _ => return Err(BadUri(uri.clone()).into()),
        };
        let Some(authority) = uri.authority().cloned() else {
            return Err(BadUri(uri.clone()).into());
        };
        let key = (tls, authority);
        let stamp = request.extensions_mut().remove::<LateStamp>();
        let until = request.extensions().get::<AttemptEnd>().map(|end| end.at);
        // Kept for a second try: an HTTP/1.1 request is rewritten to its path.
        let uri = request.uri().clone();
        loop {
            let (id, sender, reused) = match self.checkout(&key) {
                Some((id, sender)) => (id, sender, true),
                None => self.connect(&key).await?,
            };
            let mut evict = until.map(|until| Evict {
                pool: Arc::clone(&self),
                key: key.clone(),
                id,
                until,
                armed: true,
            });
            // The connection is ready: what is left of the budget is what the callee gets.
            if let Some(stamp) = &stamp {
                stamp.restamp(&mut request, Instant::now());
            }
            let response = match sender {
                Sender::Http1(mut sender) => {
                    to_origin_form(&mut request, &key.1);
                    let sent = sender.try_send_request(request);
                    // Back in the pool at once: it is taken again only once it is ready (its
                    // response read whole).
                    self.put_back(&key, id, Sender::Http1(sender));
                    sent.await
                }
                Sender::Http2(mut sender) => {
                    *request.version_mut() = Version::HTTP_2;
                    sender.try_send_request(request).await
                }
            };
            if let Some(evict) = &mut evict {
                evict.armed = false;
            }
            match response {
                Ok(response) => return Ok(response),
                // A pooled connection that closed before the request was written (the server
                // closed it while idle): nothing reached the callee, so the request goes on a
                // fresh connection within the same attempt, stamped again.
                Err(mut error) if reused => match error.take_message() {
                    Some(unsent) => {
                        request = unsent;
                        *request.uri_mut() = uri.clone();
                    }
                    None => return Err(error.into_error().into()),
                },
                Err(error) => return Err(error.into_error().into()),
            }
        }
    }

    /// An idle HTTP/1.1 connection ready for a request (taken out of the pool), or the HTTP/2
    /// connection (shared); closed ones found on the way are dropped.
    fn checkout(&self, key: &Key) -> Option<(u64, Sender)> {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let conns = &mut hosts.get_mut(key)?.conns;
        conns.retain(|c| !c.sender.is_closed());
        let index = conns.iter().position(|c| match &c.sender {
            Sender::Http1(s) => s.is_ready(),
            Sender::Http2(s) => s.is_ready(),
        })?;
        match &conns[index].sender {
            Sender::Http2(s) => Some((conns[index].id, Sender::Http2(s.clone()))),
            Sender::Http1(_) => {
                let conn = conns.swap_remove(index);
                Some((conn.id, conn.sender))
            }
        }
    }

    /// Puts a connection (back) in the pool.
    fn put_back(&self, key: &Key, id: u64, sender: Sender) {
        let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
        let host = hosts.entry(key.clone()).or_default();
        host.http2 = matches!(sender, Sender::Http2(_));
        host.conns.push(Conn { id, sender });
    }

    /// A connection for a call that found none: over HTTP/2 (known from the last connection
    /// to the host, or for a gRPC client) one dial at a time, the calls waiting for it taking
    /// the connection it made; over HTTP/1.1 a dial of its own. Whether it was found (`true`)
    /// or dialed.
    async fn connect(&self, key: &Key) -> Result<(u64, Sender, bool), BoxError> {
        let dialing = {
            let mut hosts = self.hosts.lock().unwrap_or_else(|e| e.into_inner());
            let host = hosts.entry(key.clone()).or_default();
            (self.http2_only || host.http2).then(|| Arc::clone(&host.dialing))
        };
        let _dialing = match dialing {
            Some(lock) => {
                let held = lock.lock_owned().await;
                if let Some((id, sender)) = self.checkout(key) {
                    return Ok((id, sender, true));
                }
                Some(held)
            }
            None => None,
        };
        let (id, sender) = self.dial(key).await?;
        Ok((id, sender, false))
    }

    /// A new connection to `key`: TCP (`TCP_NODELAY`), TLS for `https`, then the HTTP
    /// handshake of the protocol ALPN chose. HTTP/2 connections go in the pool at once.
    async fn dial(&self, key: &Key) -> Result<(u64, Sender), BoxError> {
        let (tls, authority) = key;
        let fail = |what, source: BoxError| ConnectError {
            authority: authority.clone(),
            what,
            source,
        };
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = authority.port_u16().unwrap_or(if *tls { 443 } else { 80 });
        let tcp = TcpStream::connect((host, port))
            .await
            .map_err(|e| fail("cannot connect", e.into()))?;
        tcp.set_nodelay(true)
            .map_err(|e| fail("cannot set TCP_NODELAY", e.into()))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sender = if *tls {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|e| fail("not a TLS server name", e.into()))?;
            let stream = self
                .tls
                .connect(name, tcp)
                .await
                .map_err(|e| fail("TLS handshake failed", e.into()))?;
            let h2 = self.http2_only || stream.get_ref().1.alpn_protocol() == Some(ALPN_H2);
            handshake(TokioIo::new(stream), h2)
                .await
                .map_err(|e| fail("HTTP handshake failed", e))?
        } else {
            handshake(TokioIo::new(tcp), self.http2_only)
                .await
                .map_err(|e| fail("HTTP handshake failed", e))?
        };
        if let Sender::Http2(shared) = &sender {
            self.put_back(key, id, Sender::Http2(shared.clone()));
        }
        Ok((id, sender))
    }
}

/// The HTTP handshake over `io`, its connection task spawned: HTTP/2 when `h2`, else HTTP/1.1.
async fn handshake<T>(io: TokioIo<T>, h2: bool) -> Result<Sender, BoxError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    if h2 {
        let (sender, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
            .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
            .handshake(io)
            .await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "outbound HTTP/2 connection ended");
            }
        });
        Ok(Sender::Http2(sender))
    } else {
        let (sender, connection) = http1::handshake(io).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "outbound HTTP/1.1 connection ended");
            }
        });
        Ok(Sender::Http1(sender))
    }
}

/// An HTTP/1.1 request is written with its path only, the authority in `Host`.
fn to_origin_form(request: &mut Request<Full<Bytes>>, authority: &Authority) {
    if !request.headers().contains_key(http::header::HOST) {
        if let Ok(host) = HeaderValue::from_str(authority.as_str()) {
            request.headers_mut().insert(http::header::HOST, host);
        }
    }
    let path = request
        .uri()
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| PathAndQuery::from_static("/"));
    *request.uri_mut() = Uri::from(path);
    *request.version_mut() = Version::HTTP_11;
}

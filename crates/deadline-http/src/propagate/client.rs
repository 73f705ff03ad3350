use bytes::Bytes;
use deadline::CallPolicy;
use http::{Request, Response, Uri};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::{Backoff, CallBody, Callee504, HedgeDelay, PropagateDeadline, RetryBudgetConfig};
use crate::error::CallError;

use super::evict::{Evicting, H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT};

/// An HTTP client whose calls carry the current deadline: hyper-util's pooled client wrapped in
/// [`PropagateDeadline`].
///
/// Its connector sets `TCP_NODELAY` on every connection: with Nagle's algorithm on, a small
/// request can sit in the kernel until the peer's delayed ACK (~40 ms), which is the size of the
/// margins a deadline keeps. Cloning is cheap and clones share the connection pool.
///
/// [`DeadlineClient::new`] speaks HTTP/1.1; [`DeadlineClient::h2c`] speaks HTTP/2 with prior
/// knowledge (cleartext, as gRPC does over plain TCP) and multiplexes every call and attempt to
/// a host over one connection. There, an abandoned attempt (cut by the deadline, timed out, or
/// its call dropped) resets only its own stream: the callee sees that request hang up, and the
/// other calls on the connection go on.
///
/// ```no_run
/// # async fn handler() -> Result<(), deadline_http::CallError> {
/// use std::time::Duration;
///
/// use deadline::CallPolicy;
/// use deadline_http::DeadlineClient;
///
/// let policy = CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy");
/// let inventory = DeadlineClient::new(policy).target("inventory");
/// // Inside a handler served by the enforce layer, this carries what is left of its deadline.
/// let response = inventory.get("http://127.0.0.1:8081/items/7").await?;
/// println!("inventory answered {}", response.status());
/// # Ok(()) }
/// ```
///
/// A connection an attempt timed out on is taken out of the pool (the next call dials a new
/// one), and an HTTP/2 connection whose peer stops answering keep-alive PINGs is closed; see
/// [`H2_KEEP_ALIVE_INTERVAL`](super::H2_KEEP_ALIVE_INTERVAL).
///
/// With the `tls` feature, `DeadlineClient::https` and `https_h2` call `https://` URLs; their
/// pool connects before the budget is stamped, so a TLS handshake is not spent from the
/// callee's budget unseen.
#[derive(Clone, Debug)]
pub struct DeadlineClient {
    service: Inner,
}

/// The layer over one of the two pools: hyper-util's (cleartext, the budget stamped when the
/// attempt is planned) or the connect-first one of [`DeadlineClient::https`] (the budget
/// stamped once the connection is ready).
// The cleartext variant is the larger one and the hot path: boxing it would add an indirection
// to every call there.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
enum Inner {
    Pooled(PropagateDeadline<Evicting>),
    #[cfg(feature = "tls")]
    ConnectFirst(PropagateDeadline<super::connect_first::ConnectFirst>),
}

/// `$body` applied to the layer, whichever pool it is over (`$s` names it in `$body`).
macro_rules! each {
    ($self:expr, $s:ident => $body:expr) => {
        DeadlineClient {
            service: match $self.service {
                Inner::Pooled($s) => Inner::Pooled($body),
                #[cfg(feature = "tls")]
                Inner::ConnectFirst($s) => Inner::ConnectFirst($body),
            },
        }
    };
}

impl DeadlineClient {
    /// A client making calls under `policy`, over a new connection pool.
    ///
    /// Must be called inside a tokio runtime's context only when used: the pool spawns its
    /// connection tasks with [`tokio::spawn`] at the first call.
    pub fn new(policy: CallPolicy) -> DeadlineClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        DeadlineClient::from_client(
            Client::builder(TokioExecutor::new()).build(connector),
            policy,
        )
    }

    /// A client making calls under `policy` over HTTP/2 with prior knowledge (h2c): one
    /// connection per host, every call a stream on it. The server must speak h2c (this crate's
    /// [`serve`](crate::serve()) does, as does any gRPC server); an HTTP/1.1-only server
    /// fails the attempt with a connection error.
    pub fn h2c(policy: CallPolicy) -> DeadlineClient {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .timer(TokioTimer::new())
            .http2_keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
            .http2_keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
            .build(connector);
        DeadlineClient::from_client(client, policy)
    }

    /// A client making calls under `policy` through `client` (for a pool configured otherwise;
    /// remember `set_nodelay(true)` on its connector, and for HTTP/2 keep-alive PINGs with a
    /// timer, as [`h2c`](Self::h2c) sets them).
    pub fn from_client(
        client: Client<HttpConnector, Full<Bytes>>,
        policy: CallPolicy,
    ) -> DeadlineClient {
        DeadlineClient {
            service: Inner::Pooled(
                PropagateDeadline::new(Evicting { client }, policy).mark_attempts(),
            ),
        }
    }

    /// A client making calls under `policy` to `https://` URLs, verifying servers against
    /// `tls`'s roots (see [`tls::client_config_from_pem`](crate::tls::client_config_from_pem)
    /// and [`client_config_with_system_roots`](crate::tls::client_config_with_system_roots);
    /// its ALPN protocols are replaced). It offers ALPN `h2` then `http/1.1` and speaks what
    /// the server chose: HTTP/2 (every call a stream on one connection per host) or HTTP/1.1.
    /// Feature `tls`.
    ///
    /// **The budget is stamped when the request is written**, after the connection is made:
    /// a TCP connect and a TLS handshake are taken from the budget the callee is told, not
    /// spent from it unseen. Each attempt carries its planned budget to the pool below, which
    /// connects (or takes an idle connection) first and then writes the budget headers from
    /// what is left. A server whose certificate is not trusted fails the attempt with a
    /// connection error (retried as one). A connection an attempt timed out on is not reused.
    /// `http://` URLs are dialed in cleartext by the same pool, and stamped the same way.
    #[cfg(feature = "tls")]
    pub fn https(policy: CallPolicy, tls: std::sync::Arc<rustls::ClientConfig>) -> DeadlineClient {
        DeadlineClient::connect_first(policy, tls, false)
    }

    /// As [`https`](Self::https), but offering ALPN `h2` alone and speaking HTTP/2 only, as gRPC
    /// clients do (gRPC servers refuse TLS without `h2`); an `http://` URL is then spoken as
    /// h2c. Feature `tls`.
    #[cfg(feature = "tls")]
    pub fn https_h2(
        policy: CallPolicy,
        tls: std::sync::Arc<rustls::ClientConfig>,
    ) -> DeadlineClient {
        DeadlineClient::connect_first(policy, tls, true)
    }

    #[cfg(feature = "tls")]
    fn connect_first(
        policy: CallPolicy,
        tls: std::sync::Arc<rustls::ClientConfig>,
        http2_only: bool,
    ) -> DeadlineClient {
        let pool = super::connect_first::ConnectFirst::new(tls, http2_only);
        DeadlineClient {
            service: Inner::ConnectFirst(
                PropagateDeadline::new(pool, policy)
                    .mark_attempts()
                    .stamp_late(),
            ),
        }
    }

    /// Names the downstream in the call's span and the hop's activity (default: the request
    /// URI's `host:port`).
    #[must_use = "this returns the client with the target set; the original is unchanged"]
    pub fn target(self, name: impl Into<String>) -> DeadlineClient {
        each!(self, s => s.target(name))
    }

    /// Also tells every callee its budget in these headers (see
    /// [`dialects`](super::dialects)); the default is `Deadline-Budget-Ms` alone.
    #[must_use = "this returns the client with the dialects set; the original is unchanged"]
    pub fn dialects(self, dialects: super::DialectSet) -> DeadlineClient {
        each!(self, s => s.dialects(dialects))
    }

    /// Where the attempts' OpenTelemetry `CLIENT` spans go (feature `otel`; see
    /// [`PropagateDeadline::tracing`](super::PropagateDeadline::tracing)).
    #[cfg(feature = "otel")]
    #[must_use = "this returns the client with tracing set; the original is unchanged"]
    pub fn tracing(self, tracing: crate::otel::Tracing) -> DeadlineClient {
        each!(self, s => s.tracing(tracing))
    }

    /// Records every call's attempts, skips and duration in `metrics`' Prometheus series
    /// (feature `metrics`; see [`crate::metrics`]).
    #[cfg(feature = "metrics")]
    #[must_use = "this returns the client with metrics set; the original is unchanged"]
    pub fn record_metrics(self, metrics: &crate::metrics::ServiceMetrics) -> DeadlineClient {
        each!(self, s => s.record_metrics(metrics))
    }

    /// The call policy.
    pub fn policy(&self) -> &CallPolicy {
        match &self.service {
            Inner::Pooled(s) => s.policy(),
            #[cfg(feature = "tls")]
            Inner::ConnectFirst(s) => s.policy(),
        }
    }

    /// The backoff before retries (see [`PropagateDeadline::backoff`]).
    #[must_use = "this returns the client with the backoff set; the original is unchanged"]
    pub fn backoff(self, backoff: Backoff) -> DeadlineClient {
        each!(self, s => s.backoff(backoff))
    }

    /// The retry budget per target, `None` for none (see
    /// [`PropagateDeadline::retry_budget`]); every clone of the client shares it.
    #[must_use = "this returns the client with the budget set; the original is unchanged"]
    pub fn retry_budget(self, budget: Option<RetryBudgetConfig>) -> DeadlineClient {
        each!(self, s => s.retry_budget(budget))
    }

    /// Hedges idempotent calls after `delay` (see [`PropagateDeadline::hedge`]).
    #[must_use = "this returns the client with hedging set; the original is unchanged"]
    pub fn hedge(self, delay: Option<HedgeDelay>) -> DeadlineClient {
        each!(self, s => s.hedge(delay))
    }

    /// A final 504 / DEADLINE_EXCEEDED answer becomes [`CallError::DeadlineExceeded`], so a
    /// handler passes it on with `?` (see [`PropagateDeadline::deadline_answer_as_error`];
    /// default `false`: every response is `Ok`).
    #[must_use = "this returns the client with the option set; the original is unchanged"]
    pub fn deadline_answer_as_error(self, on: bool) -> DeadlineClient {
        each!(self, s => s.deadline_answer_as_error(on))
    }

    /// When a callee's 504 is retried (see [`PropagateDeadline::callee_504`]).
    #[must_use = "this returns the client with the rule set; the original is unchanged"]
    pub fn callee_504(self, rule: Callee504) -> DeadlineClient {
        each!(self, s => s.callee_504(rule))
    }

    /// The largest response body a call reads, in bytes (default
    /// [`DEFAULT_MAX_BODY`](super::DEFAULT_MAX_BODY), 4 MiB): past it, or when the callee
    /// announces more in `Content-Length`, reading the body fails with
    /// [`BodyError::TooLarge`](super::BodyError::TooLarge) and the connection (HTTP/1.1) or
    /// the stream (HTTP/2) is dropped. `u64::MAX` is no limit. See [`body`](super::body).
    #[must_use = "this returns the client with the limit set; the original is unchanged"]
    pub fn max_body(self, limit: u64) -> DeadlineClient {
        each!(self, s => s.max_body(limit))
    }

    /// `GET uri` with an empty body. A `uri` that does not parse is
    /// [`CallError::InvalidRequest`], and nothing is sent.
    pub async fn get<U>(&self, uri: U) -> Result<Response<CallBody<Incoming>>, CallError>
    where
        Uri: TryFrom<U>,
        <Uri as TryFrom<U>>::Error: Into<http::Error>,
    {
        let uri = Uri::try_from(uri).map_err(|e| CallError::InvalidRequest(e.into()))?;
        let mut request = Request::new(Full::new(Bytes::new()));
        *request.uri_mut() = uri;
        self.send(request).await
    }

    /// Sends `request` (its URI must be absolute: `http://host:port/path`), retrying as the
    /// policy and the [retry rules](super#retries) allow. The response's body is read within
    /// the attempt's wait and the size limit ([`max_body`](Self::max_body)); a body cut short
    /// is an error, never a shorter body.
    pub async fn send(
        &self,
        request: Request<Full<Bytes>>,
    ) -> Result<Response<CallBody<Incoming>>, CallError> {
        match &self.service {
            Inner::Pooled(s) => s.start(request).await,
            #[cfg(feature = "tls")]
            Inner::ConnectFirst(s) => s.start(request).await,
        }
    }
}

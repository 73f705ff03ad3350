//! The users of the demo and the load: one request each, sent with a budget (and, if asked,
//! the instant the user gives up), waited for at most as long as the user waits, and what they
//! heard in time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;

/// What one user got.
#[derive(Debug, Clone)]
pub(crate) struct UserResult {
    /// The status heard before giving up, if any.
    pub status: Option<u16>,
    /// When the user heard back (or gave up), from when they sent.
    pub elapsed: Duration,
    /// When the user sent, in wall-clock epoch ms (the services' logs use the same clock).
    pub sent_ms: f64,
    /// When the user stopped waiting, in wall-clock epoch ms: read at that moment, so no hold
    /// that ended before it can appear to end after it.
    pub left_ms: f64,
    /// The reply's `Deadline-Trace`, if any.
    pub trace: Option<String>,
    /// The reply's body, if any.
    pub body: Option<String>,
    /// The gRPC status heard, for a gRPC user (`status` is then the HTTP status it stands for).
    pub grpc: Option<deadline::grpc::GrpcCode>,
    /// Why the user heard nothing, when the call failed before the wait ran out (see
    /// [`error_kind`]).
    pub error: Option<&'static str>,
}

/// An HTTP/1 client for users: pooled, TCP_NODELAY on, no library behaviour of its own.
pub(crate) type UserClient =
    hyper_util::client::legacy::Client<CountingConnector, http_body_util::Empty<bytes::Bytes>>;

pub(crate) fn user_client() -> UserClient {
    counted_user_client(None, Arc::default())
}

/// A user client and the count of the connections it has opened: a user whose wait ran out
/// drops its request and with it its connection, so past capacity every user given up costs a
/// later one a new connection (its handshake, an `accept`, a descriptor on both sides). The
/// load reports connections per user from this count, `opened`, which several clients may
/// share. With `local`, every connection is made from that address (see the load's users for
/// why).
pub(crate) fn counted_user_client(
    local: Option<std::net::IpAddr>,
    opened: Arc<AtomicU64>,
) -> UserClient {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_local_address(local);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(CountingConnector {
            inner: connector,
            opened,
        })
}

/// A user client's connector: hyper's, counting the connections it is asked to open.
#[derive(Clone, Debug)]
pub(crate) struct CountingConnector {
    inner: hyper_util::client::legacy::connect::HttpConnector,
    opened: Arc<AtomicU64>,
}

impl tower::Service<http::Uri> for CountingConnector {
    type Response =
        <hyper_util::client::legacy::connect::HttpConnector as tower::Service<http::Uri>>::Response;
    type Error =
        <hyper_util::client::legacy::connect::HttpConnector as tower::Service<http::Uri>>::Error;
    type Future =
        <hyper_util::client::legacy::connect::HttpConnector as tower::Service<http::Uri>>::Future;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        self.opened.fetch_add(1, Ordering::Relaxed);
        self.inner.call(uri)
    }
}

/// One user: sends `GET url` with `budget_ms` (if any), the `X-Request-Deadline` value of the
/// instant it gives up (`gives_up`, if any) and request id `id`, waits at most `wait`, then gives up
/// (dropping the request, which closes its connection).
pub(crate) async fn one_user(
    client: &UserClient,
    url: &str,
    id: &str,
    budget_ms: Option<u64>,
    gives_up: Option<http::HeaderValue>,
    wait: Duration,
) -> anyhow::Result<UserResult> {
    use http_body_util::BodyExt as _;
    let mut request = http::Request::get(url).header(deadline_http::enforce::REQUEST_ID_HEADER, id);
    if let Some(budget) = budget_ms {
        request = request.header(deadline::BUDGET_HEADER, budget);
    }
    if let Some(value) = gives_up {
        request = request.header(deadline::absolute::REQUEST_DEADLINE_HEADER, value);
    }
    let request = request
        .body(http_body_util::Empty::new())
        .context("building the user's request")?;
    let attempt = async {
        let response = client.request(request).await?;
        let status = response.status().as_u16();
        let trace = response
            .headers()
            .get(deadline::TRACE_HEADER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Heard {
            status,
            trace,
            body: String::from_utf8_lossy(&body).into_owned(),
            grpc: None,
        })
    };
    Ok(hear(wait, attempt).await)
}

/// What a user heard in time (see [`UserResult`] for each field).
pub(crate) struct Heard {
    pub status: u16,
    pub trace: Option<String>,
    pub body: String,
    pub grpc: Option<deadline::grpc::GrpcCode>,
}

/// Waits at most `wait` for `attempt` (which sends the user's request and reads the answer),
/// timing it on both clocks: what every kind of user shares. A connection error before the wait
/// is up is an answer too, with nothing to read.
pub(crate) async fn hear(
    wait: Duration,
    attempt: impl std::future::Future<Output = anyhow::Result<Heard>>,
) -> UserResult {
    let start = tokio::time::Instant::now();
    let sent_ms = crate::holds::epoch_ms_now();
    let result = tokio::time::timeout(wait, attempt).await;
    let left_ms = crate::holds::epoch_ms_now();
    let elapsed = tokio::time::Instant::now().saturating_duration_since(start);
    let unanswered = |elapsed| UserResult {
        status: None,
        elapsed,
        sent_ms,
        left_ms,
        trace: None,
        body: None,
        grpc: None,
        error: None,
    };
    match result {
        Ok(Ok(heard)) => UserResult {
            status: Some(heard.status),
            elapsed,
            sent_ms,
            left_ms,
            trace: heard.trace,
            body: Some(heard.body),
            grpc: heard.grpc,
            error: None,
        },
        Ok(Err(err)) => UserResult {
            error: Some(error_kind(&err)),
            ..unanswered(elapsed)
        },
        Err(_) => unanswered(wait),
    }
}

/// What kind of failure ended a user's call, in a few words a load report can count: the
/// operating system's reason when one is in the error's chain (a generator out of file
/// descriptors or local ports fails differently from a service that hung up), else how the
/// HTTP exchange broke.
pub(crate) fn error_kind(err: &anyhow::Error) -> &'static str {
    for cause in err.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && let Some(kind) = os_error_kind(io)
        {
            return kind;
        }
    }
    for cause in err.chain() {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>() {
            if hyper.is_incomplete_message() {
                return "closed, no answer";
            }
            if hyper.is_canceled() {
                return "canceled";
            }
            if hyper.is_closed() {
                return "connection closed";
            }
            if hyper.is_parse() {
                return "unreadable answer";
            }
        }
        if let Some(client) = cause.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            return "connect failed";
        }
    }
    "other error"
}

/// The operating system's reason for an I/O error, when it is one a load run can cause.
fn os_error_kind(err: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind;
    // EMFILE, ENFILE and EADDRNOTAVAIL have no stable `ErrorKind` of their own.
    match err.raw_os_error() {
        Some(23 | 24) => return Some("out of fds"),
        Some(99) => return Some("no free local port"),
        _ => {}
    }
    Some(match err.kind() {
        ErrorKind::ConnectionRefused => "connection refused",
        ErrorKind::ConnectionReset => "connection reset",
        ErrorKind::ConnectionAborted => "connection aborted",
        ErrorKind::BrokenPipe => "broken pipe",
        ErrorKind::TimedOut => "timed out",
        ErrorKind::UnexpectedEof => "closed, no answer",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::error_kind;

    #[test]
    fn a_generator_out_of_descriptors_is_told_from_a_service_that_hung_up() {
        let emfile = anyhow::Error::new(std::io::Error::from_raw_os_error(24));
        assert_eq!(error_kind(&emfile), "out of fds");
        let reset = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
            .context("sending the user's request");
        assert_eq!(error_kind(&reset), "connection reset");
        let refused = anyhow::Error::new(std::io::Error::from_raw_os_error(111));
        assert_eq!(error_kind(&refused), "connection refused");
        assert_eq!(error_kind(&anyhow::anyhow!("no reason")), "other error");
    }

    #[tokio::test]
    async fn a_service_closing_without_an_answer_is_counted_as_such() {
        // A listener that reads the request and closes without a word.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            use tokio::io::AsyncReadExt as _;
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let _ = socket.read(&mut buf).await;
        });
        let user = super::one_user(
            &super::user_client(),
            &format!("http://{addr}/order"),
            "u-1",
            Some(1000),
            None,
            std::time::Duration::from_secs(5),
        )
        .await
        .unwrap();
        server.await.unwrap();
        assert_eq!(user.status, None);
        assert_eq!(user.error, Some("closed, no answer"));
    }
}

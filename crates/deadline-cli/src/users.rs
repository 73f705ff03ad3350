//! The users of the demo and the load: one request each, sent with a budget (and, if asked,
//! the instant the user gives up), waited for at most as long as the user waits, and what they
//! heard in time.

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
}

/// An HTTP/1 client for users: pooled, TCP_NODELAY on, no library behaviour of its own.
pub(crate) type UserClient = hyper_util::client::legacy::Client<
    hyper_util::client::legacy::connect::HttpConnector,
    http_body_util::Empty<bytes::Bytes>,
>;

pub(crate) fn user_client() -> UserClient {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
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
        },
        Ok(Err(_)) => unanswered(elapsed),
        Err(_) => unanswered(wait),
    }
}

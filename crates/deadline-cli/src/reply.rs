//! The plain-text answers a `deadline service` hop gives itself, shared by its HTTP and gRPC
//! paths, its database work and its outage simulation (a leaf: it imports none of them).

use bytes::Bytes;
use deadline_http::propagate::BodyError;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Full;

/// A `text/plain` answer with `status`.
pub(crate) fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer when a downstream's reply body could not be read whole: 504 when the deadline
/// ended it, else 502 saying why (larger than `--max-body`, cut short, or past `--timeout`).
pub(crate) fn body_failed(name: &str, error: &BodyError) -> Response<Full<Bytes>> {
    match error {
        BodyError::DeadlineExceeded => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline exceeded at {name}: {error}\n"),
        ),
        BodyError::TooLarge { limit, .. } => text(
            StatusCode::BAD_GATEWAY,
            format!("{name}: downstream reply body larger than --max-body {limit} bytes\n"),
        ),
        _ => text(
            StatusCode::BAD_GATEWAY,
            format!("{name}: downstream reply lost: {error}\n"),
        ),
    }
}

/// The cause of a failed call, as ` (why)` after its message (a refused connection, a TLS
/// handshake with an untrusted certificate), or nothing when it has none.
pub(crate) fn cause(err: &deadline_http::CallError) -> String {
    std::error::Error::source(err)
        .map(|cause| format!(" ({cause})"))
        .unwrap_or_default()
}

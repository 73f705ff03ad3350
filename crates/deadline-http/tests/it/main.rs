//! Integration tests of the layers: middleware on paused time, HTTP in memory, real loopback.

mod context_without_budget;
mod dialects;
mod enforce;
mod exposure;
mod front;
mod h2;
#[cfg(feature = "axum")]
mod handlers;
mod http_memory;
mod loopback_client;
mod loopback_hedge;
mod loopback_server;
mod metrics;
#[cfg(feature = "otel")]
mod otel;
mod outbound_body;
mod propagate;
mod queue;
mod readme;
mod retries;
mod serve_limits;
mod server_timing;
mod streams;
mod throttle;
#[cfg(feature = "tls")]
mod tls;
mod trace_budgets;

/// A `GET` of `path` with an empty body and `headers`.
fn get_with(path: &str, headers: &[(&'static str, &'static str)]) -> http::Request<String> {
    let mut request = http::Request::get(path)
        .body(String::new())
        .expect("a valid request");
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(*name, http::HeaderValue::from_static(value));
    }
    request
}

/// The enforce layer as it was before its defaults changed (the trace only for a budgeted request, `Server-Timing` opt-in), and as `deadline service` keeps
/// it: the trace and `Server-Timing` on every answer, and a context for every request. The
/// tests of other behaviour read both headers and the context whether or not a request carries
/// a budget; `exposure` and `context_without_budget` test the defaults themselves.
fn every_header(name: &str) -> deadline_http::EnforceDeadlineLayer {
    deadline_http::EnforceDeadlineLayer::new(name)
        .trace_exposure(deadline_http::enforce::TraceExposure::Always)
        .server_timing(true)
        .context_without_budget(true)
}

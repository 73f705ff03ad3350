//! Integration tests of the layers: middleware on paused time, HTTP in memory, real loopback.

mod context_without_budget;
mod dialects;
mod enforce;
mod exposure;
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

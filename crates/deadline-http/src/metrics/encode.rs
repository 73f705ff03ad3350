//! A registry's text, as Prometheus scrapes it.

use std::fmt;

use http::{HeaderValue, Response, StatusCode};
use prometheus_client::registry::Registry;

/// The content type of [`encode`]'s text: the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry in the OpenMetrics text format, as Prometheus scrapes it.
pub fn encode(registry: &Registry) -> Result<String, fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

/// The answer to a scrape (`GET /metrics`): the registry's text with its [`CONTENT_TYPE`], or a
/// 500 in the unlikely case a metric fails to encode.
pub fn scrape(registry: &Registry) -> Response<String> {
    let (status, body, content_type) = match encode(registry) {
        Ok(text) => (StatusCode::OK, text, CONTENT_TYPE),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded\n".to_owned(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    response
}

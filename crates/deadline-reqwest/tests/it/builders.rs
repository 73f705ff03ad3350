//! The layer's settings, given through the middleware's builder: dialects, hedging, a deadline
//! answer as an error, Prometheus metrics (feature `metrics`) and OpenTelemetry spans (feature
//! `otel`).

use deadline::BUDGET_HEADER;
use deadline::CallPolicy;
use deadline::plan::hedge::HedgeDelay;
use deadline_http::propagate::{Backoff, DialectSet};
use deadline_reqwest::DeadlineMiddleware;
use http::StatusCode;
use tokio::time::Instant;

use crate::loopback::{call_error, context, ms, trace, with_middleware};
use crate::one_loop::{Answer, count, peer};

/// Every attempt tells its budget in the chosen dialects too, each written from the one
/// budget planned for it.
#[tokio::test]
async fn every_attempt_speaks_the_chosen_dialects() {
    let (addr, seen) = peer(|n| Answer::status(if n == 0 { 503 } else { 200 })).await;
    let dialects: DialectSet = "grpc-timeout,x-envoy-upstream-rq-timeout-ms"
        .parse()
        .unwrap();
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let middleware = DeadlineMiddleware::new(policy)
        .backoff(Backoff::NONE)
        .dialects(dialects);
    let client = with_middleware(middleware);
    let ctx = context(2_000);
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for headers in seen.iter() {
        let budget = headers[BUDGET_HEADER].to_str().unwrap();
        assert_eq!(headers["x-envoy-upstream-rq-timeout-ms"], budget);
        assert!(headers.contains_key("grpc-timeout"), "{headers:?}");
    }
}

/// A hedged GET: the first attempt is slow, the hedge sent after 100 ms answers, and the
/// first is dropped (recorded `lost`).
#[tokio::test]
async fn a_hedge_answers_for_a_slow_first_attempt() {
    let (addr, seen) = peer(|n| Answer {
        delay_ms: if n == 0 { 3_000 } else { 0 },
        ..Answer::status(200)
    })
    .await;
    let policy = CallPolicy::new(ms(5_000), 2).unwrap();
    let middleware = DeadlineMiddleware::new(policy).hedge(Some(HedgeDelay::Fixed(ms(100))));
    let client = with_middleware(middleware);
    let ctx = context(6_000);
    let started = Instant::now();
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/")).send())
        .await
        .unwrap();
    let took = Instant::now().saturating_duration_since(started);
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        took < ms(2_000),
        "the hedge answered, not the 3 s first attempt: {took:?}"
    );
    assert_eq!(count(&seen), 2);
    let text = trace(&ctx);
    assert!(text.contains("=lost"), "{text}");
}

/// With the option on, a final 504 from the callee is the call's deadline error.
#[tokio::test]
async fn a_deadline_answer_can_be_an_error() {
    let (addr, _) = peer(|_| Answer::status(504)).await;
    let policy = CallPolicy::new(ms(1_000), 1).unwrap();
    let as_is = with_middleware(DeadlineMiddleware::new(policy));
    let response = as_is.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);

    let as_error = with_middleware(
        DeadlineMiddleware::new(policy)
            .target("inventory")
            .deadline_answer_as_error(true),
    );
    let error = as_error
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap_err();
    let error = call_error(error);
    assert!(error.is_deadline(), "{error}");
    assert!(error.to_string().contains("inventory"), "{error}");
}

/// The calls are counted in the layer's Prometheus series, under the target's name.
#[cfg(feature = "metrics")]
#[tokio::test]
async fn the_calls_are_counted_in_the_layers_series() {
    use deadline_http::metrics::{DeadlineMetrics, encode};
    use prometheus_client::registry::Registry;

    let (addr, _) = peer(|n| Answer::status(if n == 0 { 503 } else { 200 })).await;
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service("gateway");
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let middleware = DeadlineMiddleware::new(policy)
        .backoff(Backoff::NONE)
        .target("inventory")
        .record_metrics(&metrics);
    let client = with_middleware(middleware);
    let response = client.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let text = encode(&registry).unwrap();
    let attempts = |kind: &str| {
        text.lines()
            .find(|line| {
                line.starts_with("deadline_attempts_total{")
                    && line.contains("target=\"inventory\"")
                    && line.contains(&format!("kind=\"{kind}\""))
            })
            .and_then(|line| line.rsplit(' ').next())
            .map(str::to_owned)
    };
    assert_eq!(attempts("first").as_deref(), Some("1"), "{text}");
    assert_eq!(attempts("retry").as_deref(), Some("1"), "{text}");
}

/// One OpenTelemetry client span per attempt, each attempt carrying its own `traceparent`.
#[cfg(feature = "otel")]
#[tokio::test]
async fn every_attempt_has_its_own_client_span() {
    use deadline_http::otel::{TRACEPARENT, Tracing};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let (addr, seen) = peer(|n| Answer::status(if n == 0 { 503 } else { 200 })).await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let middleware = DeadlineMiddleware::new(policy)
        .backoff(Backoff::NONE)
        .tracing(Tracing::provider(&provider));
    let client = with_middleware(middleware);
    let response = client.get(format!("http://{addr}/")).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let mut spans = Vec::new();
    for _ in 0..200 {
        spans = exporter.get_finished_spans().unwrap();
        if spans.len() >= 2 {
            break;
        }
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(spans.len(), 2, "{spans:#?}");
    let seen = seen.lock().unwrap();
    let parents: Vec<&str> = seen
        .iter()
        .map(|headers| headers[TRACEPARENT].to_str().unwrap())
        .collect();
    assert_eq!(parents.len(), 2);
    assert_ne!(parents[0], parents[1], "each attempt is its own span");
    for span in &spans {
        let id = span.span_context.span_id().to_string();
        assert!(
            parents.iter().any(|p| p.contains(&id)),
            "{id} in {parents:?}"
        );
    }
}

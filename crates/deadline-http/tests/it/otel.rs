//! OpenTelemetry spans (feature `otel`) over real loopback hops, exported in memory: the
//! attributes, the parent links of a two-hop chain, one span per attempt with its own
//! `traceparent`, and a malformed `traceparent` starting a new trace.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadline::{BUDGET_HEADER, CallPolicy};
use deadline_http::otel::{
    BUDGET_MS, OUTCOME, QUEUE_MS, REMAINING_MS, RESEND_COUNT, TRACEPARENT, Tracing,
};
use deadline_http::propagate::Backoff;
use deadline_http::{DeadlineClient, EnforceDeadlineLayer, serve};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use opentelemetry::trace::{SpanId, SpanKind, TraceId};
use opentelemetry::{KeyValue, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::net::TcpListener;
use tower::{Layer, service_fn};

const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

/// A provider that exports every ended span at once into memory.
fn provider() -> (SdkTracerProvider, InMemorySpanExporter) {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    (provider, exporter)
}

/// Serves `handler` behind an enforce layer named `name` on a fresh loopback port.
async fn hop<F, Fut>(name: &str, tracing: Tracing, handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let service = EnforceDeadlineLayer::new(name)
        .tracing(tracing)
        .layer(service_fn(handler));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, std::future::pending()));
    addr
}

/// `inventory`: answers 503 to the first `fail_first` requests, then 200.
async fn inventory(tracing: Tracing, fail_first: u32) -> SocketAddr {
    let seen = Arc::new(AtomicU32::new(0));
    hop("inventory", tracing, move |_request: Request<Incoming>| {
        let n = seen.fetch_add(1, Ordering::SeqCst);
        async move {
            let status = if n < fail_first {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            let mut response = Response::new(Full::new(Bytes::from_static(b"stock")));
            *response.status_mut() = status;
            Ok(response)
        }
    })
    .await
}

/// `gateway`: calls `inventory` at `downstream` with up to `attempts` attempts.
async fn gateway(tracing: Tracing, downstream: SocketAddr, attempts: u32) -> SocketAddr {
    let policy = CallPolicy::new(Duration::from_secs(2), attempts).unwrap();
    let client = DeadlineClient::new(policy)
        .target("inventory")
        .backoff(Backoff::NONE)
        .retry_budget(None)
        .tracing(tracing.clone());
    hop("gateway", tracing, move |_request: Request<Incoming>| {
        let client = client.clone();
        async move {
            let request = Request::get(format!("http://{downstream}/stock"))
                .body(Full::new(Bytes::new()))
                .unwrap();
            let status = match client.send(request).await {
                Ok(response) => response.status(),
                Err(_) => StatusCode::BAD_GATEWAY,
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok(response)
        }
    })
    .await
}

/// Sends one request to `addr` with `headers` over a plain hyper connection (headers exactly
/// as given), returning its status once its body is read.
async fn send(addr: SocketAddr, headers: &[(&str, &str)]) -> StatusCode {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    let mut request = Request::get("/").header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = sender
        .send_request(request.body(Full::new(Bytes::new())).unwrap())
        .await
        .expect("a response");
    let status = response.status();
    response.into_body().collect().await.expect("a body");
    status
}

/// The spans exported once there are `count` of them (the server spans end with the hold
/// report, just after the answer is handed on).
async fn spans(exporter: &InMemorySpanExporter, count: usize) -> Vec<SpanData> {
    for _ in 0..500 {
        let spans = exporter.get_finished_spans().unwrap();
        if spans.len() >= count {
            return spans;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "expected {count} spans, got {:#?}",
        exporter.get_finished_spans().unwrap()
    );
}

fn attr<'a>(span: &'a SpanData, key: &str) -> Option<&'a Value> {
    span.attributes
        .iter()
        .find(|KeyValue { key: k, .. }| k.as_str() == key)
        .map(|kv| &kv.value)
}

fn int(span: &SpanData, key: &str) -> i64 {
    match attr(span, key) {
        Some(Value::I64(v)) => *v,
        other => panic!("{key} on {}: {other:?}", span.name),
    }
}

fn text(span: &SpanData, key: &str) -> String {
    match attr(span, key) {
        Some(Value::String(v)) => v.as_str().to_owned(),
        other => panic!("{key} on {}: {other:?}", span.name),
    }
}

/// The server span of the hop that exported under `service`'s attempt ids, picked by kind.
fn of_kind(spans: &[SpanData], kind: SpanKind) -> Vec<&SpanData> {
    spans.iter().filter(|s| s.span_kind == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_two_hop_chain_shares_the_callers_trace_and_links_each_attempt_to_its_callee() {
    let (provider, exporter) = provider();
    let tracing = Tracing::provider(&provider);
    let inventory = inventory(tracing.clone(), 0).await;
    let gateway = gateway(tracing, inventory, 1).await;

    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let status = send(
        gateway,
        &[("traceparent", &caller), (BUDGET_HEADER.as_str(), "1000")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);

    let spans = spans(&exporter, 3).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    let trace = TraceId::from_hex(CALLER_TRACE).unwrap();
    assert!(spans.iter().all(|s| s.span_context.trace_id() == trace));

    let servers = of_kind(&spans, SpanKind::Server);
    let clients = of_kind(&spans, SpanKind::Client);
    assert_eq!((servers.len(), clients.len()), (2, 1), "{spans:#?}");
    let caller_span = SpanId::from_hex(CALLER_SPAN).unwrap();
    let gateway_span = servers
        .iter()
        .find(|s| s.parent_span_id == caller_span)
        .expect("the gateway's server span is the caller's child");
    let attempt = clients[0];
    assert_eq!(attempt.parent_span_id, gateway_span.span_context.span_id());
    let inventory_span = servers
        .iter()
        .find(|s| s.parent_span_id == attempt.span_context.span_id())
        .expect("inventory's server span is the attempt's child");

    // The budgets: 1000 at the gateway; the attempt sent less (the margin, the time spent),
    // and inventory saw what was sent.
    assert_eq!(int(gateway_span, BUDGET_MS), 1000);
    let sent = int(attempt, BUDGET_MS);
    assert!((1..1000).contains(&sent), "sent {sent}");
    assert_eq!(int(inventory_span, BUDGET_MS), sent);
    for (span, budget) in [
        (*gateway_span, 1000),
        (attempt, 1000),
        (*inventory_span, sent),
    ] {
        let remaining = int(span, REMAINING_MS);
        assert!(
            (0..=budget).contains(&remaining),
            "{}: {remaining}",
            span.name
        );
        assert_eq!(text(span, OUTCOME), "ok");
    }
    assert!(int(inventory_span, REMAINING_MS) <= int(gateway_span, REMAINING_MS));
    assert!(int(gateway_span, QUEUE_MS) >= 0);
    assert!(
        attr(attempt, RESEND_COUNT).is_none(),
        "a first attempt is no resend"
    );
    assert!(attr(attempt, QUEUE_MS).is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_attempt_has_its_own_span_and_traceparent() {
    let (provider, exporter) = provider();
    let tracing = Tracing::provider(&provider);
    let inventory = inventory(tracing.clone(), 1).await;
    let gateway = gateway(tracing, inventory, 2).await;

    let status = send(gateway, &[(BUDGET_HEADER.as_str(), "2000")]).await;
    assert_eq!(status, StatusCode::OK);

    // gateway, two attempts, two inventory requests.
    let spans = spans(&exporter, 5).await;
    let mut attempts = of_kind(&spans, SpanKind::Client);
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    attempts.sort_by_key(|s| s.start_time);
    let (first, retry) = (attempts[0], attempts[1]);
    assert_ne!(first.span_context.span_id(), retry.span_context.span_id());
    assert_eq!(first.parent_span_id, retry.parent_span_id);
    assert!(attr(first, RESEND_COUNT).is_none());
    assert_eq!(int(retry, RESEND_COUNT), 1);
    assert_eq!(text(first, OUTCOME), "error");
    assert_eq!(text(retry, OUTCOME), "ok");
    for attempt in [first, retry] {
        let callee = spans
            .iter()
            .find(|s| {
                s.span_kind == SpanKind::Server
                    && s.parent_span_id == attempt.span_context.span_id()
            })
            .unwrap_or_else(|| panic!("no server span under attempt {attempt:#?}"));
        assert_eq!(
            callee.span_context.trace_id(),
            attempt.span_context.trace_id()
        );
    }
    let statuses: Vec<i64> = of_kind(&spans, SpanKind::Server)
        .iter()
        .filter(|s| {
            s.parent_span_id == first.span_context.span_id()
                || s.parent_span_id == retry.span_context.span_id()
        })
        .map(|s| int(s, "http.response.status_code"))
        .collect();
    assert_eq!(statuses.len(), 2);
    assert!(
        statuses.contains(&503) && statuses.contains(&200),
        "{statuses:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_starts_a_new_trace() {
    let (provider, exporter) = provider();
    let tracing = Tracing::provider(&provider);
    let inventory = inventory(tracing, 0).await;
    let bad = "00-4BF92F3577B34DA6A3CE929D0E0E4736-zzzz67aa0ba902b7-01";
    let status = send(
        inventory,
        &[("traceparent", bad), (BUDGET_HEADER.as_str(), "500")],
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let spans = spans(&exporter, 1).await;
    assert_eq!(spans.len(), 1);
    let span = &spans[0];
    assert_eq!(span.parent_span_id, SpanId::INVALID);
    assert!(span.span_context.is_valid());
    assert_ne!(
        span.span_context.trace_id(),
        TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
    );
    assert_eq!(int(span, BUDGET_MS), 500);
}

/// Without a provider (the global no-op one), an attempt passes the caller's `traceparent` on
/// unchanged: an uninstrumented hop does not break its callers' traces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_provider_the_callers_traceparent_is_forwarded() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let inventory = hop(
        "inventory",
        Tracing::global(),
        move |request: Request<Incoming>| {
            record
                .lock()
                .unwrap()
                .push(request.headers().get(TRACEPARENT).cloned());
            async { Ok(Response::new(Full::new(Bytes::new()))) }
        },
    )
    .await;
    let gateway = gateway(Tracing::global(), inventory, 1).await;
    let caller = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    assert_eq!(
        send(gateway, &[("traceparent", &caller)]).await,
        StatusCode::OK
    );
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].as_ref().map(|v| v.to_str().unwrap()),
        Some(caller.as_str())
    );
}

/// A hedged call: the first attempt is slow, the hedge answers; both have spans, the hedge is a
/// resend, and the first, dropped when the hedge won, ends `cancelled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hedge_is_a_resend_and_the_attempt_it_beat_is_cancelled() {
    let (provider, exporter) = provider();
    let tracing = Tracing::provider(&provider);
    let seen = Arc::new(AtomicU32::new(0));
    let inventory = hop(
        "inventory",
        tracing.clone(),
        move |_request: Request<Incoming>| {
            let n = seen.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    tokio::time::sleep(Duration::from_millis(1_500)).await;
                }
                Ok(Response::new(Full::new(Bytes::new())))
            }
        },
    )
    .await;
    let policy = CallPolicy::new(Duration::from_secs(3), 2).unwrap();
    let client = DeadlineClient::new(policy)
        .retry_budget(None)
        .hedge(Some(deadline_http::propagate::HedgeDelay::Fixed(
            Duration::from_millis(50),
        )))
        .tracing(tracing);
    let request = Request::get(format!("http://{inventory}/stock"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = client.send(request).await.expect("a response");
    assert_eq!(response.status(), StatusCode::OK);

    let spans = spans(&exporter, 3).await;
    let mut attempts = of_kind(&spans, SpanKind::Client);
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    attempts.sort_by_key(|s| s.start_time);
    let (first, hedge) = (attempts[0], attempts[1]);
    assert_eq!(text(first, OUTCOME), "cancelled");
    assert!(attr(first, RESEND_COUNT).is_none());
    assert_eq!(text(hedge, OUTCOME), "ok");
    assert_eq!(int(hedge, RESEND_COUNT), 1);
    assert_ne!(first.span_context.span_id(), hedge.span_context.span_id());
}

/// A gRPC callee that answers HTTP 200 with `grpc-status: 4` (DEADLINE_EXCEEDED) in its head:
/// the attempt's span says what the call loop judged, a deadline and 504, not `ok` and 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_span_reads_a_grpc_status_as_the_call_loop_does() {
    let (provider, exporter) = provider();
    let tracing = Tracing::provider(&provider);
    let inventory = hop(
        "inventory",
        Tracing::off(),
        |_request: Request<Incoming>| async {
            let mut response = Response::new(Full::new(Bytes::new()));
            response
                .headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            response
                .headers_mut()
                .insert("grpc-status", "4".parse().unwrap());
            Ok(response)
        },
    )
    .await;
    let gateway = gateway(tracing, inventory, 1).await;
    send(gateway, &[(BUDGET_HEADER.as_str(), "2000")]).await;

    // The gateway's server span and its one attempt.
    let spans = spans(&exporter, 2).await;
    let attempts = of_kind(&spans, SpanKind::Client);
    assert_eq!(attempts.len(), 1, "{spans:#?}");
    assert_eq!(text(attempts[0], OUTCOME), "deadline", "{spans:#?}");
    assert_eq!(int(attempts[0], "http.response.status_code"), 504);
}

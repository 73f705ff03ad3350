//! The middleware against real servers on 127.0.0.1, in real time: orderings and generous
//! bounds, never exact timings.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadline::plan::retry_budget::RetryBudgetConfig;
use deadline::trace::Trace;
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::{CallError, DeadlineContext, EnforceDeadlineLayer, serve};
use deadline_reqwest::DeadlineMiddleware;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Layer, service_fn};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Inventory behind the enforce layer: `/budget` answers the budget it was told, `/flaky`
/// answers 503 to its first two calls, `/hang` waits 10 s. Counts its calls.
async fn inventory() -> (SocketAddr, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    let handler = service_fn(move |request: Request<Incoming>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let budget = request
                .headers()
                .get(BUDGET_HEADER)
                .map_or("none".to_owned(), |v| v.to_str().unwrap().to_owned());
            let mut response = Response::new(Full::new(Bytes::from(budget)));
            match request.uri().path() {
                "/flaky" if n < 2 => *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE,
                "/hang" => tokio::time::sleep(Duration::from_secs(10)).await,
                _ => {}
            }
            Ok::<_, Infallible>(response)
        }
    });
    let service = EnforceDeadlineLayer::new("inventory").layer(handler);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, service, std::future::pending::<()>()));
    (addr, calls)
}

fn with_middleware(middleware: DeadlineMiddleware) -> ClientWithMiddleware {
    let reqwest = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    ClientBuilder::new(reqwest).with(middleware).build()
}

fn context(budget: u64) -> DeadlineContext {
    let now = Instant::now();
    DeadlineContext::new(
        Some(Deadline::after_duration(now.into_std(), ms(budget))),
        ms(10),
        now,
    )
}

fn trace(context: &DeadlineContext) -> String {
    let (spans, dropped) = context.take_spans();
    let mut trace = Trace::new();
    trace.spans = spans;
    trace.dropped = dropped;
    trace.encode()
}

#[tokio::test]
async fn the_served_deadline_travels_with_no_application_code() {
    let (addr, _) = inventory().await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).target("inventory"));
    let ctx = context(600);
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/budget")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let told: u64 = response.text().await.unwrap().parse().unwrap();
    assert!(
        (400..=550).contains(&told),
        "told {told} ms of 600 less the 50 ms margin"
    );
    let text = trace(&ctx);
    // The call, its attempt, and inventory's own spans nested under it.
    assert!(text.starts_with("call:inventory@"), "{text}");
    assert!(text.contains(".attempt@"), "{text}");
    assert!(text.contains("..inventory@"), "{text}");

    // Outside any deadline: no header, as reqwest alone.
    let body = client
        .get(format!("http://{addr}/budget"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "none");
}

#[tokio::test]
async fn a_503_is_retried_after_a_backoff_and_the_budget_is_shared_by_clones() {
    let (addr, calls) = inventory().await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).target("inventory"));
    let ctx = context(2_000);
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/flaky")).send())
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the third attempt answers"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    let text = trace(&ctx);
    assert_eq!(text.matches(".attempt@").count(), 3, "{text}");
    assert!(text.contains("=503"), "{text}");

    // An empty budget refuses every retry, for every clone of the middleware.
    let (addr, calls) = inventory().await;
    let empty = DeadlineMiddleware::new(policy).retry_budget(Some(RetryBudgetConfig::ratio_cap(
        Duration::from_secs(10),
        0,
        0,
    )));
    let (a, b) = (with_middleware(empty.clone()), with_middleware(empty));
    let ctx = context(2_000);
    let first = ctx
        .clone()
        .scope(a.get(format!("http://{addr}/flaky")).send())
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(trace(&ctx).contains("=throttled"));
    let second = b.get(format!("http://{addr}/flaky")).send().await.unwrap();
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::SeqCst), 2, "one attempt each");
}

/// A peer that accepts connections and never answers; counts them.
async fn silent() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&calls);
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (addr, calls)
}

#[tokio::test]
async fn the_attempt_timeout_never_runs_past_the_deadline() {
    let (addr, calls) = silent().await;
    // 5 s attempts, but the caller only has 400 ms.
    let policy = CallPolicy::new(ms(5_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy));
    let ctx = context(400);
    let started = Instant::now();
    let error = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/hang")).send())
        .await
        .unwrap_err();
    let took = Instant::now().saturating_duration_since(started);
    assert!(
        took < ms(1_000),
        "gave up at the deadline, not after 5 s: {took:?}"
    );
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("a deadline error, not {error:?}");
    };
    let error = error.downcast_ref::<CallError>().expect("a CallError");
    assert!(error.is_deadline(), "{error}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no time for a second attempt"
    );
    let text = trace(&ctx);
    assert!(text.contains("=deadline"), "{text}");
}

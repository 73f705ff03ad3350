//! The middleware against real servers on 127.0.0.1, in real time: orderings and generous
//! bounds, never exact timings.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadline::plan::retry::Callee504;
use deadline::plan::retry_budget::RetryBudgetConfig;
use deadline::trace::Trace;
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::{CallError, DeadlineContext, EnforceDeadlineLayer, serve};
use deadline_reqwest::DeadlineMiddleware;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Layer, service_fn};

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Inventory behind the enforce layer: `/budget` answers the budget it was told, `/flaky`
/// answers 503 to its first two calls, `/hang` waits 10 s (so the layer answers 504 at its
/// cutoff), `/retry-after` answers its first call 503 with `Retry-After: 1` and
/// `/grpc-pushback` 503 with `grpc-retry-pushback-ms: 300`. Counts its calls.
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
                "/retry-after" if n == 0 => {
                    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    response
                        .headers_mut()
                        .insert("retry-after", HeaderValue::from_static("1"));
                }
                "/grpc-pushback" if n == 0 => {
                    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                    response
                        .headers_mut()
                        .insert("grpc-retry-pushback-ms", HeaderValue::from_static("300"));
                }
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

pub(crate) fn with_middleware(middleware: DeadlineMiddleware) -> ClientWithMiddleware {
    let reqwest = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .unwrap();
    ClientBuilder::new(reqwest).with(middleware).build()
}

pub(crate) fn context(budget: u64) -> DeadlineContext {
    let now = Instant::now();
    DeadlineContext::new(
        Some(Deadline::after_duration(now.into_std(), ms(budget))),
        ms(10),
        now,
    )
}

/// The [`CallError`] a call failed with (any other error fails the test).
pub(crate) fn call_error(error: reqwest_middleware::Error) -> CallError {
    let reqwest_middleware::Error::Middleware(error) = error else {
        panic!("a CallError, not {error:?}");
    };
    error.downcast::<CallError>().expect("a CallError")
}

pub(crate) fn trace(context: &DeadlineContext) -> String {
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
    // Inventory's budget at arrival comes through the nesting exactly: what its handler was
    // told, not a bound from the times.
    let nested = Trace::decode(text.as_bytes());
    let inventory = &nested.spans[0].children[0].children[0];
    assert_eq!(inventory.name, "inventory");
    assert_eq!(inventory.budget_ms, Some(told), "{text}");

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
pub(crate) async fn silent() -> (SocketAddr, Arc<AtomicUsize>) {
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
    // At the 400 ms deadline: within twice it.
    assert!(
        took < ms(800),
        "gave up at the deadline, not after 5 s: {took:?}"
    );
    let error = call_error(error);
    assert!(error.is_deadline(), "{error}");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "no time for a second attempt"
    );
    let text = trace(&ctx);
    assert!(text.contains("=deadline"), "{text}");
}

/// A POST is sent once: it may have done its work before failing. With an `Idempotency-Key` the
/// callee can tell a repeat, so it is retried like a GET.
#[tokio::test]
async fn a_post_is_not_retried_unless_it_carries_an_idempotency_key() {
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let (addr, calls) = inventory().await;
    let client = with_middleware(DeadlineMiddleware::new(policy).target("inventory"));
    let ctx = context(2_000);
    let response = ctx
        .clone()
        .scope(
            client
                .post(format!("http://{addr}/flaky"))
                .body("order")
                .send(),
        )
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a POST is sent once");
    let text = trace(&ctx);
    assert_eq!(text.matches(".attempt@").count(), 1, "{text}");

    let (addr, calls) = inventory().await;
    let response = context(2_000)
        .scope(
            client
                .post(format!("http://{addr}/flaky"))
                .header("idempotency-key", "order-42")
                .body("order")
                .send(),
        )
        .await
        .unwrap();
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "the third attempt answers"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 3);
}

/// The callee's pushback sets the wait before the retry (the default backoff alone would wait
/// at most 25 ms), and a pushback longer than the budget leaves ends the call at once, with the
/// callee's answer and without sleeping.
#[tokio::test]
async fn the_callees_pushback_is_honoured_inside_the_budget() {
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).target("inventory"));
    for (path, pushback) in [("/retry-after", ms(1_000)), ("/grpc-pushback", ms(300))] {
        let (addr, calls) = inventory().await;
        let started = Instant::now();
        let response = context(3_000)
            .scope(client.get(format!("http://{addr}{path}")).send())
            .await
            .unwrap();
        let took = Instant::now().saturating_duration_since(started);
        assert_eq!(response.status(), StatusCode::OK, "{path}: retried");
        assert_eq!(calls.load(Ordering::SeqCst), 2, "{path}");
        assert!(took >= pushback, "{path}: retried after {took:?}");
        assert!(took < pushback + ms(1_000), "{path}: {took:?}");
    }

    // 800 ms left: a 1 s Retry-After does not fit, so no sleep and no retry.
    let (addr, calls) = inventory().await;
    let ctx = context(800);
    let started = Instant::now();
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/retry-after")).send())
        .await
        .unwrap();
    let took = Instant::now().saturating_duration_since(started);
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    assert!(took < ms(500), "ended at once, not after a sleep: {took:?}");
    let text = trace(&ctx);
    assert!(text.contains("=skipped-pushback"), "{text}");
}

/// A callee that answers 504 ran out of the budget it was told (550 ms here: a 600 ms attempt
/// less the 50 ms margin). With 800 ms to start with, a retry would get under 250 ms, less than
/// half of what just ran out: not sent, the 504 is the answer. With 2 s each retry gets the
/// whole 550 ms again: all three attempts are sent. With the rule off, the small retry is sent.
#[tokio::test]
async fn a_callee_504_is_retried_only_with_half_its_budget() {
    let policy = CallPolicy::new(ms(600), 3).unwrap();
    for (budget, rule, calls_expected) in [
        (800, Callee504::DEFAULT, 1),
        (2_000, Callee504::DEFAULT, 3),
        (800, Callee504::ALWAYS, 2),
    ] {
        let (addr, calls) = inventory().await;
        let client = with_middleware(
            DeadlineMiddleware::new(policy)
                .target("inventory")
                .callee_504(rule),
        );
        let ctx = context(budget);
        let response = ctx
            .clone()
            .scope(client.get(format!("http://{addr}/hang")).send())
            .await;
        let text = trace(&ctx);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            calls_expected,
            "{budget} ms, {rule:?}: {text}"
        );
        if calls_expected == 1 {
            let response = response.expect("the callee's 504 is the answer");
            assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
            assert!(text.contains("=skipped-504"), "{text}");
        }
    }
}

/// A downstream whose `/big` answers an endless chunked body and whose `/stall` sends five bytes
/// of a 1,000-byte body and then nothing. Reports each connection's end on the channel.
async fn hostile() -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<()>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                if head.starts_with(b"GET /big ") {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                        .await;
                    let mut chunk = b"10000\r\n".to_vec();
                    chunk.extend_from_slice(&[b'x'; 0x10000]);
                    chunk.extend_from_slice(b"\r\n");
                    while stream.write_all(&chunk).await.is_ok() {}
                } else {
                    let _ = stream
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nfirst")
                        .await;
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                }
                let _ = tx.send(());
            });
        }
    });
    (addr, rx)
}

#[tokio::test]
async fn a_body_past_the_limit_fails_the_read_and_closes_the_connection() {
    let (addr, mut ends) = hostile().await;
    let policy = CallPolicy::new(Duration::from_secs(10), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).max_body(256 * 1024));
    let response = client
        .get(format!("http://{addr}/big"))
        .send()
        .await
        .unwrap();
    let error = tokio::time::timeout(Duration::from_secs(10), response.bytes())
        .await
        .expect("the read ends")
        .unwrap_err();
    let body = deadline_reqwest::body_error(&error).expect("a body error in the sources");
    assert!(body.is_too_large(), "{body}");
    tokio::time::timeout(Duration::from_secs(10), ends.recv())
        .await
        .expect("the downstream sees the connection closed");
}

#[tokio::test]
async fn a_stalled_body_ends_at_the_callers_deadline() {
    let (addr, mut ends) = hostile().await;
    let policy = CallPolicy::new(Duration::from_secs(30), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy));
    let start = Instant::now();
    let deadline = Deadline::after_duration(start.into_std(), ms(600));
    let result = deadline_http::with_deadline(deadline, async {
        let response = client
            .get(format!("http://{addr}/stall"))
            .send()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), response.bytes())
            .await
            .expect("the read ends")
    })
    .await;
    let took = Instant::now().saturating_duration_since(start);
    assert!(result.is_err());
    // The 600 ms deadline (the body stalls for good): within twice it.
    assert!(took >= ms(590) && took < ms(1_200), "{took:?}");
    tokio::time::timeout(Duration::from_secs(10), ends.recv())
        .await
        .expect("the downstream sees the hang-up");
}

/// A callee chooses what its `Deadline-Trace` says: one that claims to have worked for
/// 999,999 ms answers at once. Its spans are held inside the attempt that carried them.
#[tokio::test]
async fn a_callees_spans_are_held_inside_the_attempt_that_carried_them() {
    let handler = service_fn(|_request: Request<Incoming>| async {
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        response.headers_mut().insert(
            deadline::TRACE_HEADER,
            HeaderValue::from_static("liar@0-999999=200,.work@0-999999=ok"),
        );
        Ok::<_, Infallible>(response)
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, handler, std::future::pending::<()>()));

    let policy = CallPolicy::new(ms(1_000), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).target("liar"));
    let ctx = context(2_000);
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/")).send())
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    let (spans, _) = ctx.take_spans();
    let call = &spans[0];
    let attempt = &call.children[0];
    assert_eq!(attempt.name, "attempt");
    let liar = &attempt.children[0];
    assert_eq!(liar.name, "liar");
    assert!(
        attempt.start_ms <= liar.start_ms && liar.end_ms <= attempt.end_ms,
        "the callee's span {}-{} is outside its attempt {}-{}",
        liar.start_ms,
        liar.end_ms,
        attempt.start_ms,
        attempt.end_ms
    );
    assert!(liar.children[0].end_ms <= attempt.end_ms);
}

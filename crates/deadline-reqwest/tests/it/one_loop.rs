//! What the middleware does because it runs the layer's call loop: the gRPC verdict, the
//! gRPC budget header, one retry budget per target, the layer's timed-out error, and reqwest's
//! own timeout left alone. Real peers on 127.0.0.1 (dropped with the test's runtime), real
//! time, generous bounds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline::CallPolicy;
use deadline::plan::retry_budget::RetryBudgetConfig;
use deadline_http::propagate::Backoff;
use deadline_http::serve;
use deadline_reqwest::DeadlineMiddleware;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::service_fn;

use crate::loopback::{call_error, context, ms, silent, trace, with_middleware};

/// What the peer answers one request: a status, headers, after a delay.
#[derive(Clone, Debug, Default)]
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, &'static str)>,
    pub(crate) delay_ms: u64,
}

impl Answer {
    pub(crate) fn status(status: u16) -> Answer {
        Answer {
            status,
            ..Answer::default()
        }
    }

    /// A trailers-only gRPC answer with `code` in its headers.
    pub(crate) fn grpc(code: &'static str) -> Answer {
        Answer {
            status: 200,
            headers: vec![("content-type", "application/grpc"), ("grpc-status", code)],
            delay_ms: 0,
        }
    }
}

/// The headers of every request a peer got, in order.
pub(crate) type Seen = Arc<Mutex<Vec<HeaderMap>>>;

/// A peer on a fresh 127.0.0.1 port that answers its `n`-th request (from 0) with
/// `script(n)` and keeps every request's headers.
pub(crate) async fn peer(
    script: impl Fn(usize) -> Answer + Send + Sync + 'static,
) -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let log = Arc::clone(&seen);
    let script = Arc::new(script);
    let handler = service_fn(move |request: Request<Incoming>| {
        let n = {
            let mut log = log.lock().unwrap();
            log.push(request.headers().clone());
            log.len() - 1
        };
        let answer = script(n);
        async move {
            tokio::time::sleep(ms(answer.delay_ms)).await;
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = StatusCode::from_u16(answer.status).unwrap();
            for (name, value) in answer.headers {
                response
                    .headers_mut()
                    .insert(name, HeaderValue::from_static(value));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, handler, std::future::pending::<()>()));
    (addr, seen)
}

pub(crate) fn count(seen: &Seen) -> usize {
    seen.lock().unwrap().len()
}

/// A gRPC server answers 200 whatever happened; UNAVAILABLE in `grpc-status` is a failure
/// another attempt may fix, as the layer judges it. The old middleware returned the 200.
#[tokio::test]
async fn a_grpc_unavailable_answer_is_retried() {
    let (addr, seen) = peer(|n| Answer::grpc(if n == 0 { "14" } else { "0" })).await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).backoff(Backoff::NONE));
    let ctx = context(2_000);
    let response = ctx
        .clone()
        .scope(
            client
                .post(format!("http://{addr}/inventory.Stock/Get"))
                .header("content-type", "application/grpc")
                .header("idempotency-key", "k1")
                .send(),
        )
        .await
        .unwrap();
    assert_eq!(response.headers()["grpc-status"], "0");
    assert_eq!(
        response.url().path(),
        "/inventory.Stock/Get",
        "the response keeps its URL"
    );
    assert_eq!(count(&seen), 2, "UNAVAILABLE, then OK");
    let text = trace(&ctx);
    assert!(
        text.contains("=503"),
        "UNAVAILABLE is recorded as the 503 it stands for: {text}"
    );
}

/// A gRPC request tells its callee the budget in `grpc-timeout` too, on every attempt, as the
/// layer does: a gRPC server that knows nothing of `Deadline-Budget-Ms` still learns it.
#[tokio::test]
async fn every_attempt_of_a_grpc_request_carries_grpc_timeout() {
    let (addr, seen) = peer(|n| Answer::grpc(if n == 0 { "14" } else { "0" })).await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).backoff(Backoff::NONE));
    let ctx = context(2_000);
    ctx.clone()
        .scope(
            client
                .get(format!("http://{addr}/inventory.Stock/Get"))
                .header("content-type", "application/grpc")
                .send(),
        )
        .await
        .unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    for headers in seen.iter() {
        let budget: u64 = headers[BUDGET_HEADER].to_str().unwrap().parse().unwrap();
        let timeout = headers["grpc-timeout"].to_str().unwrap();
        assert!(budget <= 1_950, "{budget}");
        assert!(
            timeout.ends_with('u') || timeout.ends_with('m'),
            "grpc-timeout {timeout:?}"
        );
    }
}

/// One retry budget per target, as the layer keeps them: a callee that is down spends its own
/// retries, not those of the other callees of the same client. The old middleware had one
/// budget for every target.
#[tokio::test]
async fn the_retry_budget_is_one_per_target() {
    let (a, seen_a) = peer(|_| Answer::status(503)).await;
    let (b, seen_b) = peer(|_| Answer::status(503)).await;
    // One retry per 10 s window, per target.
    let one_retry = Some(RetryBudgetConfig::ratio_cap(Duration::from_secs(10), 0, 1));
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let middleware = DeadlineMiddleware::new(policy)
        .backoff(Backoff::NONE)
        .retry_budget(one_retry);
    let client = with_middleware(middleware);
    for addr in [a, b] {
        let response = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    assert_eq!(
        (count(&seen_a), count(&seen_b)),
        (2, 2),
        "each target got its own retry"
    );

    // Named the same, two hosts are one target, with one budget.
    let (c, seen_c) = peer(|_| Answer::status(503)).await;
    let (d, seen_d) = peer(|_| Answer::status(503)).await;
    let middleware = DeadlineMiddleware::new(policy)
        .backoff(Backoff::NONE)
        .retry_budget(one_retry)
        .target("inventory");
    let client = with_middleware(middleware);
    for addr in [c, d] {
        client.get(format!("http://{addr}/")).send().await.unwrap();
    }
    assert_eq!((count(&seen_c), count(&seen_d)), (2, 1));
}

/// The target a call is recorded (and budgeted) under is the URL's host and port: the
/// credentials a URL may carry never become a name.
#[tokio::test]
async fn the_target_is_named_without_the_urls_credentials() {
    let (addr, _) = peer(|_| Answer::status(200)).await;
    let policy = CallPolicy::new(ms(1_000), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy));
    let ctx = context(2_000);
    ctx.clone()
        .scope(client.get(format!("http://user:secret@{addr}/")).send())
        .await
        .unwrap();
    let text = trace(&ctx);
    let name = deadline::trace::Span::new(format!("call:{addr}"), 0, 0).name;
    assert!(text.contains(&format!("{name}@")), "{text}");
    assert!(!text.contains("secret") && !text.contains("user"), "{text}");
}

/// An attempt that used its full timeout (no deadline cut it), with none allowed after it,
/// ends the call with the layer's timed-out error. The old middleware returned a reqwest
/// timeout error of its own making.
#[tokio::test]
async fn the_last_attempt_that_used_its_full_timeout_is_a_timed_out_call() {
    let (addr, calls) = silent().await;
    let policy = CallPolicy::new(ms(300), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy));
    let error = client
        .get(format!("http://{addr}/"))
        .send()
        .await
        .unwrap_err();
    let error = call_error(error);
    assert!(error.is_timeout(), "{error}");
    assert_eq!(error.attempts_sent(), 1);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// A timeout set on reqwest itself still applies: the middleware bounds each attempt by its own
/// wait and no longer writes the request's timeout. The old middleware replaced it with the
/// attempt's wait, so a 200 ms request timeout became the policy's 3 s.
#[tokio::test]
async fn reqwests_own_timeout_is_left_alone() {
    let (addr, _) = silent().await;
    let policy = CallPolicy::new(ms(3_000), 1).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy));
    let started = Instant::now();
    let error = client
        .get(format!("http://{addr}/"))
        .timeout(ms(200))
        .send()
        .await
        .unwrap_err();
    let took = Instant::now().saturating_duration_since(started);
    assert!(error.is_timeout(), "reqwest's own timeout: {error:?}");
    // Within twice the request's 200 ms.
    assert!(
        took < ms(400),
        "the request's 200 ms, not the policy's 3 s: {took:?}"
    );
}

/// A streaming body cannot be copied: the call gets one attempt, as before.
#[tokio::test]
async fn a_streaming_body_is_sent_once() {
    let (addr, seen) = peer(|_| Answer::status(503)).await;
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = with_middleware(DeadlineMiddleware::new(policy).backoff(Backoff::NONE));
    let body = reqwest::Body::wrap(Full::new(Bytes::from_static(b"stock")));
    let response = client
        .put(format!("http://{addr}/"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(count(&seen), 1);
}

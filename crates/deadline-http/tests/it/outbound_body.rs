//! The response body of an outbound call, against hostile downstreams on 127.0.0.1 written
//! with raw sockets (so they can send what no well-behaved server would): a body larger than
//! the limit, one cut short, one that stalls. Real time: the assertions are orderings and
//! generous bounds.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use deadline::{CallPolicy, Deadline};
use deadline_http::propagate::{BodyError, DEFAULT_MAX_BODY};
use deadline_http::{DeadlineClient, with_deadline};
use http::{Request, Response};
use http_body_util::BodyExt;
use http_body_util::channel::Channel;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// `future`, or a panic when it takes more than 10 s (a read with no bound).
async fn bounded<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .expect("the body ends within 10 s")
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(timeout_ms: u64) -> CallPolicy {
    CallPolicy::new(ms(timeout_ms), 1).expect("a valid policy")
}

/// What a hostile downstream does once it has read a request's head.
#[derive(Clone, Copy)]
enum Hostile {
    /// A chunked body of 64 KiB chunks that never ends.
    Endless,
    /// `Content-Length: 300000000`, then 64 KiB chunks.
    Announced,
    /// `Content-Length: 100`, 10 bytes, then the connection is closed.
    Truncated,
    /// `Content-Length: 1000`, 5 bytes, then nothing: the connection stays open.
    Stall,
}

/// How a downstream's connection ended, seen from the downstream.
#[derive(Debug)]
struct HungUp {
    /// Body bytes written before the caller went away.
    written: u64,
}

/// Serves `hostile` on a fresh port; every connection reports its end on the channel.
async fn hostile(kind: Hostile) -> (SocketAddr, mpsc::UnboundedReceiver<HungUp>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(answer(stream, kind, tx.clone()));
        }
    });
    (addr, rx)
}

async fn answer(mut stream: TcpStream, kind: Hostile, done: mpsc::UnboundedSender<HungUp>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let chunk = vec![0xffu8; 64 * 1024];
    let mut written = 0u64;
    match kind {
        Hostile::Endless => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                .await;
            let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
            framed.extend_from_slice(&chunk);
            framed.extend_from_slice(b"\r\n");
            while stream.write_all(&framed).await.is_ok() {
                written += chunk.len() as u64;
            }
        }
        Hostile::Announced => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 300000000\r\n\r\n")
                .await;
            while stream.write_all(&chunk).await.is_ok() {
                written += chunk.len() as u64;
            }
        }
        Hostile::Truncated => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n0123456789")
                .await;
            return;
        }
        Hostile::Stall => {
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\nfirst")
                .await;
            written = 5;
            // Until the caller hangs up.
            while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
        }
    }
    let _ = done.send(HungUp { written });
}

/// A read of an oversize body fails naming the limit, having read little more than the limit,
/// and the downstream's connection is closed (it cannot go on writing into the caller).
#[tokio::test]
async fn a_downstream_body_past_the_limit_fails_and_closes_the_connection() {
    for kind in [Hostile::Endless, Hostile::Announced] {
        let (addr, mut ends) = hostile(kind).await;
        let client = DeadlineClient::new(policy(10_000)).max_body(256 * 1024);
        let response = client
            .get(format!("http://{addr}/"))
            .await
            .expect("the head");
        let error = bounded(response.into_body().collect()).await.unwrap_err();
        assert!(error.is_too_large(), "{error}");
        assert_eq!(
            error.to_string(),
            "response body larger than the limit of 262144 bytes"
        );
        let end = tokio::time::timeout(Duration::from_secs(10), ends.recv())
            .await
            .expect("the downstream sees the connection closed")
            .expect("a report");
        // What the kernel's socket buffers hold on both sides, not the whole body.
        assert!(end.written < 64 * 1024 * 1024, "{end:?}");
    }
}

/// Regression: a reply with `Content-Length: 100` whose connection closed after 10 bytes was
/// read as a short body. It is an error.
#[tokio::test]
async fn a_truncated_downstream_body_is_an_error() {
    let (addr, _ends) = hostile(Hostile::Truncated).await;
    let client = DeadlineClient::new(policy(5_000));
    let response = client.get(format!("http://{addr}/")).await.expect("a head");
    let error = bounded(response.into_body().collect()).await.unwrap_err();
    assert!(matches!(error, BodyError::Inner(_)), "{error}");
}

/// Without a deadline, the per-attempt timeout covers the body: a downstream that sends its
/// head and then stalls fails the read at the timeout, and sees the connection closed.
#[tokio::test]
async fn without_a_budget_the_timeout_covers_a_stalled_body() {
    let (addr, mut ends) = hostile(Hostile::Stall).await;
    let client = DeadlineClient::new(policy(400));
    let start = Instant::now();
    let response = client.get(format!("http://{addr}/")).await.expect("a head");
    let error = bounded(response.into_body().collect()).await.unwrap_err();
    let took = Instant::now().saturating_duration_since(start);
    assert!(error.is_timeout(), "{error}");
    // The 400 ms attempt timeout (the body stalls for good): within twice it.
    assert!(took >= ms(390) && took < ms(800), "{took:?}");
    let end = tokio::time::timeout(Duration::from_secs(10), ends.recv())
        .await
        .expect("the downstream sees the hang-up")
        .expect("a report");
    assert_eq!(end.written, 5);
}

/// With a deadline, a body still arriving when it passes ends with the deadline's error.
#[tokio::test]
async fn a_stalled_body_ends_at_the_callers_deadline() {
    let (addr, mut ends) = hostile(Hostile::Stall).await;
    let client = DeadlineClient::new(policy(30_000));
    let start = Instant::now();
    let deadline = Deadline::after_duration(start.into_std(), ms(600));
    let error = with_deadline(deadline, async {
        let response = client.get(format!("http://{addr}/")).await.expect("a head");
        bounded(response.into_body().collect()).await.unwrap_err()
    })
    .await;
    let took = Instant::now().saturating_duration_since(start);
    assert!(error.is_deadline(), "{error}");
    // The 600 ms deadline (the attempt timeout is 30 s): within twice it.
    assert!(took >= ms(590) && took < ms(1_200), "{took:?}");
    tokio::time::timeout(Duration::from_secs(10), ends.recv())
        .await
        .expect("the downstream sees the hang-up")
        .expect("a report");
}

/// Over HTTP/2 a body stalled past the deadline resets its stream: the callee's body sender
/// sees the stream gone, and the connection serves the next call.
#[tokio::test]
async fn over_h2_a_stalled_body_resets_its_stream() {
    let (gone_tx, mut gone) = mpsc::unbounded_channel::<()>();
    let service = tower::service_fn(move |_request: Request<hyper::body::Incoming>| {
        let gone_tx = gone_tx.clone();
        async move {
            let (mut tx, body) = Channel::<Bytes, Infallible>::new(1);
            tokio::spawn(async move {
                let _ = tx.send_data(Bytes::from_static(b"first")).await;
                // The sender learns the stream is gone when the body is dropped.
                loop {
                    if tx.send_data(Bytes::from_static(b".")).await.is_err() {
                        let _ = gone_tx.send(());
                        return;
                    }
                    tokio::time::sleep(ms(100)).await;
                    // Stall: one byte every 100 ms never ends the body.
                }
            });
            Ok::<_, Infallible>(Response::new(body))
        }
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(deadline_http::serve(
        listener,
        service,
        std::future::pending::<()>(),
    ));
    let client = DeadlineClient::h2c(policy(30_000));
    let start = Instant::now();
    let deadline = Deadline::after_duration(start.into_std(), ms(500));
    let error = with_deadline(deadline, async {
        let response = client.get(format!("http://{addr}/")).await.expect("a head");
        bounded(response.into_body().collect()).await.unwrap_err()
    })
    .await;
    assert!(error.is_deadline(), "{error}");
    tokio::time::timeout(Duration::from_secs(10), gone.recv())
        .await
        .expect("the callee sees its stream reset")
        .expect("a report");
}

#[test]
fn the_default_limit_is_a_few_mebibytes() {
    assert_eq!(DEFAULT_MAX_BODY, 4 * 1024 * 1024);
}

/// Regression: an HTTP/2 connection an attempt timed out on stayed in the pool, so every later
/// call went out on it (a wedged connection took every call for as long as it stayed open). The
/// next call after a timeout dials a new connection; calls that end in time share one.
#[tokio::test]
async fn over_h2_a_connection_an_attempt_timed_out_on_is_not_reused() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&accepted);
    let service = tower::service_fn(|request: Request<hyper::body::Incoming>| async move {
        if request.uri().path() == "/hang" {
            tokio::time::sleep(Duration::from_secs(60)).await;
        }
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(Bytes::from("ok"))))
    });
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(deadline_http::serve_connection(stream, service));
        }
    });
    let client = DeadlineClient::h2c(policy(300));
    for _ in 0..3 {
        let response = client.get(format!("http://{addr}/ok")).await.expect("ok");
        assert_eq!(response.status(), 200);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "one shared connection");
    let error = client.get(format!("http://{addr}/hang")).await.unwrap_err();
    assert!(error.is_timeout(), "{error}");
    let response = client.get(format!("http://{addr}/ok")).await.expect("ok");
    assert_eq!(response.status(), 200);
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        2,
        "the call after the timeout dialled a new connection"
    );
}

/// The outcome of the one call span `ctx` recorded.
fn call_outcome(ctx: &deadline_http::DeadlineContext) -> (Option<String>, Option<String>) {
    let (spans, _) = ctx.take_spans();
    let [call] = spans.as_slice() else {
        panic!("one call span: {spans:?}");
    };
    let attempt = call.children.last().expect("an attempt");
    (call.outcome.clone(), attempt.outcome.clone())
}

/// A call returns when its response head arrives; a body that then fails is the call's outcome
/// in the hop's trace (the call and the attempt that got it), not the head's 200.
#[tokio::test]
async fn a_body_that_fails_after_the_head_is_the_calls_outcome_in_the_trace() {
    let (addr, _ends) = hostile(Hostile::Stall).await;
    let client = DeadlineClient::new(policy(30_000)).target("inventory");
    let start = Instant::now();
    let deadline = Deadline::after_duration(start.into_std(), ms(600));
    let ctx = deadline_http::DeadlineContext::new(Some(deadline), ms(10), start);
    let error = ctx
        .clone()
        .scope(async {
            let response = client.get(format!("http://{addr}/")).await.expect("a head");
            bounded(response.into_body().collect()).await.unwrap_err()
        })
        .await;
    assert!(error.is_deadline(), "{error}");
    let deadline = Some("deadline".to_owned());
    assert_eq!(call_outcome(&ctx), (deadline.clone(), deadline));

    // Without a deadline the attempt's timeout ends the body: `timeout`.
    let (addr, _ends) = hostile(Hostile::Stall).await;
    let client = DeadlineClient::new(policy(300)).target("inventory");
    let ctx = deadline_http::DeadlineContext::new(None, ms(10), Instant::now());
    ctx.clone()
        .scope(async {
            let response = client.get(format!("http://{addr}/")).await.expect("a head");
            bounded(response.into_body().collect()).await.unwrap_err()
        })
        .await;
    let timeout = Some("timeout".to_owned());
    assert_eq!(call_outcome(&ctx), (timeout.clone(), timeout));
}

/// A gRPC status in the body's trailers (after messages) is the call's outcome in the trace, as
/// the HTTP status it stands for: DEADLINE_EXCEEDED is `504`.
#[tokio::test]
async fn a_grpc_status_in_the_trailers_is_the_calls_outcome_in_the_trace() {
    use deadline_http::PropagateDeadline;
    use tower::ServiceExt;

    let callee = tower::service_fn(|_request: Request<http_body_util::Full<Bytes>>| async {
        let (mut tx, body) = Channel::<Bytes, Infallible>::new(2);
        let mut trailers = http::HeaderMap::new();
        trailers.insert("grpc-status", http::HeaderValue::from_static("4"));
        tokio::spawn(async move {
            let _ = tx.send_data(Bytes::from_static(b"\0\0\0\0\0")).await;
            let _ = tx.send_trailers(trailers).await;
        });
        let mut response = Response::new(body);
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("application/grpc"),
        );
        Ok::<_, Infallible>(response)
    });
    let service = PropagateDeadline::new(callee, policy(1_000)).target("inventory");
    let ctx = deadline_http::DeadlineContext::new(None, ms(10), Instant::now());
    let mut request = Request::new(http_body_util::Full::new(Bytes::new()));
    *request.uri_mut() = "http://inventory/Watch".parse().expect("a uri");
    let body = ctx
        .clone()
        .scope(async {
            let response = service.oneshot(request).await.expect("a response");
            bounded(response.into_body().collect())
                .await
                .expect("a whole body")
        })
        .await;
    assert!(body.trailers().is_some());
    let status = Some("504".to_owned());
    assert_eq!(call_outcome(&ctx), (status.clone(), status));
}

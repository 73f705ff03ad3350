//! `DeadlineClient` against small hyper servers on 127.0.0.1, in real time: the assertions are
//! orderings and generous bounds, never exact timings.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::{Span, TRACE_HEADER};
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::propagate::CallBody;
use deadline_http::{CallError, DeadlineClient, DeadlineContext};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::Instant;

const SEEN_BUDGET: &str = "x-seen-budget";
const REQUEST_ID: &str = "x-request-id";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(timeout_ms: u64, attempts: u32) -> CallPolicy {
    CallPolicy::new(ms(timeout_ms), attempts).expect("a valid policy")
}

/// A context for a request that arrived now with `budget_ms` (none: no deadline).
fn context(budget_ms: Option<u64>) -> DeadlineContext {
    let t0 = Instant::now();
    let deadline = budget_ms.map(|b| Deadline::after_duration(t0.into_std(), ms(b)));
    DeadlineContext::new(deadline, ms(10), t0)
}

/// Serves `handler` on a fresh 127.0.0.1 port, one HTTP/1 connection per task, until the test's
/// runtime shuts down.
async fn serve<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Response<Full<Bytes>>, Infallible>> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("an address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            stream.set_nodelay(true).expect("nodelay");
            let handler = handler.clone();
            tokio::spawn(async move {
                // A hang-up mid-request is an error here, and expected in some tests.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), hyper::service::service_fn(handler))
                    .await;
            });
        }
    });
    addr
}

/// Sends `request` through `client` inside `ctx` and expects a 200.
async fn send_ok(
    ctx: &DeadlineContext,
    client: &DeadlineClient,
    request: Request<Full<Bytes>>,
) -> Response<CallBody<Incoming>> {
    let response = ctx
        .clone()
        .scope(client.send(request))
        .await
        .expect("a response");
    assert_eq!(response.status(), StatusCode::OK);
    response
}

/// Echoes the budget and request id it received, with a canned trace of its own, after taking
/// the 5 ms its trace says it took (a caller holds a callee's spans inside the attempt, so a
/// trace claiming more time than the attempt lasted would be cut to it).
async fn echo(request: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    tokio::time::sleep(Duration::from_millis(6)).await;
    let mut response = Response::new(Full::new(Bytes::new()));
    let headers = response.headers_mut();
    let budgets: Vec<&str> = request
        .headers()
        .get_all(BUDGET_HEADER)
        .iter()
        .map(|v| v.to_str().unwrap_or("?"))
        .collect();
    let budgets = HeaderValue::from_str(&budgets.join(";")).expect("a header value");
    headers.insert(SEEN_BUDGET, budgets);
    if let Some(id) = request.headers().get(REQUEST_ID) {
        headers.insert(REQUEST_ID, id.clone());
    }
    headers.insert(
        TRACE_HEADER,
        HeaderValue::from_static("svc@0-5=ok,.work@1-4"),
    );
    Ok(response)
}

#[tokio::test]
async fn the_budget_and_request_id_reach_the_server_and_its_trace_comes_back() {
    let addr = serve(echo).await;
    let client = DeadlineClient::new(policy(2_000, 3)).target("inventory");
    let ctx = context(Some(1_000));
    let before = ctx
        .deadline()
        .expect("a deadline")
        .remaining(Instant::now().into_std());
    let request = Request::get(format!("http://{addr}/stock"))
        .header(REQUEST_ID, "req-42")
        .body(Full::new(Bytes::new()))
        .expect("a request");

    let response = send_ok(&ctx, &client, request).await;
    assert_eq!(response.headers()[REQUEST_ID], "req-42");
    let budget: u64 = response.headers()[SEEN_BUDGET]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("exactly one budget line");
    let most = u64::try_from((before - ms(50)).as_millis()).expect("small");
    assert!(budget <= most, "budget {budget} ms, at most {most} ms");
    assert!(
        budget >= most - 500,
        "budget {budget} ms, far below {most} ms"
    );

    let (spans, dropped) = ctx.take_spans();
    assert_eq!(dropped, 0);
    let [call] = spans.as_slice() else {
        panic!("one call span: {spans:?}");
    };
    assert_eq!(
        (call.name.as_str(), call.outcome.as_deref()),
        ("call:inventory", Some("200"))
    );
    let [attempt] = call.children.as_slice() else {
        panic!("one attempt: {call:?}");
    };
    assert_eq!(attempt.outcome.as_deref(), Some("200"));
    let shifted = |start: u64, end: u64, name: &str| {
        Span::new(name, attempt.start_ms + start, attempt.start_ms + end)
    };
    assert_eq!(
        attempt.children,
        [shifted(0, 5, "svc")
            .with_outcome("ok")
            .with_child(shifted(1, 4, "work"))],
        "the server's trace, moved onto this hop's clock"
    );
}

/// What a server saw of one request: method, path, every header line in the order it came
/// (names lowercased by hyper) and the body.
type Seen = (String, String, Vec<(String, Vec<u8>)>, Bytes);

/// A retry leaves as its first attempt did: the same method, path, body and header lines, in the
/// same order (several values of one name, a sensitive value, one long enough that what a retry
/// is made from does not fit in place), only the budget told again.
#[tokio::test]
async fn a_retry_sends_what_the_first_attempt_sent() {
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let (seen_tx, mut seen_rx) = mpsc::unbounded_channel::<Seen>();
    let answered = Arc::new(AtomicUsize::new(0));
    let addr = serve(move |request: Request<Incoming>| {
        let seen_tx = seen_tx.clone();
        let answered = Arc::clone(&answered);
        async move {
            let (parts, body) = request.into_parts();
            let body = body
                .collect()
                .await
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            let lines = parts
                .headers
                .iter()
                .map(|(name, value)| (name.as_str().to_owned(), value.as_bytes().to_vec()))
                .collect();
            let path = parts.uri.path().to_owned();
            let _ = seen_tx.send((parts.method.to_string(), path, lines, body));
            // The first answer fails (a 503 is retried); the next succeeds.
            let status = if answered.fetch_add(1, Ordering::SeqCst) == 0 {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::OK
            };
            let mut response = Response::new(Full::new(Bytes::new()));
            *response.status_mut() = status;
            Ok(response)
        }
    })
    .await;
    let client = DeadlineClient::new(policy(2_000, 3)).target("inventory");
    let ctx = context(Some(1_500));
    let mut token = HeaderValue::from_static("Bearer abc.def");
    token.set_sensitive(true);
    let long = "c".repeat(300);
    let request = Request::put(format!("http://{addr}/stock/7?full=1"))
        .header(REQUEST_ID, "req-7")
        .header("accept", "application/json")
        .header("accept", "text/plain")
        .header("authorization", token)
        .header("cookie", long.as_str())
        .header("x-custom", "one")
        .body(Full::new(Bytes::from_static(b"{\"count\":3}")))
        .expect("a request");

    send_ok(&ctx, &client, request).await;

    let first = seen_rx.recv().await.expect("the first attempt");
    let retry = seen_rx.recv().await.expect("the retry");
    let without_budget = |(method, path, lines, body): &Seen| {
        let lines: Vec<_> = lines
            .iter()
            .filter(|(name, _)| name != BUDGET_HEADER.as_str())
            .cloned()
            .collect();
        (method.clone(), path.clone(), lines, body.clone())
    };
    assert_eq!(without_budget(&retry), without_budget(&first));
    let (method, path, lines, body) = without_budget(&first);
    assert_eq!((method.as_str(), path.as_str()), ("PUT", "/stock/7"));
    assert_eq!(body, Bytes::from_static(b"{\"count\":3}"));
    let names: Vec<_> = lines.iter().map(|(name, _)| name.as_str()).collect();
    for expected in [REQUEST_ID, "accept", "authorization", "cookie", "x-custom"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let accepts: Vec<_> = lines
        .iter()
        .filter(|(name, _)| name == "accept")
        .map(|(_, value)| value.as_slice())
        .collect();
    assert_eq!(accepts, [&b"application/json"[..], b"text/plain"]);
    // Each attempt tells its own budget, once.
    for (_, _, lines, _) in [&first, &retry] {
        let budgets = lines
            .iter()
            .filter(|(name, _)| name == BUDGET_HEADER.as_str())
            .count();
        assert_eq!(budgets, 1);
    }
}

#[tokio::test]
async fn connection_refused_is_retried_and_ends_in_a_typed_error() {
    let addr = {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        listener.local_addr().expect("an address")
    }; // dropped: nothing listens there now
    let client = DeadlineClient::new(policy(1_000, 3)).target("gone");
    let ctx = context(None);

    let error = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/")))
        .await
        .expect_err("nothing listens");

    let CallError::Inner {
        attempts_sent,
        source,
        ..
    } = &error
    else {
        panic!("not Inner: {error:?}");
    };
    assert_eq!(*attempts_sent, 3, "refused connections are retried");
    let hyper_error = source
        .downcast_ref::<hyper_util::client::legacy::Error>()
        .expect("the client's own error");
    assert!(hyper_error.is_connect(), "{hyper_error:?}");

    let (spans, _) = ctx.take_spans();
    let outcomes: Vec<_> = spans[0]
        .children
        .iter()
        .map(|a| a.outcome.as_deref().unwrap_or(""))
        .collect();
    assert_eq!(spans[0].outcome.as_deref(), Some("error"));
    assert_eq!(outcomes, ["error", "error", "error"]);
}

#[tokio::test]
async fn an_invalid_uri_is_not_sent() {
    let client = DeadlineClient::new(policy(1_000, 3));
    let error = client.get("http://a b/").await.expect_err("not a URI");
    assert!(matches!(error, CallError::InvalidRequest(_)), "{error:?}");
    assert_eq!(error.attempts_sent(), 0);
}

/// Reports whether the handler finished its work or was dropped before.
struct Finish(Option<mpsc::UnboundedSender<&'static str>>);

impl Drop for Finish {
    fn drop(&mut self) {
        if let Some(tx) = self.0.take() {
            let _ = tx.send("dropped");
        }
    }
}

#[tokio::test]
async fn a_slow_server_is_abandoned_at_the_deadline_and_sees_the_hang_up() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let addr = serve(move |_request: Request<Incoming>| {
        let mut finish = Finish(Some(tx.clone()));
        async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if let Some(tx) = finish.0.take() {
                let _ = tx.send("finished");
            }
            Ok(Response::new(Full::new(Bytes::new())))
        }
    })
    .await;
    let client = DeadlineClient::new(policy(1_000, 3)).target("slow");
    let ctx = context(Some(300));
    let start = Instant::now();

    let error = ctx
        .scope(client.get(format!("http://{addr}/")))
        .await
        .expect_err("the server is too slow");
    let gave_up_after = tokio::time::Instant::now().saturating_duration_since(start);

    assert!(error.is_deadline(), "{error}");
    assert_eq!(error.attempts_sent(), 1, "no time for a second attempt");
    // At the 300 ms deadline (the attempt's timeout is 1 s, the server's work 2 s): within
    // twice it.
    assert!(
        gave_up_after >= ms(250) && gave_up_after < ms(600),
        "gave up after {gave_up_after:?}, around the 300 ms deadline"
    );
    // The server would finish at 2 s; it must learn of the hang-up well before.
    let heard = tokio::time::timeout(ms(1_500), rx.recv())
        .await
        .expect("the server's handler ended within 1.5 s of the client giving up");
    assert_eq!(
        heard,
        Some("dropped"),
        "the server dropped its handler: cancellation cascaded"
    );
}

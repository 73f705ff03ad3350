//! HTTP/2 and gRPC on real loopback sockets, real time: h2c beside HTTP/1.1 in `serve`, the
//! enforce layer's answers in gRPC's and Connect's terms, the propagate layer's gRPC rules, and
//! `DeadlineClient::h2c` multiplexing attempts over one connection, where an abandoned attempt
//! resets only its own stream.
//!
//! As in `loopback_server.rs`, real time is noisy: orderings and generous bounds only.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use deadline::grpc::decode_message;
use deadline::{CallPolicy, Deadline};
use deadline_http::serve::{ServeOptions, serve_with};
use deadline_http::{
    DeadlineClient, DeadlineContext, EnforceDeadlineLayer, Hold, HoldOutcome, IDEMPOTENCY_KEY,
    serve_connection, with_deadline,
};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Version};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tower::{Layer, service_fn};

type Reply = Response<BoxBody<Bytes, Infallible>>;

/// A gRPC message: the uncompressed flag, the length, the bytes.
fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap());
    out.put_slice(message);
    out.freeze()
}

/// A unary gRPC reply body: one message, then the `grpc-status: 0` trailers.
struct GrpcReply {
    message: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for GrpcReply {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }
}

fn grpc_ok(text: &str) -> Reply {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    let body = GrpcReply {
        message: Some(frame(text.as_bytes())),
        trailers: Some(trailers),
    };
    let mut response = Response::new(body.boxed());
    response
        .headers_mut()
        .insert("content-type", HeaderValue::from_static("application/grpc"));
    response
}

fn grpc_status_only(code: &'static str) -> Reply {
    let mut response = Response::new(Full::new(Bytes::new()).boxed());
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/grpc"));
    headers.insert("grpc-status", HeaderValue::from_static(code));
    response
}

fn text(text: &'static str) -> Reply {
    Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed())
}

/// The test service's handler. `x-work-ms` sets how long it works; gRPC requests get a gRPC
/// reply naming the `grpc-timeout` and budget they arrived with and the time they had left;
/// `/status/N` answers trailers-only with status N; `/flaky` answers UNAVAILABLE the first time.
async fn handler(request: Request<Incoming>, flaky: Arc<AtomicUsize>) -> Result<Reply, Infallible> {
    let headers = request.headers();
    let work = headers
        .get("x-work-ms")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(work)).await;
    let path = request.uri().path();
    if let Some(code) = path.strip_prefix("/status/") {
        return Ok(grpc_status_only(match code {
            "3" => "3",
            "4" => "4",
            _ => "14",
        }));
    }
    if path == "/flaky" && flaky.fetch_add(1, Ordering::SeqCst) == 0 {
        return Ok(grpc_status_only("14"));
    }
    let is_grpc = headers
        .get("content-type")
        .is_some_and(|ct| ct.as_bytes().starts_with(b"application/grpc"));
    if !is_grpc {
        return Ok(text("done"));
    }
    let seen = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    let left = DeadlineContext::current()
        .and_then(|c| c.remaining())
        .map_or(u128::MAX, |d| d.as_millis());
    let reply = format!(
        "grpc-timeout={} budget={} left={left}",
        seen("grpc-timeout"),
        seen("deadline-budget-ms")
    );
    Ok(grpc_ok(&reply))
}

struct Server {
    addr: SocketAddr,
    holds: mpsc::UnboundedReceiver<Hold>,
    /// One permit per request the handler was called with.
    started: Arc<tokio::sync::Semaphore>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start() -> Server {
        Server::start_with(ServeOptions::default()).await
    }

    async fn start_with(options: ServeOptions) -> Server {
        let (hold_tx, holds) = mpsc::unbounded_channel();
        let flaky = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(tokio::sync::Semaphore::new(0));
        let starts = started.clone();
        let service = EnforceDeadlineLayer::new("inventory")
            .on_hold(move |hold| {
                let _ = hold_tx.send(hold.clone());
            })
            .layer(service_fn(move |r| {
                starts.add_permits(1);
                handler(r, flaky.clone())
            }));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let shutdown = async {
            let _ = stopped.await;
        };
        let task = tokio::spawn(serve_with(listener, service, shutdown, options));
        Server {
            addr,
            holds,
            started,
            stop: Some(stop),
            task,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn next_hold(&mut self) -> Hold {
        timeout(Duration::from_secs(10), self.holds.recv())
            .await
            .expect("a hold report in time")
            .expect("the server is running")
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        timeout(Duration::from_secs(15), self.task)
            .await
            .expect("shut down")
            .expect("no panic")
            .expect("no error");
    }
}

type H2Client = Client<HttpConnector, Full<Bytes>>;

fn h2_client() -> H2Client {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

fn grpc_request(url: &str, headers: &[(&'static str, &'static str)]) -> Request<Full<Bytes>> {
    let mut builder = Request::post(url)
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::new(frame(b"hello"))).unwrap()
}

/// What a gRPC client sees: the status (from the headers if trailers-only, else the
/// trailers), the decoded message, the reply payload, the response headers.
struct GrpcAnswer {
    status: u32,
    message: String,
    payload: String,
    headers: HeaderMap,
    trailers_only: bool,
}

async fn grpc_call(client: &H2Client, request: Request<Full<Bytes>>) -> GrpcAnswer {
    let response = client.request(request).await.expect("an HTTP/2 response");
    assert_eq!(
        response.status(),
        StatusCode::OK,
        "gRPC answers are HTTP 200"
    );
    assert_eq!(response.version(), Version::HTTP_2);
    let (parts, body) = response.into_parts();
    let trailers_only = parts.headers.contains_key("grpc-status");
    let collected = body.collect().await.expect("the body");
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    let status_map = if trailers_only {
        assert!(data.is_empty(), "a trailers-only answer has no body");
        assert!(trailers.is_none(), "a trailers-only answer has no trailers");
        parts.headers.clone()
    } else {
        trailers.expect("trailers after the message")
    };
    let status = status_map["grpc-status"].to_str().unwrap().parse().unwrap();
    let message = status_map
        .get("grpc-message")
        .map(|m| decode_message(m.as_bytes()))
        .unwrap_or_default();
    let payload = if data.len() >= 5 {
        String::from_utf8_lossy(&data[5..]).into_owned()
    } else {
        String::new()
    };
    GrpcAnswer {
        status,
        message,
        payload,
        headers: parts.headers,
        trailers_only,
    }
}

fn trace(headers: &HeaderMap) -> &str {
    headers
        .get("deadline-trace")
        .expect("a Deadline-Trace header")
        .to_str()
        .unwrap()
}

#[tokio::test]
async fn h2c_and_http1_share_one_port() {
    let server = Server::start().await;
    let h1: H2Client = Client::builder(TokioExecutor::new()).build_http();
    let h2 = h2_client();
    for (client, version) in [(&h1, Version::HTTP_11), (&h2, Version::HTTP_2)] {
        let request = Request::get(server.url("/"))
            .header("deadline-budget-ms", "2000")
            .body(Full::new(Bytes::new()))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.version(), version);
        assert_eq!(response.status(), StatusCode::OK);
        assert!(trace(response.headers()).starts_with("inventory@"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "done");
    }
    server.stop().await;
}

#[tokio::test]
async fn grpc_success_passes_through_with_its_trailers_and_the_trace() {
    let server = Server::start().await;
    let client = h2_client();
    let answer = grpc_call(
        &client,
        grpc_request(&server.url("/pkg.Svc/Get"), &[("grpc-timeout", "2S")]),
    )
    .await;
    assert_eq!(answer.status, 0);
    assert!(!answer.trailers_only);
    assert!(
        answer.payload.starts_with("grpc-timeout=2S budget=-"),
        "{}",
        answer.payload
    );
    let left: u64 = answer.payload.rsplit('=').next().unwrap().parse().unwrap();
    assert!(
        (1_000..=2_000).contains(&left),
        "grpc-timeout read as the budget: {left}"
    );
    // The spans end with the work's outcome; the hop's budget at arrival follows them.
    let (spans, budget) = trace(&answer.headers)
        .rsplit_once(",^0=")
        .map(|(spans, budget)| (spans.to_owned(), budget.to_owned()))
        .expect("the hop's budget");
    assert!(spans.ends_with("=ok"), "{spans}");
    let budget: u64 = budget.parse().unwrap();
    assert!((1_000..=2_000).contains(&budget), "{budget}");
    server.stop().await;
}

#[tokio::test]
async fn grpc_timeout_and_deadline_budget_ms_the_tightest_wins() {
    let server = Server::start().await;
    let client = h2_client();
    for headers in [
        [("grpc-timeout", "10S"), ("deadline-budget-ms", "300")],
        [("grpc-timeout", "300m"), ("deadline-budget-ms", "10000")],
    ] {
        let answer = grpc_call(&client, grpc_request(&server.url("/pkg.Svc/Get"), &headers)).await;
        assert_eq!(answer.status, 0);
        let left: u64 = answer.payload.rsplit('=').next().unwrap().parse().unwrap();
        assert!(left <= 300, "{headers:?}: {left}");
    }
    server.stop().await;
}

/// What real clients send for a deadline already spent (grpc-js `0m`, grpcio `1n`) is
/// expired, not malformed: DEADLINE_EXCEEDED, trailers-only, with the 504 text.
#[tokio::test]
async fn a_spent_grpc_timeout_is_deadline_exceeded_on_arrival() {
    let mut server = Server::start().await;
    let client = h2_client();
    for spent in ["0m", "1n", "999u"] {
        let request = grpc_request(&server.url("/pkg.Svc/Get"), &[("grpc-timeout", spent)]);
        let answer = grpc_call(&client, request).await;
        assert_eq!(answer.status, 4, "{spent}");
        assert!(answer.trailers_only);
        assert_eq!(
            answer.message,
            "deadline exceeded at inventory on arrival: the caller had already run out"
        );
        assert_eq!(answer.headers["content-type"], "application/grpc");
        // The root span alone, 504, budget 0: answered on arrival. Its end is real time since
        // arrival, whole ms: 0 on an idle machine, a few on a busy one.
        let encoded = trace(&answer.headers).to_owned();
        let end_ms = encoded
            .strip_prefix("inventory@0-")
            .and_then(|rest| rest.strip_suffix("=504,^0=0"))
            .and_then(|ms| ms.parse::<u64>().ok());
        assert!(end_ms.is_some_and(|ms| ms < 1000), "{encoded}");
        assert_eq!(server.next_hold().await.outcome, HoldOutcome::Rejected);
    }
    server.stop().await;
}

/// Cut at the deadline: DEADLINE_EXCEEDED with the same text a plain HTTP caller gets in its
/// 504 body, before the caller's own deadline.
#[tokio::test]
async fn grpc_work_cut_at_the_deadline_is_deadline_exceeded_with_the_504_text() {
    let mut server = Server::start().await;
    let client = h2_client();
    // Open the connection first, so the timing below is the call's alone.
    let warm = grpc_call(&client, grpc_request(&server.url("/"), &[])).await;
    assert_eq!(warm.status, 0);
    server.next_hold().await;
    let start = Instant::now();
    let request = grpc_request(
        &server.url("/pkg.Svc/Get"),
        &[("grpc-timeout", "300m"), ("x-work-ms", "3000")],
    );
    let answer = grpc_call(&client, request).await;
    let took = Instant::now().saturating_duration_since(start);
    assert_eq!(answer.status, 4);
    assert!(answer.trailers_only);
    // Cut at the deadline (less the 10 ms reserve), not at the end of the 3 s of work; the
    // slack is for a busy machine.
    assert!(
        (Duration::from_millis(250)..Duration::from_millis(1_500)).contains(&took),
        "answered in {took:?}"
    );
    assert!(
        answer.message.starts_with(
            "deadline exceeded at inventory while working: budget 300 ms, queued 0 ms, worked "
        ),
        "{}",
        answer.message
    );
    assert!(trace(&answer.headers).contains("=504"));
    assert_eq!(server.next_hold().await.outcome, HoldOutcome::Deadline);

    // The same request as plain HTTP: the 504 body is the same text.
    let h1: H2Client = Client::builder(TokioExecutor::new()).build_http();
    let request = Request::post(server.url("/pkg.Svc/Get"))
        .header("deadline-budget-ms", "300")
        .header("x-work-ms", "3000")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = h1.request(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8(body.to_vec()).unwrap();
    let same = |s: &str| s.split(", worked ").next().unwrap().to_owned();
    assert_eq!(same(&body), same(&answer.message));
    server.stop().await;
}

#[tokio::test]
async fn a_malformed_budget_is_invalid_argument() {
    let mut server = Server::start().await;
    let client = h2_client();
    for (header, value) in [
        ("grpc-timeout", "5x"),
        ("grpc-timeout", "123456789m"),
        ("deadline-budget-ms", "1.5"),
    ] {
        let request = grpc_request(&server.url("/pkg.Svc/Get"), &[(header, value)]);
        let answer = grpc_call(&client, request).await;
        assert_eq!(answer.status, 3, "{header}: {value}");
        assert!(answer.trailers_only);
        assert!(answer.message.contains(header), "{}", answer.message);
        assert!(answer.message.contains(value), "{}", answer.message);
        assert!(trace(&answer.headers).ends_with("=400"));
        assert_eq!(server.next_hold().await.outcome, HoldOutcome::Rejected);
    }
    server.stop().await;
}

#[tokio::test]
async fn a_grpc_call_without_a_deadline_runs_to_its_end() {
    let server = Server::start().await;
    let client = h2_client();
    let request = grpc_request(&server.url("/pkg.Svc/Get"), &[("x-work-ms", "400")]);
    let start = Instant::now();
    let answer = grpc_call(&client, request).await;
    assert_eq!(answer.status, 0);
    assert!(Instant::now().saturating_duration_since(start) >= Duration::from_millis(400));
    assert_eq!(
        answer.payload,
        format!("grpc-timeout=- budget=- left={}", u128::MAX)
    );
    server.stop().await;
}

/// A Connect unary call gets its error as Connect's JSON body with the HTTP status kept.
#[tokio::test]
async fn connect_callers_get_a_json_error_body() {
    let server = Server::start().await;
    let client = h2_client();
    let cases = [
        (
            "300",
            "3000",
            StatusCode::GATEWAY_TIMEOUT,
            "deadline_exceeded",
        ),
        ("-5", "0", StatusCode::GATEWAY_TIMEOUT, "deadline_exceeded"),
        ("abc", "0", StatusCode::BAD_REQUEST, "invalid_argument"),
    ];
    for (budget, work, status, code) in cases {
        let request = Request::post(server.url("/pkg.Svc/Get"))
            .header("content-type", "application/json")
            .header("connect-protocol-version", "1")
            .header("deadline-budget-ms", budget)
            .header("x-work-ms", work)
            .body(Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let response = client.request(request).await.unwrap();
        assert_eq!(response.status(), status);
        assert_eq!(response.headers()["content-type"], "application/json");
        assert!(response.headers().contains_key("deadline-trace"));
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let body = String::from_utf8(body.to_vec()).unwrap();
        let prefix = format!("{{\"code\":\"{code}\",\"message\":\"");
        assert!(body.starts_with(&prefix), "{body}");
        assert!(body.ends_with("\"}"), "{body}");
    }
    server.stop().await;
}

/// Two calls share one HTTP/2 connection; the second is abandoned (its future dropped while
/// its attempt is in flight). Only its stream is reset: the server reports that request hung up while it was
/// working, and the other call, on the same connection, completes.
#[tokio::test]
async fn an_abandoned_attempt_resets_only_its_own_stream() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (hold_tx, mut holds) = mpsc::unbounded_channel();
    let flaky = Arc::new(AtomicUsize::new(0));
    // Requests the handler has started on: the survivor's, then the one abandoned.
    let started = Arc::new(tokio::sync::Semaphore::new(0));
    let starts = started.clone();
    let service = EnforceDeadlineLayer::new("inventory")
        .on_hold(move |hold| {
            let _ = hold_tx.send(hold.clone());
        })
        .layer(service_fn(move |r| {
            starts.add_permits(1);
            handler(r, flaky.clone())
        }));
    let connections = Arc::new(AtomicUsize::new(0));
    let accepted = connections.clone();
    let server = tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            accepted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve_connection(stream, service.clone()));
        }
    });

    let client = DeadlineClient::h2c(CallPolicy::new(Duration::from_secs(5), 1).unwrap());

    let url = format!("http://{addr}/work");
    let survivor = {
        let client = client.clone();
        let request = Request::get(&url)
            .header("x-work-ms", "800")
            .body(Full::new(Bytes::new()))
            .unwrap();
        tokio::spawn(async move {
            let start = Instant::now();
            let response = client.send(request).await;
            (response, Instant::now().saturating_duration_since(start))
        })
    };
    // The survivor's request is being worked on, so its connection is open and the next call
    // shares it.
    timeout(Duration::from_secs(5), started.acquire())
        .await
        .expect("the survivor's request reached the handler")
        .unwrap()
        .forget();
    let request = Request::get(&url)
        .header("x-work-ms", "5000")
        .body(Full::new(Bytes::new()))
        .unwrap();
    // No deadline, so no budget is sent and the server would work the full 5 s: dropping the
    // call after 200 ms is the only thing that can stop it.
    let cancelled = timeout(Duration::from_millis(200), client.send(request)).await;
    assert!(cancelled.is_err(), "the abandoned call was still running");

    let hold = timeout(Duration::from_secs(5), holds.recv())
        .await
        .expect("a hold report for the reset stream")
        .unwrap();
    assert_eq!(hold.outcome, HoldOutcome::HungUp, "{hold:?}");
    assert!(hold.worked < Duration::from_millis(1_000), "{hold:?}");

    let (response, took) = survivor.await.unwrap();
    let response = response.expect("the other stream completes");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(took >= Duration::from_millis(800));
    let hold = timeout(Duration::from_secs(5), holds.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(hold.outcome, HoldOutcome::Ok);
    assert_eq!(
        connections.load(Ordering::SeqCst),
        1,
        "one HTTP/2 connection"
    );
    server.abort();
}

#[tokio::test]
async fn graceful_shutdown_lets_open_http2_streams_finish() {
    let server = Server::start().await;
    let client = h2_client();
    let request = grpc_request(&server.url("/pkg.Svc/Get"), &[("x-work-ms", "500")]);
    let call = tokio::spawn(async move { grpc_call(&client, request).await.status });
    // Stopped once the handler has started on the stream: its 500 ms of work are ahead.
    timeout(Duration::from_secs(10), server.started.acquire())
        .await
        .expect("the stream reached the handler in time")
        .expect("the server is running")
        .forget();
    let start = Instant::now();
    server.stop().await;
    // The stop waits for the stream's work: about 500 ms; not much less.
    let took = Instant::now().saturating_duration_since(start);
    assert!(
        took >= Duration::from_millis(400),
        "shutdown waited {took:?} for a stream with 500 ms of work"
    );
    assert_eq!(call.await.unwrap(), 0, "the open stream finished");
}

/// The protocol sniff has no timeout of its own: a connection that never sends a byte is
/// closed after the header-read timeout.
#[tokio::test]
async fn a_silent_connection_is_closed_after_the_header_timeout() {
    let options = ServeOptions::default().header_read_timeout(Duration::from_millis(300));
    let server = Server::start_with(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 16];
    let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the server closed the silent connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(Instant::now().saturating_duration_since(start) >= Duration::from_millis(250));
    server.stop().await;
}

/// Half an HTTP/2 preface, then nothing: the protocol is never shown, and the connection is
/// closed after the header-read timeout too.
#[tokio::test]
async fn half_a_preface_is_closed_after_the_header_timeout() {
    use tokio::io::AsyncWriteExt;
    let options = ServeOptions::default().header_read_timeout(Duration::from_millis(300));
    let server = Server::start_with(options).await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(b"PRI * HTTP/2.0\r\n").await.unwrap();
    let mut buf = [0u8; 16];
    let read = timeout(Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the server closed the connection");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    server.stop().await;
}

/// A client that has sent its HTTP/2 preface may stay idle longer than the header-read timeout
/// (gRPC clients connect ahead of their first call) and still use the connection.
#[tokio::test]
async fn an_idle_http2_connection_after_its_preface_is_kept() {
    let options = ServeOptions::default().header_read_timeout(Duration::from_millis(300));
    let server = Server::start_with(options).await;
    let stream = TcpStream::connect(server.addr).await.unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    let connection = tokio::spawn(connection);
    tokio::time::sleep(Duration::from_millis(800)).await;
    let request = Request::get(server.url("/"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender
        .send_request(request)
        .await
        .expect("the same connection");
    assert_eq!(response.status(), StatusCode::OK);
    drop(sender);
    let _ = timeout(Duration::from_secs(5), connection).await;
    server.stop().await;
}

/// Outbound gRPC over h2c: the callee is told its budget in `grpc-timeout` as well as in
/// `Deadline-Budget-Ms`, both smaller than what the caller had left.
#[tokio::test]
async fn grpc_calls_carry_grpc_timeout() {
    let server = Server::start().await;
    let client = DeadlineClient::h2c(CallPolicy::new(Duration::from_secs(2), 1).unwrap());
    let deadline = Deadline::after_duration(Instant::now().into_std(), Duration::from_millis(600));
    let request = grpc_request(&server.url("/pkg.Svc/Get"), &[]);
    let response = with_deadline(deadline, client.send(request)).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let payload = String::from_utf8_lossy(&body[5..]).into_owned();
    // "grpc-timeout=549000u budget=549 left=..."
    let field = |name: &str| {
        payload
            .split(' ')
            .find_map(|f| f.strip_prefix(name))
            .unwrap()
            .to_owned()
    };
    let grpc_timeout = field("grpc-timeout=");
    let micros: u64 = grpc_timeout
        .strip_suffix('u')
        .expect("microseconds")
        .parse()
        .unwrap();
    let budget: u64 = field("budget=").parse().unwrap();
    assert!((400..=550).contains(&budget), "{payload}");
    assert_eq!(micros, budget * 1_000, "{payload}");
    server.stop().await;
}

/// UNAVAILABLE is retried like a 503; INVALID_ARGUMENT is final; DEADLINE_EXCEEDED with no
/// time for another attempt is returned as it came.
#[tokio::test]
async fn grpc_statuses_decide_retries() {
    let mut server = Server::start().await;
    let client = DeadlineClient::h2c(CallPolicy::new(Duration::from_secs(2), 3).unwrap());

    let flaky = grpc_request(&server.url("/flaky"), &[("idempotency-key", "k1")]);
    let response = client.send(flaky).await.unwrap();
    assert!(
        !response.headers().contains_key("grpc-status"),
        "retried to success"
    );
    // The hop's hold reads the handler's UNAVAILABLE as the 503 it stands for.
    let first = server.next_hold().await;
    assert_eq!(
        first.status,
        Some(StatusCode::SERVICE_UNAVAILABLE),
        "{first:?}"
    );
    assert_eq!(first.outcome, HoldOutcome::Error);
    assert_eq!(server.next_hold().await.outcome, HoldOutcome::Ok);

    let mut invalid = grpc_request(&server.url("/status/3"), &[]);
    invalid
        .headers_mut()
        .insert(IDEMPOTENCY_KEY, HeaderValue::from_static("k2"));
    let response = client.send(invalid).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "3");
    server.next_hold().await;
    let extra = timeout(Duration::from_millis(300), server.holds.recv()).await;
    assert!(extra.is_err(), "INVALID_ARGUMENT is not retried");

    let deadline = Deadline::after_duration(Instant::now().into_std(), Duration::from_millis(400));
    let cut = grpc_request(
        &server.url("/pkg.Svc/Get"),
        &[("idempotency-key", "k3"), ("x-work-ms", "3000")],
    );
    let response = with_deadline(deadline, client.send(cut)).await.unwrap();
    assert_eq!(response.headers()["grpc-status"], "4");
    let message = decode_message(response.headers()["grpc-message"].as_bytes());
    assert!(
        message.starts_with("deadline exceeded at inventory while working"),
        "{message}"
    );
    server.stop().await;
}

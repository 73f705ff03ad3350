//! Streams: the deadline covers the whole call, not just the response head. Full HTTP/1.1,
//! HTTP/2 and gRPC in memory on paused time (a hyper client connection talks to
//! `serve_connection` over `tokio::io::duplex`), so every instant below is exact.
//!
//! The handler answers at once with a body of 20 chunks, one every 100 ms (so it would run for
//! 2 s); the caller's budget is 550 ms, so the cutoff is at 540 ms, after 5 chunks.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use deadline::BUDGET_HEADER;
use deadline_http::enforce::Phase;
use deadline_http::metrics::{DeadlineMetrics, Registry, encode};
use deadline_http::{Hold, HoldOutcome, serve_connection};
use http::{HeaderMap, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::time::{Instant, Sleep};
use tower::{Layer, service_fn};

const MS: Duration = Duration::from_millis(1);

/// What the handler's body has done: chunks produced, and whether it was dropped (its work
/// stopped).
#[derive(Clone, Default)]
struct Producer {
    produced: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

/// A response body of `left` chunks, one every `every`: `chunk N\n`, or for gRPC one
/// length-prefixed message per chunk.
struct Ticker {
    sleep: Pin<Box<Sleep>>,
    every: Duration,
    left: usize,
    grpc: bool,
    producer: Producer,
}

impl Ticker {
    fn new(count: usize, every: Duration, grpc: bool, producer: Producer) -> Ticker {
        Ticker {
            sleep: Box::pin(tokio::time::sleep(every)),
            every,
            left: count,
            grpc,
            producer,
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.producer.dropped.store(true, Ordering::SeqCst);
    }
}

impl Body for Ticker {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            if self.grpc {
                self.left = usize::MAX;
                let mut trailers = HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            return Poll::Ready(None);
        }
        if self.left == usize::MAX {
            return Poll::Ready(None);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.sleep.deadline() + self.every;
        self.sleep.as_mut().reset(next);
        self.left -= 1;
        let n = self.producer.produced.fetch_add(1, Ordering::SeqCst) + 1;
        let text = format!("chunk {n}\n");
        let data = if self.grpc {
            let mut framed = BytesMut::with_capacity(5 + text.len());
            framed.put_u8(0);
            framed.put_u32(text.len() as u32);
            framed.put_slice(text.as_bytes());
            framed.freeze()
        } else {
            Bytes::from(text)
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Proto {
    Http1,
    H2,
    Grpc,
}

type Holds = Arc<Mutex<Vec<Hold>>>;

/// A streaming service (20 × 100 ms) behind the layer, one server connection in memory, and a
/// client of `proto` for it.
struct Stream {
    producer: Producer,
    holds: Holds,
    registry: Registry,
    client: Option<Client>,
}

enum Client {
    Http1(hyper::client::conn::http1::SendRequest<Empty<Bytes>>),
    H2(hyper::client::conn::http2::SendRequest<Empty<Bytes>>),
}

impl Stream {
    async fn start(proto: Proto) -> Stream {
        let producer = Producer::default();
        let holds: Holds = Arc::default();
        let mut registry = Registry::default();
        let metrics = DeadlineMetrics::register(&mut registry).service("inventory");
        let made = producer.clone();
        let handler = service_fn(move |request: Request<Incoming>| {
            let grpc = request.headers().contains_key("te");
            let body = Ticker::new(20, 100 * MS, grpc, made.clone());
            async move {
                let mut response = Response::new(body);
                if grpc {
                    response
                        .headers_mut()
                        .insert("content-type", "application/grpc".parse().unwrap());
                }
                Ok::<_, Infallible>(response)
            }
        });
        let seen = Arc::clone(&holds);
        let service = crate::every_header("inventory")
            .record_metrics(&metrics)
            .on_hold(move |hold| seen.lock().unwrap().push(hold.clone()))
            .layer(handler);
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        tokio::spawn(serve_connection(server_io, service));
        let io = TokioIo::new(client_io);
        let client = match proto {
            Proto::Http1 => {
                let (sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
                tokio::spawn(connection);
                Client::Http1(sender)
            }
            Proto::H2 | Proto::Grpc => {
                let (sender, connection) =
                    hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                        .await
                        .unwrap();
                tokio::spawn(connection);
                Client::H2(sender)
            }
        };
        Stream {
            producer,
            holds,
            registry,
            client: Some(client),
        }
    }

    async fn send(&mut self, proto: Proto, budget: Option<&str>) -> Response<Incoming> {
        let mut request = Request::builder().uri("http://inventory/items");
        if let Some(budget) = budget {
            request = request.header(BUDGET_HEADER, budget);
        }
        if proto == Proto::Grpc {
            request = request
                .method("POST")
                .uri("http://inventory/pkg.Items/List")
                .header("content-type", "application/grpc")
                .header("te", "trailers");
        }
        let request = request.body(Empty::new()).unwrap();
        match self.client.as_mut().expect("connected") {
            Client::Http1(sender) => sender.send_request(request).await.unwrap(),
            Client::H2(sender) => sender.send_request(request).await.unwrap(),
        }
    }

    fn produced(&self) -> usize {
        self.producer.produced.load(Ordering::SeqCst)
    }

    fn dropped(&self) -> bool {
        self.producer.dropped.load(Ordering::SeqCst)
    }

    /// The one hold reported, waiting (in virtual time, which does not move while tasks run) for
    /// the server's side to report it.
    async fn hold(&self) -> Hold {
        for _ in 0..100 {
            if let Some(hold) = self.holds.lock().unwrap().first() {
                return hold.clone();
            }
            tokio::task::yield_now().await;
        }
        panic!("no hold was reported");
    }

    fn metrics(&self) -> String {
        encode(&self.registry).unwrap()
    }
}

/// What a client read from a streamed body: the chunks, and how and when the stream ended.
#[derive(Debug)]
struct Read {
    chunks: usize,
    trailers: Option<HeaderMap>,
    error: Option<hyper::Error>,
    at: Duration,
}

async fn read(mut body: Incoming, t0: Instant) -> Read {
    let mut read = Read {
        chunks: 0,
        trailers: None,
        error: None,
        at: Duration::ZERO,
    };
    loop {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) => match frame.into_data() {
                // HTTP/2 ends a stream with an empty DATA frame.
                Ok(data) if data.is_empty() => {}
                Ok(_) => read.chunks += 1,
                Err(frame) => read.trailers = frame.into_trailers().ok(),
            },
            Some(Err(error)) => {
                read.error = Some(error);
                break;
            }
        }
    }
    read.at = Instant::now() - t0;
    read
}

/// The value of the sample `series` in the scrape `text` (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

/// The hold and the metrics of a stream cut at 540 ms, after 5 chunks, with its producer
/// dropped at that moment.
async fn assert_cut(stream: &Stream, status: StatusCode) {
    assert_eq!(
        stream.produced(),
        5,
        "no chunk is produced after the cutoff"
    );
    assert!(stream.dropped(), "the producer is dropped at the cutoff");
    let hold = stream.hold().await;
    assert_eq!(hold.outcome, HoldOutcome::Deadline, "{hold}");
    assert_eq!(hold.exceeded, Some(Phase::Stream), "{hold}");
    assert_eq!(hold.streamed, 540 * MS, "{hold}");
    assert_eq!(hold.status, Some(status), "{hold}");
    let text = stream.metrics();
    let series = |name: &str, label: &str| {
        sample(&text, &format!("{name}{{service=\"inventory\",{label}}}"))
    };
    assert_eq!(
        series("deadline_requests_total", "outcome=\"deadline\""),
        1.0
    );
    assert_eq!(series("deadline_requests_total", "outcome=\"ok\""), 0.0);
    assert_eq!(series("deadline_exceeded_total", "phase=\"stream\""), 1.0);
}

#[tokio::test(start_paused = true)]
async fn an_http1_stream_is_cut_at_the_deadline_without_its_final_chunk() {
    let mut stream = Stream::start(Proto::Http1).await;
    let t0 = Instant::now();
    let response = stream.send(Proto::Http1, Some("550")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key("server-timing"));
    let read = read(response.into_body(), t0).await;
    assert_eq!(read.chunks, 5, "{read:?}");
    assert_eq!(read.at, 540 * MS, "{read:?}");
    // The connection closed where the next chunk's size line should have been.
    let error = read.error.expect("the client sees an incomplete message");
    let eof = std::error::Error::source(&error)
        .and_then(|source| source.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind);
    assert_eq!(eof, Some(std::io::ErrorKind::UnexpectedEof), "{error:?}");
    assert_cut(&stream, StatusCode::OK).await;
    assert!(!stream.hold().await.reply_written);
}

#[tokio::test(start_paused = true)]
async fn an_http2_stream_is_reset_with_cancel_at_the_deadline() {
    let mut stream = Stream::start(Proto::H2).await;
    let t0 = Instant::now();
    let response = stream.send(Proto::H2, Some("550")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let read = read(response.into_body(), t0).await;
    assert_eq!(read.chunks, 5, "{read:?}");
    assert_eq!(read.at, 540 * MS, "{read:?}");
    let error = read.error.expect("the client sees the stream reset");
    let reason = std::error::Error::source(&error)
        .and_then(|source| source.downcast_ref::<h2::Error>())
        .and_then(h2::Error::reason);
    assert_eq!(reason, Some(h2::Reason::CANCEL), "{error:?}");
    assert_cut(&stream, StatusCode::OK).await;
}

#[tokio::test(start_paused = true)]
async fn a_grpc_stream_ends_with_deadline_exceeded_after_the_messages_sent_in_time() {
    let mut stream = Stream::start(Proto::Grpc).await;
    let t0 = Instant::now();
    let response = stream.send(Proto::Grpc, Some("550")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let read = read(response.into_body(), t0).await;
    assert!(read.error.is_none(), "{read:?}");
    assert_eq!(read.chunks, 5, "{read:?}");
    assert_eq!(read.at, 540 * MS, "{read:?}");
    let trailers = read.trailers.expect("the stream ends with trailers");
    assert_eq!(trailers["grpc-status"], "4");
    assert_eq!(
        trailers["grpc-message"],
        "deadline exceeded at inventory while streaming the response: budget 550 ms, queued 0 \
         ms, worked 0 ms, streamed 540 ms"
    );
    assert_eq!(
        trailers["server-timing"],
        "queue;dur=0.000, work;dur=0.000, stream;dur=540.000, budget;dur=550"
    );
    assert_cut(&stream, StatusCode::GATEWAY_TIMEOUT).await;
    assert!(stream.hold().await.reply_written, "the trailers went out");
}

#[tokio::test(start_paused = true)]
async fn a_stream_without_a_deadline_runs_to_its_end() {
    for proto in [Proto::Http1, Proto::H2, Proto::Grpc] {
        let mut stream = Stream::start(proto).await;
        let t0 = Instant::now();
        let response = stream.send(proto, None).await;
        let read = read(response.into_body(), t0).await;
        assert!(read.error.is_none(), "{proto:?}: {read:?}");
        assert_eq!(read.chunks, 20, "{proto:?}");
        assert_eq!(read.at, 2000 * MS, "{proto:?}");
        let hold = stream.hold().await;
        assert_eq!(hold.outcome, HoldOutcome::Ok, "{proto:?}: {hold}");
        assert_eq!(hold.exceeded, None, "{proto:?}");
        assert_eq!(hold.streamed, 2000 * MS, "{proto:?}");
        assert!(hold.reply_written, "{proto:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_stream_that_ends_before_the_deadline_is_untouched() {
    let mut stream = Stream::start(Proto::Grpc).await;
    let t0 = Instant::now();
    let response = stream.send(Proto::Grpc, Some("2500")).await;
    let read = read(response.into_body(), t0).await;
    assert_eq!(read.chunks, 20);
    assert_eq!(read.trailers.unwrap()["grpc-status"], "0");
    let hold = stream.hold().await;
    assert_eq!(hold.outcome, HoldOutcome::Ok, "{hold}");
    assert_eq!(hold.streamed, 2000 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_caller_hanging_up_mid_stream_is_hung_up_and_stops_the_producer() {
    for proto in [Proto::Http1, Proto::H2] {
        let mut stream = Stream::start(proto).await;
        let t0 = Instant::now();
        let mut body = stream.send(proto, Some("5000")).await.into_body();
        for _ in 0..2 {
            body.frame().await.unwrap().unwrap();
        }
        assert_eq!(Instant::now() - t0, 200 * MS);
        // The caller goes away mid-stream: HTTP/2 resets its stream, HTTP/1.1 closes its
        // connection (the client's connection task ends with the last handle to it).
        drop(body);
        drop(stream.client.take());
        let hold = stream.hold().await;
        assert_eq!(hold.outcome, HoldOutcome::HungUp, "{proto:?}: {hold}");
        assert_eq!(hold.streamed, 200 * MS, "{proto:?}");
        assert_eq!(hold.caller_left, Some(t0 + 200 * MS), "{proto:?}");
        assert!(!hold.reply_written, "{proto:?}");
        assert!(
            stream.dropped(),
            "{proto:?}: the producer stops with the caller"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(stream.produced(), 2, "{proto:?}");
        let text = stream.metrics();
        assert_eq!(
            sample(
                &text,
                "deadline_requests_total{service=\"inventory\",outcome=\"hung_up\"}"
            ),
            1.0,
            "{proto:?}"
        );
    }
}

/// A request body of `count` chunks, one every `every`: an upload slower than the budget.
struct Upload {
    sleep: Pin<Box<Sleep>>,
    every: Duration,
    left: usize,
}

impl Upload {
    fn new(count: usize, every: Duration) -> Upload {
        Upload {
            sleep: Box::pin(tokio::time::sleep(every)),
            every,
            left: count,
        }
    }
}

impl Body for Upload {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.sleep.deadline() + self.every;
        self.sleep.as_mut().reset(next);
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"part\n")))))
    }
}

/// A request body still arriving at the cutoff ends the request: 504 (DEADLINE_EXCEEDED for
/// gRPC) at 540 ms, the handler's read dropped there with what it had received.
#[tokio::test(start_paused = true)]
async fn an_upload_still_arriving_at_the_cutoff_ends_the_request() {
    for proto in [Proto::Http1, Proto::H2, Proto::Grpc] {
        let received = Arc::new(AtomicUsize::new(0));
        let reader = Producer::default();
        let (seen, guard) = (Arc::clone(&received), reader.clone());
        let handler = service_fn(move |request: Request<Incoming>| {
            let (seen, guard) = (Arc::clone(&seen), guard.clone());
            async move {
                // Set when the handler's read is dropped.
                let _reading = Reading(guard);
                let mut body = request.into_body();
                while let Some(frame) = body.frame().await {
                    if frame.is_ok() {
                        seen.fetch_add(1, Ordering::SeqCst);
                    }
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"stored"))))
            }
        });
        let holds: Holds = Arc::default();
        let seen = Arc::clone(&holds);
        let service = crate::every_header("inventory")
            .on_hold(move |hold| seen.lock().unwrap().push(hold.clone()))
            .layer(handler);
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        tokio::spawn(serve_connection(server_io, service));
        let io = TokioIo::new(client_io);
        let mut request = Request::builder()
            .method("POST")
            .uri("http://inventory/upload")
            .header(BUDGET_HEADER, "550");
        if proto == Proto::Grpc {
            request = request
                .header("content-type", "application/grpc")
                .header("te", "trailers");
        }
        let request = request.body(Upload::new(20, 100 * MS)).unwrap();
        let t0 = Instant::now();
        let response = if proto == Proto::Http1 {
            let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await.unwrap();
            tokio::spawn(connection);
            sender.send_request(request).await.unwrap()
        } else {
            let (mut sender, connection) =
                hyper::client::conn::http2::handshake(TokioExecutor::new(), io)
                    .await
                    .unwrap();
            tokio::spawn(connection);
            sender.send_request(request).await.unwrap()
        };
        assert_eq!(Instant::now() - t0, 540 * MS, "{proto:?}");
        if proto == Proto::Grpc {
            assert_eq!(response.status(), StatusCode::OK);
            assert_eq!(response.headers()["grpc-status"], "4", "{proto:?}");
        } else {
            assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT, "{proto:?}");
        }
        assert_eq!(received.load(Ordering::SeqCst), 5, "{proto:?}");
        let hold = holds.lock().unwrap()[0].clone();
        assert_eq!(hold.outcome, HoldOutcome::Deadline, "{proto:?}: {hold}");
        assert_eq!(hold.exceeded, Some(Phase::Work), "{proto:?}");
        // The handler's read is gone: its future (and the body it read) was dropped at the
        // cutoff, so nothing reads on.
        assert!(reader.dropped.load(Ordering::SeqCst), "{proto:?}");
    }
}

/// Marks its [`Producer`] dropped when it goes.
struct Reading(Producer);

impl Drop for Reading {
    fn drop(&mut self) {
        self.0.dropped.store(true, Ordering::SeqCst);
    }
}

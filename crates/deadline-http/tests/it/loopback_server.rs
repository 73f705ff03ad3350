//! Real sockets on loopback, real time: the reference system's single-service cases against
//! `serve`, with a handler that works 1.5 s and one worker slot.
//!
//! Real time is noisy (two shared cores), so these tests assert orderings and generous bounds;
//! exact instants are asserted on paused time in `enforce.rs` and `http_memory.rs`. Each test
//! starts its own server on `127.0.0.1:0` so they can run in parallel.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline::trace::{TRACE_HEADER, Trace};
use deadline_http::{Hold, HoldOutcome, serve};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout};
use tower::{Layer, service_fn};

const WORK: Duration = Duration::from_millis(1500);

struct Server {
    addr: SocketAddr,
    holds: mpsc::UnboundedReceiver<Hold>,
    /// One permit per request the handler started on (after it took the worker slot).
    started: Arc<Semaphore>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    /// `inventory` with one worker slot: `/slow` works 1.5 s, `/fast` answers at once.
    async fn start() -> Server {
        let (hold_tx, holds) = mpsc::unbounded_channel();
        let started = Arc::new(Semaphore::new(0));
        let starts = started.clone();
        let handler = service_fn(move |request: Request<Incoming>| {
            starts.add_permits(1);
            async move {
                if request.uri().path() == "/slow" {
                    tokio::time::sleep(WORK).await;
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
            }
        });
        let service = crate::every_header("inventory")
            .slots(1)
            .on_hold(move |hold| {
                let _ = hold_tx.send(hold.clone());
            })
            .layer(handler);
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, service, async {
            let _ = stopped.await;
        }));
        Server {
            addr,
            holds,
            started,
            stop: Some(stop),
            task,
        }
    }

    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        let stopped = timeout(Duration::from_secs(15), self.task).await;
        stopped
            .expect("shut down")
            .expect("no panic")
            .expect("no error");
    }

    /// Waits until the handler has started on one more request: it holds the worker slot.
    async fn wait_started(&self) {
        timeout(Duration::from_secs(10), self.started.acquire())
            .await
            .expect("a request reached the handler in time")
            .expect("the server is running")
            .forget();
    }

    async fn next_hold(&mut self) -> Hold {
        timeout(Duration::from_secs(10), self.holds.recv())
            .await
            .expect("a hold report in time")
            .expect("the server is running")
    }
}

#[derive(Debug)]
struct Reply {
    status: StatusCode,
    trace: Trace,
    body: String,
    /// From just before the request was sent to the end of the body.
    elapsed: Duration,
}

/// One request on a fresh connection (with `TCP_NODELAY`, like the project's clients).
async fn get(addr: SocketAddr, path: &str, budget: Option<&str>) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut request = Request::builder().uri(path).header("host", "inventory");
    if let Some(budget) = budget {
        request = request.header(BUDGET_HEADER, budget);
    }
    let request = request.body(Empty::<Bytes>::new()).unwrap();
    let t0 = Instant::now();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status();
    let trace = Trace::from_header_value(&response.headers()[TRACE_HEADER]);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        trace,
        body: String::from_utf8(body.to_vec()).unwrap(),
        elapsed: tokio::time::Instant::now().saturating_duration_since(t0),
    }
}

fn ms(duration: Duration) -> u128 {
    duration.as_millis()
}

/// The root span's end: when the hop answered, on its own clock.
fn answered_at(reply: &Reply) -> u64 {
    reply.trace.spans[0].end_ms
}

/// The first child span called `name`.
fn child<'a>(reply: &'a Reply, name: &str) -> &'a deadline::trace::Span {
    reply.trace.spans[0]
        .children
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("no {name} span in {}", reply.trace.encode()))
}

#[tokio::test]
async fn without_a_header_the_work_runs_to_its_end() {
    let server = Server::start().await;
    let reply = get(server.addr, "/slow", None).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.elapsed >= WORK, "{reply:?}");
    assert!(answered_at(&reply) >= 1500, "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_budget_longer_than_the_work_is_served() {
    let server = Server::start().await;
    for budget in ["2000", "99999999999"] {
        let reply = get(server.addr, "/slow", Some(budget)).await;
        assert_eq!(reply.status, StatusCode::OK, "{budget}: {reply:?}");
        assert_eq!(reply.body, "done");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_600_ms_budget_is_answered_504_before_600_ms() {
    let mut server = Server::start().await;
    let reply = get(server.addr, "/slow", Some("600")).await;
    eprintln!(
        "600 ms budget: 504 after {} ms at the client, {} ms on the server",
        ms(reply.elapsed),
        answered_at(&reply)
    );
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{reply:?}");
    assert!(
        reply
            .body
            .starts_with("deadline exceeded at inventory while working: budget 600 ms"),
        "{reply:?}"
    );
    // On the server's own clock the answer left at the cutoff (590 ms) or just after. That it
    // leaves before 600 is asserted exactly on paused time (`http_memory`); on two shared cores
    // a real-time upper bound that tight would only measure the scheduler.
    let at = answered_at(&reply);
    assert!(at >= 590, "answered at {at} ms, before the cutoff");
    // At the client: after the cutoff, and long before the 1.5 s of work would have ended.
    assert!(reply.elapsed >= Duration::from_millis(580), "{reply:?}");
    assert!(reply.elapsed < Duration::from_millis(1200), "{reply:?}");
    let hold = server.next_hold().await;
    assert_eq!(hold.outcome, HoldOutcome::Deadline);
    assert!(hold.worked < WORK, "{hold:?}");
    server.stop().await;
}

#[tokio::test]
async fn spent_and_malformed_budgets_are_answered_at_once() {
    let server = Server::start().await;
    for budget in ["0", "-20"] {
        let reply = get(server.addr, "/slow", Some(budget)).await;
        assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{budget}");
        // The root span alone, 504, budget 0: answered on arrival. Its end is real time since
        // arrival, whole ms: 0 on an idle machine, a few on a busy one.
        let encoded = reply.trace.encode();
        let end_ms = encoded
            .strip_prefix("inventory@0-")
            .and_then(|rest| rest.strip_suffix("=504,^0=0"))
            .and_then(|ms| ms.parse::<u64>().ok());
        assert!(end_ms.is_some_and(|ms| ms < 1000), "{encoded}");
        assert!(reply.body.contains("on arrival"), "{reply:?}");
        assert!(reply.elapsed < Duration::from_millis(1000), "{reply:?}");
    }
    let reply = get(server.addr, "/slow", Some("1.5")).await;
    assert_eq!(reply.status, StatusCode::BAD_REQUEST);
    assert!(reply.body.contains("deadline-budget-ms"), "{reply:?}");
    assert!(reply.body.contains("\"1.5\""), "{reply:?}");
    assert!(reply.elapsed < Duration::from_millis(1000), "{reply:?}");
    server.stop().await;
}

#[tokio::test]
async fn with_one_worker_the_second_request_leaves_the_queue_in_time() {
    let server = Server::start().await;
    let addr = server.addr;
    let a = tokio::spawn(async move { get(addr, "/slow", Some("1200")).await });
    // a holds the only worker once the handler started on it.
    server.wait_started().await;
    let b = get(addr, "/slow", Some("500")).await;
    eprintln!(
        "b: {} after {} ms (queue span {:?})",
        b.status,
        ms(b.elapsed),
        child(&b, "queue")
    );
    assert_eq!(b.status, StatusCode::GATEWAY_TIMEOUT, "{b:?}");
    assert!(b.body.contains("while queued for a worker"), "{b:?}");
    let queue = child(&b, "queue");
    assert_eq!(queue.outcome.as_deref(), Some("deadline"));
    assert!((490..600).contains(&queue.end_ms), "{queue:?}");
    // b left well before a's slot would have come free (a is cut at ~1190 ms after it was
    // sent, and b was sent just after a started).
    assert!(b.elapsed < Duration::from_millis(1000), "{b:?}");

    let a = a.await.unwrap();
    assert_eq!(a.status, StatusCode::GATEWAY_TIMEOUT, "{a:?}");
    assert_eq!(child(&a, "work").outcome.as_deref(), Some("deadline"));
    assert!(a.elapsed < WORK, "{a:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_client_that_hangs_up_frees_its_worker_at_once() {
    let mut server = Server::start().await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nhost: inventory\r\nx-request-id: gone-1\r\n\r\n")
        .await
        .unwrap();
    // The caller hangs up once the handler has started on its request.
    server.wait_started().await;
    let closed = Instant::now();
    drop(stream);

    let hold = server.next_hold().await;
    let noticed = tokio::time::Instant::now().saturating_duration_since(closed);
    eprintln!("hang-up noticed after {} ms: {hold}", ms(noticed));
    assert_eq!(hold.outcome, HoldOutcome::HungUp, "{hold:?}");
    assert_eq!(hold.request_id.as_deref(), Some("gone-1"));
    assert!(hold.work_start.is_some(), "the work had started");
    assert!(hold.worked < WORK, "stopped before its end: {hold:?}");
    assert!(!hold.reply_written);

    // The slot is free: a request with a short budget starts at once instead of queueing.
    let reply = get(server.addr, "/fast", Some("300")).await;
    assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
    assert_eq!(child(&reply, "queue").end_ms, 0, "{reply:?}");
    server.stop().await;
}

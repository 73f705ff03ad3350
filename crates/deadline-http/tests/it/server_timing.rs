//! `Server-Timing` over real HTTP on loopback, for every kind of answer the enforce layer gives:
//! the work's own (200, 503), a cut at the deadline (504), a give-up in the queue (504), a spent
//! budget (504 on arrival) and a malformed one (400).
//!
//! Real time on two shared cores: durations are asserted with generous bounds, the metric names
//! and the budget exactly.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline_http::enforce::SERVER_TIMING_HEADER;
use deadline_http::{EnforceDeadlineLayer, serve};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use tokio::task::JoinHandle;
use tower::{Layer, service_fn};

/// A server on `127.0.0.1:0`, stopped by [`Server::stop`] (and by the runtime's end if a test
/// fails first).
struct Server {
    addr: SocketAddr,
    /// Notified each time a `/work/` handler starts.
    started: Arc<Notify>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

/// `/work/MS` sleeps MS ms and answers 200; `/unavailable` answers 503 at once; `/own` answers
/// 200 with a `Server-Timing` of its own (`db;dur=1.5`).
async fn start(layer: EnforceDeadlineLayer) -> Server {
    let started = Arc::new(Notify::new());
    let notify = started.clone();
    let handler = service_fn(move |request: Request<Incoming>| {
        let notify = notify.clone();
        async move {
            let path = request.uri().path();
            let mut response = Response::new(Full::new(Bytes::from_static(b"done")));
            if let Some(ms) = path.strip_prefix("/work/") {
                notify.notify_one();
                tokio::time::sleep(Duration::from_millis(ms.parse().unwrap())).await;
            } else if path == "/unavailable" {
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
            } else if path == "/own" {
                response
                    .headers_mut()
                    .insert(SERVER_TIMING_HEADER, HeaderValue::from_static("db;dur=1.5"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let service = layer.layer(handler);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, service, async {
        let _ = stopped.await;
    }));
    Server {
        addr,
        started,
        stop: Some(stop),
        task,
    }
}

impl Server {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(15), self.task)
            .await
            .expect("shut down")
            .expect("no panic")
            .expect("no error");
    }
}

/// The status and the `Server-Timing` metrics (name to `dur`, in order of appearance across
/// every header line) of one request on a fresh connection.
async fn get(
    addr: SocketAddr,
    path: &str,
    budget: Option<&str>,
) -> (StatusCode, Vec<(String, f64)>) {
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
    let response = sender
        .send_request(request.body(Empty::<Bytes>::new()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let mut metrics = Vec::new();
    for line in response.headers().get_all(SERVER_TIMING_HEADER) {
        for metric in line.to_str().unwrap().split(',') {
            let mut parts = metric.trim().split(';');
            let name = parts.next().unwrap().to_owned();
            let dur = parts
                .find_map(|p| p.strip_prefix("dur="))
                .unwrap_or_else(|| panic!("no dur in {metric:?}"))
                .parse::<f64>()
                .unwrap();
            metrics.push((name, dur));
        }
    }
    let _ = response.into_body().collect().await.unwrap();
    (status, metrics)
}

fn by_name(metrics: &[(String, f64)]) -> BTreeMap<&str, f64> {
    metrics.iter().map(|(n, d)| (n.as_str(), *d)).collect()
}

fn names(metrics: &[(String, f64)]) -> Vec<&str> {
    metrics.iter().map(|(n, _)| n.as_str()).collect()
}

#[tokio::test]
async fn a_success_shows_queue_work_and_budget() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/work/100", Some("2000")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&metrics), ["queue", "work", "budget"]);
    let m = by_name(&metrics);
    assert!(m["queue"] < 50.0, "{metrics:?}");
    assert!((100.0..1_500.0).contains(&m["work"]), "{metrics:?}");
    assert_eq!(m["budget"], 2000.0);
    server.stop().await;
}

#[tokio::test]
async fn no_budget_no_budget_metric() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/work/20", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&metrics), ["queue", "work"]);
    assert!(by_name(&metrics)["work"] >= 20.0, "{metrics:?}");
    server.stop().await;
}

#[tokio::test]
async fn a_cut_at_the_deadline_shows_the_work_until_the_cutoff() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/work/2000", Some("200")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(names(&metrics), ["queue", "work", "budget"]);
    let m = by_name(&metrics);
    // Cut at the budget less the 10 ms reply reserve.
    assert!((190.0..1_000.0).contains(&m["work"]), "{metrics:?}");
    assert_eq!(m["budget"], 200.0);
    server.stop().await;
}

#[tokio::test]
async fn a_give_up_in_the_queue_shows_the_time_queued_and_no_work() {
    let server = start(crate::every_header("inventory").slots(1)).await;
    let addr = server.addr;
    let busy = tokio::spawn(async move { get(addr, "/work/1500", None).await });
    // The first request holds the only slot once its work has started.
    server.started.notified().await;
    let (status, metrics) = get(addr, "/work/0", Some("300")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    let m = by_name(&metrics);
    assert!((290.0..1_200.0).contains(&m["queue"]), "{metrics:?}");
    assert_eq!(m["work"], 0.0);
    assert_eq!(m["budget"], 300.0);
    let (status, _) = busy.await.unwrap();
    assert_eq!(status, StatusCode::OK);
    server.stop().await;
}

#[tokio::test]
async fn a_spent_budget_shows_a_zero_budget() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/work/0", Some("-20")).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        metrics,
        [
            ("queue".to_owned(), 0.0),
            ("work".to_owned(), 0.0),
            ("budget".to_owned(), 0.0)
        ]
    );
    server.stop().await;
}

#[tokio::test]
async fn a_malformed_budget_shows_no_budget() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/work/0", Some("1.5")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        metrics,
        [("queue".to_owned(), 0.0), ("work".to_owned(), 0.0)]
    );
    server.stop().await;
}

#[tokio::test]
async fn whatever_the_work_answers_carries_it() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/unavailable", Some("500")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(names(&metrics), ["queue", "work", "budget"]);
    server.stop().await;
}

#[tokio::test]
async fn the_work_s_own_server_timing_is_kept() {
    let server = start(crate::every_header("inventory")).await;
    let (status, metrics) = get(server.addr, "/own", Some("500")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(names(&metrics), ["db", "queue", "work", "budget"]);
    assert_eq!(metrics[0].1, 1.5);
    server.stop().await;
}

#[tokio::test]
async fn turned_off_there_is_none() {
    let server = start(crate::every_header("inventory").server_timing(false)).await;
    for (path, budget, expected) in [
        ("/work/0", Some("500"), StatusCode::OK),
        ("/work/0", Some("x"), StatusCode::BAD_REQUEST),
        ("/work/500", Some("100"), StatusCode::GATEWAY_TIMEOUT),
    ] {
        let (status, metrics) = get(server.addr, path, budget).await;
        assert_eq!(status, expected);
        assert_eq!(metrics, []);
    }
    let (_, metrics) = get(server.addr, "/own", None).await;
    assert_eq!(names(&metrics), ["db"]);
    server.stop().await;
}

//! Full HTTP/1.1 in memory on paused time: a hyper client connection talks to
//! `serve_connection` (the server `serve` runs per connection) over `tokio::io::duplex`, so the
//! virtual clock can be trusted (no real sockets).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline::trace::TRACE_HEADER;
use deadline_http::{Hold, HoldOutcome, serve_connection};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::{Layer, service_fn};

const MS: Duration = Duration::from_millis(1);

/// Starts a server connection for a handler that sleeps 5 s, and returns a client for it and
/// the task that drives the client's side of the connection.
async fn connect(holds: Arc<Mutex<Vec<Hold>>>) -> (SendRequest<Empty<Bytes>>, JoinHandle<()>) {
    let handler = service_fn(|_request: Request<Incoming>| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
    });
    let service = crate::every_header("inventory")
        .on_hold(move |hold| holds.lock().unwrap().push(hold.clone()))
        .layer(handler);
    let (client_io, server_io) = tokio::io::duplex(64 * 1024);
    tokio::spawn(serve_connection(server_io, service));
    let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(client_io))
        .await
        .unwrap();
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    (sender, connection)
}

fn get(budget: Option<&'static str>) -> Request<Empty<Bytes>> {
    let mut request = Request::builder()
        .uri("/items/42")
        .header("host", "inventory");
    if let Some(budget) = budget {
        request = request.header(BUDGET_HEADER, budget);
    }
    request.body(Empty::new()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_budget_goes_in_and_a_504_with_its_trace_comes_out_on_time() {
    let holds = Arc::default();
    let (mut client, _connection) = connect(Arc::clone(&holds)).await;

    let t0 = Instant::now();
    let response = client.send_request(get(Some("600"))).await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        590 * MS,
        "answered at the deadline less the reserve"
    );
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        response.headers()[TRACE_HEADER],
        "inventory@0-590=504,.queue@0-0,.work@0-590=deadline,^0=600"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(
        body,
        "deadline exceeded at inventory while working: budget 600 ms, queued 0 ms, worked 590 ms\n"
    );

    // The same connection, no budget: served after the full 5 s.
    let t1 = Instant::now();
    let response = client.send_request(get(None)).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(Instant::now() - t1, Duration::from_secs(5));
    assert_eq!(
        response.headers()[TRACE_HEADER],
        "inventory@0-5000=200,.queue@0-0,.work@0-5000=ok"
    );
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(body, "done");

    let outcomes: Vec<_> = holds
        .lock()
        .unwrap()
        .iter()
        .map(|h| (h.outcome, h.reply_written))
        .collect();
    assert_eq!(
        outcomes,
        [(HoldOutcome::Deadline, true), (HoldOutcome::Ok, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_client_that_closes_its_connection_stops_the_work() {
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let (mut client, connection) = connect(Arc::clone(&holds)).await;
    let t0 = Instant::now();
    let pending = tokio::spawn(async move { client.send_request(get(None)).await });
    tokio::time::sleep(100 * MS).await;
    // The client gives up: dropping its request and its connection closes its end of the pipe.
    pending.abort();
    connection.abort();
    let _ = (pending.await, connection.await);
    // hyper sees the close and drops the request's future; the hold is reported at once.
    for _ in 0..100 {
        if !holds.lock().unwrap().is_empty() {
            break;
        }
        tokio::task::yield_now().await;
    }
    assert_eq!(
        Instant::now() - t0,
        100 * MS,
        "no need to wait for the work"
    );
    let holds = holds.lock().unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].outcome, HoldOutcome::HungUp);
    assert_eq!(holds[0].worked, 100 * MS);
    assert!(!holds[0].reply_written);
}

//! Hedging over real loopback HTTP, in real time: the losing attempt's connection is closed, and
//! the callee's enforce layer reports that attempt as hung up.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::{TRACE_HEADER, Trace};
use deadline::{CallPolicy, Deadline};
use deadline_http::propagate::HedgeDelay;
use deadline_http::{
    DeadlineClient, DeadlineContext, EnforceDeadlineLayer, Hold, HoldOutcome, serve,
};
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tower::{Layer, service_fn};

#[tokio::test]
async fn the_losing_attempt_is_hung_up_on_and_its_callee_stops() {
    // Inventory: the first request works 3 s, every later one 20 ms; holds are reported.
    let (hold_tx, mut holds) = mpsc::unbounded_channel::<Hold>();
    let arrivals = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&arrivals);
    let handler = service_fn(move |_: Request<Incoming>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let work = if n == 0 { 3_000 } else { 20 };
            tokio::time::sleep(Duration::from_millis(work)).await;
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        }
    });
    let service = EnforceDeadlineLayer::new("inventory")
        .on_hold(move |hold| {
            let _ = hold_tx.send(hold.clone());
        })
        .layer(handler);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, service, async {
        let _ = stopped.await;
    }));

    let policy = CallPolicy::new(Duration::from_secs(2), 3).unwrap();
    let client = DeadlineClient::new(policy)
        .target("inventory")
        .hedge(Some(HedgeDelay::Fixed(Duration::from_millis(150))));
    let t0 = Instant::now();
    let deadline = Deadline::after_duration(t0.into_std(), Duration::from_secs(2));
    let ctx = DeadlineContext::new(Some(deadline), Duration::from_millis(10), t0);
    let response = ctx
        .clone()
        .scope(client.get(format!("http://{addr}/items/7")))
        .await
        .expect("the hedge answers");
    let elapsed = Instant::now().saturating_duration_since(t0);
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.headers().contains_key(TRACE_HEADER));
    assert!(
        elapsed < Duration::from_millis(1_500),
        "the hedge won long before 3 s: {elapsed:?}"
    );
    assert_eq!(arrivals.load(Ordering::SeqCst), 2);

    // Two holds: the hedge's (ok), and the first attempt's, hung up on when it lost.
    let mut seen = Vec::new();
    for _ in 0..2 {
        let hold = timeout(Duration::from_secs(5), holds.recv())
            .await
            .expect("a hold report in time")
            .expect("the server runs");
        seen.push(hold);
    }
    let outcomes: Vec<HoldOutcome> = seen.iter().map(|h| h.outcome).collect();
    assert!(outcomes.contains(&HoldOutcome::Ok), "{seen:?}");
    let lost = seen
        .iter()
        .find(|h| h.outcome == HoldOutcome::HungUp)
        .unwrap_or_else(|| panic!("the losing attempt was hung up on: {seen:?}"));
    assert!(
        lost.worked < Duration::from_millis(1_500),
        "it stopped early: {lost:?}"
    );

    let (spans, _) = ctx.take_spans();
    let mut trace = Trace::new();
    trace.spans = spans;
    let text = trace.encode();
    assert!(text.contains("=lost"), "{text}");
    let _ = stop.send(());
    let _ = timeout(Duration::from_secs(10), server).await;
}

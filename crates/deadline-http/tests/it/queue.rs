//! The enforce layer's slot queue on paused time: earliest deadline first, waiters leaving, and
//! predictive admission (shed at arrival, re-checked at the grant).

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline::trace::TRACE_HEADER;
use deadline_http::enforce::QueueOrder;
use deadline_http::{EnforceBody, EnforceDeadlineLayer, Hold, HoldOutcome};
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt, service_fn};

type Body = Full<Bytes>;
type Reply = Response<EnforceBody<Body>>;
type Service = deadline_http::enforce::EnforceDeadline<
    BoxCloneService<Request<()>, Response<Body>, Infallible>,
>;

const MS: Duration = Duration::from_millis(1);

/// A handler for `/LABEL/N`: notes `LABEL` when it starts, works N ms, answers 200.
#[derive(Clone, Default)]
struct Starts(Arc<Mutex<Vec<String>>>);

impl Starts {
    fn service(&self) -> BoxCloneService<Request<()>, Response<Body>, Infallible> {
        let starts = self.clone();
        BoxCloneService::new(service_fn(move |request: Request<()>| {
            let starts = starts.clone();
            async move {
                let path = request.uri().path().to_owned();
                let (label, ms) = path[1..].split_once('/').expect("/LABEL/N");
                starts.0.lock().unwrap().push(label.to_owned());
                tokio::time::sleep(MS * ms.parse().expect("ms")).await;
                Ok(Response::new(Full::from("done")))
            }
        }))
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

#[derive(Clone, Default)]
struct Holds(Arc<Mutex<Vec<Hold>>>);

impl Holds {
    fn layer(&self) -> EnforceDeadlineLayer {
        let holds = self.clone();
        EnforceDeadlineLayer::new("svc")
            .on_hold(move |hold| holds.0.lock().unwrap().push(hold.clone()))
    }

    fn take(&self) -> Vec<Hold> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

fn request(path: &str, budget: Option<&'static str>) -> Request<()> {
    let mut request = Request::builder().uri(path).body(()).unwrap();
    if let Some(budget) = budget {
        request
            .headers_mut()
            .insert(BUDGET_HEADER, HeaderValue::from_static(budget));
    }
    request
}

fn send(service: &Service, path: &str, budget: Option<&'static str>) -> JoinHandle<Reply> {
    let call = service.clone().oneshot(request(path, budget));
    tokio::spawn(async move { call.await.unwrap() })
}

async fn settle() {
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
}

async fn text(response: Reply) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The order five queued requests start in, behind one 100 ms request holding the only slot.
async fn start_order(order: QueueOrder) -> Vec<String> {
    let starts = Starts::default();
    let service = EnforceDeadlineLayer::new("svc")
        .slots(1)
        .queue(order)
        .layer(starts.service());
    let busy = send(&service, "/busy/100", None);
    settle().await;
    let queued = [
        send(&service, "/none/10", None),
        send(&service, "/b900/10", Some("900")),
        send(&service, "/b300/10", Some("300")),
        send(&service, "/b600/10", Some("600")),
        send(&service, "/b300-again/10", Some("300")),
    ];
    settle().await;
    busy.await.unwrap();
    for call in queued {
        assert_eq!(call.await.unwrap().status(), StatusCode::OK);
    }
    starts.take()
}

#[tokio::test(start_paused = true)]
async fn fifo_starts_waiters_in_arrival_order() {
    assert_eq!(
        start_order(QueueOrder::Fifo).await,
        ["busy", "none", "b900", "b300", "b600", "b300-again"]
    );
}

#[tokio::test(start_paused = true)]
async fn edf_starts_the_earliest_deadline_first_and_the_deadline_less_last() {
    assert_eq!(
        start_order(QueueOrder::Edf).await,
        ["busy", "b300", "b300-again", "b600", "b900", "none"]
    );
}

#[tokio::test(start_paused = true)]
async fn an_edf_waiter_that_hangs_up_leaves_the_queue_at_once() {
    let starts = Starts::default();
    let service = EnforceDeadlineLayer::new("svc")
        .slots(1)
        .queue(QueueOrder::Edf)
        .layer(starts.service());
    let t0 = Instant::now();
    let busy = send(&service, "/busy/100", None);
    settle().await;
    let urgent = send(&service, "/urgent/10", Some("500"));
    let later = send(&service, "/later/10", Some("900"));
    settle().await;
    urgent.abort();
    settle().await;
    busy.await.unwrap();
    let later = later.await.unwrap();
    assert_eq!(later.status(), StatusCode::OK);
    assert_eq!(
        Instant::now() - t0,
        110 * MS,
        "served the moment the slot came free"
    );
    assert_eq!(starts.take(), ["busy", "later"]);
}

/// A layer with one slot and admission for 100 ms of work, which has already seen one request
/// work 100 ms (so its estimate is 100 ms).
async fn admitting(holds: &Holds, starts: &Starts) -> Service {
    let service = holds
        .layer()
        .slots(1)
        .queue(QueueOrder::Edf)
        .admission(100 * MS)
        .layer(starts.service());
    let warm = send(&service, "/warm/100", Some("1000"));
    assert_eq!(warm.await.unwrap().status(), StatusCode::OK);
    starts.take();
    holds.take();
    service
}

#[tokio::test(start_paused = true)]
async fn a_request_that_could_not_finish_is_shed_at_once_with_its_trace_and_hold() {
    let (holds, starts) = (Holds::default(), Starts::default());
    let service = admitting(&holds, &starts).await;
    let metrics = service.metrics();
    let busy = send(&service, "/busy/100", None);
    settle().await;
    let t0 = Instant::now();
    // Cutoff at 190 ms: a 100 ms wait and 100 ms of work do not fit.
    let shed = service
        .clone()
        .oneshot(request("/shed/100", Some("200")))
        .await
        .unwrap();
    assert_eq!(Instant::now(), t0, "refused without waiting");
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()[RETRY_AFTER], "0");
    assert_eq!(
        shed.headers()[TRACE_HEADER],
        "svc@0-0=503,.queue@0-0=shed,^0=200"
    );
    assert_eq!(
        text(shed).await,
        "svc refused the request at once, shed: 190 ms left, expected wait for a worker \
         100 ms, work needs at least 100 ms\n"
    );
    // Cutoff at 200 ms: it fits, and it is served.
    let fits = send(&service, "/fits/100", Some("210"));
    busy.await.unwrap();
    assert_eq!(fits.await.unwrap().status(), StatusCode::OK);
    assert_eq!(
        starts.take(),
        ["busy", "fits"],
        "the shed request never ran"
    );

    let shed_hold = holds
        .take()
        .into_iter()
        .find(|h| h.outcome == HoldOutcome::Shed)
        .expect("the shed request's hold is reported");
    assert_eq!(shed_hold.status, Some(StatusCode::SERVICE_UNAVAILABLE));
    assert_eq!(
        (shed_hold.queued, shed_hold.worked),
        (Duration::ZERO, Duration::ZERO)
    );
    assert_eq!(shed_hold.work_start, None);
    assert!(shed_hold.reply_written);
    assert_eq!(metrics.snapshot().shed, 1);
}

#[tokio::test(start_paused = true)]
async fn nothing_is_shed_with_a_free_slot_or_before_any_work_was_seen() {
    let (holds, starts) = (Holds::default(), Starts::default());
    let service = holds
        .layer()
        .slots(1)
        .admission(100 * MS)
        .layer(starts.service());
    // No work time seen yet: queued, then cut at its cutoff like any other.
    let busy = send(&service, "/busy/100", None);
    settle().await;
    let queued = send(&service, "/queued/100", Some("50"));
    settle().await;
    let queued = queued.await.unwrap();
    assert_eq!(queued.status(), StatusCode::GATEWAY_TIMEOUT);
    busy.await.unwrap();
    // A free slot: started even with less than `min_useful` left.
    let free = send(&service, "/free/10", Some("60"));
    assert_eq!(free.await.unwrap().status(), StatusCode::OK);
    assert_eq!(starts.take(), ["busy", "free"]);
    assert!(holds.take().iter().all(|h| h.outcome != HoldOutcome::Shed));
}

#[tokio::test(start_paused = true)]
async fn a_queued_request_is_shed_at_the_grant_when_too_little_is_left() {
    let (holds, starts) = (Holds::default(), Starts::default());
    let service = admitting(&holds, &starts).await;
    // Works 150 ms, half as long again as the estimate.
    let busy = send(&service, "/busy/150", None);
    settle().await;
    let t0 = Instant::now();
    // Cutoff at 220 ms: admitted (100 ms wait + 100 ms work fit), but the slot comes at 150 ms,
    // leaving 70 ms.
    let late = send(&service, "/late/100", Some("230"));
    settle().await;
    busy.await.unwrap();
    let late = late.await.unwrap();
    assert_eq!(
        Instant::now() - t0,
        150 * MS,
        "refused when granted, not at its cutoff"
    );
    assert_eq!(late.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(late.headers()[RETRY_AFTER], "0");
    assert_eq!(
        late.headers()[TRACE_HEADER],
        "svc@0-150=503,.queue@0-150=shed,^0=230"
    );
    assert_eq!(starts.take(), ["busy"], "never started");
    drop(late); // its body reports the hold
    let hold = holds
        .take()
        .into_iter()
        .find(|h| h.outcome == HoldOutcome::Shed)
        .expect("reported");
    assert_eq!(hold.queued, 150 * MS);
    // The unused slot went back: the next request starts at once.
    let next = send(&service, "/next/10", Some("1000"));
    assert_eq!(next.await.unwrap().status(), StatusCode::OK);
    assert_eq!(Instant::now() - t0, 160 * MS);
}

/// Finding: requests without a budget queued without limit and were never shed (20,000 waited,
/// 140 MB). With `max_queue(2)` and the only slot busy, two wait and the third is refused at
/// once with 503 — budget or not — and the two that waited are served.
#[tokio::test(start_paused = true)]
async fn a_full_queue_refuses_requests_with_or_without_a_budget() {
    let starts = Starts::default();
    let holds = Holds::default();
    let service = holds.layer().slots(1).max_queue(2).layer(starts.service());
    let busy = send(&service, "/busy/100", None);
    settle().await;
    let waiting = [
        send(&service, "/w1/10", None),
        send(&service, "/w2/10", Some("5000")),
    ];
    settle().await;
    let start = Instant::now();
    for (label, budget) in [("none", None), ("budget", Some("5000"))] {
        let refused = send(&service, &format!("/{label}/10"), budget)
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{label}");
        assert_eq!(refused.headers().get(RETRY_AFTER).unwrap(), "0");
        assert_eq!(Instant::now(), start, "refused at once");
        let body = text(refused).await;
        assert!(body.contains("2 requests already waiting"), "{body}");
    }
    busy.await.unwrap();
    for call in waiting {
        assert_eq!(call.await.unwrap().status(), StatusCode::OK);
    }
    assert_eq!(starts.take(), ["busy", "w1", "w2"]);
    let shed = holds
        .take()
        .iter()
        .filter(|h| h.outcome == HoldOutcome::Shed)
        .count();
    assert_eq!(shed, 2);
}

/// With a bound on the runtime's lag, every arrival is refused at once while the layer's own
/// timer is overdue by the bound or more — free slot or not, budget or not — and served again
/// once the timers fire on time.
#[tokio::test(start_paused = true)]
async fn a_runtime_running_late_sheds_every_arrival_until_it_catches_up() {
    let starts = Starts::default();
    let holds = Holds::default();
    let service = holds
        .layer()
        .slots(1_000)
        .max_runtime_lag(20 * MS)
        .layer(starts.service());
    // On time: served (and the first arrival starts the layer's timer).
    let first = send(&service, "/first/10", Some("5000")).await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    // The clock jumps 40 ms with no timer fired on the way: the runtime is that far behind.
    tokio::time::advance(40 * MS).await;
    for (label, budget) in [("none", None), ("budget", Some("5000"))] {
        let refused = service
            .clone()
            .oneshot(request(&format!("/{label}/10"), budget))
            .await
            .unwrap();
        assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE, "{label}");
        assert_eq!(refused.headers().get(RETRY_AFTER).unwrap(), "0");
        let body = text(refused).await;
        assert!(
            body.contains("ms late, more than the 20 ms it allows"),
            "{body}"
        );
    }
    // Once its timers fire on time again, it serves.
    tokio::time::sleep(20 * MS).await;
    let again = send(&service, "/again/10", Some("5000")).await.unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(starts.take(), ["first", "again"]);
    let shed = holds
        .take()
        .iter()
        .filter(|h| h.outcome == HoldOutcome::Shed)
        .count();
    assert_eq!(shed, 2);
}

//! The enforce layer as middleware, on paused time: `oneshot` against a mock inner service.
//!
//! Timing tests follow tower's hedge tests: poll, advance the clock to just before the moment,
//! assert nothing happened yet, advance to the moment, assert it happened.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::{Span, TRACE_HEADER, Trace};
use deadline::{BUDGET_HEADER, Budget, Deadline};
use deadline_http::enforce::REQUEST_ID_HEADER;
use deadline_http::{
    Activity, DeadlineContext, EnforceBody, EnforceDeadlineLayer, Hold, HoldOutcome,
};
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tokio::sync::Semaphore;
use tokio::time::{Instant, advance};
use tower::util::BoxCloneService;
use tower::{Layer, Service, ServiceExt, service_fn};

type Body = Full<Bytes>;
type Inner = BoxCloneService<Request<()>, Response<Body>, String>;
type Reply = Response<EnforceBody<Body>>;

const MS: Duration = Duration::from_millis(1);

/// A mock handler whose behaviour is chosen by the request path, and which logs what it did.
///
/// - `/sleep/N`: sleeps N ms, then 200
/// - `/forever`: never finishes
/// - `/gate`: waits for a permit of `gate`, then 200
/// - `/status/N`: answers status N at once
/// - `/error`: returns `Err("boom")`
/// - `/calling`: says it is calling `orders`, records a `call:orders` span when dropped,
///   never finishes
/// - `/spans`: records a span and two dropped ones, then 200
#[derive(Clone)]
struct Mock {
    log: Arc<Mutex<Vec<(String, Instant)>>>,
    gate: Arc<Semaphore>,
    seen: Arc<Mutex<Vec<Option<Deadline>>>>,
}

impl Mock {
    fn new() -> Mock {
        Mock {
            log: Arc::default(),
            gate: Arc::new(Semaphore::new(0)),
            seen: Arc::default(),
        }
    }

    fn note(&self, event: String) {
        self.log.lock().unwrap().push((event, Instant::now()));
    }

    /// When `event` (like `start /sleep/5`) happened, if it did.
    fn at(&self, event: &str) -> Option<Instant> {
        let log = self.log.lock().unwrap();
        log.iter().find(|(e, _)| e == event).map(|(_, at)| *at)
    }

    fn started(&self) -> usize {
        let log = self.log.lock().unwrap();
        log.iter().filter(|(e, _)| e.starts_with("start ")).count()
    }

    /// The deadline the handler saw in its last request, in its task-local context.
    fn last_deadline(&self) -> Option<Deadline> {
        *self.seen.lock().unwrap().last().expect("the handler ran")
    }

    fn service(&self) -> Inner {
        let mock = self.clone();
        BoxCloneService::new(service_fn(move |request: Request<()>| {
            let mock = mock.clone();
            async move {
                let path = request.uri().path().to_owned();
                let ctx = DeadlineContext::current().expect("the layer sets the context");
                // Nothing goes in the extensions unless the layer is asked to.
                assert_eq!(request.extensions().get::<Deadline>(), None);
                assert!(request.extensions().get::<DeadlineContext>().is_none());
                mock.seen.lock().unwrap().push(ctx.deadline());
                mock.note(format!("start {path}"));
                let mut guard = NoteDrop {
                    mock: mock.clone(),
                    path: path.clone(),
                    armed: true,
                };
                let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
                let response = |status: StatusCode, text: &'static str| {
                    let mut response = Response::new(Full::from(text));
                    *response.status_mut() = status;
                    response
                };
                let result = match parts.as_slice() {
                    ["sleep", ms] => {
                        tokio::time::sleep(MS * ms.parse().unwrap()).await;
                        Ok(response(StatusCode::OK, "slept"))
                    }
                    ["forever"] => std::future::pending().await,
                    ["gate"] => {
                        mock.gate.acquire().await.unwrap().forget();
                        Ok(response(StatusCode::OK, "through the gate"))
                    }
                    ["status", code] => Ok(response(
                        StatusCode::from_u16(code.parse().unwrap()).unwrap(),
                        "as asked",
                    )),
                    ["error"] => Err("boom".to_owned()),
                    ["calling"] => {
                        tokio::time::sleep(5 * MS).await;
                        let _calling = ctx.enter(Activity::Calling {
                            target: "orders".into(),
                        });
                        let _span = RecordOnDrop {
                            ctx: ctx.clone(),
                            start_ms: ctx.ms_since_arrival(Instant::now()),
                        };
                        std::future::pending().await
                    }
                    ["spans"] => {
                        ctx.record(Span::new("call:orders", 1, 3).with_outcome("200"));
                        ctx.record_dropped(2);
                        Ok(response(StatusCode::OK, "with spans"))
                    }
                    _ => Ok(response(StatusCode::NOT_FOUND, "no such mock")),
                };
                guard.armed = false;
                mock.note(format!("end {path}"));
                result
            }
        }))
    }
}

/// Notes `drop PATH` if the handler's future is dropped before it finished.
struct NoteDrop {
    mock: Mock,
    path: String,
    armed: bool,
}

impl Drop for NoteDrop {
    fn drop(&mut self) {
        if self.armed {
            self.mock.note(format!("drop {}", self.path));
        }
    }
}

/// Like an outbound attempt's guard: records its span when dropped.
struct RecordOnDrop {
    ctx: DeadlineContext,
    start_ms: u64,
}

impl Drop for RecordOnDrop {
    fn drop(&mut self) {
        let end = self.ctx.ms_since_arrival(Instant::now());
        self.ctx
            .record(Span::new("call:orders", self.start_ms, end).with_outcome("cancelled"));
    }
}

/// Collects hold reports from the layer's hook.
#[derive(Clone, Default)]
struct Holds(Arc<Mutex<Vec<Hold>>>);

impl Holds {
    fn layer(&self, name: &str) -> EnforceDeadlineLayer {
        let holds = self.clone();
        crate::every_header(name).on_hold(move |hold| holds.0.lock().unwrap().push(hold.clone()))
    }

    fn take(&self) -> Vec<Hold> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }

    fn one(&self) -> Hold {
        let mut holds = self.take();
        assert_eq!(holds.len(), 1, "{holds:#?}");
        holds.remove(0)
    }
}

fn request(path: &str, budgets: &[&[u8]]) -> Request<()> {
    let mut request = Request::builder().uri(path).body(()).unwrap();
    for budget in budgets {
        request
            .headers_mut()
            .append(BUDGET_HEADER, HeaderValue::from_bytes(budget).unwrap());
    }
    request
}

async fn text(response: Reply) -> String {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn trace(response: &Reply) -> &str {
    response.headers()[TRACE_HEADER].to_str().unwrap()
}

/// Polls `future` once.
async fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *future).poll(cx))).await
}

fn ok<T, E: std::fmt::Debug>(poll: Poll<Result<T, E>>) -> T {
    match poll {
        Poll::Ready(result) => result.unwrap(),
        Poll::Pending => panic!("not ready"),
    }
}

// ---- The budget header's rules, row by row ----

#[tokio::test(start_paused = true)]
async fn absent_header_means_no_deadline_and_no_cut() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("svc").layer(mock.service());
    let t0 = Instant::now();
    let response = service
        .oneshot(request("/sleep/7200000", &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        Instant::now() - t0,
        Duration::from_secs(7200),
        "two hours, never cut"
    );
    assert_eq!(mock.last_deadline(), None);
    assert_eq!(
        trace(&response),
        "svc@0-7200000=200,.queue@0-0,.work@0-7200000=ok"
    );
    assert_eq!(text(response).await, "slept");
    let hold = holds.one();
    assert_eq!(hold.budget_ms, None);
    assert_eq!(hold.outcome, HoldOutcome::Ok);
}

#[tokio::test(start_paused = true)]
async fn budgets_in_range_set_the_deadline_at_arrival() {
    let mock = Mock::new();
    let layer = crate::every_header("svc").reserve(Duration::ZERO);
    let service = layer.layer(mock.service());
    let cases: &[(&[u8], u64)] = &[
        (b"1", 1),
        (b"600", 600),
        (b" \t42\t ", 42),
        (b"3600000", 3_600_000),
        // Above the max, however long: clamped, never an error.
        (b"3600001", 3_600_000),
        (b"99999999999", 3_600_000),
        (b"99999999999999999999", 3_600_000),
        (b"99999999999999999999999999999999999999999999", 3_600_000),
    ];
    for (budget, ms) in cases {
        let arrival = Instant::now();
        let response = service
            .clone()
            .oneshot(request("/sleep/0", &[budget]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{budget:?}");
        let expected = Deadline::after_duration(arrival.into_std(), MS * *ms as u32);
        assert_eq!(mock.last_deadline(), Some(expected), "{budget:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn max_budget_clamps() {
    let mock = Mock::new();
    let max = Budget::from_millis(5_000).unwrap();
    let service = crate::every_header("svc")
        .max_budget(max)
        .layer(mock.service());
    let arrival = Instant::now();
    let response = service
        .oneshot(request("/sleep/0", &[b"60000"]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let expected = Deadline::after_duration(arrival.into_std(), Duration::from_secs(5));
    assert_eq!(mock.last_deadline(), Some(expected));
}

#[tokio::test(start_paused = true)]
async fn spent_budgets_are_504_on_arrival_and_the_handler_never_runs() {
    for budget in [&b"0"[..], b"-0", b"-20", b"-99999999999999999999"] {
        let mock = Mock::new();
        let holds = Holds::default();
        let service = holds.layer("svc").layer(mock.service());
        let response = service
            .oneshot(request("/sleep/0", &[budget]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
        assert_eq!(trace(&response), "svc@0-0=504,^0=0");
        assert!(response.body().is_from_layer());
        assert_eq!(
            text(response).await,
            "deadline exceeded at svc on arrival: the caller had already run out\n"
        );
        assert_eq!(mock.started(), 0, "{budget:?}");
        let hold = holds.one();
        assert_eq!(hold.outcome, HoldOutcome::Rejected);
        assert_eq!(hold.budget_ms, Some(0));
        assert_eq!(hold.status, Some(StatusCode::GATEWAY_TIMEOUT));
        assert_eq!(hold.work_start, None);
        assert!(hold.reply_written);
    }
}

#[tokio::test(start_paused = true)]
async fn malformed_budgets_are_400_naming_the_header_and_the_value() {
    let cases: &[(&[u8], &str)] = &[
        (b"", r#""""#),
        (b"1.5", r#""1.5""#),
        (b"1e3", r#""1e3""#),
        (b"+5", r#""+5""#),
        (b"0x10", r#""0x10""#),
        (b"12ms", r#""12ms""#),
        (b"5 5", r#""5 5""#),
        ("٣".as_bytes(), r#""\xd9\xa3""#),
        (b"\xff\xfe", r#""\xff\xfe""#),
    ];
    for (budget, quoted) in cases {
        let mock = Mock::new();
        let holds = Holds::default();
        let service = holds.layer("svc").layer(mock.service());
        let response = service
            .oneshot(request("/sleep/0", &[budget]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{budget:?}");
        assert_eq!(trace(&response), "svc@0-0=400");
        let body = text(response).await;
        assert!(
            body.starts_with("invalid deadline-budget-ms value "),
            "{body}"
        );
        assert!(body.contains(quoted), "{body} should quote {quoted}");
        assert_eq!(mock.started(), 0, "{budget:?}");
        let hold = holds.one();
        assert_eq!(hold.outcome, HoldOutcome::Rejected);
        assert_eq!(hold.status, Some(StatusCode::BAD_REQUEST));
    }
}

#[tokio::test(start_paused = true)]
async fn several_values_must_all_be_valid_and_the_smallest_wins() {
    let mock = Mock::new();
    let service = crate::every_header("svc").layer(mock.service());
    for lines in [&[&b"900, 300 ,600"[..]][..], &[b"900", b"300"]] {
        let arrival = Instant::now();
        let response = service
            .clone()
            .oneshot(request("/sleep/0", lines))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let expected = Deadline::after_duration(arrival.into_std(), 300 * MS);
        assert_eq!(mock.last_deadline(), Some(expected));
    }
    let started = mock.started();
    for (lines, status) in [
        (&[&b"900"[..], b"abc"][..], StatusCode::BAD_REQUEST),
        (&[b"900,"], StatusCode::BAD_REQUEST),
        (&[b"-5", b"x"], StatusCode::BAD_REQUEST),
        (&[b"900", b"-1"], StatusCode::GATEWAY_TIMEOUT),
        (&[b"900, 0"], StatusCode::GATEWAY_TIMEOUT),
    ] {
        let response = service
            .clone()
            .oneshot(request("/sleep/0", lines))
            .await
            .unwrap();
        assert_eq!(response.status(), status, "{lines:?}");
    }
    assert_eq!(
        mock.started(),
        started,
        "no rejected request reached the handler"
    );
}

#[tokio::test(start_paused = true)]
async fn grpc_timeout_is_read_only_when_asked_and_the_tightest_wins() {
    let mock = Mock::new();
    let with_grpc = |grpc: &'static str| {
        let mut request = request("/sleep/0", &[b"900"]);
        request
            .headers_mut()
            .insert("grpc-timeout", HeaderValue::from_static(grpc));
        request
    };
    let plain = crate::every_header("svc").layer(mock.service());
    let arrival = Instant::now();
    plain.oneshot(with_grpc("300m")).await.unwrap();
    let expected = Deadline::after_duration(arrival.into_std(), 900 * MS);
    assert_eq!(mock.last_deadline(), Some(expected), "ignored by default");

    let grpc = crate::every_header("svc")
        .grpc_timeout(true)
        .layer(mock.service());
    grpc.clone().oneshot(with_grpc("300m")).await.unwrap();
    let expected = Deadline::after_duration(arrival.into_std(), 300 * MS);
    assert_eq!(mock.last_deadline(), Some(expected));
    let response = grpc.oneshot(with_grpc("soon")).await.unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    assert!(text(response).await.contains("grpc-timeout"));
}

#[tokio::test(start_paused = true)]
async fn a_budget_within_the_reply_reserve_is_504_on_arrival() {
    let mock = Mock::new();
    let service = crate::every_header("svc").layer(mock.service());
    let response = service
        .clone()
        .oneshot(request("/sleep/0", &[b"10"]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        text(response).await,
        "deadline exceeded at svc on arrival: a budget of 10 ms leaves nothing once the reply \
         reserve of 10 ms is kept back\n"
    );
    assert_eq!(mock.started(), 0);
    let response = service
        .oneshot(request("/sleep/0", &[b"11"]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
}

/// Regression, named after the reference system's bug: its parser returned -1 both for a
/// missing header and for "-20", so an expired request ran with no deadline at all. At the
/// layer, every spent spelling is a 504 before the handler, and only a missing header runs
/// without a deadline.
#[tokio::test(start_paused = true)]
async fn regression_absent_and_negative_are_never_confused_at_the_layer() {
    for budget in [&b"-1"[..], b"-20", b"-0", b"0", b"-99999999999999999999"] {
        let mock = Mock::new();
        let service = crate::every_header("svc").layer(mock.service());
        let response = service
            .oneshot(request("/sleep/0", &[budget]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT, "{budget:?}");
        assert_eq!(mock.started(), 0, "{budget:?} must not run");
    }
    let mock = Mock::new();
    let service = crate::every_header("svc").layer(mock.service());
    let response = service.oneshot(request("/sleep/0", &[])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(mock.started(), 1);
    assert_eq!(mock.last_deadline(), None);
}

// ---- The cut ----

#[tokio::test(start_paused = true)]
async fn work_is_cut_at_the_deadline_less_the_reserve() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("inventory").layer(mock.service());
    let t0 = Instant::now();
    let mut response = Box::pin(service.oneshot(request("/forever", &[b"600"])));
    assert!(poll_once(&mut response).await.is_pending());
    assert!(mock.at("start /forever").is_some());

    advance(589 * MS).await;
    assert!(
        poll_once(&mut response).await.is_pending(),
        "not yet at 589 ms"
    );
    assert_eq!(mock.at("drop /forever"), None);

    advance(MS).await;
    let response = ok(poll_once(&mut response).await);
    assert_eq!(Instant::now() - t0, 590 * MS);
    assert_eq!(
        mock.at("drop /forever"),
        Some(t0 + 590 * MS),
        "the work was dropped at 590"
    );
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        trace(&response),
        "inventory@0-590=504,.queue@0-0,.work@0-590=deadline,^0=600"
    );
    assert_eq!(
        text(response).await,
        "deadline exceeded at inventory while working: budget 600 ms, queued 0 ms, worked 590 ms\n"
    );
    let hold = holds.one();
    assert_eq!(hold.outcome, HoldOutcome::Deadline);
    assert_eq!(hold.budget_ms, Some(600));
    assert_eq!((hold.queued, hold.worked), (Duration::ZERO, 590 * MS));
    assert_eq!(hold.work_end, Some(t0 + 590 * MS));
    assert!(hold.reply_written);
}

/// The work finishing and the cutoff firing at the same instant: the work is polled first, so
/// its answer wins and no 504 is made (see the enforce future's module docs).
#[tokio::test(start_paused = true)]
async fn the_work_wins_a_tie_with_the_cutoff() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("inventory").layer(mock.service());
    let t0 = Instant::now();
    let mut response = Box::pin(service.oneshot(request("/sleep/590", &[b"600"])));
    assert!(poll_once(&mut response).await.is_pending());
    advance(589 * MS).await;
    assert!(poll_once(&mut response).await.is_pending());

    // Both the handler's sleep and the cutoff end at 590 ms.
    advance(MS).await;
    let response = ok(poll_once(&mut response).await);
    assert_eq!(Instant::now() - t0, 590 * MS);
    assert_eq!(mock.at("end /sleep/590"), Some(t0 + 590 * MS));
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        trace(&response),
        "inventory@0-590=200,.queue@0-0,.work@0-590=ok,^0=600"
    );
    assert_eq!(text(response).await, "slept");
    assert_eq!(holds.one().outcome, HoldOutcome::Ok);
}

#[tokio::test(start_paused = true)]
async fn a_cut_while_calling_says_so_and_keeps_the_calls_span() {
    let mock = Mock::new();
    let service = crate::every_header("orders").layer(mock.service());
    let response = service
        .oneshot(request("/calling", &[b"300"]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    // The call's span was recorded by its guard as the work was dropped, before the trace
    // was written.
    assert_eq!(
        trace(&response),
        "orders@0-290=504,.queue@0-0,.work@0-290=deadline,.call:orders@5-290=cancelled,^0=300"
    );
    assert_eq!(
        text(response).await,
        "deadline exceeded at orders while calling orders: budget 300 ms, queued 0 ms, \
         worked 290 ms\n"
    );
}

#[tokio::test(start_paused = true)]
async fn a_request_first_polled_after_its_cutoff_never_starts() {
    let mock = Mock::new();
    let mut service = crate::every_header("svc").layer(mock.service());
    // `call` notes the arrival; the future is first polled 90 ms later, at its cutoff.
    let mut response = Box::pin(service.call(request("/sleep/0", &[b"100"])));
    advance(90 * MS).await;
    let response = ok(poll_once(&mut response).await);
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(mock.started(), 0);
    assert_eq!(trace(&response), "svc@0-90=504,.queue@0-90=deadline,^0=100");
}

#[tokio::test(start_paused = true)]
async fn inner_readiness_is_bounded_by_the_cutoff() {
    /// Never ready.
    #[derive(Clone)]
    struct Stuck;
    impl Service<Request<()>> for Stuck {
        type Response = Response<Body>;
        type Error = String;
        type Future = std::future::Ready<Result<Response<Body>, String>>;
        fn poll_ready(&mut self, _: &mut std::task::Context<'_>) -> Poll<Result<(), String>> {
            Poll::Pending
        }
        fn call(&mut self, _: Request<()>) -> Self::Future {
            unreachable!("never ready")
        }
    }
    let t0 = Instant::now();
    let service = crate::every_header("svc").layer(Stuck);
    let response = service.oneshot(request("/", &[b"100"])).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(Instant::now() - t0, 90 * MS);
}

// ---- Worker slots ----

#[tokio::test(start_paused = true)]
async fn the_queue_is_left_at_the_cutoff_and_the_trace_shows_the_wait() {
    let mock = Mock::new();
    let holds = Holds::default();
    let layer = holds.layer("svc").slots(1);
    let metrics = layer.metrics();
    let service = layer.layer(mock.service());
    let t0 = Instant::now();
    let mut first = Box::pin(service.clone().oneshot(request("/forever", &[])));
    assert!(poll_once(&mut first).await.is_pending());

    let mut second = Box::pin(service.oneshot(request("/sleep/0", &[b"300"])));
    assert!(poll_once(&mut second).await.is_pending());
    advance(289 * MS).await;
    assert!(
        poll_once(&mut second).await.is_pending(),
        "still queued at 289 ms"
    );
    advance(MS).await;
    let response = ok(poll_once(&mut second).await);
    assert_eq!(Instant::now() - t0, 290 * MS, "left before its deadline");
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        trace(&response),
        "svc@0-290=504,.queue@0-290=deadline,^0=300"
    );
    assert_eq!(
        text(response).await,
        "deadline exceeded at svc while queued for a worker: budget 300 ms, queued 290 ms, \
         worked 0 ms\n"
    );
    assert_eq!(mock.started(), 1, "only the first request ever ran");
    let hold = holds.one();
    assert_eq!(hold.outcome, HoldOutcome::Deadline);
    assert_eq!((hold.queued, hold.worked), (290 * MS, Duration::ZERO));
    assert_eq!((hold.work_start, hold.work_end), (None, None));
    let snapshot = metrics.snapshot();
    assert_eq!((snapshot.deadline, snapshot.queue_give_ups), (1, 1));
}

#[tokio::test(start_paused = true)]
async fn a_waiter_that_left_the_queue_does_not_block_later_ones() {
    let mock = Mock::new();
    let service = crate::every_header("svc").slots(1).layer(mock.service());
    let t0 = Instant::now();
    let first = tokio::spawn(service.clone().oneshot(request("/gate", &[])));
    tokio::task::yield_now().await;
    assert!(mock.at("start /gate").is_some());

    let gave_up = service
        .clone()
        .oneshot(request("/sleep/1", &[b"100"]))
        .await
        .unwrap();
    assert_eq!(gave_up.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(Instant::now() - t0, 90 * MS);

    let third = tokio::spawn(service.oneshot(request("/sleep/0", &[])));
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert!(!third.is_finished(), "queued behind the first");
    mock.gate.add_permits(1);
    let third = third.await.unwrap().unwrap();
    assert_eq!(third.status(), StatusCode::OK);
    assert_eq!(
        Instant::now() - t0,
        90 * MS,
        "got the slot the moment it was free"
    );
    assert_eq!(trace(&third), "svc@0-0=200,.queue@0-0,.work@0-0=ok");
    assert_eq!(first.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(
        mock.at("start /sleep/1"),
        None,
        "the one that left never ran"
    );
}

#[tokio::test(start_paused = true)]
async fn a_slot_freed_exactly_at_the_cutoff_is_too_late() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("svc").slots(1).layer(mock.service());
    let t0 = Instant::now();
    // Holds the only slot until 290 ms, the second request's cutoff.
    let first = tokio::spawn(service.clone().oneshot(request("/sleep/290", &[])));
    tokio::task::yield_now().await;
    let mut second = Box::pin(service.oneshot(request("/sleep/1", &[b"300"])));
    assert!(poll_once(&mut second).await.is_pending());

    advance(290 * MS).await;
    // Let the first request finish and hand its slot to the second before it is polled, so
    // the second sees its slot and its cutoff at the same instant.
    let first = first.await.unwrap().unwrap();
    assert_eq!(Instant::now() - t0, 290 * MS);
    drop(first);
    let response = ok(poll_once(&mut second).await);
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(
        mock.at("start /sleep/1"),
        None,
        "nothing starts after its deadline"
    );
    assert_eq!(
        trace(&response),
        "svc@0-290=504,.queue@0-290=deadline,^0=300"
    );
    drop(response);
    let outcomes: Vec<_> = holds
        .take()
        .iter()
        .map(|h| (h.path.clone(), h.outcome))
        .collect();
    assert_eq!(
        outcomes,
        [
            ("/sleep/290".to_owned(), HoldOutcome::Ok),
            ("/sleep/1".to_owned(), HoldOutcome::Deadline)
        ]
    );
}

// ---- traces and hold reports ----

#[tokio::test(start_paused = true)]
async fn the_trace_carries_the_handlers_spans_and_dropped_count() {
    let mock = Mock::new();
    let service = crate::every_header("gateway").layer(mock.service());
    let response = service.oneshot(request("/spans", &[b"600"])).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        trace(&response),
        "gateway@0-0=200,.queue@0-0,.work@0-0=ok,.call:orders@1-3=200,^0=600,+2"
    );
    let decoded = Trace::from_header_value(&response.headers()[TRACE_HEADER]);
    assert_eq!((decoded.span_count(), decoded.dropped), (4, 2));
}

#[tokio::test(start_paused = true)]
async fn a_hold_is_reported_once_when_the_reply_has_been_written() {
    let mock = Mock::new();
    let holds = Holds::default();
    let layer = holds.layer("svc").slots(1);
    let metrics = layer.metrics();
    let service = layer.layer(mock.service());
    let t0 = Instant::now();
    let mut request = request("/sleep/100", &[b"600"]);
    request
        .headers_mut()
        .insert(REQUEST_ID_HEADER, HeaderValue::from_static("r-42"));
    let response = service.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert!(holds.take().is_empty(), "not before the body is written");
    assert_eq!(text(response).await, "slept");
    let hold = holds.one();
    assert_eq!(&*hold.service, "svc");
    assert_eq!(hold.request_id.as_deref(), Some("r-42"));
    assert_eq!(
        (hold.method.as_str(), hold.path.as_str()),
        ("GET", "/sleep/100")
    );
    assert_eq!(hold.budget_ms, Some(600));
    assert_eq!(hold.arrival, t0);
    assert_eq!(
        (hold.work_start, hold.work_end),
        (Some(t0), Some(t0 + 100 * MS))
    );
    assert_eq!((hold.queued, hold.worked), (Duration::ZERO, 100 * MS));
    assert_eq!(hold.outcome, HoldOutcome::Ok);
    assert_eq!(hold.status, Some(StatusCode::OK));
    assert!(hold.reply_written);
    assert_eq!(
        hold.to_string(),
        "svc GET /sleep/100 [r-42]: ok (200), budget 600 ms, queued 0 ms, worked 100 ms, \
         reply written"
    );
    let snapshot = metrics.snapshot();
    assert_eq!((snapshot.holds(), snapshot.ok), (1, 1));
    assert_eq!(snapshot.worker_time, 100 * MS);
}

/// A layer without slots has no queue: a request's work starts as it arrived, however late
/// its future is first polled, with a budget or without.
#[tokio::test(start_paused = true)]
async fn without_slots_nothing_is_queued_however_late_the_first_poll() {
    let mock = Mock::new();
    let holds = Holds::default();
    let metrics;
    let mut service = {
        let layer = holds.layer("svc");
        metrics = layer.metrics();
        layer.layer(mock.service())
    };
    for budgets in [&[b"600".as_slice()][..], &[]] {
        let t0 = Instant::now();
        let response = service
            .ready()
            .await
            .unwrap()
            .call(request("/sleep/100", budgets));
        advance(20 * MS).await;
        let response = response.await.unwrap();
        assert_eq!(text(response).await, "slept");
        let hold = holds.one();
        assert_eq!(hold.arrival, t0);
        assert_eq!(
            (hold.work_start, hold.work_end),
            (Some(t0), Some(t0 + 120 * MS)),
            "budgets {budgets:?}"
        );
        assert_eq!((hold.queued, hold.worked), (Duration::ZERO, 120 * MS));
    }
    assert_eq!(metrics.snapshot().worker_time, 240 * MS);
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_unwritten_is_reported_so() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("svc").layer(mock.service());
    let response = service.oneshot(request("/sleep/5", &[])).await.unwrap();
    drop(response);
    let hold = holds.one();
    assert_eq!(hold.outcome, HoldOutcome::Ok);
    assert!(!hold.reply_written);
}

/// Regression (review): a caller that hung up while its request was still queued was logged
/// with 0 ms queued, hiding exactly the time it spent waiting.
#[tokio::test(start_paused = true)]
async fn a_caller_that_hangs_up_while_queued_is_logged_with_its_queue_time() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("svc").slots(1).layer(mock.service());
    let t0 = Instant::now();
    let mut first = Box::pin(service.clone().oneshot(request("/forever", &[])));
    assert!(poll_once(&mut first).await.is_pending());
    let mut queued = Box::pin(service.clone().oneshot(request("/sleep/0", &[])));
    assert!(poll_once(&mut queued).await.is_pending());
    advance(300 * MS).await;
    assert!(poll_once(&mut queued).await.is_pending());
    drop(queued);
    let hold = holds.one();
    assert_eq!(hold.outcome, HoldOutcome::HungUp);
    assert_eq!(hold.queued, 300 * MS);
    assert_eq!(hold.work_start, None);
    assert_eq!(Instant::now() - t0, 300 * MS);
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_hangs_up_stops_the_work_and_frees_the_slot() {
    let mock = Mock::new();
    let holds = Holds::default();
    let layer = holds.layer("svc").slots(1);
    let metrics = layer.metrics();
    let service = layer.layer(mock.service());
    let t0 = Instant::now();
    let mut response = Box::pin(service.clone().oneshot(request("/forever", &[])));
    assert!(poll_once(&mut response).await.is_pending());
    advance(50 * MS).await;
    assert!(poll_once(&mut response).await.is_pending());
    drop(response); // what hyper does when the client closes the connection
    assert_eq!(mock.at("drop /forever"), Some(t0 + 50 * MS));
    let hold = holds.one();
    assert_eq!(hold.outcome, HoldOutcome::HungUp);
    assert_eq!(hold.worked, 50 * MS);
    assert_eq!(hold.work_end, Some(t0 + 50 * MS));
    assert_eq!(hold.status, None);
    assert!(!hold.reply_written);

    let next = service.oneshot(request("/sleep/0", &[])).await.unwrap();
    assert_eq!(
        trace(&next),
        "svc@0-0=200,.queue@0-0,.work@0-0=ok",
        "the slot was free"
    );
    assert_eq!(Instant::now() - t0, 50 * MS);
    drop(next);
    let snapshot = metrics.snapshot();
    assert_eq!(
        (snapshot.hung_up, snapshot.ok, snapshot.replies_unwritten),
        (1, 1, 2)
    );
}

#[tokio::test(start_paused = true)]
async fn outcomes_follow_the_handlers_answer() {
    let mock = Mock::new();
    let holds = Holds::default();
    let layer = holds.layer("svc");
    let metrics = layer.metrics();
    let service = layer.layer(mock.service());
    for (path, outcome, work) in [
        ("/status/404", HoldOutcome::Ok, "ok"),
        ("/status/504", HoldOutcome::Deadline, "deadline"),
        ("/status/500", HoldOutcome::Error, "error"),
        ("/status/503", HoldOutcome::Error, "error"),
    ] {
        let response = service
            .clone()
            .oneshot(request(path, &[b"600"]))
            .await
            .unwrap();
        let code = response.status().as_str().to_owned();
        assert_eq!(
            trace(&response),
            format!("svc@0-0={code},.queue@0-0,.work@0-0={work},^0=600")
        );
        text(response).await;
        assert_eq!(holds.one().outcome, outcome, "{path}");
    }
    let error = service
        .oneshot(request("/error", &[b"600"]))
        .await
        .unwrap_err();
    assert_eq!(error, "boom", "inner errors pass through unchanged");
    let hold = holds.one();
    assert_eq!((hold.outcome, hold.status), (HoldOutcome::Error, None));
    let snapshot = metrics.snapshot();
    assert_eq!(
        (
            snapshot.ok,
            snapshot.deadline,
            snapshot.error,
            snapshot.queue_give_ups
        ),
        (1, 1, 3, 0)
    );
    assert_eq!(
        snapshot.to_string(),
        "5 requests: 1 ok, 1 deadline (0 before starting), 0 hung up, 0 rejected, 3 error, 0 shed; \
         1 replies not written; worker time 0.000 s"
    );
}

// ---- baseline ----

#[tokio::test(start_paused = true)]
async fn baseline_ignores_budgets() {
    let mock = Mock::new();
    let holds = Holds::default();
    let service = holds.layer("svc").enforce(false).layer(mock.service());
    for budget in [&b"-20"[..], b"0", b"1.5", b"\xff"] {
        let response = service
            .clone()
            .oneshot(request("/sleep/0", &[budget]))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK, "{budget:?}");
        assert_eq!(mock.last_deadline(), None);
    }
    let t0 = Instant::now();
    let response = service
        .oneshot(request("/sleep/1000", &[b"100"]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(Instant::now() - t0, 1000 * MS, "never cut");
    assert_eq!(
        trace(&response),
        "svc@0-1000=200,.queue@0-0,.work@0-1000=ok"
    );
    text(response).await;
    let hold = holds.take().pop().unwrap();
    assert_eq!((hold.budget_ms, hold.outcome), (None, HoldOutcome::Ok));
}

#[tokio::test(start_paused = true)]
async fn baseline_runs_a_dropped_request_to_the_end() {
    let mock = Mock::new();
    let holds = Holds::default();
    let layer = holds.layer("svc").enforce(false).slots(1);
    let service = layer.layer(mock.service());
    let t0 = Instant::now();
    let mut response = Box::pin(service.clone().oneshot(request("/sleep/1000", &[b"100"])));
    assert!(poll_once(&mut response).await.is_pending());
    tokio::task::yield_now().await; // the work's task starts
    assert_eq!(mock.at("start /sleep/1000"), Some(t0));
    advance(100 * MS).await;
    drop(response); // the caller hung up
    assert!(holds.take().is_empty(), "the work goes on");
    assert_eq!(mock.at("drop /sleep/1000"), None);

    // Queued behind it, with a budget that baseline ignores: it waits for the slot.
    let next = service
        .oneshot(request("/sleep/0", &[b"100"]))
        .await
        .unwrap();
    assert_eq!(next.status(), StatusCode::OK);
    assert_eq!(Instant::now() - t0, 1000 * MS);
    assert_eq!(
        mock.at("end /sleep/1000"),
        Some(t0 + 1000 * MS),
        "ran to its end"
    );
    assert_eq!(trace(&next), "svc@0-900=200,.queue@0-900,.work@900-900=ok");
    drop(next);
    let holds = holds.take();
    assert_eq!(holds.len(), 2, "{holds:#?}");
    let dropped = &holds[0];
    assert_eq!(dropped.path, "/sleep/1000");
    assert_eq!(dropped.outcome, HoldOutcome::HungUp);
    assert_eq!(dropped.work_end, Some(t0 + 1000 * MS), "its real end");
    assert_eq!(dropped.worked, 1000 * MS);
    assert_eq!(dropped.status, Some(StatusCode::OK));
    assert!(!dropped.reply_written);
}

// Checked when this file compiles: the layer, its services, futures and bodies can move
// between threads, as hyper and axum require.
const _: fn() = || {
    fn shareable<T: Send + Sync + Clone + 'static>() {}
    fn sendable<T: Send>() {}
    shareable::<EnforceDeadlineLayer>();
    shareable::<
        deadline_http::EnforceDeadline<
            tower::util::BoxCloneSyncService<Request<()>, Response<Body>, String>,
        >,
    >();
    sendable::<<deadline_http::EnforceDeadline<Inner> as Service<Request<()>>>::Future>();
    sendable::<EnforceBody<Body>>();
};

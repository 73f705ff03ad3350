//! The propagate layer against in-process mock callees, on paused time: every figure is exact.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline::trace::{TRACE_HEADER, Trace};
use deadline::{BUDGET_HEADER, CallPolicy, Deadline, Stop};
use deadline_http::error::BoxError;
use deadline_http::propagate::Backoff;
use deadline_http::{
    Activity, CallError, DeadlineContext, IDEMPOTENCY_KEY, PropagateDeadline,
    PropagateDeadlineLayer, detach,
};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use tokio::time::Instant;
use tower::util::BoxCloneService;
use tower::{Layer, ServiceExt};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(timeout_ms: u64, attempts: u32) -> CallPolicy {
    CallPolicy::new(ms(timeout_ms), attempts).expect("a valid policy")
}

/// A context for a request that arrived now with `budget_ms` (none: no deadline), and its
/// arrival.
fn context(budget_ms: Option<u64>) -> (DeadlineContext, Instant) {
    let t0 = Instant::now();
    let deadline = budget_ms.map(|b| Deadline::after_duration(t0.into_std(), ms(b)));
    (DeadlineContext::new(deadline, ms(10), t0), t0)
}

fn request(method: Method, uri: &str) -> Request<String> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(String::new())
        .expect("a valid request")
}

fn get(uri: &str) -> Request<String> {
    request(Method::GET, uri)
}

/// The spans the context holds, encoded: compact and exact to compare.
fn spans(context: &DeadlineContext) -> String {
    let (spans, dropped) = context.take_spans();
    let mut trace = Trace::new();
    trace.spans = spans;
    trace.dropped = dropped;
    trace.encode()
}

/// What a mock callee does with one attempt.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Answers `status` after `after` ms, with `trace` as its `Deadline-Trace`.
    Reply {
        after: u64,
        status: u16,
        trace: Option<&'static [u8]>,
    },
    /// Fails (as a refused or reset connection would) after `after` ms.
    Fail { after: u64 },
    /// Never answers.
    Hang,
}

fn reply(after: u64, status: u16) -> Act {
    Act::Reply {
        after,
        status,
        trace: None,
    }
}

/// What a mock callee saw of one attempt.
#[derive(Clone, Debug)]
struct Seen {
    /// When it arrived, in ms since the test's start.
    at_ms: u64,
    method: Method,
    /// Every `Deadline-Budget-Ms` line it carried.
    budgets: Vec<String>,
    /// An explicit deadline in its extensions.
    deadline: Option<Deadline>,
    /// The caller's activity while it ran.
    activity: Option<Activity>,
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Seen>>>);

impl Log {
    fn seen(&self) -> Vec<Seen> {
        self.0.lock().unwrap().clone()
    }

    fn count(&self) -> usize {
        self.0.lock().unwrap().len()
    }

    /// (arrival ms, budget) of every attempt.
    fn budgets(&self) -> Vec<(u64, Option<u64>)> {
        self.seen()
            .iter()
            .map(|s| {
                let budget = s.budgets.first().map(|b| b.parse().expect("digits"));
                (s.at_ms, budget)
            })
            .collect()
    }
}

type Mock = BoxCloneService<Request<String>, Response<String>, BoxError>;

/// A callee that does `behave(attempt index, budget)` and logs what it saw.
fn mock(
    t0: Instant,
    behave: impl Fn(usize, Option<u64>) -> Act + Send + Sync + 'static,
) -> (Mock, Log) {
    let log = Log::default();
    let behave = Arc::new(behave);
    let seen = log.clone();
    let service = tower::service_fn(move |request: Request<String>| {
        let budgets: Vec<String> = request
            .headers()
            .get_all(BUDGET_HEADER)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect();
        let budget = budgets.first().map(|b| b.parse::<u64>().expect("digits"));
        let n = {
            let mut log = seen.0.lock().unwrap();
            log.push(Seen {
                at_ms: u64::try_from((Instant::now() - t0).as_millis()).unwrap(),
                method: request.method().clone(),
                budgets,
                deadline: request.extensions().get::<Deadline>().copied(),
                activity: DeadlineContext::current().map(|c| c.activity()),
            });
            log.len() - 1
        };
        let act = behave(n, budget);
        async move {
            match act {
                Act::Reply {
                    after,
                    status,
                    trace,
                } => {
                    tokio::time::sleep(ms(after)).await;
                    let mut response = Response::new(String::new());
                    *response.status_mut() = StatusCode::from_u16(status).expect("a status");
                    if let Some(trace) = trace {
                        response.headers_mut().insert(
                            TRACE_HEADER,
                            HeaderValue::from_bytes(trace).expect("a header value"),
                        );
                    }
                    Ok(response)
                }
                Act::Fail { after } => {
                    tokio::time::sleep(ms(after)).await;
                    let refused =
                        std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
                    Err(BoxError::from(refused))
                }
                Act::Hang => std::future::pending().await,
            }
        }
    });
    (BoxCloneService::new(service), log)
}

/// The reference system's orders hop: a 1,890 ms deadline, 1,000 ms timeout, 3 attempts, 50 ms
/// margin and minimum; inventory uses its whole budget and answers 504 every time.
#[tokio::test(start_paused = true)]
async fn orders_hop_sends_950_then_890_and_never_the_third() {
    let (ctx, t0) = context(Some(1_890));
    let (inventory, log) = mock(t0, |_, budget| reply(budget.expect("a budget"), 504));
    let client = PropagateDeadline::new(inventory, policy(1_000, 3))
        .target("inventory")
        .backoff(Backoff::NONE);

    let response = ctx
        .clone()
        .scope(client.oneshot(get("http://inventory/stock")))
        .await
        .expect("the last 504 is the answer");

    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(log.budgets(), [(0, Some(950)), (950, Some(890))]);
    assert_eq!(Instant::now() - t0, ms(1_840), "no time spent on a third");
    assert_eq!(
        spans(&ctx),
        "call:inventory@0-1840=504,.attempt@0-950=504,.attempt@950-1840=504,\
         .attempt@1840-1840=skipped"
    );
}

#[tokio::test(start_paused = true)]
async fn each_attempt_waits_no_longer_than_the_deadline() {
    // A 1,500 ms deadline, 1,000 ms per attempt: the first waits its full timeout, the second
    // only the 500 ms left, and nothing is sent after.
    let (ctx, t0) = context(Some(1_500));
    let (callee, log) = mock(t0, |_, _| Act::Hang);
    let client = PropagateDeadline::new(callee, policy(1_000, 3))
        .target("slow")
        .backoff(Backoff::NONE);

    let error = ctx
        .clone()
        .scope(client.oneshot(get("http://slow/")))
        .await
        .expect_err("every attempt hung");

    assert_eq!(Instant::now() - t0, ms(1_500), "never past the deadline");
    assert_eq!(log.budgets(), [(0, Some(950)), (1_000, Some(450))]);
    assert!(error.is_deadline(), "{error}");
    assert_eq!(error.attempts_sent(), 2);
    assert_eq!(
        error.stop(),
        Some(Stop::NotEnoughTime {
            attempt: 3,
            remaining: Duration::ZERO,
            needed: ms(100)
        })
    );
    let CallError::DeadlineExceeded(exceeded) = &error else {
        panic!("not DeadlineExceeded: {error:?}");
    };
    assert_eq!(
        exceeded.activity(),
        &Activity::Calling {
            target: "slow".into()
        }
    );
    assert_eq!(
        spans(&ctx),
        "call:slow@0-1500=deadline,.attempt@0-1000=timeout,.attempt@1000-1500=timeout,\
         .attempt@1500-1500=skipped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_stale_budget_header_is_overwritten_not_appended() {
    let (ctx, t0) = context(Some(1_000));
    let (callee, log) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(2_000, 1));
    let mut stale = get("http://inventory/");
    stale
        .headers_mut()
        .insert(BUDGET_HEADER, HeaderValue::from_static("99999"));
    stale
        .headers_mut()
        .append(BUDGET_HEADER, HeaderValue::from_static("88888"));

    ctx.scope(client.oneshot(stale)).await.expect("a response");

    let seen = log.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].budgets, ["950"], "one line, the planned budget");
}

#[tokio::test(start_paused = true)]
async fn retries_on_500_503_and_connection_errors() {
    let (ctx, t0) = context(None);
    let (callee, log) = mock(t0, |n, _| match n {
        0 => reply(10, 500),
        1 => reply(10, 503),
        2 => Act::Fail { after: 10 },
        _ => reply(10, 200),
    });
    let client = PropagateDeadline::new(callee, policy(1_000, 4))
        .target("flaky")
        .backoff(Backoff::NONE);

    let response = ctx
        .clone()
        .scope(client.oneshot(get("http://flaky/")))
        .await
        .expect("the fourth attempt answers");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(log.count(), 4);
    assert_eq!(
        spans(&ctx),
        "call:flaky@0-40=200,.attempt@0-10=500,.attempt@10-20=503,.attempt@20-30=error,\
         .attempt@30-40=200"
    );
}

#[tokio::test(start_paused = true)]
async fn when_retries_run_out_the_last_5xx_response_is_the_answer() {
    let (_, t0) = context(None);
    let (callee, log) = mock(t0, |n, _| reply(10, if n == 0 { 500 } else { 503 }));
    let client = PropagateDeadline::new(callee, policy(1_000, 3));

    let response = client
        .oneshot(get("http://flaky/"))
        .await
        .expect("a 5xx response is not an error");

    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(log.count(), 3);
}

#[tokio::test(start_paused = true)]
async fn never_retries_on_1xx_to_4xx() {
    for status in [101, 200, 204, 302, 400, 404, 429] {
        let (_, t0) = context(None);
        let (callee, log) = mock(t0, move |_, _| reply(10, status));
        let client = PropagateDeadline::new(callee, policy(1_000, 3));

        let response = client
            .oneshot(get("http://inventory/"))
            .await
            .expect("a response");

        assert_eq!(response.status().as_u16(), status);
        assert_eq!(log.count(), 1, "status {status} must not be retried");
    }
}

#[tokio::test(start_paused = true)]
async fn post_is_retried_only_with_an_idempotency_key() {
    for method in [Method::POST, Method::PATCH] {
        let (_, t0) = context(None);
        let (callee, log) = mock(t0, |_, _| reply(10, 503));
        let client = PropagateDeadline::new(callee, policy(1_000, 3));
        let response = client
            .clone()
            .oneshot(request(method.clone(), "http://orders/"))
            .await
            .expect("a response");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(log.count(), 1, "{method} without a key is sent once");

        let mut keyed = request(method.clone(), "http://orders/");
        keyed
            .headers_mut()
            .insert(IDEMPOTENCY_KEY, HeaderValue::from_static("order-17"));
        client.oneshot(keyed).await.expect("a response");
        assert_eq!(log.count(), 1 + 3, "{method} with a key is retried");
        assert!(log.seen().iter().all(|s| s.method == method));
    }
}

#[tokio::test(start_paused = true)]
async fn a_post_that_times_out_is_not_sent_again() {
    let (_, t0) = context(None);
    let (callee, log) = mock(t0, |_, _| Act::Hang);
    let client = PropagateDeadline::new(callee, policy(1_000, 3));

    let error = client
        .oneshot(request(Method::POST, "http://orders/"))
        .await
        .expect_err("it hung");

    assert!(error.is_timeout(), "{error}");
    assert_eq!(error.attempts_sent(), 1);
    assert_eq!(log.count(), 1);
    assert_eq!(Instant::now() - t0, ms(1_000));
}

#[tokio::test(start_paused = true)]
async fn timeouts_are_retried() {
    let (_, t0) = context(None);
    let (callee, log) = mock(t0, |n, _| if n < 2 { Act::Hang } else { reply(10, 200) });
    let client = PropagateDeadline::new(callee, policy(100, 3)).backoff(Backoff::NONE);

    let response = client
        .oneshot(get("http://slow/"))
        .await
        .expect("the third attempt answers");

    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(log.budgets(), [(0, None), (100, None), (200, None)]);
    assert_eq!(Instant::now() - t0, ms(210));
}

#[tokio::test(start_paused = true)]
async fn a_5xx_then_a_timeout_ends_in_an_error_not_the_old_response() {
    let (_, t0) = context(None);
    let (callee, _) = mock(t0, |n, _| if n == 0 { reply(10, 503) } else { Act::Hang });
    let client = PropagateDeadline::new(callee, policy(100, 2)).backoff(Backoff::NONE);

    let error = client
        .oneshot(get("http://slow/"))
        .await
        .expect_err("the last attempt got no response");

    assert!(error.is_timeout(), "{error}");
    assert_eq!(error.attempts_sent(), 2);
}

#[tokio::test(start_paused = true)]
async fn no_deadline_no_header_full_timeouts_every_attempt() {
    let (ctx, t0) = context(None);
    let (callee, log) = mock(t0, |_, _| Act::Hang);
    let client = PropagateDeadline::new(callee, policy(1_000, 3)).backoff(Backoff::NONE);
    let mut stale = get("http://inventory/");
    stale
        .headers_mut()
        .insert(BUDGET_HEADER, HeaderValue::from_static("99999"));

    let error = ctx
        .clone()
        .scope(client.oneshot(stale))
        .await
        .expect_err("every attempt hung");

    assert_eq!(
        log.budgets(),
        [(0, None), (1_000, None), (2_000, None)],
        "a stale header from the incoming request is removed, not forwarded"
    );
    assert_eq!(Instant::now() - t0, ms(3_000));
    assert!(error.is_timeout() && !error.is_deadline(), "{error}");
    assert_eq!(error.attempts_sent(), 3);
    assert_eq!(
        error.to_string(),
        "the last of 3 attempt(s) timed out after 1000 ms"
    );
    assert_eq!(
        spans(&ctx),
        "call:inventory@0-3000=timeout,.attempt@0-1000=timeout,.attempt@1000-2000=timeout,\
         .attempt@2000-3000=timeout"
    );
}

/// The baseline of the comparisons: with propagation off the deadline is ignored, exactly as
/// a client without the library would.
#[tokio::test(start_paused = true)]
async fn propagation_off_sends_no_header_and_runs_every_full_attempt() {
    let (ctx, t0) = context(Some(500));
    let (callee, log) = mock(t0, |_, _| Act::Hang);
    let client = PropagateDeadline::new(callee, policy(1_000, 3).with_propagate(false));

    let error = ctx
        .scope(client.oneshot(get("http://inventory/")))
        .await
        .expect_err("every attempt hung");

    assert_eq!(log.budgets(), [(0, None), (1_000, None), (2_000, None)]);
    assert_eq!(
        Instant::now() - t0,
        ms(3_000),
        "well past the 500 ms deadline"
    );
    assert!(error.is_timeout(), "{error}");
}

#[tokio::test(start_paused = true)]
async fn an_explicit_deadline_works_outside_any_context_and_the_tighter_wins_inside_one() {
    let t0 = Instant::now();
    let (callee, log) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(1_000, 3));
    let deadline = Deadline::after_duration(t0.into_std(), ms(700));
    let mut explicit = get("http://inventory/");
    explicit.extensions_mut().insert(deadline);

    assert!(DeadlineContext::current().is_none());
    client.clone().oneshot(explicit).await.expect("a response");
    let seen = log.seen();
    assert_eq!(seen[0].budgets, ["650"]);
    assert_eq!(
        seen[0].deadline,
        Some(deadline),
        "the deadline goes on with the attempt"
    );

    let (ctx, _) = context(Some(1_890));
    let mut explicit = get("http://inventory/");
    explicit.extensions_mut().insert(deadline);
    ctx.clone()
        .scope(client.clone().oneshot(explicit))
        .await
        .expect("a response");
    assert_eq!(
        log.seen()[1].budgets,
        ["645"],
        "5 ms later, still the explicit one"
    );
    assert_eq!(
        spans(&ctx),
        "call:inventory@0-5=200,.attempt@0-5=200",
        "recorded in the context all the same"
    );

    // Regression (review): an explicit deadline *later* than the served request's must not
    // loosen it; the tighter of the two applies.
    let (ctx, _) = context(Some(300));
    let mut looser = get("http://inventory/");
    looser.extensions_mut().insert(Deadline::after_duration(
        Instant::now().into_std(),
        ms(5_000),
    ));
    ctx.clone()
        .scope(client.oneshot(looser))
        .await
        .expect("a response");
    assert_eq!(
        log.seen()[2].budgets,
        ["250"],
        "the served request's 300 ms, less the margin"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_inside_detach_sends_no_budget() {
    let (ctx, t0) = context(Some(1_000));
    let (callee, log) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(2_000, 3));

    ctx.clone()
        .scope(async {
            // The handler's own call carries the budget; the detached one does not.
            client.clone().oneshot(get("http://a/")).await.expect("a");
            detach(client.oneshot(get("http://b/"))).await.expect("b");
        })
        .await;

    assert_eq!(log.budgets(), [(0, Some(950)), (5, None)]);
    assert_eq!(
        spans(&ctx),
        "call:a@0-5=200,.attempt@0-5=200",
        "a detached call is no part of this request's trace"
    );
}

#[tokio::test(start_paused = true)]
async fn the_activity_is_calling_while_an_attempt_runs() {
    let (ctx, t0) = context(Some(1_000));
    let (callee, log) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(2_000, 3)).target("inventory");

    ctx.clone()
        .scope(client.oneshot(get("http://inventory/")))
        .await
        .expect("a response");

    assert_eq!(
        log.seen()[0].activity,
        Some(Activity::Calling {
            target: "inventory".into()
        })
    );
    assert_eq!(ctx.activity(), Activity::Working, "restored after the call");
}

#[tokio::test(start_paused = true)]
async fn the_callee_trace_is_shifted_and_nested_under_its_attempt() {
    let (ctx, t0) = context(Some(2_000));
    let (callee, _) = mock(t0, |n, _| match n {
        0 => Act::Reply {
            after: 10,
            status: 503,
            trace: Some(b"inv@0-9=503"),
        },
        _ => Act::Reply {
            after: 20,
            status: 200,
            trace: Some(b"inv@0-19=ok,.work@1-18,+2"),
        },
    });
    let client = PropagateDeadline::new(callee, policy(1_000, 3))
        .target("inv")
        .backoff(Backoff::NONE);

    ctx.clone()
        .scope(async {
            tokio::time::sleep(ms(30)).await; // the handler works a while first
            client.oneshot(get("http://inv/")).await
        })
        .await
        .expect("a response");

    assert_eq!(
        spans(&ctx),
        "call:inv@30-60=200,.attempt@30-40=503,..inv@30-39=503,.attempt@40-60=200,\
         ..inv@40-59=ok,...work@41-58,+2"
    );
}

#[tokio::test(start_paused = true)]
async fn a_malformed_callee_trace_gives_an_empty_subtree() {
    let bad: [&'static [u8]; 3] = [b"@@@ not a trace", b"\xff\xfe", b""];
    for trace in bad {
        let (ctx, t0) = context(Some(2_000));
        let (callee, _) = mock(t0, move |_, _| Act::Reply {
            after: 10,
            status: 200,
            trace: Some(trace),
        });
        let client = PropagateDeadline::new(callee, policy(1_000, 3)).target("inv");

        let response = ctx
            .clone()
            .scope(client.oneshot(get("http://inv/")))
            .await
            .expect("a malformed trace is never an error");

        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(spans(&ctx), "call:inv@0-10=200,.attempt@0-10=200");
    }
}

/// The enforce layer drops the handler at its cutoff and still reports where the time went.
#[tokio::test(start_paused = true)]
async fn dropping_the_call_mid_attempt_records_it_with_a_cancelled_attempt() {
    let (ctx, t0) = context(Some(2_000));
    let (callee, _) = mock(t0, |n, _| if n == 0 { reply(50, 503) } else { Act::Hang });
    let client = PropagateDeadline::new(callee, policy(1_000, 3))
        .target("inv")
        .backoff(Backoff::NONE);

    let cut_short = ctx
        .clone()
        .scope(tokio::time::timeout(
            ms(120),
            client.oneshot(get("http://inv/")),
        ))
        .await;

    assert!(cut_short.is_err(), "the call was dropped at 120 ms");
    assert_eq!(
        spans(&ctx),
        "call:inv@0-120=cancelled,.attempt@0-50=503,.attempt@50-120=cancelled"
    );
    assert_eq!(
        ctx.activity(),
        Activity::Working,
        "the activity is restored"
    );
}

#[tokio::test(start_paused = true)]
async fn too_little_time_for_the_first_attempt_is_attempt_skipped() {
    let (ctx, t0) = context(Some(80));
    let (callee, log) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(1_000, 3)).target("inv");

    let error = ctx
        .clone()
        .scope(client.oneshot(get("http://inv/")))
        .await
        .expect_err("nothing could be sent");

    assert_eq!(log.count(), 0);
    assert!(error.is_skipped() && error.is_deadline(), "{error}");
    let CallError::AttemptSkipped(skipped) = &error else {
        panic!("not AttemptSkipped: {error:?}");
    };
    assert_eq!(skipped.sent(), 0);
    assert_eq!(skipped.remaining(), Some(ms(80)));
    assert_eq!(skipped.needed(), Some(ms(100)));
    assert_eq!(spans(&ctx), "call:inv@0-0=skipped,.attempt@0-0=skipped");
}

#[tokio::test(start_paused = true)]
async fn errors_then_too_little_time_is_deadline_exceeded() {
    // Each attempt fails after 150 ms: at 0, 150 and 300; at 450 only 50 ms are left.
    let (ctx, t0) = context(Some(500));
    let (callee, log) = mock(t0, |_, _| Act::Fail { after: 150 });
    let client = PropagateDeadline::new(callee, policy(1_000, 5))
        .target("inv")
        .backoff(Backoff::NONE);

    let error = ctx
        .clone()
        .scope(client.oneshot(get("http://inv/")))
        .await
        .expect_err("every attempt failed");

    assert_eq!(
        log.budgets(),
        [(0, Some(450)), (150, Some(300)), (300, Some(150))]
    );
    assert!(error.is_deadline(), "{error}");
    assert_eq!(error.attempts_sent(), 3);
    assert!(matches!(
        error.stop(),
        Some(Stop::NotEnoughTime { attempt: 4, .. })
    ));
    assert_eq!(
        spans(&ctx),
        "call:inv@0-450=deadline,.attempt@0-150=error,.attempt@150-300=error,\
         .attempt@300-450=error,.attempt@450-450=skipped"
    );
}

#[tokio::test(start_paused = true)]
async fn errors_on_every_attempt_end_in_the_inner_error() {
    let (_, t0) = context(None);
    let (callee, log) = mock(t0, |_, _| Act::Fail { after: 1 });
    let client = PropagateDeadline::new(callee, policy(1_000, 3));

    let error = client
        .oneshot(get("http://inv/"))
        .await
        .expect_err("every attempt failed");

    assert_eq!(log.count(), 3);
    let CallError::Inner {
        attempts_sent,
        source,
        ..
    } = &error
    else {
        panic!("not Inner: {error:?}");
    };
    assert_eq!(*attempts_sent, 3);
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the inner service's own error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[tokio::test(start_paused = true)]
async fn the_target_defaults_to_the_uri_authority() {
    let (ctx, t0) = context(Some(1_000));
    let (callee, _) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadlineLayer::new(policy(1_000, 1)).layer(callee);

    ctx.clone()
        .scope(async {
            client
                .clone()
                .oneshot(get("http://inv:8080/x"))
                .await
                .expect("a");
            client.oneshot(get("/relative")).await.expect("b");
        })
        .await;

    assert_eq!(
        spans(&ctx),
        "call:inv:8080@0-5=200,.attempt@0-5=200,call:downstream@5-10=200,.attempt@5-10=200"
    );
}

#[tokio::test(start_paused = true)]
async fn the_call_future_is_send() {
    fn assert_send<T: Send>(value: T) -> T {
        value
    }
    let (_, t0) = context(None);
    let (callee, _) = mock(t0, |_, _| reply(5, 200));
    let client = PropagateDeadline::new(callee, policy(1_000, 1));
    let future = assert_send(client.oneshot(get("http://inv/")));
    assert_eq!(future.await.expect("a response").status(), StatusCode::OK);
}

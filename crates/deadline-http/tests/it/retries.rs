//! The call loop's retries on paused time: backoff spent from the budget, the retry budget
//! shared by clones, pushback and the callee-504 rule, each visible in the trace.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline::trace::Trace;
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::error::BoxError;
use deadline_http::propagate::{Backoff, RetryBudgetConfig};
use deadline_http::{DeadlineContext, PropagateDeadline};
use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::BoxCloneService;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn policy(timeout_ms: u64, attempts: u32) -> CallPolicy {
    CallPolicy::new(ms(timeout_ms), attempts).expect("a valid policy")
}

fn context(budget_ms: Option<u64>) -> (DeadlineContext, Instant) {
    let t0 = Instant::now();
    let deadline = budget_ms.map(|b| Deadline::after_duration(t0.into_std(), ms(b)));
    (DeadlineContext::new(deadline, ms(10), t0), t0)
}

fn spans(context: &DeadlineContext) -> String {
    let (spans, dropped) = context.take_spans();
    let mut trace = Trace::new();
    trace.spans = spans;
    trace.dropped = dropped;
    trace.encode()
}

fn get() -> Request<String> {
    Request::get("http://inv/").body(String::new()).unwrap()
}

type Mock = BoxCloneService<Request<String>, Response<String>, BoxError>;

/// (ms since the test's start, budget) of every attempt a callee saw.
type Seen = Arc<Mutex<Vec<(u64, Option<u64>)>>>;

/// A callee answering `status` with `headers` after `after` ms; logs (ms since `t0`, budget).
fn callee(
    t0: Instant,
    after: u64,
    status: u16,
    headers: &'static [(&'static str, &'static str)],
) -> (Mock, Seen) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&log);
    let service = tower::service_fn(move |request: Request<String>| {
        let budget = request
            .headers()
            .get(BUDGET_HEADER)
            .map(|v| v.to_str().unwrap().parse().unwrap());
        seen.lock().unwrap().push((
            u64::try_from((Instant::now() - t0).as_millis()).unwrap(),
            budget,
        ));
        async move {
            tokio::time::sleep(ms(after)).await;
            let mut response = Response::builder().status(status);
            for (name, value) in headers {
                response = response.header(*name, *value);
            }
            Ok::<_, BoxError>(response.body(String::new()).unwrap())
        }
    });
    (BoxCloneService::new(service), log)
}

/// A retry whose drawn delay would leave too little time is neither slept nor sent: the call
/// ends at once with the last 503 and a `skipped-backoff` span.
#[tokio::test(start_paused = true)]
async fn a_retry_that_fits_only_without_its_delay_is_skipped_at_once() {
    // 150 ms left: the first attempt (told 100) answers 503 after 45 ms, leaving 105; any delay
    // over 5 ms leaves less than the 100 an attempt needs. The delay is drawn from [0, 1 s].
    let backoff = Backoff::new(ms(1_000), ms(1_000)).unwrap();
    let mut skipped = 0;
    for _ in 0..20 {
        let (ctx, t0) = context(Some(150));
        let (inv, log) = callee(t0, 45, 503, &[]);
        let client = PropagateDeadline::new(inv, policy(1_000, 3))
            .target("inv")
            .backoff(backoff);
        let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let calls = log.lock().unwrap().clone();
        if calls.len() == 1 {
            skipped += 1;
            assert_eq!(Instant::now() - t0, ms(45), "no sleep before stopping");
            assert_eq!(
                spans(&ctx),
                "call:inv@0-45=503,.attempt@0-45=503,.attempt@45-45=skipped-backoff"
            );
        } else {
            // A draw of at most 5 ms (1 in 200): sent, and never past the deadline.
            assert!(calls[1].0 <= 50, "{calls:?}");
            assert!(Instant::now() - t0 <= ms(150));
        }
    }
    assert!(skipped >= 15, "{skipped} of 20 skipped");
}

/// Clones share one retry budget per target: with retries allowed as half the requests and no
/// reserve, the first call's retry is refused (`throttled`), the second call (from a clone)
/// brings the window to two requests and its retry is allowed.
#[tokio::test(start_paused = true)]
async fn clones_share_one_retry_budget_and_refusals_are_throttled() {
    let (_, t0) = context(None);
    let (inv, log) = callee(t0, 10, 503, &[]);
    let half = RetryBudgetConfig::ratio_cap(Duration::from_secs(10), 500, 0);
    let client = PropagateDeadline::new(inv, policy(1_000, 2))
        .target("inv")
        .backoff(Backoff::NONE)
        .retry_budget(Some(half));
    let clone = client.clone();

    let (ctx, _) = context(Some(2_000));
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "the last attempt's answer"
    );
    assert_eq!(
        spans(&ctx),
        "call:inv@0-10=503,.attempt@0-10=503,.attempt@10-10=throttled"
    );
    assert_eq!(log.lock().unwrap().len(), 1);

    let (ctx, _) = context(Some(2_000));
    let response = ctx.clone().scope(clone.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        spans(&ctx),
        "call:inv@0-20=503,.attempt@0-10=503,.attempt@10-20=503"
    );
    assert_eq!(log.lock().unwrap().len(), 3);
}

/// Without a budget the same calls retry every time; a zero budget refuses every retry.
#[tokio::test(start_paused = true)]
async fn the_retry_budget_can_be_off_or_empty() {
    let (_, t0) = context(None);
    let (inv, log) = callee(t0, 10, 503, &[]);
    let unbudgeted = PropagateDeadline::new(inv.clone(), policy(1_000, 3))
        .backoff(Backoff::NONE)
        .retry_budget(None);
    for _ in 0..20 {
        let _ = unbudgeted.clone().oneshot(get()).await;
    }
    assert_eq!(log.lock().unwrap().len(), 60);
    let (inv, log) = callee(t0, 10, 503, &[]);
    let empty = PropagateDeadline::new(inv, policy(1_000, 3)).retry_budget(Some(
        RetryBudgetConfig::ratio_cap(Duration::from_secs(10), 0, 0),
    ));
    for _ in 0..20 {
        let _ = empty.clone().oneshot(get()).await;
    }
    assert_eq!(log.lock().unwrap().len(), 20);
}

/// `Retry-After: 1` on a 503: the retry waits a second when the budget has room for it, and is
/// not sent (nor waited for) when it has not.
#[tokio::test(start_paused = true)]
async fn retry_after_is_honoured_inside_the_budget() {
    let (ctx, t0) = context(Some(2_000));
    let (inv, log) = callee(t0, 10, 503, &[("retry-after", "1")]);
    let client = PropagateDeadline::new(inv, policy(1_000, 2)).target("inv");
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let calls = log.lock().unwrap().clone();
    assert_eq!(
        calls,
        [(0, Some(950)), (1_010, Some(940))],
        "the retry came a second later"
    );

    let (ctx, t0) = context(Some(900));
    let (inv, log) = callee(t0, 10, 503, &[("retry-after", "1")]);
    let client = PropagateDeadline::new(inv, policy(1_000, 2)).target("inv");
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(log.lock().unwrap().len(), 1);
    assert_eq!(
        Instant::now() - t0,
        ms(10),
        "no wait for a retry that cannot be sent"
    );
    assert_eq!(
        spans(&ctx),
        "call:inv@0-10=503,.attempt@0-10=503,.attempt@10-10=skipped-pushback"
    );
}

/// A 429 is retried only when it says when; a negative gRPC pushback stops the retries.
#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_is_retried_and_a_negative_pushback_is_not() {
    let (_, t0) = context(None);
    let (inv, log) = callee(t0, 10, 429, &[("retry-after", "0")]);
    let client = PropagateDeadline::new(inv, policy(1_000, 3)).backoff(Backoff::NONE);
    let response = client.oneshot(get()).await.unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(log.lock().unwrap().len(), 3);

    let (inv, log) = callee(t0, 10, 429, &[]);
    let client = PropagateDeadline::new(inv, policy(1_000, 3));
    let _ = client.oneshot(get()).await.unwrap();
    assert_eq!(
        log.lock().unwrap().len(),
        1,
        "a bare 429 is a 4xx: not retried"
    );

    let (ctx, t0) = context(Some(2_000));
    let (inv, log) = callee(t0, 10, 503, &[("grpc-retry-pushback-ms", "-1")]);
    let client = PropagateDeadline::new(inv, policy(1_000, 3)).target("inv");
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(log.lock().unwrap().len(), 1);
    assert_eq!(
        spans(&ctx),
        "call:inv@0-10=503,.attempt@0-10=503,.attempt@10-10=no-retry"
    );
}

/// A callee that used its whole budget and answered 504 is retried when the retry gets at least
/// half of that budget, and not otherwise.
#[tokio::test(start_paused = true)]
async fn a_callee_504_is_retried_only_with_half_the_budget_that_ran_out() {
    // 1,890 ms and 1 s attempts: inventory's 504 after its 950 ms leaves the retry 890 (sent);
    // the third would get 0 after the second's 890: the planner stops first.
    let (ctx, t0) = context(Some(1_890));
    let (inv, log) = callee(t0, 950, 504, &[]);
    let client = PropagateDeadline::new(inv, policy(1_000, 3))
        .target("inv")
        .backoff(Backoff::NONE);
    let _ = ctx.clone().scope(client.oneshot(get())).await;
    assert_eq!(
        log.lock().unwrap().clone(),
        [(0, Some(950)), (950, Some(890))]
    );

    // A 2 s attempt told 1,840 ms that comes back 504 leaves 57 ms: not worth it.
    let (ctx, t0) = context(Some(1_950));
    let (orders, log) = callee(t0, 1_843, 504, &[]);
    let client = PropagateDeadline::new(orders, policy(3_500, 3))
        .target("orders")
        .backoff(Backoff::NONE);
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(log.lock().unwrap().clone(), [(0, Some(1_900))]);
    assert_eq!(
        spans(&ctx),
        "call:orders@0-1843=504,.attempt@0-1843=504,.attempt@1843-1843=skipped-504"
    );
}

/// A callee whose first attempt hangs for `slow` ms and whose others answer after `fast`; it
/// counts the attempts whose futures were dropped before they finished.
fn slow_first(
    t0: Instant,
    slow: u64,
    fast: u64,
    status: u16,
) -> (Mock, Seen, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let log: Seen = Arc::new(Mutex::new(Vec::new()));
    let dropped = Arc::new(AtomicUsize::new(0));
    let (seen, gone) = (Arc::clone(&log), Arc::clone(&dropped));
    let service = tower::service_fn(move |request: Request<String>| {
        let budget = request
            .headers()
            .get(BUDGET_HEADER)
            .map(|v| v.to_str().unwrap().parse().unwrap());
        let n = {
            let mut log = seen.lock().unwrap();
            log.push((
                u64::try_from((Instant::now() - t0).as_millis()).unwrap(),
                budget,
            ));
            log.len()
        };
        struct Guard(Arc<AtomicUsize>, bool);
        impl Drop for Guard {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        let guard = Guard(Arc::clone(&gone), false);
        async move {
            // The whole guard moves into the future (not just the field it sets).
            let mut guard = guard;
            tokio::time::sleep(ms(if n == 1 { slow } else { fast })).await;
            guard.1 = true;
            let response = Response::builder()
                .status(status)
                .body(String::new())
                .unwrap();
            Ok::<_, BoxError>(response)
        }
    });
    (BoxCloneService::new(service), log, dropped)
}

/// The first attempt is slow: 50 ms later a hedge goes out, answers after 10 ms and wins; the
/// first attempt's future is dropped (its callee would see the hang-up) and ends `lost`.
#[tokio::test(start_paused = true)]
async fn a_hedge_wins_and_the_slow_attempt_is_cancelled() {
    use deadline_http::propagate::HedgeDelay;
    let (ctx, t0) = context(Some(2_000));
    let (inv, log, dropped) = slow_first(t0, 1_500, 10, 200);
    let client = PropagateDeadline::new(inv, policy(1_000, 3))
        .target("inv")
        .hedge(Some(HedgeDelay::Fixed(ms(50))));
    let response = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(Instant::now() - t0, ms(60));
    assert_eq!(
        log.lock().unwrap().clone(),
        [(0, Some(950)), (50, Some(950))]
    );
    assert_eq!(dropped.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(
        spans(&ctx),
        "call:inv@0-60=200,.attempt@0-60=lost,.attempt@50-60=200"
    );
}

/// A POST is never hedged; neither is a call with no time for a hedge, or one the retry budget
/// refuses (recorded `throttled`).
#[tokio::test(start_paused = true)]
async fn hedges_only_when_idempotent_in_time_and_in_budget() {
    use deadline_http::propagate::HedgeDelay;
    let hedge = Some(HedgeDelay::Fixed(ms(50)));

    let (ctx, t0) = context(Some(2_000));
    let (inv, log, _) = slow_first(t0, 300, 10, 200);
    let client = PropagateDeadline::new(inv, policy(1_000, 3)).hedge(hedge);
    let post = Request::post("http://inv/").body(String::new()).unwrap();
    let _ = ctx.scope(client.oneshot(post)).await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 1, "a POST is not hedged");

    // 140 ms left: the first attempt is told 90; 50 ms later 90 are left, under the 100 needed.
    let (ctx, t0) = context(Some(140));
    let (inv, log, _) = slow_first(t0, 60, 10, 200);
    let client = PropagateDeadline::new(inv, policy(1_000, 3)).hedge(hedge);
    let _ = ctx.scope(client.oneshot(get())).await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 1, "no time for a hedge");

    let (ctx, t0) = context(Some(2_000));
    let (inv, log, _) = slow_first(t0, 300, 10, 200);
    let client = PropagateDeadline::new(inv, policy(1_000, 3))
        .target("inv")
        .hedge(hedge)
        .retry_budget(Some(RetryBudgetConfig::ratio_cap(
            Duration::from_secs(10),
            0,
            0,
        )));
    let _ = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(log.lock().unwrap().len(), 1, "the budget refused the hedge");
    assert_eq!(
        spans(&ctx),
        "call:inv@0-300=200,.attempt@50-50=throttled,.attempt@0-300=200"
    );
}

/// A percentile delay hedges nothing until 20 calls were seen, then hedges at the observed
/// percentile.
#[tokio::test(start_paused = true)]
async fn a_percentile_delay_waits_for_samples() {
    use deadline_http::propagate::HedgeDelay;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let arrivals = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&arrivals);
    // Attempts 1 to 20 take 20 ms, the 21st 300 ms, any after it 10 ms.
    let inv = BoxCloneService::new(tower::service_fn(move |_: Request<String>| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let took = match n {
                1..=20 => 20,
                21 => 300,
                _ => 10,
            };
            tokio::time::sleep(ms(took)).await;
            Ok::<_, BoxError>(Response::new(String::new()))
        }
    }));
    let client = PropagateDeadline::new(inv, policy(1_000, 2))
        .target("inv")
        .hedge(Some(HedgeDelay::Percentile { per_mille: 900 }));
    for _ in 0..20 {
        let (ctx, _) = context(Some(2_000));
        let _ = ctx.scope(client.clone().oneshot(get())).await.unwrap();
    }
    assert_eq!(
        arrivals.load(Ordering::SeqCst),
        20,
        "too few samples: no hedge"
    );
    // p90 of twenty 20 ms calls is 20 ms: the slow 21st is hedged 20 ms in.
    let (ctx, t0) = context(Some(2_000));
    let _ = ctx.clone().scope(client.oneshot(get())).await.unwrap();
    assert_eq!(arrivals.load(Ordering::SeqCst), 22);
    assert_eq!(Instant::now() - t0, ms(30));
    assert_eq!(
        spans(&ctx),
        "call:inv@0-30=200,.attempt@0-30=lost,.attempt@20-30=200"
    );
}

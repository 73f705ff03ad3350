//! The retry budget's defaults on paused time, with many calls in flight as in the reference
//! outage: an outage costs about one call per request, and isolated failures are still retried
//! at a tenth of a request a second.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadline::{CallPolicy, Deadline};
use deadline_http::error::BoxError;
use deadline_http::propagate::RetryBudgetConfig;
use deadline_http::{DeadlineContext, PropagateDeadline};
use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::ServiceExt;
use tower::util::BoxCloneService;

type Mock = BoxCloneService<Request<String>, Response<String>, BoxError>;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `rate` users a second for `seconds` through one client with `budget`, each with 1,900 ms
/// and the reference orders policy (3 attempts of at most 1 s). `fails(call number, ms since
/// the start)` says whether the callee answers 503 at once (else 200 after 100 ms). Returns the
/// calls the callee saw for users sent in `counted` (ms), those users, and how many of all the
/// users got a 200.
async fn run(
    rate: f64,
    seconds: f64,
    budget: Option<RetryBudgetConfig>,
    counted: std::ops::Range<u64>,
    fails: fn(u64, u64) -> bool,
) -> (u64, u64, u64) {
    tokio::task::LocalSet::new()
        .run_until(run_local(rate, seconds, budget, counted, fails))
        .await
}

async fn run_local(
    rate: f64,
    seconds: f64,
    budget: Option<RetryBudgetConfig>,
    counted: std::ops::Range<u64>,
    fails: fn(u64, u64) -> bool,
) -> (u64, u64, u64) {
    let t0 = Instant::now();
    let calls = Arc::new(AtomicU64::new(0));
    let counter = calls.clone();
    let callee = tower::service_fn(move |_: Request<String>| {
        let n = counter.fetch_add(1, Ordering::Relaxed);
        let since = u64::try_from((Instant::now() - t0).as_millis()).unwrap();
        let fail = fails(n, since);
        async move {
            if !fail {
                tokio::time::sleep(ms(100)).await;
            }
            let status = if fail { 503 } else { 200 };
            Ok::<_, BoxError>(
                Response::builder()
                    .status(status)
                    .body(String::new())
                    .unwrap(),
            )
        }
    });
    let callee: Mock = BoxCloneService::new(callee);
    let policy = CallPolicy::new(ms(1_000), 3).unwrap();
    let client = PropagateDeadline::new(callee, policy)
        .target("inventory")
        .retry_budget(budget);
    let users = (rate * seconds).round() as u64;
    let mut tasks = tokio::task::JoinSet::new();
    let mut in_window = 0;
    for user in 0..users {
        let at = t0 + Duration::from_secs_f64(user as f64 / rate);
        tokio::time::sleep_until(at).await;
        let sent = u64::try_from((at - t0).as_millis()).unwrap();
        in_window += u64::from(counted.contains(&sent));
        let context = DeadlineContext::new(
            Some(Deadline::after_duration(at.into_std(), ms(1_900))),
            ms(10),
            at,
        );
        let client = client.clone();
        let request = Request::get(format!("http://inventory/{user}"))
            .body(String::new())
            .unwrap();
        // Local tasks: the call's future is not `Send` for every lifetime the checker asks about.
        tasks.spawn_local(async move { context.scope(client.oneshot(request)).await });
    }
    let mut ok = 0;
    while let Some(result) = tasks.join_next().await {
        let response = result.unwrap().unwrap();
        ok += u64::from(response.status() == StatusCode::OK);
    }
    (calls.load(Ordering::Relaxed), in_window, ok)
}

/// Inventory down from 5 s to 10 s of a 15 s load at 30 users a second (the reference
/// outage): with the default budget, at most 1.1 calls per user sent during the outage; with
/// the ratio cap alone (Finagle's 20 % plus 10 a second) about 2.
#[tokio::test(start_paused = true)]
async fn the_reference_outage_costs_at_most_1_1_calls_per_request() {
    fn down(_: u64, since: u64) -> bool {
        (5_000..10_000).contains(&since)
    }
    // Calls during the outage: everything the callee saw, less the healthy users' one call each
    // (every user outside the outage is answered at its first attempt).
    let outage = 5_000..10_000;
    let (calls, users, _) = run(
        30.0,
        15.0,
        Some(RetryBudgetConfig::DEFAULT),
        outage.clone(),
        down,
    )
    .await;
    let per_request = (calls - (450 - users)) as f64 / users as f64;
    assert_eq!(users, 150);
    assert!(
        per_request <= 1.1,
        "default budget: {per_request} calls per request"
    );
    let (calls, users, _) = run(30.0, 15.0, Some(RetryBudgetConfig::FINAGLE), outage, down).await;
    let per_request = (calls - (450 - users)) as f64 / users as f64;
    assert!(
        per_request >= 1.5,
        "the ratio cap alone: {per_request} calls per request"
    );
}

/// One user every ten seconds for an hour, each failing once (every other call fails): with
/// the default budget every failure is retried and every user answered; with a ratio cap and
/// no constant (20 % of one request per window) none is, and half the users fail.
#[tokio::test(start_paused = true)]
async fn isolated_failures_are_retried_at_a_tenth_of_a_request_a_second() {
    fn every_other(call: u64, _: u64) -> bool {
        call % 2 == 0
    }
    let all = 0..u64::MAX;
    let (calls, users, ok) = run(
        0.1,
        3_600.0,
        Some(RetryBudgetConfig::DEFAULT),
        all.clone(),
        every_other,
    )
    .await;
    assert_eq!((users, ok, calls), (360, 360, 720));
    let ratio_only = RetryBudgetConfig::ratio_cap(Duration::from_secs(10), 200, 0);
    let (calls, _, ok) = run(0.1, 3_600.0, Some(ratio_only), all, every_other).await;
    // No retry at all: one call per user, and every other call (so user) failed.
    assert_eq!(
        (calls, ok),
        (360, 180),
        "a ratio cap alone never allows a retry at this rate"
    );
}

/// A shed (503 with `Retry-After: 0`) is retried only with a bucket's permission: not without a
/// budget or with the ratio cap alone, and with the default budget until its bucket is empty; a
/// 503 without the header is retried as before.
#[tokio::test(start_paused = true)]
async fn a_shed_is_retried_only_with_the_buckets_permission() {
    async fn calls(budget: Option<RetryBudgetConfig>, retry_after: Option<&'static str>) -> u64 {
        let seen = Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        let callee = tower::service_fn(move |_: Request<String>| {
            counter.fetch_add(1, Ordering::Relaxed);
            let mut response = Response::builder().status(503);
            if let Some(value) = retry_after {
                response = response.header("retry-after", value);
            }
            std::future::ready(Ok::<_, BoxError>(response.body(String::new()).unwrap()))
        });
        let callee: Mock = BoxCloneService::new(callee);
        let client = PropagateDeadline::new(callee, CallPolicy::new(ms(1_000), 3).unwrap())
            .target("inventory")
            .retry_budget(budget);
        for _ in 0..10 {
            let at = Instant::now();
            let context = DeadlineContext::new(
                Some(Deadline::after_duration(at.into_std(), ms(1_900))),
                ms(10),
                at,
            );
            let request = Request::get("http://inventory/")
                .body(String::new())
                .unwrap();
            let response = context
                .scope(client.clone().oneshot(request))
                .await
                .unwrap();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        }
        seen.load(Ordering::Relaxed)
    }
    let shed = Some("0");
    assert_eq!(
        calls(None, shed).await,
        10,
        "no budget: a shed is not retried"
    );
    assert_eq!(calls(None, None).await, 30, "no budget: a plain 503 is");
    assert_eq!(calls(Some(RetryBudgetConfig::FINAGLE), shed).await, 10);
    assert_eq!(calls(Some(RetryBudgetConfig::FINAGLE), None).await, 30);
    assert_eq!(
        calls(Some(RetryBudgetConfig::DEFAULT), shed).await,
        15,
        "the bucket's 5 tokens, then no more"
    );
}

//! What stands in front of a hop: the front timeout caps (or sets) the budget, and a trusted
//! `X-Request-Start` takes the time spent in front from it.

use std::convert::Infallible;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use deadline_http::{DeadlineContext, EnforceDeadlineLayer};
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};

/// What `layer` answered a request with `headers` whose handler works `work_ms` (paused time),
/// and the time the handler had at its start in ms (the budget less the 10 ms reply reserve):
/// (status, trace, time).
async fn serve(
    layer: &EnforceDeadlineLayer,
    headers: Vec<(&'static str, String)>,
    work_ms: u64,
) -> (StatusCode, String, Option<u128>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(None));
    let seen_by_handler = seen.clone();
    let handler = service_fn(move |_: Request<String>| {
        let seen = seen_by_handler.clone();
        async move {
            let remaining = DeadlineContext::current().and_then(|ctx| ctx.remaining());
            *seen.lock().unwrap() = remaining.map(|r| r.as_millis());
            tokio::time::sleep(Duration::from_millis(work_ms)).await;
            Ok::<_, Infallible>(Response::new(String::from("ok")))
        }
    });
    let mut request = Request::get("/").body(String::new()).expect("a request");
    for (name, value) in headers {
        request
            .headers_mut()
            .insert(name, HeaderValue::from_str(&value).expect("a header value"));
    }
    let response = layer
        .clone()
        .layer(handler)
        .oneshot(request)
        .await
        .expect("infallible");
    let trace = response
        .headers()
        .get("deadline-trace")
        .map(|v| v.to_str().expect("text").to_owned())
        .unwrap_or_default();
    let budget = *seen.lock().unwrap();
    (response.status(), trace, budget)
}

fn budget(ms: u64) -> (&'static str, String) {
    ("deadline-budget-ms", ms.to_string())
}

/// `X-Request-Start` as nginx's `t=${msec}` (seconds with milliseconds), `ms_ago` before now.
fn started(ms_ago: i64) -> (&'static str, String) {
    #[allow(clippy::disallowed_methods)] // the proxy's stamp is wall time by definition
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_millis() as i64;
    let at = now - ms_ago;
    (
        "x-request-start",
        format!("t={}.{:03}", at / 1_000, at % 1_000),
    )
}

/// nginx in front gives up after 1 s: a request without a budget gets 950 ms (the default
/// 50 ms margin), is treated as budgeted (its answer shows the trace), and work longer than that
/// is answered by the hop's own 504 before the front's timer, the trace naming the front.
#[tokio::test(start_paused = true)]
async fn the_front_timeout_sets_the_budget_of_a_request_without_one() {
    let layer = EnforceDeadlineLayer::new("gateway").front_timeout(Duration::from_secs(1));
    let started_at = tokio::time::Instant::now();
    let (status, trace, seen) = serve(&layer, vec![], 5_000).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(seen, Some(940));
    let answered = tokio::time::Instant::now().saturating_duration_since(started_at);
    assert!(
        answered < Duration::from_secs(1),
        "answered after {answered:?}, after the front's timer"
    );
    assert!(trace.contains(",.budget:front@0-0"), "{trace}");
    assert!(trace.ends_with("^0=950"), "{trace}");
}

#[tokio::test(start_paused = true)]
async fn the_front_timeout_caps_a_longer_budget_and_leaves_a_shorter_one() {
    let layer = EnforceDeadlineLayer::new("gateway")
        .front_timeout(Duration::from_secs(1))
        .front_margin(Duration::from_millis(100));
    let (status, trace, seen) = serve(&layer, vec![budget(2_000)], 10).await;
    assert_eq!((status, seen), (StatusCode::OK, Some(890)));
    assert!(trace.contains("budget:front"), "{trace}");
    let (status, trace, seen) = serve(&layer, vec![budget(400)], 10).await;
    assert_eq!((status, seen), (StatusCode::OK, Some(390)));
    assert!(
        !trace.contains("budget:front"),
        "the caller set it: {trace}"
    );
    // No front timeout: no budget, as before.
    let plain = EnforceDeadlineLayer::new("gateway");
    assert_eq!(serve(&plain, vec![], 10).await.2, None);
}

/// A trusted `X-Request-Start` N ms old takes N ms from the budget, within 5 ms (the stamp
/// has millisecond resolution, and the budget whole milliseconds), or within the wall time the
/// request took to build and serve if that was longer (a stalled test thread).
#[tokio::test(start_paused = true)]
async fn time_spent_in_front_comes_off_the_budget() {
    let within = |expected: u128, stamp_ms: i64, headers: Vec<(&'static str, String)>| {
        let layer = EnforceDeadlineLayer::new("gateway")
            .request_start(true)
            .front_timeout(Duration::from_secs(1));
        async move {
            #[allow(clippy::disallowed_methods)] // measures the wall time the request took
            let wall = SystemTime::now();
            let mut headers = headers;
            headers.push(started(stamp_ms));
            let (status, _, seen) = serve(&layer, headers, 10).await;
            let slack = wall.elapsed().map_or(0, |e| e.as_millis()).max(5);
            assert_eq!(status, StatusCode::OK);
            let seen = seen.expect("a budget");
            assert!(
                (expected.saturating_sub(slack)..=expected).contains(&seen),
                "{seen} ms, not {expected} within {slack}"
            );
            assert_eq!(layer.ignored_request_starts(), 0);
        }
    };
    // 2,000 ms sent, capped to the front's 950 (1 s less the margin), 300 spent in front, the
    // 10 ms reserve kept: 640.
    within(640, 300, vec![budget(2_000)]).await;
    // 500 ms sent (under the front's), 300 spent in front: 190.
    within(190, 300, vec![budget(500)]).await;
    // No budget header: the front's 950 ms (1 s less the margin) were spent there too.
    within(740, 200, vec![]).await;
}

/// A stamp in the future, older than the maximum skew (60 s by default) or malformed is
/// ignored and counted; an untrusting layer (the default) reads none.
#[tokio::test(start_paused = true)]
async fn a_stamp_in_the_future_too_old_or_malformed_is_ignored_and_counted() {
    let layer = EnforceDeadlineLayer::new("gateway").request_start(true);
    for stamp in [
        started(-1_000),
        started(61_000),
        ("x-request-start", "soon".to_owned()),
    ] {
        let seen = serve(&layer, vec![budget(1_000), stamp.clone()], 10)
            .await
            .2;
        assert_eq!(seen, Some(990), "{stamp:?}");
    }
    assert_eq!(layer.ignored_request_starts(), 3);
    let untrusting = EnforceDeadlineLayer::new("gateway");
    let seen = serve(&untrusting, vec![budget(1_000), started(300)], 10)
        .await
        .2;
    assert_eq!(seen, Some(990));
    assert_eq!(untrusting.ignored_request_starts(), 0);
}

/// A stamp older than the budget: the request is answered 504 on arrival, unworked.
#[tokio::test(start_paused = true)]
async fn a_request_that_spent_its_budget_in_front_is_refused_on_arrival() {
    let layer = EnforceDeadlineLayer::new("gateway").request_start(true);
    let (status, trace, seen) = serve(&layer, vec![budget(500), started(800)], 10).await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(seen, None, "the handler never ran");
    assert!(trace.ends_with("^0=0"), "{trace}");
}

/// An absolute deadline (`X-Request-Deadline`) already counts the time spent in front: a
/// trusted stamp beside it is not taken off a second time.
#[tokio::test(start_paused = true)]
async fn a_stamp_beside_an_absolute_deadline_is_not_counted_twice() {
    let accept = "deadline-budget-ms,x-request-deadline"
        .parse()
        .expect("a source set");
    let layer = EnforceDeadlineLayer::new("gateway")
        .accept(accept)
        .request_start(true);
    #[allow(clippy::disallowed_methods)] // an absolute deadline is wall time by definition
    let now_us = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_micros();
    let deadline = ("x-request-deadline", (now_us + 1_000_000).to_string());
    let seen = serve(&layer, vec![deadline, started(300)], 10)
        .await
        .2
        .expect("a budget");
    // 1 s less the guard's 50 ms assumed skew and the 10 ms reserve: 940, less what the
    // request took to build (not 640: the 300 ms in front taken twice).
    assert!((900..=940).contains(&seen), "{seen} ms");
    assert_eq!(layer.ignored_request_starts(), 0);
}

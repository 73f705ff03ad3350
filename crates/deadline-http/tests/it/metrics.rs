//! The Prometheus metrics (feature `metrics`), on paused time: what each layer records, read
//! back from the registry's text as a scrape would.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use deadline::{BUDGET_HEADER, CallPolicy};
use deadline_http::metrics::{DeadlineMetrics, Registry, encode};
use deadline_http::{EnforceDeadlineLayer, PropagateDeadlineLayer};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Layer, ServiceExt, service_fn};

const MS: Duration = Duration::from_millis(1);

/// The value of the sample `series` (name and labels, exactly as written) in `text`; panics
/// with the text when it is missing.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

fn req(path: &str, budget: Option<&str>) -> Request<()> {
    let mut builder = Request::builder().uri(path);
    if let Some(budget) = budget {
        builder = builder.header(BUDGET_HEADER, budget);
    }
    builder.body(()).unwrap()
}

/// A handler that sleeps for the ms in its path (`/sleep/N`).
fn sleeper() -> impl tower::Service<
    Request<()>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send,
> + Clone
+ Send
+ 'static {
    service_fn(|request: Request<()>| async move {
        let ms: u64 = request
            .uri()
            .path()
            .trim_start_matches("/sleep/")
            .parse()
            .unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(ms)).await;
        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
    })
}

/// Drives the response to its end, body included, so the hold is reported.
async fn finish<B: http_body::Body>(response: Response<B>) -> StatusCode
where
    B::Error: std::fmt::Debug,
{
    let status = response.status();
    response.into_body().collect().await.unwrap();
    status
}

#[tokio::test(start_paused = true)]
async fn every_outcome_phase_and_histogram_of_the_enforce_layer() {
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service("inventory");
    let service = EnforceDeadlineLayer::new("inventory")
        .slots(1)
        .record_metrics(&metrics)
        .layer(sleeper());

    // In time: 200 ms of a 1 s budget, 790 ms left when the reply goes out.
    let ok = service.clone().oneshot(req("/sleep/200", Some("1000")));
    assert_eq!(finish(ok.await.unwrap()).await, StatusCode::OK);
    // Cut while working: 500 ms of work in a 100 ms budget.
    let cut = service.clone().oneshot(req("/sleep/500", Some("100")));
    assert_eq!(
        finish(cut.await.unwrap()).await,
        StatusCode::GATEWAY_TIMEOUT
    );
    // Cut in the queue: the only slot is busy for 300 ms, the second request has 100.
    let busy = tokio::spawn(service.clone().oneshot(req("/sleep/300", None)));
    tokio::task::yield_now().await;
    let queued = service.clone().oneshot(req("/sleep/1", Some("100")));
    assert_eq!(
        finish(queued.await.unwrap()).await,
        StatusCode::GATEWAY_TIMEOUT
    );
    assert_eq!(finish(busy.await.unwrap().unwrap()).await, StatusCode::OK);
    // Rejected on arrival.
    let malformed = service.clone().oneshot(req("/sleep/1", Some("1.5")));
    assert_eq!(
        finish(malformed.await.unwrap()).await,
        StatusCode::BAD_REQUEST
    );
    let spent = service.clone().oneshot(req("/sleep/1", Some("0")));
    assert_eq!(
        finish(spent.await.unwrap()).await,
        StatusCode::GATEWAY_TIMEOUT
    );

    let text = encode(&registry).unwrap();
    let s = |rest: &str| format!("{{service=\"inventory\"{rest}}}");
    let requests = |outcome: &str| {
        value(
            &text,
            &format!(
                "deadline_requests_total{}",
                s(&format!(",outcome=\"{outcome}\""))
            ),
        )
    };
    assert_eq!(requests("ok"), 2.0);
    assert_eq!(requests("deadline"), 2.0);
    assert_eq!(requests("malformed"), 1.0);
    assert_eq!(requests("expired_on_arrival"), 1.0);
    assert_eq!(requests("hung_up"), 0.0);
    assert_eq!(requests("shed"), 0.0);
    let exceeded = |phase: &str| {
        value(
            &text,
            &format!(
                "deadline_exceeded_total{}",
                s(&format!(",phase=\"{phase}\""))
            ),
        )
    };
    assert_eq!(exceeded("work"), 1.0);
    assert_eq!(exceeded("queue"), 1.0);
    assert_eq!(exceeded("calling"), 0.0);
    // Budgets: 1000, 100, 100, and the spent one (0); the malformed one has none.
    assert_eq!(
        value(&text, &format!("deadline_budget_seconds_count{}", s(""))),
        4.0
    );
    let budget_sum = value(&text, &format!("deadline_budget_seconds_sum{}", s("")));
    assert!((budget_sum - 1.2).abs() < 1e-9, "{budget_sum}");
    // Queue waits of every request that was not refused on arrival: 0, 0, 0, 0.09 s.
    assert_eq!(
        value(
            &text,
            &format!("deadline_queue_wait_seconds_count{}", s(""))
        ),
        4.0
    );
    let queued_sum = value(&text, &format!("deadline_queue_wait_seconds_sum{}", s("")));
    assert!((queued_sum - 0.09).abs() < 1e-9, "{queued_sum}");
    // Work: 0.2 + 0.09 (cut at the cutoff) + 0.3; the one cut in the queue never worked.
    assert_eq!(
        value(&text, &format!("deadline_work_seconds_count{}", s(""))),
        3.0
    );
    let work_sum = value(&text, &format!("deadline_work_seconds_sum{}", s("")));
    assert!((work_sum - 0.59).abs() < 1e-9, "{work_sum}");
    // Headroom: 0.8 s for the first, 0.01 s (the reserve) for each cut one.
    assert_eq!(
        value(
            &text,
            r#"deadline_headroom_seconds_bucket{le="0.01",service="inventory"}"#
        ),
        2.0
    );
    assert_eq!(
        value(
            &text,
            r#"deadline_headroom_seconds_bucket{le="1.0",service="inventory"}"#
        ),
        3.0
    );
    assert_eq!(
        value(
            &text,
            &format!("deadline_worker_seconds_after_caller_left_total{}", s(""))
        ),
        0.0
    );
}

/// Two hops in memory: a gateway calling inventory (300 ms of work). The user gives up after
/// 100 ms. Without deadlines, the gateway's work runs on for another 200 ms that nobody waits
/// for, and the metric says so; with deadlines, the work stops with the user and it stays 0.
async fn chain_waste(deadlines: bool) -> String {
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry);
    let inventory = EnforceDeadlineLayer::new("inventory")
        .enforce(deadlines)
        .record_metrics(&metrics.service("inventory"))
        .layer(sleeper());
    let policy = CallPolicy::builder()
        .timeout(Duration::from_secs(5))
        .propagate(deadlines)
        .build()
        .unwrap();
    let client = PropagateDeadlineLayer::new(policy)
        .target("inventory")
        .record_metrics(&metrics.service("gateway"))
        .layer(inventory);
    let gateway = EnforceDeadlineLayer::new("gateway")
        .enforce(deadlines)
        .record_metrics(&metrics.service("gateway"))
        .layer(service_fn(move |_request: Request<()>| {
            let client = client.clone();
            async move {
                let response = client.oneshot(req("/sleep/300", None)).await;
                let status = match response {
                    Ok(response) => finish(response).await,
                    Err(_) => StatusCode::GATEWAY_TIMEOUT,
                };
                let mut reply = Response::new(Full::new(Bytes::new()));
                *reply.status_mut() = status;
                Ok::<_, Infallible>(reply)
            }
        }));

    // The user sends a budget of a second but gives up after 100 ms, hanging up.
    let user = gateway.oneshot(req("/", Some("1000")));
    let left = tokio::time::timeout(100 * MS, user).await;
    assert!(left.is_err(), "nothing answers in 100 ms");
    // Let any work still running end.
    // (A sleep, not `advance`: the clock stops at each timer on the way, so the work ends when
    // it would have.)
    tokio::time::sleep(Duration::from_secs(1)).await;
    encode(&registry).unwrap()
}

#[tokio::test(start_paused = true)]
async fn work_after_the_caller_left_is_counted_without_deadlines_and_absent_with() {
    let after = |text: &str, service: &str| {
        value(
            text,
            &format!("deadline_worker_seconds_after_caller_left_total{{service=\"{service}\"}}"),
        )
    };

    let without = chain_waste(false).await;
    // The gateway's work went on from 100 ms to ~300 ms: its call to inventory (which
    // started at 0 and ran its full 300 ms for a caller, the gateway, that never left).
    let gateway = after(&without, "gateway");
    assert!(
        (0.19..=0.21).contains(&gateway),
        "{gateway} s after the user left, in:\n{without}"
    );
    assert_eq!(after(&without, "inventory"), 0.0);
    assert_eq!(
        value(
            &without,
            "deadline_requests_total{service=\"gateway\",outcome=\"hung_up\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &without,
            "deadline_attempts_total{service=\"gateway\",target=\"inventory\",kind=\"first\"}"
        ),
        1.0
    );

    let with = chain_waste(true).await;
    assert_eq!(after(&with, "gateway"), 0.0, "{with}");
    assert_eq!(after(&with, "inventory"), 0.0, "{with}");
    // Both hops saw the hang-up and stopped: the user's at the gateway, the gateway's dropped
    // call at inventory.
    for service in ["gateway", "inventory"] {
        let series =
            format!("deadline_requests_total{{service=\"{service}\",outcome=\"hung_up\"}}");
        assert_eq!(value(&with, &series), 1.0, "{with}");
    }
    assert_eq!(
        value(
            &with,
            "deadline_call_duration_seconds_count{service=\"gateway\",target=\"inventory\"}"
        ),
        1.0
    );
}

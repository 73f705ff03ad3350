//! What `PropagateDeadline` adds to one outbound call, in process: time and heap allocations.
//!
//! The callee is a ready `service_fn` answering at once with a small `Deadline-Trace`, so the
//! figures are the layer's own work: keeping what a retry would need, the planner, the budget
//! header, the per-attempt timer, the boxed future and, inside a context, the activity, checking
//! the callee's trace (kept as text, not decoded) and recording the call span. Every variant runs
//! one call per iteration on a current-thread runtime.
//!
//! Allocations are counted with divan's [`AllocProfiler`]: a `#[global_allocator]` wrapper
//! around the system allocator that counts per thread, shown under each time. It needs no
//! `unsafe` here (the workspace forbids it, and `forbid` cannot be lifted for one bench target)
//! and no extra dependency. Subtract the `bare` row to get what the layer adds.
//!
//! Run with `cargo bench -p deadline-http --bench propagate`.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::TRACE_HEADER;
use deadline::{CallPolicy, Deadline};
use deadline_http::{DeadlineContext, PropagateDeadline};
use divan::{AllocProfiler, Bencher};
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Service, ServiceExt, service_fn};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

fn main() {
    // One request takes a microsecond or so: samples of 20 keep the timer's own cost out of the
    // times; allocation counts are per iteration whatever the sample size.
    divan::Divan::default()
        .sample_count(2_000)
        .sample_size(20)
        .config_with_args()
        .main();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn request() -> Request<Full<Bytes>> {
    Request::get("http://inventory:8080/stock/7")
        .header("x-request-id", "load-1-123456")
        .header("accept", "application/json")
        .body(Full::new(Bytes::new()))
        .expect("a request")
}

/// The callee: ready at once, answers 200 with a three-span trace (kept under the attempt
/// when the call is made inside a request's context).
fn callee() -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    service_fn(|_request: Request<Full<Bytes>>| async {
        let mut response = Response::new(Full::new(Bytes::new()));
        response.headers_mut().insert(
            TRACE_HEADER,
            HeaderValue::from_static("inventory@0-12=200,.queue@0-0,.work@0-12=ok"),
        );
        Ok(response)
    })
}

fn policy() -> CallPolicy {
    CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy")
}

/// The callee alone.
#[divan::bench]
fn bare(bencher: Bencher<'_, '_>) {
    let rt = runtime();
    let service = callee();
    bencher
        .with_inputs(request)
        .bench_local_values(|request| rt.block_on(service.clone().oneshot(request)));
}

/// Through the layer outside any request: no header, nothing recorded.
#[divan::bench]
fn without_context(bencher: Bencher<'_, '_>) {
    let rt = runtime();
    let service = PropagateDeadline::new(callee(), policy()).target("inventory");
    bencher
        .with_inputs(request)
        .bench_local_values(|request| rt.block_on(service.clone().oneshot(request)));
}

/// Through the layer inside a served request with a deadline: the budget header, the capped
/// wait, the callee's trace checked and the call's span recorded (and taken, as the enforce
/// layer does once per request).
#[divan::bench]
fn with_deadline(bencher: Bencher<'_, '_>) {
    in_context(bencher, Some(Duration::from_secs(3_600)));
}

/// Inside a served request without a deadline: no header, but the call is still recorded.
#[divan::bench]
fn in_context_without_deadline(bencher: Bencher<'_, '_>) {
    in_context(bencher, None);
}

/// As `with_deadline`, under a policy of one attempt: no retry may follow, so nothing is kept
/// for one (what a `POST` without an `Idempotency-Key` gets under any policy).
#[divan::bench]
fn with_deadline_one_attempt(bencher: Bencher<'_, '_>) {
    let policy = CallPolicy::new(Duration::from_secs(1), 1).expect("a valid policy");
    in_context_with(bencher, Some(Duration::from_secs(3_600)), policy);
}

fn in_context(bencher: Bencher<'_, '_>, budget: Option<Duration>) {
    in_context_with(bencher, budget, policy());
}

fn in_context_with(bencher: Bencher<'_, '_>, budget: Option<Duration>, policy: CallPolicy) {
    let rt = runtime();
    let service = PropagateDeadline::new(callee(), policy).target("inventory");
    let context = rt.block_on(async {
        let now = Instant::now();
        let deadline = budget.map(|b| Deadline::after_duration(now.into_std(), b));
        DeadlineContext::new(deadline, Duration::from_millis(10), now)
    });
    bencher.with_inputs(request).bench_local_values(|request| {
        let response = rt.block_on(context.clone().scope(service.clone().oneshot(request)));
        (response, context.take_recorded())
    });
}

//! What `PropagateDeadline` adds to one outbound call, in process.
//!
//! The inner service is a ready `service_fn` answering at once with a small `Deadline-Trace`,
//! so the figures are the layer's own work: cloning and rebuilding the request, the planner,
//! the budget header, the per-attempt timer, the boxed future and, inside a context, the
//! activity guard, decoding and nesting the callee's trace and recording the call span. Every
//! variant runs one call per iteration on a current-thread runtime; `bare` is the inner service
//! alone, the baseline to subtract.
//!
//! Run with `cargo bench -p deadline-http --bench propagate`.

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::TRACE_HEADER;
use deadline::{CallPolicy, Deadline};
use deadline_http::{DeadlineContext, PropagateDeadline};
use divan::Bencher;
use http::{HeaderValue, Request, Response};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tokio::time::Instant;
use tower::{Service, ServiceExt};

fn main() {
    divan::main();
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

fn request() -> Request<Full<Bytes>> {
    Request::get("http://inventory:8080/stock/7")
        .header("x-request-id", "0f5c2a9e")
        .header("accept", "application/json")
        .body(Full::new(Bytes::from_static(b"")))
        .expect("a request")
}

/// The callee: ready at once, answers 200 with a two-span trace.
fn inner() -> impl Service<
    Request<Full<Bytes>>,
    Response = Response<Full<Bytes>>,
    Error = Infallible,
    Future = impl Send + 'static,
> + Clone
+ Send
+ 'static {
    tower::service_fn(|_request: Request<Full<Bytes>>| async {
        let mut response = Response::new(Full::new(Bytes::new()));
        response.headers_mut().insert(
            TRACE_HEADER,
            HeaderValue::from_static("inventory@0-12=ok,.work@1-11"),
        );
        Ok(response)
    })
}

fn policy() -> CallPolicy {
    CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy")
}

/// The inner service alone.
#[divan::bench]
fn bare(bencher: Bencher) {
    let rt = runtime();
    let service = inner();
    bencher
        .with_inputs(request)
        .bench_local_values(|request| rt.block_on(service.clone().oneshot(request)));
}

/// Through the layer, outside any request: no deadline, nothing recorded.
#[divan::bench]
fn layer_without_context(bencher: Bencher) {
    let rt = runtime();
    let service = PropagateDeadline::new(inner(), policy());
    bencher
        .with_inputs(request)
        .bench_local_values(|request| rt.block_on(service.clone().oneshot(request)));
}

/// Through the layer inside a request's context without a deadline: the call is recorded.
#[divan::bench]
fn layer_in_context_without_deadline(bencher: Bencher) {
    in_context(bencher, None);
}

/// Through the layer inside a request's context with a deadline: budget header, capped wait,
/// the call recorded.
#[divan::bench]
fn layer_in_context_with_deadline(bencher: Bencher) {
    in_context(bencher, Some(Duration::from_secs(3_600)));
}

fn in_context(bencher: Bencher, budget: Option<Duration>) {
    let rt = runtime();
    let service = PropagateDeadline::new(inner(), policy());
    let context = rt.block_on(async {
        let now = Instant::now();
        let deadline = budget.map(|b| Deadline::after_duration(now.into_std(), b));
        DeadlineContext::new(deadline, Duration::from_millis(10), now)
    });
    bencher.with_inputs(request).bench_local_values(|request| {
        let response = rt.block_on(context.clone().scope(service.clone().oneshot(request)));
        // What the enforce layer does once per request; keeps the span list from growing.
        let spans = context.take_spans();
        (response, spans)
    });
}

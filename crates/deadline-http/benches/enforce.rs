//! What `EnforceDeadlineLayer` adds to one served request, in process: time and heap
//! allocations.
//!
//! Every variant serves one request per iteration on a current-thread runtime and drops the
//! response (which reports the hold), so a row is one whole request: the handler's own work,
//! the layer's, and nothing else. The handler answers like a real one, with a `content-type`
//! header, so the trace header joins a header map that already exists (as behind hyper and
//! axum); requests carry `host` and `x-request-id`, as in the `deadline service`, with static
//! values that clone as cheaply as hyper's.
//!
//! Allocations are counted with divan's [`AllocProfiler`]: a `#[global_allocator]` wrapper
//! around the system allocator that counts per thread, shown under each time. It needs no
//! `unsafe` here (the workspace forbids it, and `forbid` cannot be lifted for one bench target)
//! and no extra dependency. Subtract the `bare` row to get what the layer adds.
//!
//! Run with `cargo bench -p deadline-http --bench enforce`.

use std::convert::Infallible;
use std::future::{Ready, ready};

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline_http::EnforceDeadlineLayer;
use deadline_http::enforce::{QueueOrder, TraceExposure};
use divan::{AllocProfiler, Bencher};
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt, service_fn};

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

type Reply = Result<Response<Full<Bytes>>, Infallible>;

const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

/// A handler that answers at once, with a body and a content type, as a real one would.
fn handler()
-> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future = Ready<Reply>>
+ Clone
+ Send
+ 'static {
    service_fn(|_request: Request<()>| {
        let mut response = Response::new(Full::new(Bytes::from_static(b"ok")));
        response.headers_mut().insert(CONTENT_TYPE, TEXT);
        ready(Ok(response))
    })
}

/// A request as hyper hands it over. hyper's URI and header values are slices of its read
/// buffer, so cloning one costs a reference count, never an allocation; static values
/// behave the same here, where values parsed from `&str` would not (their first clone
/// allocates).
fn request(budget: Option<&'static str>) -> Request<()> {
    let mut request = Request::new(());
    *request.uri_mut() = Uri::from_static("/items/42");
    let headers = request.headers_mut();
    headers.insert(HOST, HeaderValue::from_static("inventory"));
    headers.insert("x-request-id", HeaderValue::from_static("load-1-123456"));
    if let Some(budget) = budget {
        headers.insert(BUDGET_HEADER, HeaderValue::from_static(budget));
    }
    request
}

fn run<S, B>(bencher: Bencher<'_, '_>, service: S, budget: Option<&'static str>)
where
    S: Service<Request<()>, Response = Response<B>> + Clone,
    S::Error: std::fmt::Debug,
{
    let runtime = runtime();
    bencher
        .with_inputs(|| request(budget))
        .bench_local_values(|request| {
            runtime.block_on(async {
                let response = service.clone().oneshot(request).await.expect("served");
                drop(response);
            })
        });
}

/// The handler alone (the request still carries a budget, which it ignores).
#[divan::bench]
fn bare(bencher: Bencher<'_, '_>) {
    run(bencher, handler(), Some("1950"));
}

/// Behind the layer with its defaults, no budget header: no deadline, no timer, no context, no
/// trace (the layer allocates nothing beyond bare hyper's).
#[divan::bench]
fn no_header(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory").layer(handler());
    run(bencher, service, None);
}

/// Behind the layer with its defaults and `Deadline-Budget-Ms: 1950`: a deadline, a timer, the
/// trace (no `Server-Timing`).
#[divan::bench]
fn with_header(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory").layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header`, with the `Server-Timing` header turned on: the difference is what it
/// costs.
#[divan::bench]
fn with_header_server_timing(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .server_timing(true)
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header`, the trace shown to nobody (`TraceExposure::Off`): what a service that
/// uses neither header pays.
#[divan::bench]
fn with_header_quiet(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .trace_exposure(TraceExposure::Off)
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `no_header`, with a context for a request without a budget
/// (`context_without_budget(true)`), still no trace: the context's cost.
#[divan::bench]
fn no_header_context(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .context_without_budget(true)
        .layer(handler());
    run(bencher, service, None);
}

/// As `no_header`, with the defaults before they changed (what `deadline service` does): the
/// trace and `Server-Timing` on every answer and a context for every request.
#[divan::bench]
fn no_header_all(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .trace_exposure(TraceExposure::Always)
        .server_timing(true)
        .context_without_budget(true)
        .layer(handler());
    run(bencher, service, None);
}

/// As `with_header`, with worker slots (always one free here).
#[divan::bench]
fn with_header_and_slots(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .slots(8)
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header_and_slots`, served earliest deadline first (a slot is always free, so the
/// wait list is never touched: this must cost what FIFO costs).
#[divan::bench]
fn with_header_and_slots_edf(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .slots(8)
        .queue(QueueOrder::Edf)
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header_and_slots_edf`, with predictive admission on (a free slot is never shed;
/// the work time is read from the clock when the slot is given back).
#[divan::bench]
fn with_header_and_slots_edf_admission(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .slots(8)
        .queue(QueueOrder::Edf)
        .admission(std::time::Duration::from_millis(100))
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header`, with an `on_hold` hook that reads the report's id and path (as the
/// `deadline service` log does): the report's strings are made only for a hook.
#[divan::bench]
fn with_header_and_hook(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .on_hold(|hold| {
            divan::black_box((hold.request_id.as_deref(), hold.path.len()));
        })
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// As `with_header`, recording every request into a Prometheus registry.
#[divan::bench]
fn with_header_and_metrics(bencher: Bencher<'_, '_>) {
    let mut registry = deadline_http::metrics::Registry::default();
    let metrics = deadline_http::metrics::DeadlineMetrics::register(&mut registry);
    let service = EnforceDeadlineLayer::new("inventory")
        .record_metrics(&metrics.service("inventory"))
        .layer(handler());
    run(bencher, service, Some("1950"));
}

/// A malformed budget: answered 400 by the layer, the handler never runs.
#[divan::bench]
fn rejects_malformed(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory").layer(handler());
    run(bencher, service, Some("1.5"));
}

/// The baseline (`enforce(false)`): the work runs on a spawned task so a hang-up cannot stop it.
#[divan::bench]
fn baseline(bencher: Bencher<'_, '_>) {
    let service = EnforceDeadlineLayer::new("inventory")
        .enforce(false)
        .layer(handler());
    run(bencher, service, Some("1950"));
}

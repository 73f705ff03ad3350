//! Heap allocations and time per request of each layer, in process.
//!
//! Every variant serves one request per iteration on a current-thread runtime and drops the
//! response (which reports the hold), so divan's `alloc` rows are the allocations of one whole
//! request: the service's own, the layer's, and those of building nothing else. Subtract the
//! `bare` row of the same group to get what the layer adds.
//!
//! The counting allocator is divan's [`AllocProfiler`]: a `#[global_allocator]` wrapper around
//! the system allocator that counts per thread. It needs no `unsafe` here (the workspace forbids
//! it, and `forbid` cannot be lifted for one bench target) and no extra dependency.
//!
//! The enforce group's inner service answers like a real handler, with a `content-type`
//! header, so the trace header is added to a header map that already exists (as it is behind
//! hyper and axum). Its requests carry `host` and `x-request-id`, as in the `deadline service`,
//! with static values that clone as cheaply as hyper's (see `enforce::request`).
//!
//! Run with `cargo bench -p deadline-http --bench alloc`.

use std::convert::Infallible;
use std::future::{Ready, ready};
use std::time::Duration;

use bytes::Bytes;
use deadline::trace::TRACE_HEADER;
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::{DeadlineContext, EnforceDeadlineLayer, PropagateDeadline};
use divan::{AllocProfiler, Bencher};
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderValue, Request, Response, Uri};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tokio::time::Instant;
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

/// What a served request's handler and the layer around it cost.
mod enforce {
    use super::*;

    type Reply = Result<Response<Full<Bytes>>, Infallible>;

    const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

    /// A handler that answers at once, with a body and a content type, as a real one would.
    fn handler() -> impl Service<
        Request<()>,
        Response = Response<Full<Bytes>>,
        Error = Infallible,
        Future = Ready<Reply>,
    > + Clone
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

    /// Behind the layer, no budget header: no deadline, no timer.
    #[divan::bench]
    fn no_header(bencher: Bencher<'_, '_>) {
        let service = EnforceDeadlineLayer::new("inventory").layer(handler());
        run(bencher, service, None);
    }

    /// Behind the layer with `Deadline-Budget-Ms: 1950`: a deadline, a timer, the trace.
    #[divan::bench]
    fn with_header(bencher: Bencher<'_, '_>) {
        let service = EnforceDeadlineLayer::new("inventory").layer(handler());
        run(bencher, service, Some("1950"));
    }

    /// As `with_header`, with worker slots (always one free here).
    #[divan::bench]
    fn with_header_and_slots(bencher: Bencher<'_, '_>) {
        let service = EnforceDeadlineLayer::new("inventory")
            .slots(8)
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
}

/// What one outbound call costs through the propagate layer.
mod propagate {
    use super::*;

    fn request() -> Request<Full<Bytes>> {
        Request::get("http://inventory:8080/stock/7")
            .header("x-request-id", "load-1-123456")
            .header("accept", "application/json")
            .body(Full::new(Bytes::new()))
            .expect("a request")
    }

    /// The callee: ready at once, answers 200 with a two-span trace (decoded and nested under
    /// the attempt when the call is made inside a request's context).
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
    /// wait, the callee's trace decoded and the call's span recorded (and taken, as the enforce
    /// layer does once per request).
    #[divan::bench]
    fn with_deadline(bencher: Bencher<'_, '_>) {
        let rt = runtime();
        let service = PropagateDeadline::new(callee(), policy()).target("inventory");
        let context = rt.block_on(async {
            let now = Instant::now();
            let deadline = Deadline::after_duration(now.into_std(), Duration::from_secs(3_600));
            DeadlineContext::new(Some(deadline), Duration::from_millis(10), now)
        });
        bencher.with_inputs(request).bench_local_values(|request| {
            let response = rt.block_on(context.clone().scope(service.clone().oneshot(request)));
            (response, context.take_spans())
        });
    }
}

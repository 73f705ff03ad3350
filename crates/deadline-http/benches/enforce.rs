//! Per-request cost of the enforce layer, in-process: no sockets, a current-thread runtime, and
//! an inner service that answers at once, so the difference between the bare service and the
//! layered one is what the layer adds (reading the budget, the context, the trace header, the
//! hold report). Run with `cargo bench -p deadline-http --bench enforce`.

use std::convert::Infallible;
use std::future::{Ready, ready};

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline_http::EnforceDeadlineLayer;
use divan::Bencher;
use http::{Request, Response};
use http_body_util::Full;
use tokio::runtime::Runtime;
use tower::{Layer, Service, ServiceExt, service_fn};

fn main() {
    // Many small samples: one request takes a few microseconds, so a sample of 20 keeps the
    // timer's own cost out of the figures. Command-line options still override these.
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

fn inner()
-> impl Service<Request<()>, Response = Response<Full<Bytes>>, Error = Infallible, Future = Ready<Reply>>
+ Clone
+ Send
+ 'static {
    service_fn(|_request: Request<()>| {
        ready(Ok(Response::new(Full::new(Bytes::from_static(b"ok")))))
    })
}

fn request(budget: Option<&'static str>) -> Request<()> {
    let mut request = Request::builder()
        .uri("/items/42")
        .header("host", "inventory")
        .header("x-request-id", "r-000123");
    if let Some(budget) = budget {
        request = request.header(BUDGET_HEADER, budget);
    }
    request.body(()).expect("a request")
}

/// Calls a clone of `service` with a fresh request per iteration and drops the response (which
/// reports the hold), inside the runtime.
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

#[divan::bench]
fn bare_service(bencher: Bencher<'_, '_>) {
    run(bencher, inner(), Some("1950"));
}

#[divan::bench]
fn layer_no_budget(bencher: Bencher<'_, '_>) {
    run(
        bencher,
        EnforceDeadlineLayer::new("inventory").layer(inner()),
        None,
    );
}

#[divan::bench]
fn layer_with_budget(bencher: Bencher<'_, '_>) {
    run(
        bencher,
        EnforceDeadlineLayer::new("inventory").layer(inner()),
        Some("1950"),
    );
}

#[divan::bench]
fn layer_with_budget_and_slots(bencher: Bencher<'_, '_>) {
    let layer = EnforceDeadlineLayer::new("inventory").slots(8);
    run(bencher, layer.layer(inner()), Some("1950"));
}

#[divan::bench]
fn layer_rejects_malformed(bencher: Bencher<'_, '_>) {
    run(
        bencher,
        EnforceDeadlineLayer::new("inventory").layer(inner()),
        Some("1.5"),
    );
}

#[divan::bench]
fn layer_baseline(bencher: Bencher<'_, '_>) {
    let layer = EnforceDeadlineLayer::new("inventory").enforce(false);
    run(bencher, layer.layer(inner()), Some("1950"));
}

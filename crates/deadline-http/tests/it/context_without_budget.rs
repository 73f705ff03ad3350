//! `context_without_budget(false)` (the default): a request without a budget, whose answer shows
//! no trace, runs without a context, as if the layer were not in front of the handler; every
//! other request keeps its context, and every request's hold is reported.
//! `context_without_budget(true)` gives every request one.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadline_http::enforce::TraceExposure;
use deadline_http::{DeadlineContext, EnforceDeadlineLayer, Hold, HoldOutcome};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::{Layer, ServiceExt, service_fn};

/// What the handler saw of its context: `none`, `no deadline` or `deadline`.
async fn seen(layer: &EnforceDeadlineLayer, headers: &[(&'static str, &'static str)]) -> String {
    let handler = service_fn(|_request: Request<String>| async {
        let seen = match DeadlineContext::current() {
            None => "none",
            Some(ctx) if ctx.deadline().is_none() => "no deadline",
            Some(_) => "deadline",
        };
        // A check without a context passes, as it does without a deadline.
        deadline_http::check().expect("no deadline to miss");
        Ok::<_, Infallible>(Response::new(String::from(seen)))
    });
    let response = layer
        .clone()
        .layer(handler)
        .oneshot(crate::get_with("/", headers))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let trace = response.headers().contains_key("deadline-trace");
    let body = text(response).await;
    format!("{body}{}", if trace { " +trace" } else { "" })
}

/// The body of `response`, whole.
async fn text<B: http_body::Body>(response: Response<B>) -> String
where
    B::Error: std::fmt::Debug,
{
    let bytes = response
        .into_body()
        .collect()
        .await
        .expect("a whole body")
        .to_bytes();
    String::from_utf8(bytes.to_vec()).expect("text")
}

const BUDGET: (&str, &str) = ("deadline-budget-ms", "1000");

/// A layer with `exposure` that keeps no context without a budget, and the holds it reported.
fn lean(exposure: TraceExposure) -> (EnforceDeadlineLayer, Arc<Mutex<Vec<Hold>>>) {
    let holds: Arc<Mutex<Vec<Hold>>> = Arc::default();
    let sink = Arc::clone(&holds);
    let layer = EnforceDeadlineLayer::new("edge")
        .trace_exposure(exposure)
        .context_without_budget(false)
        .on_hold(move |hold| sink.lock().expect("not poisoned").push(hold.clone()));
    (layer, holds)
}

#[tokio::test]
async fn without_a_budget_or_a_shown_trace_the_handler_runs_without_a_context() {
    for exposure in [TraceExposure::Budgeted, TraceExposure::Off] {
        let (layer, holds) = lean(exposure);
        assert_eq!(seen(&layer, &[]).await, "none");
        let holds = holds.lock().expect("not poisoned");
        assert_eq!(holds.len(), 1, "the hold is still reported");
        assert_eq!(holds[0].outcome, HoldOutcome::Ok);
        assert_eq!(holds[0].status, Some(StatusCode::OK));
        assert_eq!(holds[0].budget_ms, None);
        assert!(holds[0].work_end.is_some());
        assert_eq!(layer.metrics().snapshot().ok, 1, "and counted");
    }
}

/// "As if the layer were not there" holds for a context set outside it too: a lean layer
/// behind another one that keeps a context (`context_without_budget(true)`) leaves the outer
/// context in place for the handler instead of hiding it.
#[tokio::test]
async fn without_its_own_context_the_layer_leaves_an_outer_one_in_place() {
    let (lean, holds) = lean(TraceExposure::Off);
    let handler = service_fn(|_request: Request<String>| async {
        let seen = match DeadlineContext::current() {
            None => "none",
            Some(ctx) if ctx.deadline().is_none() => "no deadline",
            Some(_) => "deadline",
        };
        Ok::<_, Infallible>(Response::new(String::from(seen)))
    });
    let outer = EnforceDeadlineLayer::new("gateway")
        .trace_exposure(TraceExposure::Off)
        .context_without_budget(true);
    let service = outer.layer(lean.layer(handler));
    let response = service
        .oneshot(crate::get_with("/", &[]))
        .await
        .expect("infallible");
    assert_eq!(text(response).await, "no deadline");
    assert_eq!(holds.lock().expect("not poisoned").len(), 1);
}

#[tokio::test]
async fn a_budget_or_a_shown_trace_keeps_the_context() {
    let (budgeted, _) = lean(TraceExposure::Budgeted);
    assert_eq!(seen(&budgeted, &[BUDGET]).await, "deadline +trace");
    let (off, _) = lean(TraceExposure::Off);
    assert_eq!(seen(&off, &[BUDGET]).await, "deadline");
    // Every answer shows the trace, which holds the handler's calls: the context stays.
    let (always, _) = lean(TraceExposure::Always);
    assert_eq!(seen(&always, &[]).await, "no deadline +trace");
    let extensions = lean(TraceExposure::Off).0.request_extensions(true);
    assert_eq!(seen(&extensions, &[]).await, "no deadline");
}

#[tokio::test]
async fn a_grpc_timeout_is_a_budget_and_keeps_the_context() {
    let (off, _) = lean(TraceExposure::Off);
    let grpc = [("content-type", "application/grpc"), ("grpc-timeout", "2S")];
    assert_eq!(seen(&off, &grpc).await, "deadline");
    // A gRPC request without its timeout has no budget.
    assert_eq!(seen(&off, &grpc[..1]).await, "none");
}

#[tokio::test]
async fn a_trusted_caller_is_shown_the_trace_and_keeps_the_context() {
    let trusted = TraceExposure::trusted(|headers, _| headers.contains_key("x-internal-caller"));
    let (layer, _) = lean(trusted);
    assert_eq!(
        seen(&layer, &[("x-internal-caller", "1")]).await,
        "no deadline +trace"
    );
    assert_eq!(seen(&layer, &[]).await, "none");
}

/// The server span of a request is the parent of its outbound calls' spans: it lives in the
/// context, which a traced request keeps.
#[cfg(feature = "otel")]
#[tokio::test]
async fn an_opentelemetry_server_span_keeps_the_context() {
    use deadline_http::otel::Tracing;
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};

    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let (traced, _) = lean(TraceExposure::Off);
    let traced = traced.tracing(Tracing::provider(&provider));
    assert_eq!(seen(&traced, &[]).await, "no deadline");
    let (untraced, _) = lean(TraceExposure::Off);
    let untraced = untraced.tracing(Tracing::off());
    assert_eq!(seen(&untraced, &[]).await, "none");
}

/// The layer's own 503, for a request refused because every slot is busy and the queue is
/// full, is made without a context too.
#[tokio::test(start_paused = true)]
async fn a_request_without_a_context_is_refused_when_the_queue_is_full() {
    let (layer, holds) = lean(TraceExposure::Off);
    let service =
        layer
            .slots(1)
            .max_queue(0)
            .layer(service_fn(|_request: Request<String>| async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                Ok::<_, Infallible>(Response::new(String::from("done")))
            }));
    let call = || {
        let request = Request::get("/").body(String::new()).expect("a request");
        service.clone().oneshot(request)
    };
    let (first, second) = tokio::join!(call(), call());
    let first = first.expect("infallible");
    let second = second.expect("infallible");
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(!second.headers().contains_key("deadline-trace"));
    // The holds are reported as the answers are written.
    assert_eq!(text(first).await, "done");
    text(second).await;
    let outcomes: Vec<HoldOutcome> = holds
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|hold| hold.outcome)
        .collect();
    assert_eq!(outcomes, [HoldOutcome::Ok, HoldOutcome::Shed]);
}

/// The defaults (each request pays only for what its caller can use): no context, no trace for a request without a budget; a context,
/// a deadline and the trace for one with a budget. `context_without_budget(true)` gives the
/// first a context again.
#[tokio::test]
async fn by_default_a_request_without_a_budget_has_no_context() {
    let layer = EnforceDeadlineLayer::new("edge");
    assert_eq!(seen(&layer, &[]).await, "none");
    assert_eq!(seen(&layer, &[BUDGET]).await, "deadline +trace");
    for exposure in [TraceExposure::Budgeted, TraceExposure::Off] {
        let layer = EnforceDeadlineLayer::new("edge")
            .trace_exposure(exposure)
            .context_without_budget(true);
        assert_eq!(seen(&layer, &[]).await, "no deadline");
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_context_a_request_still_waits_for_a_worker_slot() {
    let (layer, holds) = lean(TraceExposure::Off);
    let service = layer
        .slots(1)
        .layer(service_fn(|_request: Request<String>| async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, Infallible>(Response::new(String::from(
                if DeadlineContext::current().is_none() {
                    "none"
                } else {
                    "context"
                },
            )))
        }));
    let call = || {
        let request = Request::get("/").body(String::new()).expect("a request");
        service.clone().oneshot(request)
    };
    let (first, second) = tokio::join!(call(), call());
    for response in [first, second] {
        assert_eq!(text(response.expect("infallible")).await, "none");
    }
    let mut queued: Vec<Duration> = holds
        .lock()
        .expect("not poisoned")
        .iter()
        .map(|hold| hold.queued)
        .collect();
    queued.sort();
    assert_eq!(queued, [Duration::ZERO, Duration::from_millis(10)]);
}

/// The axum extractors see no context either: `Option<DeadlineContext>` is `None`, and the
/// required extractor rejects the request with its 500, as without the layer.
#[cfg(feature = "axum")]
#[tokio::test]
async fn the_axum_extractors_find_no_context() {
    use axum::Router;
    use axum::routing::get;

    async fn lenient(ctx: Option<DeadlineContext>) -> &'static str {
        if ctx.is_some() { "context" } else { "none" }
    }
    async fn strict(_ctx: DeadlineContext) -> &'static str {
        "context"
    }
    let app: Router = Router::new()
        .route("/lenient", get(lenient))
        .route("/strict", get(strict))
        .layer(lean(TraceExposure::Budgeted).0);
    let get = |path: &'static str, budget: bool| {
        let mut request = Request::get(path);
        if budget {
            request = request.header(BUDGET.0, BUDGET.1);
        }
        let request = request.body(axum::body::Body::empty()).expect("a request");
        app.clone().oneshot(request)
    };
    let answer = |response: Response<_>| async move {
        let status = response.status();
        (status, text(response).await)
    };
    let lenient_none = answer(get("/lenient", false).await.expect("infallible")).await;
    assert_eq!(lenient_none, (StatusCode::OK, "none".to_owned()));
    let strict_none = answer(get("/strict", false).await.expect("infallible")).await;
    assert_eq!(strict_none.0, StatusCode::INTERNAL_SERVER_ERROR);
    let strict_budget = answer(get("/strict", true).await.expect("infallible")).await;
    assert_eq!(strict_budget, (StatusCode::OK, "context".to_owned()));
}

//! Trace exposure at the enforce layer: which answers carry this hop's `Deadline-Trace` (and,
//! where it is on, `Server-Timing`, which the exposure does not govern), for the handler's
//! answers and the layer's own (400, 504).

use std::convert::Infallible;

use deadline_http::EnforceDeadlineLayer;
use deadline_http::enforce::TraceExposure;
use http::{HeaderValue, Request, Response, StatusCode};
use tower::{Layer, ServiceExt, service_fn};

/// What a request with `headers` to `path` got: its status, and whether it carried a
/// `Deadline-Trace` and a `Server-Timing`. `/relay` answers with a `Deadline-Trace` of its own,
/// as a handler passing on a downstream's would.
async fn answer(
    layer: &EnforceDeadlineLayer,
    path: &str,
    headers: &[(&'static str, &'static str)],
) -> (StatusCode, bool, bool) {
    let handler = service_fn(|request: Request<String>| async move {
        let mut response = Response::new(String::from("ok"));
        if request.uri().path() == "/relay" {
            response.headers_mut().insert(
                "deadline-trace",
                HeaderValue::from_static("inventory@0-5=200"),
            );
        }
        Ok::<_, Infallible>(response)
    });
    let response = layer
        .clone()
        .layer(handler)
        .oneshot(crate::get_with(path, headers))
        .await
        .expect("infallible");
    let has = |name: &str| response.headers().contains_key(name);
    (
        response.status(),
        has("deadline-trace"),
        has("server-timing"),
    )
}

const BUDGET: (&str, &str) = ("deadline-budget-ms", "1000");
const SPENT: (&str, &str) = ("deadline-budget-ms", "0");
const MALFORMED: (&str, &str) = ("deadline-budget-ms", "junk");
const INTERNAL: (&str, &str) = ("x-internal-caller", "1");

/// The defaults (the trace where the caller can use it) are `Budgeted`: the trace on answers to requests that carried a
/// budget, in any dialect and whatever became of it (spent, malformed), never on others, a
/// relayed one removed; no `Server-Timing`.
#[tokio::test]
async fn by_default_and_budgeted_the_trace_goes_to_budgeted_callers_and_server_timing_to_nobody() {
    let default = EnforceDeadlineLayer::new("edge");
    let budgeted = EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::Budgeted);
    for layer in [default, budgeted] {
        for (path, headers, expected) in [
            ("/", &[][..], (StatusCode::OK, false, false)),
            ("/relay", &[], (StatusCode::OK, false, false)),
            ("/", &[BUDGET], (StatusCode::OK, true, false)),
            ("/", &[SPENT], (StatusCode::GATEWAY_TIMEOUT, true, false)),
            ("/", &[MALFORMED], (StatusCode::BAD_REQUEST, true, false)),
        ] {
            assert_eq!(
                answer(&layer, path, headers).await,
                expected,
                "{path} {headers:?}"
            );
        }
        // Another dialect the layer reads counts as a budget too.
        let grpc = layer.grpc_timeout(true);
        assert_eq!(
            answer(&grpc, "/", &[("grpc-timeout", "1S")]).await,
            (StatusCode::OK, true, false)
        );
    }
}

#[tokio::test]
async fn always_puts_the_trace_on_every_answer() {
    let layer = EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::Always);
    assert_eq!(
        answer(&layer, "/", &[]).await,
        (StatusCode::OK, true, false)
    );
    assert_eq!(
        answer(&layer, "/", &[SPENT]).await,
        (StatusCode::GATEWAY_TIMEOUT, true, false)
    );
    let both = layer.server_timing(true);
    assert_eq!(answer(&both, "/", &[]).await, (StatusCode::OK, true, true));
}

#[tokio::test]
async fn off_sends_no_trace_and_removes_a_relayed_trace() {
    let layer = EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::Off);
    for headers in [&[][..], &[BUDGET], &[INTERNAL]] {
        assert_eq!(
            answer(&layer, "/", headers).await,
            (StatusCode::OK, false, false)
        );
    }
    assert_eq!(
        answer(&layer, "/", &[SPENT]).await,
        (StatusCode::GATEWAY_TIMEOUT, false, false)
    );
    assert_eq!(
        answer(&layer, "/", &[MALFORMED]).await,
        (StatusCode::BAD_REQUEST, false, false)
    );
    assert_eq!(
        answer(&layer, "/relay", &[BUDGET]).await,
        (StatusCode::OK, false, false)
    );
}

#[tokio::test]
async fn trusted_asks_the_applications_predicate() {
    let layer =
        EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::trusted(|headers, _| {
            headers.contains_key("x-internal-caller")
        }));
    assert_eq!(
        answer(&layer, "/", &[BUDGET]).await,
        (StatusCode::OK, false, false)
    );
    assert_eq!(
        answer(&layer, "/", &[INTERNAL]).await,
        (StatusCode::OK, true, false)
    );
    assert_eq!(
        answer(&layer, "/", &[INTERNAL, SPENT]).await,
        (StatusCode::GATEWAY_TIMEOUT, true, false)
    );
}

/// `Server-Timing` is the application's own switch: on, it goes on every answer (a browser
/// sends no budget), whoever the trace is shown to, the layer's own answers included.
#[tokio::test]
async fn server_timing_on_goes_on_every_answer_whatever_the_exposure() {
    for exposure in [
        TraceExposure::Budgeted,
        TraceExposure::Off,
        TraceExposure::Always,
    ] {
        let shown = !matches!(exposure, TraceExposure::Off);
        let always = matches!(exposure, TraceExposure::Always);
        let layer = EnforceDeadlineLayer::new("edge")
            .server_timing(true)
            .trace_exposure(exposure);
        assert_eq!(
            answer(&layer, "/", &[]).await,
            (StatusCode::OK, always, true)
        );
        assert_eq!(
            answer(&layer, "/", &[BUDGET]).await,
            (StatusCode::OK, shown, true)
        );
        assert_eq!(
            answer(&layer, "/", &[SPENT]).await,
            (StatusCode::GATEWAY_TIMEOUT, shown, true)
        );
        assert_eq!(
            answer(&layer, "/", &[MALFORMED]).await,
            (StatusCode::BAD_REQUEST, shown, true)
        );
    }
}

/// What the handler's one call to a downstream left in this hop's trace, as the handler reads it
/// (the callee answers with a `Deadline-Trace` naming `inventory`), for a request with
/// `headers` through `layer`.
async fn recorded_call(
    layer: &EnforceDeadlineLayer,
    headers: &[(&'static str, &'static str)],
) -> String {
    use deadline::CallPolicy;
    use deadline::trace::Trace;
    use deadline_http::{DeadlineContext, PropagateDeadline};

    let downstream = service_fn(|_: Request<String>| async {
        let mut response = Response::new(String::new());
        response.headers_mut().insert(
            "deadline-trace",
            HeaderValue::from_static("inventory@0-5=200,.work@1-4"),
        );
        Ok::<_, Infallible>(response)
    });
    let policy = CallPolicy::new(std::time::Duration::from_millis(500), 1).expect("a policy");
    let client = PropagateDeadline::new(downstream, policy).target("inv");
    let handler = service_fn(move |_: Request<String>| {
        let client = client.clone();
        async move {
            let request = Request::get("http://inv/")
                .body(String::new())
                .expect("a request");
            client
                .oneshot(request)
                .await
                .expect("the downstream answers");
            let context = DeadlineContext::current().expect("the request has a context");
            let (spans, dropped) = context.take_spans();
            let mut trace = Trace::new();
            trace.spans = spans;
            trace.dropped = dropped;
            Ok::<_, Infallible>(Response::new(trace.encode()))
        }
    });
    let response = layer
        .clone()
        .layer(handler)
        .oneshot(crate::get_with("/", headers))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    let body = http_body_util::BodyExt::collect(response.into_body())
        .await
        .expect("the body")
        .to_bytes();
    String::from_utf8(body.to_vec()).expect("a trace is text")
}

/// A downstream's spans are kept in this hop's trace only for a request whose answer shows the
/// trace: for any other the call and its attempt are recorded without the callee's spans.
#[tokio::test(start_paused = true)]
async fn a_downstreams_spans_are_kept_only_where_the_trace_is_exposed() {
    let kept = "call:inv@0-0=200,.attempt@0-0=200,..inventory@0-0=200,...work@0-0";
    let left_out = "call:inv@0-0=200,.attempt@0-0=200";
    let trusted =
        EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::trusted(|headers, _| {
            headers.contains_key("x-internal-caller")
        }));
    assert_eq!(recorded_call(&trusted, &[BUDGET, INTERNAL]).await, kept);
    assert_eq!(recorded_call(&trusted, &[BUDGET]).await, left_out);
    let off = EnforceDeadlineLayer::new("edge").trace_exposure(TraceExposure::Off);
    assert_eq!(recorded_call(&off, &[BUDGET, INTERNAL]).await, left_out);
    // Budgeted (the default) with a context for every request: a budget-less request's answer
    // shows no trace, so it keeps no downstream spans either.
    let budgeted = EnforceDeadlineLayer::new("edge").context_without_budget(true);
    assert_eq!(recorded_call(&budgeted, &[BUDGET]).await, kept);
    assert_eq!(recorded_call(&budgeted, &[]).await, left_out);
}

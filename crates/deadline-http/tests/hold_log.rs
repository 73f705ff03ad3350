//! The hold log (`tracing` events with target `deadline::hold`) as a user's subscriber sees it.
//!
//! This is a test binary of its own, with one test and a global subscriber: `tracing` caches
//! whether a callsite is wanted in process-wide state, and a scoped subscriber set while other
//! tests of the same process hit the log's callsite for the first time can find it cached as
//! unwanted. A global subscriber set before any request is sent has no such race.

use std::convert::Infallible;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline_http::EnforceDeadlineLayer;
use deadline_http::enforce::REQUEST_ID_HEADER;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use tower::{Layer, ServiceExt, service_fn};

/// One `deadline::hold` event: the fields a log line of it would show.
#[derive(Debug, Default, Clone, PartialEq)]
struct Line {
    service: String,
    request_id: String,
    method: String,
    path: String,
    outcome: String,
    status: Option<u64>,
    budget_ms: Option<u64>,
}

impl tracing::field::Visit for Line {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "request_id" => self.request_id = value.to_owned(),
            "path" => self.path = value.to_owned(),
            "outcome" => self.outcome = value.to_owned(),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        match field.name() {
            "status" => self.status = Some(value),
            "budget_ms" => self.budget_ms = Some(value),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        match field.name() {
            "service" => self.service = format!("{value:?}"),
            "method" => self.method = format!("{value:?}"),
            _ => {}
        }
    }
}

/// A subscriber that keeps the `deadline::hold` events and refuses everything else, as a
/// filter on that target would. With `hints` off it also refuses `tracing::enabled!` checks
/// (not events), as a filter on event fields does; it is asked every time, so the switch holds.
#[derive(Default)]
struct HoldLines {
    lines: Mutex<Vec<Line>>,
    refuse_hints: AtomicBool,
}

impl tracing::Subscriber for HoldLines {
    fn register_callsite(
        &self,
        _metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        tracing::subscriber::Interest::sometimes()
    }
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        metadata.target() == "deadline::hold"
            && (metadata.is_event() || !self.refuse_hints.load(Ordering::Relaxed))
    }
    fn new_span(&self, _span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _span: &tracing::span::Id, _values: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _span: &tracing::span::Id, _follows: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        self.lines.lock().unwrap().push(line);
    }
    fn enter(&self, _span: &tracing::span::Id) {}
    fn exit(&self, _span: &tracing::span::Id) {}
}

fn lines() -> &'static Arc<HoldLines> {
    static LINES: OnceLock<Arc<HoldLines>> = OnceLock::new();
    LINES.get_or_init(|| {
        let lines = Arc::new(HoldLines::default());
        tracing::subscriber::set_global_default(Arc::clone(&lines))
            .expect("no other global subscriber in this test binary");
        lines
    })
}

/// Every request gets one hold line, with no hook and no span asked for: the outcome, the
/// status, the budget, the path and the caller's request id as the layer saw them; and a line
/// still comes when the subscriber refuses the layer's `enabled!` check.
#[tokio::test(start_paused = true)]
async fn every_request_gets_one_hold_line_with_what_happened() {
    let lines = lines();
    let service = EnforceDeadlineLayer::new("inventory").layer(service_fn(
        |request: Request<()>| async move {
            if request.uri().path() == "/slow" {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"done"))))
        },
    ));
    let send = |path: &str, budget: &'static str, id: &'static str| {
        let mut request = Request::get(path).body(()).unwrap();
        let headers = request.headers_mut();
        headers.insert(BUDGET_HEADER, HeaderValue::from_static(budget));
        headers.insert(REQUEST_ID_HEADER, HeaderValue::from_static(id));
        service.clone().oneshot(request)
    };

    let fast = send("/stock/7", "800", "req-fast").await.unwrap();
    assert_eq!(fast.status(), StatusCode::OK);
    fast.into_body().collect().await.unwrap();
    let slow = send("/slow", "100", "req-slow").await.unwrap();
    assert_eq!(slow.status(), StatusCode::GATEWAY_TIMEOUT);
    slow.into_body().collect().await.unwrap();

    let seen = std::mem::take(&mut *lines.lines.lock().unwrap());
    let line = |path: &str, id: &str, outcome: &str, status: u64, budget_ms: u64| Line {
        service: "inventory".into(),
        request_id: id.into(),
        method: "GET".into(),
        path: path.into(),
        outcome: outcome.into(),
        status: Some(status),
        budget_ms: Some(budget_ms),
    };
    assert_eq!(
        seen,
        [
            line("/stock/7", "req-fast", "ok", 200, 800),
            line("/slow", "req-slow", "deadline", 504, 100),
        ]
    );

    // A filter that refuses the layer's `enabled!` check (one on event fields) still gets the
    // line: the check only decides whether the path and the request id are kept for it.
    lines.refuse_hints.store(true, Ordering::Relaxed);
    let fast = send("/stock/8", "700", "req-filtered").await.unwrap();
    assert_eq!(fast.status(), StatusCode::OK);
    fast.into_body().collect().await.unwrap();
    let seen = std::mem::take(&mut *lines.lines.lock().unwrap());
    assert_eq!(
        seen,
        [Line {
            path: String::new(),
            request_id: String::new(),
            ..line("/stock/8", "req-filtered", "ok", 200, 700)
        }]
    );
}

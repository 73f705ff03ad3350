//! OpenTelemetry spans for the enforce and propagate layers (feature `otel`).
//!
//! With the feature on, the [enforce layer](crate::enforce) starts one `SERVER` span per request
//! and the [propagate layer](crate::propagate) one `CLIENT` span per attempt (a retry or a hedge
//! is its own attempt, so its own span). Their attributes say what the deadline did:
//!
//! | attribute | server span | attempt span |
//! | --- | --- | --- |
//! | [`deadline.budget_ms`](BUDGET_MS) | the budget at arrival (after clamping) | the budget sent to the callee |
//! | [`deadline.remaining_ms`](REMAINING_MS) | what was left of it when the request was over | what was left of the call's deadline when the attempt ended |
//! | [`deadline.queue_ms`](QUEUE_MS) | time spent waiting for a worker slot | — |
//! | [`deadline.outcome`](OUTCOME) | the hold's outcome (`ok`, `deadline`, `rejected`, …) | `ok`, `error`, `deadline` (the callee answered 504), `timeout` or `cancelled` |
//! | [`http.request.resend_count`](RESEND_COUNT) | — | the attempt's index, on resends only (1 for the first retry or hedge) |
//!
//! Budgets and remaining times are absent without a deadline. `remaining_ms` is never negative:
//! a request that overran reports 0.
//!
//! # Context propagation: W3C `traceparent`, written here
//!
//! The server span's parent is the request's `traceparent` header; a missing or malformed one
//! starts a new trace (never an error: the header is advisory). Every attempt writes its *own*
//! span's `traceparent` (and the parent's `tracestate`), so a retried call shows two attempt
//! spans with distinct span ids, and each callee's server span names the attempt that reached
//! it as its parent. The attempt's parent is the server span of the request being served (found
//! through its [`DeadlineContext`](crate::DeadlineContext)), or, outside a served request,
//! whatever span is current in OpenTelemetry's own context.
//!
//! The layers read and write `traceparent` themselves rather than through the application's
//! global text-map propagator: OpenTelemetry's default global propagator does nothing, and a
//! chain whose hops forgot to install one would silently lose its parent links. Parsing is a
//! fixed-width check of the header, and writing it is one small string per attempt.
//!
//! The budget is **not** put in baggage. Baggage is forwarded unchanged hop after hop, so a
//! budget in it is stale as soon as the first hop has spent any time; `Deadline-Budget-Ms` is
//! rewritten by every attempt with what is really left.
//!
//! # Which tracer
//!
//! By default each span is started with the *global* tracer provider, looked up per request, so
//! an application that installs its SDK after building the layers is still seen. A provider
//! can be given to a layer instead ([`Tracing::provider`]). The library depends on the
//! OpenTelemetry API alone: the application picks the SDK, the sampler and the exporter.
//!
//! # Cost
//!
//! Off, nothing of this is compiled. On without a provider, OpenTelemetry's no-op tracer makes
//! spans that carry their parent's context and record nothing: the layers check
//! [`is_recording`](opentelemetry::trace::Span::is_recording) before building any attribute,
//! so such a request pays for the lookup of the global provider (a read lock and a reference
//! count), the parse of its `traceparent` and one boxed no-op span per request and per attempt:
//! about 1,400 instructions a request on the server, measured with callgrind (docs/otel.md).
//! The no-op span keeps its parent's context, so an uninstrumented hop still forwards the
//! caller's `traceparent` unchanged. A process that has the feature but never traces (a command
//! run without an exporter) gives its layers [`Tracing::off`], which costs a branch.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue, Method};
use opentelemetry::global::{self, BoxedSpan, BoxedTracer};
use opentelemetry::trace::{
    Span as _, SpanBuilder, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags,
    TraceId, TraceState, Tracer as _, TracerProvider,
};
use opentelemetry::{Context, KeyValue};

use crate::hold::{Hold, HoldOutcome};

/// The W3C `traceparent` header.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");
/// The W3C `tracestate` header.
pub const TRACESTATE: HeaderName = HeaderName::from_static("tracestate");

/// The budget at arrival (server span) or as sent (attempt span), in ms.
pub const BUDGET_MS: &str = "deadline.budget_ms";
/// What was left of the deadline at the span's end, in ms (0 when it had run out).
pub const REMAINING_MS: &str = "deadline.remaining_ms";
/// Time the request waited for a worker slot, in ms (server spans).
pub const QUEUE_MS: &str = "deadline.queue_ms";
/// How the request or the attempt ended.
pub const OUTCOME: &str = "deadline.outcome";
/// OpenTelemetry's semantic convention for the index of a resent request (set on retries and
/// hedges only).
pub const RESEND_COUNT: &str = "http.request.resend_count";

/// The instrumentation scope of the layers' spans.
pub const SCOPE: &str = "deadline-http";

/// Where the layers' spans are started: the global tracer provider (the default), a tracer
/// made once from a provider given to the layer, or nowhere ([`off`](Tracing::off)). Cloning
/// is one reference count at most.
#[derive(Clone, Default)]
pub struct Tracing {
    source: Source,
}

#[derive(Clone, Default)]
enum Source {
    Off,
    #[default]
    Global,
    Given(Arc<BoxedTracer>),
}

impl fmt::Debug for Tracing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.source {
            Source::Off => "Tracing::Off",
            Source::Global => "Tracing::Global",
            Source::Given(_) => "Tracing::Provider",
        })
    }
}

impl Tracing {
    /// Spans go to the global tracer provider, looked up for every span (so one installed after
    /// the layer was built is used).
    pub fn global() -> Tracing {
        Tracing {
            source: Source::Global,
        }
    }

    /// Spans go to a tracer made once from `provider`, with scope [`SCOPE`].
    pub fn provider<P>(provider: &P) -> Tracing
    where
        P: TracerProvider,
        P::Tracer: Send + Sync + 'static,
        <P::Tracer as opentelemetry::trace::Tracer>::Span: Send + Sync + 'static,
    {
        let tracer = BoxedTracer::new(Box::new(provider.tracer(SCOPE)));
        Tracing {
            source: Source::Given(Arc::new(tracer)),
        }
    }

    /// No spans at all, and no `traceparent` read or written: for a build that has the feature
    /// but a process that does not trace (a command run without an exporter). Costs a branch per
    /// request and per attempt, where the global no-op provider costs a lookup and a boxed span.
    pub fn off() -> Tracing {
        Tracing {
            source: Source::Off,
        }
    }

    /// Whether this is [`off`](Tracing::off).
    pub fn is_off(&self) -> bool {
        matches!(self.source, Source::Off)
    }

    fn start(&self, builder: SpanBuilder, parent: &Context) -> Option<BoxedSpan> {
        match &self.source {
            Source::Off => None,
            Source::Global => Some(global::tracer(SCOPE).build_with_context(builder, parent)),
            Source::Given(tracer) => Some(tracer.build_with_context(builder, parent)),
        }
    }
}

/// The context of no span, for a request that has none.
static NO_SPAN: SpanContext = SpanContext::NONE;

/// The span context a request's `traceparent` names, when it is one this library understands:
/// version `00` exactly (55 characters) or a later version whose first 55 characters follow the
/// same layout, lowercase hex, trace and span ids not all zeros, version not `ff`. A request
/// with several `traceparent` headers has none. `tracestate` is kept when it parses.
pub fn parse_traceparent(headers: &HeaderMap) -> Option<SpanContext> {
    let mut values = headers.get_all(TRACEPARENT).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let raw = value.as_bytes();
    if raw.len() < 55 || raw[2] != b'-' || raw[35] != b'-' || raw[52] != b'-' {
        return None;
    }
    let version = hex_u128(&raw[0..2])?;
    if version == 0xff || (version == 0 && raw.len() != 55) || (raw.len() > 55 && raw[55] != b'-') {
        return None;
    }
    let trace_id = hex_u128(&raw[3..35])?;
    let span_id = hex_u128(&raw[36..52])?;
    let flags = hex_u128(&raw[53..55])?;
    if trace_id == 0 || span_id == 0 {
        return None;
    }
    let state = headers
        .get(TRACESTATE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(
        TraceId::from(trace_id),
        SpanId::from(span_id as u64),
        // Only the sampled bit is defined; the others are not passed on.
        TraceFlags::new(flags as u8) & TraceFlags::SAMPLED,
        true,
        state,
    ))
}

/// `digits` as a number, when they are all lowercase hex (W3C forbids uppercase).
fn hex_u128(digits: &[u8]) -> Option<u128> {
    digits.iter().try_fold(0u128, |n, &d| {
        let v = match d {
            b'0'..=b'9' => d - b'0',
            b'a'..=b'f' => d - b'a' + 10,
            _ => return None,
        };
        Some(n << 4 | u128::from(v))
    })
}

/// `span`'s `traceparent` value.
pub fn traceparent(span: &SpanContext) -> String {
    format!(
        "00-{:032x}-{:016x}-{:02x}",
        span.trace_id(),
        span.span_id(),
        span.trace_flags().to_u8()
    )
}

/// Writes `span` into `headers` as `traceparent` and `tracestate` (removing a stale
/// `tracestate`), when it is valid; otherwise leaves them as they are.
fn inject(span: &SpanContext, headers: &mut HeaderMap) {
    if !span.is_valid() {
        return;
    }
    if let Ok(value) = HeaderValue::try_from(traceparent(span)) {
        headers.insert(TRACEPARENT, value);
    }
    let state = span.trace_state().header();
    match HeaderValue::try_from(state) {
        Ok(value) if !value.is_empty() => {
            headers.insert(TRACESTATE, value);
        }
        _ => {
            headers.remove(TRACESTATE);
        }
    }
}

/// The span name for `method`, without an allocation for the standard methods.
fn method_name(method: &Method) -> Cow<'static, str> {
    let name = if *method == Method::GET {
        "GET"
    } else if *method == Method::POST {
        "POST"
    } else if *method == Method::PUT {
        "PUT"
    } else if *method == Method::DELETE {
        "DELETE"
    } else if *method == Method::HEAD {
        "HEAD"
    } else if *method == Method::PATCH {
        "PATCH"
    } else if *method == Method::OPTIONS {
        "OPTIONS"
    } else {
        return Cow::Owned(method.as_str().to_owned());
    };
    Cow::Borrowed(name)
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// One request's `SERVER` span, from arrival to its hold report.
pub(crate) struct ServerSpan {
    /// `None` when tracing is off.
    span: Option<BoxedSpan>,
}

impl fmt::Debug for ServerSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSpan")
            .field("context", self.context())
            .finish()
    }
}

impl ServerSpan {
    /// Starts the span of a request with `method` and `headers`, its parent the request's
    /// `traceparent` when it has a usable one.
    pub(crate) fn start(tracing: &Tracing, method: &Method, headers: &HeaderMap) -> ServerSpan {
        if tracing.is_off() {
            return ServerSpan { span: None };
        }
        let parent = match parse_traceparent(headers) {
            Some(remote) => Context::new().with_remote_span_context(remote),
            None => Context::new(),
        };
        let builder = SpanBuilder::from_name(method_name(method)).with_kind(SpanKind::Server);
        let mut span = tracing.start(builder, &parent);
        if let Some(span) = span.as_mut().filter(|s| s.is_recording()) {
            span.set_attribute(KeyValue::new("http.request.method", method.to_string()));
        }
        ServerSpan { span }
    }

    /// The span's context: the parent of the request's outbound attempts.
    pub(crate) fn context(&self) -> &SpanContext {
        self.span.as_ref().map_or(&NO_SPAN, |s| s.span_context())
    }

    /// Whether there is a span to end (so a hold is worth making for it).
    pub(crate) fn is_on(&self) -> bool {
        self.span.is_some()
    }

    /// Ends the span with what `hold` says, now (the clock is read only for a recording span).
    pub(crate) fn end(&mut self, hold: &Hold) {
        let Some(span) = &mut self.span else {
            return;
        };
        if span.is_recording() {
            let elapsed = tokio::time::Instant::now().saturating_duration_since(hold.arrival);
            let mut attributes = Vec::with_capacity(5);
            if let Some(budget) = hold.budget_ms {
                let budget = i64::try_from(budget).unwrap_or(i64::MAX);
                attributes.push(KeyValue::new(BUDGET_MS, budget));
                attributes.push(KeyValue::new(
                    REMAINING_MS,
                    budget.saturating_sub(millis(elapsed)).max(0),
                ));
            }
            attributes.push(KeyValue::new(QUEUE_MS, millis(hold.queued)));
            attributes.push(KeyValue::new(OUTCOME, hold.outcome.as_str()));
            if let Some(status) = hold.status {
                attributes.push(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                ));
            }
            span.set_attributes(attributes);
            if matches!(hold.outcome, HoldOutcome::Error | HoldOutcome::Deadline) {
                span.set_status(Status::error(hold.outcome.as_str().to_owned()));
            }
        }
        span.end();
    }
}

/// The tracing of one outbound call: the tracer and the parent of its attempts' spans.
pub(crate) struct CallSpans {
    tracing: Tracing,
    parent: Context,
}

impl CallSpans {
    /// The spans of a call made while serving a request with server span `served` (if any;
    /// otherwise OpenTelemetry's current context is the parent).
    pub(crate) fn new(tracing: &Tracing, served: Option<&SpanContext>) -> CallSpans {
        if tracing.is_off() {
            return CallSpans {
                tracing: Tracing::off(),
                parent: Context::new(),
            };
        }
        let parent = match served {
            Some(span) if span.is_valid() => Context::new().with_remote_span_context(span.clone()),
            _ => Context::current(),
        };
        CallSpans {
            tracing: tracing.clone(),
            parent,
        }
    }

    /// Starts the span of the `number`-th attempt (from 1), sending `budget_ms`, and writes its
    /// `traceparent` into the attempt's `headers`.
    pub(crate) fn attempt(
        &self,
        method: &Method,
        headers: &mut HeaderMap,
        number: u32,
        budget_ms: Option<u64>,
    ) -> AttemptSpan {
        if self.tracing.is_off() {
            return AttemptSpan { span: None };
        }
        let builder = SpanBuilder::from_name(method_name(method)).with_kind(SpanKind::Client);
        let Some(mut span) = self.tracing.start(builder, &self.parent) else {
            return AttemptSpan { span: None };
        };
        if span.is_recording() {
            let mut attributes = Vec::with_capacity(3);
            attributes.push(KeyValue::new("http.request.method", method.to_string()));
            if let Some(budget) = budget_ms {
                attributes.push(KeyValue::new(
                    BUDGET_MS,
                    i64::try_from(budget).unwrap_or(i64::MAX),
                ));
            }
            if number > 1 {
                attributes.push(KeyValue::new(RESEND_COUNT, i64::from(number - 1)));
            }
            span.set_attributes(attributes);
        }
        inject(span.span_context(), headers);
        AttemptSpan { span: Some(span) }
    }
}

/// How an attempt ended, for its span.
#[derive(Clone, Copy, Debug)]
pub(crate) enum AttemptEnding {
    /// The callee answered with this status.
    Answered(http::StatusCode),
    /// The inner service failed.
    Error,
    /// The attempt's wait elapsed.
    Timeout,
}

/// One attempt's `CLIENT` span: ended by [`end`](AttemptSpan::end), or as `cancelled` when
/// dropped first (a hedge that lost, a call dropped mid-attempt).
pub(crate) struct AttemptSpan {
    span: Option<BoxedSpan>,
}

impl fmt::Debug for AttemptSpan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AttemptSpan").finish_non_exhaustive()
    }
}

impl AttemptSpan {
    /// Whether there is a span to end: `false` when tracing is off, so a caller can skip
    /// working out how the attempt ended.
    pub(crate) fn is_live(&self) -> bool {
        self.span.is_some()
    }

    /// Ends the span: the attempt ended as `ending`, with `remaining` left of the call's
    /// deadline (if it has one).
    pub(crate) fn end(mut self, ending: AttemptEnding, remaining: Option<Duration>) {
        let (word, status) = match ending {
            AttemptEnding::Answered(status) if status == http::StatusCode::GATEWAY_TIMEOUT => {
                ("deadline", Some(status))
            }
            AttemptEnding::Answered(status)
                if status.is_server_error() || status == http::StatusCode::TOO_MANY_REQUESTS =>
            {
                ("error", Some(status))
            }
            AttemptEnding::Answered(status) => ("ok", Some(status)),
            AttemptEnding::Error => ("error", None),
            AttemptEnding::Timeout => ("timeout", None),
        };
        self.finish(word, status, remaining);
    }

    fn finish(
        &mut self,
        word: &'static str,
        status: Option<http::StatusCode>,
        remaining: Option<Duration>,
    ) {
        let Some(mut span) = self.span.take() else {
            return;
        };
        if span.is_recording() {
            let mut attributes = Vec::with_capacity(3);
            attributes.push(KeyValue::new(OUTCOME, word));
            if let Some(remaining) = remaining {
                attributes.push(KeyValue::new(REMAINING_MS, millis(remaining)));
            }
            if let Some(status) = status {
                attributes.push(KeyValue::new(
                    "http.response.status_code",
                    i64::from(status.as_u16()),
                ));
            }
            span.set_attributes(attributes);
            if word != "ok" {
                span.set_status(Status::error(word));
            }
        }
        span.end();
    }
}

impl Drop for AttemptSpan {
    fn drop(&mut self) {
        self.finish("cancelled", None, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for v in values {
            map.append(TRACEPARENT, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn traceparent_round_trips() {
        let raw = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let span = parse_traceparent(&headers(&[raw])).unwrap();
        assert_eq!(
            span.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert!(span.is_sampled() && span.is_remote());
        assert_eq!(traceparent(&span), raw);
    }

    #[test]
    fn malformed_traceparents_are_ignored() {
        for raw in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "zz-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(&headers(&[raw])).is_none(), "{raw:?}");
        }
        let one = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert!(parse_traceparent(&headers(&[one, one])).is_none());
        // A later version may append fields after a dash.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-more";
        assert!(parse_traceparent(&headers(&[later])).is_some());
    }
}

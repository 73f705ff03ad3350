//! Deadline planning for [`reqwest`]: a [`reqwest_middleware`] middleware that makes a reqwest
//! client's calls carry what is left of the caller's deadline.
//!
//! Most Rust services call other services with `reqwest`, and reqwest knows nothing of the
//! request its caller is serving: a fixed timeout per call, retries (with
//! `reqwest-retry`) that sleep without looking at any deadline, and a callee that is never told
//! how long it has. [`DeadlineMiddleware`] runs each call through the call loop of the
//! `deadline-http` client layer ([`deadline_http::PropagateDeadline`]), the same code, so a
//! reqwest call is planned, paced, sent, judged and recorded exactly as a call through the
//! layer: before every attempt the call planner ([`deadline::plan`]) decides whether there is
//! still time to send it, the attempt's wait never runs past the caller's deadline, the callee
//! is told its budget in `Deadline-Budget-Ms` (and in the [dialects](DeadlineMiddleware#dialects) chosen),
//! retries back off with full jitter inside the budget and draw from a retry budget per target
//! shared by every clone of the client, the callee's pushback (`Retry-After`,
//! `grpc-retry-pushback-ms`) is honoured inside the budget, a gRPC answer is judged by its
//! `grpc-status`, idempotent calls may be hedged, and the call with its attempts goes into the
//! hop's trace, with its callees' `Deadline-Trace` where the hop's answer shows the trace (and
//! into Prometheus metrics and OpenTelemetry spans, with the `metrics` and `otel` features).
//!
//! The deadline is picked up with no application code: inside a handler served by the
//! `deadline-http` enforce layer (or inside [`deadline_http::with_deadline`]), the task-local
//! deadline is the call's. A [`deadline::Deadline`] in the request's
//! [`http::Extensions`] (given with `reqwest_middleware::RequestBuilder::with_extension`) can
//! tighten it. Without either, the call runs as reqwest would run it: no header, the policy's
//! full timeout per attempt.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use deadline_reqwest::{CallPolicy, DeadlineMiddleware};
//!
//! # async fn handler() -> Result<(), reqwest_middleware::Error> {
//! let policy = CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy");
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(DeadlineMiddleware::new(policy).target("inventory"))
//!     .build();
//! // Inside a request served by the enforce layer, this carries what is left of its deadline.
//! let response = client.get("http://127.0.0.1:8081/items/7").send().await?;
//! println!("inventory answered {}", response.status());
//! # Ok(()) }
//! ```
//!
//! # Where it goes in the middleware chain
//!
//! Last, or after anything that only decorates requests: it sends several attempts per call, so
//! a middleware after it runs once per attempt, one before it once per call. Each attempt runs
//! the middlewares after it with its own copy of the call's [`http::Extensions`] (a hedged
//! call runs attempts side by side, and each needs its own). Do not combine it with
//! `reqwest-retry`'s middleware: that one sleeps without a deadline and retries any method.
//!
//! # Retries
//!
//! As in `deadline-http` (see [`deadline_http::propagate`]): on a 5xx, a gRPC UNAVAILABLE, a
//! connection error or an attempt timeout, and on a 429 that says when to come back; never on
//! other 4xx. Only requests whose method is idempotent, or that carry an `Idempotency-Key`
//! header, are retried, and only when reqwest can copy the request (not a streaming body: such
//! a call gets one attempt). A callee's 504 is retried only when the retry would get at least
//! half the budget that ran out. With propagation off (the policy's `propagate(false)`), every
//! attempt runs with its full timeout, retried at once and unbudgeted, as without the library.
//!
//! The retry budget is one per target, as the layer's: the [`target`](DeadlineMiddleware::target)
//! name, or the URL's `host:port` (never its `user:password@`), so a callee that is down does not
//! spend the retries of the others called through the same client.
//!
//! # Timeouts
//!
//! The middleware bounds every attempt by its wait (the policy's timeout, cut to the caller's
//! deadline), its response's body included. It does not touch reqwest's own timeouts: a
//! client or request timeout set on reqwest still applies to each attempt, and when it fires
//! first the attempt fails with reqwest's error.
//!
//! # Errors
//!
//! When the planner stops before any attempt, after attempts that timed out or failed for lack
//! of time, or after a last attempt that used its full timeout, the call fails with
//! [`reqwest_middleware::Error::Middleware`] holding a [`deadline_http::CallError`] (downcast
//! it to tell a deadline from a timeout or a skipped attempt). After a 5xx response that is not
//! retried further, that response is returned; after a transport error with attempts left
//! unused for other reasons, reqwest's error is returned as it came.
//!
//! # The response body
//!
//! A response's body is read within its attempt's wait (which never runs past the caller's
//! deadline) and at most [`DeadlineMiddleware::max_body`] bytes (4 MiB by default), by the same
//! body wrapper the `deadline-http` client uses ([`deadline_http::propagate::body`]). A body
//! past the limit, still arriving at the deadline, or cut short fails the read (`bytes()`,
//! `chunk()`, …) with a reqwest error whose sources hold the [`BodyError`] ([`body_error`]
//! finds it), and its connection or HTTP/2 stream is dropped so the callee sees the hang-up.
//!
//! # Features
//!
// The two methods exist only with their features: linked when built with them, named without.
#![cfg_attr(
    feature = "metrics",
    doc = "- `metrics`: [`DeadlineMiddleware::record_metrics`], the layer's Prometheus series \
           (turns on `deadline-http/metrics`)."
)]
#![cfg_attr(
    not(feature = "metrics"),
    doc = "- `metrics`: `DeadlineMiddleware::record_metrics`, the layer's Prometheus series \
           (turns on `deadline-http/metrics`)."
)]
#![cfg_attr(
    feature = "otel",
    doc = "- `otel`: [`DeadlineMiddleware::tracing`], one OpenTelemetry client span per attempt"
)]
#![cfg_attr(
    not(feature = "otel"),
    doc = "- `otel`: `DeadlineMiddleware::tracing`, one OpenTelemetry client span per attempt"
)]
//!   and a W3C `traceparent` on it (turns on `deadline-http/otel`; the spans go to the global
//!   tracer provider unless told otherwise). Without it the middleware makes no spans and adds
//!   no `traceparent`, even where another crate in the build turns `deadline-http/otel` on.

mod send;

use deadline::Deadline;
use deadline_http::PropagateDeadline;
use deadline_http::propagate::{
    Backoff, BodyError, Callee504, DialectSet, HedgeDelay, RetryBudgetConfig, RetrySettings,
};
use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};

// The policy a `DeadlineMiddleware` calls under, from the core crate, so a caller needs no
// other import.
pub use deadline::{CallPolicy, PolicyError};

/// The middleware: see the [crate docs](crate). Cloning it is cheap, and clones share the retry
/// budgets (one per target).
///
/// # Dialects
///
/// [`dialects`](Self::dialects) also tells every callee its budget in other headers
/// (`grpc-timeout`, Envoy's, …), written from the one budget planned for the attempt, as the
/// layer does ([`deadline_http::propagate::dialects`]). A gRPC request
/// (`content-type: application/grpc…`) carries `grpc-timeout` in any case.
#[derive(Clone, Debug)]
pub struct DeadlineMiddleware {
    /// The layer's service, never called as one: its settings and retry budgets, and its call
    /// loop, driven with the chain as the sender ([`PropagateDeadline::call_with`]).
    layer: PropagateDeadline<()>,
}

impl DeadlineMiddleware {
    /// Calls under `policy`, with the layer's defaults: backoff 25 ms doubling to 250 ms with
    /// full jitter, the default retry budget per target ([`RetryBudgetConfig::DEFAULT`]: 20 %
    /// of requests plus 10 per 10 s window, and a bucket of 5 tokens that failed retries empty
    /// and successes refill), no hedging, `Deadline-Budget-Ms` alone, responses returned as
    /// they are.
    pub fn new(policy: CallPolicy) -> DeadlineMiddleware {
        let layer = PropagateDeadline::new((), policy);
        // Without this crate's `otel` feature the user has not asked for spans (and could not
        // turn them off): none, even where another crate turns `deadline-http/otel` on.
        #[cfg(not(feature = "otel"))]
        let layer = layer.without_tracing();
        DeadlineMiddleware { layer }
    }

    /// The largest response body a call reads, in bytes (default
    /// [`DEFAULT_MAX_BODY`](deadline_http::propagate::DEFAULT_MAX_BODY), 4 MiB): past it, or
    /// when the callee announces more, reading the body fails with a [`BodyError::TooLarge`] (in
    /// the reqwest error's sources) and the connection or stream is dropped. `u64::MAX` is no
    /// limit. See [`deadline_http::propagate::body`].
    #[must_use = "this returns the middleware with the limit set; the original is unchanged"]
    pub fn max_body(self, limit: u64) -> DeadlineMiddleware {
        self.map(|layer| layer.max_body(limit))
    }

    /// Names the downstream in the call's span (`call:<name>`), in the hop's activity, in the
    /// metrics and as the key of its retry budget (default: the URL's host and port, the port
    /// only when it is not the scheme's). Given before or after
    #[cfg_attr(
        feature = "metrics",
        doc = "[`record_metrics`](Self::record_metrics), the series are labelled with it."
    )]
    #[cfg_attr(
        not(feature = "metrics"),
        doc = "`record_metrics` (feature `metrics`), the series are labelled with it."
    )]
    #[must_use = "this returns the middleware with the target set; the original is unchanged"]
    pub fn target(self, name: impl Into<String>) -> DeadlineMiddleware {
        self.map(|layer| layer.target(name))
    }

    /// The backoff before retries ([`Backoff::NONE`] retries at once). Starts new retry
    /// budgets, shared by the clones made from here on.
    #[must_use = "this returns the middleware with the backoff set; the original is unchanged"]
    pub fn backoff(self, backoff: Backoff) -> DeadlineMiddleware {
        self.map(|layer| layer.backoff(backoff))
    }

    /// The rule for retrying a callee's 504 (default: when the retry gets at least half the
    /// budget that ran out). Starts new retry budgets, shared by the clones made from here on.
    #[must_use = "this returns the middleware with the rule set; the original is unchanged"]
    pub fn callee_504(self, rule: Callee504) -> DeadlineMiddleware {
        self.map(|layer| layer.callee_504(rule))
    }

    /// The retry budget per target (`None`: retries are not budgeted). Starts new retry
    /// budgets, shared by the clones made from here on.
    #[must_use = "this returns the middleware with the budget set; the original is unchanged"]
    pub fn retry_budget(self, budget: Option<RetryBudgetConfig>) -> DeadlineMiddleware {
        self.map(|layer| layer.retry_budget(budget))
    }

    /// Hedges idempotent calls whose request can be copied: when no answer came within
    /// `delay`, another attempt is sent if the planner has time for it and the retry budget
    /// allows it; the first usable answer wins and the others are dropped (their connections
    /// close). `None` (the default) does not hedge. See
    /// [`PropagateDeadline::hedge`]. Starts new retry budgets, shared by the clones made from
    /// here on.
    #[must_use = "this returns the middleware with hedging set; the original is unchanged"]
    pub fn hedge(self, delay: Option<HedgeDelay>) -> DeadlineMiddleware {
        self.map(|layer| layer.hedge(delay))
    }

    /// Also tells every callee its budget in these headers (see [Dialects](Self#dialects));
    /// the default is `Deadline-Budget-Ms` alone.
    #[must_use = "this returns the middleware with the dialects set; the original is unchanged"]
    pub fn dialects(self, dialects: DialectSet) -> DeadlineMiddleware {
        self.map(|layer| layer.dialects(dialects))
    }

    /// With `true`, a call that ends with the callee saying that the deadline ran out there
    /// (HTTP 504, or a trailers-only gRPC DEADLINE_EXCEEDED) fails with a
    /// [`CallError::DeadlineExceeded`](deadline_http::CallError::DeadlineExceeded), in
    /// [`reqwest_middleware::Error::Middleware`], instead of returning that response. The
    /// default, `false`, returns it. See [`PropagateDeadline::deadline_answer_as_error`].
    #[must_use = "this returns the middleware with the option set; the original is unchanged"]
    pub fn deadline_answer_as_error(self, on: bool) -> DeadlineMiddleware {
        self.map(|layer| layer.deadline_answer_as_error(on))
    }

    /// Records every call's attempts, skips and duration in `metrics`' Prometheus series, as
    /// the layer does (feature `metrics`; see [`deadline_http::metrics`]).
    #[cfg(feature = "metrics")]
    #[must_use = "this returns the middleware with metrics set; the original is unchanged"]
    pub fn record_metrics(self, metrics: &deadline_http::metrics::ServiceMetrics) -> Self {
        self.map(|layer| layer.record_metrics(metrics))
    }

    /// Where the attempts' OpenTelemetry `CLIENT` spans go (feature `otel`; default: the
    /// global tracer provider). See [`deadline_http::otel`].
    #[cfg(feature = "otel")]
    #[must_use = "this returns the middleware with tracing set; the original is unchanged"]
    pub fn tracing(self, tracing: deadline_http::otel::Tracing) -> DeadlineMiddleware {
        self.map(|layer| layer.tracing(tracing))
    }

    /// The call policy.
    pub fn policy(&self) -> &CallPolicy {
        self.layer.policy()
    }

    /// How this middleware retries.
    pub fn retry_settings(&self) -> RetrySettings {
        self.layer.retry_settings()
    }

    fn map(self, f: impl FnOnce(PropagateDeadline<()>) -> PropagateDeadline<()>) -> Self {
        DeadlineMiddleware {
            layer: f(self.layer),
        }
    }
}

#[async_trait::async_trait]
impl Middleware for DeadlineMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let explicit = extensions.get::<Deadline>().copied();
        let (request, chain) = send::split(request, explicit, extensions, next);
        send::answer(self.layer.call_with(chain, request).await)
    }
}

/// Whether `error` (from reading a response body) is a [`BodyError`] of this middleware's, and
/// which.
pub fn body_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyError> {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(body) = current.downcast_ref::<BodyError>() {
            return Some(body);
        }
        source = current.source();
    }
    None
}

//! The client service: [`PropagateDeadline`]'s settings and builder methods, and its calls,
//! made by the call loop (see the [module docs](super)).

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};

use deadline::plan::backoff::Backoff;
use deadline::plan::hedge::HedgeDelay;
use deadline::plan::retry::Callee504;
use deadline::plan::retry_budget::RetryBudgetConfig;
use deadline::{CallPolicy, Deadline};
use http::{Request, Response};
use tower_service::Service;

use super::body::{CallBody, DEFAULT_MAX_BODY};
use super::call::{self, Call};
use super::dialects::DialectSet;
use super::future::ResponseFuture;
use super::layer::PropagateDeadlineLayer;
use super::retry::{Retries, RetrySettings};
use super::send::{SendAttempt, Tower};
use super::target::Target;
use super::{answers, attempt};
use crate::context::DeadlineContext;
use crate::error::{BoxError, CallError};

/// A client service whose calls carry the current deadline, are retried by the call planner
/// and are recorded in the hop's trace. See the [module docs](super).
///
/// The inner service is cloned once per call, once per attempt when hedging (readiness is
/// awaited inside the attempt's wait), so [`poll_ready`](Service::poll_ready) is always ready.
#[derive(Clone, Debug)]
pub struct PropagateDeadline<S> {
    pub(super) inner: S,
    pub(super) policy: CallPolicy,
    pub(super) target: Option<Target>,
    pub(super) dialects: DialectSet,
    pub(super) metrics: crate::metrics_hook::ClientHook,
    /// Shared by every clone: the retry budgets stay one per target however many clones call.
    pub(super) retries: Arc<Retries>,
    /// A final 504 / DEADLINE_EXCEEDED answer becomes an error (see [`answers`]).
    pub(super) deadline_answers: bool,
    /// The largest response body read, in bytes.
    pub(super) max_body: u64,
    /// Each attempt's request carries its [`AttemptEnd`] in its extensions, for an inner client
    /// that acts on an attempt that ran to its end (`DeadlineClient`'s pool evicts the
    /// connection). Off for any other inner service: an extension costs an attempt three
    /// allocations.
    pub(super) mark_attempts: bool,
    /// Each attempt's request carries its planned budget, for an inner client that connects
    /// before it writes and stamps the budget then (`DeadlineClient::https`). Off otherwise.
    pub(super) stamp_late: bool,
    /// Where the attempts' OpenTelemetry client spans go.
    #[cfg(feature = "otel")]
    pub(super) tracing: crate::otel::Tracing,
}

impl<S> PropagateDeadline<S> {
    /// Wraps `inner`, making calls under `policy`.
    pub fn new(inner: S, policy: CallPolicy) -> PropagateDeadline<S> {
        PropagateDeadline {
            inner,
            policy,
            target: None,
            dialects: DialectSet::none(),
            metrics: Default::default(),
            retries: Retries::new(RetrySettings::default()),
            deadline_answers: false,
            max_body: DEFAULT_MAX_BODY,
            mark_attempts: false,
            stamp_late: false,
            #[cfg(feature = "otel")]
            tracing: crate::otel::Tracing::global(),
        }
    }

    /// Where the attempts' OpenTelemetry `CLIENT` spans go (feature `otel`; default: the
    /// global tracer provider, looked up per attempt). See [`crate::otel`].
    #[cfg(feature = "otel")]
    #[must_use = "this returns the service with tracing set; the original is unchanged"]
    pub fn tracing(mut self, tracing: crate::otel::Tracing) -> PropagateDeadline<S> {
        self.tracing = tracing;
        self
    }

    /// Sends no OpenTelemetry spans for this client's attempts and adds no `traceparent`,
    /// whatever the `otel` feature and the global tracer provider say. Always available, so a
    /// crate built on this layer can keep its own calls untraced when its user did not ask for
    /// tracing, even where another crate in the build turns the `otel` feature on.
    #[must_use = "this returns the service with tracing off; the original is unchanged"]
    pub fn without_tracing(self) -> PropagateDeadline<S> {
        #[cfg(feature = "otel")]
        {
            self.tracing(crate::otel::Tracing::off())
        }
        #[cfg(not(feature = "otel"))]
        {
            self
        }
    }

    /// Puts each attempt's [`AttemptEnd`] in its request's extensions (see the field).
    pub(super) fn mark_attempts(mut self) -> PropagateDeadline<S> {
        self.mark_attempts = true;
        self
    }

    /// Puts each attempt's planned budget in its request's extensions (see the field).
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    pub(super) fn stamp_late(mut self) -> PropagateDeadline<S> {
        self.stamp_late = true;
        self
    }

    /// With `true`, a call that ends with the callee saying that the deadline ran out there
    /// (HTTP 504, or a trailers-only gRPC DEADLINE_EXCEEDED) fails with
    /// [`CallError::DeadlineExceeded`] instead of returning that response, so a handler can pass
    /// it on with `?`. The default, `false`, returns every response as `Ok`. Retries are decided
    /// first, as always: only the answer the call ends with is converted.
    #[must_use = "this returns the service with the option set; the original is unchanged"]
    pub fn deadline_answer_as_error(mut self, on: bool) -> PropagateDeadline<S> {
        self.deadline_answers = on;
        self
    }

    /// Also tells every callee its budget in these headers (see [`dialects`](super::dialects)); the default is
    /// `Deadline-Budget-Ms` alone.
    #[must_use = "this returns the service with the dialects set; the original is unchanged"]
    pub fn dialects(mut self, dialects: DialectSet) -> PropagateDeadline<S> {
        self.dialects = dialects;
        self
    }

    /// A [`PropagateDeadlineLayer`] making calls under `policy`.
    pub fn layer(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer::new(policy)
    }

    /// Names the downstream in the call's span (`call:<name>`) and in the hop's activity
    /// (`calling <name>`). Without a name, the request URI's authority (`host:port`) is used.
    #[must_use = "this returns the service with the target set; the original is unchanged"]
    pub fn target(mut self, name: impl Into<String>) -> PropagateDeadline<S> {
        let name = name.into();
        self.metrics.retarget(&name);
        self.target = Some(Target::new(&name));
        self
    }

    /// Records every call's attempts, skips and duration in `metrics`' Prometheus series
    /// (feature `metrics`; see [`crate::metrics`]).
    #[cfg(feature = "metrics")]
    #[must_use = "this returns the service with metrics set; the original is unchanged"]
    pub fn record_metrics(mut self, metrics: &crate::metrics::ServiceMetrics) -> Self {
        let target = self.target.as_ref().map(|t| &*t.name);
        self.metrics = crate::metrics_hook::ClientHook::new(metrics, target);
        self
    }

    /// The call policy.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }

    /// The largest response body a call reads, in bytes (default [`DEFAULT_MAX_BODY`], 4 MiB):
    /// past it, or when the callee announces more, reading the body fails with
    /// [`BodyError::TooLarge`](super::BodyError::TooLarge) and the callee's body (its connection, or its HTTP/2 stream) is
    /// dropped. `u64::MAX` is no limit; `0` accepts only empty bodies. See [`body`](super::body).
    #[must_use = "this returns the service with the limit set; the original is unchanged"]
    pub fn max_body(mut self, limit: u64) -> PropagateDeadline<S> {
        self.max_body = limit;
        self
    }

    /// The largest response body a call reads, in bytes.
    pub fn max_body_limit(&self) -> u64 {
        self.max_body
    }

    /// The backoff before retries (default: full jitter from 25 ms doubling to 250 ms;
    /// [`Backoff::NONE`] sends retries at once). Starts new retry budgets, shared by the clones
    /// made from here on.
    #[must_use = "this returns the service with the backoff set; the original is unchanged"]
    pub fn backoff(mut self, backoff: Backoff) -> PropagateDeadline<S> {
        self.retries = Retries::new(self.retries.settings().with_backoff(backoff));
        self
    }

    /// The retry budget per target (default [`RetryBudgetConfig::DEFAULT`]: 20 % of requests
    /// plus 10 per 10 s window, and a bucket of 5 tokens that failed retries empty);
    /// `None` leaves retries unbudgeted. Starts new retry budgets, shared by the clones made
    /// from here on.
    #[must_use = "this returns the service with the budget set; the original is unchanged"]
    pub fn retry_budget(mut self, budget: Option<RetryBudgetConfig>) -> PropagateDeadline<S> {
        self.retries = Retries::new(self.retries.settings().with_budget(budget));
        self
    }

    /// When a callee's 504 is retried (default: when the retry gets at least half the budget
    /// that ran out). Starts new retry budgets, shared by the clones made from here on.
    #[must_use = "this returns the service with the rule set; the original is unchanged"]
    pub fn callee_504(mut self, rule: Callee504) -> PropagateDeadline<S> {
        self.retries = Retries::new(self.retries.settings().with_callee_504(rule));
        self
    }

    /// Hedges idempotent calls (`GET`, `HEAD`, `OPTIONS`, `TRACE`, `PUT`, `DELETE`): when no
    /// answer came within `delay`, another attempt is sent if the planner has time for it and
    /// the retry budget allows it; the first usable answer wins and the others are cancelled.
    /// `None` (the default) does not hedge. Starts new retry budgets, shared by the clones made
    /// from here on.
    #[must_use = "this returns the service with hedging set; the original is unchanged"]
    pub fn hedge(mut self, delay: Option<HedgeDelay>) -> PropagateDeadline<S> {
        self.retries = Retries::new(self.retries.settings().with_hedge(delay));
        self
    }

    /// How this client retries.
    pub fn retry_settings(&self) -> RetrySettings {
        self.retries.settings()
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for PropagateDeadline<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Clone + Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<CallBody<RB>>;
    type Error = CallError;
    type Future = ResponseFuture<RB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> ResponseFuture<RB> {
        self.start(request)
    }
}

impl<S> PropagateDeadline<S> {
    /// The call of `request`: what [`Service::call`] returns, from a shared reference, so
    /// [`DeadlineClient`] need not clone the whole service (its pooled client) before cloning
    /// the inner client for the call. The loop of [`call_with`](Self::call_with), boxed, over
    /// one clone of the inner service.
    pub(super) fn start<B, RB>(&self, request: Request<B>) -> ResponseFuture<RB>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Clone + Send + 'static,
        RB: Send + 'static,
    {
        let (call, answer_target) = self.prepare(Tower(self.inner.clone()), request);
        // Without the option, the call's future goes into its box as it is: a wrapper would be
        // one more move of it, and one more layer every poll.
        match answer_target {
            None => ResponseFuture::new(call.run()),
            Some(target) => ResponseFuture::new(answers::Answered::new(call.run(), Some(target))),
        }
    }

    /// Makes the call of `request` as [`Service::call`] makes it (the same plans, headers,
    /// retries, hedges, trace, metrics and spans), sending its attempts with `sender` instead of
    /// the inner service. For a client that is not a tower service: the reqwest middleware
    /// drives its calls through here. The future is not boxed and borrows nothing from `self`
    /// (what it needs is copied or shared at the call), only what `sender` borrows.
    ///
    /// The deadline and the context are read now, as [`Service::call`] reads them: call it on
    /// the handler's task.
    pub fn call_with<T, B>(
        &self,
        sender: T,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<CallBody<T::Body>>, CallError>> + Send + use<S, T, B>
    where
        T: SendAttempt<B>,
        B: Clone + Send,
    {
        let (call, answer_target) = self.prepare(sender, request);
        answers::Answered::new(call.run(), answer_target)
    }

    /// The call of `request` with `sender`, ready to run, and the target whose final deadline
    /// answer becomes an error (when the option is on): the one place both entries, boxed and
    /// not, read the deadline and the context and copy the settings.
    fn prepare<T, B>(&self, sender: T, request: Request<B>) -> (Call<T, B>, Option<Arc<str>>)
    where
        T: SendAttempt<B>,
        B: Clone + Send,
    {
        let explicit = request.extensions().get::<Deadline>().copied();
        let context = DeadlineContext::current();
        // Both apply when both exist: an explicit deadline can tighten the request's, never
        // loosen it, or a callee could be told more time than the user is still waiting.
        let deadline = match (
            explicit,
            context.as_ref().and_then(DeadlineContext::deadline),
        ) {
            (Some(explicit), Some(served)) => Some(explicit.min(served)),
            (explicit, served) => explicit.or(served),
        };
        let metrics = self.metrics.call(&request);
        // The name a deadline answer's error gives the callee, taken only when one is wanted.
        let answer_target = self.deadline_answers.then(|| match &self.target {
            Some(target) => Arc::clone(&target.name),
            None => Arc::from(attempt::authority_name(request.uri())),
        });
        #[cfg(feature = "otel")]
        let spans = crate::otel::CallSpans::new(
            &self.tracing,
            context.as_ref().and_then(DeadlineContext::span_context),
        );
        let call = Call {
            inner: sender,
            policy: self.policy,
            request,
            explicit,
            deadline,
            target: self.target.clone(),
            context,
            dialects: self.dialects.clone(),
            metrics,
            retries: Arc::clone(&self.retries),
            max_body: self.max_body,
            mark_attempts: self.mark_attempts,
            dress: call::Dress {
                stamp_late: self.stamp_late,
                #[cfg(feature = "otel")]
                spans,
            },
        };
        (call, answer_target)
    }
}

#[cfg(test)]
mod tests {
    use deadline::trace::Span;

    use super::*;

    /// The call span's name is made once per layer; it must come out as `Span::new` would
    /// make it.
    #[test]
    fn names_match_what_span_new_makes() {
        for target in [
            "inventory",
            "127.0.0.1:8081",
            "crème brûlée",
            "",
            "a-target-name-longer-than-the-cap",
        ] {
            let expected = Span::new(format!("call:{target}"), 0, 0).name;
            assert_eq!(Target::new(target).span.as_ref(), expected, "{target:?}");
        }
    }
}

use deadline::CallPolicy;
use tower_layer::Layer;

use std::sync::Arc;

use super::retry::Retries;
use super::target::Target;
use super::{Backoff, Callee504, DialectSet, HedgeDelay, PropagateDeadline, RetryBudgetConfig};

/// Wraps a client service in [`PropagateDeadline`]: every call carries what is left of the
/// current deadline, is retried by the call planner, and is recorded in the hop's trace.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct PropagateDeadlineLayer {
    policy: CallPolicy,
    target: Option<Target>,
    dialects: DialectSet,
    metrics: crate::metrics_hook::ClientHook,
    /// Shared by every service this layer makes.
    retries: Arc<Retries>,
    deadline_answers: bool,
    max_body: u64,
    #[cfg(feature = "otel")]
    tracing: crate::otel::Tracing,
}

impl PropagateDeadlineLayer {
    /// A layer making calls under `policy`.
    pub fn new(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer {
            policy,
            target: None,
            dialects: DialectSet::none(),
            metrics: Default::default(),
            retries: Retries::new(super::RetrySettings::default()),
            deadline_answers: false,
            max_body: super::DEFAULT_MAX_BODY,
            #[cfg(feature = "otel")]
            tracing: crate::otel::Tracing::global(),
        }
    }

    /// Where the attempts' OpenTelemetry `CLIENT` spans go (see
    /// [`PropagateDeadline::tracing`]).
    #[cfg(feature = "otel")]
    pub fn tracing(mut self, tracing: crate::otel::Tracing) -> PropagateDeadlineLayer {
        self.tracing = tracing;
        self
    }

    /// A final 504 / DEADLINE_EXCEEDED answer becomes an error (see
    /// [`PropagateDeadline::deadline_answer_as_error`]; default `false`).
    pub fn deadline_answer_as_error(mut self, on: bool) -> PropagateDeadlineLayer {
        self.deadline_answers = on;
        self
    }

    /// Also tells every callee its budget in these headers, each written from the one budget
    /// the planner chose for the attempt (see [`dialects`](super::dialects)); the default is
    /// `Deadline-Budget-Ms` alone.
    ///
    /// ```
    /// use std::time::Duration;
    /// use deadline::CallPolicy;
    /// use deadline_http::propagate::{DialectSet, PropagateDeadlineLayer};
    ///
    /// let policy = CallPolicy::new(Duration::from_secs(1), 2).unwrap();
    /// let envoy: DialectSet = "x-envoy-upstream-rq-timeout-ms,grpc-timeout".parse().unwrap();
    /// let layer = PropagateDeadlineLayer::new(policy).dialects(envoy);
    /// # let _ = layer;
    /// ```
    pub fn dialects(mut self, dialects: DialectSet) -> PropagateDeadlineLayer {
        self.dialects = dialects;
        self
    }

    /// Names the downstream in the call's span (`call:<name>`) and in the hop's activity
    /// (`calling <name>`). Without a name, the request URI's authority (`host:port`) is used.
    pub fn target(mut self, name: impl Into<String>) -> PropagateDeadlineLayer {
        let name = name.into();
        self.metrics.retarget(&name);
        self.target = Some(Target::new(&name));
        self
    }

    /// Records every call's attempts, skips and duration in `metrics`' Prometheus series
    /// (feature `metrics`; see [`crate::metrics`]).
    #[cfg(feature = "metrics")]
    pub fn record_metrics(mut self, metrics: &crate::metrics::ServiceMetrics) -> Self {
        let target = self.target.as_ref().map(|t| &*t.name);
        self.metrics = crate::metrics_hook::ClientHook::new(metrics, target);
        self
    }
}

impl PropagateDeadlineLayer {
    /// The backoff before retries (see [`PropagateDeadline::backoff`]).
    pub fn backoff(mut self, backoff: Backoff) -> PropagateDeadlineLayer {
        self.retries = Retries::new(self.retries.settings().with_backoff(backoff));
        self
    }

    /// The retry budget per target, `None` for none (see
    /// [`PropagateDeadline::retry_budget`]). Every service the layer makes shares it.
    pub fn retry_budget(mut self, budget: Option<RetryBudgetConfig>) -> PropagateDeadlineLayer {
        self.retries = Retries::new(self.retries.settings().with_budget(budget));
        self
    }

    /// Hedges idempotent calls after `delay` (see [`PropagateDeadline::hedge`]).
    pub fn hedge(mut self, delay: Option<HedgeDelay>) -> PropagateDeadlineLayer {
        self.retries = Retries::new(self.retries.settings().with_hedge(delay));
        self
    }

    /// When a callee's 504 is retried (see [`PropagateDeadline::callee_504`]).
    pub fn callee_504(mut self, rule: Callee504) -> PropagateDeadlineLayer {
        self.retries = Retries::new(self.retries.settings().with_callee_504(rule));
        self
    }

    /// The largest response body a call reads, in bytes (default 4 MiB; see
    /// [`PropagateDeadline::max_body`]).
    pub fn max_body(mut self, limit: u64) -> PropagateDeadlineLayer {
        self.max_body = limit;
        self
    }
}

impl<S> Layer<S> for PropagateDeadlineLayer {
    type Service = PropagateDeadline<S>;

    fn layer(&self, inner: S) -> PropagateDeadline<S> {
        PropagateDeadline {
            inner,
            policy: self.policy,
            target: self.target.clone(),
            dialects: self.dialects.clone(),
            metrics: self.metrics.clone(),
            retries: Arc::clone(&self.retries),
            deadline_answers: self.deadline_answers,
            max_body: self.max_body,
            mark_attempts: false,
            stamp_late: false,
            #[cfg(feature = "otel")]
            tracing: self.tracing.clone(),
        }
    }
}

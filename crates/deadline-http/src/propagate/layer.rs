use deadline::CallPolicy;
use tower_layer::Layer;

use super::{DialectSet, PropagateDeadline, Target};

/// Wraps a client service in [`PropagateDeadline`]: every call carries what is left of the
/// current deadline, is retried by the call planner, and is recorded in the hop's trace.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct PropagateDeadlineLayer {
    policy: CallPolicy,
    target: Option<Target>,
    dialects: DialectSet,
    metrics: crate::metrics_hook::ClientHook,
}

impl PropagateDeadlineLayer {
    /// A layer making calls under `policy`.
    pub fn new(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer {
            policy,
            target: None,
            dialects: DialectSet::none(),
            metrics: Default::default(),
        }
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

impl<S> Layer<S> for PropagateDeadlineLayer {
    type Service = PropagateDeadline<S>;

    fn layer(&self, inner: S) -> PropagateDeadline<S> {
        PropagateDeadline {
            inner,
            policy: self.policy,
            target: self.target.clone(),
            dialects: self.dialects.clone(),
            metrics: self.metrics.clone(),
        }
    }
}

use deadline::CallPolicy;
use tower_layer::Layer;

use super::{PropagateDeadline, Target};

/// Wraps a client service in [`PropagateDeadline`]: every call carries what is left of the
/// current deadline, is retried by the call planner, and is recorded in the hop's trace.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct PropagateDeadlineLayer {
    policy: CallPolicy,
    target: Option<Target>,
    metrics: crate::metrics_hook::ClientHook,
}

impl PropagateDeadlineLayer {
    /// A layer making calls under `policy`.
    pub fn new(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer {
            policy,
            target: None,
            metrics: Default::default(),
        }
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
            metrics: self.metrics.clone(),
        }
    }
}

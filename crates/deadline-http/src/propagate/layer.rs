use deadline::CallPolicy;
use tower_layer::Layer;

use std::sync::Arc;

use super::retry::Retries;
use super::{Backoff, Callee504, HedgeDelay, PropagateDeadline, RetryBudgetConfig, Target};

/// Wraps a client service in [`PropagateDeadline`]: every call carries what is left of the
/// current deadline, is retried by the call planner, and is recorded in the hop's trace.
#[derive(Clone, Debug)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct PropagateDeadlineLayer {
    policy: CallPolicy,
    target: Option<Target>,
    /// Shared by every service this layer makes.
    retries: Arc<Retries>,
}

impl PropagateDeadlineLayer {
    /// A layer making calls under `policy`.
    pub fn new(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer {
            policy,
            target: None,
            retries: Retries::new(super::RetrySettings::default()),
        }
    }

    /// Names the downstream in the call's span (`call:<name>`) and in the hop's activity
    /// (`calling <name>`). Without a name, the request URI's authority (`host:port`) is used.
    pub fn target(mut self, name: impl Into<String>) -> PropagateDeadlineLayer {
        self.target = Some(Target::new(&name.into()));
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
}

impl<S> Layer<S> for PropagateDeadlineLayer {
    type Service = PropagateDeadline<S>;

    fn layer(&self, inner: S) -> PropagateDeadline<S> {
        PropagateDeadline {
            inner,
            policy: self.policy,
            target: self.target.clone(),
            retries: Arc::clone(&self.retries),
        }
    }
}

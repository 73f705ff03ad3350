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
}

impl PropagateDeadlineLayer {
    /// A layer making calls under `policy`.
    pub fn new(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer {
            policy,
            target: None,
        }
    }

    /// Names the downstream in the call's span (`call:<name>`) and in the hop's activity
    /// (`calling <name>`). Without a name, the request URI's authority (`host:port`) is used.
    pub fn target(mut self, name: impl Into<String>) -> PropagateDeadlineLayer {
        self.target = Some(Target::new(&name.into()));
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
        }
    }
}

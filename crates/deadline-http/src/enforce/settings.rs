//! What every service one [`EnforceDeadlineLayer`](super::EnforceDeadlineLayer) makes shares:
//! its settings, slots, hook and counters, behind one `Arc`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadline::Budget;

use super::exposure::TraceExposure;
use super::queue::{QueueOrder, Slots};
use super::sources;
use crate::hold::{Hold, HoldMetrics};

pub(super) type HoldHook = Arc<dyn Fn(&Hold) + Send + Sync>;

/// The settings of one [`EnforceDeadlineLayer`] and the state every service made from it
/// shares (its slots, hook and counters).
#[derive(Clone)]
pub(crate) struct HopSettings {
    pub(super) name: Arc<str>,
    /// `name` sanitised for trace spans, once rather than per request.
    pub(super) trace_name: String,
    pub(super) max_budget: Budget,
    pub(super) reserve: Duration,
    pub(super) slots: Option<Arc<Slots>>,
    /// The order the slots' waiters are served in.
    pub(super) queue: QueueOrder,
    /// Predictive admission's least useful budget, when it is on.
    pub(super) min_useful: Option<Duration>,
    /// Admission's cap on the expected wait for a slot, when it is on.
    pub(super) max_queue_wait: Option<Duration>,
    /// The longest the slots' wait list may grow, if bounded.
    pub(super) max_queue: Option<usize>,
    /// The most the runtime may run late before arrivals are refused, if bounded.
    pub(super) max_lag: Option<Duration>,
    /// `false` in baseline mode.
    #[cfg(feature = "baseline")]
    pub(super) enforce: bool,
    pub(super) sources: sources::Sources,
    /// What stands in front of the hop: its timeout and margin, whether `X-Request-Start` is
    /// trusted, and how many such stamps were ignored.
    pub(super) front: Front,
    /// Whether answers carry a `Server-Timing` header.
    pub(super) server_timing: bool,
    /// Which callers see `Deadline-Trace` and `Server-Timing`.
    pub(super) exposure: TraceExposure,
    /// Whether each request's context and deadline go in its extensions too.
    pub(super) extensions: bool,
    /// Whether a request without a budget, whose answer does not show this hop's trace, still
    /// gets a context (see [`EnforceDeadlineLayer::context_without_budget`](
    /// super::EnforceDeadlineLayer::context_without_budget)).
    pub(super) context_without_budget: bool,
    pub(super) on_hold: Option<HoldHook>,
    pub(super) metrics: HoldMetrics,
    pub(super) prometheus: crate::metrics_hook::HopHook,
    /// Where the requests' server spans go.
    #[cfg(feature = "otel")]
    pub(super) tracing: crate::otel::Tracing,
}

/// What stands in front of the hop (see [`deadline::front`]).
#[derive(Clone, Debug)]
pub(crate) struct Front {
    /// The front's timeout, when one is set.
    pub(super) timeout: Option<Duration>,
    /// What is kept from the front's timeout.
    pub(super) margin: Duration,
    /// Whether `X-Request-Start` is read and its time taken from the budget.
    pub(super) request_start: bool,
    /// Stamps ignored: malformed, in the future, or older than the maximum skew.
    pub(super) ignored: Arc<std::sync::atomic::AtomicU64>,
}

impl Default for Front {
    fn default() -> Front {
        Front {
            timeout: None,
            margin: super::EnforceDeadlineLayer::DEFAULT_FRONT_MARGIN,
            request_start: false,
            ignored: Arc::default(),
        }
    }
}

impl fmt::Debug for HopSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut debug = f.debug_struct("HopSettings");
        debug
            .field("name", &self.name)
            .field("trace_name", &self.trace_name)
            .field("max_budget", &self.max_budget)
            .field("reserve", &self.reserve)
            .field("slots_free", &self.slots.as_ref().map(|s| s.free()));
        #[cfg(feature = "baseline")]
        debug.field("enforce", &self.enforce);
        debug
            .field("sources", &self.sources)
            .field("front", &self.front)
            .field("server_timing", &self.server_timing)
            .field("exposure", &self.exposure)
            .field("on_hold", &self.on_hold.is_some())
            .finish()
    }
}

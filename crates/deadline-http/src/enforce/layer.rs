//! [`EnforceDeadlineLayer`]: the builder of [`EnforceDeadline`] services.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadline::Budget;
use deadline::trace::{MAX_NAME_LEN, sanitize_name};
use tokio::sync::Semaphore;
use tower_layer::Layer;

use super::{EnforceDeadline, Hold, HoldMetrics, HopSettings};

/// Builds [`EnforceDeadline`] services: put it **outermost**, so the time a request waits for a
/// worker counts against its budget (see the [module docs](super)).
///
/// ```
/// use std::time::Duration;
/// use deadline_http::EnforceDeadlineLayer;
///
/// let layer = EnforceDeadlineLayer::new("inventory")
///     .slots(8)
///     .reserve(Duration::from_millis(10))
///     .on_hold(|hold| eprintln!("{hold}"));
/// let metrics = layer.metrics();
/// # let _ = (layer, metrics);
/// ```
///
/// Clones share the worker slots, the metrics and the hook: build one layer per service and
/// clone it freely.
#[derive(Clone)]
#[must_use = "a layer does nothing until it wraps a service"]
pub struct EnforceDeadlineLayer {
    pub(super) settings: HopSettings,
}

impl fmt::Debug for EnforceDeadlineLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnforceDeadlineLayer")
            .field("settings", &self.settings)
            .finish()
    }
}

impl EnforceDeadlineLayer {
    /// The default reply reserve: work stops this long before the deadline so the 504 still
    /// gets out in time.
    pub const DEFAULT_RESERVE: Duration = Duration::from_millis(10);

    /// A layer for the hop called `name` (used in traces, 504 bodies and hold reports), with
    /// the defaults: budgets up to [`Budget::DEFAULT_MAX`], a 10 ms reply reserve, no limit on
    /// concurrent work, enforcement on, `grpc-timeout` read on gRPC requests only.
    pub fn new(name: impl Into<String>) -> EnforceDeadlineLayer {
        let name = name.into();
        EnforceDeadlineLayer {
            settings: HopSettings {
                trace_name: sanitize_name(&name, MAX_NAME_LEN),
                name: Arc::from(name),
                max_budget: Budget::DEFAULT_MAX,
                reserve: Self::DEFAULT_RESERVE,
                slots: None,
                #[cfg(feature = "baseline")]
                enforce: true,
                grpc_timeout: false,
                on_hold: None,
                metrics: HoldMetrics::default(),
            },
        }
    }

    /// The largest budget accepted; larger ones are clamped to it (never an error).
    pub fn max_budget(mut self, max: Budget) -> Self {
        self.settings.max_budget = max;
        self
    }

    /// Time kept back for writing the reply: work stops at the deadline less `reserve`
    /// (default 10 ms). A budget no larger than the reserve is answered 504 on arrival.
    pub fn reserve(mut self, reserve: Duration) -> Self {
        self.settings.reserve = reserve;
        self
    }

    /// At most `slots` requests work at once (default: no limit). The others wait in arrival
    /// order, each only for as long as its budget allows. Clamped to at least 1 (zero slots
    /// would never serve anyone) and to tokio's semaphore maximum.
    ///
    /// The slots belong to this layer value: every clone of it, and every service it makes,
    /// shares them. Calling `slots` again makes a fresh set.
    pub fn slots(mut self, slots: usize) -> Self {
        let slots = slots.clamp(1, Semaphore::MAX_PERMITS);
        self.settings.slots = Some(Arc::new(Semaphore::new(slots)));
        self
    }

    /// Also read gRPC's `grpc-timeout` header on every request, not only on gRPC ones (which
    /// always have it read); when both headers are present the tightest budget wins, and a
    /// malformed value in either is answered 400 (INVALID_ARGUMENT to a gRPC caller). Default
    /// `false`.
    pub fn grpc_timeout(mut self, read: bool) -> Self {
        self.settings.grpc_timeout = read;
        self
    }

    /// Calls `hook` with every request's [`Hold`] report, once, when the request is over for
    /// this hop. It runs on the task that ends the request (inside the server's write path or a
    /// drop), so keep it short and do not panic in it; send the report to a channel for slow
    /// work such as file output.
    pub fn on_hold(mut self, hook: impl Fn(&Hold) + Send + Sync + 'static) -> Self {
        self.settings.on_hold = Some(Arc::new(hook));
        self
    }

    /// The counters every hold report feeds, shared with every clone of this layer and the
    /// services it makes.
    pub fn metrics(&self) -> HoldMetrics {
        self.settings.metrics.clone()
    }
}

impl<S> Layer<S> for EnforceDeadlineLayer {
    type Service = EnforceDeadline<S>;

    fn layer(&self, inner: S) -> EnforceDeadline<S> {
        EnforceDeadline {
            inner,
            settings: Arc::new(self.settings.clone()),
        }
    }
}

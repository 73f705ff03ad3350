//! [`EnforceDeadlineLayer`]: the builder of [`EnforceDeadline`] services.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadline::Budget;
use deadline::absolute::SkewGuard;
use deadline::inbound::{Source, SourceSet};
use deadline::trace::{MAX_NAME_LEN, sanitize_name};
use tower_layer::Layer;

use super::queue::{QueueOrder, Slots};
use super::service::EnforceDeadline;
use super::settings::HopSettings;
use crate::hold::{Hold, HoldMetrics};

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

    /// The default [`front_margin`](Self::front_margin): 50 ms, the margin a caller keeps from
    /// each attempt's wait.
    pub const DEFAULT_FRONT_MARGIN: Duration = Duration::from_millis(50);

    /// A layer for the hop called `name` (used in traces, 504 bodies and hold reports), with
    /// the defaults: budgets up to [`Budget::DEFAULT_MAX`], a 10 ms reply reserve, no limit on
    /// concurrent work, enforcement on, `grpc-timeout` read on gRPC requests only,
    /// `Deadline-Trace` on answers to requests that carried a budget
    /// ([`TraceExposure::Budgeted`](super::TraceExposure::Budgeted)), `Server-Timing` off, and
    /// no context for a request without a budget: a request that sent none costs about what it
    /// would without the layer (see [`context_without_budget`](Self::context_without_budget)).
    pub fn new(name: impl Into<String>) -> EnforceDeadlineLayer {
        let name = name.into();
        EnforceDeadlineLayer {
            settings: HopSettings {
                trace_name: sanitize_name(&name, MAX_NAME_LEN),
                name: Arc::from(name),
                max_budget: Budget::DEFAULT_MAX,
                reserve: Self::DEFAULT_RESERVE,
                slots: None,
                queue: QueueOrder::Fifo,
                min_useful: None,
                max_queue_wait: None,
                max_queue: None,
                max_lag: None,
                #[cfg(feature = "baseline")]
                enforce: true,
                sources: super::sources::Sources::default(),
                front: super::settings::Front::default(),
                server_timing: false,
                exposure: super::TraceExposure::Budgeted,
                extensions: false,
                context_without_budget: false,
                on_hold: None,
                metrics: HoldMetrics::default(),
                prometheus: Default::default(),
                #[cfg(feature = "otel")]
                tracing: crate::otel::Tracing::global(),
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

    /// At most `slots` requests work at once (default: no limit). The others wait in the
    /// [`queue`](Self::queue) order (arrival order by default), each only for as long as its
    /// budget allows. Clamped to at least 1 (zero slots would never serve anyone) and to
    /// `u32::MAX`.
    ///
    /// The slots belong to this layer value: every clone of it, and every service it makes,
    /// shares them. Calling `slots`, [`queue`](Self::queue), [`admission`](Self::admission) or
    /// [`max_queue_wait`](Self::max_queue_wait) or [`max_queue`](Self::max_queue) again makes a
    /// fresh set.
    pub fn slots(mut self, slots: usize) -> Self {
        self.settings.slots = Some(Arc::new(
            Slots::new(slots, self.settings.queue, self.settings.min_useful)
                .max_wait(self.settings.max_queue_wait)
                .max_queue(self.settings.max_queue)
                .max_lag(self.settings.max_lag),
        ));
        self
    }

    /// At most `max` requests wait for a slot (default: no limit). A request that finds every
    /// slot busy and `max` already waiting is refused at once with 503 and `Retry-After: 0`
    /// (gRPC UNAVAILABLE; outcome `shed`), budget or not: without a limit, requests without a
    /// budget queue for as long as it takes, each holding its connection's memory and a task
    /// (20,000 queued took 140 MB). Zero refuses every request that cannot start at once. Only
    /// matters with [`slots`](Self::slots).
    pub fn max_queue(mut self, max: usize) -> Self {
        self.settings.max_queue = Some(max);
        self.remake_slots()
    }

    /// The order in which requests waiting for a slot are served: [`QueueOrder::Fifo`] (the
    /// default) or [`QueueOrder::Edf`], earliest deadline first (requests without a deadline
    /// after those with one, in arrival order). Only matters with [`slots`](Self::slots).
    pub fn queue(mut self, order: QueueOrder) -> Self {
        self.settings.queue = order;
        self.remake_slots()
    }

    /// Predictive admission: a request that arrives when every slot is busy, and whose expected
    /// wait for one (`ceil((waiters ahead + 1) / slots)` times a moving average of recent work
    /// times) would leave it less than `min_useful` before its cutoff, is refused at once with
    /// 503 and `Retry-After: 0` (outcome `shed`) instead of queuing to fail later. A request that
    /// queued is checked again when it is granted a slot, with the time really left. Nothing is
    /// shed while a slot is free, before any work time has been observed, or without a
    /// deadline. Default off; only matters with [`slots`](Self::slots).
    ///
    /// `min_useful` is the least time the work needs to be worth starting: the work's usual
    /// duration is a good value.
    pub fn admission(mut self, min_useful: Duration) -> Self {
        self.settings.min_useful = Some(min_useful);
        self.remake_slots()
    }

    /// A cap on the wait for a slot: a request that arrives when every slot is busy and whose
    /// expected wait (as [`admission`](Self::admission) predicts it: `ceil((waiters ahead + 1)
    /// / slots)` times a moving average of recent work times) exceeds `max_wait` is refused at
    /// once with 503 and `Retry-After: 0` (outcome `shed`). Checked on arrival only: a request
    /// admitted is never refused later for having waited. Like admission, nothing is shed
    /// while a slot is free, before any work time has been observed, or without a deadline.
    /// Works with or without [`admission`](Self::admission). Default off; only matters with
    /// [`slots`](Self::slots).
    ///
    /// Under overload the queue then stays about `max_wait` deep, so the requests served wait
    /// about `max_wait` rather than most of their budget.
    pub fn max_queue_wait(mut self, max_wait: Duration) -> Self {
        self.settings.max_queue_wait = Some(max_wait);
        self.remake_slots()
    }

    /// A bound on how late the service's runtime may run: while a timer the layer sets for
    /// itself every 5 ms fires `max_lag` late or more (or is overdue by that much), every
    /// arrival is refused at once with 503 and `Retry-After: 0` (outcome `shed`), free slot or
    /// not, budget or not, before it costs any work or a call downstream. A hop whose processor
    /// is the bottleneck then spends it on the requests it admitted instead of on requests that
    /// would miss their deadlines anyway. Default off; only matters with
    /// [`slots`](Self::slots) (give a hop that needs no limit of its own a large count).
    pub fn max_runtime_lag(mut self, max_lag: Duration) -> Self {
        self.settings.max_lag = Some(max_lag);
        self.remake_slots()
    }

    /// A fresh set of slots with the current settings, if the layer has slots.
    fn remake_slots(mut self) -> Self {
        if let Some(slots) = &self.settings.slots {
            let count = slots.count();
            self = self.slots(count);
        }
        self
    }

    /// Also read gRPC's `grpc-timeout` header on every request, not only on gRPC ones (which
    /// always have it read); when both headers are present the tightest budget wins, and a
    /// malformed value in either is answered 400 (INVALID_ARGUMENT to a gRPC caller). Default
    /// `false`.
    pub fn grpc_timeout(mut self, read: bool) -> Self {
        let set = self.settings.sources.set;
        self.settings.sources.set = if read {
            set.with(Source::GrpcTimeout)
        } else {
            set.without(Source::GrpcTimeout)
        };
        self
    }

    /// The headers a budget is read from (default: `Deadline-Budget-Ms` alone); replaces the
    /// whole set, [`grpc_timeout`](Self::grpc_timeout) included. Every enabled source is read,
    /// the tightest valid budget wins, and a malformed value in any of them is answered 400;
    /// a source not in the set is not read at all. An empty set runs every request without a
    /// deadline. See [`sources`](super::sources) for the absolute `X-Request-Deadline`.
    ///
    /// ```
    /// use deadline::inbound::SourceSet;
    /// use deadline_http::EnforceDeadlineLayer;
    ///
    /// let accept: SourceSet = "deadline-budget-ms,connect-timeout-ms".parse().unwrap();
    /// let layer = EnforceDeadlineLayer::new("inventory").accept(accept);
    /// # let _ = layer;
    /// ```
    pub fn accept(mut self, sources: SourceSet) -> Self {
        self.settings.sources.set = sources;
        self
    }

    /// How far an absolute deadline's clock is trusted (default: 50 ms assumed skew kept back
    /// from every absolute deadline, clocks 60 s apart counted as broken).
    pub fn skew_guard(mut self, guard: SkewGuard) -> Self {
        self.settings.sources.guard = guard;
        self
    }

    /// Absolute deadlines ignored so far because they disagreed with a relative budget by
    /// more than the maximum skew (shared by every clone of this layer and its services).
    pub fn ignored_absolute_deadlines(&self) -> u64 {
        self.settings.sources.ignored()
    }

    /// Whatever stands in front of this hop (a proxy, a load balancer) gives up after
    /// `timeout`: the hop's budget becomes the smaller of the caller's and `timeout` less the
    /// [`front_margin`](Self::front_margin), and a request without a budget header gets that as
    /// its budget (it is then treated as budgeted: its answer shows the trace, its calls carry
    /// the budget). So the hop answers with its own 504 and trace before the front's timer
    /// fires, instead of working on after the front's bodyless 504. When the front set the
    /// budget, the hop's trace says so with a `budget:front` span. Default: none.
    ///
    /// ```
    /// use std::time::Duration;
    /// use deadline_http::EnforceDeadlineLayer;
    ///
    /// // nginx in front with `proxy_read_timeout 1s`.
    /// let gateway = EnforceDeadlineLayer::new("gateway").front_timeout(Duration::from_secs(1));
    /// # let _ = gateway;
    /// ```
    pub fn front_timeout(mut self, timeout: Duration) -> Self {
        self.settings.front.timeout = Some(timeout);
        self
    }

    /// What is kept from the [`front_timeout`](Self::front_timeout) for the answer's way back
    /// through the front and the time the front spent before this hop read the request (unless
    /// [`request_start`](Self::request_start) measures it). Default
    /// [`DEFAULT_FRONT_MARGIN`](Self::DEFAULT_FRONT_MARGIN).
    pub fn front_margin(mut self, margin: Duration) -> Self {
        self.settings.front.margin = margin;
        self
    }

    /// Read `X-Request-Start` (the proxy in front's stamp of when it received the request:
    /// `t=SECONDS.FRACTION` as nginx's `$msec`, or whole seconds, milliseconds or
    /// microseconds since the epoch) and take the time since from the request's budget. The
    /// stamp is guarded as absolute deadlines are ([`skew_guard`](Self::skew_guard)): one in
    /// the future by more than the assumed skew, older than the maximum skew, or malformed is
    /// ignored and counted ([`ignored_request_starts`](Self::ignored_request_starts)). Beside an
    /// accepted `X-Request-Deadline` the stamp is not used: an absolute deadline already counts
    /// the time spent in front. Default `false`: only a proxy should set the header, and any
    /// caller can send it.
    pub fn request_start(mut self, trust: bool) -> Self {
        self.settings.front.request_start = trust;
        self
    }

    /// `X-Request-Start` values ignored so far (shared by every clone of this layer and its
    /// services).
    pub fn ignored_request_starts(&self) -> u64 {
        self.settings
            .front
            .ignored
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Add a W3C `Server-Timing` header to every answer (`queue;dur=…, work;dur=…,
    /// budget;dur=…`, in milliseconds; no `budget` metric for a request without one), so a
    /// browser's developer tools show where this hop's time went. Default `false`: the header
    /// costs every answer (a value made, a header line written) and shows this hop's queue and
    /// work times to whoever calls, so the application turns it on where it wants them seen.
    /// On, it goes on every answer whatever the [`trace_exposure`](Self::trace_exposure) (a
    /// browser sends no budget); the exposure governs `Deadline-Trace` only. A `Server-Timing`
    /// the inner service wrote itself is kept either way.
    pub fn server_timing(mut self, on: bool) -> Self {
        self.settings.server_timing = on;
        self
    }

    /// Which callers get this hop's `Deadline-Trace`: callers that sent a budget in any
    /// accepted dialect ([`TraceExposure::Budgeted`](super::TraceExposure::Budgeted), the
    /// default: a deadline-aware caller that can read it), everyone
    /// ([`Always`](super::TraceExposure::Always)), callers an application predicate trusts,
    /// or nobody. A service that the public can reach limits it: the trace is a map of the
    /// internal call graph and its timings (see [`exposure`](super::exposure) for the rule).
    /// Hold reports, metrics and outbound calls are the same whatever the exposure.
    pub fn trace_exposure(mut self, exposure: super::TraceExposure) -> Self {
        self.settings.exposure = exposure;
        self
    }

    /// Also puts each request's [`DeadlineContext`](crate::DeadlineContext) and, when it has
    /// one, its [`Deadline`](deadline::Deadline) in the request extensions (default: off).
    ///
    /// Off, the inner service finds them where it runs: [`DeadlineContext::current`](
    /// crate::DeadlineContext::current), [`current_deadline`](crate::current_deadline) and the
    /// axum extractors read the request's task-local context. Turn this on for code that reads
    /// the extensions directly (a tower layer of its own between this one and the handler, or
    /// work that moves the request to another task). It is off by default because it costs
    /// every request four heap allocations and about a thousand instructions (the extension
    /// map, its table and two boxes, and dropping them), which nothing in this library needs.
    pub fn request_extensions(mut self, on: bool) -> Self {
        self.settings.extensions = on;
        self
    }

    /// Whether a request that arrives without a budget still gets a
    /// [`DeadlineContext`](crate::DeadlineContext) when its answer will not carry this hop's
    /// trace (default: `false`).
    ///
    /// Off (the default), such a request runs as if the layer were not in front of the handler:
    /// [`DeadlineContext::current`](crate::DeadlineContext::current) is `None` in it (or, behind
    /// an outer enforce layer that made a context, that one), the axum `DeadlineContext`
    /// extractor rejects it (extract `Option<DeadlineContext>` to accept it),
    /// and the layer makes no context, no trace and no timer for it: with no `on_hold` hook,
    /// hold log or OpenTelemetry listening (each builds a report of its own), it allocates
    /// nothing beyond what the handler and hyper do. Its outbound calls, spawned tasks and
    /// statements behave as they do without a deadline, which is what they do in a context
    /// without one too. Its hold is reported and counted as every request's is, and it still
    /// waits for a worker slot when the layer has slots. The request keeps its context when any
    /// of these needs it: a budget (from any accepted source), an answer that shows this hop's
    /// trace (see [`trace_exposure`](Self::trace_exposure): with `Off`, `Budgeted` for a caller
    /// that sent none, or a trust predicate that says no, it does not),
    /// [`request_extensions`](Self::request_extensions), or an OpenTelemetry server span (its
    /// outbound calls' spans are its children). Baseline mode (`enforce(false)`) always makes
    /// a context.
    ///
    /// What it saves, measured in `docs/performance.md`: the context's allocation and its
    /// bookkeeping, about 320 instructions a request; every request that keeps its context
    /// pays 20 to 30 instructions for the choice. Turn it on for handlers that need a context
    /// on every request (the axum `DeadlineContext` extractor without `Option`).
    ///
    /// ```
    /// use deadline_http::EnforceDeadlineLayer;
    /// use deadline_http::enforce::TraceExposure;
    ///
    /// // Every request gets a context, and every answer a trace: an internal service whose
    /// // handlers extract `DeadlineContext` whether or not the caller sent a budget.
    /// let internal = EnforceDeadlineLayer::new("inventory")
    ///     .trace_exposure(TraceExposure::Always)
    ///     .context_without_budget(true);
    /// # let _ = internal;
    /// ```
    pub fn context_without_budget(mut self, on: bool) -> Self {
        self.settings.context_without_budget = on;
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

    /// Records every request's hold in `metrics`' Prometheus series (feature `metrics`; see
    /// [`crate::metrics`]).
    #[cfg(feature = "metrics")]
    pub fn record_metrics(mut self, metrics: &crate::metrics::ServiceMetrics) -> Self {
        self.settings.prometheus = crate::metrics_hook::HopHook::new(metrics);
        self
    }
}

#[cfg(feature = "otel")]
impl EnforceDeadlineLayer {
    /// Where the requests' OpenTelemetry `SERVER` spans go (feature `otel`; default: the
    /// global tracer provider, looked up per request). See [`crate::otel`].
    pub fn tracing(mut self, tracing: crate::otel::Tracing) -> Self {
        self.settings.tracing = tracing;
        self
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

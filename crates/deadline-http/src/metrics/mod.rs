//! Prometheus metrics (cargo feature `metrics`): what the layers saw, in a registry the
//! application owns and serves.
//!
//! A single timeout counter does not say where the budget ran out. These metrics do: the budget
//! each request arrived with, how long it queued and worked, how much of its budget was left
//! when the reply went out, which phase ran out of time, and (the waste the library exists to
//! remove) how many seconds of work went on after the caller had left.
//!
//! ```
//! use deadline_http::EnforceDeadlineLayer;
//! use deadline_http::metrics::{DeadlineMetrics, Registry};
//!
//! let mut registry = Registry::default();
//! let metrics = DeadlineMetrics::register(&mut registry);
//! let inventory = metrics.service("inventory");
//! let layer = EnforceDeadlineLayer::new("inventory").record_metrics(&inventory);
//! // ... serve, and answer `GET /metrics` with `deadline_http::metrics::scrape(&registry)`.
//! let text = deadline_http::metrics::encode(&registry).unwrap();
//! assert!(text.contains("deadline_requests_total{service=\"inventory\",outcome=\"ok\"} 0"));
//! # let _ = layer;
//! ```
//!
//! # The metric set
//!
//! Every series has a `service` label (the name given to [`DeadlineMetrics::service`]); the
//! outbound ones also a `target` (the downstream's name).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `deadline_requests_total` | counter | `outcome` | requests by how they ended: `ok`, `deadline`, `hung_up`, `rejected`, `malformed`, `expired_on_arrival`, `shed`, `error` |
//! | `deadline_budget_seconds` | histogram | | the budget a request arrived with (requests with one) |
//! | `deadline_queue_wait_seconds` | histogram | | time waiting for a worker slot (requests not rejected on arrival) |
//! | `deadline_work_seconds` | histogram | | time the work held a worker (requests whose work started) |
//! | `deadline_headroom_seconds` | histogram | | the budget left when the reply was written (requests with a budget whose reply was written; a late reply counts as 0) |
//! | `deadline_exceeded_total` | counter | `phase` | 504s the layer gave because this hop's time ran out: `queue`, `work`, `calling`, and `stream` for a response body it ended at the cutoff |
//! | `deadline_worker_seconds_after_caller_left_total` | counter | | seconds of work after the caller had gone: work nobody was waiting for |
//! | `deadline_attempts_total` | counter | `target`, `kind` | outbound attempts sent: `first`, `retry`, `hedge` |
//! | `deadline_attempts_skipped_total` | counter | `target`, `reason` | attempts the planner did not send: `not_enough_time`, `throttled`, `pushback` |
//! | `deadline_call_duration_seconds` | histogram | `target` | one outbound call, all its attempts, until it returned or was dropped |
//! | `deadline_queries_total` | counter | `outcome` | database statements by how they ended: `ok`, `deadline`, `cancelled`, `not_sent`, `error` ([`QueryMetrics`]) |
//! | `deadline_query_seconds` | histogram | | one database statement's time (statements sent) |
//! | `deadline_pool_wait_seconds` | histogram | | time waiting for a pooled database connection |
//!
//! `deadline_exceeded_total` counts only where the time ran out: a handler that relays its
//! downstream's 504 ends as `outcome="deadline"` in `deadline_requests_total`, but the phase is
//! counted once, at the hop that ran out.
//!
//! With enforcement on, the work stops the moment the caller hangs up, so
//! `deadline_worker_seconds_after_caller_left_total` stays at 0; work the layer cannot stop
//! (a thread in [`run_blocking`](crate::run_blocking), a task spawned with plain
//! `tokio::spawn`) is outside the hold and not counted. Without enforcement (the baseline), the
//! work runs on after the caller left and every second of it is counted.
//!
//! # Buckets and labels
//!
//! The histograms share one set of buckets, from 1 ms to an hour in a 1–2.5–5 series up to 10 s
//! and then 30 s, 1, 5, 15 and 60 minutes: budgets in practice run from a few milliseconds
//! (an in-datacentre call) to minutes (a batch job), and a deadline is worth reading at each of
//! those scales. Every label value comes from a fixed set (the outcomes, phases, attempt kinds
//! and skip reasons above) or from the application (its service and target names): no request
//! ids and no paths, so the number of series stays bounded.
//!
//! # Cost
//!
//! Every series of a service is created when [`DeadlineMetrics::service`] is called (so it is
//! scraped as 0 from the start), and the layers keep handles to them: recording a request is a
//! few atomic additions and histogram observations (a short uncontended lock each), with no
//! lookup and no allocation. The one exception is an outbound client with no target name: its
//! target is the request URI's authority, looked up per call. Name the target to avoid it.
//!
//! # Why `prometheus-client`
//!
//! It is the Prometheus project's own Rust client, it writes the OpenMetrics text format that
//! Prometheus scrapes, its metrics are plain values the application registers in a
//! [`Registry`] it owns (no global registry, so two services in one process or one test do not
//! collide), and it is light: no protobuf, no HTTP server, one small lock crate. (It appends
//! `_total` to counter names itself, so they are registered without it.)

mod call;
mod hop;
mod query;

#[cfg(feature = "axum")]
mod route;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use http::{HeaderValue, Response, StatusCode};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
pub use prometheus_client::registry::Registry;

pub use call::{AttemptKind, SkipReason};
pub(crate) use call::{CallRecorder, TargetRecorder};
pub(crate) use hop::HopRecorder;
pub use hop::Outcome;
pub use query::{QueryMetrics, QueryOutcome};
#[cfg(feature = "axum")]
pub use route::route;

/// The histograms' bucket bounds, in seconds: 1 ms to an hour (see the
/// [module docs](self#buckets-and-labels)).
pub const BUCKETS: [f64; 18] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// The content type of [`encode`]'s text: the OpenMetrics text format.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

type Seconds = Counter<f64, AtomicU64>;
type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// The metric families, registered once in the application's registry; every service's series
/// live in them.
#[derive(Debug)]
struct Families {
    requests: Family<OutcomeLabels, Counter>,
    budget: Histograms<ServiceLabels>,
    queue_wait: Histograms<ServiceLabels>,
    work: Histograms<ServiceLabels>,
    headroom: Histograms<ServiceLabels>,
    exceeded: Family<PhaseLabels, Counter>,
    after_caller_left: Family<ServiceLabels, Seconds>,
    attempts: Family<AttemptLabels, Counter>,
    skipped: Family<SkipLabels, Counter>,
    call_duration: Histograms<TargetLabels>,
    queries: Family<QueryLabels, Counter>,
    query_seconds: Histograms<ServiceLabels>,
    pool_wait: Histograms<ServiceLabels>,
}

/// The deadline metric families, registered in an application's [`Registry`]. Make one per
/// registry, then one [`ServiceMetrics`] per service name with [`service`](Self::service).
///
/// Cheap to clone: clones share the families.
#[derive(Clone, Debug)]
pub struct DeadlineMetrics {
    families: Arc<Families>,
}

impl DeadlineMetrics {
    /// Registers the deadline metric families (see the [module docs](self#the-metric-set)) in
    /// `registry`. Call it once per registry: a second call registers the names again, and the
    /// scrape would repeat them.
    pub fn register(registry: &mut Registry) -> DeadlineMetrics {
        fn histograms<L: Clone + std::hash::Hash + Eq>() -> Histograms<L> {
            Family::new_with_constructor(histogram as fn() -> Histogram)
        }
        let families = Families {
            requests: Family::default(),
            budget: histograms(),
            queue_wait: histograms(),
            work: histograms(),
            headroom: histograms(),
            exceeded: Family::default(),
            after_caller_left: Family::default(),
            attempts: Family::default(),
            skipped: Family::default(),
            call_duration: histograms(),
            queries: Family::default(),
            query_seconds: histograms(),
            pool_wait: histograms(),
        };
        // Counters are registered without `_total`: the encoder appends it.
        registry.register(
            "deadline_requests",
            "Requests by how they ended at this hop",
            families.requests.clone(),
        );
        registry.register(
            "deadline_budget_seconds",
            "The budget a request arrived with",
            families.budget.clone(),
        );
        registry.register(
            "deadline_queue_wait_seconds",
            "Time a request waited for a worker slot",
            families.queue_wait.clone(),
        );
        registry.register(
            "deadline_work_seconds",
            "Time a request's work held a worker",
            families.work.clone(),
        );
        registry.register(
            "deadline_headroom_seconds",
            "The budget left when the reply was written",
            families.headroom.clone(),
        );
        registry.register(
            "deadline_exceeded",
            "Answers 504 because this hop's time ran out, by the phase it ran out in",
            families.exceeded.clone(),
        );
        registry.register(
            "deadline_worker_seconds_after_caller_left",
            "Seconds of work done after the caller had gone: work nobody was waiting for",
            families.after_caller_left.clone(),
        );
        registry.register(
            "deadline_attempts",
            "Outbound attempts sent, by kind",
            families.attempts.clone(),
        );
        registry.register(
            "deadline_attempts_skipped",
            "Outbound attempts not sent, by reason",
            families.skipped.clone(),
        );
        registry.register(
            "deadline_call_duration_seconds",
            "One outbound call with all its attempts",
            families.call_duration.clone(),
        );
        registry.register(
            "deadline_queries",
            "Database statements by how they ended",
            families.queries.clone(),
        );
        registry.register(
            "deadline_query_seconds",
            "One database statement's time",
            families.query_seconds.clone(),
        );
        registry.register(
            "deadline_pool_wait_seconds",
            "Time waiting for a pooled database connection",
            families.pool_wait.clone(),
        );
        DeadlineMetrics {
            families: Arc::new(families),
        }
    }

    /// The series of the service called `name` (the `service` label), all created now at 0.
    /// Give it to the service's [`EnforceDeadlineLayer`](crate::EnforceDeadlineLayer) and its
    /// outbound clients with their `record_metrics` methods.
    pub fn service(&self, name: impl Into<String>) -> ServiceMetrics {
        let service: Arc<str> = Arc::from(name.into());
        let hop = HopRecorder::new(&self.families, &service);
        ServiceMetrics {
            families: self.families.clone(),
            service,
            hop: Arc::new(hop),
            targets: Arc::default(),
        }
    }
}

/// One service's deadline series: made by [`DeadlineMetrics::service`], given to that service's
/// layers. Cheap to clone.
#[derive(Clone)]
pub struct ServiceMetrics {
    families: Arc<Families>,
    service: Arc<str>,
    hop: Arc<HopRecorder>,
    /// Each target's series, resolved at its first call and kept: a client with no target
    /// name looks up its request's authority here instead of resolving seven series per call.
    targets: Arc<Mutex<HashMap<Arc<str>, Arc<TargetRecorder>>>>,
}

impl fmt::Debug for ServiceMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceMetrics")
            .field("service", &self.service)
            .finish_non_exhaustive()
    }
}

impl ServiceMetrics {
    /// The `service` label.
    pub fn name(&self) -> &str {
        &self.service
    }

    /// The database series of this service (created now at 0): give them to the database
    /// pool that runs statements for it.
    pub fn queries(&self) -> QueryMetrics {
        QueryMetrics::new(&self.families, &self.service)
    }

    pub(crate) fn hop(&self) -> Arc<HopRecorder> {
        self.hop.clone()
    }

    /// The outbound series for calls to `target`, created at its first call.
    pub(crate) fn target(&self, target: &str) -> Arc<TargetRecorder> {
        // A poisoned lock only means another thread panicked while inserting a finished value.
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(recorder) = targets.get(target) {
            return Arc::clone(recorder);
        }
        let name: Arc<str> = Arc::from(target);
        let recorder = Arc::new(TargetRecorder::new(&self.families, &self.service, &name));
        targets.insert(name, Arc::clone(&recorder));
        recorder
    }
}

/// The registry in the OpenMetrics text format, as Prometheus scrapes it.
pub fn encode(registry: &Registry) -> Result<String, fmt::Error> {
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, registry)?;
    Ok(text)
}

/// The answer to a scrape (`GET /metrics`): the registry's text with its [`CONTENT_TYPE`], or a
/// 500 in the unlikely case a metric fails to encode.
pub fn scrape(registry: &Registry) -> Response<String> {
    let (status, body, content_type) = match encode(registry) {
        Ok(text) => (StatusCode::OK, text, CONTENT_TYPE),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the metrics could not be encoded\n".to_owned(),
            "text/plain; charset=utf-8",
        ),
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static(content_type),
    );
    response
}

/// A label value from a fixed set of lowercase tokens.
trait Token: Copy {
    fn token(self) -> &'static str;
}

/// Encodes a [`Token`] as its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Tok<T>(T);

impl<T: Token> EncodeLabelValue for Tok<T> {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.0.token())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ServiceLabels {
    service: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct OutcomeLabels {
    service: Arc<str>,
    outcome: Tok<Outcome>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct QueryLabels {
    service: Arc<str>,
    outcome: Tok<QueryOutcome>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PhaseLabels {
    service: Arc<str>,
    phase: Tok<crate::phase::Phase>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct TargetLabels {
    service: Arc<str>,
    target: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct AttemptLabels {
    service: Arc<str>,
    target: Arc<str>,
    kind: Tok<AttemptKind>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SkipLabels {
    service: Arc<str>,
    target: Arc<str>,
    reason: Tok<SkipReason>,
}

impl Token for crate::phase::Phase {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

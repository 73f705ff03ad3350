//! The metric families, registered once in an application's registry; every service's series
//! live in them.

use std::sync::atomic::AtomicU64;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::histogram::SecondsHistogram;
use super::labels::{
    AttemptLabels, OutcomeLabels, PhaseLabels, QueryLabels, ServiceLabels, SkipLabels, TargetLabels,
};

pub(super) type Seconds = Counter<f64, AtomicU64>;
pub(super) type Histograms<L> = Family<L, SecondsHistogram, fn() -> SecondsHistogram>;

/// The metric families, registered once in the application's registry; every service's series
/// live in them.
#[derive(Debug)]
pub(super) struct Families {
    pub(super) requests: Family<OutcomeLabels, Counter>,
    pub(super) budget: Histograms<ServiceLabels>,
    pub(super) queue_wait: Histograms<ServiceLabels>,
    pub(super) work: Histograms<ServiceLabels>,
    pub(super) headroom: Histograms<ServiceLabels>,
    pub(super) exceeded: Family<PhaseLabels, Counter>,
    pub(super) after_caller_left: Family<ServiceLabels, Seconds>,
    pub(super) attempts: Family<AttemptLabels, Counter>,
    pub(super) skipped: Family<SkipLabels, Counter>,
    pub(super) call_duration: Histograms<TargetLabels>,
    pub(super) queries: Family<QueryLabels, Counter>,
    pub(super) query_seconds: Histograms<ServiceLabels>,
    pub(super) pool_wait: Histograms<ServiceLabels>,
}

impl Families {
    /// Every family, registered in `registry` (counters without `_total`: the encoder appends
    /// it).
    pub(super) fn register(registry: &mut Registry) -> Families {
        fn histograms<L: Clone + std::hash::Hash + Eq>() -> Histograms<L> {
            Family::new_with_constructor(SecondsHistogram::default as fn() -> SecondsHistogram)
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
        families
    }
}

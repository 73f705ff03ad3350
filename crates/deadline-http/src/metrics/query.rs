//! Database statements' series (fed by the `deadline-postgres` crate): statements by outcome,
//! their time, and the time spent waiting for a pooled connection.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::{Families, QueryLabels, ServiceLabels, Tok, Token};

/// The `outcome` label of `deadline_queries_total`: how one database statement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueryOutcome {
    /// The statement finished.
    Ok,
    /// The request's deadline stopped it: the server's `statement_timeout` or the local timer.
    Deadline,
    /// Its caller stopped waiting (the statement's future was dropped) while it ran.
    Cancelled,
    /// It was not sent: too little time was left (or the pool wait used it up).
    NotSent,
    /// The database or the connection failed.
    Error,
}

impl QueryOutcome {
    /// Every outcome, in label order.
    pub const ALL: [QueryOutcome; 5] = [
        QueryOutcome::Ok,
        QueryOutcome::Deadline,
        QueryOutcome::Cancelled,
        QueryOutcome::NotSent,
        QueryOutcome::Error,
    ];

    /// The label value: `ok`, `deadline`, `cancelled`, `not_sent` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryOutcome::Ok => "ok",
            QueryOutcome::Deadline => "deadline",
            QueryOutcome::Cancelled => "cancelled",
            QueryOutcome::NotSent => "not_sent",
            QueryOutcome::Error => "error",
        }
    }
}

impl Token for QueryOutcome {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

/// One service's database series, from [`ServiceMetrics::queries`](super::ServiceMetrics::queries).
/// Cheap to clone; recording is a few atomic additions.
#[derive(Clone, Debug)]
pub struct QueryMetrics {
    inner: Arc<Series>,
}

#[derive(Debug)]
struct Series {
    outcomes: [Counter; QueryOutcome::ALL.len()],
    seconds: Histogram,
    pool_wait: Histogram,
}

impl QueryMetrics {
    pub(super) fn new(families: &Families, service: &Arc<str>) -> QueryMetrics {
        let labels = ServiceLabels {
            service: service.clone(),
        };
        QueryMetrics {
            inner: Arc::new(Series {
                outcomes: QueryOutcome::ALL.map(|outcome| {
                    families.queries.get_or_create_owned(&QueryLabels {
                        service: service.clone(),
                        outcome: Tok(outcome),
                    })
                }),
                seconds: families.query_seconds.get_or_create_owned(&labels),
                pool_wait: families.pool_wait.get_or_create_owned(&labels),
            }),
        }
    }

    /// One statement ended with `outcome` after `elapsed` (zero for one not sent).
    pub fn statement(&self, outcome: QueryOutcome, elapsed: Duration) {
        self.inner.outcomes[outcome as usize].inc();
        if outcome != QueryOutcome::NotSent {
            self.inner.seconds.observe(elapsed.as_secs_f64());
        }
    }

    /// A request waited `waited` for a pooled connection (whether it got one or gave up).
    pub fn pool_wait(&self, waited: Duration) {
        self.inner.pool_wait.observe(waited.as_secs_f64());
    }
}

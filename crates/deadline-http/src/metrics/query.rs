//! Database statements' series (fed by the `deadline-postgres` crate): statements by outcome,
//! their time, and the time spent waiting for a pooled connection.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;

use super::families::Families;
use super::histogram::SecondsHistogram;
use super::labels::{QueryLabels, QueryOutcome, ServiceLabels, Tok};

/// One service's database series, from [`ServiceMetrics::queries`](super::ServiceMetrics::queries).
/// Cheap to clone; recording is a few atomic additions.
#[derive(Clone, Debug)]
pub struct QueryMetrics {
    inner: Arc<Series>,
}

#[derive(Debug)]
struct Series {
    outcomes: [Counter; QueryOutcome::ALL.len()],
    seconds: SecondsHistogram,
    pool_wait: SecondsHistogram,
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

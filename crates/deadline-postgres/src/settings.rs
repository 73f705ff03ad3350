//! [`Settings`]: what every statement from one pool follows, and their defaults.
//!
//! A leaf: the pool builds it, and the connection, the statement loop and the record read it;
//! it imports none of them.

use std::sync::Arc;
use std::time::Duration;

use deadline::CallPolicy;
use deadline::plan::{DEFAULT_MARGIN, DEFAULT_MIN_USEFUL};

/// The default smallest time left for a transaction to be begun (on top of the margin).
pub const DEFAULT_TRANSACTION_MIN: Duration = Duration::from_millis(100);

/// The default longest a connection whose statement was interrupted is kept out of the pool
/// while it finishes (see [`DeadlinePool::drain_limit`](crate::DeadlinePool::drain_limit)).
pub const DEFAULT_DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// The default longest wait for a pooled connection outside any deadline (see
/// [`DeadlinePool::wait_limit`](crate::DeadlinePool::wait_limit)).
pub const DEFAULT_WAIT_LIMIT: Duration = Duration::from_secs(5);

/// The default name of the database in traces and 504 bodies.
pub const DEFAULT_NAME: &str = "postgres";

/// The longest `statement_timeout` a deadline can give (an hour, the longest budget the HTTP
/// layer accepts by default): the planner's per-attempt timeout.
const LONGEST_STATEMENT: Duration = Duration::from_secs(3_600);

/// What every statement from one pool follows.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The core's call policy: one attempt, the margin and the minimum useful time.
    pub(crate) policy: CallPolicy,
    pub(crate) transaction_min: Duration,
    pub(crate) drain_limit: Duration,
    /// Whether statements carry `statement_timeout` (default on).
    pub(crate) server_limit: bool,
    /// Whether a statement outside any deadline whose future is dropped is cancelled on the
    /// server (default on).
    pub(crate) cancel_on_drop: bool,
    /// The longest wait for a connection outside any deadline (`None`: no limit).
    pub(crate) wait_limit: Option<Duration>,
    pub(crate) name: Arc<str>,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<deadline_http::metrics::QueryMetrics>,
}

impl Default for Settings {
    /// The margin and minimum useful time of the HTTP client (50 ms each), a transaction
    /// minimum of 100 ms, a drain limit of 10 s, `statement_timeout` on, dropped statements
    /// cancelled, a 5 s wait limit outside a deadline, no metrics.
    fn default() -> Settings {
        Settings {
            policy: Settings::policy(DEFAULT_MARGIN, DEFAULT_MIN_USEFUL),
            transaction_min: DEFAULT_TRANSACTION_MIN,
            drain_limit: DEFAULT_DRAIN_LIMIT,
            server_limit: true,
            cancel_on_drop: true,
            wait_limit: Some(DEFAULT_WAIT_LIMIT),
            name: Arc::from(DEFAULT_NAME),
            #[cfg(feature = "metrics")]
            metrics: None,
        }
    }
}

impl Settings {
    /// The one-attempt policy with this margin and minimum useful time (at least 1 ms).
    pub(crate) fn policy(margin: Duration, min_useful: Duration) -> CallPolicy {
        CallPolicy::builder()
            .timeout(LONGEST_STATEMENT)
            .attempts(1)
            .margin(margin)
            .min_useful(min_useful.max(Duration::from_millis(1)))
            .build()
            // One attempt and an hour's timeout: only a margin plus minimum useful time above
            // an hour is refused, and it is clamped here.
            .unwrap_or_else(|_| {
                CallPolicy::builder()
                    .timeout(LONGEST_STATEMENT)
                    .attempts(1)
                    .margin(DEFAULT_MARGIN)
                    .min_useful(DEFAULT_MIN_USEFUL)
                    .build()
                    .expect("the default policy is valid")
            })
    }
}

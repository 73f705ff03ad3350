//! [`Settings`]: what every command from one pool follows, and their defaults. A leaf: the pool
//! builds it; the connection and the record read it.

use std::sync::Arc;
use std::time::Duration;

use deadline::CallPolicy;
use deadline::plan::{DEFAULT_MARGIN, DEFAULT_MIN_USEFUL};

/// The default longest wait for the late reply of a command whose caller gave up on it (not a
/// blocking one: that connection is closed at once), before the connection goes back to the
/// pool; past it the connection is closed instead. See
/// [`DeadlinePool::drain_limit`](crate::DeadlinePool::drain_limit).
pub const DEFAULT_DRAIN_LIMIT: Duration = Duration::from_millis(100);

/// The default time a blocking command's capped timeout is shortened by, for Redis's timer:
/// Redis ends a blocked command's wait on its event loop's ticks, `hz` a second (10 by
/// default), so up to 100 ms after the timeout on an idle server. See
/// [`DeadlinePool::server_tick`](crate::DeadlinePool::server_tick).
pub const DEFAULT_SERVER_TICK: Duration = Duration::from_millis(100);

/// The default name of the store in traces and 504 bodies.
pub const DEFAULT_NAME: &str = "redis";

/// The longest wait a deadline can give a command (an hour, the longest budget the HTTP layer
/// accepts by default): the planner's per-attempt timeout.
const LONGEST_COMMAND: Duration = Duration::from_secs(3_600);

/// What every command from one pool follows.
#[derive(Clone)]
pub(crate) struct Settings {
    /// The core's call policy: one attempt, the margin and the minimum useful time.
    pub(crate) policy: CallPolicy,
    pub(crate) drain_limit: Duration,
    /// Taken off a blocking command's capped timeout, for Redis's timer ticks.
    pub(crate) server_tick: Duration,
    pub(crate) name: Arc<str>,
    #[cfg(feature = "metrics")]
    pub(crate) metrics: Option<deadline_http::metrics::QueryMetrics>,
}

impl Default for Settings {
    /// The HTTP client's margin and minimum useful time (50 ms each), a 100 ms drain limit, a
    /// 100 ms server tick, no metrics.
    fn default() -> Settings {
        Settings {
            policy: Settings::policy(DEFAULT_MARGIN, DEFAULT_MIN_USEFUL),
            drain_limit: DEFAULT_DRAIN_LIMIT,
            server_tick: DEFAULT_SERVER_TICK,
            name: Arc::from(DEFAULT_NAME),
            #[cfg(feature = "metrics")]
            metrics: None,
        }
    }
}

impl Settings {
    /// The one-attempt policy with this margin and minimum useful time (at least 1 ms, so a
    /// capped blocking timeout is never written `0`).
    pub(crate) fn policy(margin: Duration, min_useful: Duration) -> CallPolicy {
        let build = |margin, min_useful| {
            CallPolicy::builder()
                .timeout(LONGEST_COMMAND)
                .attempts(1)
                .margin(margin)
                .min_useful(min_useful)
                .build()
        };
        // One attempt and an hour's timeout: only a margin plus minimum useful time above an
        // hour is refused, and then the defaults are kept.
        build(margin, min_useful.max(Duration::from_millis(1)))
            .or_else(|_| build(DEFAULT_MARGIN, DEFAULT_MIN_USEFUL))
            .expect("the default policy is valid")
    }
}

//! [`Settings`]: what every statement from one pool follows, and their defaults.
//!
//! A leaf: the pool builds it, and the connection, the statement loop and the record read it;
//! it imports none of them. It also holds the one piece of state every connection's statements
//! share: the `statement_timeout` each connection has now ([`SessionLimits`]).

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
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

/// A connection's session `statement_timeout`, as this crate last left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SessionLimit {
    /// The session's default (the server's, the role's or the database's setting, or the
    /// connection's `options`): a new connection, or one reset since.
    Default,
    /// `SET statement_timeout = ms`, left in place for the statements after it.
    Set(u64),
}

/// The most connections remembered; past it every entry is forgotten at once. A forgotten
/// connection's limit is unknown, which costs its next statement a `SET` or `RESET` sent with
/// it, never a wrong limit. Connections a pool closes leave their entry behind (the pool says
/// nothing when it closes one), so this bounds what they can leave.
const MAX_REMEMBERED: usize = 4_096;

/// Which connection: the address of its statement cache (one per live connection, however
/// many pools or `DeadlinePool`s share it) and deadpool's object id (unique within a pool and
/// never reused, so an address a closed connection left to a new one is not mistaken for it).
pub(crate) type ConnectionKey = (usize, deadpool_postgres::ObjectId);

/// The session `statement_timeout` of every connection this process's statements ran on. A
/// connection missing here has an unknown limit.
#[derive(Debug, Default)]
pub(crate) struct SessionLimits {
    by_connection: Mutex<HashMap<ConnectionKey, SessionLimit>>,
}

/// The one table: every pool's connections, so that two `DeadlinePool`s over one deadpool pool
/// agree on what each connection has.
static LIMITS: LazyLock<SessionLimits> = LazyLock::new(SessionLimits::default);

impl SessionLimits {
    /// The process's table.
    pub(crate) fn all() -> &'static SessionLimits {
        &LIMITS
    }

    /// What connection `key` has now; `None` if unknown.
    pub(crate) fn get(&self, key: ConnectionKey) -> Option<SessionLimit> {
        self.lock().get(&key).copied()
    }

    /// Connection `key` has `limit` now (`None`: unknown, as while a statement that changes it
    /// is on its way, or once the connection is closed).
    pub(crate) fn note(&self, key: ConnectionKey, limit: Option<SessionLimit>) {
        let mut map = self.lock();
        match limit {
            None => {
                map.remove(&key);
            }
            Some(limit) => {
                if map.len() >= MAX_REMEMBERED && !map.contains_key(&key) {
                    map.clear();
                }
                map.insert(key, limit);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ConnectionKey, SessionLimit>> {
        self.by_connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

//! The one statement loop: decide, limit, pipeline, cancel.
//!
//! Every statement method of [`Connection`](crate::Connection) and
//! [`Transaction`](crate::Transaction) goes through the same loop. With a deadline:
//!
//! 1. **Decide** with the core's planner ([`deadline::plan::decide`], one attempt): with the
//!    cutoff `c` (the request's deadline less its reply reserve) and `now`,
//!    `statement_timeout = floor_ms(c - now - margin)`, sent only if it is at least the minimum
//!    useful time. Otherwise [`Error::NotSent`] and a `query` span `not-sent`.
//! 2. **Prepare** a `&str` statement (one round trip, as plain tokio-postgres does for every
//!    `&str` it is given), then decide again, as the preparation took some of the time.
//! 3. **Limit, once per connection**: the server's own limit, `statement_timeout`, is a
//!    session setting, and a `SET` is a statement the server parses and runs (with the `RESET`
//!    that used to follow every statement, it cost a prepared `SELECT 1` 2.5 times its plain
//!    time). So a connection keeps the limit it was last given, and the crate remembers it
//!    per connection: a statement whose own limit is `N` runs as it is
//!    when the connection's limit `L` is [`reusable`], `N <= L <= N + slack`, with the slack
//!    [`slack_ms`] = max(N / 10, 20 ms). Otherwise `SET statement_timeout = L` is queued
//!    ahead of the statement in the same write (no extra round trip), with `L` =
//!    [`rounded_up`] `N` (half the slack added), so that the statements after it, with a
//!    little less time left, and the next requests' statements, with budgets a little longer
//!    or shorter, find it reusable too. The server stops a statement at `L`, at most half the
//!    slack past `N` when set and the whole slack when reused: never more than max(10 %,
//!    20 ms) of the statement's time past its deadline, even if this process dies. Inside a
//!    transaction it is `SET LOCAL statement_timeout = N` before each statement (the
//!    transaction's end undoes it, and the connection's own limit is left as it was).
//!
//!    The limit is put back lazily: only a statement **without** a deadline needs the
//!    session's default, so `RESET statement_timeout` is queued ahead of it (in a
//!    transaction, `SET LOCAL statement_timeout TO DEFAULT`) when the connection has a limit
//!    of this crate's, or one not known (a connection whose statement was cut before its
//!    `SET` was answered, or whose client was handed out through
//!    [`Connection::client`](crate::Connection::client)). A new connection has the default.
//! 4. **Watch**: a local timer at `N` plus half the margin. If the server's answer has not come
//!    by then, or the future is dropped (the caller hung up, the enforce layer cut the handler),
//!    a drop guard spawns PostgreSQL's cancel request (a new connection carrying the backend's
//!    key), and the connection is marked interrupted: when it is given back it is kept out of
//!    the pool until the statement has ended and `statement_timeout` is reset again. The timer
//!    is the statement's own `N`, not the connection's `L`: the client's cancel fires when the
//!    statement's time is up, whatever limit the server holds.
//!
//! Without a deadline the statement is sent as tokio-postgres sends it, under the server's own
//! `statement_timeout` (the session's default; the reset of step 3 ahead of it when a limit was
//! left), no timer. Only a statement whose future is dropped while it runs gets step 4's guard:
//! its caller has left (a client that hung up drops the handler), so it is cancelled on the
//! server and its connection drained before anyone else gets it. Without that cancel, a request
//! that hangs up while its statement waits on a lock leaves the statement waiting, and its
//! pooled connection with it, for as long as the lock is held: a handful of such callers pin the
//! whole pool. [`DeadlinePool::cancel_on_drop`](crate::DeadlinePool::cancel_on_drop) turns it
//! off.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use deadline::{Deadline, Decision, Stop};
use deadline_http::{Activity, DeadlineContext};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::error::SqlState;
use tokio_postgres::{CancelToken, Client, NoTls, Statement};

use crate::error::Error;
use crate::record::{Outcome, Record};
use crate::settings::{ConnectionKey, SessionLimit, SessionLimits, Settings};

/// What a connection's statements share with its hand-back.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// A statement's future was dropped or cut while it ran: the connection must be drained
    /// before anyone else gets it.
    pub(crate) interrupted: AtomicBool,
    /// The session ended under a statement (its backend was killed, the server went down):
    /// the connection is closed, never given back.
    pub(crate) broken: AtomicBool,
    /// The cancel request in flight, awaited before the drain.
    pub(crate) cancel: std::sync::Mutex<Option<JoinHandle<()>>>,
}

impl Shared {
    /// The cancel request in flight, if any, taken to be awaited.
    pub(crate) fn take_cancel(&self) -> Option<JoinHandle<()>> {
        self.cancel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }
}

/// A statement in flight; if dropped armed, it cancels the statement on the server (when it
/// has a client to take a cancel token from) and marks the connection interrupted.
///
/// The token is taken only then: taking one copies the client's socket settings (its host's
/// name among them, a heap allocation), which a statement that ends in time never needs.
struct InFlight<'a> {
    shared: &'a Shared,
    cancel: Option<&'a Client>,
    armed: bool,
}

impl InFlight<'_> {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        self.shared.interrupted.store(true, Ordering::SeqCst);
        let (Some(client), Ok(runtime)) =
            (self.cancel.take(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let token: CancelToken = client.cancel_token();
        // Spawned: a drop cannot wait, and the reply to the caller should not either.
        let handle = runtime.spawn(async move {
            if let Err(e) = token.cancel_query(NoTls).await {
                // The statement is still bounded by its statement_timeout.
                tracing::warn!(error = %e, "the cancel request could not be sent");
            }
        });
        let mut slot = self
            .shared
            .cancel
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *slot = Some(handle);
    }
}

/// What to run a statement with.
pub(crate) struct Runner<'a> {
    pub(crate) client: &'a Client,
    pub(crate) settings: &'a Settings,
    pub(crate) shared: &'a Arc<Shared>,
    /// Which connection, for its session limit in [`SessionLimits`].
    pub(crate) key: ConnectionKey,
    /// Inside a transaction: `SET LOCAL`, the session's limit left as it is.
    pub(crate) local: bool,
}

/// How a `&str` or an already prepared [`Statement`] becomes a statement to execute.
pub trait Sql: Sync {
    /// Prepares it on `client` (a `&str`), or hands it back (a [`Statement`]).
    fn statement<'a>(
        &'a self,
        client: &'a Client,
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send + 'a;
}

impl Sql for str {
    fn statement<'a>(
        &'a self,
        client: &'a Client,
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send + 'a {
        client.prepare(self)
    }
}

impl Sql for Statement {
    fn statement<'a>(
        &'a self,
        _client: &'a Client,
    ) -> impl Future<Output = Result<Statement, tokio_postgres::Error>> + Send + 'a {
        std::future::ready(Ok(self.clone()))
    }
}

/// What a statement waiting for its pipeline gives.
enum Cut {
    /// Too little time once prepared.
    NotSent(Stop),
    /// The database or connection failed.
    Failed(tokio_postgres::Error),
}

impl Runner<'_> {
    /// Runs one statement: `prepare` (no statement of its own, or a `Parse`), then `execute`
    /// pipelined behind the `SET`.
    pub(crate) async fn run<P, S, F, Fut, T>(&self, prepare: P, execute: F) -> Result<T, Error>
    where
        P: Future<Output = Result<S, tokio_postgres::Error>>,
        F: FnOnce(S) -> Fut,
        Fut: Future<Output = Result<T, tokio_postgres::Error>>,
    {
        if self.shared.interrupted.load(Ordering::SeqCst) {
            // The caller goes on with a connection whose last statement it dropped: that
            // statement, and a cancel sent for it, must be over before this one starts.
            self.settle().await.map_err(Error::Postgres)?;
        }
        let context = DeadlineContext::current();
        let cutoff = context.as_ref().and_then(DeadlineContext::cutoff);
        let mut record = Record::start(self.settings, context.clone());
        let Some(cutoff) = cutoff else {
            // No deadline: plain tokio-postgres, once the connection has its session's default
            // limit. The guard fires only if the statement's future is dropped while it runs: it
            // cancels the statement (unless the pool says not to) and keeps the connection out of
            // the pool until the statement has ended.
            let mut flight = InFlight {
                shared: self.shared,
                cancel: self.settings.cancel_on_drop.then_some(self.client),
                armed: true,
            };
            let limits = SessionLimits::all();
            let result = if !self.settings.server_limit
                || limits.get(self.key) == Some(SessionLimit::Default)
            {
                // Without server-side limits the crate sets none, so there is none to reset
                // (behind a pooler that refuses `SET`, a `RESET` would fail every statement).
                async { execute(prepare.await?).await }.await
            } else {
                // A limit a statement under a deadline left (or one not known): put the
                // default back in the same write, ahead of the statement (`biased`: queued in
                // this order). In a transaction, for the transaction only.
                let reset = if self.local { RESET_LOCAL } else { RESET };
                limits.note(self.key, None);
                let (reset, result) = tokio::join!(
                    biased;
                    self.client.batch_execute(reset),
                    async { execute(prepare.await?).await },
                );
                if reset.is_ok() && !self.local {
                    limits.note(self.key, Some(SessionLimit::Default));
                } else if reset.is_err() && result.is_ok() {
                    // The statement ran (and may have changed rows): its result stands. The
                    // limit is not known, so the hand-back resets it or closes the connection.
                    self.shared.interrupted.store(true, Ordering::SeqCst);
                }
                match result {
                    Ok(value) => Ok(value),
                    Err(e) => Err(reset.err().unwrap_or(e)),
                }
            };
            flight.disarm();
            if let Err(e) = &result {
                self.note_broken(e);
            }
            record.end(if result.is_ok() {
                Outcome::Ok
            } else {
                Outcome::Error
            });
            return result.map_err(Error::Postgres);
        };
        let first = match self.decide(cutoff) {
            Ok(timeout) => timeout,
            Err(stop) => {
                record.end(Outcome::NotSent);
                return Err(self.not_sent(stop));
            }
        };
        let _activity = context.as_ref().map(|c| {
            c.enter(Activity::Calling {
                target: self.settings.name.to_string(),
            })
        });
        let start = Instant::now();
        let local_end = start + first + self.settings.policy.margin() / 2;
        let mut flight = InFlight {
            shared: self.shared,
            cancel: Some(self.client),
            armed: true,
        };
        let mut sent_timeout = first;
        let pipeline = async {
            let prepared = prepare.await.map_err(Cut::Failed)?;
            let timeout = self.decide(cutoff).map_err(Cut::NotSent)?;
            sent_timeout = timeout;
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            if !self.settings.server_limit {
                execute(prepared).await.map_err(Cut::Failed)
            } else if self.local {
                let set = format!("SET LOCAL statement_timeout = {ms}");
                // `biased`: polled in this order, so queued on the connection in this order.
                let (set, result) =
                    tokio::join!(biased; self.client.batch_execute(&set), execute(prepared));
                set.map_err(Cut::Failed)?;
                result.map_err(Cut::Failed)
            } else {
                let limits = SessionLimits::all();
                if let Some(SessionLimit::Set(current)) = limits.get(self.key) {
                    if reusable(current, ms) {
                        // The connection's limit already fits: nothing to send but the
                        // statement.
                        sent_timeout = Duration::from_millis(current);
                        return execute(prepared).await.map_err(Cut::Failed);
                    }
                }
                let limit = rounded_up(ms);
                sent_timeout = Duration::from_millis(limit);
                let set = format!("SET statement_timeout = {limit}");
                // Unknown until the `SET` is answered: a statement cut before that leaves the
                // connection to the hand-back's reset, and the next statement sends its own.
                limits.note(self.key, None);
                let (set, result) =
                    tokio::join!(biased; self.client.batch_execute(&set), execute(prepared));
                set.map_err(Cut::Failed)?;
                limits.note(self.key, Some(SessionLimit::Set(limit)));
                result.map_err(Cut::Failed)
            }
        };
        let result = tokio::time::timeout_at(local_end, pipeline).await;
        let Ok(result) = result else {
            // The local timer: the statement is still running (or its answer is late); the
            // armed guard cancels it on the server as it drops.
            drop(flight);
            record.end(Outcome::Deadline);
            return Err(Error::Deadline {
                target: self.settings.name.to_string(),
                statement_timeout: sent_timeout,
                server: None,
            });
        };
        flight.disarm();
        match result {
            Ok(value) => {
                record.end(Outcome::Ok);
                Ok(value)
            }
            Err(Cut::NotSent(stop)) => {
                record.end(Outcome::NotSent);
                Err(self.not_sent(stop))
            }
            Err(Cut::Failed(e)) if e.code() == Some(&SqlState::QUERY_CANCELED) => {
                // `canceling statement due to statement timeout`: the limit this crate set.
                record.end(Outcome::Deadline);
                Err(Error::Deadline {
                    target: self.settings.name.to_string(),
                    statement_timeout: sent_timeout,
                    server: Some(e),
                })
            }
            Err(Cut::Failed(e)) => {
                self.note_broken(&e);
                record.end(Outcome::Error);
                Err(Error::Postgres(e))
            }
        }
    }

    /// Ends the interruption of a connection whose caller goes on using it: waits for the
    /// cancel request in flight (if any), absorbs a late cancel ([`absorb_late_cancel`]) and
    /// forgets the connection's limit, which the dropped statement may have left set.
    async fn settle(&self) -> Result<(), tokio_postgres::Error> {
        if let Some(cancel) = self.shared.take_cancel() {
            let _ = cancel.await;
            absorb_late_cancel(self.client).await?;
        }
        SessionLimits::all().note(self.key, None);
        self.shared.interrupted.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Marks the connection broken when `e` says its session is over: the client has seen the
    /// connection end, or the server sent a `FATAL` (or `PANIC`) error, after which it closes
    /// the session. Nothing else may be queued behind such a statement to fail with it (outside
    /// a deadline, or without `statement_timeout`), and the pool's own check
    /// ([`Client::is_closed`]) can run before the client has read the connection's end.
    fn note_broken(&self, e: &tokio_postgres::Error) {
        let fatal = e
            .as_db_error()
            .is_some_and(|db| matches!(db.severity(), "FATAL" | "PANIC"));
        if fatal || e.is_closed() || self.client.is_closed() {
            self.shared.broken.store(true, Ordering::SeqCst);
        }
    }

    /// The `statement_timeout` the core's planner gives a statement sent now, or why none is
    /// sent.
    fn decide(&self, cutoff: Deadline) -> Result<Duration, Stop> {
        let now = Instant::now().into_std();
        match deadline::plan::decide(&self.settings.policy, 0, Some(cutoff), now) {
            Decision::Send(attempt) => Ok(attempt
                .budget
                .map_or(attempt.wait, |budget| budget.as_duration())),
            Decision::Stop(stop) => Err(stop),
        }
    }

    fn not_sent(&self, stop: Stop) -> Error {
        let (remaining, needed) = match stop {
            Stop::NotEnoughTime {
                remaining, needed, ..
            } => (remaining, needed),
            _ => (
                Duration::ZERO,
                self.settings.policy.margin() + self.settings.policy.min_useful(),
            ),
        };
        Error::NotSent {
            target: self.settings.name.to_string(),
            remaining,
            needed,
        }
    }
}

/// A statement that takes a moment, run on a connection after a cancel request was sent for
/// it (see [`absorb_late_cancel`]).
pub(crate) const FENCE: &str = "SELECT pg_sleep(0.05)";

/// Runs [`FENCE`] after a cancel request for `client`'s statement has been sent, so that a
/// cancel the server acts on late stops the fence, not the next user's statement.
///
/// The cancel request returns once it is written; the server signals the backend a moment
/// later. A signal that reaches the backend while it waits for a command is ignored, one that
/// reaches it while a statement runs cancels that statement, whichever it is. The fence is the
/// statement that runs then: its `57014` (query cancelled) is the late cancel, absorbed.
/// A signal later than the fence's 50 ms would still land on whatever runs next; that window
/// is closed only by reading the cancel connection to its end, which tokio-postgres does not.
pub(crate) async fn absorb_late_cancel(client: &Client) -> Result<(), tokio_postgres::Error> {
    match client.batch_execute(FENCE).await {
        Err(e) if e.code() == Some(&SqlState::QUERY_CANCELED) => Ok(()),
        other => other,
    }
}

/// Puts `statement_timeout` back to the session's default (the server's, the role's or the
/// database's setting, or the connection's `options`).
pub(crate) const RESET: &str = "RESET statement_timeout";

/// The same for the rest of a transaction only.
const RESET_LOCAL: &str = "SET LOCAL statement_timeout TO DEFAULT";

/// The most a connection's limit may run past a statement's own `statement_timeout` of `ms`
/// and still be reused for it: a tenth of it, or 20 ms for one under 200 ms.
pub fn slack_ms(ms: u64) -> u64 {
    (ms / 10).max(20)
}

/// Whether a connection whose session limit is `current` ms can run a statement whose own
/// limit is `ms` without a `SET`: never shorter (the server would stop it before its time),
/// at most [`slack_ms`] longer.
pub fn reusable(current: u64, ms: u64) -> bool {
    current >= ms && current - ms <= slack_ms(ms)
}

/// The limit a `SET` gives the connection for a statement whose own limit is `ms`: rounded up
/// by half the slack, so that the statements after it (less time left) and those of the next
/// requests (budgets a little longer or shorter) find it [`reusable`] as well.
pub fn rounded_up(ms: u64) -> u64 {
    ms.saturating_add(slack_ms(ms) / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slack_is_a_tenth_or_20_ms() {
        assert_eq!(slack_ms(0), 20);
        assert_eq!(slack_ms(199), 20);
        assert_eq!(slack_ms(200), 20);
        assert_eq!(slack_ms(950), 95);
        assert_eq!(slack_ms(u64::MAX), u64::MAX / 10);
    }

    #[test]
    fn a_limit_is_reused_never_shorter_and_at_most_the_slack_longer() {
        for ms in [0, 1, 50, 199, 200, 930, 950, 3_600_000] {
            let set = rounded_up(ms);
            assert!(reusable(set, ms), "{ms}: its own rounded limit {set}");
            assert!(
                set - ms <= slack_ms(ms) / 2,
                "{ms}: rounded up past half the slack"
            );
            assert!(reusable(ms, ms) && reusable(ms + slack_ms(ms), ms), "{ms}");
            assert!(!reusable(ms + slack_ms(ms) + 1, ms), "{ms}: past the slack");
            if ms > 0 {
                assert!(
                    !reusable(ms - 1, ms),
                    "{ms}: shorter than the statement's own"
                );
            }
        }
        // The statements after a SET, with less time left, reuse it until the time gone by
        // and half the slack together exceed their own slack.
        let set = rounded_up(950);
        assert!(reusable(set, 950 - 40));
        assert!(!reusable(set, 950 - 60));
        assert_eq!(rounded_up(u64::MAX), u64::MAX);
    }
}

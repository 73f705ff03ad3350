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
//! 3. **Pipeline**: `SET statement_timeout = N` (a simple query), the statement
//!    (Bind/Execute/Sync) and `RESET statement_timeout` are queued on the connection in that
//!    order in one poll, so they leave in one write and cost no extra round trip; inside a
//!    transaction it is `SET LOCAL statement_timeout = N` and no `RESET` (the transaction's end
//!    undoes it). The server stops the statement at `N` even if this process dies.
//! 4. **Watch**: a local timer at `N` plus half the margin. If the server's answer has not come
//!    by then, or the future is dropped (the caller hung up, the enforce layer cut the handler),
//!    a drop guard spawns PostgreSQL's cancel request (a new connection carrying the backend's
//!    key), and the connection is marked interrupted: when it is given back it is kept out of
//!    the pool until the statement has ended and `statement_timeout` is reset again.
//!
//! Without a deadline the statement is sent as tokio-postgres sends it: nothing added, the
//! server's own `statement_timeout` (the session's default), no timer. Only a statement whose
//! future is dropped while it runs gets step 4's guard: its caller has left (a client that hung
//! up drops the handler), so it is cancelled on the server and its connection drained before
//! anyone else gets it. Without that cancel, a request that hangs up while its statement waits
//! on a lock leaves the statement waiting, and its pooled connection with it, for as long as
//! the lock is held: a handful of such callers pin the whole pool.
//! [`DeadlinePool::cancel_on_drop`](crate::DeadlinePool::cancel_on_drop) turns it off. The
//! cancel token is made only when the guard fires, so a statement that ends pays nothing.

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
use crate::settings::Settings;

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

/// A statement in flight; if dropped armed, it cancels the statement on the server (when
/// `cancel` is set) and marks the connection interrupted.
struct InFlight<'a> {
    shared: &'a Shared,
    client: &'a Client,
    /// Whether to send PostgreSQL's cancel request when dropped armed.
    cancel: bool,
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
        if !self.cancel {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        // Made here, not when the statement starts: a token copies the connection's
        // configuration, which a statement that ends never needs.
        let token: CancelToken = self.client.cancel_token();
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
    /// Inside a transaction: `SET LOCAL`, no `RESET`.
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
        let context = DeadlineContext::current();
        let cutoff = context.as_ref().and_then(DeadlineContext::cutoff);
        let mut record = Record::start(self.settings, context.clone());
        let Some(cutoff) = cutoff else {
            // No deadline: plain tokio-postgres. The guard fires only if the statement's future
            // is dropped while it runs: it cancels the statement (unless the pool says not to)
            // and keeps the connection out of the pool until the statement has ended.
            let mut flight = InFlight {
                shared: self.shared,
                client: self.client,
                cancel: self.settings.cancel_on_drop,
                armed: true,
            };
            let result = async { execute(prepare.await?).await }.await;
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
            client: self.client,
            cancel: true,
            armed: true,
        };
        let mut sent_timeout = first;
        let pipeline = async {
            let prepared = prepare.await.map_err(Cut::Failed)?;
            let timeout = self.decide(cutoff).map_err(Cut::NotSent)?;
            sent_timeout = timeout;
            let ms = timeout.as_millis();
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
                let set = format!("SET statement_timeout = {ms}");
                let (set, result, reset) = tokio::join!(
                    biased;
                    self.client.batch_execute(&set),
                    execute(prepared),
                    self.client.batch_execute(RESET),
                );
                if reset.is_err() {
                    // The limit may still be set: the hand-back resets it or drops the
                    // connection.
                    self.shared.interrupted.store(true, Ordering::SeqCst);
                }
                set.map_err(Cut::Failed)?;
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

/// Puts `statement_timeout` back to the session's default (the server's, the role's or the
/// database's setting, or the connection's `options`).
pub(crate) const RESET: &str = "RESET statement_timeout";

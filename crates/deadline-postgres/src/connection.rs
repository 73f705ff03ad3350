//! [`Connection`] and [`Transaction`]: tokio-postgres's statement methods, run inside the
//! request's deadline, and the hand-back that never gives the pool a connection mid-statement.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use deadline_http::DeadlineContext;
use deadpool_postgres::Object;
use tokio::time::Instant;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, Row};

use crate::error::Error;
use crate::record::{Outcome, Record};
use crate::settings::{ConnectionKey, SessionLimit, SessionLimits, Settings};
use crate::statement::{RESET, Runner, Shared, Sql, absorb_late_cancel};

/// Statement parameters, as tokio-postgres takes them.
pub type Params<'a> = &'a [&'a (dyn ToSql + Sync)];

/// A pooled connection from [`DeadlinePool::get`](crate::DeadlinePool::get).
///
/// Its statement methods are tokio-postgres's, with the deadline rules of the
/// [crate docs](crate). Dropping it gives the connection back to the pool, at once when no
/// statement was interrupted; otherwise a background task waits for the cancelled statement to
/// end and resets `statement_timeout` first, and closes the connection instead if that fails
/// or takes longer than the pool's drain limit. A connection whose session ended under a
/// statement (its backend killed, the server gone) is closed at once.
pub struct Connection {
    object: Option<Object>,
    settings: Arc<Settings>,
    shared: Arc<Shared>,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("database", &self.settings.name)
            .field(
                "interrupted",
                &self.shared.interrupted.load(Ordering::Relaxed),
            )
            .finish_non_exhaustive()
    }
}

/// The statement methods, shared by [`Connection`] and [`Transaction`].
macro_rules! statement_methods {
    () => {
        /// Runs a statement and returns its rows ([`tokio_postgres::Client::query`]).
        pub async fn query<S: Sql + ?Sized>(
            &self,
            statement: &S,
            params: Params<'_>,
        ) -> Result<Vec<Row>, Error> {
            let client = self.raw();
            self.runner()
                .run(statement.statement(client), |s| async move {
                    client.query(&s, params).await
                })
                .await
        }

        /// Runs a statement that returns exactly one row ([`tokio_postgres::Client::query_one`]).
        pub async fn query_one<S: Sql + ?Sized>(
            &self,
            statement: &S,
            params: Params<'_>,
        ) -> Result<Row, Error> {
            let client = self.raw();
            self.runner()
                .run(statement.statement(client), |s| async move {
                    client.query_one(&s, params).await
                })
                .await
        }

        /// Runs a statement that returns at most one row ([`tokio_postgres::Client::query_opt`]).
        pub async fn query_opt<S: Sql + ?Sized>(
            &self,
            statement: &S,
            params: Params<'_>,
        ) -> Result<Option<Row>, Error> {
            let client = self.raw();
            self.runner()
                .run(statement.statement(client), |s| async move {
                    client.query_opt(&s, params).await
                })
                .await
        }

        /// Runs a statement and returns the number of rows it changed
        /// ([`tokio_postgres::Client::execute`]).
        pub async fn execute<S: Sql + ?Sized>(
            &self,
            statement: &S,
            params: Params<'_>,
        ) -> Result<u64, Error> {
            let client = self.raw();
            self.runner()
                .run(statement.statement(client), |s| async move {
                    client.execute(&s, params).await
                })
                .await
        }

        /// Runs one or more statements separated by semicolons, without parameters, by the
        /// simple query protocol ([`tokio_postgres::Client::batch_execute`]); under a deadline
        /// the `statement_timeout` covers each of them.
        pub async fn batch_execute(&self, statements: &str) -> Result<(), Error> {
            let client = self.raw();
            self.runner()
                .run(std::future::ready(Ok(())), |()| async move {
                    client.batch_execute(statements).await
                })
                .await
        }
    };
}

impl Connection {
    pub(crate) fn new(object: Object, settings: Arc<Settings>) -> Connection {
        if Object::metrics(&object).recycle_count == 0 {
            // Handed out for the first time: its session has the default limit (whatever an
            // earlier connection that left its address and id behind had).
            SessionLimits::all().note(key_of(&object), Some(SessionLimit::Default));
        }
        Connection {
            object: Some(object),
            settings,
            shared: Arc::default(),
        }
    }

    fn key(&self) -> ConnectionKey {
        key_of(self.object.as_ref().expect("present until dropped"))
    }

    /// The tokio-postgres client underneath, for what this crate does not wrap (`COPY`,
    /// portals, notifications). Statements run through it directly get none of the deadline
    /// rules, and run under the session's `statement_timeout` as the statements before them
    /// left it: a statement under a deadline leaves its limit on the connection (see
    /// [`statement`](crate::statement)), so send `RESET statement_timeout` first where a
    /// statement must run without one. Asking for the client makes the crate forget the
    /// connection's limit, so a `SET` sent through it is never mistaken for its own: the next
    /// statement run through this crate sends its own limit (or the reset) with it.
    pub fn client(&self) -> &Client {
        SessionLimits::all().note(self.key(), None);
        self.raw()
    }

    /// The client, for this crate's own statements.
    fn raw(&self) -> &Client {
        self.object.as_deref().expect("present until dropped")
    }

    fn runner(&self) -> Runner<'_> {
        Runner {
            client: self.raw(),
            settings: &self.settings,
            shared: &self.shared,
            key: self.key(),
            local: false,
        }
    }

    statement_methods!();

    /// Begins a transaction. Inside a request with a deadline it is not begun with less than
    /// the pool's transaction minimum plus the margin left before the cutoff
    /// ([`Error::TransactionNotBegun`], a `query` span `not-sent`). Its statements run with
    /// `SET LOCAL statement_timeout`, which the transaction's end undoes. Dropped without
    /// [`commit`](Transaction::commit), it rolls back (as tokio-postgres's does).
    pub async fn transaction(&mut self) -> Result<Transaction<'_>, Error> {
        let context = DeadlineContext::current();
        if let Some(cutoff) = context.as_ref().and_then(DeadlineContext::cutoff) {
            let remaining = cutoff.remaining(Instant::now().into_std());
            let needed = self.settings.policy.margin() + self.settings.transaction_min;
            if remaining < needed {
                Record::start(&self.settings, context).end(Outcome::NotSent);
                return Err(Error::TransactionNotBegun {
                    target: self.settings.name.to_string(),
                    remaining,
                    needed,
                });
            }
        }
        let key = self.key();
        let object = self.object.as_mut().expect("present until dropped");
        let transaction = object.transaction().await.map_err(Error::Postgres)?;
        Ok(Transaction {
            transaction,
            settings: &self.settings,
            shared: &self.shared,
            key,
        })
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let Some(object) = self.object.take() else {
            return;
        };
        let key = key_of(&object);
        if self.shared.broken.load(Ordering::SeqCst) {
            SessionLimits::all().note(key, None);
            let _ = Object::take(object); // its session is over: closed, never handed out
            return;
        }
        if !self.shared.interrupted.load(Ordering::SeqCst) {
            return; // back to the pool as it is
        }
        let cancel = self.shared.take_cancel();
        let limit = self.settings.drain_limit;
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = Object::take(object); // no runtime to drain on: close it
            return;
        };
        runtime.spawn(async move {
            let cancelled = match cancel {
                Some(cancel) => {
                    let _ = cancel.await;
                    true
                }
                None => false,
            };
            // Queued behind the interrupted statement (and any ROLLBACK of a dropped
            // transaction): it answers once they have ended. After a cancel request, a fence
            // first, so a cancel the server acts on late cannot stop the next user's statement.
            SessionLimits::all().note(key, None);
            let clean = async {
                if cancelled {
                    absorb_late_cancel(&object).await?;
                }
                object.batch_execute(RESET).await
            };
            match tokio::time::timeout(limit, clean).await {
                Ok(Ok(())) => {
                    // Clean: back to the pool, with the session's default limit.
                    SessionLimits::all().note(key, Some(SessionLimit::Default));
                    drop(object);
                }
                _ => {
                    tracing::warn!("a connection whose statement was interrupted did not come back clean; closing it");
                    let _ = Object::take(object);
                }
            }
        });
    }
}

/// A transaction on a [`Connection`], from [`Connection::transaction`]: the same statement
/// methods, each with `SET LOCAL statement_timeout` pipelined before it.
pub struct Transaction<'a> {
    transaction: deadpool_postgres::Transaction<'a>,
    settings: &'a Settings,
    shared: &'a Arc<Shared>,
    key: ConnectionKey,
}

impl fmt::Debug for Transaction<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Transaction")
            .field("database", &self.settings.name)
            .finish_non_exhaustive()
    }
}

impl Transaction<'_> {
    /// The tokio-postgres client underneath (statements run through it get no deadline
    /// rules; see [`Connection::client`] for the limit they run under). As there, asking for it
    /// makes the crate forget the connection's limit.
    pub fn client(&self) -> &Client {
        SessionLimits::all().note(self.key, None);
        self.raw()
    }

    /// The client, for this crate's own statements.
    fn raw(&self) -> &Client {
        self.transaction.client()
    }

    fn runner(&self) -> Runner<'_> {
        Runner {
            client: self.raw(),
            settings: self.settings,
            shared: self.shared,
            key: self.key,
            local: true,
        }
    }

    statement_methods!();

    /// Commits the transaction.
    pub async fn commit(self) -> Result<(), Error> {
        self.transaction.commit().await.map_err(Error::Postgres)
    }

    /// Rolls the transaction back.
    pub async fn rollback(self) -> Result<(), Error> {
        self.transaction.rollback().await.map_err(Error::Postgres)
    }
}

/// Which connection `object` is, for [`SessionLimits`].
fn key_of(object: &Object) -> ConnectionKey {
    (
        Arc::as_ptr(&object.statement_cache) as usize,
        Object::id(object),
    )
}

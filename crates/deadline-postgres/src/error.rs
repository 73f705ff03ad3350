//! The errors of a statement, a transaction's begin, a pool wait, and of connecting.
//!
//! The deadline variants ([`Error::is_deadline`]) carry the figures that decided them and turn
//! into the HTTP layer's [`DeadlineExceeded`] with [`Error::deadline_exceeded`], which a handler
//! answers as the enforce layer answers a deadline of its own: 504, or DEADLINE_EXCEEDED for
//! gRPC (axum handlers can return it directly).

use std::fmt;
use std::time::Duration;

use deadline_http::{Activity, DeadlineExceeded};

/// Why a statement (or a transaction's `BEGIN`, or a pool wait) gave no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The statement was not sent: less than its minimum useful time plus the margin was left
    /// before the request's cutoff.
    NotSent {
        /// The database's name in the trace and in 504 bodies.
        target: String,
        /// Time left before the cutoff.
        remaining: Duration,
        /// What a statement needs: the margin plus its minimum useful time.
        needed: Duration,
    },
    /// The transaction was not begun: less than its minimum plus the margin was left.
    TransactionNotBegun {
        /// The database's name.
        target: String,
        /// Time left before the cutoff.
        remaining: Duration,
        /// What a transaction needs: the margin plus its minimum.
        needed: Duration,
    },
    /// The request's deadline stopped the statement while it ran: the server's
    /// `statement_timeout` fired, or the local timer did and the statement was cancelled on the
    /// server.
    Deadline {
        /// The database's name.
        target: String,
        /// The `statement_timeout` the statement ran with.
        statement_timeout: Duration,
        /// The database's own message, when it was the server that stopped the statement.
        server: Option<tokio_postgres::Error>,
    },
    /// No pooled connection became free while a statement could still have been sent.
    PoolTimeout {
        /// The database's name.
        target: String,
        /// How long the request waited for a connection.
        waited: Duration,
    },
    /// Outside any deadline, no pooled connection became free within the pool's wait limit
    /// ([`DeadlinePool::wait_limit`](crate::DeadlinePool::wait_limit)). Not a deadline error:
    /// the database is busy, and a handler answers 503.
    PoolWaitLimit {
        /// The database's name.
        target: String,
        /// The wait limit that ran out.
        limit: Duration,
    },
    /// The pool could not give a connection (it could not open one, or it is closed).
    Pool(deadpool_postgres::PoolError),
    /// The database answered with an error, or the connection failed.
    Postgres(tokio_postgres::Error),
}

impl Error {
    /// Whether the request's deadline is why there is no result (not sent, not begun, cut at
    /// the deadline, gave up waiting for a connection): a handler answers 504 to these.
    pub fn is_deadline(&self) -> bool {
        self.target().is_some()
    }

    /// For a deadline error, the HTTP layer's [`DeadlineExceeded`], as if the hop ran out while
    /// calling the database: the same 504 (or DEADLINE_EXCEEDED) the enforce layer gives.
    pub fn deadline_exceeded(&self) -> Option<DeadlineExceeded> {
        self.target().map(|target| {
            DeadlineExceeded::new(Activity::Calling {
                target: target.to_owned(),
            })
        })
    }

    /// The database error underneath, if the database (or the connection) failed.
    pub fn as_postgres(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Error::Postgres(e) => Some(e),
            Error::Deadline { server, .. } => server.as_ref(),
            _ => None,
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            Error::NotSent { target, .. }
            | Error::TransactionNotBegun { target, .. }
            | Error::Deadline { target, .. }
            | Error::PoolTimeout { target, .. } => Some(target),
            Error::PoolWaitLimit { .. } | Error::Pool(_) | Error::Postgres(_) => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotSent {
                target,
                remaining,
                needed,
            } => write!(
                f,
                "statement on {target} not sent: {} ms left, a statement needs at least {} ms",
                remaining.as_millis(),
                needed.as_millis()
            ),
            Error::TransactionNotBegun {
                target,
                remaining,
                needed,
            } => write!(
                f,
                "transaction on {target} not begun: {} ms left, a transaction needs at least {} ms",
                remaining.as_millis(),
                needed.as_millis()
            ),
            Error::Deadline {
                target,
                statement_timeout,
                server,
            } => {
                write!(
                    f,
                    "deadline exceeded while running a statement on {target} (statement_timeout \
                     {} ms)",
                    statement_timeout.as_millis()
                )?;
                match server {
                    Some(e) => write!(f, ": the server stopped it: {e}"),
                    None => f.write_str(": cancelled on the server"),
                }
            }
            Error::PoolTimeout { target, waited } => write!(
                f,
                "no connection to {target} became free in time (waited {} ms)",
                waited.as_millis()
            ),
            Error::PoolWaitLimit { target, limit } => write!(
                f,
                "no connection to {target} became free within the pool's wait limit ({} ms)",
                limit.as_millis()
            ),
            Error::Pool(e) => write!(f, "no connection from the pool: {e}"),
            Error::Postgres(e) => write!(f, "database error: {e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Pool(e) => Some(e),
            Error::Postgres(e) => Some(e),
            Error::Deadline {
                server: Some(e), ..
            } => Some(e),
            _ => None,
        }
    }
}

/// Why [`DeadlinePool::connect`](crate::DeadlinePool::connect) could not make a pool.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The connection URL (or key=value string) does not parse.
    BadUrl {
        /// What the parser said.
        reason: String,
    },
    /// The database could not be reached or refused the connection.
    Unreachable {
        /// The hosts and ports the URL names.
        target: String,
        /// The connection error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The pool could not be built.
    Pool(deadpool_postgres::BuildError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::BadUrl { reason } => write!(
                f,
                "invalid PostgreSQL connection URL ({reason}); expected \
                 postgres://USER@HOST:PORT/DATABASE"
            ),
            ConnectError::Unreachable { target, source } => {
                write!(f, "cannot connect to PostgreSQL at {target}: {source}")?;
                let mut cause = source.source();
                while let Some(e) = cause {
                    write!(f, ": {e}")?;
                    cause = e.source();
                }
                Ok(())
            }
            ConnectError::Pool(e) => write!(f, "cannot build the connection pool: {e}"),
        }
    }
}

impl std::error::Error for ConnectError {}

//! The errors of a command, a pool wait, and of connecting.
//!
//! The deadline variants ([`Error::is_deadline`]) carry the figures that decided them and turn
//! into the HTTP layer's [`DeadlineExceeded`] with [`Error::deadline_exceeded`], which a handler
//! answers as the enforce layer answers a deadline of its own: 504, or DEADLINE_EXCEEDED for
//! gRPC (axum handlers can return it directly).

use std::fmt;
use std::time::Duration;

use deadline_http::{Activity, DeadlineExceeded};

/// Why a command (or a pool wait) gave no result.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The command was not sent: less than its minimum useful time plus the margin was left
    /// before the request's cutoff (or, for a blocking command, less than the 1 ms its timeout
    /// argument can express).
    NotSent {
        /// The store's name in the trace and in 504 bodies.
        target: String,
        /// The command's name (`GET`, `BLPOP`).
        command: String,
        /// Time left before the cutoff.
        remaining: Duration,
        /// What a command needs: the margin plus its minimum useful time.
        needed: Duration,
    },
    /// The request's deadline ended the command: its reply did not come before the cutoff (the
    /// reply was abandoned, and the connection drained or closed before anyone else uses it),
    /// or Redis stopped a blocking command at the timeout this crate capped it to.
    Deadline {
        /// The store's name.
        target: String,
        /// The command's name.
        command: String,
        /// How long the command waited.
        waited: Duration,
        /// Whether Redis itself stopped waiting, at the capped timeout argument of a blocking
        /// command (`false`: the reply was abandoned at the cutoff).
        by_server: bool,
    },
    /// No pooled connection became free while a command could still have been sent.
    PoolTimeout {
        /// The store's name.
        target: String,
        /// How long the request waited for a connection.
        waited: Duration,
    },
    /// The pool could not give a connection (it could not open one, or it is closed).
    Pool(deadpool_redis::PoolError),
    /// Redis answered with an error, or the connection failed (as redis-rs reports it,
    /// including its own response timeout outside any deadline).
    Redis(redis::RedisError),
}

impl Error {
    /// Whether the request's deadline is why there is no result (not sent, cut at the
    /// deadline, gave up waiting for a connection): a handler answers 504 to these.
    pub fn is_deadline(&self) -> bool {
        self.target().is_some()
    }

    /// For a deadline error, the HTTP layer's [`DeadlineExceeded`], as if the hop ran out while
    /// calling the store: the same 504 (or DEADLINE_EXCEEDED) the enforce layer gives.
    pub fn deadline_exceeded(&self) -> Option<DeadlineExceeded> {
        self.target().map(|target| {
            DeadlineExceeded::new(Activity::Calling {
                target: target.to_owned(),
            })
        })
    }

    /// The redis-rs error underneath, if Redis (or the connection) failed.
    pub fn as_redis(&self) -> Option<&redis::RedisError> {
        match self {
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }

    fn target(&self) -> Option<&str> {
        match self {
            Error::NotSent { target, .. }
            | Error::Deadline { target, .. }
            | Error::PoolTimeout { target, .. } => Some(target),
            Error::Pool(_) | Error::Redis(_) => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NotSent {
                target,
                command,
                remaining,
                needed,
            } => write!(
                f,
                "{command} on {target} not sent: {} ms left, a command needs at least {} ms",
                remaining.as_millis(),
                needed.as_millis()
            ),
            Error::Deadline {
                target,
                command,
                waited,
                by_server,
            } => {
                write!(
                    f,
                    "deadline exceeded while waiting {} ms for {command} on {target}",
                    waited.as_millis()
                )?;
                if *by_server {
                    f.write_str(": the server stopped waiting at the capped timeout")
                } else {
                    f.write_str(": the reply was abandoned")
                }
            }
            Error::PoolTimeout { target, waited } => write!(
                f,
                "no connection to {target} became free in time (waited {} ms)",
                waited.as_millis()
            ),
            Error::Pool(_) => f.write_str("no connection from the pool"),
            Error::Redis(_) => f.write_str("redis error"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Pool(e) => Some(e),
            Error::Redis(e) => Some(e),
            _ => None,
        }
    }
}

/// Why [`DeadlinePool::connect`](crate::DeadlinePool::connect) could not make a pool.
#[derive(Debug)]
#[non_exhaustive]
pub enum ConnectError {
    /// The pool could not be built from the URL (it does not parse, or names no Redis).
    BadUrl(deadpool_redis::CreatePoolError),
    /// Redis could not be reached, refused the connection, or did not answer `PING`.
    Unreachable {
        /// The URL, without its password.
        target: String,
        /// What failed.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::BadUrl(_) => {
                f.write_str("invalid Redis connection URL; expected redis://HOST:PORT[/DB]")
            }
            ConnectError::Unreachable { target, .. } => {
                write!(f, "cannot connect to Redis at {target}")
            }
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::BadUrl(e) => Some(e),
            ConnectError::Unreachable { source, .. } => Some(source.as_ref()),
        }
    }
}

//! PostgreSQL statements that stop when the user stops waiting: tokio-postgres, with a
//! deadpool-postgres pool, inside the request's deadline.
//!
//! Dropping a tokio-postgres (or sqlx) future does not stop its statement: the database runs it
//! to its end, holding a connection, its locks and a CPU, for a user who left long ago. The
//! service's own graphs show little load while its database is saturated. The last hop of most
//! requests is a database, so that is where abandoned work burns the most.
//!
//! [`DeadlinePool`] gives every statement run while a request's deadline is current (the
//! task-local [`DeadlineContext`](deadline_http::DeadlineContext) the enforce layer sets, or
//! [`with_deadline`](deadline_http::with_deadline)) the treatment an outbound HTTP call gets:
//!
//! - it is **not sent** when less than its minimum useful time plus the margin is left before
//!   the cutoff (the core's planner decides, as for an HTTP attempt): [`Error::NotSent`], whose
//!   [`deadline_exceeded`](Error::deadline_exceeded) answers 504 / DEADLINE_EXCEEDED, and a
//!   `query` span `not-sent`; a transaction is not begun with less than its own minimum;
//! - it runs under **`statement_timeout`** = what is left less the margin, so the database
//!   stops it even if this process dies: the connection's limit when it already fits (at most
//!   max(10 %, 20 ms) longer), else a `SET` sent in the same write as the statement (no extra
//!   round trip), rounded up a little so that the statements after it reuse it. A statement
//!   without a deadline gets the server's default back first (the [`statement`] module says
//!   exactly what is sent and why the limit stays on the connection);
//! - it is **cancelled on the server** with PostgreSQL's cancel request when its local timer
//!   fires or its future is dropped (the caller hung up, or the enforce layer cut the handler);
//!   the connection is kept out of the pool until the statement has ended, then given back
//!   clean or closed, never handed out mid-statement;
//! - outside any deadline it is plain tokio-postgres (no timer; a `RESET` ahead of it only when
//!   a limit of the crate's was left on the connection), with two bounds: a statement whose future is dropped while it runs is still
//!   cancelled on the server, as its caller has left
//!   ([`DeadlinePool::cancel_on_drop`] turns that off), and the wait for a pooled connection
//!   ends after the pool's wait limit ([`DeadlinePool::wait_limit`], 5 s by default) with
//!   [`Error::PoolWaitLimit`]. For a server-side limit on such statements, give the
//!   connections a session default (`options=-c statement_timeout=N` in the URL, or the role's
//!   or database's setting): that `RESET` goes back to it.
//!
//! Each statement is a `query` span in the hop's `Deadline-Trace` (outcome `ok`, `deadline`,
//! `cancelled`, `not-sent` or `error`), and with the `metrics` feature it is counted in
//! `deadline_queries_total{outcome}` and `deadline_query_seconds`; pool waits in
//! `deadline_pool_wait_seconds` (see `deadline_http::metrics`).
//!
//! ```no_run
//! use deadline_postgres::DeadlinePool;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = DeadlinePool::connect("postgres://postgres@127.0.0.1:5432/test", 8).await?;
//! // In a handler behind the enforce layer:
//! let connection = pool.get().await?;
//! match connection.query_one("SELECT count(*) FROM pg_class", &[]).await {
//!     Ok(row) => println!("{} relations", row.get::<_, i64>(0)),
//!     // 504 / DEADLINE_EXCEEDED, as the enforce layer answers its own deadline.
//!     Err(e) if e.is_deadline() => println!("{}", e.deadline_exceeded().unwrap()),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! # Which deadline, and why the cutoff
//!
//! A statement is this hop's own work, and its answer must come back before the hop replies:
//! it is bounded by the request's **cutoff** (the deadline less the reply reserve), the instant
//! the enforce layer drops the handler, less the margin for the answer's trip back. (An HTTP
//! call uses the deadline itself, because the callee's reply *is* the answer; here the hop
//! still has to answer after the database does.)
//!
//! # Why deadpool-postgres
//!
//! deadpool-postgres is the pool most tokio-postgres services use (it is what the axum and
//! actix examples show, and it is maintained with tokio-postgres's releases); bb8 is the other.
//! deadpool's objects give direct access to the `tokio_postgres::Client` (for its cancel token)
//! and can be taken out of the pool ([`deadpool_postgres::Object::take`]), which is how a
//! connection whose statement would not end is closed instead of handed out. Any
//! deadpool-postgres pool works ([`DeadlinePool::new`]); [`DeadlinePool::connect`] builds one
//! from a URL and checks it can connect.
//!
//! # sqlx
//!
//! sqlx (0.9) has no cancel request: dropping a query future stops nothing on the server, and
//! sqlx gives no way to send PostgreSQL's cancel message. What an sqlx user can have, by hand,
//! and what not:
//!
//! - **not sent** without time: yes; it is a check of the remaining time before the call, as
//!   [`statement`] describes (the same planner, [`deadline::plan::decide`]);
//! - **`statement_timeout`**: yes, per transaction: `SET LOCAL statement_timeout = N` as the
//!   transaction's first statement (one more round trip, as sqlx sends each statement on its
//!   own). A plain `SET` outside a transaction stays on the pooled connection for its next
//!   user. This is the guarantee that matters most: the server stops the statement at the
//!   deadline whatever the client does;
//! - **cancel on hang-up**: only from *another* connection, `SELECT pg_cancel_backend(pid)`
//!   with the pid read once per connection (`SELECT pg_backend_pid()`). That needs a second
//!   connection free at the moment of the cancel, the very moment a pool is most likely to be
//!   exhausted, and sqlx gives a dropped query's connection back to its pool with no hook to
//!   send the cancel first: its next user waits for the abandoned statement to end. So with
//!   sqlx the statement stops at its `statement_timeout` (at most the margin after the
//!   cutoff), not the moment the caller hangs up.
//!
//! This crate does not wrap sqlx; `docs/database.md` shows the sqlx pattern.
//!
//! # What is not covered
//!
//! Connections are made without TLS (the cancel request is sent with [`tokio_postgres::NoTls`]).
//! `COPY`, portals and `LISTEN` go through [`Connection::client`], with no deadline rules.

mod connection;
mod error;
mod pool;
mod record;
mod settings;
pub mod statement;

pub use connection::{Connection, Params, Transaction};
pub use error::{ConnectError, Error};
pub use pool::DeadlinePool;
pub use settings::{
    DEFAULT_DRAIN_LIMIT, DEFAULT_NAME, DEFAULT_TRANSACTION_MIN, DEFAULT_WAIT_LIMIT,
};
pub use statement::Sql;
pub use tokio_postgres;

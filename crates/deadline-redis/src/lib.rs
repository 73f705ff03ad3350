//! Redis commands that stop when the user stops waiting: redis-rs, with a deadpool-redis pool,
//! inside the request's deadline.
//!
//! Dropping a redis-rs future does not stop its command, and redis-rs's response timeout bounds
//! only the client's wait. A `BLPOP jobs 10` started for a request that has 300 ms keeps its
//! client blocked on the server for ten seconds after the user left, and every command sent on
//! that connection in the meantime waits behind it; a pool that hands that connection to the
//! next request makes it wait too.
//!
//! [`DeadlinePool`] gives every command run while a request's deadline is current (the
//! task-local [`DeadlineContext`](deadline_http::DeadlineContext) the enforce layer sets, or
//! [`with_deadline`](deadline_http::with_deadline)) the treatment deadline-postgres gives a
//! statement:
//!
//! - it is **not sent** when less than its minimum useful time plus the margin is left before
//!   the cutoff (the core's planner decides, as for an HTTP attempt): [`Error::NotSent`], whose
//!   [`deadline_exceeded`](Error::deadline_exceeded) answers 504 / DEADLINE_EXCEEDED, and a
//!   `query` span `not-sent`;
//! - the **wait for its reply ends at the cutoff** (the deadline less the reply reserve the
//!   enforce layer keeps for its own answer; nothing more is taken off): [`Error::Deadline`];
//! - a **blocking command's own timeout** (`BLPOP`, `BRPOP`, `BLMOVE`, `BZPOPMIN`/`MAX`,
//!   `XREAD ... BLOCK ms`, `WAIT`...) is capped to what is left less the margin and less
//!   Redis's timer tick (100 ms by default, [`DeadlinePool::server_tick`]), rounded down to
//!   whole milliseconds and never `0` (which means "for ever"), so Redis itself stops waiting
//!   before the cutoff; its "nothing came" nil is then [`Error::Deadline`] too (the
//!   [`blocking`] module lists the commands and their arguments);
//! - a connection whose reply was **abandoned** (the cutoff, or the caller's future dropped on
//!   hang-up) is drained or closed, never handed to the next caller with a reply pending (the
//!   [`connection`] module says which and why);
//! - outside any deadline it is plain redis-rs: no timer, no rewritten argument, the
//!   connection's own settings (redis-rs's default 500 ms response timeout included). Only a
//!   reply abandoned on the way gets the drain-or-close of the point above.
//!
//! Each command is a `query` span in the hop's `Deadline-Trace` (outcome `ok`, `deadline`,
//! `cancelled`, `not-sent` or `error`), and with the `metrics` feature it is counted in
//! `deadline_queries_total{outcome}` and `deadline_query_seconds`, pool waits in
//! `deadline_pool_wait_seconds` (see `deadline_http::metrics`).
//!
//! ```toml
//! [dependencies]
//! deadline-redis = { path = "crates/deadline-redis" }
//! ```
//!
//! ```no_run
//! use deadline_redis::DeadlinePool;
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let pool = DeadlinePool::connect("redis://127.0.0.1:6379", 8).await?;
//! // In a handler behind the enforce layer:
//! let mut connection = pool.get().await?;
//! match connection
//!     .query::<Option<(String, String)>>(redis::cmd("BLPOP").arg("jobs").arg(10))
//!     .await
//! {
//!     Ok(Some((_, job))) => println!("job {job}"),
//!     Ok(None) => println!("no job within the command's own 10 s"),
//!     // 504 / DEADLINE_EXCEEDED, as the enforce layer answers its own deadline.
//!     Err(e) if e.is_deadline() => println!("{}", e.deadline_exceeded().unwrap()),
//!     Err(e) => return Err(e.into()),
//! }
//! # Ok(()) }
//! ```
//!
//! # Which deadline, and why the cutoff
//!
//! A command is this hop's own work, and its reply must come back before the hop answers: the
//! wait ends at the request's **cutoff**, the instant the enforce layer drops the handler to
//! answer 504 itself. A blocking command's timeout takes the margin off as well, and Redis's
//! timer tick: Redis ends a blocked command's wait on its event loop's ticks (`hz`, 10 a second
//! by default), measured here up to 100 ms after the timeout on an idle Redis 7.0 (`BLPOP k
//! 0.24` answered after 0.29 s, `BLPOP k 0.1` after 0.19 s). So that Redis's own reply is back
//! before the cutoff and the connection stays clean, the timeout is what is left less the
//! margin less that tick, and at least 1 ms; when a reply still comes too late, the local wait
//! ends at the cutoff and the connection is closed, as for any abandoned blocking command.
//!
//! # Why redis-rs with deadpool-redis
//!
//! redis-rs is the Redis client most Rust services use, and deadpool-redis its usual pool. Its
//! pooled `MultiplexedConnection` keeps replies matched to commands in order even when a
//! command's future is dropped, so what is left to the crate is the server side: the timeouts
//! Redis itself waits for, and the connections that would make the next caller wait. fred has
//! per-command timeouts of its own, but the same blocked client on the server.
//!
//! # What is not covered
//!
//! Commands go through [`Connection::query`] and [`Connection::pipeline`]; redis-rs's
//! `AsyncCommands` helpers are not wrapped. Timeouts written in seconds are rewritten as
//! decimals (`0.240`), which Redis reads since 6.0. Pub/sub and `MONITOR` connections are not
//! pooled, so not covered.

pub mod blocking;
mod checkout;
pub mod connection;
mod error;
mod pool;
mod record;
mod settings;

pub use connection::Connection;
pub use error::{ConnectError, Error};
pub use pool::DeadlinePool;
pub use redis;
pub use settings::{DEFAULT_DRAIN_LIMIT, DEFAULT_NAME, DEFAULT_SERVER_TICK};

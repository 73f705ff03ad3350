//! [`Connection`]: redis-rs commands run inside the request's deadline, and the hand-back that
//! never gives the pool a connection with a reply pending.
//!
//! # Why a connection with an abandoned reply is drained or closed
//!
//! deadpool-redis pools redis-rs's `MultiplexedConnection`, which matches replies to commands in
//! order: a command whose future is dropped keeps its place, and its late reply is read and
//! thrown away, so the next command never gets another's reply. But Redis runs one client's
//! commands one after the other. After an abandoned `BLPOP k 10` the server keeps the client
//! blocked for up to ten seconds and every later command on that connection waits behind it;
//! after an abandoned `GET` on a busy server, the next command waits for the `GET` first. A
//! connection is therefore marked when a reply is abandoned (the local wait ended at the
//! cutoff, redis-rs's own response timeout fired, or the command's future was dropped: a
//! caller that hung up, a handler the enforce layer cut), and before anyone uses it again:
//!
//! - after a **blocking** command (`BLPOP`, `XREAD BLOCK`, `WAIT`...) it is **closed**: closing
//!   is also what frees the blocked client on the server (Redis drops a closed client's
//!   blocking command at once), so nothing waits there for a caller who left;
//! - after any other command it is **drained**: a `PING` sent behind the abandoned command
//!   answers only once that command's reply has been read, and the connection is clean. If the
//!   `PING` has not answered within the pool's [drain limit](crate::DeadlinePool::drain_limit)
//!   (100 ms by default), it is closed instead;
//! - after a failed connection (an I/O error, the server gone) it is closed.
//!
//! When the [`Connection`] is dropped this happens in the background (a drained connection
//! goes back to the pool); when its owner sends another command first, it happens before that
//! command, and a closed connection is replaced by a fresh one from the pool (a pool wait under
//! the same deadline rules).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use deadline::{Deadline, Decision, Stop};
use deadline_http::{Activity, DeadlineContext};
use deadpool_redis::Pool;
use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue, Pipeline, RedisError, Value};
use tokio::time::Instant;

use crate::blocking::{self, Capped};
use crate::checkout;
use crate::error::Error;
use crate::record::{Outcome, Record};
use crate::settings::Settings;

/// Nothing is pending on the connection.
const CLEAN: u8 = 0;
/// A reply was abandoned: drain it before the connection is used again.
const DRAIN: u8 = 1;
/// A blocking command's reply was abandoned, or the connection failed: close it.
const CLOSE: u8 = 2;

/// What a command's own wait is set to under a deadline, so that the crate's timer at the
/// cutoff, not redis-rs's response timeout, ends it.
const NO_DRIVER_TIMEOUT: Duration = Duration::from_secs(3_600);

/// A pooled connection from [`DeadlinePool::get`](crate::DeadlinePool::get).
///
/// Its [`query`](Self::query) and [`pipeline`](Self::pipeline) run redis-rs commands with the
/// deadline rules of the [crate docs](crate). Dropping it gives the connection back to the pool,
/// at once when no reply was abandoned on it; otherwise as the [module docs](self) say.
pub struct Connection {
    object: Option<deadpool_redis::Connection>,
    pool: Pool,
    settings: Arc<Settings>,
    state: AtomicU8,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state.load(Ordering::Relaxed) {
            CLEAN => "clean",
            DRAIN => "reply pending",
            _ => "to close",
        };
        f.debug_struct("Connection")
            .field("store", &self.settings.name)
            .field("state", &state)
            .finish_non_exhaustive()
    }
}

/// A command in flight; if dropped armed (its future was dropped), it marks the connection.
struct InFlight<'a> {
    state: &'a AtomicU8,
    mark: u8,
    armed: bool,
}

impl InFlight<'_> {
    fn disarm(&mut self) {
        self.armed = false;
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.armed {
            self.state.fetch_max(self.mark, Ordering::SeqCst);
        }
    }
}

impl Connection {
    pub(crate) fn new(
        object: deadpool_redis::Connection,
        pool: Pool,
        settings: Arc<Settings>,
    ) -> Connection {
        Connection {
            object: Some(object),
            pool,
            settings,
            state: AtomicU8::new(CLEAN),
        }
    }

    /// Runs one command and converts its reply, as redis-rs's `cmd.query_async(&mut conn)`.
    ///
    /// Inside a request with a deadline: not sent with less than the margin plus the minimum
    /// useful time left before the cutoff ([`Error::NotSent`]); a blocking command's timeout
    /// argument capped to what is left less the margin and the server tick, its "nothing came"
    /// nil then being
    /// [`Error::Deadline`] (`by_server`); the wait for the reply ended at the cutoff
    /// ([`Error::Deadline`]). Outside any deadline: the command as redis-rs sends it.
    pub async fn query<T: FromRedisValue>(&mut self, cmd: &Cmd) -> Result<T, Error> {
        convert(self.round_trip(Packed::Cmd(cmd)).await?)
    }

    /// Runs a pipeline (or a `MULTI`/`EXEC` transaction, [`Pipeline::atomic`]) and converts its
    /// replies, as redis-rs's `pipe.query_async(&mut conn)`: not sent without time, the wait
    /// for the replies ended at the cutoff. A blocking command inside a pipeline keeps its own
    /// timeout argument (send it with [`query`](Self::query) to have it capped); if its reply
    /// is abandoned, the connection is closed, which ends the wait on the server too.
    pub async fn pipeline<T: FromRedisValue>(&mut self, pipe: &Pipeline) -> Result<T, Error> {
        convert(self.round_trip(Packed::Pipe(pipe)).await?)
    }

    /// The one loop for a command and a pipeline: settle, decide, cap (a single blocking
    /// command only), send, wait until the cutoff.
    async fn round_trip(&mut self, packed: Packed<'_>) -> Result<Value, Error> {
        let context = DeadlineContext::current();
        let cutoff = context.as_ref().and_then(DeadlineContext::cutoff);
        self.settle(cutoff).await?;
        let (name, blocks) = match packed {
            Packed::Cmd(cmd) => {
                let name = blocking::name(cmd);
                let blocks = blocking::is_blocking(name.as_deref());
                (name, blocks)
            }
            Packed::Pipe(pipe) => (
                None,
                pipe.cmd_iter()
                    .any(|cmd| blocking::is_blocking(blocking::name(cmd).as_deref())),
            ),
        };
        let mark = if blocks { CLOSE } else { DRAIN };
        let Connection {
            object,
            settings,
            state,
            ..
        } = self;
        // `settle` returned Ok: it leaves a connection in place, or an error.
        let object = object.as_mut().expect("settle leaves a connection");
        let mut record = Record::start(settings, context.clone());
        let Some(cutoff) = cutoff else {
            // No deadline: redis-rs as it is (its own response timeout included). Only a reply
            // abandoned on the way marks the connection.
            let mut flight = InFlight {
                state,
                mark,
                armed: true,
            };
            let result = packed.send(None, object).await;
            flight.disarm();
            return finish(result, &mut record, state, mark);
        };
        let command = match packed {
            Packed::Cmd(_) => name.as_deref().unwrap_or("command"),
            Packed::Pipe(_) => "pipeline",
        };
        let budget = match decide(settings, cutoff) {
            Ok(budget) => budget,
            Err(stop) => {
                record.end(Outcome::NotSent);
                return Err(not_sent(settings, command, stop));
            }
        };
        let (to_send, nil_is_timeout) = match packed {
            Packed::Pipe(_) => (None, false),
            Packed::Cmd(cmd) => {
                let cap = blocking_cap(settings, budget);
                match blocking::cap(cmd, name.as_deref(), cap) {
                    Capped::NotBlocking | Capped::Within => (None, false),
                    Capped::Rewritten {
                        cmd,
                        nil_is_timeout,
                    } => (Some(cmd), nil_is_timeout),
                    Capped::TooShort => {
                        record.end(Outcome::NotSent);
                        return Err(Error::NotSent {
                            target: settings.name.to_string(),
                            command: command.to_owned(),
                            remaining: cap,
                            needed: Duration::from_millis(1),
                        });
                    }
                }
            }
        };
        let _activity = context.as_ref().map(|c| {
            c.enter(Activity::Calling {
                target: settings.name.to_string(),
            })
        });
        let mut handle = own_handle(object);
        let start = Instant::now();
        let mut flight = InFlight {
            state,
            mark,
            armed: true,
        };
        let result = tokio::time::timeout_at(
            Instant::from_std(cutoff.instant()),
            packed.send(to_send.as_ref(), &mut handle),
        )
        .await;
        flight.disarm();
        match result {
            Err(_) => {
                // The cutoff: the reply is abandoned, the connection marked.
                state.fetch_max(mark, Ordering::SeqCst);
                record.end(Outcome::Deadline);
                Err(abandoned(settings, command, start))
            }
            Ok(Ok(Value::Nil)) if nil_is_timeout => {
                // Redis stopped waiting at the capped timeout: the deadline's doing, and the
                // connection is clean.
                record.end(Outcome::Deadline);
                Err(Error::Deadline {
                    target: settings.name.to_string(),
                    command: command.to_owned(),
                    waited: Instant::now().saturating_duration_since(start),
                    by_server: true,
                })
            }
            Ok(result) => finish(result, &mut record, state, mark),
        }
    }

    /// Makes the connection clean before a command: drains an abandoned reply (within the
    /// drain limit, and the cutoff), or closes the connection and takes a fresh one.
    ///
    /// The connection is marked clean only once it holds one: a wait for a fresh connection
    /// that fails (or whose future is dropped) leaves it marked for replacement, so the next
    /// command tries again rather than finding none.
    async fn settle(&mut self, cutoff: Option<Deadline>) -> Result<(), Error> {
        match (self.state.load(Ordering::SeqCst), &self.object) {
            (_, None) => {}
            (CLEAN, Some(_)) => return Ok(()),
            (DRAIN, Some(object)) => {
                let mut limit = Instant::now() + self.settings.drain_limit;
                if let Some(cutoff) = cutoff {
                    limit = limit.min(Instant::from_std(cutoff.instant()));
                }
                if drain(object, limit).await {
                    self.state.store(CLEAN, Ordering::SeqCst);
                    return Ok(());
                }
            }
            _ => {}
        }
        if let Some(object) = self.object.take() {
            close(object);
        }
        self.state.store(CLOSE, Ordering::SeqCst);
        let fresh = checkout::take(&self.pool, &self.settings).await?;
        self.object = Some(fresh);
        self.state.store(CLEAN, Ordering::SeqCst);
        Ok(())
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        let Some(object) = self.object.take() else {
            return;
        };
        match self.state.load(Ordering::SeqCst) {
            CLEAN => drop(object), // back to the pool as it is
            DRAIN => {
                let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                    close(object); // no runtime to drain on
                    return;
                };
                let limit = self.settings.drain_limit;
                runtime.spawn(async move {
                    if drain(&object, Instant::now() + limit).await {
                        drop(object); // clean: back to the pool
                    } else {
                        tracing::warn!(
                            "a Redis connection whose reply was abandoned was not drained in time; closing it"
                        );
                        close(object);
                    }
                });
            }
            _ => close(object),
        }
    }
}

/// A handle on `object`'s connection for one command under a deadline: redis-rs's response
/// timeout off, the crate's timer at the cutoff in its place.
/// What one round trip sends: a command, or a pipeline's commands.
#[derive(Clone, Copy)]
enum Packed<'a> {
    Cmd(&'a Cmd),
    Pipe(&'a Pipeline),
}

impl Packed<'_> {
    /// Sends it on `conn` (a command as `rewritten` where its timeout was capped) and waits for
    /// the reply, as redis-rs does.
    async fn send(
        self,
        rewritten: Option<&Cmd>,
        conn: &mut MultiplexedConnection,
    ) -> Result<Value, RedisError> {
        match self {
            Packed::Cmd(cmd) => conn.send_packed_command(rewritten.unwrap_or(cmd)).await,
            Packed::Pipe(pipe) => pipe.query_async::<Value>(conn).await,
        }
    }
}

fn own_handle(object: &deadpool_redis::Connection) -> MultiplexedConnection {
    let mut handle: MultiplexedConnection = (**object).clone();
    handle.set_response_timeout(NO_DRIVER_TIMEOUT);
    handle
}

/// Sends a `PING` behind whatever is pending on `object` and waits for it until `limit`:
/// whether the connection is clean (every earlier reply read).
async fn drain(object: &deadpool_redis::Connection, limit: Instant) -> bool {
    let mut handle = own_handle(object);
    let ping = redis::cmd("PING");
    matches!(
        tokio::time::timeout_at(limit, handle.send_packed_command(&ping)).await,
        Ok(Ok(_))
    )
}

/// Takes `object` out of the pool and drops it: with its last handle gone, redis-rs ends the
/// connection's task and closes the socket, and Redis frees the client (a blocked one too).
fn close(object: deadpool_redis::Connection) {
    drop(deadpool_redis::Connection::take(object));
}

/// Records a command that got an answer or failed, and marks the connection by its error.
fn finish(
    result: Result<Value, RedisError>,
    record: &mut Record<'_>,
    state: &AtomicU8,
    mark: u8,
) -> Result<Value, Error> {
    match result {
        Ok(value) => {
            record.end(Outcome::Ok);
            Ok(value)
        }
        Err(e) => {
            if e.is_timeout() {
                // redis-rs's own response timeout: the reply is abandoned.
                state.fetch_max(mark, Ordering::SeqCst);
            } else if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() {
                state.store(CLOSE, Ordering::SeqCst);
            }
            record.end(Outcome::Error);
            Err(Error::Redis(e))
        }
    }
}

fn convert<T: FromRedisValue>(value: Value) -> Result<T, Error> {
    redis::from_redis_value(value).map_err(|e| Error::Redis(e.into()))
}

/// A blocking command's timeout for a command that may wait `budget`: less the server tick,
/// at least 1 ms (see [`DeadlinePool::server_tick`](crate::DeadlinePool::server_tick)).
fn blocking_cap(settings: &Settings, budget: Duration) -> Duration {
    budget
        .saturating_sub(settings.server_tick)
        .max(Duration::from_millis(1))
}

/// The longest a command sent now may wait, from the core's planner (one attempt: what is
/// left before the cutoff less the margin, rounded down to whole milliseconds), or why none is
/// sent.
fn decide(settings: &Settings, cutoff: Deadline) -> Result<Duration, Stop> {
    let now = Instant::now().into_std();
    match deadline::plan::decide(&settings.policy, 0, Some(cutoff), now) {
        Decision::Send(attempt) => Ok(attempt
            .budget
            .map_or(attempt.wait, |budget| budget.as_duration())),
        Decision::Stop(stop) => Err(stop),
    }
}

fn not_sent(settings: &Settings, command: &str, stop: Stop) -> Error {
    let (remaining, needed) = match stop {
        Stop::NotEnoughTime {
            remaining, needed, ..
        } => (remaining, needed),
        _ => (
            Duration::ZERO,
            settings.policy.margin() + settings.policy.min_useful(),
        ),
    };
    Error::NotSent {
        target: settings.name.to_string(),
        command: command.to_owned(),
        remaining,
        needed,
    }
}

fn abandoned(settings: &Settings, command: &str, start: Instant) -> Error {
    Error::Deadline {
        target: settings.name.to_string(),
        command: command.to_owned(),
        waited: Instant::now().saturating_duration_since(start),
        by_server: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Rules 1 and 3 on a paused clock: what is left less the 50 ms margin, rounded down, is
    /// the longest wait, and less the 100 ms server tick a blocking command's timeout; with
    /// less than 50 + 50 ms left, nothing is sent.
    #[tokio::test(start_paused = true)]
    async fn the_wait_and_the_cap_follow_the_time_left() {
        let settings = Settings::default();
        let cutoff = Deadline::after_duration(Instant::now().into_std(), ms(300));
        assert_eq!(decide(&settings, cutoff).unwrap(), ms(250));

        tokio::time::advance(Duration::from_micros(100_400)).await;
        let budget = decide(&settings, cutoff).unwrap();
        assert_eq!(
            budget,
            ms(149),
            "199.6 ms left less the margin, rounded down"
        );
        let blpop = redis::cmd("BLPOP").arg("k").arg(10).clone();
        // Less the 100 ms server tick.
        assert_eq!(blocking_cap(&settings, budget), ms(49));
        assert_eq!(blocking_cap(&settings, ms(100)), ms(1), "never below 1 ms");
        match blocking::cap(&blpop, Some("BLPOP"), blocking_cap(&settings, budget)) {
            Capped::Rewritten { cmd, .. } => {
                assert_eq!(
                    cmd.get_packed_command(),
                    redis::cmd("BLPOP")
                        .arg("k")
                        .arg("0.049")
                        .get_packed_command()
                );
            }
            other => panic!("{other:?}"),
        }

        tokio::time::advance(Duration::from_micros(99_600)).await;
        assert_eq!(
            decide(&settings, cutoff).unwrap(),
            ms(50),
            "100 ms left: still sent"
        );
        tokio::time::advance(ms(1)).await;
        match decide(&settings, cutoff) {
            Err(stop) => match not_sent(&settings, "GET", stop) {
                Error::NotSent {
                    remaining, needed, ..
                } => {
                    assert_eq!(needed, ms(100));
                    assert_eq!(remaining, ms(99));
                }
                other => panic!("{other}"),
            },
            Ok(budget) => panic!("sent with {budget:?}"),
        }
    }
}

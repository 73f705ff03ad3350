//! A pool on the test server, a watcher connection outside it, and deadlines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadline::Deadline;
use deadline_http::DeadlineContext;
use deadline_redis::DeadlinePool;
use redis::aio::MultiplexedConnection;
use tokio::time::Instant;

/// The environment variable naming the test server.
pub(crate) const URL_VAR: &str = "DEADLINE_TEST_REDIS";

pub(crate) fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A pool of `size` connections on the test server; panics, saying how to fix it, when the
/// server cannot be reached.
pub(crate) async fn pool(size: usize) -> DeadlinePool {
    let url = url();
    match DeadlinePool::connect(&url, size).await {
        Ok(pool) => pool,
        Err(e) => panic!(
            "these tests need a Redis server, and {url} could not be used: {e} ({:?})\n\
             start one with scripts/ensure-redis.sh, or set {URL_VAR} to a reachable server",
            std::error::Error::source(&e).map(ToString::to_string)
        ),
    }
}

/// A plain redis-rs connection that watches the server from outside the pool, with no
/// response timeout.
pub(crate) struct Watcher {
    conn: MultiplexedConnection,
}

impl Watcher {
    pub(crate) async fn new() -> Watcher {
        let url = url();
        let client = redis::Client::open(url.as_str()).expect("the URL parses");
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap_or_else(|e| panic!("the watcher cannot connect to {url}: {e}"));
        Watcher { conn }
    }

    pub(crate) async fn run<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> T {
        let mut conn = self.conn.clone();
        cmd.query_async(&mut conn)
            .await
            .unwrap_or_else(|e| panic!("the watcher's command failed: {e}"))
    }

    /// The `CLIENT LIST` lines of the clients named `name`.
    pub(crate) async fn clients(&self, name: &str) -> Vec<String> {
        let list: String = self.run(redis::cmd("CLIENT").arg("LIST")).await;
        let needle = format!(" name={name} ");
        list.lines()
            .filter(|line| line.contains(&needle))
            .map(str::to_owned)
            .collect()
    }

    /// Whether a client named `name` is blocked on the server now (flag `b`: waiting in a
    /// blocking command such as `BLPOP`).
    pub(crate) async fn blocked(&self, name: &str) -> bool {
        self.clients(name)
            .await
            .iter()
            .any(|line| blocked_line(line))
    }

    /// Waits (sampling every 5 ms) until a client named `name` is blocked; panics after `limit`.
    pub(crate) async fn until_blocked(&self, name: &str, limit: Duration) {
        let start = Instant::now();
        while !self.blocked(name).await {
            assert!(
                Instant::now().saturating_duration_since(start) < limit,
                "no client named {name} blocked within {limit:?}: {:?}",
                self.clients(name).await
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Whether a `CLIENT LIST` line is a blocked client.
pub(crate) fn blocked_line(line: &str) -> bool {
    line.split(' ')
        .find_map(|field| field.strip_prefix("flags="))
        .is_some_and(|flags| flags.contains('b'))
}

/// A name no other key or client on the server has: `dlr_<what>_<n>_<pid>`.
pub(crate) fn unique(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "dlr_{what}_{}_{}",
        NEXT.fetch_add(1, Ordering::Relaxed),
        std::process::id()
    )
}

/// A request context whose deadline is `ms` from now, with no reply reserve (so its cutoff is
/// its deadline).
pub(crate) fn context(ms: u64) -> DeadlineContext {
    let now = Instant::now();
    let deadline = Deadline::after_duration(now.into_std(), Duration::from_millis(ms));
    DeadlineContext::new(Some(deadline), Duration::ZERO, now)
}

/// The spans named `name` recorded in `context`, their outcomes in order.
pub(crate) fn outcomes(context: &DeadlineContext, name: &str) -> Vec<String> {
    let (spans, _) = context.take_spans();
    spans
        .into_iter()
        .filter(|s| s.name == name)
        .map(|s| s.outcome.unwrap_or_default())
        .collect()
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `CLIENT SETNAME name` on `conn`: names the connection so the watcher can find it.
pub(crate) async fn name_it(conn: &mut deadline_redis::Connection, name: &str) {
    conn.query::<()>(redis::cmd("CLIENT").arg("SETNAME").arg(name))
        .await
        .expect("CLIENT SETNAME");
}

/// Polls `future` once and drops it: a command sent (handed to the connection) and abandoned
/// at once, its reply not yet read. Returns whether it was still pending.
pub(crate) async fn poll_once_and_drop<F: std::future::Future>(future: F) -> bool {
    let mut future = std::pin::pin!(future);
    std::future::poll_fn(|cx| std::task::Poll::Ready(future.as_mut().poll(cx).is_pending())).await
}

/// The futures a handler awaits are `Send`, as axum and `tokio::spawn` need (checked when this
/// file compiles).
#[allow(dead_code)]
fn futures_are_send(pool: &DeadlinePool, conn: &mut deadline_redis::Connection) {
    fn send<T: Send>(_: T) {}
    send(pool.get());
    let cmd = redis::cmd("GET");
    send(conn.query::<Option<String>>(&cmd));
    let pipe = redis::pipe();
    send(conn.pipeline::<redis::Value>(&pipe));
}

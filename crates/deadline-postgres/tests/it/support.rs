//! A pool on the test database, a watcher connection on `pg_stat_activity`, and deadlines.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadline::Deadline;
use deadline_http::DeadlineContext;
use deadline_postgres::DeadlinePool;
use tokio::time::Instant;
use tokio_postgres::NoTls;

/// The environment variable naming the test database.
pub(crate) const URL_VAR: &str = "DEADLINE_TEST_POSTGRES";

pub(crate) fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A pool of `size` connections on the test database; panics, saying how to fix it, when the
/// database cannot be reached.
pub(crate) async fn pool(size: usize) -> DeadlinePool {
    let url = url();
    match DeadlinePool::connect(&url, size).await {
        Ok(pool) => pool,
        Err(e) => panic!(
            "these tests need a PostgreSQL server, and {url} could not be used: {e}\n\
             start one with scripts/ensure-postgres.sh, or set {URL_VAR} to a reachable database"
        ),
    }
}

/// A plain tokio-postgres connection that watches the server from outside the pool.
pub(crate) struct Watcher {
    client: tokio_postgres::Client,
}

impl Watcher {
    pub(crate) async fn new() -> Watcher {
        let url = url();
        let (client, connection) = tokio_postgres::connect(&url, NoTls)
            .await
            .unwrap_or_else(|e| panic!("the watcher cannot connect to {url}: {e}"));
        tokio::spawn(connection);
        Watcher { client }
    }

    /// Whether a statement containing `marker` is running now.
    pub(crate) async fn active(&self, marker: &str) -> bool {
        let row = self
            .client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity \
                 WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE $1",
                &[&format!("%{marker}%")],
            )
            .await
            .expect("pg_stat_activity can be read");
        row.get::<_, i64>(0) > 0
    }

    /// The last statement the backend `pid` ran (or runs).
    pub(crate) async fn last_query(&self, pid: i32) -> String {
        self.client
            .query_one("SELECT query FROM pg_stat_activity WHERE pid = $1", &[&pid])
            .await
            .expect("the backend is listed")
            .get(0)
    }

    /// Ends every backend (but the watcher's) whose current or last statement contains
    /// `marker`, so a test leaves nothing running; returns how many it ended.
    pub(crate) async fn terminate(&self, marker: &str) -> i64 {
        self.client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE pid <> pg_backend_pid() AND query LIKE $1",
                &[&format!("%{marker}%")],
            )
            .await
            .expect("backends can be terminated")
            .get(0)
    }

    /// Ends every backend whose `application_name` is `name`; returns how many it ended.
    pub(crate) async fn terminate_application(&self, name: &str) -> i64 {
        self.client
            .query_one(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE pid <> pg_backend_pid() AND application_name = $1",
                &[&name],
            )
            .await
            .expect("backends can be terminated")
            .get(0)
    }

    /// How long until no statement containing `marker` is active (sampled every 5 ms), or
    /// `None` if one still is after `limit`.
    pub(crate) async fn gone_within(&self, marker: &str, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        loop {
            if !self.active(marker).await {
                return Some(Instant::now().saturating_duration_since(start));
            }
            if Instant::now().saturating_duration_since(start) > limit {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// A text no other statement on the server contains: `t<name><n><pid>`.
pub(crate) fn marker(name: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "dlpg_{name}_{}_{}",
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

/// The `query`/`pool` spans' outcomes recorded in `context`, in order.
pub(crate) fn outcomes(context: &DeadlineContext, name: &str) -> Vec<String> {
    let (spans, _) = context.take_spans();
    spans
        .into_iter()
        .filter(|s| s.name == name)
        .map(|s| s.outcome.unwrap_or_default())
        .collect()
}

/// `statement_timeout` as the server shows it, in ms (`0`, `750ms`, `2s`, `1min`).
pub(crate) fn setting_ms(text: &str) -> u64 {
    let digits: String = text.chars().take_while(char::is_ascii_digit).collect();
    let value: u64 = digits
        .parse()
        .unwrap_or_else(|_| panic!("a number: {text:?}"));
    match &text[digits.len()..] {
        "" | "ms" => value,
        "s" => value * 1_000,
        "min" => value * 60_000,
        unit => panic!("unit {unit:?} in {text:?}"),
    }
}

/// The `statement_timeout`, in ms, that a statement on `conn` under `ctx` runs with (as the
/// statement itself reads it: what the crate set or reused for it).
pub(crate) async fn limit_seen(ctx: &DeadlineContext, conn: &deadline_postgres::Connection) -> u64 {
    let seen: String = ctx
        .clone()
        .scope(conn.query_one("SELECT current_setting('statement_timeout')", &[]))
        .await
        .expect("current_setting can be read")
        .get(0);
    setting_ms(&seen)
}

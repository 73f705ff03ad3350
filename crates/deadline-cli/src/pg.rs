//! `--postgres`: the hop's work as a PostgreSQL statement (`deadline service`), and the
//! database's own account of the time it spent on statements after their users left
//! (`deadline demo` and `deadline load`), read from `pg_stat_activity`.
//!
//! # How database time is measured
//!
//! A separate connection samples `pg_stat_activity` every 5 ms (10 ms at most, under load) for
//! the active statements of one inventory process: the statements this module sends carry a
//! comment `/* deadline service=NAME tag=TAG request=ID */`, and the sampler looks for its
//! `tag`. Between two samples, each statement seen active in the later one is counted busy for
//! the time between them; the part of that interval after the statement's user stopped waiting
//! (heard back or gave up) is database time after the user left. The figure comes from the
//! database's view, not the service's: a statement the service abandoned but did not cancel is
//! still counted.

use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::Args;
use deadline_http::metrics::ServiceMetrics;
use deadline_postgres::DeadlinePool;
use http::{Response, StatusCode};
use http_body_util::Full;
use serde::Serialize;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::MissedTickBehavior;

use crate::holds::epoch_ms_now;
use crate::reply::text;

/// How often the sampler reads `pg_stat_activity`.
const SAMPLE_EVERY: Duration = Duration::from_millis(5);

/// Arguments of `deadline service` for the database.
#[derive(Debug, Clone, Args)]
pub(crate) struct PostgresArgs {
    /// Make the hop's work a PostgreSQL statement on this database
    /// (postgres://USER@HOST:PORT/DATABASE): `--query`, or else `SELECT pg_sleep(S)` lasting
    /// the work time (`--work`, or `--slow-work` for a slow request). Statements run inside the
    /// request's deadline; with `--no-enforce` they run to their end.
    #[arg(long, value_name = "URL")]
    pub postgres: Option<String>,
    /// The statement each request runs (needs `--postgres`): one statement, no parameters.
    #[arg(long, requires = "postgres", value_name = "SQL")]
    pub query: Option<String>,
    /// Connections in the pool (default: `--slots` plus 4, or 16 without slots).
    #[arg(long, requires = "postgres")]
    pub postgres_pool: Option<usize>,
    /// A word put in every `pg_sleep` statement's comment, so `deadline demo` and `deadline
    /// load` find this service's statements in `pg_stat_activity` (default: the process id).
    #[arg(long, requires = "postgres")]
    pub postgres_tag: Option<String>,
    /// How long an idle pooled database connection is kept, in ms (checked twice as often).
    /// Short, as the downstream pool's `--pool-idle-timeout`, so a service that goes quiet
    /// gives its connections back within seconds.
    #[arg(long, default_value_t = 2_000, requires = "postgres")]
    pub postgres_idle_timeout: u64,
    /// The server-side limit (`statement_timeout`) of a statement run for a request without a
    /// budget, in ms, set in the connection's startup options, so it overrides a role's or
    /// database's `statement_timeout`; 0 leaves the database's own setting. A statement under a
    /// budget gets what is left of it instead. Not applied when the URL's `options` set
    /// `statement_timeout`.
    #[arg(long, default_value_t = 30_000, requires = "postgres")]
    pub postgres_statement_limit: u64,
    /// The longest a request without a budget waits for a pooled database connection, in ms,
    /// before it is answered 503 (a request with a budget waits while a statement could still
    /// be sent); 0 waits without limit.
    #[arg(long, default_value_t = 5_000, requires = "postgres")]
    pub postgres_pool_wait: u64,
}

/// The hop's database: the pool and what to run on it.
pub(crate) struct Database {
    pool: DeadlinePool,
    query: Option<String>,
    service: String,
    tag: String,
}

impl Database {
    /// The database `args` names, connected now (a bad URL or an unreachable database is an
    /// error before serving), or `None` without `--postgres`.
    pub(crate) async fn connect(
        args: &PostgresArgs,
        service: &str,
        slots: Option<usize>,
        margin: Duration,
        metrics: &ServiceMetrics,
    ) -> anyhow::Result<Option<Database>> {
        let Some(url) = &args.postgres else {
            return Ok(None);
        };
        if args.query.as_deref().is_some_and(|q| q.trim().is_empty()) {
            bail!("--query must not be empty");
        }
        let size = args.postgres_pool.unwrap_or(slots.map_or(16, |s| s + 4));
        if size == 0 {
            bail!("--postgres-pool must be at least 1");
        }
        let tag = match &args.postgres_tag {
            Some(tag) => sanitize(tag),
            None => std::process::id().to_string(),
        };
        let mut config: tokio_postgres::Config = url
            .parse()
            .map_err(|e| anyhow::anyhow!("invalid PostgreSQL connection URL ({e})"))
            .context("--postgres")?;
        let options = config.get_options().unwrap_or_default().to_owned();
        if args.postgres_statement_limit > 0 && !options.contains("statement_timeout") {
            let limit = format!("-c statement_timeout={}", args.postgres_statement_limit);
            config.options(limit_with(&options, &limit).as_str());
        }
        let pool = DeadlinePool::connect_config(config, size)
            .await
            .context("--postgres")?
            .margin(margin)
            .wait_limit(
                (args.postgres_pool_wait > 0)
                    .then(|| Duration::from_millis(args.postgres_pool_wait)),
            )
            .record_metrics(metrics);
        let idle = Duration::from_millis(args.postgres_idle_timeout.max(1));
        let idle_pool = pool.pool().clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval((idle / 2).max(Duration::from_millis(50)));
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                idle_pool.retain(|_, metrics| metrics.last_used() < idle);
            }
        });
        Ok(Some(Database {
            pool,
            query: args.query.clone(),
            service: sanitize(service),
            tag,
        }))
    }

    /// Runs the request's statement: `--query`, or `pg_sleep` for `work`. `Err` is the answer
    /// to give instead of going on: 504 when the deadline stopped it, 500 for a database error.
    pub(crate) async fn work(
        &self,
        name: &str,
        request_id: &str,
        work: Duration,
    ) -> Result<(), Response<Full<Bytes>>> {
        let result = async {
            let connection = self.pool.get().await?;
            match &self.query {
                Some(sql) => connection.query(sql.as_str(), &[]).await.map(drop),
                None => {
                    let sql = sleep_statement(&self.service, &self.tag, request_id, work);
                    connection.query(sql.as_str(), &[]).await.map(drop)
                }
            }
        }
        .await;
        match result {
            Ok(()) => Ok(()),
            Err(e @ deadline_postgres::Error::PoolWaitLimit { .. }) => Err(text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("{name}: {e}\n"),
            )),
            Err(e) if e.is_deadline() => Err(text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("deadline exceeded at {name}: {e}\n"),
            )),
            Err(e) => Err(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{name}: {e}\n"),
            )),
        }
    }
}

/// The session `options` with `limit` added after what the URL gave.
fn limit_with(options: &str, limit: &str) -> String {
    if options.trim().is_empty() {
        limit.to_owned()
    } else {
        format!("{options} {limit}")
    }
}

/// `SELECT pg_sleep(S)` for `work`, with the comment the sampler looks for.
fn sleep_statement(service: &str, tag: &str, request_id: &str, work: Duration) -> String {
    format!(
        "SELECT pg_sleep({:.3}) /* deadline service={service} tag={tag} request={} */",
        work.as_secs_f64(),
        sanitize(request_id)
    )
}

/// `text` with only ASCII letters, digits, `-`, `_` and `.` kept (the rest becomes `_`): safe
/// inside an SQL comment and a `LIKE` pattern.
fn sanitize(text: &str) -> String {
    text.chars()
        .take(128)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// A tag for one run of the demo or the load: unique on this machine.
pub(crate) fn run_tag(label: &str) -> String {
    sanitize(&format!("{label}-{}", std::process::id()))
}

/// One read of `pg_stat_activity`: when (epoch ms) and the request ids of the statements
/// active then.
#[derive(Debug, Clone)]
struct Sample {
    at_ms: f64,
    requests: Vec<String>,
}

/// Samples `pg_stat_activity` for one tag's statements until stopped.
pub(crate) struct Sampler {
    stop: oneshot::Sender<()>,
    task: JoinHandle<anyhow::Result<Vec<Sample>>>,
}

impl Sampler {
    /// Connects to `url` (its own connection, not the service's pool) and starts sampling.
    pub(crate) async fn start(url: &str, tag: &str) -> anyhow::Result<Sampler> {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .with_context(|| {
                format!("--postgres: the pg_stat_activity sampler cannot connect to {url}")
            })?;
        tokio::spawn(connection);
        let statement = client
            .prepare(
                "SELECT query FROM pg_stat_activity \
                 WHERE state = 'active' AND pid <> pg_backend_pid() AND query LIKE $1",
            )
            .await
            .context("preparing the pg_stat_activity sample")?;
        let pattern = format!("%/* deadline service=% tag={tag} request=%");
        let (stop, mut stopped) = oneshot::channel();
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let mut every = tokio::time::interval(SAMPLE_EVERY);
            every.set_missed_tick_behavior(MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => break,
                    _ = every.tick() => {}
                }
                let rows = client
                    .query(&statement, &[&pattern])
                    .await
                    .context("sampling pg_stat_activity")?;
                let requests = rows
                    .iter()
                    .filter_map(|row| request_of(row.get::<_, &str>(0)))
                    .collect();
                samples.push(Sample {
                    at_ms: epoch_ms_now(),
                    requests,
                });
            }
            Ok(samples)
        });
        Ok(Sampler { stop, task })
    }

    /// Stops sampling and returns what the database did.
    pub(crate) async fn stop(self) -> anyhow::Result<DbActivity> {
        let _ = self.stop.send(());
        let samples = self.task.await.context("the sampler failed")??;
        Ok(DbActivity { samples })
    }
}

/// The request id in a statement's comment.
fn request_of(query: &str) -> Option<String> {
    let rest = &query[query.find("request=")? + "request=".len()..];
    Some(rest.split_whitespace().next()?.to_owned())
}

/// What the sampler saw.
#[derive(Debug, Clone)]
pub(crate) struct DbActivity {
    samples: Vec<Sample>,
}

/// The database's figures for one run. Field names are part of the `--json` interface.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct DbFigures {
    /// Seconds of statements (summed over statements running at once).
    pub(crate) db_seconds: f64,
    /// Seconds of statements after their user had stopped waiting.
    pub(crate) db_seconds_after_users_left: f64,
    /// The longest gap between two samples of `pg_stat_activity`, in ms.
    pub(crate) db_sample_gap_max_ms: f64,
    /// Samples taken.
    pub(crate) db_samples: usize,
}

impl DbActivity {
    /// The run's figures, `left` giving when each request's user stopped waiting (epoch ms).
    pub(crate) fn figures(&self, left: impl Fn(&str) -> Option<f64>) -> DbFigures {
        let mut busy = 0.0;
        let mut after = 0.0;
        let mut gap_max: f64 = 0.0;
        for pair in self.samples.windows(2) {
            let (from, to) = (pair[0].at_ms, pair[1].at_ms);
            let dt = (to - from).max(0.0);
            gap_max = gap_max.max(dt);
            for request in &pair[1].requests {
                busy += dt;
                if let Some(left_at) = left(request) {
                    after += (to - from.max(left_at)).max(0.0);
                }
            }
        }
        DbFigures {
            db_seconds: busy / 1_000.0,
            db_seconds_after_users_left: after / 1_000.0,
            db_sample_gap_max_ms: gap_max,
            db_samples: self.samples.len(),
        }
    }

    /// How long after `at_ms` (epoch) the first sample showed none of the run's statements
    /// active, in ms; `None` if none did.
    pub(crate) fn empty_after(&self, at_ms: f64) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| s.at_ms >= at_ms && s.requests.is_empty())
            .map(|s| s.at_ms - at_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_carry_a_safe_comment_the_sampler_reads_back() {
        let sql = sleep_statement(
            "inventory",
            "demo-7",
            "id */; DROP TABLE x; --",
            Duration::from_millis(1_500),
        );
        assert_eq!(
            sql,
            "SELECT pg_sleep(1.500) /* deadline service=inventory tag=demo-7 request=id_____DROP_TABLE_x__-- */"
        );
        assert_eq!(request_of(&sql).as_deref(), Some("id_____DROP_TABLE_x__--"));
    }

    #[test]
    fn time_after_the_user_left_is_split_at_the_moment_they_left() {
        let sample = |at_ms: f64, requests: &[&str]| Sample {
            at_ms,
            requests: requests.iter().map(|r| (*r).to_owned()).collect(),
        };
        let activity = DbActivity {
            samples: vec![
                sample(0.0, &[]),
                sample(10.0, &["a"]),
                sample(20.0, &["a", "b"]),
                sample(30.0, &["b"]),
                sample(40.0, &[]),
            ],
        };
        // a left at 15 ms, b never.
        let figures = activity.figures(|r| (r == "a").then_some(15.0));
        assert!((figures.db_seconds - 0.040).abs() < 1e-9, "{figures:?}");
        assert!(
            (figures.db_seconds_after_users_left - 0.005).abs() < 1e-9,
            "{figures:?}"
        );
        assert_eq!(figures.db_sample_gap_max_ms, 10.0);
        assert_eq!(activity.empty_after(25.0), Some(15.0));
        assert_eq!(activity.empty_after(45.0), None);
    }
}

//! [`DeadlinePool`]: a deadpool-redis pool whose waits end at the request's deadline, and the
//! settings every command taken from it follows.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadpool_redis::{Config, Pool, PoolConfig, Runtime};

use crate::checkout;
use crate::connection::Connection;
use crate::error::{ConnectError, Error};
use crate::settings::Settings;

/// A pool of Redis connections whose commands run inside the current request's deadline.
///
/// Cloning is cheap: clones share the pool and its settings.
#[derive(Clone)]
pub struct DeadlinePool {
    pool: Pool,
    settings: Arc<Settings>,
}

impl fmt::Debug for DeadlinePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlinePool")
            .field("name", &self.settings.name)
            .field("margin", &self.settings.policy.margin())
            .field("min_useful", &self.settings.policy.min_useful())
            .field("drain_limit", &self.settings.drain_limit)
            .field("status", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl DeadlinePool {
    /// Wraps a deadpool-redis pool built by the application (its connections' settings,
    /// redis-rs's response timeout among them, apply to commands run outside any deadline).
    /// The margin and minimum useful time default to the HTTP client's (50 ms each), the drain
    /// limit to 100 ms.
    pub fn new(pool: Pool) -> DeadlinePool {
        DeadlinePool {
            pool,
            settings: Arc::new(Settings::default()),
        }
    }

    /// A pool of up to `max_size` connections to the Redis `url` names
    /// (`redis://HOST:PORT[/DB]`), with redis-rs's default connection settings, checked by
    /// opening one connection and sending `PING` now, so a bad URL or an unreachable server is
    /// an error here and not at the first request.
    pub async fn connect(url: &str, max_size: usize) -> Result<DeadlinePool, ConnectError> {
        let mut config = Config::from_url(url);
        config.pool = Some(PoolConfig::new(max_size.max(1)));
        let pool = config
            .create_pool(Some(Runtime::Tokio1))
            .map_err(ConnectError::BadUrl)?;
        let unreachable =
            |source: Box<dyn std::error::Error + Send + Sync>| ConnectError::Unreachable {
                target: without_password(url),
                source,
            };
        let mut connection = pool.get().await.map_err(|e| unreachable(Box::new(e)))?;
        redis::cmd("PING")
            .query_async::<String>(&mut connection)
            .await
            .map_err(|e| unreachable(Box::new(e)))?;
        Ok(DeadlinePool::new(pool))
    }

    fn settings_mut(&mut self) -> &mut Settings {
        // Builder methods run before the pool is shared; a clone made earlier keeps its own.
        Arc::make_mut(&mut self.settings)
    }

    /// The time kept back from the cutoff for a reply to come back from Redis (default 50 ms,
    /// as the HTTP client's): a blocking command's timeout argument is capped to what is left
    /// less this (and less the [server tick](Self::server_tick)), so Redis's own "nothing
    /// came" reply arrives before the cutoff.
    pub fn margin(mut self, margin: Duration) -> DeadlinePool {
        let s = self.settings_mut();
        s.policy = Settings::policy(margin, s.policy.min_useful());
        self
    }

    /// The smallest wait worth sending a command with (default 50 ms; at least 1 ms): with less
    /// than this plus the margin left before the cutoff, the command is not sent.
    pub fn min_useful(mut self, min_useful: Duration) -> DeadlinePool {
        let s = self.settings_mut();
        s.policy = Settings::policy(s.policy.margin(), min_useful);
        self
    }

    /// How long the late reply of an abandoned command (not a blocking one, whose connection
    /// is closed at once) is waited for before the connection is used again (default 100 ms);
    /// past it the connection is closed instead of being handed out.
    pub fn drain_limit(mut self, drain_limit: Duration) -> DeadlinePool {
        self.settings_mut().drain_limit = drain_limit;
        self
    }

    /// How much shorter than what is left (less the margin) a blocking command's timeout is
    /// capped (default 100 ms, at least 1 ms always remaining): Redis ends a blocked command on
    /// its event loop's ticks, up to `1 / hz` after its timeout (100 ms with Redis's default
    /// `hz 10`). Set it to `1000 / hz` ms for a server with another `hz`, or to zero where a
    /// late answer, cut locally at the cutoff and its connection closed, is acceptable.
    pub fn server_tick(mut self, tick: Duration) -> DeadlinePool {
        self.settings_mut().server_tick = tick;
        self
    }

    /// The store's name in `504` bodies and errors (default `redis`).
    pub fn name(mut self, name: impl Into<String>) -> DeadlinePool {
        self.settings_mut().name = Arc::from(name.into());
        self
    }

    /// Counts commands and pool waits in `metrics` (`deadline_queries_total`,
    /// `deadline_query_seconds`, `deadline_pool_wait_seconds`, the series deadline-postgres
    /// feeds).
    #[cfg(feature = "metrics")]
    pub fn record_metrics(
        mut self,
        metrics: &deadline_http::metrics::ServiceMetrics,
    ) -> DeadlinePool {
        self.settings_mut().metrics = Some(metrics.queries());
        self
    }

    /// The deadpool pool underneath (its status, its size).
    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// A connection from the pool. Inside a request with a deadline, the wait ends when a
    /// command could no longer be sent (the cutoff less the margin and the minimum useful
    /// time), with [`Error::PoolTimeout`]; the wait is a `pool` span in the trace when it took
    /// a millisecond or more. Outside any deadline it is deadpool's own wait.
    pub async fn get(&self) -> Result<Connection, Error> {
        let object = checkout::take(&self.pool, &self.settings).await?;
        Ok(Connection::new(
            object,
            self.pool.clone(),
            Arc::clone(&self.settings),
        ))
    }
}

/// `url` with the password of its user part, if any, left out.
fn without_password(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}{}", &url[..scheme + 3], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

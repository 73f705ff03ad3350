//! [`DeadlinePool`]: a deadpool-postgres pool whose waits end at the request's deadline, and the
//! limits every statement taken from it follows.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use deadline_http::DeadlineContext;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio::time::Instant;
use tokio_postgres::NoTls;

use crate::connection::Connection;
use crate::error::{ConnectError, Error};
use crate::record;
use crate::settings::Settings;

/// A pool of PostgreSQL connections whose statements run inside the current request's deadline.
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
            .field("transaction_min", &self.settings.transaction_min)
            .field("cancel_on_drop", &self.settings.cancel_on_drop)
            .field("wait_limit", &self.settings.wait_limit)
            .field("status", &self.pool.status())
            .finish_non_exhaustive()
    }
}

impl DeadlinePool {
    /// Wraps a deadpool-postgres pool (built by the application; its connections must be
    /// plain TCP or Unix sockets, as the cancel request is sent without TLS). The crate
    /// remembers the `statement_timeout` it left on each connection and reuses it: recycle
    /// with `RecyclingMethod::Fast` or `Verified`, not `Clean` or a custom statement that resets
    /// settings behind its back (a statement would then run under the session's default while
    /// the crate counts on its limit), and begin transactions with
    /// [`Connection::transaction`], not a `BEGIN` sent as a statement (its `ROLLBACK` would undo
    /// a limit the crate set inside it). The margin and minimum useful time default to the HTTP client's
    /// (50 ms each), the transaction minimum to 100 ms.
    pub fn new(pool: Pool) -> DeadlinePool {
        DeadlinePool {
            pool,
            settings: Arc::new(Settings::default()),
        }
    }

    /// A pool of up to `max_size` connections to the database `url` names
    /// (`postgres://USER@HOST:PORT/DATABASE`, or tokio-postgres's `key=value` form), checked
    /// by opening one connection now, so a bad URL or an unreachable database is an error here
    /// and not at the first request. Without a `connect_timeout` in the URL, connecting gives
    /// up after 5 s.
    pub async fn connect(url: &str, max_size: usize) -> Result<DeadlinePool, ConnectError> {
        let config: tokio_postgres::Config =
            url.parse()
                .map_err(|e: tokio_postgres::Error| ConnectError::BadUrl {
                    reason: e.to_string(),
                })?;
        DeadlinePool::connect_config(config, max_size).await
    }

    /// As [`connect`](Self::connect), from a tokio-postgres configuration (for settings a URL
    /// does not carry as easily, such as the session's `options`: `-c statement_timeout=30000`
    /// bounds the statements run outside any deadline on the server).
    pub async fn connect_config(
        mut config: tokio_postgres::Config,
        max_size: usize,
    ) -> Result<DeadlinePool, ConnectError> {
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(Duration::from_secs(5));
        }
        let target = describe_hosts(&config);
        let manager = Manager::from_config(
            config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_size.max(1))
            .build()
            .map_err(ConnectError::Pool)?;
        match pool.get().await {
            Ok(connection) => drop(connection),
            Err(e) => {
                return Err(ConnectError::Unreachable {
                    target,
                    source: Box::new(e),
                });
            }
        }
        Ok(DeadlinePool::new(pool))
    }

    fn settings_mut(&mut self) -> &mut Settings {
        // Builder methods run before the pool is shared; a clone made earlier keeps its own.
        Arc::make_mut(&mut self.settings)
    }

    /// The time kept back from the cutoff for the answer to come back from the database
    /// (default 50 ms, as the HTTP client's): a statement runs with `statement_timeout` at
    /// most what is left less this.
    pub fn margin(mut self, margin: Duration) -> DeadlinePool {
        let s = self.settings_mut();
        s.policy = Settings::policy(margin, s.policy.min_useful());
        self
    }

    /// The smallest `statement_timeout` worth sending a statement with (default 50 ms; at least
    /// 1 ms): with less than this plus the margin left, the statement is not sent.
    pub fn min_useful(mut self, min_useful: Duration) -> DeadlinePool {
        let s = self.settings_mut();
        s.policy = Settings::policy(s.policy.margin(), min_useful);
        self
    }

    /// The smallest time left (on top of the margin) for a transaction to be begun (default
    /// 100 ms): a transaction is several statements, so it needs more than one.
    pub fn transaction_min(mut self, transaction_min: Duration) -> DeadlinePool {
        self.settings_mut().transaction_min = transaction_min;
        self
    }

    /// How long a connection whose statement was interrupted (cancelled, cut at the deadline,
    /// or dropped outside any deadline) is kept out of the pool waiting for the statement to
    /// end (default 10 s); past it the connection is closed instead of being handed out.
    pub fn drain_limit(mut self, drain_limit: Duration) -> DeadlinePool {
        self.settings_mut().drain_limit = drain_limit;
        self
    }

    /// Whether statements under a deadline carry `statement_timeout` (default `true`). Turn
    /// it off only behind a pooler that refuses `SET`: the statement is then stopped only by
    /// the cancel request at its local timer, so a process that dies (or a cancel that cannot
    /// reach the server) leaves it running to its end.
    ///
    /// Behind a pooler that hands server connections out per transaction (PgBouncer's
    /// transaction mode), a statement outside a transaction gets a plain `SET`, which this
    /// crate keeps on the connection for the statements after it: there it stays on a server
    /// connection other clients are given. Run such statements inside a
    /// [`transaction`](crate::Connection::transaction) (`SET LOCAL`, undone at its end), or turn
    /// this off.
    pub fn statement_timeout(mut self, on: bool) -> DeadlinePool {
        self.settings_mut().server_limit = on;
        self
    }

    /// Whether a statement run outside any deadline is cancelled on the server when its
    /// future is dropped while it runs (default `true`). Its caller has left (a client that
    /// hangs up drops the handler), so the statement would only hold its connection, and any
    /// lock it waits for, to its end. The connection is kept out of the pool until the
    /// statement has ended, either way. Turn it off only for statements that must run to their
    /// end whoever waits for them (and then run them outside the request, on a task of their
    /// own).
    pub fn cancel_on_drop(mut self, on: bool) -> DeadlinePool {
        self.settings_mut().cancel_on_drop = on;
        self
    }

    /// The longest wait for a pooled connection outside any deadline (default 5 s; `None`: as
    /// long as deadpool waits, which is for ever unless the pool was built with a wait
    /// timeout). Past it [`get`](Self::get) returns [`Error::PoolWaitLimit`]. Inside a
    /// deadline the wait ends at the deadline instead (see [`get`](Self::get)).
    pub fn wait_limit(mut self, limit: Option<Duration>) -> DeadlinePool {
        self.settings_mut().wait_limit = limit;
        self
    }

    /// The database's name in `504` bodies and errors (default `postgres`).
    pub fn name(mut self, name: impl Into<String>) -> DeadlinePool {
        self.settings_mut().name = Arc::from(name.into());
        self
    }

    /// Counts statements and pool waits in `metrics` (`deadline_queries_total`,
    /// `deadline_query_seconds`, `deadline_pool_wait_seconds`).
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
    /// statement could no longer be sent (the cutoff less the margin and the minimum useful
    /// time), with [`Error::PoolTimeout`]; the wait is a `pool` span in the trace when it took
    /// a millisecond or more, and is observed in `deadline_pool_wait_seconds`. Outside any
    /// deadline it waits at most the pool's [`wait_limit`](Self::wait_limit), then returns
    /// [`Error::PoolWaitLimit`].
    pub async fn get(&self) -> Result<Connection, Error> {
        let context = DeadlineContext::current();
        let cutoff = context.as_ref().and_then(DeadlineContext::cutoff);
        let start = Instant::now();
        let object = match cutoff {
            None => {
                let got = match self.settings.wait_limit {
                    None => self.pool.get().await,
                    Some(limit) => match tokio::time::timeout(limit, self.pool.get()).await {
                        Ok(got) => got,
                        Err(_) => {
                            record::pool_wait(&self.settings, context.as_ref(), start, false);
                            return Err(Error::PoolWaitLimit {
                                target: self.settings.name.to_string(),
                                limit,
                            });
                        }
                    },
                };
                record::pool_wait(&self.settings, context.as_ref(), start, got.is_ok());
                got.map_err(Error::Pool)?
            }
            Some(cutoff) => {
                let needed = self.settings.policy.margin() + self.settings.policy.min_useful();
                let cutoff = Instant::from_std(cutoff.instant());
                let give_up = cutoff.checked_sub(needed).unwrap_or(start);
                match tokio::time::timeout_at(give_up, self.pool.get()).await {
                    Ok(got) => {
                        record::pool_wait(&self.settings, context.as_ref(), start, got.is_ok());
                        got.map_err(Error::Pool)?
                    }
                    Err(_) => {
                        record::pool_wait(&self.settings, context.as_ref(), start, false);
                        return Err(Error::PoolTimeout {
                            target: self.settings.name.to_string(),
                            waited: Instant::now().saturating_duration_since(start),
                        });
                    }
                }
            }
        };
        Ok(Connection::new(object, Arc::clone(&self.settings)))
    }
}

/// `host:port` for each host the configuration names, for error messages.
fn describe_hosts(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
            match host {
                tokio_postgres::config::Host::Tcp(name) => format!("{name}:{port}"),
                #[cfg(unix)]
                tokio_postgres::config::Host::Unix(path) => {
                    format!("{}/.s.PGSQL.{port}", path.display())
                }
            }
        })
        .collect();
    if hosts.is_empty() {
        "the default host (localhost:5432)".to_owned()
    } else {
        hosts.join(", ")
    }
}

//! The hops that are not configuration files: a deadline service's own limits (the document
//! `deadline service` serves at `GET /deadline/limits`, one type for both ends) and a
//! PostgreSQL server's settings.
//!
//! A service bounds its own answer only with a front timeout (`front_timeout_ms`, less its
//! margin): without one, a request that arrives without a budget (through a proxy, say) has no
//! limit at all. Behind a service that propagates, a service reads its budget from the request
//! and is bounded by it. Its downstream per-attempt timeout is what it waits on the next hop;
//! its idle timeout is how long it keeps a caller's idle connection, and its downstream pool
//! keeps idle connections one to two times `pool_idle_timeout_ms` (the pool is swept that
//! often), so twice that is what the keep-alive rule compares.

use std::time::Duration;

use super::{Hop, HopKind, Kind, Limit, Origin, Role, Timer};

/// The limits of a deadline service, from its flags: the body of `GET /deadline/limits`.
/// Times in milliseconds; `None` where the flag is unset.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct ServiceLimits {
    /// The service's name (`--name`).
    pub name: String,
    /// The budget a request without one gets: the front timeout less its margin, else none.
    pub default_budget_ms: Option<u64>,
    /// The largest budget accepted; larger ones are clamped.
    pub max_budget_ms: u64,
    /// Kept back from each budget to write the reply.
    pub reply_reserve_ms: u64,
    /// Worker slots (none: no limit, no queue).
    pub slots: Option<usize>,
    /// Requests that may wait for a slot.
    pub max_queue: Option<usize>,
    /// The longest expected wait for a slot admitted.
    pub max_queue_wait_ms: Option<u64>,
    /// What stands in front gives up after this.
    pub front_timeout_ms: Option<u64>,
    /// Kept from the front timeout for the way back.
    pub front_margin_ms: Option<u64>,
    /// A connection with no request open is closed after this.
    pub idle_timeout_ms: u64,
    /// An HTTP/2 peer silent this long is sent a PING (0: none).
    pub keep_alive_interval_ms: u64,
    /// How long a PING may wait for its answer.
    pub keep_alive_timeout_ms: u64,
    /// How long a request's headers may take.
    pub header_timeout_ms: u64,
    /// How long a socket may refuse every write.
    pub send_timeout_ms: u64,
    /// The largest downstream reply body read.
    pub max_body_bytes: u64,
    /// Connections open at once.
    pub max_connections: usize,
    /// The downstream call, with `--downstream`.
    pub downstream: Option<DownstreamLimits>,
    /// The database, with `--postgres`.
    pub database: Option<DatabaseLimits>,
}

/// The downstream call of a deadline service.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DownstreamLimits {
    /// The downstream's URL.
    pub url: String,
    /// Each attempt's timeout, the reply's body included.
    pub attempt_timeout_ms: u64,
    /// Attempts, the first included.
    pub attempts: u32,
    /// Kept back from the budget sent, for the reply's transit.
    pub margin_ms: u64,
    /// The connect timeout: the per-attempt timeout bounds the connection too.
    pub connect_timeout_ms: u64,
    /// Whether the budget is sent downstream.
    pub propagate: bool,
    /// Idle pooled connections are closed after one to two times this.
    pub pool_idle_timeout_ms: u64,
    /// The retry budget (none: retries not budgeted).
    pub retry_budget: Option<RetryBudgetLimits>,
}

/// A retry budget: a share of the requests plus a count per window, and a bucket.
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct RetryBudgetLimits {
    /// Retries allowed as a share of requests.
    pub ratio: f64,
    /// Retries allowed per window on top.
    pub per_window: u32,
    /// The bucket's tokens, if there is a bucket.
    pub tokens: Option<u32>,
    /// The window.
    pub window_ms: u64,
}

/// The database of a deadline service.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DatabaseLimits {
    /// Connections in the pool.
    pub pool_size: usize,
    /// How long a request without a budget waits for a connection (0: without limit).
    pub pool_wait_ms: u64,
    /// The statement limit of a request without a budget (0: the database's own setting).
    pub statement_limit_ms: u64,
}

impl ServiceLimits {
    /// The service's hop, its keys read from `source` (the URL the document came from).
    pub fn hop(&self, source: &str) -> Hop {
        let mut hop = Hop::new(format!("service {}", self.name), HopKind::Service);
        hop.reads_budget = true;
        let key = |key: &str| Origin::Key {
            source: source.to_owned(),
            key: key.to_owned(),
        };
        let mut push = |name: &str, kind, role, limit, scope: &str| {
            hop.timers.push(Timer {
                name: name.to_owned(),
                kind,
                role,
                limit,
                origin: key(name.split(' ').next().unwrap_or(name)),
                scope: scope.to_owned(),
            });
        };
        let own = match self.front_timeout_ms {
            Some(front) => Limit::After(Duration::from_millis(
                front.saturating_sub(self.front_margin_ms.unwrap_or(0)),
            )),
            None => Limit::Unlimited,
        };
        push(
            "front_timeout_ms less front_margin_ms",
            Kind::Total,
            Role::Own,
            own,
            "",
        );
        if let Some(wait) = self.max_queue_wait_ms {
            push(
                "max_queue_wait_ms",
                Kind::Queue,
                Role::Caller,
                Limit::from_millis_zero_off(wait),
                "",
            );
        }
        push(
            "header_timeout_ms",
            Kind::Total,
            Role::Caller,
            Limit::from_millis_zero_off(self.header_timeout_ms),
            "",
        );
        push(
            "send_timeout_ms",
            Kind::Inactivity,
            Role::Caller,
            Limit::from_millis_zero_off(self.send_timeout_ms),
            "",
        );
        push(
            "idle_timeout_ms",
            Kind::KeepAlive,
            Role::Caller,
            Limit::from_millis_zero_off(self.idle_timeout_ms),
            "",
        );
        if let Some(down) = &self.downstream {
            let scope = format!("downstream {}", down.url);
            push(
                "downstream.attempt_timeout_ms",
                Kind::Total,
                Role::Waits,
                Limit::from_millis_zero_off(down.attempt_timeout_ms),
                &scope,
            );
            push(
                "downstream.pool_idle_timeout_ms (x2)",
                Kind::KeepAlive,
                Role::Callee,
                Limit::After(Duration::from_millis(
                    down.pool_idle_timeout_ms.saturating_mul(2),
                )),
                &scope,
            );
        }
        if let Some(db) = &self.database {
            push(
                "database.pool_wait_ms",
                Kind::Queue,
                Role::Callee,
                Limit::from_millis_zero_off(db.pool_wait_ms),
                "database",
            );
            push(
                "database.statement_limit_ms",
                Kind::Total,
                Role::Callee,
                Limit::from_millis_zero_off(db.statement_limit_ms),
                "database",
            );
        }
        hop.sends_budget = self.downstream.as_ref().is_some_and(|d| d.propagate);
        hop
    }
}

/// Reads a PostgreSQL time setting as written in `ALTER ... SET` or `pg_db_role_setting`:
/// `ms`, `s`, `min`, `h`, `d` (or `us`), a bare number in milliseconds.
pub fn parse_pg_time(text: &str) -> Option<Duration> {
    const UNITS: [(&str, Duration); 6] = [
        ("us", Duration::from_micros(1)),
        ("ms", Duration::from_millis(1)),
        ("min", Duration::from_secs(60)),
        ("s", Duration::from_secs(1)),
        ("h", Duration::from_secs(3_600)),
        ("d", Duration::from_secs(86_400)),
    ];
    let text = text.trim().trim_matches('\'');
    let text: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    super::parse_time(&text, &UNITS, Duration::from_millis(1))
}

/// A PostgreSQL timeout setting as one session sees it, or as an override sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgSetting {
    /// The setting (`statement_timeout`, ...).
    pub name: String,
    /// Its value in milliseconds (0: no limit).
    pub millis: u64,
    /// Where it comes from (`pg_settings.source`, or the override's role and database).
    pub source: String,
    /// The override's role and database, empty for the session's own value.
    pub scope: String,
}

/// The timeout settings this reader asks PostgreSQL for, with their kind and role.
pub const PG_SETTINGS: [(&str, Kind, Role); 4] = [
    ("statement_timeout", Kind::Total, Role::Own),
    ("lock_timeout", Kind::Queue, Role::Caller),
    (
        "idle_in_transaction_session_timeout",
        Kind::Inactivity,
        Role::Caller,
    ),
    ("transaction_timeout", Kind::Total, Role::Own),
];

/// The hop of a PostgreSQL server at `source` (its URL, without a password): the settings a
/// session sees and every per-role or per-database override.
pub fn postgres_hop(source: &str, settings: &[PgSetting]) -> Hop {
    let mut hop = Hop::new(format!("postgres {source}"), HopKind::Postgres);
    for setting in settings {
        let Some((_, kind, role)) = PG_SETTINGS.iter().find(|(n, _, _)| *n == setting.name) else {
            continue;
        };
        hop.timers.push(Timer {
            name: setting.name.clone(),
            kind: *kind,
            role: *role,
            limit: Limit::from_millis_zero_off(setting.millis),
            origin: Origin::Key {
                source: source.to_owned(),
                key: format!("{} (source: {})", setting.name, setting.source),
            },
            scope: setting.scope.clone(),
        });
    }
    hop
}

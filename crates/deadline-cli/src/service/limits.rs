//! `GET /deadline/limits`: this service's own limits, from its flags, as JSON (the core's
//! [`ServiceLimits`], so `deadline path` reads exactly what is written here). Made once at
//! start: the flags do not change while the service runs.

use std::time::Duration;

use bytes::Bytes;
use deadline::path::service::{DatabaseLimits, DownstreamLimits, RetryBudgetLimits, ServiceLimits};
use deadline_http::propagate::RetryBudgetConfig;

use super::args::ServiceArgs;

/// The reserved path of this service's limits.
pub(crate) const LIMITS_PATH: &str = "/deadline/limits";

/// The limits of a service started with `args`, whose connection limit is `max_connections`
/// (the flag's, or its default).
pub(super) fn limits(args: &ServiceArgs, max_connections: usize) -> ServiceLimits {
    let front_margin = args.front_timeout.map(|_| args.front_margin);
    let downstream = args.downstream.as_ref().map(|url| {
        let budget = match (args.no_retry_budget, &args.retry_budget) {
            (true, _) => None,
            (false, Some(budget)) => Some(budget.config()),
            (false, None) => Some(RetryBudgetConfig::DEFAULT),
        };
        DownstreamLimits {
            url: url.to_string(),
            attempt_timeout_ms: args.timeout,
            attempts: args.attempts,
            margin_ms: args.margin,
            // No connect timeout of its own: the attempt's timeout covers the connection.
            connect_timeout_ms: args.timeout,
            propagate: !args.no_propagate,
            pool_idle_timeout_ms: args.pool_idle_timeout,
            retry_budget: budget.map(|b| RetryBudgetLimits {
                ratio: f64::from(b.ratio_per_mille()) / 1_000.0,
                per_window: b.min_per_window(),
                tokens: b.retry_bucket().map(|bucket| bucket.tokens()),
                window_ms: duration_ms(b.window()),
            }),
        }
    });
    let database = args.postgres.postgres.as_ref().map(|_| DatabaseLimits {
        pool_size: args
            .postgres
            .postgres_pool
            .unwrap_or(args.slots.map_or(16, |s| s + 4)),
        pool_wait_ms: args.postgres.postgres_pool_wait,
        statement_limit_ms: args.postgres.postgres_statement_limit,
    });
    ServiceLimits {
        name: args.name.clone(),
        default_budget_ms: args
            .front_timeout
            .map(|front| front.saturating_sub(args.front_margin).max(1)),
        max_budget_ms: args.max_budget,
        reply_reserve_ms: args.reserve,
        slots: args.slots,
        max_queue: args
            .max_queue
            .or(args.slots.map(|_| super::stack::DEFAULT_MAX_QUEUE)),
        max_queue_wait_ms: args.max_queue_wait,
        front_timeout_ms: args.front_timeout,
        front_margin_ms: front_margin,
        idle_timeout_ms: args.idle_timeout,
        keep_alive_interval_ms: args.keep_alive_interval,
        keep_alive_timeout_ms: args.keep_alive_timeout,
        header_timeout_ms: args.header_timeout,
        send_timeout_ms: args.send_timeout,
        max_body_bytes: args.max_body,
        max_connections,
        downstream,
        database,
    }
}

/// The JSON body of [`LIMITS_PATH`].
pub(super) fn body(limits: &ServiceLimits) -> anyhow::Result<Bytes> {
    Ok(Bytes::from(serde_json::to_vec(limits)?))
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

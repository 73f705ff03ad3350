//! The downstream of `deadline service`: the roots an https:// `--downstream` is verified
//! against, and the propagate client that calls it with this hop's policy, retry budget,
//! hedges, dialects, metrics and tracing.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use deadline::CallPolicy;
use deadline_http::propagate::{
    Callee504, DeadlineClient, H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT, RetryBudgetConfig,
};
use deadline_http::tls::rustls::ClientConfig;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::args::ServiceArgs;
use super::observe::Observers;

/// The roots of an https:// `--downstream` (`--ca`, else the system's), read before binding
/// so a bad file is an error before anything is served; none for an http:// one.
pub(super) fn tls_roots(args: &ServiceArgs) -> anyhow::Result<Option<Arc<ClientConfig>>> {
    Ok(match (&args.downstream, &args.ca) {
        (Some(url), ca) if url.scheme_str() == Some("https") => Some(match ca {
            Some(ca) => deadline_http::tls::client_config_from_pem(ca).context("--ca")?,
            None => deadline_http::tls::client_config_with_system_roots().context(
                "the system's root certificates, for an https:// --downstream (or give --ca)",
            )?,
        }),
        _ => None,
    })
}

/// The downstream's base URL (no trailing slash) and the client that calls it, when there is
/// a `--downstream` (`policy` is its call policy, `tls` its roots if it is https://), its
/// spans and metrics going to `observers`.
pub(super) fn client(
    args: &ServiceArgs,
    policy: Option<CallPolicy>,
    tls: Option<Arc<ClientConfig>>,
    observers: &Observers,
) -> Option<(String, DeadlineClient)> {
    let (Some(url), Some(policy)) = (&args.downstream, policy) else {
        return None;
    };
    let target = args
        .downstream_name
        .clone()
        .unwrap_or_else(|| url.authority().map(ToString::to_string).unwrap_or_default());
    let base = url.to_string().trim_end_matches('/').to_owned();
    let budget = match (args.no_retry_budget, args.retry_budget) {
        (true, _) => None,
        (false, Some(budget)) => Some(budget.config()),
        (false, None) => Some(RetryBudgetConfig::DEFAULT),
    };
    Some((
        base,
        connection(args, policy, tls)
            .tracing(observers.tracing.clone())
            .max_body(args.max_body)
            .target(target)
            .dialects(args.dialects.send.clone().unwrap_or_default())
            .record_metrics(&observers.metrics)
            .retry_budget(budget)
            .hedge(args.hedge.map(|h| h.0))
            .callee_504(Callee504::new(
                (args.retry_504_share * 1_000.0).round() as u32
            )),
    ))
}

/// The client's connections: over https, the connect-first pool, where the budget is stamped
/// after the handshake (its idle connections are closed by the downstream's idle timeout, not
/// `--pool-idle-timeout`); over http, a pool of `TCP_NODELAY` connections.
fn connection(
    args: &ServiceArgs,
    policy: CallPolicy,
    tls: Option<Arc<ClientConfig>>,
) -> DeadlineClient {
    match tls {
        Some(tls) if args.downstream_protocol.is_http2() => DeadlineClient::https_h2(policy, tls),
        Some(tls) => DeadlineClient::https(policy, tls),
        None => {
            let mut connector = HttpConnector::new();
            connector.set_nodelay(true);
            let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                .pool_idle_timeout(Duration::from_millis(args.pool_idle_timeout))
                .pool_timer(TokioTimer::new())
                .http2_only(args.downstream_protocol.is_http2())
                // A downstream h2 connection that stops answering PINGs is closed.
                .timer(TokioTimer::new())
                .http2_keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
                .http2_keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
                .build(connector);
            DeadlineClient::from_client(pool, policy)
        }
    }
}

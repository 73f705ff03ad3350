//! Taking a connection from the pool under the current request's deadline: a leaf both the
//! pool (a new connection for a caller) and a connection (a fresh one in place of a closed
//! one) use, so neither imports the other for it.

use deadline_http::DeadlineContext;
use deadpool_redis::Pool;
use tokio::time::Instant;

use crate::error::Error;
use crate::record;
use crate::settings::Settings;

/// A connection from `pool`, under the current request's deadline (see [`DeadlinePool::get`](crate::DeadlinePool::get)).
pub(crate) async fn take(
    pool: &Pool,
    settings: &Settings,
) -> Result<deadpool_redis::Connection, Error> {
    let context = DeadlineContext::current();
    let cutoff = context.as_ref().and_then(DeadlineContext::cutoff);
    let start = Instant::now();
    let Some(cutoff) = cutoff else {
        let got = pool.get().await;
        record::pool_wait(settings, context.as_ref(), start, got.is_ok());
        return got.map_err(Error::Pool);
    };
    let needed = settings.policy.margin() + settings.policy.min_useful();
    let cutoff = Instant::from_std(cutoff.instant());
    let give_up = cutoff.checked_sub(needed).unwrap_or(start);
    match tokio::time::timeout_at(give_up, pool.get()).await {
        Ok(got) => {
            record::pool_wait(settings, context.as_ref(), start, got.is_ok());
            got.map_err(Error::Pool)
        }
        Err(_) => {
            record::pool_wait(settings, context.as_ref(), start, false);
            Err(Error::PoolTimeout {
                target: settings.name.to_string(),
                waited: Instant::now().saturating_duration_since(start),
            })
        }
    }
}

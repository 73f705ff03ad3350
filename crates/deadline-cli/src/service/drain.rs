//! The end of `deadline service`, once it stopped accepting: the wait for work still in
//! flight (within `--drain-timeout`), the last spans exported, and the hold log flushed, with
//! a warning or an error for whatever could not be waited for or written.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use tokio::time::Instant;

use super::args::ServiceArgs;
use crate::holds::HoldLog;
use crate::otlp::Otlp;

/// How long the last write of the log may take at exit before the service gives up on it.
const LOG_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Drains the service told to stop at `stopping` (now if it never was): waits for the
/// `in_flight` requests, shuts the span export down, flushes the log.
pub(super) async fn drain(
    args: &ServiceArgs,
    stopping: Option<Instant>,
    in_flight: &AtomicUsize,
    otlp: Option<Otlp>,
    log: Option<Arc<HoldLog>>,
) -> anyhow::Result<ExitCode> {
    let drain = Duration::from_secs(args.drain_timeout);
    // Work the baseline keeps running after its caller left is still in flight: wait for it so
    // the log holds every hold, but only for what is left of --drain-timeout.
    // A --drain-timeout too large for the clock means no limit, never a panic at exit.
    let drain_until = stopping.unwrap_or_else(Instant::now).checked_add(drain);
    while in_flight.load(Ordering::Acquire) > 0 && drain_until.is_none_or(|t| Instant::now() < t) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // After the drain: the spans of the requests it waited for are queued by now.
    if let Some(otlp) = otlp {
        otlp.shutdown(&args.name).await;
    }
    let left = in_flight.load(Ordering::Acquire);
    if left > 0 {
        // Logged under the command's target, as every line of `deadline service` is.
        tracing::warn!(
            target: "deadline::service",
            service = %args.name,
            in_flight = left,
            "exiting with work still in flight after --drain-timeout; its holds are not logged"
        );
        eprintln!(
            "deadline service {}: exiting with {left} requests still in flight after {} s; their holds are missing from the log",
            args.name, args.drain_timeout
        );
    }
    if let Some(log) = log {
        let counts = tokio::task::spawn_blocking(move || log.flush(LOG_FLUSH_TIMEOUT))
            .await
            .context("flushing the log")??;
        if counts.lost() > 0 {
            bail!(
                "{} of {} holds are missing from the log ({} dropped while the writer was behind, {} lost to write errors)",
                counts.lost(),
                counts.lost() + counts.written,
                counts.dropped,
                counts.failed
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

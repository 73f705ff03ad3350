//! The enforce layer of `deadline service` as its flags set it (budgets, the slot queue and
//! its admission rules, traces, `Server-Timing`), and its hold hook: each hold written to the
//! log, converted to wall time, and counted out of the requests in flight.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use deadline::Budget;
use deadline_http::enforce::{EnforceDeadlineLayer, Hold};
use tokio::time::Instant;

use super::args::ServiceArgs;
use super::observe::Observers;
use crate::holds::{HoldLine, epoch_ms_now};

/// Requests that may wait for a slot without `--max-queue` (with `--slots`): beyond it a request
/// is refused at once with 503.
pub(super) const DEFAULT_MAX_QUEUE: usize = 1024;

/// The enforce layer of the flags, tracing and recording to `observers`, whose hold hook writes
/// each hold to the log (if any) and counts it out of `in_flight`.
pub(super) fn enforce_layer(
    args: &ServiceArgs,
    observers: &Observers,
    in_flight: Arc<AtomicUsize>,
) -> EnforceDeadlineLayer {
    let log = observers.log.clone();
    let mut enforce = EnforceDeadlineLayer::new(args.name.clone())
        .tracing(observers.tracing.clone())
        .reserve(Duration::from_millis(args.reserve))
        .max_budget(Budget::from_millis(args.max_budget).unwrap_or(Budget::DEFAULT_MAX))
        .enforce(!args.no_enforce)
        .accept(args.dialects.accept)
        .skew_guard(args.dialects.guard())
        .record_metrics(&observers.metrics)
        .server_timing(args.server_timing())
        .trace_exposure(args.trace.clone());
    enforce = enforce
        .queue(args.queue)
        .request_start(args.trust_request_start);
    if let Some(front) = args.front_timeout {
        enforce = enforce
            .front_timeout(Duration::from_millis(front))
            .front_margin(Duration::from_millis(args.front_margin));
    }
    if args.admission {
        let min_useful = args.admission_min_useful.unwrap_or(args.work);
        enforce = enforce.admission(Duration::from_millis(min_useful));
    }
    if let Some(max_wait) = args.max_queue_wait {
        enforce = enforce.max_queue_wait(Duration::from_millis(max_wait));
    }
    if let Some(max_lag) = args.max_lag {
        enforce = enforce.max_runtime_lag(Duration::from_millis(max_lag));
    }
    if let Some(slots) = args.slots {
        // Never unbounded: a budget-less request waits as long as the queue is, and a flood
        // of them held a task and its request each, without limit.
        enforce = enforce
            .slots(slots)
            .max_queue(args.max_queue.unwrap_or(DEFAULT_MAX_QUEUE));
    }
    enforce.on_hold(move |hold: &Hold| {
        if let Some(log) = &log {
            log.write(hold_line(hold));
        }
        in_flight.fetch_sub(1, Ordering::AcqRel);
    })
}

/// Turns a hold report into a log line, converting monotonic instants to wall time.
fn hold_line(hold: &Hold) -> HoldLine {
    let wall_now = epoch_ms_now();
    let mono_now = Instant::now();
    let epoch =
        |t: Instant| wall_now - mono_now.saturating_duration_since(t).as_secs_f64() * 1_000.0;
    HoldLine {
        service: hold.service.to_string(),
        request_id: hold.request_id.clone(),
        outcome: hold.outcome.as_str().to_owned(),
        status: hold.status.map(|s| s.as_u16()),
        budget_ms: hold.budget_ms,
        arrival_ms: epoch(hold.arrival),
        start_ms: hold.work_start.map(epoch),
        end_ms: hold.work_end.map(epoch),
        queued_ms: hold.queued.as_secs_f64() * 1_000.0,
        worked_ms: hold.worked.as_secs_f64() * 1_000.0,
        reply_written: hold.reply_written,
        streamed_ms: hold.streamed.as_secs_f64() * 1_000.0,
        exceeded: hold.exceeded.map(|phase| phase.as_str().to_owned()),
        count: 1,
        last_arrival_ms: None,
    }
}

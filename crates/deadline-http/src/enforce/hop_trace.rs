//! This hop's `Deadline-Trace`, from its hold and the spans its calls recorded.

use deadline::trace::{HopTrace, HopWork};
use http::{HeaderValue, StatusCode};
use tokio::time::Instant;

use super::settings::HopSettings;
use crate::context::DeadlineContext;
use crate::hold::{Hold, HoldOutcome};

/// A root span named after the hop from arrival to `end`, with the answer's status as its
/// outcome and the budget the hop read on arrival (the hold's, after clamping; none without a
/// deadline); under it the time queued, the work, and the spans the handler's outbound calls
/// recorded. Encoded by the core's [`HopTrace`].
pub(crate) fn trace_header(
    settings: &HopSettings,
    ctx: &DeadlineContext,
    hold: &Hold,
    status: StatusCode,
    end: Instant,
) -> HeaderValue {
    let ms = |at: Instant| ctx.ms_since_arrival(at);
    let work = if hold.outcome == HoldOutcome::Rejected {
        HopWork::None
    } else {
        match hold.work_start {
            Some(start) => HopWork::Worked {
                start_ms: ms(start),
                end_ms: ms(hold.work_end.unwrap_or(end)),
                outcome: hold.outcome.as_str(),
            },
            None if hold.outcome == HoldOutcome::Shed => HopWork::Shed {
                queued_ms: ms(hold.arrival + hold.queued),
            },
            None => HopWork::GaveUp {
                queued_ms: ms(hold.arrival + hold.queued),
            },
        }
    };
    let hop = HopTrace {
        name: &settings.trace_name,
        end_ms: ms(end),
        status: status.as_str(),
        budget_ms: hold.budget_ms,
        work,
    };
    let (recorded, dropped) = ctx.take_recorded();
    hop.to_header_value(&recorded, dropped)
}

/// The trace of an answer the hop gave without any work of its own (a server shutting down):
/// the root span alone. Only baseline mode answers so, and it reads no budget.
#[cfg(feature = "baseline")]
pub(crate) fn root_only(settings: &HopSettings, end_ms: u64, status: StatusCode) -> HeaderValue {
    HopTrace {
        name: &settings.trace_name,
        end_ms,
        status: status.as_str(),
        budget_ms: None,
        work: HopWork::None,
    }
    .to_header_value(&[], 0)
}

//! This hop's `Deadline-Trace`, from its hold and the spans its calls recorded, and the
//! `Server-Timing` beside it.

use bytes::Bytes;
use deadline::decimal::StackBuf;
use deadline::trace::{HopTrace, HopWork};
use http::{HeaderValue, StatusCode};
use tokio::time::Instant;

use super::server_timing;
use super::settings::HopSettings;
use crate::context::DeadlineContext;
use crate::hold::{HoldFacts, HoldOutcome};

/// What the layer adds to an answer: this hop's `Deadline-Trace` and, unless the layer has it
/// turned off, its `Server-Timing`.
pub(crate) struct AnswerHeaders {
    pub(crate) trace: HeaderValue,
    pub(crate) timing: Option<HeaderValue>,
}

/// The headers of an answer given with `status` at `end`: the trace is a root span named after
/// the hop from arrival to `end`, with the answer's status as its outcome and the budget the
/// hop read on arrival (the hold's, after clamping; none without a deadline); under it the time
/// queued, the work, and the spans the handler's outbound calls recorded. Encoded by the core's
/// [`HopTrace`]; `Server-Timing` by [`server_timing`].
///
/// A hop whose handler made no calls (most answers) writes both values into one buffer on the
/// stack and moves it to the heap once: the two `HeaderValue`s share that allocation, where
/// copying each would take one apiece. With calls, the trace goes through the codec.
pub(crate) fn answer_headers(
    settings: &HopSettings,
    ctx: &DeadlineContext,
    hold: &HoldFacts,
    status: StatusCode,
    end: Instant,
) -> AnswerHeaders {
    let end_ms = ctx.ms_since_arrival(end);
    let queued_ms = u64::try_from(hold.queued.as_millis()).unwrap_or(u64::MAX);
    let work = if hold.outcome == HoldOutcome::Rejected {
        HopWork::None
    } else {
        match hold.work_start_ms {
            Some(start_ms) => HopWork::Worked {
                start_ms,
                end_ms: hold.work_end_ms.unwrap_or(end_ms),
                outcome: hold.outcome.as_str(),
            },
            None if hold.outcome == HoldOutcome::Shed => HopWork::Shed { queued_ms },
            None => HopWork::GaveUp { queued_ms },
        }
    };
    let hop = HopTrace {
        name: &settings.trace_name,
        end_ms,
        status: status.as_str(),
        budget_ms: hold.budget_ms,
        work,
    };
    let (recorded, dropped) = ctx.take_recorded();
    if recorded.is_empty() && dropped == 0 {
        if let Some(headers) = in_one_buffer(settings, &hop, hold) {
            return headers;
        }
    }
    AnswerHeaders {
        trace: hop.to_header_value(&recorded, dropped),
        timing: timing_alone(settings, hold),
    }
}

/// `Server-Timing` alone, for an answer that shows no trace, if the layer has it on.
pub(crate) fn timing_alone(settings: &HopSettings, hold: &HoldFacts) -> Option<HeaderValue> {
    settings
        .server_timing
        .then(|| server_timing::value(hold.queued, hold.worked, hold.budget_ms))
}

/// Both values written into one buffer, which [`Bytes::from_owner`] moves to the heap in one
/// allocation; each `HeaderValue` is a slice of it (a reference count, no copy), validated as
/// [`HeaderValue::from_bytes`] would. `None` only if a value did not fit or was refused, which
/// the bounds rule out; the caller then makes them one by one.
fn in_one_buffer(
    settings: &HopSettings,
    hop: &HopTrace<'_>,
    hold: &HoldFacts,
) -> Option<AnswerHeaders> {
    let mut out = StackBuf::<{ HopTrace::ALONE_MAX_LEN + server_timing::MAX_LEN }>::new();
    hop.write_alone(&mut out);
    let trace_len = out.len();
    if settings.server_timing {
        server_timing::write_into(&mut out, hold.queued, hold.worked, None, hold.budget_ms);
    }
    let len = out.as_bytes()?.len();
    let bytes = Bytes::from_owner(Written(out));
    let trace = HeaderValue::from_maybe_shared(bytes.slice(..trace_len)).ok()?;
    let timing = if settings.server_timing {
        Some(HeaderValue::from_maybe_shared(bytes.slice(trace_len..len)).ok()?)
    } else {
        None
    };
    Some(AnswerHeaders { trace, timing })
}

/// A written buffer as the owner of a [`Bytes`]: what fitted (all of it, once `as_bytes` has
/// said so).
struct Written<const N: usize>(StackBuf<N>);

impl<const N: usize> AsRef<[u8]> for Written<N> {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes().unwrap_or_default()
    }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadline::trace::Span;

    use super::*;
    use crate::EnforceDeadlineLayer;

    fn hold(budget_ms: Option<u64>) -> HoldFacts {
        HoldFacts {
            outcome: HoldOutcome::Ok,
            status: None,
            budget_ms,
            arrival: Instant::now(),
            work_start_ms: Some(3),
            work_end_ms: Some(41),
            queued: Duration::from_micros(3_250),
            worked: Duration::from_micros(38_004),
            reply_written: false,
            exceeded: None,
            after_caller_left: Duration::ZERO,
        }
    }

    /// The two values made in one buffer are byte for byte what the hop's trace and
    /// `Server-Timing` are when made one by one: with `Server-Timing` on and off, with and
    /// without a budget, and with calls recorded (the codec's path).
    #[test]
    fn one_buffer_gives_the_values_made_one_by_one() {
        let arrival = Instant::now();
        let end = arrival + Duration::from_millis(42);
        for server_timing in [true, false] {
            let layer = EnforceDeadlineLayer::new("inventory").server_timing(server_timing);
            let settings = &layer.settings;
            for budget_ms in [Some(950), Some(0), None] {
                for call in [false, true] {
                    let hold = hold(budget_ms);
                    let ctx = DeadlineContext::new(None, Duration::from_millis(10), arrival);
                    if call {
                        ctx.record(Span::new("call:stock", 4, 40).with_outcome("200"));
                    }
                    let status = StatusCode::OK;
                    let headers = answer_headers(settings, &ctx, &hold, status, end);
                    let hop = HopTrace {
                        name: "inventory",
                        end_ms: 42,
                        status: "200",
                        budget_ms,
                        work: HopWork::Worked {
                            start_ms: 3,
                            end_ms: 41,
                            outcome: "ok",
                        },
                    };
                    let recorded = if call {
                        vec![deadline::trace::Recorded::Span(
                            Span::new("call:stock", 4, 40).with_outcome("200"),
                        )]
                    } else {
                        Vec::new()
                    };
                    let case =
                        format!("server_timing {server_timing}, budget {budget_ms:?}, call {call}");
                    assert_eq!(headers.trace, hop.to_header_value(&recorded, 0), "{case}");
                    let timing = server_timing
                        .then(|| server_timing::value(hold.queued, hold.worked, budget_ms));
                    assert_eq!(headers.timing, timing, "{case}");
                }
            }
        }
        // What the values are, so a change in both paths at once is seen too.
        let layer = EnforceDeadlineLayer::new("inventory").server_timing(true);
        let ctx = DeadlineContext::new(None, Duration::from_millis(10), arrival);
        let headers = answer_headers(&layer.settings, &ctx, &hold(Some(950)), StatusCode::OK, end);
        assert_eq!(
            headers.trace,
            "inventory@0-42=200,.queue@0-3,.work@3-41=ok,^0=950"
        );
        assert_eq!(
            headers.timing.as_ref().map(HeaderValue::as_bytes),
            Some(&b"queue;dur=3.250, work;dur=38.004, budget;dur=950"[..])
        );
    }
}

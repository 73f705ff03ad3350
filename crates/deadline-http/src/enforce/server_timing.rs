//! The W3C `Server-Timing` header, on every answer the layer gives where the application turns
//! it on: where this hop's time went, for a browser's developer tools.
//!
//! The value is `queue;dur=Q, work;dur=W, budget;dur=B`: the time the request waited for a
//! worker slot, the time its work held one, and the budget it arrived with, all in milliseconds
//! as the W3C grammar's `dur` parameter wants them. Queue and work are written with three
//! fractional digits (microseconds: `queue;dur=0.004, work;dur=41.250`); the budget is whole
//! milliseconds, as it travels (`budget;dur=200`, or `budget;dur=0` for one already spent). A
//! request that came without a budget gets no `budget` metric at all, rather than a made-up
//! number. A request answered on arrival (a malformed or spent budget) neither queued nor
//! worked, so both are `0.000`.
//!
//! The grammar (W3C Server Timing, section 3):
//!
//! ```text
//! Server-Timing             = #server-timing-metric
//! server-timing-metric      = metric-name *( OWS ";" OWS server-timing-param )
//! metric-name               = token
//! server-timing-param       = server-timing-param-name OWS "=" OWS server-timing-param-value
//! server-timing-param-name  = token
//! server-timing-param-value = token / quoted-string
//! ```
//!
//! Every name here is a fixed token and every number is digits and one dot, which are `tchar`,
//! so the value is always a valid list; the tests parse it back with that grammar.
//!
//! The header is **appended**, never inserted: a `Server-Timing` the inner service wrote itself
//! (its database time, say) stays, and a browser reads both header lines as one list.
//!
//! # Cost
//!
//! The value is written into a buffer on the stack with the project's own digit writer (no
//! `fmt`). On an answer whose handler made no calls it shares that buffer with the hop's
//! `Deadline-Trace`, and both header values are slices of one allocation; otherwise it is
//! copied once into its own [`HeaderValue`]. It is off by default (a service that does not
//! want its timings shown, or has no browser reading them, pays nothing for it);
//! [`EnforceDeadlineLayer::server_timing(true)`](super::EnforceDeadlineLayer::server_timing)
//! turns it on.

use std::time::Duration;

use deadline::decimal::StackBuf;
use http::{HeaderName, HeaderValue};

use super::settings::HopSettings;
use crate::hold::Hold;

/// `Server-Timing`: the W3C header with this hop's queue and work time and the budget it
/// arrived with, added to every answer of an [`EnforceDeadline`](super::EnforceDeadline)
/// service [turned on](super::EnforceDeadlineLayer::server_timing) for it.
pub const SERVER_TIMING_HEADER: HeaderName = HeaderName::from_static("server-timing");

/// The metric for the time spent waiting for a worker slot.
pub const QUEUE_METRIC: &str = "queue";
/// The metric for the time the work held a worker slot.
pub const WORK_METRIC: &str = "work";
/// The metric for the budget the request arrived with (absent without one).
pub const BUDGET_METRIC: &str = "budget";
/// The metric for the time a response body streamed after its head, in the trailers of a gRPC
/// stream the layer ended at the cutoff.
pub const STREAM_METRIC: &str = "stream";

/// The longest value: four metrics of at most `budget;dur=` + 20 digits + `.` + 3 digits, three
/// `, ` separators.
pub(crate) const MAX_LEN: usize = 4 * (7 + 4 + 20 + 1 + 3) + 3 * 2;

/// The `Server-Timing` trailer of a gRPC stream the layer ended at the cutoff, unless the layer
/// has it turned off: the head's metrics and how long the body streamed
/// (`queue;dur=Q, work;dur=W, stream;dur=S[, budget;dur=B]`).
pub(crate) fn trailer(settings: &HopSettings, hold: &Hold) -> Option<(HeaderName, HeaderValue)> {
    settings.server_timing.then(|| {
        (
            SERVER_TIMING_HEADER,
            write(
                hold.queued,
                hold.worked,
                Some(hold.streamed),
                hold.budget_ms,
            ),
        )
    })
}

/// `queue;dur=Q, work;dur=W[, budget;dur=B]`, with `queue` and `work` in milliseconds to three
/// fractional digits and the budget in whole milliseconds.
pub(crate) fn value(queue: Duration, work: Duration, budget_ms: Option<u64>) -> HeaderValue {
    write(queue, work, None, budget_ms)
}

/// [`value`], with a `stream` metric after `work` when `stream` is given.
fn write(
    queue: Duration,
    work: Duration,
    stream: Option<Duration>,
    budget_ms: Option<u64>,
) -> HeaderValue {
    let mut out = StackBuf::<MAX_LEN>::new();
    write_into(&mut out, queue, work, stream, budget_ms);
    // Only tokens, digits, `;=,. ` are written, all visible ASCII or space, and the bound above
    // is an upper bound, so this cannot fail; an empty value is a harmless fallback rather than a panic
    // in a response path.
    out.as_bytes()
        .and_then(|bytes| HeaderValue::from_bytes(bytes).ok())
        .unwrap_or_else(|| HeaderValue::from_static(""))
}

/// Appends the value of [`value`] (with `stream` when given) to `out`: at most [`MAX_LEN`]
/// bytes. For a caller that writes this hop's other header values into the same buffer.
pub(crate) fn write_into<const N: usize>(
    out: &mut StackBuf<N>,
    queue: Duration,
    work: Duration,
    stream: Option<Duration>,
    budget_ms: Option<u64>,
) {
    out.put(b"queue;dur=");
    millis(out, queue);
    out.put(b", work;dur=");
    millis(out, work);
    if let Some(stream) = stream {
        out.put(b", stream;dur=");
        millis(out, stream);
    }
    if let Some(budget) = budget_ms {
        out.put(b", budget;dur=");
        out.put_decimal(budget);
    }
}

/// `d` in milliseconds with three decimals (microseconds), written byte by byte after the
/// whole part: one store each rather than a copy of a slice.
fn millis<const N: usize>(out: &mut StackBuf<N>, d: Duration) {
    let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
    out.put_decimal(micros / 1_000);
    let frac = micros % 1_000;
    // Each digit is below 10, so the casts keep it whole.
    out.push(b'.');
    out.push(b'0' + (frac / 100) as u8);
    out.push(b'0' + (frac / 10 % 10) as u8);
    out.push(b'0' + (frac % 10) as u8);
}

#[cfg(test)]
mod tests;

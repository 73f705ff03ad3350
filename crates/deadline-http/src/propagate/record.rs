//! The call record: one call's span and its attempts, recorded into the hop's context when
//! the call ends or its future is dropped.

use std::sync::Arc;

use deadline::Stop;
use deadline::trace::{Span, TRACE_HEADER, Trace, name, outcome};
use http::Response;
use tokio::time::Instant;

use crate::context::{ActivityGuard, DeadlineContext};
use crate::error::CallError;

/// The call's span under construction, recorded into the context when dropped.
pub(super) struct CallRecord {
    context: DeadlineContext,
    /// The downstream, shared with each attempt's activity.
    target: Arc<str>,
    /// The call span's name, already a token.
    name: String,
    start_ms: u64,
    attempts: Vec<Span>,
    /// When the attempt in flight started, in ms since arrival.
    in_flight: Option<u64>,
    /// How the call ended; `None` while it runs (and so when its future is dropped).
    outcome: Option<String>,
}

impl CallRecord {
    pub(super) fn new(
        context: DeadlineContext,
        target: Arc<str>,
        name: String,
        start: Instant,
    ) -> CallRecord {
        let start_ms = context.ms_since_arrival(start);
        CallRecord {
            context,
            target,
            name,
            start_ms,
            // One span per attempt, and one more if the planner refuses one: never regrown.
            attempts: Vec::with_capacity(2),
            in_flight: None,
            outcome: None,
        }
    }

    /// An attempt starts at `now`; the hop is calling the target until the guard is dropped.
    pub(super) fn begin(&mut self, now: Instant) -> ActivityGuard {
        self.in_flight = Some(self.context.ms_since_arrival(now));
        self.context.enter_calling(Arc::clone(&self.target))
    }

    /// The attempt in flight ended at `end` without a response.
    pub(super) fn end(&mut self, end: Instant, outcome: &str) {
        if let Some(span) = self.close(end, outcome) {
            self.attempts.push(span);
        }
    }

    /// The attempt in flight got `response` at `end`: its callee's trace goes under it.
    pub(super) fn end_with_response<RB>(&mut self, end: Instant, response: &Response<RB>) {
        let Some(mut span) = self.close(end, response.status().as_str()) else {
            return;
        };
        if let Some(value) = response.headers().get(TRACE_HEADER) {
            let mut callee = Trace::from_header_value(value);
            callee.shift(span.start_ms);
            span.children = callee.spans;
            if callee.dropped > 0 {
                self.context.record_dropped(callee.dropped);
            }
        }
        self.attempts.push(span);
    }

    /// The planner refused an attempt at `now`: a zero-length `skipped` span.
    fn skipped(&mut self, now: Instant) {
        let at = self.context.ms_since_arrival(now);
        self.attempts
            .push(Span::new(name::ATTEMPT, at, at).with_outcome(outcome::SKIPPED));
    }

    /// The planner stopped the call at `now` with `stop`, and the call ends with `result`.
    pub(super) fn stopped<RB>(
        &mut self,
        now: Instant,
        stop: Stop,
        result: &Result<Response<RB>, CallError>,
    ) {
        if let Stop::NotEnoughTime { .. } = stop {
            self.skipped(now);
        }
        self.outcome = Some(match result {
            Ok(response) => response.status().as_str().to_owned(),
            Err(error) => error.outcome().to_owned(),
        });
    }

    /// The call ends with `response`.
    pub(super) fn finish_with<RB>(&mut self, response: &Response<RB>) {
        self.outcome = Some(response.status().as_str().to_owned());
    }

    fn close(&mut self, end: Instant, outcome: &str) -> Option<Span> {
        let start = self.in_flight.take()?;
        let end = self.context.ms_since_arrival(end);
        Some(Span::new(name::ATTEMPT, start, end).with_outcome(outcome))
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Some(span) = self.close(now, outcome::CANCELLED) {
            self.attempts.push(span);
        }
        let end = self.context.ms_since_arrival(now);
        let outcome = self
            .outcome
            .take()
            .unwrap_or_else(|| String::from(outcome::CANCELLED));
        let mut span =
            Span::new(std::mem::take(&mut self.name), self.start_ms, end).with_outcome(outcome);
        span.children = std::mem::take(&mut self.attempts);
        self.context.record(span);
    }
}

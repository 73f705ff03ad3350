//! The call record: one call's span and its attempts, recorded into the hop's context when
//! the call ends or its future is dropped.
//!
//! Each attempt keeps its callee's `Deadline-Trace` as the header value it came in (checked,
//! not decoded): the enforce layer writes it into this hop's trace straight from the text (see
//! [`deadline::trace::EncodedTrace`]).

use std::sync::Arc;

use deadline::Stop;
use deadline::trace::{
    AttemptSpan, Attempts, CallSpan, EncodedTrace, Outcome, TRACE_HEADER, outcome,
};
use http::{Response, StatusCode};
use tokio::time::Instant;

use crate::context::{ActivityGuard, CallSlot, DeadlineContext};
use crate::error::CallError;

/// The call's span under construction, recorded into the context when dropped.
pub(super) struct CallRecord {
    context: DeadlineContext,
    /// The downstream, shared with each attempt's activity.
    target: Arc<str>,
    /// The call span, its end and outcome filled in when it is recorded.
    call: CallSpan,
    /// When the attempt in flight started, in ms since arrival.
    in_flight: Option<u64>,
    /// How the call ended; `None` while it runs (and so when its future is dropped).
    outcome: Option<Outcome>,
    /// Recorded into the context already (by [`into_slot`](Self::into_slot)).
    recorded: bool,
    /// The last attempt that got a response: the one whose response a call returns (a call
    /// returns the latest answer it kept, and attempts are recorded in the order they end).
    answered: Option<usize>,
}

impl CallRecord {
    /// A call to `target` recorded as `name` (`call:<target>`, made once per client), starting
    /// at `start`.
    pub(super) fn new(
        context: DeadlineContext,
        target: Arc<str>,
        name: Arc<str>,
        start: Instant,
    ) -> CallRecord {
        let start_ms = context.ms_since_arrival(start);
        CallRecord {
            context,
            target,
            call: CallSpan {
                name,
                start_ms,
                end_ms: start_ms,
                outcome: Outcome::Word(outcome::CANCELLED),
                attempts: Attempts::new(),
            },
            in_flight: None,
            outcome: None,
            recorded: false,
            answered: None,
        }
    }

    /// An attempt starts at `now`; the hop is calling the target until the guard is dropped.
    pub(super) fn begin(&mut self, now: Instant) -> ActivityGuard {
        self.in_flight = Some(self.context.ms_since_arrival(now));
        self.context.enter_calling(Arc::clone(&self.target))
    }

    /// The attempt in flight ended at `end` without a response, with `outcome` (a word of
    /// [`outcome`]).
    pub(super) fn end(&mut self, end: Instant, outcome: &'static str) {
        self.close(end, Outcome::Word(outcome), None);
    }

    /// The attempt in flight got `response`, which stands for `status`, at `end`: its callee's
    /// trace goes under it.
    pub(super) fn end_with_response<RB>(
        &mut self,
        end: Instant,
        status: StatusCode,
        response: &Response<RB>,
    ) {
        let callee = self.callee_trace(response);
        self.close(end, Outcome::Status(status), callee);
    }

    /// The planner stopped the call at `now` with `stop`, and the call ends with `result`.
    pub(super) fn stopped<RB>(
        &mut self,
        now: Instant,
        stop: Stop,
        result: &Result<Response<RB>, CallError>,
    ) {
        if let Some(word) = stop.reason().span_outcome() {
            // The planner (or the retry budget) refused an attempt: a zero-length span saying
            // why (`skipped`, `throttled`, ...).
            let at = self.context.ms_since_arrival(now);
            self.push(AttemptSpan {
                start_ms: at,
                end_ms: at,
                outcome: Outcome::Word(word),
                callee: None,
            });
        }
        self.outcome = Some(match result {
            Ok(response) => Outcome::Status(crate::enforce::answer::status_of(response)),
            Err(error) => Outcome::Word(error.outcome()),
        });
    }

    /// The hop is calling the target until the guard is dropped (for a hedged call, whose
    /// attempts are recorded with [`attempt`](Self::attempt) once they end).
    pub(super) fn calling(&self) -> ActivityGuard {
        self.context.enter_calling(Arc::clone(&self.target))
    }

    /// One attempt of a hedged call, from `start` to `end`, ended with `outcome`; a response's
    /// callee trace goes under it.
    pub(super) fn attempt<RB>(
        &mut self,
        start: Instant,
        end: Instant,
        outcome: Result<&Response<RB>, &'static str>,
    ) {
        let (outcome, callee) = match outcome {
            Ok(response) => (
                Outcome::Status(response.status()),
                self.callee_trace(response),
            ),
            Err(word) => (Outcome::Word(word), None),
        };
        self.push(AttemptSpan {
            start_ms: self.context.ms_since_arrival(start),
            end_ms: self.context.ms_since_arrival(end),
            outcome,
            callee,
        });
    }

    /// The call ends with a response that stands for `status`.
    pub(super) fn finish_with(&mut self, status: StatusCode) {
        self.outcome = Some(Outcome::Status(status));
    }

    /// Ends the attempt in flight, if any, at `end`.
    fn close(&mut self, end: Instant, outcome: Outcome, callee: Option<EncodedTrace>) {
        let Some(start_ms) = self.in_flight.take() else {
            return;
        };
        self.push(AttemptSpan {
            start_ms,
            end_ms: self.context.ms_since_arrival(end),
            outcome,
            callee,
        });
    }

    /// Appends `attempt`; one that got a response (a status) becomes the one that answered.
    fn push(&mut self, attempt: AttemptSpan) {
        let answered = matches!(attempt.outcome, Outcome::Status(_));
        self.call.attempts.push(attempt);
        if answered {
            self.answered = Some(self.call.attempts.len() - 1);
        }
    }
}

impl CallRecord {
    /// The callee's `Deadline-Trace` in `response`, kept as the text it came in, where this
    /// hop keeps its callees' traces (only where its own answer shows its trace).
    fn callee_trace<RB>(&self, response: &Response<RB>) -> Option<EncodedTrace> {
        if !self.context.keeps_callee_traces() {
            return None;
        }
        response
            .headers()
            .get(TRACE_HEADER)
            .map(|value| EncodedTrace::new(value.clone()))
    }

    /// Records the call into the context now, and where: its response's body corrects the
    /// outcome through the slot if it fails later.
    pub(super) fn into_slot(mut self) -> CallSlot {
        self.record()
    }

    fn record(&mut self) -> CallSlot {
        self.recorded = true;
        let now = Instant::now();
        self.close(now, Outcome::Word(outcome::CANCELLED), None);
        self.call.end_ms = self.context.ms_since_arrival(now);
        if let Some(outcome) = self.outcome.take() {
            self.call.outcome = outcome;
        }
        let call = CallSpan {
            name: Arc::clone(&self.call.name),
            attempts: std::mem::take(&mut self.call.attempts),
            ..self.call
        };
        self.context.record_call(call, self.answered)
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        if !self.recorded {
            self.record();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadline::trace::Recorded;

    use super::*;

    /// A call whose planner refused a retry returns the answer it kept, after the refused
    /// attempt's zero-length span: a body failing after that head corrects the attempt that got
    /// the answer, not the refusal.
    #[test]
    fn a_body_failing_after_a_refused_retry_corrects_the_attempt_that_answered() {
        let now = Instant::now();
        let context = DeadlineContext::new(None, Duration::ZERO, now);
        let mut record = CallRecord::new(
            context.clone(),
            Arc::from("inventory"),
            Arc::from("call:inventory"),
            now,
        );
        drop(record.begin(now));
        let response = Response::builder()
            .status(StatusCode::SERVICE_UNAVAILABLE)
            .body(())
            .expect("a response");
        record.end_with_response(now, StatusCode::SERVICE_UNAVAILABLE, &response);
        let result: Result<Response<()>, CallError> = Ok(response);
        let stop = Stop::NotEnoughTimeAfterBackoff {
            attempt: 2,
            remaining: Duration::from_millis(40),
            delay: Duration::from_millis(30),
            needed: Duration::from_millis(60),
        };
        record.stopped(now, stop, &result);
        record.into_slot().body_ended(Outcome::Word(outcome::ERROR));

        let (recorded, _) = context.take_recorded();
        let Some(Recorded::Call(call)) = recorded.first() else {
            panic!("the call was not recorded: {recorded:?}");
        };
        let attempts: Vec<&Outcome> = call.attempts.iter().map(|a| &a.outcome).collect();
        assert_eq!(
            attempts,
            [
                &Outcome::Word(outcome::ERROR),
                &Outcome::Word(outcome::SKIPPED_BACKOFF)
            ],
            "the attempt that answered takes the body's outcome; the refusal keeps its own"
        );
        assert_eq!(call.outcome, Outcome::Word(outcome::ERROR));
    }
}

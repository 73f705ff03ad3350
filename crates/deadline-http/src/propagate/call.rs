//! The call loop: one outbound call, from the first plan to its result.

use std::sync::Arc;

use deadline::plan::backoff::{Delayed, PacedDecision};
use deadline::plan::retry::LastAnswer;
use deadline::trace::outcome;
use deadline::{Budget, CallPolicy, Deadline, Plan, Stop};
use http::{Request, Response};
use tokio::time::Instant;
use tokio::time::error::Elapsed;

use super::attempt::{AttemptRequests, LateStamp, authority_name};
use super::body::{AttemptEnd, CallBody};
use super::record::CallRecord;
use super::retry::{self, Paced, Retries};
use super::send::SendAttempt;
use super::target::{Target, UNNAMED_TARGET};
use crate::context::DeadlineContext;
use crate::error::{AttemptSkipped, BoxError, CallError, DeadlineExceeded};

/// Everything one call needs, moved into its future.
pub(super) struct Call<T, B> {
    /// Sends each attempt (cloned per attempt when hedging).
    pub(super) inner: T,
    pub(super) policy: CallPolicy,
    pub(super) request: Request<B>,
    pub(super) explicit: Option<Deadline>,
    pub(super) deadline: Option<Deadline>,
    /// The configured target; the URI's authority is only looked up when a name is needed.
    pub(super) target: Option<Target>,
    pub(super) context: Option<DeadlineContext>,
    pub(super) dialects: super::dialects::DialectSet,
    /// Counts the attempts and skips, and times the call (until it returns or is dropped).
    pub(super) metrics: crate::metrics_hook::CallHook,
    /// Backoff, retry budgets and draws, shared by the client's clones.
    pub(super) retries: Arc<Retries>,
    /// The largest response body a call reads.
    pub(super) max_body: u64,
    /// Whether each attempt's request carries its end (for an evicting client below).
    pub(super) mark_attempts: bool,
    /// What each attempt's request carries besides its budget headers.
    pub(super) dress: Dress,
}

/// What each attempt's request carries besides its budget headers, chosen once per call: its
/// planned budget for a client below that stamps it again once connected ([`LateStamp`]), and
/// its OpenTelemetry span. The one place the call loop and both of hedging's sends dress an
/// attempt.
pub(super) struct Dress {
    /// Whether each attempt's request carries its planned budget.
    pub(super) stamp_late: bool,
    /// The tracer and parent of the attempts' spans.
    #[cfg(feature = "otel")]
    pub(super) spans: crate::otel::CallSpans,
}

/// An attempt's OpenTelemetry span (nothing without the feature).
#[cfg(feature = "otel")]
pub(super) type AttemptSpan = crate::otel::AttemptSpan;
/// An attempt's OpenTelemetry span (nothing without the feature).
#[cfg(not(feature = "otel"))]
pub(super) type AttemptSpan = ();

impl Dress {
    /// Dresses the `number`-th attempt's `request`, planned at `at` with `budget`: the late
    /// stamp (an attempt without a budget has no header to rewrite, and carries nothing), and
    /// the attempt's span, whose `traceparent` goes in its headers.
    pub(super) fn dress<B: Clone>(
        &self,
        request: &mut Request<B>,
        at: Instant,
        number: u32,
        budget: Option<Budget>,
        requests: &AttemptRequests<B>,
    ) -> AttemptSpan {
        if self.stamp_late
            && let Some(budget) = budget
        {
            let stamp = LateStamp::new(at, budget, requests.dialect_set().clone());
            request.extensions_mut().insert(stamp);
        }
        #[cfg(feature = "otel")]
        {
            let method = request.method().clone();
            let budget_ms = budget.map(Budget::as_millis);
            self.spans
                .attempt(&method, request.headers_mut(), number, budget_ms)
        }
        #[cfg(not(feature = "otel"))]
        let _ = number;
    }
}

/// How the last attempt that did not succeed ended.
pub(super) enum Failure<RB> {
    /// A 5xx response (or a gRPC UNAVAILABLE or DEADLINE_EXCEEDED, or a 429 with a pushback),
    /// kept to return if no further attempt is sent.
    Response(Response<RB>),
    /// The inner service failed.
    Error(BoxError),
    /// The attempt's wait elapsed; `capped` when the caller's deadline cut the wait short of
    /// the policy's timeout.
    Timeout { capped: bool },
}

impl<T, B> Call<T, B>
where
    T: SendAttempt<B>,
    B: Clone + Send,
{
    /// Plans, sends and judges attempts until one is returned or the planner stops.
    pub(super) async fn run(mut self) -> Result<Response<CallBody<T::Body>>, CallError> {
        let repeatable = self.inner.repeatable(&self.request);
        if let Some(delay) = self
            .retries
            .hedge_for(&self.request, &self.policy, repeatable)
        {
            // Boxed apart: held inline, the hedged loop's state sat beside the plain loop's in
            // every call's future (6,336 bytes against 4,176 boxed apart, every feature on),
            // all of it copied into the call's box and at each move. A hedged call pays one
            // allocation more; it already makes one per attempt in flight.
            return Box::pin(self.run_hedged(delay)).await;
        }
        // The call's fields are used in place, not taken apart into locals: the future keeps its
        // argument whole from start to end, so a local moved out of it would be stored twice.

        // The downstream's name, shared by the call's span and its attempts' activity. Made
        // from the URI only when a context needs it (or, below, before the request is moved
        // into its last attempt): without either, only an error message would ever read it.
        let (mut target, mut record) = start_record(self.target, self.context, &self.request);
        let attempts = if repeatable {
            self.policy.attempts()
        } else {
            1
        };
        let mut requests =
            AttemptRequests::new(self.request, attempts, self.explicit).dialects(self.dialects);
        let mut plan = Plan::new(self.policy);
        let mut last: Option<Failure<CallBody<T::Body>>> = None;
        let mut answer = LastAnswer::default();
        // The retry budget, looked up by its key (the configured target, or the URI's
        // authority) at the first plan.
        let mut budget = None;
        loop {
            let now = Instant::now();
            let budget = budget.get_or_insert_with(|| {
                self.retries
                    .budget(target_name(target.as_deref(), &requests), &self.policy, now)
            });
            let decision =
                self.retries
                    .plan(&requests, &mut plan, self.deadline, now, &answer, budget);
            let Paced {
                decision,
                start,
                unsent,
            } = retry::pace(&self.policy, decision, now, self.deadline).await;
            let (sent_at, attempt) = match decision {
                PacedDecision::Send(Delayed { attempt, .. }) => (start, attempt),
                PacedDecision::Stop(stop) => {
                    self.metrics.stopped(&stop);
                    let target = || target_name(target.as_deref(), &requests).to_owned();
                    let mut result =
                        stopped(last, plan.sent() - unsent, stop, &self.policy, target);
                    if let Some(mut record) = record.take() {
                        record.stopped(start, stop, &result);
                        report_body(&mut result, record);
                    }
                    return result;
                }
            };
            if target.is_none() && requests.is_last(plan.sent()) {
                target = requests.uri().map(|uri| Arc::from(authority_name(uri)));
            }
            // No request when it is gone (ruled out by the check before planning) or a retry's
            // headers cannot be made again (see `AttemptRequests::next`): the next plan stops,
            // and the previous attempt's failure is what the call returns.
            let Some(mut attempt_request) = requests.next(plan.sent(), attempt.budget) else {
                continue;
            };
            // A 5xx kept from the previous attempt is only returned if none follows it: let it
            // go (and its connection with it) before the next attempt.
            drop(last.take());
            self.metrics.attempt(plan.sent());
            #[cfg_attr(not(feature = "otel"), allow(clippy::let_unit_value, unused_variables))]
            let span = self.dress.dress(
                &mut attempt_request,
                sent_at,
                plan.sent(),
                attempt.budget,
                &requests,
            );
            let _calling = record.as_mut().map(|record| record.begin(sent_at));
            // The attempt's wait covers its response's body too (see `body`).
            let until = AttemptEnd::of(sent_at, &attempt, &self.policy);
            // For the client below: a connection an attempt timed out on is not reused.
            if self.mark_attempts {
                attempt_request.extensions_mut().insert(until);
            }
            let outcome = tokio::time::timeout_at(until.at, async {
                self.inner.ready().await.map_err(Into::into)?;
                let response = self.inner.send(attempt_request).await.map_err(Into::into)?;
                Ok(until.bound(response, self.max_body))
            })
            .await;
            let end = Instant::now();
            #[cfg(feature = "otel")]
            end_span(span, &outcome, self.deadline, || end);
            match judge(
                outcome,
                end,
                record.as_mut(),
                until.capped,
                attempt.budget,
                &mut answer,
            ) {
                Ok(response) => {
                    budget.succeeded(plan.sent(), 0);
                    let mut result = Ok(response);
                    if let Some(record) = record.take() {
                        report_body(&mut result, record);
                    }
                    return result;
                }
                Err(failure) => last = Some(failure),
            }
        }
    }
}

/// Ends an attempt's OpenTelemetry span with its `outcome` at `end`, under the call's
/// `deadline`. Without a span (tracing off), it reads nothing: not the answer's status, not the
/// clock.
#[cfg(feature = "otel")]
pub(super) fn end_span<RB>(
    span: crate::otel::AttemptSpan,
    outcome: &Result<Result<Response<RB>, BoxError>, Elapsed>,
    deadline: Option<Deadline>,
    end: impl FnOnce() -> Instant,
) {
    use crate::otel::AttemptEnding;
    if !span.is_live() {
        return;
    }
    let ending = match outcome {
        // A gRPC reply's status is its `grpc-status`, as the call loop judges it.
        Ok(Ok(response)) => AttemptEnding::Answered(super::grpc::verdict(response).0),
        Ok(Err(_)) => AttemptEnding::Error,
        Err(_) => AttemptEnding::Timeout,
    };
    span.end(ending, deadline.map(|d| d.remaining(end().into_std())));
}

/// Records the call now; a response's body then reports to the call's span how it ends (a body
/// that fails after the head came corrects the span's outcome).
pub(super) fn report_body<RB>(
    result: &mut Result<Response<CallBody<RB>>, CallError>,
    record: CallRecord,
) {
    let slot = record.into_slot();
    if let Ok(response) = result {
        response.body_mut().report_to(slot);
    }
}

/// The downstream's name: the configured (or already looked-up) one, else the URI's authority
/// while the call still holds its request.
pub(super) fn target_name<'a, B: Clone>(
    target: Option<&'a str>,
    requests: &'a AttemptRequests<B>,
) -> &'a str {
    match (target, requests.uri()) {
        (Some(target), _) => target,
        (None, Some(uri)) => authority_name(uri),
        (None, None) => UNNAMED_TARGET,
    }
}

/// The downstream's name (when it is already known or a context needs it) and the call's
/// record (inside a context).
pub(super) fn start_record<B>(
    target: Option<Target>,
    context: Option<DeadlineContext>,
    request: &Request<B>,
) -> (Option<Arc<str>>, Option<CallRecord>) {
    let start = Instant::now();
    match (target, context) {
        (Some(target), Some(context)) => {
            let record = CallRecord::new(context, target.name.clone(), target.span, start);
            (Some(target.name), Some(record))
        }
        (Some(target), None) => (Some(target.name), None),
        (None, Some(context)) => {
            let name: Arc<str> = Arc::from(authority_name(request.uri()));
            let span: Arc<str> = Arc::from(deadline::trace::name::call(&name));
            (
                Some(name.clone()),
                Some(CallRecord::new(context, name, span, start)),
            )
        }
        (None, None) => (None, None),
    }
}

/// What an attempt's `outcome` at `end` means for the call: a response to return (anything but
/// a failure another attempt may fix), or how it failed, with what that says about retrying in
/// `answer` (the attempt having told its callee `budget`). The attempt's span is closed either
/// way.
fn judge<RB>(
    outcome: Result<Result<Response<RB>, BoxError>, Elapsed>,
    end: Instant,
    mut record: Option<&mut CallRecord>,
    capped: bool,
    budget: Option<Budget>,
    answer: &mut LastAnswer,
) -> Result<Response<RB>, Failure<RB>> {
    match outcome {
        Ok(Ok(response)) => {
            let (status, failed) = super::grpc::verdict(&response);
            if let Some(record) = &mut record {
                record.end_with_response(end, status, &response);
            }
            if failed {
                *answer = LastAnswer::of(status, response.headers(), budget);
                return Err(Failure::Response(response));
            }
            if let Some(record) = record {
                record.finish_with(status);
            }
            Ok(response)
        }
        Ok(Err(error)) => {
            if let Some(record) = record {
                record.end(end, outcome::ERROR);
            }
            *answer = LastAnswer::default();
            Err(Failure::Error(error))
        }
        Err(_elapsed) => {
            if let Some(record) = record {
                record.end(end, outcome::TIMEOUT);
            }
            *answer = LastAnswer::default();
            Err(Failure::Timeout { capped })
        }
    }
}

/// The call's result once the planner sends no more attempts (`target` names the downstream,
/// for the deadline error's message).
pub(super) fn stopped<RB>(
    last: Option<Failure<RB>>,
    sent: u32,
    stop: Stop,
    policy: &CallPolicy,
    target: impl FnOnce() -> String,
) -> Result<Response<RB>, CallError> {
    let out_of_time = stop.reason().is_out_of_time();
    let deadline = || CallError::DeadlineExceeded(DeadlineExceeded::calling(target(), sent, stop));
    match last {
        None => Err(CallError::AttemptSkipped(AttemptSkipped::new(sent, stop))),
        Some(Failure::Response(response)) => Ok(response),
        Some(Failure::Timeout { capped }) if capped || out_of_time => Err(deadline()),
        Some(Failure::Timeout { .. }) => Err(CallError::TimedOut {
            attempts_sent: sent,
            timeout: policy.timeout(),
        }),
        Some(Failure::Error(_)) if out_of_time => Err(deadline()),
        Some(Failure::Error(source)) => Err(CallError::Inner {
            attempts_sent: sent,
            source,
        }),
    }
}

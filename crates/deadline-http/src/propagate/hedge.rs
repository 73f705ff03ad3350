//! The hedged call loop: attempts that overlap, the first usable answer winning.
//!
//! Used instead of the plain loop when the client hedges ([`PropagateDeadline::hedge`]), the
//! request's method is idempotent (`GET`, `HEAD`, `OPTIONS`, `TRACE`, `PUT`, `DELETE`: both
//! copies may run to the end), propagation is on and the policy allows more than one attempt.
//!
//! - The first attempt goes out as usual. When no answer came within the hedge delay, the
//!   planner is asked for another attempt as of that instant ([`deadline::plan::hedge`]); it
//!   is sent only when the planner would send it and the retry budget allows it (a hedge counts
//!   as a retry), and then the next hedge waits another delay.
//! - The first answer that is not a failure (any status but a 5xx or a 429 with a pushback)
//!   wins. The others are dropped: with hyper's HTTP/1 client that closes their connections,
//!   so their callees see the hang-up and stop. They end in the trace as `lost`.
//! - A failure does not end the others. When every attempt out has failed, the call goes on as
//!   the plain loop does: a retry after the backoff (and the callee's pushback), or a stop.
//!
//! The latency a percentile delay is computed from is the call's, from its first attempt to
//! its winning answer: a hedged call's latency is at least the delay, so hedging p95 keeps the
//! observed p95 where it is rather than chasing itself down.
//!
//! [`PropagateDeadline::hedge`]: super::PropagateDeadline::hedge

use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::task::Poll;

use deadline::plan::backoff::{Delayed, PacedDecision};
use deadline::plan::hedge::HedgeDelay;
use deadline::plan::retry::LastAnswer;
use deadline::trace::outcome;
use deadline::{Attempt, Budget, CallPolicy, Plan, Stop};
use http::{Request, Response};
use tokio::time::error::Elapsed;
use tokio::time::{Instant, Sleep};

use super::attempt::AttemptRequests;
use super::body::{AttemptEnd, CallBody};
use super::call::{Call, Failure, report_body, start_record, stopped, target_name};
use super::record::CallRecord;
use super::retry::{self, Paced, Retries};
use super::send::SendAttempt;
use super::target::UNNAMED_TARGET;
use crate::error::{BoxError, CallError};

/// What one attempt's future gives: its answer, or its wait elapsed.
type Outcome<RB> = Result<Result<Response<RB>, BoxError>, Elapsed>;

/// One attempt out.
#[derive(Clone, Copy)]
struct Flight {
    sent_at: Instant,
    /// Its number, from 1 (above 1: it drew from the retry budget).
    number: u32,
    budget: Option<Budget>,
    /// The caller's deadline cut its wait short of the policy's timeout.
    capped: bool,
}

impl Flight {
    /// `attempt`, sent at `sent_at` under `policy`.
    fn new(sent_at: Instant, attempt: &Attempt, policy: &CallPolicy) -> Flight {
        Flight {
            sent_at,
            number: attempt.number,
            budget: attempt.budget,
            capped: attempt.wait < policy.timeout(),
        }
    }
}

/// The timer of the next hedge after an attempt sent at `at`; none while a percentile delay
/// has too few samples.
fn next_hedge(
    retries: &Retries,
    delay: HedgeDelay,
    at: Instant,
) -> Option<(Instant, Pin<Box<Sleep>>)> {
    retries
        .hedge_delay(delay)
        .map(|d| (at + d, Box::pin(tokio::time::sleep_until(at + d))))
}

/// The call's record and the attempts still out: those left when the call's future is dropped
/// are recorded `cancelled`.
struct Hedged {
    record: Option<CallRecord>,
    out: Vec<Flight>,
}

impl Hedged {
    /// Records every attempt still out as ended at `now` with `word`, and forgets them.
    fn close_all(&mut self, now: Instant, word: &'static str) {
        let out = std::mem::take(&mut self.out);
        if let Some(record) = &mut self.record {
            for flight in out {
                record.attempt::<()>(flight.sent_at, now, Err(word));
            }
        }
    }
}

impl Drop for Hedged {
    fn drop(&mut self) {
        self.close_all(Instant::now(), outcome::CANCELLED);
    }
}

/// One attempt: readiness and the call, within its wait, which bounds its response's body too.
async fn flight<T, B>(
    mut inner: T,
    mut request: Request<B>,
    until: AttemptEnd,
    max_body: u64,
    mark: bool,
    #[cfg(feature = "otel")] span: (crate::otel::AttemptSpan, Option<deadline::Deadline>),
) -> Outcome<CallBody<T::Body>>
where
    T: SendAttempt<B>,
{
    // For the client below: a connection an attempt timed out on is not reused.
    if mark {
        request.extensions_mut().insert(until);
    }
    let outcome = tokio::time::timeout_at(until.at, async move {
        inner.ready().await.map_err(Into::into)?;
        let response = inner.send(request).await.map_err(Into::into)?;
        Ok(until.bound(response, max_body))
    })
    .await;
    // A flight dropped before this (a hedge that lost) ends its span as `cancelled`.
    #[cfg(feature = "otel")]
    super::call::end_span(span.0, &outcome, span.1, Instant::now);
    outcome
}

/// What woke the loop.
enum Event<RB> {
    /// Attempt `index` ended.
    Ended(usize, Outcome<RB>),
    /// The hedge delay passed with every attempt still out.
    Hedge,
}

impl<T, B> Call<T, B>
where
    T: SendAttempt<B>,
    B: Clone + Send,
{
    /// The call with hedges after `delay` (see the [module docs](self)).
    pub(super) async fn run_hedged(
        self,
        delay: HedgeDelay,
    ) -> Result<Response<CallBody<T::Body>>, CallError> {
        let Call {
            inner,
            policy,
            request,
            explicit,
            deadline,
            target,
            context,
            dialects,
            metrics,
            retries,
            max_body,
            mark_attempts,
            dress,
        } = self;
        let (target, record) = start_record(target, context, &request);
        let name = || {
            target
                .as_deref()
                .map_or_else(|| UNNAMED_TARGET.to_owned(), str::to_owned)
        };
        let mut hedged = Hedged {
            record,
            out: Vec::new(),
        };
        let _calling = hedged.record.as_ref().map(CallRecord::calling);
        let mut requests =
            AttemptRequests::new(request, policy.attempts(), explicit).dialects(dialects);
        let mut plan = Plan::new(policy);
        let mut last: Option<Failure<CallBody<T::Body>>> = None;
        let mut answer = LastAnswer::default();
        let mut flights = Vec::new();
        let mut hedge_timer: Option<(Instant, Pin<Box<Sleep>>)> = None;
        let mut first_sent: Option<Instant> = None;
        // The retry budget, looked up at the first plan (see `Call::run`).
        let mut budget = None;
        loop {
            if flights.is_empty() {
                hedge_timer = None;
                let now = Instant::now();
                let budget = budget.get_or_insert_with(|| {
                    retries.budget(target_name(target.as_deref(), &requests), &policy, now)
                });
                let decision = retries.plan(&requests, &mut plan, deadline, now, &answer, budget);
                let Paced {
                    decision,
                    start,
                    unsent,
                } = retry::pace(&policy, decision, now, deadline).await;
                let (at, attempt) = match decision {
                    PacedDecision::Send(Delayed { attempt, .. }) => (start, attempt),
                    PacedDecision::Stop(stop) => {
                        metrics.stopped(&stop);
                        let mut result = stopped(last, plan.sent() - unsent, stop, &policy, name);
                        if let Some(mut record) = hedged.record.take() {
                            record.stopped(start, stop, &result);
                            report_body(&mut result, record);
                        }
                        return result;
                    }
                };
                let Some(mut request) = requests.next(plan.sent(), attempt.budget) else {
                    continue;
                };
                #[cfg_attr(not(feature = "otel"), allow(clippy::let_unit_value, unused_variables))]
                let span = dress.dress(&mut request, at, plan.sent(), attempt.budget, &requests);
                drop(last.take());
                metrics.attempt(plan.sent());
                first_sent.get_or_insert(at);
                flights.push(Box::pin(flight(
                    inner.clone(),
                    request,
                    AttemptEnd::of(at, &attempt, &policy),
                    max_body,
                    mark_attempts,
                    #[cfg(feature = "otel")]
                    (span, deadline),
                )));
                hedged.out.push(Flight::new(at, &attempt, &policy));
                hedge_timer = next_hedge(&retries, delay, at);
            }

            let event = poll_fn(|cx| {
                for (index, flight) in flights.iter_mut().enumerate() {
                    if let Poll::Ready(outcome) = flight.as_mut().poll(cx) {
                        return Poll::Ready(Event::Ended(index, outcome));
                    }
                }
                if let Some((_, timer)) = &mut hedge_timer {
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Event::Hedge);
                    }
                }
                Poll::Pending
            })
            .await;

            match event {
                Event::Hedge => {
                    let Some((at, _)) = hedge_timer.take() else {
                        continue;
                    };
                    let Some(budget) = &budget else {
                        continue;
                    };
                    match retries.plan_hedge(&requests, &mut plan, deadline, at, budget) {
                        PacedDecision::Send(Delayed { attempt, .. }) => {
                            let Some(mut request) = requests.next(plan.sent(), attempt.budget)
                            else {
                                continue;
                            };
                            #[cfg_attr(
                                not(feature = "otel"),
                                allow(clippy::let_unit_value, unused_variables)
                            )]
                            let span = dress.dress(
                                &mut request,
                                at,
                                plan.sent(),
                                attempt.budget,
                                &requests,
                            );
                            metrics.hedge();
                            let until = AttemptEnd::of(at, &attempt, &policy);
                            flights.push(Box::pin(flight(
                                inner.clone(),
                                request,
                                until,
                                max_body,
                                mark_attempts,
                                #[cfg(feature = "otel")]
                                (span, deadline),
                            )));
                            hedged.out.push(Flight::new(at, &attempt, &policy));
                            hedge_timer = next_hedge(&retries, delay, at);
                        }
                        // No hedge: out of attempts or time (nothing to record), or refused by the
                        // retry budget (recorded, as a refused retry is).
                        PacedDecision::Stop(stop) => {
                            metrics.stopped(&stop);
                            if let (Stop::Throttled { .. }, Some(record)) =
                                (stop, &mut hedged.record)
                            {
                                record.attempt::<()>(at, at, Err(outcome::THROTTLED));
                            }
                        }
                    }
                }
                Event::Ended(index, result) => {
                    let end = Instant::now();
                    drop(flights.swap_remove(index));
                    let flight = hedged.out.swap_remove(index);
                    match result {
                        Ok(Ok(response)) => {
                            let (status, failed) = super::grpc::verdict(&response);
                            if !failed {
                                // The winner: the others lose, and are dropped (hung up) here.
                                drop(flights);
                                let lost = hedged.out.iter().filter(|f| f.number > 1).count();
                                if let Some(budget) = &budget {
                                    budget.succeeded(flight.number, lost);
                                }
                                hedged.close_all(end, outcome::LOST);
                                if let Some(record) = &mut hedged.record {
                                    record.attempt(flight.sent_at, end, Ok(&response));
                                    record.finish_with(status);
                                }
                                let since = first_sent.unwrap_or(flight.sent_at);
                                retries.observe(end.saturating_duration_since(since));
                                let mut result = Ok(response);
                                if let Some(record) = hedged.record.take() {
                                    report_body(&mut result, record);
                                }
                                return result;
                            }
                            if let Some(record) = &mut hedged.record {
                                record.attempt(flight.sent_at, end, Ok(&response));
                            }
                            answer = LastAnswer::of(status, response.headers(), flight.budget);
                            last = Some(Failure::Response(response));
                        }
                        Ok(Err(error)) => {
                            if let Some(record) = &mut hedged.record {
                                record.attempt::<()>(flight.sent_at, end, Err(outcome::ERROR));
                            }
                            answer = LastAnswer::default();
                            last = Some(Failure::Error(error));
                        }
                        Err(_elapsed) => {
                            if let Some(record) = &mut hedged.record {
                                record.attempt::<()>(flight.sent_at, end, Err(outcome::TIMEOUT));
                            }
                            answer = LastAnswer::default();
                            last = Some(Failure::Timeout {
                                capped: flight.capped,
                            });
                        }
                    }
                }
            }
        }
    }
}

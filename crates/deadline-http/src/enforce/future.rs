//! [`ResponseFuture`], the future returned by [`EnforceDeadline`](super::EnforceDeadline).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use deadline::trace::{HopTrace, HopWork, TRACE_HEADER};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::task::JoinHandle;
use tokio::time::{Instant, Sleep};

use super::Shared;
use super::body::EnforceBody;
use super::hold::{Hold, HoldOutcome, Recorder};
use crate::context::{Activity, ActivityGuard, DeadlineContext};

/// The inner service's work for one request, already inside its context scope.
pub(crate) type BoxWork<B, E> = Pin<Box<dyn Future<Output = Result<Response<B>, E>> + Send>>;

type BoxAcquire = Pin<Box<dyn Future<Output = Result<OwnedSemaphorePermit, AcquireError>> + Send>>;

/// What a baseline task hands back: the work's result and the hold it filled in.
pub(crate) type BaselineOutput<B, E> = (Result<Response<B>, E>, Recorder);

pin_project! {
    /// The response future of [`EnforceDeadline`](super::EnforceDeadline).
    ///
    /// Waits for a worker slot (if the layer has slots) until the cutoff, runs the inner
    /// service until the cutoff, and answers 504 itself when the cutoff comes first. Dropping it
    /// (the caller hung up) drops the inner work, releases the slot and reports the hold as
    /// [`HungUp`](super::HoldOutcome::HungUp).
    pub struct ResponseFuture<B, E> {
        // Field order is drop order: the work (and with it the slot) goes first, so a hold
        // reported by the recorder's drop sees the slot already free.
        state: State<B, E>,
        // When work must stop, if the request has a deadline.
        cutoff: Option<Instant>,
        // The timer for `cutoff`, made the first time the future has to wait: a request whose
        // work is ready at once never touches the timer wheel.
        #[pin]
        sleep: Option<Sleep>,
        ctx: DeadlineContext,
        shared: Arc<Shared>,
        recorder: Option<Recorder>,
    }
}

pub(crate) enum State<B, E> {
    /// Answered on arrival (400 or 504); the inner service is never called.
    Reject {
        status: StatusCode,
        message: String,
    },
    /// Not polled yet: takes a slot (or queues for one) on the first poll.
    Start {
        work: BoxWork<B, E>,
        slots: Option<Arc<Semaphore>>,
    },
    /// Waiting in the slots' FIFO queue.
    Queued {
        acquire: BoxAcquire,
        work: BoxWork<B, E>,
        _activity: ActivityGuard,
    },
    /// The inner service runs, racing the cutoff.
    Running {
        work: BoxWork<B, E>,
        _permit: Option<OwnedSemaphorePermit>,
    },
    /// Baseline mode: the work runs on its own task, whatever happens to this future.
    Baseline {
        task: JoinHandle<BaselineOutput<B, E>>,
    },
    Done,
}

impl<B, E> State<B, E> {
    fn name(&self) -> &'static str {
        match self {
            State::Reject { .. } => "reject",
            State::Start { .. } => "start",
            State::Queued { .. } => "queued",
            State::Running { .. } => "running",
            State::Baseline { .. } => "baseline",
            State::Done => "done",
        }
    }
}

impl<B, E> fmt::Debug for ResponseFuture<B, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("state", &self.state.name())
            .field("cutoff", &self.cutoff)
            .field("ctx", &self.ctx)
            .finish_non_exhaustive()
    }
}

impl<B, E> ResponseFuture<B, E> {
    pub(crate) fn new(
        state: State<B, E>,
        cutoff: Option<Instant>,
        ctx: DeadlineContext,
        shared: Arc<Shared>,
        recorder: Option<Recorder>,
    ) -> ResponseFuture<B, E> {
        ResponseFuture {
            state,
            cutoff,
            sleep: None,
            ctx,
            shared,
            recorder,
        }
    }
}

impl<B, E> Future for ResponseFuture<B, E> {
    type Output = Result<Response<EnforceBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let state = this.state;
        let cutoff = *this.cutoff;
        let mut sleep = this.sleep;
        let ctx: &DeadlineContext = this.ctx;
        let shared: &Shared = this.shared;
        let recorder = this.recorder;
        loop {
            match state {
                State::Reject { .. } => {
                    let State::Reject { status, message } = std::mem::replace(state, State::Done)
                    else {
                        unreachable!("matched above")
                    };
                    let mut recorder = take(recorder);
                    recorder.answer(Some(status), HoldOutcome::Rejected);
                    return Poll::Ready(Ok(own_answer(shared, ctx, recorder, status, message)));
                }
                State::Start { slots, .. } => {
                    let permit = match slots.take() {
                        None => None,
                        Some(slots) => match slots.clone().try_acquire_owned() {
                            Ok(permit) => Some(permit),
                            // The semaphore is never closed; if it were, run unlimited.
                            Err(TryAcquireError::Closed) => None,
                            Err(TryAcquireError::NoPermits) => {
                                let State::Start { work, .. } =
                                    std::mem::replace(state, State::Done)
                                else {
                                    unreachable!("matched above")
                                };
                                *state = State::Queued {
                                    acquire: Box::pin(slots.acquire_owned()),
                                    work,
                                    _activity: ctx.enter(Activity::Queued),
                                };
                                continue;
                            }
                        },
                    };
                    let State::Start { work, .. } = std::mem::replace(state, State::Done) else {
                        unreachable!("matched above")
                    };
                    if let Some(answer) = begin(state, cutoff, ctx, shared, recorder, work, permit)
                    {
                        return Poll::Ready(Ok(answer));
                    }
                }
                State::Queued { acquire, .. } => match acquire.as_mut().poll(cx) {
                    Poll::Ready(permit) => {
                        let State::Queued { work, .. } = std::mem::replace(state, State::Done)
                        else {
                            unreachable!("matched above")
                        };
                        // `Err` only if the semaphore were closed, which it never is.
                        let permit = permit.ok();
                        if let Some(answer) =
                            begin(state, cutoff, ctx, shared, recorder, work, permit)
                        {
                            return Poll::Ready(Ok(answer));
                        }
                    }
                    Poll::Pending => {
                        if !fired(cutoff, sleep.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        let now = Instant::now();
                        let activity = ctx.activity();
                        // Leave the queue: dropping the acquire future gives up our place.
                        *state = State::Done;
                        return Poll::Ready(Ok(give_up(shared, ctx, recorder, now, &activity)));
                    }
                },
                State::Running { work, .. } => match work.as_mut().poll(cx) {
                    Poll::Ready(result) => {
                        let now = Instant::now();
                        // The work is over: drop it and release the slot before the body is
                        // written.
                        *state = State::Done;
                        let mut recorder = take(recorder);
                        recorder.end(now);
                        return Poll::Ready(match result {
                            Ok(response) => Ok(deliver(shared, ctx, recorder, response, now)),
                            Err(error) => {
                                fail(recorder);
                                Err(error)
                            }
                        });
                    }
                    Poll::Pending => {
                        if !fired(cutoff, sleep.as_mut(), cx) {
                            return Poll::Pending;
                        }
                        let now = Instant::now();
                        // Read what the work was doing before dropping it: its guards restore
                        // the activity as they go.
                        let activity = ctx.activity();
                        // Drop the work: outbound attempts record their spans as they go.
                        *state = State::Done;
                        let mut recorder = take(recorder);
                        recorder.end(now);
                        recorder.answer(Some(StatusCode::GATEWAY_TIMEOUT), HoldOutcome::Deadline);
                        let message = exceeded(shared, recorder.hold(), &activity);
                        return Poll::Ready(Ok(own_answer(
                            shared,
                            ctx,
                            recorder,
                            StatusCode::GATEWAY_TIMEOUT,
                            message,
                        )));
                    }
                },
                State::Baseline { task } => match Pin::new(task).poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(joined) => {
                        *state = State::Done;
                        return Poll::Ready(match joined {
                            Ok((Ok(response), recorder)) => {
                                Ok(deliver(shared, ctx, recorder, response, Instant::now()))
                            }
                            Ok((Err(error), recorder)) => {
                                fail(recorder);
                                Err(error)
                            }
                            Err(join) => match join.try_into_panic() {
                                Ok(panic) => std::panic::resume_unwind(panic),
                                // Cancelled: the runtime is shutting down. The task's recorder
                                // was dropped with it and reported the hold.
                                // The answer still carries this hop's trace (CONTRACT 1.3).
                                Err(_) => {
                                    let status = StatusCode::SERVICE_UNAVAILABLE;
                                    let hop = HopTrace {
                                        name: &shared.trace_name,
                                        end_ms: ctx.ms_since_arrival(Instant::now()),
                                        status: status.as_str(),
                                        work: HopWork::None,
                                    };
                                    let mut response = text_response(
                                        status,
                                        EnforceBody::text(
                                            format!("{} is shutting down\n", shared.name),
                                            None,
                                        ),
                                    );
                                    response
                                        .headers_mut()
                                        .insert(TRACE_HEADER, hop.to_header_value(Vec::new(), 0));
                                    Ok(response)
                                }
                            },
                        });
                    }
                },
                State::Done => panic!("ResponseFuture polled after completion"),
            }
        }
    }
}

const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

fn take(recorder: &mut Option<Recorder>) -> Recorder {
    recorder
        .take()
        .expect("the recorder stays in the future until it answers")
}

/// Whether the cutoff has come (never, without a deadline). Makes the timer the first time.
fn fired(
    cutoff: Option<Instant>,
    mut sleep: Pin<&mut Option<Sleep>>,
    cx: &mut Context<'_>,
) -> bool {
    let Some(cutoff) = cutoff else {
        return false;
    };
    if sleep.is_none() {
        sleep.set(Some(tokio::time::sleep_until(cutoff)));
    }
    sleep
        .as_pin_mut()
        .is_some_and(|sleep| sleep.poll(cx).is_ready())
}

/// Starts the work with `permit`, unless the cutoff has already passed (a slot that came free at
/// the cutoff itself is too late): nothing starts after its deadline.
fn begin<B, E>(
    state: &mut State<B, E>,
    cutoff: Option<Instant>,
    ctx: &DeadlineContext,
    shared: &Shared,
    recorder: &mut Option<Recorder>,
    work: BoxWork<B, E>,
    permit: Option<OwnedSemaphorePermit>,
) -> Option<Response<EnforceBody<B>>> {
    let now = Instant::now();
    if let Some(cutoff) = cutoff {
        if now >= cutoff {
            drop((work, permit));
            return Some(give_up(shared, ctx, recorder, now, &Activity::Queued));
        }
    }
    if let Some(recorder) = recorder.as_mut() {
        recorder.start(now);
    }
    *state = State::Running {
        work,
        _permit: permit,
    };
    None
}

/// The 504 for a request whose time ran out before its work started.
fn give_up<B>(
    shared: &Shared,
    ctx: &DeadlineContext,
    recorder: &mut Option<Recorder>,
    now: Instant,
    activity: &Activity,
) -> Response<EnforceBody<B>> {
    let mut recorder = take(recorder);
    recorder.left_queue(now);
    recorder.answer(Some(StatusCode::GATEWAY_TIMEOUT), HoldOutcome::Deadline);
    let message = exceeded(shared, recorder.hold(), activity);
    own_answer(shared, ctx, recorder, StatusCode::GATEWAY_TIMEOUT, message)
}

/// `deadline exceeded at inventory while working: budget 600 ms, queued 0 ms, worked 590 ms`.
fn exceeded(shared: &Shared, hold: &Hold, activity: &Activity) -> String {
    format!(
        "deadline exceeded at {} while {activity}: budget {} ms, queued {} ms, worked {} ms\n",
        shared.name,
        hold.budget_ms.unwrap_or(0),
        hold.queued.as_millis(),
        hold.worked.as_millis(),
    )
}

/// The inner service returned an error: it passes through unchanged, and the hold says so.
fn fail(mut recorder: Recorder) {
    recorder.answer(None, HoldOutcome::Error);
    recorder.delivered();
    recorder.finish(false);
}

/// The inner service's answer, with this hop's trace; its body reports the hold when it ends.
fn deliver<B>(
    shared: &Shared,
    ctx: &DeadlineContext,
    mut recorder: Recorder,
    response: Response<B>,
    now: Instant,
) -> Response<EnforceBody<B>> {
    let status = response.status();
    recorder.answer(Some(status), HoldOutcome::of_status(status));
    recorder.delivered();
    let trace = trace_header(shared, ctx, recorder.hold(), status, now);
    let (mut parts, body) = response.into_parts();
    parts.headers.insert(TRACE_HEADER, trace);
    Response::from_parts(parts, EnforceBody::inner(body, recorder))
}

/// One of the layer's own answers (400 or 504), with this hop's trace.
fn own_answer<B>(
    shared: &Shared,
    ctx: &DeadlineContext,
    mut recorder: Recorder,
    status: StatusCode,
    message: String,
) -> Response<EnforceBody<B>> {
    recorder.delivered();
    let trace = trace_header(shared, ctx, recorder.hold(), status, Instant::now());
    let mut response = text_response(status, EnforceBody::text(message, Some(recorder)));
    response.headers_mut().insert(TRACE_HEADER, trace);
    response
}

fn text_response<B>(status: StatusCode, body: EnforceBody<B>) -> Response<EnforceBody<B>> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, TEXT_PLAIN);
    response
}

/// This hop's `Deadline-Trace`: a root span named after the hop from arrival to `end`, with the
/// answer's status as its outcome; under it the time queued, the work, and the spans the
/// handler's outbound calls recorded.
fn trace_header(
    shared: &Shared,
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
            None => HopWork::GaveUp {
                queued_ms: ms(hold.arrival + hold.queued),
            },
        }
    };
    let hop = HopTrace {
        name: &shared.trace_name,
        end_ms: ms(end),
        status: status.as_str(),
        work,
    };
    let (spans, dropped) = ctx.take_spans();
    hop.to_header_value(spans, dropped)
}

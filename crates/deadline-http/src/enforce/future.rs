//! [`ResponseFuture`], the future returned by [`EnforceDeadline`](super::EnforceDeadline).
//!
//! A state machine in tower's shape: a state enum in a pinned field, one small function per
//! state (but the running one, whose work's answer is made where it is polled, so the response
//! is not moved out through a `Step` first), and `this.state.set(…)` to move on. The work
//! itself is a pinned field of the future, not part of a state: it is polled in place from its
//! first poll to its end and never moved, so it needs no box, and no state has to be taken
//! apart to move it along.
//!
//! # The tie between the work and the cutoff
//!
//! While the work runs, each poll polls the work **first** and looks at the cutoff only when
//! the work is still pending. So when both are ready at the same poll (the handler finished at
//! the very instant the cutoff came), **the work wins**: its answer is delivered, not a 504.
//! The answer is there and costs nothing more to send; the reply reserve is what keeps it in
//! time. Starting is the other way round: a worker slot that comes free at the cutoff itself is
//! too late, and the request is answered 504 without starting (nothing starts after its
//! deadline). Tests pin both.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use deadline::admission::Shed;
use http::header::RETRY_AFTER;
use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tokio::task::futures::TaskLocalFuture;
use tokio::time::{Instant, Sleep};
use tower_service::Service;

use super::answer::{self, Caller};
use super::body::EnforceBody;
use super::hop_trace::{answer_headers, timing_alone};
use super::queue::{Arrival, Slot, Slots, Waiter};
#[cfg(feature = "baseline")]
use super::recorder::CallerWatch;
use super::recorder::Recorder;
use super::server_timing::SERVER_TIMING_HEADER;
use super::settings::HopSettings;
#[cfg(feature = "baseline")]
use super::{answer::text_response, hop_trace::root_only};
use crate::context::{Activity, ActivityGuard, DeadlineContext};
use crate::hold::HoldOutcome;
#[cfg(feature = "baseline")]
use tokio::task::{JoinError, JoinHandle};

/// The inner service's work for one request (readiness, then the call), inside the request's
/// context scope when it has a context.
pub type ScopedWork<S, R> = Work<Call<S, Request<R>>>;

pin_project! {
    /// The inner service's work for one request: waits for the service to be ready, calls it
    /// with the request, then polls the future it returned.
    ///
    /// What tower's `Oneshot` does, without its last step: the inner future's output is handed
    /// on as it comes rather than taken apart and wrapped again, so a response is not moved once
    /// more on its way out. The layer drops it as soon as it is ready; polled again after that,
    /// it would poll the finished inner future again.
    pub struct Call<S: Service<R>, R> {
        #[pin]
        state: CallState<S, R>,
    }
}

pin_project! {
    #[project = CallStateProj]
    enum CallState<S: Service<R>, R> {
        // Waiting for the service to be ready; the request is taken when it is.
        NotReady { service: S, request: Option<R> },
        // The service's future for the request.
        Called { #[pin] future: S::Future },
    }
}

impl<S: Service<R>, R> Call<S, R> {
    /// A call of `service` with `request` once it is ready.
    pub(crate) fn new(service: S, request: R) -> Self {
        Call {
            state: CallState::NotReady {
                service,
                request: Some(request),
            },
        }
    }
}

impl<S: Service<R>, R> Future for Call<S, R> {
    type Output = Result<S::Response, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            match state.as_mut().project() {
                CallStateProj::NotReady { service, request } => {
                    std::task::ready!(service.poll_ready(cx))?;
                    let request = request.take().expect("the request is taken once");
                    let future = service.call(request);
                    state.set(CallState::Called { future });
                }
                CallStateProj::Called { future } => return future.poll(cx),
            }
        }
    }
}

impl<S: Service<R>, R> fmt::Debug for Call<S, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self.state {
            CallState::NotReady { .. } => "Call(not ready)",
            CallState::Called { .. } => "Call(called)",
        })
    }
}

pin_project! {
    /// A request's work, with or without its context as the current one.
    ///
    /// A request that runs without a context (no budget, no trace shown, and the layer told to
    /// keep none: see
    /// [`context_without_budget`](super::EnforceDeadlineLayer::context_without_budget)) is
    /// polled as it is, as if the layer were not in front of the handler. Scoping it with no
    /// context instead would cost two swaps of the task-local slot on every poll.
    ///
    /// Each variant's one field, `future`, is the work (inside its scope, for `Scoped`).
    // The macro takes no doc comments on an enum's fields.
    #[allow(missing_docs)]
    #[project = WorkProj]
    pub enum Work<F> {
        /// Polled with its context as the current one.
        Scoped { #[pin] future: TaskLocalFuture<Option<DeadlineContext>, F> },
        /// Polled as it is.
        Plain { #[pin] future: F },
    }
}

impl<F: Future> Work<F> {
    /// `future`, to run with `context` as the current one, or as it is without one.
    pub(crate) fn new(context: Option<DeadlineContext>, future: F) -> Self {
        match context {
            Some(context) => Work::Scoped {
                future: context.scoped(future),
            },
            None => Work::Plain { future },
        }
    }
}

impl<F: Future> Future for Work<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.project() {
            WorkProj::Scoped { future } => future.poll(cx),
            WorkProj::Plain { future } => future.poll(cx),
        }
    }
}

pin_project! {
    /// The response future of [`EnforceDeadline`](super::EnforceDeadline).
    ///
    /// Waits for a worker slot (if the layer has slots) until the cutoff, runs the inner
    /// service until the cutoff, and answers 504 itself when the cutoff comes first. Dropping it
    /// (the caller hung up) drops the inner work, releases the slot and reports the hold as
    /// [`HungUp`](super::HoldOutcome::HungUp).
    pub struct ResponseFuture<B, E, F> {
        // Field order is drop order: the work, then its slot (in the state) go first, so a hold
        // reported by the recorder's drop sees the slot already free.
        #[pin]
        work: Option<F>,
        #[pin]
        state: State<B, E>,
        // The timer for the cutoff, made the first time the future has to wait: a request whose
        // work is ready at once never touches the timer wheel.
        #[pin]
        sleep: Option<Sleep>,
        reply: Reply,
    }
}

/// The states of a [`ResponseFuture`]. Every future in them is `Unpin`, so the enum is too:
/// it sits in a pinned field, is matched through `get_mut` and replaced with `set`.
pub(crate) enum State<B, E> {
    /// Answered on arrival (400 or 504); the inner service is never called.
    Reject { status: StatusCode, message: String },
    /// Not polled yet: takes a slot (or queues for one) on the first poll.
    Start { slots: Option<Arc<Slots>> },
    /// Waiting in the slots' queue.
    Queued {
        /// Boxed, as the semaphore's wait was: only a request that queues pays for it, and the
        /// state (so every request's future) stays small.
        acquire: Box<Waiter>,
        /// The hop is `queued` until this is dropped (when the request has a context).
        _activity: Option<ActivityGuard>,
    },
    /// The inner service runs, racing the cutoff.
    Running {
        /// The worker slot, released when the work ends.
        _permit: Option<Slot>,
    },
    /// Baseline mode: the work runs on its own task, whatever happens to this future.
    #[cfg(feature = "baseline")]
    Baseline { task: Task<B, E> },
    /// The answer was given. (The marker holds the output's types, which only the baseline
    /// state otherwise names.)
    Done(PhantomData<fn() -> (B, E)>),
}

impl<B, E> State<B, E> {
    fn name(&self) -> &'static str {
        match self {
            State::Reject { .. } => "reject",
            State::Start { .. } => "start",
            State::Queued { .. } => "queued",
            State::Running { .. } => "running",
            #[cfg(feature = "baseline")]
            State::Baseline { .. } => "baseline",
            State::Done(_) => "done",
        }
    }
}

/// What a state's function decided.
enum Step<B, E> {
    /// Wait to be woken.
    Pending,
    /// Go on in this state.
    Next(State<B, E>),
    /// The request is over for this future: the state is dropped (the work and its slot with
    /// it), then the answer is made.
    End(Ending),
    /// Baseline mode: the spawned work ended (or the runtime cancelled it); the same as `End`.
    /// Boxed: it holds the hold's recorder, which would make every `Step` as large; the
    /// baseline is a comparison mode, where an allocation does not matter.
    #[cfg(feature = "baseline")]
    Joined(Box<Joined<B, E>>),
}

/// How a request ended without its work's answer, with what the layer's own answer needs (read
/// before the state is dropped). A work that answers is answered in place (see
/// [`ResponseFuture`]'s poll).
pub(crate) enum Ending {
    /// Answered on arrival.
    Rejected { status: StatusCode, message: String },
    /// The time ran out before the work started, while the hop was doing `activity`.
    GaveUp { now: Instant, activity: Activity },
    /// The cutoff came at `now` while the work was doing `activity`.
    Cut { now: Instant, activity: Activity },
    /// Refused at `now` by admission, on arrival or when granted a slot. Boxed, to keep every
    /// `Ending` (and `Step`) small.
    Shed { now: Instant, shed: Box<Shed> },
    /// Refused at `now` on arrival: every slot busy and `waiting` (the limit) already waiting.
    QueueFull { now: Instant, waiting: usize },
}

/// What every state needs to answer: the request's cutoff, context, hop settings and hold.
pub(crate) struct Reply {
    /// When work must stop, if the request has a deadline.
    pub(crate) cutoff: Option<Instant>,
    /// The request's context; `None` for a request that runs without one (see
    /// [`context_without_budget`](super::EnforceDeadlineLayer::context_without_budget)): it has
    /// no deadline and its answer shows no trace.
    pub(crate) ctx: Option<DeadlineContext>,
    pub(crate) settings: Arc<HopSettings>,
    /// Taken when the answer is made (it goes into the response body, which reports the hold).
    pub(crate) recorder: Option<Recorder>,
    /// The terms the layer's own answers are given in.
    pub(crate) caller: Caller,
    /// Whether the answer carries this hop's `Deadline-Trace` (see
    /// [`TraceExposure`](super::TraceExposure)); `Server-Timing` follows the settings alone.
    pub(crate) expose: bool,
}

impl<B, E, F> fmt::Debug for ResponseFuture<B, E, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("state", &self.state.name())
            .field("cutoff", &self.reply.cutoff)
            .field("ctx", &self.reply.ctx)
            .finish_non_exhaustive()
    }
}

impl<B, E, F> ResponseFuture<B, E, F> {
    /// A request answered on arrival with `status` and `message`.
    pub(crate) fn reject(reply: Reply, status: StatusCode, message: String) -> Self {
        ResponseFuture::new(State::Reject { status, message }, None, reply)
    }

    /// A request whose `work` waits for one of `slots` (if any), then runs until the cutoff.
    pub(crate) fn run(reply: Reply, work: F, slots: Option<Arc<Slots>>) -> Self {
        ResponseFuture::new(State::Start { slots }, Some(work), reply)
    }

    pub(crate) fn new(state: State<B, E>, work: Option<F>, reply: Reply) -> Self {
        ResponseFuture {
            state,
            work,
            sleep: None,
            reply,
        }
    }
}

impl<B, E, F> Future for ResponseFuture<B, E, F>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<Response<EnforceBody<B>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            let step = match this.state.as_mut().get_mut() {
                State::Reject { status, message } => Step::End(Ending::Rejected {
                    status: *status,
                    message: std::mem::take(message),
                }),
                State::Start { slots } => start(slots.take(), this.reply),
                State::Queued { acquire, .. } => {
                    queued(acquire, this.reply, this.sleep.as_mut(), cx)
                }
                // The work is polled first, so it wins a tie with the cutoff (see the
                // [module docs](self#the-tie-between-the-work-and-the-cutoff)).
                State::Running { .. } => {
                    let work = this
                        .work
                        .as_mut()
                        .as_pin_mut()
                        .expect("the work stays in the future until it ends");
                    match work.poll(cx) {
                        // The answer is made here rather than carried out in a `Step`: the
                        // response is then moved once less on every request that works.
                        Poll::Ready(result) => {
                            let now = Instant::now();
                            over(this.work, this.state);
                            return Poll::Ready(this.reply.worked(result, now));
                        }
                        // Read what the work was doing before it is dropped: its guards restore
                        // the activity as they go.
                        Poll::Pending if this.reply.fired(this.sleep.as_mut(), cx) => {
                            Step::End(Ending::Cut {
                                now: Instant::now(),
                                activity: this.reply.activity(),
                            })
                        }
                        Poll::Pending => Step::Pending,
                    }
                }
                #[cfg(feature = "baseline")]
                State::Baseline { task } => match poll_task(task, cx) {
                    Poll::Ready(joined) => Step::Joined(Box::new(joined)),
                    Poll::Pending => Step::Pending,
                },
                State::Done(_) => panic!("ResponseFuture polled after completion"),
            };
            match step {
                Step::Pending => return Poll::Pending,
                Step::Next(state) => this.state.set(state),
                Step::End(ending) => {
                    over(this.work, this.state);
                    return Poll::Ready(this.reply.end(ending));
                }
                #[cfg(feature = "baseline")]
                Step::Joined(joined) => {
                    over(this.work, this.state);
                    return Poll::Ready(baseline_answer(this.reply, *joined));
                }
            }
        }
    }
}

/// The request is over for this future: its work is dropped and its slot released before the
/// answer is made (and so before its body is written).
fn over<B, E, F>(mut work: Pin<&mut Option<F>>, mut state: Pin<&mut State<B, E>>) {
    work.set(None);
    state.set(State::Done(PhantomData));
}

/// First poll: take a free slot and start, join the queue, or (admission) be shed.
fn start<B, E>(slots: Option<Arc<Slots>>, reply: &mut Reply) -> Step<B, E> {
    let slot = match slots {
        // No slots, no queue: the work starts as the request arrived (the moments between the
        // call and its first poll are not a queue), and without a cutoff to be too late for,
        // the clock is not read again.
        None => {
            if reply.cutoff.is_some() {
                if let Some(late) = too_late(reply, Instant::now()) {
                    return late;
                }
            }
            if let Some(recorder) = reply.recorder.as_mut() {
                recorder.start_on_arrival();
            }
            return Step::Next(State::Running { _permit: None });
        }
        // Admission weighs the time left until the cutoff, when work must stop.
        Some(slots) => match slots.arrive(reply.deadline_cutoff()) {
            Arrival::Start(slot) => slot,
            Arrival::Wait(acquire) => {
                return Step::Next(State::Queued {
                    acquire: Box::new(acquire),
                    _activity: reply.ctx.as_ref().map(|ctx| ctx.enter(Activity::Queued)),
                });
            }
            Arrival::Shed(shed) => {
                return Step::End(Ending::Shed {
                    now: Instant::now(),
                    shed: Box::new(shed),
                });
            }
            Arrival::QueueFull { waiting } => {
                return Step::End(Ending::QueueFull {
                    now: Instant::now(),
                    waiting,
                });
            }
        },
    };
    begin(slot, reply)
}

/// The end of a request whose work has not started, if its cutoff has passed at `now` (a
/// cutoff that comes at `now` itself is passed): nothing starts after its deadline.
fn too_late<B, E>(reply: &Reply, now: Instant) -> Option<Step<B, E>> {
    reply.cutoff.is_some_and(|cutoff| now >= cutoff).then(|| {
        Step::End(Ending::GaveUp {
            now,
            activity: Activity::Queued,
        })
    })
}

/// In the queue: start when a slot comes, give up at the cutoff.
fn queued<B, E>(
    acquire: &mut Box<Waiter>,
    reply: &mut Reply,
    sleep: Pin<&mut Option<Sleep>>,
    cx: &mut Context<'_>,
) -> Step<B, E> {
    match Pin::new(&mut **acquire).poll(cx) {
        Poll::Ready(slot) => begin(slot, reply),
        Poll::Pending if reply.fired(sleep, cx) => Step::End(Ending::GaveUp {
            now: Instant::now(),
            activity: reply.activity(),
        }),
        Poll::Pending => Step::Pending,
    }
}

/// Starts the work with `slot`, unless the cutoff has already passed (a slot that came free at
/// the cutoff itself is too late): nothing starts after its deadline. With admission on, a
/// request that queued is shed instead if too little time is left for the work.
fn begin<B, E>(mut slot: Slot, reply: &mut Reply) -> Step<B, E> {
    let now = Instant::now();
    if let Some(late) = too_late(reply, now) {
        // The work and the slot go unused.
        return late;
    }
    if let Err(shed) = slot.begin(|| reply.deadline_cutoff(), now) {
        return Step::End(Ending::Shed {
            now,
            shed: Box::new(shed),
        });
    }
    if let Some(recorder) = reply.recorder.as_mut() {
        recorder.start(now);
    }
    Step::Next(State::Running {
        _permit: Some(slot),
    })
}

impl Reply {
    /// The cutoff as a [`Deadline`](deadline::Deadline), for admission.
    fn deadline_cutoff(&self) -> Option<deadline::Deadline> {
        self.ctx.as_ref().and_then(DeadlineContext::cutoff)
    }

    /// What the hop is doing for the request. Asked only once the cutoff has come, so of a
    /// request with a deadline, which always has a context.
    fn activity(&self) -> Activity {
        self.ctx
            .as_ref()
            .map_or(Activity::Working, DeadlineContext::activity)
    }

    /// Whether the cutoff has come (never, without a deadline). Makes the timer the first time.
    fn fired(&self, mut sleep: Pin<&mut Option<Sleep>>, cx: &mut Context<'_>) -> bool {
        let Some(cutoff) = self.cutoff else {
            return false;
        };
        if sleep.is_none() {
            sleep.set(Some(tokio::time::sleep_until(cutoff)));
        }
        sleep
            .as_pin_mut()
            .is_some_and(|sleep| sleep.poll(cx).is_ready())
    }

    fn take_recorder(&mut self) -> Recorder {
        self.recorder
            .take()
            .expect("the recorder stays in the future until it answers")
    }

    /// The answer for the work's `result`, which it gave at `now`.
    fn worked<B, E>(
        &mut self,
        result: Result<Response<B>, E>,
        now: Instant,
    ) -> Result<Response<EnforceBody<B>>, E> {
        let mut recorder = self.take_recorder();
        recorder.end(now);
        match result {
            Ok(response) => Ok(self.deliver(recorder, response, now)),
            Err(error) => {
                fail(recorder);
                Err(error)
            }
        }
    }

    /// The answer for `ending`.
    fn end<B, E>(&mut self, ending: Ending) -> Result<Response<EnforceBody<B>>, E> {
        match ending {
            Ending::Rejected { status, message } => {
                let mut recorder = self.take_recorder();
                recorder.answer(Some(status), HoldOutcome::Rejected);
                Ok(self.own_answer(recorder, status, message))
            }
            Ending::GaveUp { now, activity } => {
                let mut recorder = self.take_recorder();
                recorder.left_queue(now);
                Ok(self.deadline(recorder, &activity))
            }
            Ending::Cut { now, activity } => {
                let mut recorder = self.take_recorder();
                recorder.end(now);
                Ok(self.deadline(recorder, &activity))
            }
            Ending::Shed { now, shed } => {
                let message = format!(
                    "{} refused the request at once, {shed}\n",
                    self.settings.name
                );
                Ok(self.refused(now, message))
            }
            Ending::QueueFull { now, waiting } => {
                let message = format!(
                    "{} refused the request at once: every worker busy and {waiting} requests \
                     already waiting (the queue's limit)\n",
                    self.settings.name
                );
                Ok(self.refused(now, message))
            }
        }
    }

    /// The answer to a request refused at `now` without working (admission shed it, or the
    /// queue was full): 503 with `Retry-After: 0` (another replica, or this one a moment later,
    /// may well serve it), outcome `shed`, made by the layer's one function for its own answers
    /// (so it carries this hop's trace and reports the hold).
    fn refused<B>(&mut self, now: Instant, message: String) -> Response<EnforceBody<B>> {
        let mut recorder = self.take_recorder();
        recorder.left_queue(now);
        let status = StatusCode::SERVICE_UNAVAILABLE;
        recorder.answer(Some(status), HoldOutcome::Shed);
        let mut response = self.own_answer(recorder, status, message);
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("0"));
        response
    }

    /// The 504 for a request whose time ran out while the hop was doing `activity`:
    /// `deadline exceeded at inventory while working: budget 600 ms, queued 0 ms, worked 590 ms`.
    fn deadline<B>(&self, mut recorder: Recorder, activity: &Activity) -> Response<EnforceBody<B>> {
        let status = StatusCode::GATEWAY_TIMEOUT;
        recorder.answer(Some(status), HoldOutcome::Deadline);
        recorder.exceeded(crate::phase::Phase::of(activity));
        let hold = recorder.hold();
        let message = format!(
            "deadline exceeded at {} while {activity}: budget {} ms, queued {} ms, worked {} ms\n",
            self.settings.name,
            hold.budget_ms.unwrap_or(0),
            hold.queued.as_millis(),
            hold.worked.as_millis(),
        );
        self.own_answer(recorder, status, message)
    }

    /// The inner service's answer, with this hop's trace; its body reports the hold when it
    /// ends.
    pub(crate) fn deliver<B>(
        &self,
        mut recorder: Recorder,
        response: Response<B>,
        now: Instant,
    ) -> Response<EnforceBody<B>> {
        let status = answer::delivered_status(self.caller, &response);
        recorder.answer(Some(status), HoldOutcome::of_status(status));
        recorder.delivered();
        let (mut parts, body) = response.into_parts();
        if let (true, Some(ctx)) = (self.expose, &self.ctx) {
            let headers = answer_headers(&self.settings, ctx, &recorder.facts(), status, now);
            parts.headers.insert(deadline::TRACE_HEADER, headers.trace);
            // Appended, so a `Server-Timing` the inner service wrote stays.
            if let Some(timing) = headers.timing {
                parts.headers.append(SERVER_TIMING_HEADER, timing);
            }
        } else {
            // Nor a trace the inner service relayed from downstream.
            parts.headers.remove(deadline::TRACE_HEADER);
            if let Some(timing) = self.timing_alone(&recorder) {
                parts.headers.append(SERVER_TIMING_HEADER, timing);
            }
        }
        Response::from_parts(
            parts,
            EnforceBody::inner(body, recorder, self.cutoff, self.caller),
        )
    }

    /// `Server-Timing` for an answer that shows no trace: the hold's facts are gathered only
    /// where the layer has it on, so the default (off) costs one test.
    fn timing_alone(&self, recorder: &Recorder) -> Option<HeaderValue> {
        if !self.settings.server_timing {
            return None;
        }
        timing_alone(&self.settings, &recorder.facts())
    }

    /// One of the layer's own answers (400, 503 or 504), in the caller's terms, with this hop's
    /// trace.
    pub(crate) fn own_answer<B>(
        &self,
        mut recorder: Recorder,
        status: StatusCode,
        message: String,
    ) -> Response<EnforceBody<B>> {
        recorder.delivered();
        let ctx = match (self.expose, &self.ctx) {
            (true, Some(ctx)) => ctx,
            _ => {
                let timing = self.timing_alone(&recorder);
                let mut response = answer::own(self.caller, status, message, recorder);
                if let Some(timing) = timing {
                    response.headers_mut().append(SERVER_TIMING_HEADER, timing);
                }
                return response;
            }
        };
        let headers = answer_headers(
            &self.settings,
            ctx,
            &recorder.facts(),
            status,
            Instant::now(),
        );
        let mut response = answer::own(self.caller, status, message, recorder);
        response
            .headers_mut()
            .insert(deadline::TRACE_HEADER, headers.trace);
        if let Some(timing) = headers.timing {
            response.headers_mut().append(SERVER_TIMING_HEADER, timing);
        }
        response
    }
}

/// The inner service returned an error: it passes through unchanged, and the hold says so.
pub(crate) fn fail(mut recorder: Recorder) {
    recorder.answer(None, HoldOutcome::Error);
    recorder.delivered();
    recorder.finish(false);
}

/// A baseline task (see [`baseline`](super::baseline)): the work's own task, handing back its
/// result and the hold it filled in.
#[cfg(feature = "baseline")]
pub(crate) struct Task<B, E> {
    /// First, so a caller that leaves is noted before a finished task's hold is reported.
    pub(crate) _watch: CallerWatch,
    pub(crate) handle: JoinHandle<(Result<Response<B>, E>, Recorder)>,
}

/// The task's end: its output, or why it has none.
#[cfg(feature = "baseline")]
pub(crate) type Joined<B, E> = Result<(Result<Response<B>, E>, Recorder), JoinError>;

/// Waits for the task.
#[cfg(feature = "baseline")]
fn poll_task<B, E>(task: &mut Task<B, E>, cx: &mut Context<'_>) -> Poll<Joined<B, E>> {
    std::pin::Pin::new(&mut task.handle).poll(cx)
}

/// The answer once a baseline task ended: its response with this hop's trace, its error, or a
/// 503 if the runtime cancelled it; a panic in it is resumed here.
#[cfg(feature = "baseline")]
fn baseline_answer<B, E>(
    reply: &mut Reply,
    joined: Joined<B, E>,
) -> Result<Response<EnforceBody<B>>, E> {
    match joined {
        Ok((Ok(response), recorder)) => Ok(reply.deliver(recorder, response, Instant::now())),
        Ok((Err(error), recorder)) => {
            fail(recorder);
            Err(error)
        }
        Err(join) => match join.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: the runtime is shutting down. The task's recorder was dropped with it
            // and reported the hold. The answer still carries this hop's trace, as every
            // answer the layer gives does.
            Err(_) => {
                let status = StatusCode::SERVICE_UNAVAILABLE;
                let end_ms = reply
                    .ctx
                    .as_ref()
                    .map_or(0, |ctx| ctx.ms_since_arrival(Instant::now()));
                let mut response = text_response(
                    status,
                    EnforceBody::text(format!("{} is shutting down\n", reply.settings.name), None),
                );
                if reply.expose {
                    response.headers_mut().insert(
                        deadline::TRACE_HEADER,
                        root_only(&reply.settings, end_ms, status),
                    );
                }
                Ok(response)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use std::future::Ready;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A service that is ready on its `ready_at`-th `poll_ready` (counting from 1), or fails
    /// there when `fail`, and answers its request's path.
    #[derive(Clone)]
    struct Late {
        polls: Arc<AtomicUsize>,
        calls: Arc<AtomicUsize>,
        ready_at: usize,
        fail: bool,
    }

    impl Service<Request<()>> for Late {
        type Response = String;
        type Error = &'static str;
        type Future = Ready<Result<String, &'static str>>;

        fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            let polls = self.polls.fetch_add(1, Ordering::Relaxed) + 1;
            if polls < self.ready_at {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            Poll::Ready(if self.fail { Err("not ready") } else { Ok(()) })
        }

        fn call(&mut self, request: Request<()>) -> Self::Future {
            self.calls.fetch_add(1, Ordering::Relaxed);
            std::future::ready(Ok(request.uri().path().to_owned()))
        }
    }

    fn late(ready_at: usize, fail: bool) -> Late {
        Late {
            polls: Arc::default(),
            calls: Arc::default(),
            ready_at,
            fail,
        }
    }

    /// The request goes to the service once it says it is ready, not before, and only once;
    /// the service's answer and its readiness error come out as they are.
    #[tokio::test]
    async fn the_call_waits_for_readiness_and_passes_the_answer_on() {
        let request = || Request::builder().uri("/stock").body(()).unwrap();

        let service = late(3, false);
        let mut call = std::pin::pin!(Call::new(service.clone(), request()));
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert!(call.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            service.calls.load(Ordering::Relaxed),
            0,
            "called before ready"
        );
        assert_eq!(
            call.as_mut().poll(&mut cx),
            Poll::Ready(Ok("/stock".to_owned()))
        );
        assert_eq!(service.polls.load(Ordering::Relaxed), 3);
        assert_eq!(service.calls.load(Ordering::Relaxed), 1);

        let service = late(2, true);
        assert_eq!(
            Call::new(service.clone(), request()).await,
            Err("not ready")
        );
        assert_eq!(service.polls.load(Ordering::Relaxed), 2);
        assert_eq!(service.calls.load(Ordering::Relaxed), 0);

        let failing = tower::service_fn(|_: Request<()>| async { Err::<String, _>("failed") });
        assert_eq!(Call::new(failing, request()).await, Err("failed"));
    }
}

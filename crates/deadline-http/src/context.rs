//! The deadline of the request being served, available to everything that runs for it.
//!
//! The enforce layer runs the inner service inside a [`DeadlineContext`] held in a tokio
//! task-local (and puts a clone in the request extensions, for extractors). Outbound calls made
//! through the propagate layer read it, so a handler's calls pick up what is left of the user's
//! wait without the application threading a deadline by hand. The same context collects this
//! hop's trace: calls record their spans into it, and the enforce layer sends them back in
//! `Deadline-Trace`.
//!
//! # What does not inherit the deadline
//!
//! Task-locals do not flow into `tokio::spawn`ed tasks, and a spawned task is not cancelled when
//! the request is. Use [`spawn`](crate::spawn()) for work that belongs to the request (it carries
//! the context and is aborted at the deadline), and [`detach`] for work that must outlive it
//! (background jobs, cache fills) so it never inherits a deadline by accident.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use deadline::Deadline;
use deadline::trace::{CallSpan, Recorded, Span};
use tokio::task::futures::TaskLocalFuture;
use tokio::time::Instant;

pub use crate::activity::Activity;
use crate::error::DeadlineExceeded;
use crate::time;

tokio::task_local! {
    static CURRENT: Option<DeadlineContext>;
}

/// The deadline and trace of one request, shared by everything that runs for it.
///
/// Cloning is cheap (one reference count).
#[derive(Clone)]
pub struct DeadlineContext {
    inner: Arc<Inner>,
}

struct Inner {
    deadline: Option<Deadline>,
    /// The deadline less the reserve, worked out once: the layer, the queue, the outbound
    /// calls and cooperative checks all ask for it, and each subtraction of instants is a
    /// dozen-odd instructions of carries and checks.
    cutoff: Option<Deadline>,
    reserve: Duration,
    arrival: Instant,
    log: Mutex<WorkLog>,
    /// Whether outbound calls keep their callees' `Deadline-Trace` in this hop's trace: only
    /// where the hop's answer shows its trace (see
    /// [`TraceExposure`](crate::enforce::TraceExposure)).
    callee_traces: bool,
    /// The served request's OpenTelemetry server span: the parent of its outbound attempts.
    #[cfg(feature = "otel")]
    span: Option<opentelemetry::trace::SpanContext>,
}

/// An entry of the activity stack. Outbound calls enter one per attempt, so their target is
/// kept as the call's shared `Arc<str>` and made an [`Activity`] (a `String`) only when someone
/// asks, which is rare (a 504's body, a cooperative check that fails).
enum Entered {
    Activity(Activity),
    Calling(Arc<str>),
}

impl Entered {
    fn to_activity(&self) -> Activity {
        match self {
            Entered::Activity(activity) => activity.clone(),
            Entered::Calling(target) => Activity::Calling {
                target: String::from(&**target),
            },
        }
    }
}

/// What the request's work is doing (its activity stack) and has recorded for the trace.
#[derive(Default)]
struct WorkLog {
    /// What the hop is doing, most recent last, each entry owned by one guard. A stack rather
    /// than one slot, so overlapping calls (`join!`, spawned tasks) leaving in any order still
    /// leave the right activity behind.
    activities: Vec<(u64, Entered)>,
    next_guard: u64,
    /// Spans and calls recorded for the trace, in the order they were recorded.
    recorded: Vec<Recorded>,
    dropped: u64,
    /// Bumped whenever `recorded` is taken: a [`CallSlot`] from before points at nothing now.
    generation: u64,
}

/// Where a recorded outbound call sits in its hop's trace: a call returns when its response head
/// arrives, and its body may still fail (cut short, too large, out of time) or end with a gRPC
/// status in its trailers. The response body holds the slot and corrects the call's outcome,
/// unless the hop's trace has been written already.
#[derive(Clone)]
pub(crate) struct CallSlot {
    context: DeadlineContext,
    generation: u64,
    index: usize,
    /// The attempt whose response the call returned, if it returned one.
    answered: Option<usize>,
}

impl CallSlot {
    /// The call's response body ended with `outcome`: the call span and the attempt that got
    /// the response say so (not a later span, such as the zero-length `skipped` one of an
    /// attempt the planner refused before it returned an earlier answer).
    pub(crate) fn body_ended(&self, outcome: deadline::trace::Outcome) {
        let mut log = self.context.lock();
        if log.generation != self.generation {
            return;
        }
        if let Some(Recorded::Call(call)) = log.recorded.get_mut(self.index) {
            call.outcome = outcome;
            if let Some(attempt) = self
                .answered
                .and_then(|answered| call.attempts.get_mut(answered))
            {
                attempt.outcome = outcome;
            }
        }
    }
}

impl fmt::Debug for CallSlot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallSlot")
            .field("index", &self.index)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for DeadlineContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadlineContext")
            .field("deadline", &self.inner.deadline)
            .field("reserve", &self.inner.reserve)
            .field("arrival", &self.inner.arrival)
            .finish_non_exhaustive()
    }
}

impl DeadlineContext {
    /// A context for a request that arrived at `arrival` with `deadline` (none: no deadline),
    /// keeping `reserve` back for writing the reply.
    pub fn new(deadline: Option<Deadline>, reserve: Duration, arrival: Instant) -> DeadlineContext {
        let times = deadline.map(|d| (d, d.earlier_by(reserve, time::to_std(arrival))));
        DeadlineContext::with_cutoff(times, reserve, arrival)
    }

    /// The context of a request that arrived at `arrival` with a deadline and its cutoff (the
    /// deadline less `reserve`, never before `arrival`) already worked out, as
    /// [`Deadline::after_with_reserve`] gives them.
    pub(crate) fn with_cutoff(
        times: Option<(Deadline, Deadline)>,
        reserve: Duration,
        arrival: Instant,
    ) -> DeadlineContext {
        DeadlineContext {
            inner: Arc::new(Inner {
                deadline: times.map(|(deadline, _)| deadline),
                cutoff: times.map(|(_, cutoff)| cutoff),
                reserve,
                arrival,
                log: Mutex::new(WorkLog::default()),
                callee_traces: true,
                #[cfg(feature = "otel")]
                span: None,
            }),
        }
    }

    /// The context with its callees' traces left out of its trace (a context just made, not
    /// yet shared; a shared one is returned unchanged): for a request whose answer will not
    /// show the trace, so a downstream's spans go no further than the exposure allows and the
    /// request does not hold them for nothing.
    pub(crate) fn without_callee_traces(mut self) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.callee_traces = false;
        }
        self
    }

    /// Whether outbound calls keep their callees' traces in this hop's trace.
    pub(crate) fn keeps_callee_traces(&self) -> bool {
        self.inner.callee_traces
    }

    /// The context with `span` as the served request's server span (a context just made,
    /// not yet shared; a shared one is returned unchanged).
    #[cfg(feature = "otel")]
    pub(crate) fn with_span(mut self, span: &opentelemetry::trace::SpanContext) -> Self {
        if span.is_valid() {
            if let Some(inner) = Arc::get_mut(&mut self.inner) {
                inner.span = Some(span.clone());
            }
        }
        self
    }

    /// The served request's server span, when it has a valid one.
    #[cfg(feature = "otel")]
    pub(crate) fn span_context(&self) -> Option<&opentelemetry::trace::SpanContext> {
        self.inner.span.as_ref()
    }

    /// The context of the request being served by this task, if any.
    pub fn current() -> Option<DeadlineContext> {
        CURRENT.try_with(Clone::clone).ok().flatten()
    }

    /// Runs `future` with this context as the current one.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        self.scoped(future)
    }

    /// As [`scope`](Self::scope), with a type that can be named (the enforce layer's future
    /// holds it unboxed).
    pub(crate) fn scoped<F: Future>(
        self,
        future: F,
    ) -> TaskLocalFuture<Option<DeadlineContext>, F> {
        CURRENT.scope(Some(self), future)
    }

    /// The request's deadline, if it has one.
    pub fn deadline(&self) -> Option<Deadline> {
        self.inner.deadline
    }

    /// When work must stop so the reply still gets out: the deadline less the reply reserve.
    pub fn cutoff(&self) -> Option<Deadline> {
        self.inner.cutoff
    }

    /// The time kept back for writing the reply.
    pub fn reserve(&self) -> Duration {
        self.inner.reserve
    }

    /// When the request arrived at this hop.
    pub fn arrival(&self) -> Instant {
        self.inner.arrival
    }

    /// Time left before the work must stop (the deadline less the reserve), or `None` without a
    /// deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.cutoff().map(|c| c.remaining(time::now()))
    }

    /// `Err` once the work should stop: the cooperative check for CPU-bound code, which the
    /// layer cannot interrupt between await points.
    pub fn check(&self) -> Result<(), DeadlineExceeded> {
        match self.cutoff() {
            Some(cutoff) if cutoff.is_expired(time::now()) => {
                Err(DeadlineExceeded::new(self.activity()))
            }
            _ => Ok(()),
        }
    }

    /// Whole milliseconds from this hop's arrival to `at` (zero before it): the unit of trace
    /// spans.
    pub fn ms_since_arrival(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.inner.arrival).as_millis())
            .unwrap_or(u64::MAX)
    }

    /// Adds a span to this hop's trace (times in ms since arrival; see
    /// [`ms_since_arrival`](Self::ms_since_arrival)).
    pub fn record(&self, span: Span) {
        self.lock().recorded.push(Recorded::Span(span));
    }

    /// Adds an outbound call to this hop's trace, its callees' traces still encoded; the slot
    /// says where, and which of its attempts got the response it returned (`answered`), so the
    /// call's outcome can still be corrected while that response's body is read.
    pub(crate) fn record_call(&self, call: CallSpan, answered: Option<usize>) -> CallSlot {
        let mut log = self.lock();
        log.recorded.push(Recorded::Call(call));
        CallSlot {
            context: self.clone(),
            generation: log.generation,
            index: log.recorded.len() - 1,
            answered,
        }
    }

    /// Counts spans that a callee dropped, so the edge learns that its trace is incomplete.
    pub fn record_dropped(&self, dropped: u64) {
        let mut state = self.lock();
        state.dropped = state.dropped.saturating_add(dropped);
    }

    /// Takes the spans recorded so far and the dropped count (including the spans the
    /// callees of recorded calls dropped). Calls are turned into span trees, their callees'
    /// traces decoded; [`take_recorded`](Self::take_recorded) takes them as they are.
    pub fn take_spans(&self) -> (Vec<Span>, u64) {
        let (recorded, mut dropped) = self.take_recorded();
        let spans = recorded
            .into_iter()
            .map(|entry| {
                let (span, callees_dropped) = entry.into_span();
                dropped = dropped.saturating_add(callees_dropped);
                span
            })
            .collect();
        (spans, dropped)
    }

    /// Takes what was recorded so far, as it was recorded (the callees' traces of calls still
    /// encoded, and not counted in the dropped count), and the dropped count: what the enforce
    /// layer writes into the hop's trace with [`HopTrace`](deadline::trace::HopTrace).
    pub fn take_recorded(&self) -> (Vec<Recorded>, u64) {
        let mut log = self.lock();
        log.generation = log.generation.wrapping_add(1);
        (
            std::mem::take(&mut log.recorded),
            std::mem::take(&mut log.dropped),
        )
    }

    /// What the hop is doing for this request now.
    pub fn activity(&self) -> Activity {
        self.lock()
            .activities
            .last()
            .map_or(Activity::Working, |(_, a)| a.to_activity())
    }

    /// Sets what the hop is doing until the returned guard is dropped. Guards may overlap and
    /// drop in any order: the activity is always that of the most recent guard still alive.
    pub fn enter(&self, activity: Activity) -> ActivityGuard {
        self.push_activity(Entered::Activity(activity))
    }

    /// As [`enter`](Self::enter) with [`Activity::Calling`] `target`, without copying the
    /// target's name (the propagate layer enters one per attempt).
    pub(crate) fn enter_calling(&self, target: Arc<str>) -> ActivityGuard {
        self.push_activity(Entered::Calling(target))
    }

    fn push_activity(&self, activity: Entered) -> ActivityGuard {
        let mut state = self.lock();
        let id = state.next_guard;
        state.next_guard = state.next_guard.wrapping_add(1);
        state.activities.push((id, activity));
        ActivityGuard {
            context: self.clone(),
            id,
        }
    }

    fn lock(&self) -> MutexGuard<'_, WorkLog> {
        // A panic while recording a span loses at most that span; keep serving.
        self.inner
            .log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Ends its [`Activity`] when dropped; from [`DeadlineContext::enter`].
#[derive(Debug)]
pub struct ActivityGuard {
    context: DeadlineContext,
    id: u64,
}

impl Drop for ActivityGuard {
    fn drop(&mut self) {
        let mut state = self.context.lock();
        if let Some(at) = state.activities.iter().rposition(|(id, _)| *id == self.id) {
            state.activities.remove(at);
        }
    }
}

/// The deadline of the request this task serves, if any.
pub fn current_deadline() -> Option<Deadline> {
    DeadlineContext::current().and_then(|c| c.deadline())
}

/// The cooperative check for CPU-bound code: `Err` once the current request's work should stop
/// (its deadline less the reply reserve). `Ok` outside a request or without a deadline.
///
/// ```
/// # async fn handler() -> Result<u64, deadline_http::DeadlineExceeded> {
/// let mut sum = 0u64;
/// for chunk in 0..1_000u64 {
///     deadline_http::check()?; // cheap: one clock read and a comparison
///     sum += chunk; // ... a slice of CPU-bound work ...
/// }
/// # Ok(sum) }
/// ```
pub fn check() -> Result<(), DeadlineExceeded> {
    DeadlineContext::current().map_or(Ok(()), |c| c.check())
}

/// Runs `future` outside any request's context, so calls it makes carry no deadline. For work
/// that must not inherit the current request's deadline, such as a background refresh started
/// from a handler.
pub fn detach<F: Future>(future: F) -> impl Future<Output = F::Output> {
    CURRENT.scope(None, future)
}

/// Runs `future` with `deadline`: for callers outside a served request (a batch job, a CLI)
/// whose outbound calls should still carry a budget.
pub fn with_deadline<F: Future>(deadline: Deadline, future: F) -> impl Future<Output = F::Output> {
    DeadlineContext::new(Some(deadline), Duration::ZERO, Instant::now()).scope(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn context_flows_to_the_handler_but_not_into_detach() {
        let t0 = Instant::now();
        let deadline = Deadline::after_duration(t0.into_std(), Duration::from_millis(500));
        let ctx = DeadlineContext::new(Some(deadline), Duration::from_millis(10), t0);
        ctx.scope(async {
            assert_eq!(current_deadline(), Some(deadline));
            assert!(check().is_ok());
            detach(async { assert_eq!(current_deadline(), None) }).await;
            tokio::time::sleep(Duration::from_millis(489)).await;
            assert!(check().is_ok(), "1 ms before deadline less reserve");
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(check().is_err(), "at deadline less reserve the work stops");
        })
        .await;
        assert_eq!(current_deadline(), None);
        assert!(
            check().is_ok(),
            "outside a request there is nothing to check"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn activity_guards_nest() {
        let ctx = DeadlineContext::new(None, Duration::ZERO, Instant::now());
        assert_eq!(ctx.activity(), Activity::Working);
        {
            let _calling = ctx.enter(Activity::Calling {
                target: "inventory".into(),
            });
            assert_eq!(
                ctx.activity(),
                Activity::Calling {
                    target: "inventory".into()
                }
            );
        }
        assert_eq!(ctx.activity(), Activity::Working);
        {
            let _calling = ctx.enter_calling(Arc::from("orders"));
            assert_eq!(
                ctx.activity(),
                Activity::Calling {
                    target: "orders".into()
                }
            );
        }
        assert_eq!(ctx.activity(), Activity::Working);
        ctx.record(Span::new("call:x", 1, 2));
        ctx.record_dropped(3);
        let (spans, dropped) = ctx.take_spans();
        assert_eq!((spans.len(), dropped), (1, 3));
    }

    /// Overlapping calls leave in any order: when the first call's guard drops while the second
    /// is still in flight, the hop is still calling the second, not "working".
    #[tokio::test(start_paused = true)]
    async fn overlapping_activities_leave_the_right_one_behind() {
        let ctx = DeadlineContext::new(None, Duration::ZERO, Instant::now());
        let calling = |t: &str| Activity::Calling { target: t.into() };
        let a = ctx.enter(calling("orders"));
        let b = ctx.enter(calling("inventory"));
        drop(a);
        assert_eq!(ctx.activity(), calling("inventory"));
        let c = ctx.enter(calling("payments"));
        drop(b);
        assert_eq!(ctx.activity(), calling("payments"));
        drop(c);
        assert_eq!(ctx.activity(), Activity::Working);
    }
}

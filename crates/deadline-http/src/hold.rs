//! Worker-hold reports: what one request did with a hop's worker, and the counters the
//! reports feed. Plain data: the enforce layer fills them in (its recorder), the metrics read
//! them, and neither is imported by this module.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use deadline::trace::outcome;
use http::{Method, StatusCode};
use tokio::time::Instant;

use crate::phase::Phase;

/// How a request's hold of this hop ended. See [`Hold`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HoldOutcome {
    /// The work finished and its answer (any status but a 5xx) went out.
    Ok,
    /// Time ran out: the layer cut the work at the deadline less the reserve, the request gave up
    /// its place in the queue (or got a slot too late to start), the handler itself answered
    /// 504, or the response body was still streaming at the cutoff and was ended there.
    Deadline,
    /// The caller went away before the answer was ready: the response future was dropped (in
    /// baseline mode, the work still ran to its end and was then thrown away), or the response
    /// body was dropped mid-stream.
    HungUp,
    /// Answered 400 or 504 on arrival (a malformed budget, or one already spent): the request
    /// never held a worker.
    Rejected,
    /// The inner service returned an error, or answered with a 5xx other than 504.
    Error,
    /// Refused by predictive admission (503, `Retry-After: 0`): on arrival, because its
    /// expected wait for a slot would leave too little of its budget, or when granted a slot
    /// with too little left. It never worked.
    Shed,
}

impl HoldOutcome {
    /// A short lowercase token: `ok`, `deadline`, `hung-up`, `rejected`, `error` or `shed`.
    pub fn as_str(self) -> &'static str {
        match self {
            HoldOutcome::Ok => outcome::OK,
            HoldOutcome::Deadline => outcome::DEADLINE,
            HoldOutcome::HungUp => outcome::HUNG_UP,
            HoldOutcome::Rejected => "rejected",
            HoldOutcome::Error => outcome::ERROR,
            HoldOutcome::Shed => outcome::SHED,
        }
    }

    /// The outcome of work that answered with `status`.
    pub(crate) fn of_status(status: StatusCode) -> HoldOutcome {
        if status == StatusCode::GATEWAY_TIMEOUT {
            HoldOutcome::Deadline
        } else if status.is_server_error() {
            HoldOutcome::Error
        } else {
            HoldOutcome::Ok
        }
    }
}

impl fmt::Display for HoldOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one request did with this hop: when it arrived, how long it queued for a worker slot,
/// how long it held one, and how it ended.
///
/// The enforce layer reports exactly one `Hold` per request, as a `tracing` event (target
/// `deadline::hold`) and to the [`on_hold`](super::EnforceDeadlineLayer::on_hold) hook, at the
/// moment the request is over for this hop: when the response body has been handed on to the
/// end, when it is dropped early, or when the response future is dropped before it completed
/// (the caller hung up).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Hold {
    /// The hop's name, as given to [`EnforceDeadlineLayer::new`](super::EnforceDeadlineLayer::new).
    pub service: Arc<str>,
    /// The request's `X-Request-Id` header, when it had one that is visible ASCII.
    pub request_id: Option<String>,
    /// The request method.
    pub method: Method,
    /// The request path (without the query).
    pub path: String,
    /// The budget the caller sent, in ms, after clamping: `None` without one (or in baseline
    /// mode, which ignores it), `Some(0)` for a budget already spent.
    pub budget_ms: Option<u64>,
    /// When the request reached the layer.
    pub arrival: Instant,
    /// When the work started (a worker slot was taken; on arrival, for a layer without slots):
    /// `None` if it never started.
    pub work_start: Option<Instant>,
    /// When the work ended or was dropped: `None` if it never started.
    pub work_end: Option<Instant>,
    /// Time spent waiting for a worker slot (until the work started, or until the request gave
    /// up its place). A layer without slots has no queue: zero for a request it started (one
    /// whose cutoff had passed by its future's first poll shows the time until then, and
    /// baseline mode the wait for its spawned task).
    pub queued: Duration,
    /// Time the work held a worker: from `work_start` to `work_end`.
    pub worked: Duration,
    /// How long the response body streamed after the head was handed on: from the end of the
    /// work to the body's last frame, its cut at the cutoff, or the caller's hang-up. Zero for
    /// a body whose frames were all ready at once (it never had to wait, so the clock is not
    /// read).
    pub streamed: Duration,
    /// How it ended.
    pub outcome: HoldOutcome,
    /// The status of the answer, when there was one (even one nobody received, as when the
    /// caller hung up in baseline mode). `None` when the work was dropped before it answered,
    /// and when the inner service returned an error instead of a response.
    pub status: Option<StatusCode>,
    /// Whether the whole answer was handed on to be written: `false` when the caller went away
    /// first (or the body failed part-way).
    pub reply_written: bool,
    /// Where the request was when its time ran out, when the layer answered 504 itself for that
    /// reason (not for a budget already spent on arrival, nor for a handler's own 504), or
    /// [`Phase::Stream`] when it ended a response body still streaming at the cutoff.
    pub exceeded: Option<Phase>,
    /// When the caller went away before the answer reached it: `None` if it never did. With
    /// enforcement on, the work stops at that moment; in baseline mode it runs on after it.
    pub caller_left: Option<Instant>,
}

/// The figures of a hold that its counters, Prometheus series, log and answer headers read,
/// without its strings and instants (but the arrival): the enforce layer's recorder gives them
/// straight from its draft, so a service whose only listeners are these never makes a whole
/// [`Hold`].
#[derive(Clone, Copy, Debug)]
// Without the `metrics` feature only the counters and the hold log read it, which leave a few
// fields unread.
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) struct HoldFacts {
    pub(crate) outcome: HoldOutcome,
    pub(crate) status: Option<StatusCode>,
    pub(crate) budget_ms: Option<u64>,
    pub(crate) arrival: Instant,
    /// When the work started and ended, in whole ms since arrival (rounded down), if it did:
    /// what the hop's `Deadline-Trace` writes.
    pub(crate) work_start_ms: Option<u64>,
    pub(crate) work_end_ms: Option<u64>,
    pub(crate) queued: Duration,
    pub(crate) worked: Duration,
    pub(crate) reply_written: bool,
    pub(crate) exceeded: Option<Phase>,
    /// The part of the work done after the caller left.
    pub(crate) after_caller_left: Duration,
}

impl HoldFacts {
    /// Whether the work started (a worker slot was taken).
    pub(crate) fn started(&self) -> bool {
        self.work_start_ms.is_some()
    }
}

impl fmt::Display for Hold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.service, self.method, self.path)?;
        if let Some(id) = &self.request_id {
            write!(f, " [{id}]")?;
        }
        write!(f, ": {}", self.outcome)?;
        if let Some(status) = self.status {
            write!(f, " ({})", status.as_u16())?;
        }
        match self.budget_ms {
            Some(ms) => write!(f, ", budget {ms} ms")?,
            None => f.write_str(", no budget")?,
        }
        write!(
            f,
            ", queued {} ms, worked {} ms, ",
            self.queued.as_millis(),
            self.worked.as_millis(),
        )?;
        if !self.streamed.is_zero() {
            write!(f, "streamed {} ms, ", self.streamed.as_millis())?;
        }
        write!(
            f,
            "reply {}",
            if self.reply_written {
                "written"
            } else {
                "not written"
            }
        )
    }
}

/// Counters of every [`Hold`] reported by one layer (and every service and clone made from it).
///
/// Cheap to clone and to update (a few relaxed atomic additions per request). Read them with
/// [`snapshot`](HoldMetrics::snapshot).
#[derive(Clone, Debug, Default)]
pub struct HoldMetrics {
    counters: Arc<Counters>,
}

#[derive(Debug, Default)]
struct Counters {
    ok: AtomicU64,
    deadline: AtomicU64,
    hung_up: AtomicU64,
    rejected: AtomicU64,
    error: AtomicU64,
    shed: AtomicU64,
    queue_give_ups: AtomicU64,
    replies_unwritten: AtomicU64,
    worker_time_us: AtomicU64,
}

impl HoldMetrics {
    /// The counters as they are now.
    pub fn snapshot(&self) -> HoldSnapshot {
        let c = &*self.counters;
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        HoldSnapshot {
            ok: get(&c.ok),
            deadline: get(&c.deadline),
            hung_up: get(&c.hung_up),
            rejected: get(&c.rejected),
            error: get(&c.error),
            shed: get(&c.shed),
            queue_give_ups: get(&c.queue_give_ups),
            replies_unwritten: get(&c.replies_unwritten),
            worker_time: Duration::from_micros(get(&c.worker_time_us)),
        }
    }

    /// Counts a hold.
    pub(crate) fn count(&self, hold: &HoldFacts) {
        let started = hold.started();
        let HoldFacts {
            outcome,
            reply_written,
            worked,
            ..
        } = *hold;
        let c = &*self.counters;
        let counter = match outcome {
            HoldOutcome::Ok => &c.ok,
            HoldOutcome::Deadline => &c.deadline,
            HoldOutcome::HungUp => &c.hung_up,
            HoldOutcome::Rejected => &c.rejected,
            HoldOutcome::Error => &c.error,
            HoldOutcome::Shed => &c.shed,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        if outcome == HoldOutcome::Deadline && !started {
            c.queue_give_ups.fetch_add(1, Ordering::Relaxed);
        }
        if !reply_written {
            c.replies_unwritten.fetch_add(1, Ordering::Relaxed);
        }
        let us = u64::try_from(worked.as_micros()).unwrap_or(u64::MAX);
        c.worker_time_us.fetch_add(us, Ordering::Relaxed);
    }
}

/// The [`HoldMetrics`] counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HoldSnapshot {
    /// Holds that ended [`HoldOutcome::Ok`].
    pub ok: u64,
    /// Holds that ended [`HoldOutcome::Deadline`] (queue give-ups included).
    pub deadline: u64,
    /// Holds that ended [`HoldOutcome::HungUp`].
    pub hung_up: u64,
    /// Requests [`HoldOutcome::Rejected`] on arrival.
    pub rejected: u64,
    /// Holds that ended [`HoldOutcome::Error`].
    pub error: u64,
    /// Requests [`HoldOutcome::Shed`] by admission.
    pub shed: u64,
    /// Requests that ran out of time before their work started: they gave up their place in the
    /// queue, or got a slot too late to start. Also counted in `deadline`.
    pub queue_give_ups: u64,
    /// Requests whose answer was not handed on in full (the caller had gone). Any outcome.
    pub replies_unwritten: u64,
    /// Total time work held a worker, over every request.
    pub worker_time: Duration,
}

impl HoldSnapshot {
    /// Every request reported, whatever its outcome.
    pub fn holds(&self) -> u64 {
        self.ok
            .saturating_add(self.deadline)
            .saturating_add(self.hung_up)
            .saturating_add(self.rejected)
            .saturating_add(self.error)
            .saturating_add(self.shed)
    }
}

impl fmt::Display for HoldSnapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} requests: {} ok, {} deadline ({} before starting), {} hung up, {} rejected, \
             {} error, {} shed; {} replies not written; worker time {:.3} s",
            self.holds(),
            self.ok,
            self.deadline,
            self.queue_give_ups,
            self.hung_up,
            self.rejected,
            self.error,
            self.shed,
            self.replies_unwritten,
            self.worker_time.as_secs_f64()
        )
    }
}

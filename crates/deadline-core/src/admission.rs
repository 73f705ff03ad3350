//! Admission: refuse at arrival a request that could not finish after queuing for a worker.
//!
//! A request that joins a long queue with a short budget holds its caller's budget until it gives
//! up in the queue, and then the caller has nothing left to try elsewhere. When the queue already
//! says it cannot finish, telling the caller at once is kinder to both sides: the caller keeps its
//! budget, and the service's queue stays short for requests that can still be served.
//!
//! # The rule
//!
//! When every worker slot is busy, a request with `remaining` budget that finds `ahead` waiters
//! queued before it expects to wait
//!
//! ```text
//! expected_wait = ceil((ahead + 1) / slots) × mean_work
//! shed          if remaining < expected_wait + min_useful
//! ```
//!
//! where `mean_work` is a moving average of recent work times ([`WorkTimeEstimate`]). Nothing is
//! shed while a slot is free, before any work time has been observed, or when the request
//! carries no deadline. [`admit`] applies the rule at arrival; [`admit_at_grant`] re-checks when a
//! slot is granted, with the real time left (the estimate can be wrong either way).
//!
//! # A cap on the wait
//!
//! The rule above admits while the expected wait still fits the budget, so under overload the
//! queue settles about a budget deep and the users answered in time waited nearly their whole
//! budget for it. [`admit_capped`] adds a cap on the same prediction:
//!
//! ```text
//! shed          also if expected_wait > max_wait
//! ```
//!
//! checked at arrival only, like the rest of the rule: an admitted request is never dropped
//! later for having waited (a refusal is useful to the caller when it is immediate; one after a
//! wait has cost it that wait). With a cap of two rounds of work the queue holds about two rounds,
//! every worker stays busy (a slot given back always finds a waiter), and a request answered in
//! time waited at most about the cap instead of about its budget. The price is paid below
//! capacity: a burst that would have drained within the budget, but not within the cap, is
//! refused instead of delayed.
//!
//! # A runtime that runs late
//!
//! The rules above weigh a queue of worker slots, which the service itself keeps. A hop whose
//! processor is the bottleneck has another queue that no slot sees: requests whose bytes have
//! arrived but which its runtime has not yet found the time to read, and tasks ready to run that
//! wait their turn. Past the processor's capacity that queue grows without bound, every request
//! already in it is late, and work spent on a request that will miss its deadline further down
//! is taken from the ones that could still make it. [`admit_on_lag`] refuses at arrival while the
//! runtime runs late:
//!
//! ```text
//! shed          if lag >= max_lag
//! ```
//!
//! where `lag` is how late a timer the service set for itself fired (the layer measures it; a
//! timer that is overdue now counts as late by what it is overdue). A refusal at arrival costs
//! the hop the request's head, already read, and a short answer: no work, no call downstream.
//! Unlike the rules above it does not need a deadline or a busy slot, since a runtime running
//! late delays every request alike.
//!
//! # Why this bound
//!
//! If every busy worker finishes within `mean_work` and every waiter ahead works at most
//! `mean_work`, a first-in-first-out queue served by `slots` workers starts this request within
//! `ceil((ahead + 1) / slots) × mean_work`: the waiters ahead of it fill whole rounds of the
//! slots, and it is in the round after them. The bound is also reached (every worker just
//! started, every waiter taking exactly `mean_work`), so a request the rule sheds really can miss
//! when the estimate holds, and one it admits is certain to start in time. The property tests
//! check both directions against a simulated queue.
//!
//! # Why an exponentially weighted mean
//!
//! [`WorkTimeEstimate`] keeps `mean += (sample − mean) / 8`, the smoothing TCP uses for its
//! round-trip estimate: it needs no buffer, follows a change in work times within a few dozen
//! samples, and one outlier moves it by an eighth of its distance. It is a mean, not a
//! percentile: the rule sheds what would miss on average, not what might miss in the worst case.

use std::fmt;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use crate::budget::Deadline;

/// How far one sample moves the moving average: `1 / 2^WEIGHT_SHIFT` of the distance.
const WEIGHT_SHIFT: u32 = 3;

/// A moving average of recent work times: the `mean_work` of the admission rule.
///
/// Pure: the layer that owns it calls [`observe`](WorkTimeEstimate::observe) with each finished
/// hold's work time, and reads [`mean`](WorkTimeEstimate::mean) at arrival.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WorkTimeEstimate {
    /// The mean in nanoseconds; `None` until the first sample.
    mean_ns: Option<u64>,
}

impl WorkTimeEstimate {
    /// An estimate with no sample yet: [`admit`] sheds nothing until one is observed.
    pub const fn new() -> WorkTimeEstimate {
        WorkTimeEstimate { mean_ns: None }
    }

    /// Folds one work time into the mean (the first sample becomes the mean).
    pub fn observe(&mut self, work: Duration) {
        let sample = u64::try_from(work.as_nanos()).unwrap_or(u64::MAX);
        self.mean_ns = Some(match self.mean_ns {
            None => sample,
            // mean + (sample - mean) / 8, without leaving u64 in either direction.
            Some(mean) if sample >= mean => mean + ((sample - mean) >> WEIGHT_SHIFT),
            Some(mean) => mean - ((mean - sample) >> WEIGHT_SHIFT),
        });
    }

    /// The current mean work time, or `None` before the first sample.
    pub fn mean(&self) -> Option<Duration> {
        self.mean_ns.map(Duration::from_nanos)
    }
}

/// The worker queue as a request finds it on arrival.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueState {
    /// Whether a worker slot is free (the request would not wait at all).
    pub free_slot: bool,
    /// Waiters queued ahead of this request.
    pub ahead: usize,
    /// How many worker slots the service has.
    pub slots: NonZeroU32,
}

/// Why a request was refused at admission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shed {
    remaining: Duration,
    expected_wait: Duration,
    min_useful: Duration,
    /// The cap on the wait, when it is what refused the request.
    max_wait: Option<Duration>,
    /// The runtime's lag and the most allowed, when that is what refused the request.
    lag: Option<(Duration, Duration)>,
}

impl Shed {
    /// The budget the request had left when it was refused.
    pub fn remaining(&self) -> Duration {
        self.remaining
    }

    /// How long it was expected to wait for a slot (zero when refused at the grant).
    pub fn expected_wait(&self) -> Duration {
        self.expected_wait
    }

    /// The least budget a request must still have when its work starts.
    pub fn min_useful(&self) -> Duration {
        self.min_useful
    }

    /// The cap on the expected wait, when the request was refused for exceeding it.
    pub fn max_wait(&self) -> Option<Duration> {
        self.max_wait
    }

    /// How late the service's runtime ran and the most it allows, when the request was refused
    /// for that ([`admit_on_lag`]).
    pub fn lag(&self) -> Option<(Duration, Duration)> {
        self.lag
    }
}

impl fmt::Display for Shed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some((lag, max_lag)) = self.lag {
            return write!(
                f,
                "shed: the service runs {} ms late, more than the {} ms it allows",
                lag.as_millis(),
                max_lag.as_millis()
            );
        }
        if let Some(cap) = self.max_wait {
            return write!(
                f,
                "shed: expected wait for a worker {} ms, above the cap of {} ms",
                self.expected_wait.as_millis(),
                cap.as_millis()
            );
        }
        write!(
            f,
            "shed: {} ms left, expected wait for a worker {} ms, work needs at least {} ms",
            self.remaining.as_millis(),
            self.expected_wait.as_millis(),
            self.min_useful.as_millis()
        )
    }
}

/// The admission decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Queue the request (or start it, with a free slot).
    Admit,
    /// Refuse it now: it could not finish.
    Shed(Shed),
}

/// The expected wait for a slot: `ceil((ahead + 1) / slots) × mean_work`, saturating.
pub fn expected_wait(ahead: usize, slots: NonZeroU32, mean_work: Duration) -> Duration {
    let rounds = (u64::try_from(ahead).unwrap_or(u64::MAX))
        .saturating_add(1)
        .div_ceil(u64::from(slots.get()));
    mean_work.saturating_mul(u32::try_from(rounds).unwrap_or(u32::MAX))
}

/// Applies the admission rule at arrival, at `now`, to a request with this `deadline` (if any).
/// Pure: same inputs, same answer.
pub fn admit(
    queue: QueueState,
    estimate: &WorkTimeEstimate,
    deadline: Option<Deadline>,
    min_useful: Duration,
    now: Instant,
) -> Admission {
    admit_capped(queue, estimate, deadline, Some(min_useful), None, now)
}

/// Applies the admission rule at arrival with a cap on the wait (see the
/// [module docs](self#a-cap-on-the-wait)): a request with a deadline is shed when its
/// `expected_wait` exceeds `max_wait`, or (with `min_useful`) when it would leave less than
/// `min_useful` of its budget. Either rule may be off (`None`). As with [`admit`], nothing is
/// shed with a free slot, before any work time was observed, or without a deadline. Pure.
pub fn admit_capped(
    queue: QueueState,
    estimate: &WorkTimeEstimate,
    deadline: Option<Deadline>,
    min_useful: Option<Duration>,
    max_wait: Option<Duration>,
    now: Instant,
) -> Admission {
    let (Some(deadline), Some(mean_work)) = (deadline, estimate.mean()) else {
        return Admission::Admit;
    };
    if queue.free_slot {
        return Admission::Admit;
    }
    let remaining = deadline.remaining(now);
    let expected_wait = expected_wait(queue.ahead, queue.slots, mean_work);
    let shed = |max_wait| {
        Admission::Shed(Shed {
            remaining,
            expected_wait,
            min_useful: min_useful.unwrap_or_default(),
            max_wait,
            lag: None,
        })
    };
    if let Some(cap) = max_wait.filter(|&cap| expected_wait > cap) {
        return shed(Some(cap));
    }
    match min_useful {
        Some(min_useful) if remaining < expected_wait.saturating_add(min_useful) => shed(None),
        _ => Admission::Admit,
    }
}

/// Re-checks a queued request when a slot is granted at `now`: with less than `min_useful` left
/// it is shed instead of started. A request without a deadline is always admitted.
pub fn admit_at_grant(deadline: Option<Deadline>, min_useful: Duration, now: Instant) -> Admission {
    let Some(deadline) = deadline else {
        return Admission::Admit;
    };
    let remaining = deadline.remaining(now);
    if remaining < min_useful {
        Admission::Shed(Shed {
            remaining,
            expected_wait: Duration::ZERO,
            min_useful,
            max_wait: None,
            lag: None,
        })
    } else {
        Admission::Admit
    }
}

/// Applies the lag rule at arrival (see the [module docs](self#a-runtime-that-runs-late)): a
/// request that arrives while the service's runtime runs `lag` late, `max_lag` or more, is shed,
/// whatever its deadline (`remaining`, `None` without one, is only reported). Pure.
pub fn admit_on_lag(lag: Duration, max_lag: Duration, remaining: Option<Duration>) -> Admission {
    if lag >= max_lag {
        Admission::Shed(Shed {
            remaining: remaining.unwrap_or(Duration::MAX),
            expected_wait: Duration::ZERO,
            min_useful: Duration::ZERO,
            max_wait: None,
            lag: Some((lag, max_lag)),
        })
    } else {
        Admission::Admit
    }
}

#[cfg(test)]
mod tests;

//! Backoff with full jitter, spent out of the caller's budget.
//!
//! Before retry *n* (attempt *n* ≥ 2) the caller sleeps a delay drawn uniformly from
//! `[0, min(max, base × 2^(n−2))]` (defaults: base 25 ms, max 250 ms). Drawing the whole range
//! ("full jitter") spreads the retries of many callers that failed together, so they do not come
//! back together; the exponential ceiling backs off from a callee that keeps failing.
//!
//! # The delay is spent from the budget
//!
//! The sleep happens inside the caller's deadline, so the planner decides the retry **as of the
//! moment the sleep ends**:
//!
//! ```text
//! delay    = backoff.delay(n, draw)
//! decision = decide(policy, n − 1, deadline, now + delay)
//! ```
//!
//! When that decision is not to send, the caller does not sleep at all: it stops now with
//! [`Stop::NotEnoughTimeAfterBackoff`], so it never sleeps and then sends an attempt it should have
//! skipped, and never sleeps past its own deadline. The random draw is an argument, like `now`,
//! so the rule stays a pure function and the tests are deterministic.

use std::fmt;
use std::time::{Duration, Instant};

use super::{Attempt, CallPolicy, Decision, Plan, Stop, decide};
use crate::budget::Deadline;

/// The exponential ceiling and its cap for backoff with full jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    base: Duration,
    max: Duration,
}

/// Why a [`Backoff`] was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackoffError {
    /// The cap was below the base, so the first retry's ceiling would not be `base`.
    MaxBelowBase {
        /// The base delay.
        base: Duration,
        /// The cap.
        max: Duration,
    },
}

impl fmt::Display for BackoffError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackoffError::MaxBelowBase { base, max } => write!(
                f,
                "the backoff cap ({max:?}) must be at least its base ({base:?})"
            ),
        }
    }
}

impl std::error::Error for BackoffError {}

impl Backoff {
    /// The default base delay: the ceiling before the first retry.
    pub const DEFAULT_BASE: Duration = Duration::from_millis(25);
    /// The default cap on the ceiling.
    pub const DEFAULT_MAX: Duration = Duration::from_millis(250);
    /// Base 25 ms, cap 250 ms.
    pub const DEFAULT: Backoff = Backoff {
        base: Backoff::DEFAULT_BASE,
        max: Backoff::DEFAULT_MAX,
    };
    /// No delay at all: retries are sent at once.
    pub const NONE: Backoff = Backoff {
        base: Duration::ZERO,
        max: Duration::ZERO,
    };

    /// A backoff whose ceiling starts at `base` and doubles per retry up to `max`.
    pub fn new(base: Duration, max: Duration) -> Result<Backoff, BackoffError> {
        if max < base {
            return Err(BackoffError::MaxBelowBase { base, max });
        }
        Ok(Backoff { base, max })
    }

    /// The ceiling before the first retry.
    pub fn base(&self) -> Duration {
        self.base
    }

    /// The cap on the ceiling.
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The largest delay before attempt `attempt` (from 1): zero for the first attempt, then
    /// `min(max, base × 2^(attempt − 2))`.
    pub fn ceiling(&self, attempt: u32) -> Duration {
        if attempt < 2 {
            return Duration::ZERO;
        }
        let doublings = attempt - 2;
        let factor = 1u32.checked_shl(doublings).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.max)
    }

    /// The delay before attempt `attempt` for a uniform random `draw`: `ceiling × draw /
    /// u32::MAX`, truncated to whole nanoseconds, so `0` gives no delay and `u32::MAX` the whole
    /// ceiling.
    pub fn delay(&self, attempt: u32, draw: u32) -> Duration {
        let ceiling = self.ceiling(attempt).as_nanos();
        let nanos = ceiling * u128::from(draw) / u128::from(u32::MAX);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff::DEFAULT
    }
}

/// An attempt to send after sleeping `delay`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delayed {
    /// How long to sleep first (zero for the first attempt).
    pub delay: Duration,
    /// The attempt, planned for the moment the sleep ends.
    pub attempt: Attempt,
}

/// What to do before an attempt when retries back off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacedDecision {
    /// Sleep, then send.
    Send(Delayed),
    /// Send nothing more, and do not sleep.
    Stop(Stop),
}

/// Decides attempt `sent + 1` under `policy` with `backoff`, for the random `draw`: the delay to
/// sleep and the attempt as [`decide`] plans it at `now + delay`. Pure: same inputs, same answer.
pub fn decide_paced(
    policy: &CallPolicy,
    backoff: &Backoff,
    sent: u32,
    deadline: Option<Deadline>,
    now: Instant,
    draw: u32,
) -> PacedDecision {
    let delay = backoff.delay(sent.saturating_add(1), draw);
    let Some(after) = now.checked_add(delay) else {
        // A delay past the end of the clock: with a deadline it can never be slept through.
        return match (deadline, decide(policy, sent, deadline, now)) {
            (Some(d), Decision::Send(_)) if policy.propagate() => {
                PacedDecision::Stop(Stop::NotEnoughTimeAfterBackoff {
                    attempt: sent.saturating_add(1),
                    remaining: d.remaining(now),
                    delay,
                    needed: policy
                        .share()
                        .needed_for(policy.margin().saturating_add(policy.min_useful())),
                })
            }
            (_, Decision::Stop(stop)) => PacedDecision::Stop(stop),
            (_, Decision::Send(attempt)) => PacedDecision::Send(Delayed { delay, attempt }),
        };
    };
    match decide(policy, sent, deadline, after) {
        Decision::Send(attempt) => PacedDecision::Send(Delayed { delay, attempt }),
        Decision::Stop(Stop::NotEnoughTime {
            attempt, needed, ..
        }) if !delay.is_zero() => PacedDecision::Stop(Stop::NotEnoughTimeAfterBackoff {
            attempt,
            remaining: deadline.map_or(Duration::ZERO, |d| d.remaining(now)),
            delay,
            needed,
        }),
        Decision::Stop(stop) => PacedDecision::Stop(stop),
    }
}

impl Plan {
    /// Decides the next attempt with `backoff` and the random `draw`; a `Send` counts as sent.
    /// The caller sleeps the returned delay, then sends.
    pub fn next_paced(
        &mut self,
        backoff: &Backoff,
        deadline: Option<Deadline>,
        now: Instant,
        draw: u32,
    ) -> PacedDecision {
        let decision = decide_paced(&self.policy, backoff, self.sent, deadline, now, draw);
        if let PacedDecision::Send(_) = decision {
            self.sent += 1;
        }
        decision
    }
}

#[cfg(test)]
mod tests;

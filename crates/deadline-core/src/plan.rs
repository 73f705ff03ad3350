//! The call planner: before every attempt of an outbound call, whether to send it, how long to
//! wait for it, and what budget to tell the callee.
//!
//! [`decide`] is a pure function of a [`CallPolicy`], how many attempts were already sent, the
//! deadline (if any) and `now`. [`Plan`] is the same with the attempt count kept for you. Nothing
//! here reads a clock, so the tests drive it on a virtual one.
//!
//! # The rule
//!
//! With a deadline and propagation on, before attempt *n*:
//!
//! ```text
//! remaining = deadline - now                  (zero once passed)
//! wait      = min(timeout, share × remaining)  never past the caller's own deadline
//! budget    = floor_ms(wait - margin)         the callee's answer has `margin` to travel back
//! send only if n <= attempts and budget >= min_useful
//! ```
//!
//! An attempt whose callee would get less than `min_useful` is never sent: it could not finish,
//! so it would only add load to a service that is probably already struggling. The budget is
//! truncated, never rounded up, and because `min_useful` is at least 1 ms a callee is never told
//! `0` (which reads as expired) and never gets no header (which reads as "no deadline").
//! The share is 1 unless a policy sets one: see [`share`] for why a call may take less than all
//! that is left.
//!
//! Without a deadline, or with propagation off (the baseline), every configured attempt is sent
//! with its full timeout and no budget header: exactly what a client without this library does.
//!
//! Retries can back off with full jitter, the delay spent from the same budget ([`backoff`]), and
//! be bounded across calls as a share of recent requests and by a bucket that failing retries
//! empty ([`retry_budget`]).

use std::fmt;
use std::time::{Duration, Instant};

use crate::budget::{Budget, Deadline};

pub mod backoff;
pub mod hedge;
pub mod retry;
pub mod retry_budget;
pub mod share;

pub use backoff::{Backoff, BackoffError, Delayed, PacedDecision, decide_paced};
pub use hedge::{HedgeDelay, Latencies, decide_hedge};
pub use retry::{Callee504, LastAnswer, Pushback, RetryRules, StopReason, decide_retry};
pub use retry_budget::{RetryBucket, RetryBudget, RetryBudgetConfig};
pub use share::{Share, ShareError};

/// The default transit margin a caller keeps back from the budget it forwards.
pub const DEFAULT_MARGIN: Duration = Duration::from_millis(50);

/// The default smallest budget worth sending a callee.
pub const DEFAULT_MIN_USEFUL: Duration = Duration::from_millis(50);

/// How one outbound call is made: its per-attempt timeout, how many attempts, the margin kept
/// back for transit, the smallest useful callee budget, and whether the deadline propagates.
///
/// Build one with [`CallPolicy::new`] (defaults for the rest) or [`CallPolicy::builder`].
/// Invalid combinations are rejected with a [`PolicyError`] instead of silently never sending.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallPolicy {
    timeout: Duration,
    attempts: u32,
    margin: Duration,
    min_useful: Duration,
    share: Share,
    propagate: bool,
}

/// Why a [`CallPolicy`] was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PolicyError {
    /// The per-attempt timeout was zero.
    ZeroTimeout,
    /// The number of attempts was zero: the call could never be made.
    ZeroAttempts,
    /// The minimum useful budget was under 1 ms, so a callee could be told `0`.
    MinUsefulBelowOneMs {
        /// The rejected minimum.
        min_useful: Duration,
    },
    /// The timeout leaves no room for `margin + min_useful`, so under any deadline no attempt
    /// could ever be sent.
    TimeoutTooShort {
        /// The per-attempt timeout.
        timeout: Duration,
        /// The transit margin.
        margin: Duration,
        /// The minimum useful budget.
        min_useful: Duration,
    },
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::ZeroTimeout => f.write_str("the attempt timeout must be above zero"),
            PolicyError::ZeroAttempts => f.write_str("a call needs at least one attempt"),
            PolicyError::MinUsefulBelowOneMs { min_useful } => {
                write!(
                    f,
                    "the minimum useful budget must be at least 1 ms, not {min_useful:?}"
                )
            }
            PolicyError::TimeoutTooShort {
                timeout,
                margin,
                min_useful,
            } => write!(
                f,
                "the attempt timeout ({timeout:?}) must be at least margin ({margin:?}) plus \
                 minimum useful budget ({min_useful:?}), or no attempt could ever be sent"
            ),
        }
    }
}

impl std::error::Error for PolicyError {}

impl CallPolicy {
    /// A policy with this timeout and attempt count, the default margin and minimum useful
    /// budget (50 ms each), and propagation on.
    pub fn new(timeout: Duration, attempts: u32) -> Result<CallPolicy, PolicyError> {
        CallPolicy::builder()
            .timeout(timeout)
            .attempts(attempts)
            .build()
    }

    /// A builder starting from a 1 s timeout, 1 attempt and the defaults.
    pub fn builder() -> CallPolicyBuilder {
        CallPolicyBuilder(CallPolicy {
            timeout: Duration::from_secs(1),
            attempts: 1,
            margin: DEFAULT_MARGIN,
            min_useful: DEFAULT_MIN_USEFUL,
            share: Share::WHOLE,
            propagate: true,
        })
    }

    /// The longest one attempt may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The most attempts the call makes.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Time kept back from a forwarded budget for the reply to travel.
    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The smallest budget worth sending.
    pub fn min_useful(&self) -> Duration {
        self.min_useful
    }

    /// The most of the remaining budget one attempt may take (see [`share`]).
    pub fn share(&self) -> Share {
        self.share
    }

    /// Whether the deadline propagates (off: the baseline without the library).
    pub fn propagate(&self) -> bool {
        self.propagate
    }

    /// The same policy with propagation switched.
    #[must_use = "this returns a new policy; the original is unchanged"]
    pub fn with_propagate(mut self, propagate: bool) -> CallPolicy {
        self.propagate = propagate;
        self
    }
}

/// Builds a [`CallPolicy`]; [`CallPolicyBuilder::build`] validates it.
#[derive(Clone, Copy, Debug)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct CallPolicyBuilder(CallPolicy);

impl CallPolicyBuilder {
    /// The per-attempt timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.0.timeout = timeout;
        self
    }

    /// The most attempts (the first one included).
    pub fn attempts(mut self, attempts: u32) -> Self {
        self.0.attempts = attempts;
        self
    }

    /// Time kept back from a forwarded budget for the reply to travel (default 50 ms).
    pub fn margin(mut self, margin: Duration) -> Self {
        self.0.margin = margin;
        self
    }

    /// The smallest budget worth sending a callee (default 50 ms, at least 1 ms).
    pub fn min_useful(mut self, min_useful: Duration) -> Self {
        self.0.min_useful = min_useful;
        self
    }

    /// The most of the caller's remaining budget one attempt may take (default the whole):
    /// the callee's deadline is at most `now + share × remaining`, so calls made one after
    /// another leave time for the ones after them.
    pub fn share(mut self, share: Share) -> Self {
        self.0.share = share;
        self
    }

    /// Whether to propagate the deadline (default on). Off is the baseline: no header, full
    /// timeouts, every attempt.
    pub fn propagate(mut self, propagate: bool) -> Self {
        self.0.propagate = propagate;
        self
    }

    /// Checks and returns the policy.
    pub fn build(self) -> Result<CallPolicy, PolicyError> {
        let p = self.0;
        if p.timeout.is_zero() {
            return Err(PolicyError::ZeroTimeout);
        }
        if p.attempts == 0 {
            return Err(PolicyError::ZeroAttempts);
        }
        if p.min_useful < Duration::from_millis(1) {
            return Err(PolicyError::MinUsefulBelowOneMs {
                min_useful: p.min_useful,
            });
        }
        if p.timeout < p.margin.saturating_add(p.min_useful) {
            return Err(PolicyError::TimeoutTooShort {
                timeout: p.timeout,
                margin: p.margin,
                min_useful: p.min_useful,
            });
        }
        Ok(p)
    }
}

/// One attempt the planner says to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// Which attempt this is, from 1.
    pub number: u32,
    /// The longest to wait for its answer: `min(timeout, remaining)`.
    pub wait: Duration,
    /// What to send in `Deadline-Budget-Ms`; `None` when there is no deadline or propagation is
    /// off.
    pub budget: Option<Budget>,
}

/// Why the planner says not to send another attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// Every configured attempt was already sent.
    AttemptsExhausted {
        /// The configured attempts.
        attempts: u32,
    },
    /// The attempt could not finish: its callee would get less than the minimum useful budget.
    NotEnoughTime {
        /// The attempt that was not sent, from 1.
        attempt: u32,
        /// Time left before the caller's deadline.
        remaining: Duration,
        /// Time an attempt needs: margin plus the minimum useful budget, divided by the
        /// policy's share.
        needed: Duration,
    },
    /// The retry could not finish after its backoff delay, so the caller neither slept nor
    /// sent it (see [`backoff`]).
    NotEnoughTimeAfterBackoff {
        /// The attempt that was not sent, from 1.
        attempt: u32,
        /// Time left before the caller's deadline, before the delay.
        remaining: Duration,
        /// The backoff delay that was drawn.
        delay: Duration,
        /// Time an attempt needs after the delay: margin plus the minimum useful budget.
        needed: Duration,
    },
    /// The callee's pushback (`Retry-After`, `grpc-retry-pushback-ms`) asks for a longer wait
    /// than the budget leaves room for, so the caller neither slept nor retried (see [`retry`]).
    PushbackTooLong {
        /// The attempt that was not sent, from 1.
        attempt: u32,
        /// Time left before the caller's deadline, before the wait.
        remaining: Duration,
        /// The wait the callee asked for.
        pushback: Duration,
    },
    /// The callee said not to retry (a negative `grpc-retry-pushback-ms`).
    DoNotRetry {
        /// The attempt that was not sent, from 1.
        attempt: u32,
    },
    /// The callee answered 504 (its budget ran out) and the retry would get too small a share
    /// of that budget to do better (see [`retry`]).
    CalleeOutOfTime {
        /// The attempt that was not sent, from 1.
        attempt: u32,
        /// The budget the callee was told and used up.
        spent: Budget,
        /// The budget the retry would have been told.
        next: Budget,
    },
    /// The retry budget shared by the calls to this target refused the retry (see
    /// [`retry_budget`]).
    Throttled {
        /// The attempt that was not sent, from 1.
        attempt: u32,
    },
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::AttemptsExhausted { attempts } => write!(f, "all {attempts} attempts were used"),
            Stop::NotEnoughTime {
                attempt,
                remaining,
                needed,
            } => write!(
                f,
                "attempt {attempt} not sent: {} ms left, an attempt needs at least {} ms",
                remaining.as_millis(),
                needed.as_millis()
            ),
            Stop::NotEnoughTimeAfterBackoff {
                attempt,
                remaining,
                delay,
                needed,
            } => write!(
                f,
                "attempt {attempt} not sent: {} ms left, less than its {} ms backoff plus the {} ms \
                 an attempt needs",
                remaining.as_millis(),
                delay.as_millis(),
                needed.as_millis()
            ),
            Stop::PushbackTooLong {
                attempt,
                remaining,
                pushback,
            } => write!(
                f,
                "attempt {attempt} not sent: the callee asked to wait {} ms, {} ms are left",
                pushback.as_millis(),
                remaining.as_millis()
            ),
            Stop::DoNotRetry { attempt } => {
                write!(
                    f,
                    "attempt {attempt} not sent: the callee said not to retry"
                )
            }
            Stop::CalleeOutOfTime {
                attempt,
                spent,
                next,
            } => write!(
                f,
                "attempt {attempt} not sent: the callee ran out of its {} ms budget, a retry \
                 would get only {} ms",
                spent.as_millis(),
                next.as_millis()
            ),
            Stop::Throttled { attempt } => write!(
                f,
                "attempt {attempt} not sent: the retry budget for this target is spent"
            ),
        }
    }
}

/// What to do before an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this attempt.
    Send(Attempt),
    /// Send nothing more.
    Stop(Stop),
}

/// Decides attempt `sent + 1` of a call under `policy`, given the caller's `deadline` (if any)
/// at `now`. Pure: same inputs, same answer.
pub fn decide(
    policy: &CallPolicy,
    sent: u32,
    deadline: Option<Deadline>,
    now: Instant,
) -> Decision {
    if sent >= policy.attempts {
        return Decision::Stop(Stop::AttemptsExhausted {
            attempts: policy.attempts,
        });
    }
    let number = sent + 1;
    let deadline = match deadline {
        Some(deadline) if policy.propagate => deadline,
        _ => {
            return Decision::Send(Attempt {
                number,
                wait: policy.timeout,
                budget: None,
            });
        }
    };
    let remaining = deadline.remaining(now);
    let wait = policy.timeout.min(policy.share.of(remaining));
    match Budget::from_duration(wait.saturating_sub(policy.margin)) {
        Some(budget) if budget.as_duration() >= policy.min_useful => Decision::Send(Attempt {
            number,
            wait,
            budget: Some(budget),
        }),
        _ => Decision::Stop(Stop::NotEnoughTime {
            attempt: number,
            remaining,
            needed: policy
                .share
                .needed_for(policy.margin.saturating_add(policy.min_useful)),
        }),
    }
}

/// The planner for one call: [`decide`] with the count of attempts sent kept for you.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    policy: CallPolicy,
    sent: u32,
}

impl Plan {
    /// A fresh plan: no attempt sent yet.
    pub fn new(policy: CallPolicy) -> Plan {
        Plan { policy, sent: 0 }
    }

    /// Decides the next attempt; a `Send` counts as sent.
    pub fn next(&mut self, deadline: Option<Deadline>, now: Instant) -> Decision {
        let decision = decide(&self.policy, self.sent, deadline, now);
        if let Decision::Send(_) = decision {
            self.sent += 1;
        }
        decision
    }

    /// Attempts sent so far.
    pub fn sent(&self) -> u32 {
        self.sent
    }

    /// The policy being followed.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }
}

#[cfg(test)]
pub(crate) mod tests;

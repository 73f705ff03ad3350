//! Deciding a retry: backoff, the callee's pushback, and the rule for a callee's own deadline.
//!
//! [`decide_retry`] is [`decide_paced`](super::decide_paced) with what the failed attempt said
//! taken into account. Everything is still pure: the random draw, the time and what the last
//! answer carried are arguments.
//!
//! # Pushback
//!
//! A callee that is overloaded or down may say when to come back: `Retry-After` in
//! delta-seconds on a 429 or 503, or `grpc-retry-pushback-ms` (gRPC's retry throttling). The
//! delay before the retry is then **at least** the pushback (the jittered backoff is drawn as
//! usual and the larger of the two is slept), and, like the backoff, it is spent from the budget:
//! when the retry would not fit after it, the call ends now with
//! [`Stop::PushbackTooLong`], without sleeping. A negative
//! `grpc-retry-pushback-ms` means "do not retry" ([`Stop::DoNotRetry`]).
//!
//! Without a deadline the budget does not bound the wait, so the policy does: a pushback
//! longer than the attempts' whole configured time ([`max_pushback`]: `attempts × timeout`) is
//! never slept, with or without a deadline, and the call ends now with
//! [`Stop::PushbackTooLong`] as well. A callee cannot hold its caller longer with a pushback
//! than the caller's attempts could have taken: a `Retry-After: 86400` on a call of 3 × 1 s
//! attempts ends the call instead of sleeping a day.
//! An HTTP date in `Retry-After` is not read: it would need a wall clock, and it only ever
//! says "later than any deadline worth keeping" in practice.
//!
//! # A callee's deadline 504
//!
//! A callee that answers 504 used the whole budget it was told and ran out. Retrying it with
//! the same budget can help (the slowness may belong to the attempt: a slow replica, a lost
//! packet), but the retry is planned from what is left, which is less than the failed attempt
//! had. A retry with much less than the attempt that just ran out rarely finishes: the work it
//! needs did not fit in more. The rule:
//!
//! ```text
//! retry a callee's 504 only if   next budget ≥ ratio × budget of the attempt that ran out
//! ```
//!
//! with a ratio of one half by default ([`Callee504::DEFAULT`]). Without a deadline nothing was
//! sent, there is no budget to compare, and the 504 is retried like any 5xx. With the demo's
//! orders hop (a 1,890 ms deadline, 1,000 ms attempts), an inventory 504 after 950 ms leaves
//! 890 ms for the retry (94 %): retried. An orders 504 seen by the gateway after it told orders
//! 1,840 ms leaves about 57 ms: 3 %, not retried (before this rule that retry was sent and could
//! only fail).
//!
//! # A shed
//!
//! A callee whose queue is full refuses at once with a pushback of zero (503 and
//! `Retry-After: 0`: "not now, and you need not wait"). Retrying it at once is retrying the same
//! full queue: under sustained overload each retry is refused again (or, if it gets in, takes
//! the place of a first attempt that is refused instead), so every hop retrying multiplies the
//! refusals without adding an answer. It helps only when the overload was a burst that has
//! passed. The rule: **a shed is retried only with the permission of a retry budget's
//! bucket** (see [`retry_budget`](super::retry_budget)), which tells the two cases apart by the
//! outcomes: retries of a passing burst work and give their tokens back, retries into a full
//! queue fail and empty it. A client with no budget, or with the ratio cap alone, does not
//! retry a shed at all ([`Stop::Throttled`]). [`LastAnswer::is_shed`] recognises one.
//!
//! # What stopped a call
//!
//! [`StopReason`] names why a call sent no further attempt, one value per kind of
//! [`Stop`], for counting: metrics can count skipped attempts by reason without
//! matching every field.

use std::fmt;
use std::time::{Duration, Instant};

use http::{HeaderMap, Method, StatusCode};

use super::backoff::{Backoff, Delayed, PacedDecision};
use super::{CallPolicy, Decision, Plan, Stop, decide};
use crate::budget::{Budget, Deadline};

/// The gRPC retry-pushback header (milliseconds; negative means "do not retry").
pub const GRPC_RETRY_PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// What a failed attempt's answer said about retrying it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pushback {
    /// Nothing: retry after the usual backoff.
    #[default]
    None,
    /// Wait at least this long before the next attempt.
    After(Duration),
    /// Do not retry at all.
    DoNotRetry,
}

/// The longest pushback read; larger values are clamped (they never fit a budget anyway).
const MAX_PUSHBACK: Duration = Duration::from_secs(86_400);

/// Reads a `Retry-After` value in delta-seconds (`"120"`). `None` for an HTTP date or anything
/// else that is not plain digits; values past a day are clamped to a day.
pub fn parse_retry_after(value: &[u8]) -> Option<Duration> {
    let value = value.trim_ascii();
    if value.is_empty() || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // Leading zeros are allowed; more than 10 significant digits is past the clamp anyway.
    let digits = value.iter().skip_while(|b| **b == b'0').count();
    if digits > 10 {
        return Some(MAX_PUSHBACK);
    }
    let seconds = value.iter().fold(0u64, |n, b| n * 10 + u64::from(b - b'0'));
    Some(Duration::from_secs(seconds).min(MAX_PUSHBACK))
}

/// Reads a `grpc-retry-pushback-ms` value: milliseconds, or a negative number for "do not
/// retry". `None` when it is not an optionally signed integer.
pub fn parse_grpc_pushback(value: &[u8]) -> Option<Pushback> {
    let value = value.trim_ascii();
    let (negative, digits) = match value.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, value),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    if negative {
        return Some(Pushback::DoNotRetry);
    }
    let significant = digits.iter().skip_while(|b| **b == b'0').count();
    if significant > 12 {
        return Some(Pushback::After(MAX_PUSHBACK));
    }
    let ms = digits
        .iter()
        .fold(0u64, |n, b| n * 10 + u64::from(b - b'0'));
    Some(Pushback::After(Duration::from_millis(ms).min(MAX_PUSHBACK)))
}

/// The pushback an answer with `status` and `headers` carries: `grpc-retry-pushback-ms` on any
/// answer, `Retry-After` (delta-seconds) on a 429 or 503. An unreadable value is no pushback.
pub fn pushback_of(status: StatusCode, headers: &HeaderMap) -> Pushback {
    if let Some(pushback) = headers
        .get(GRPC_RETRY_PUSHBACK_HEADER)
        .and_then(|v| parse_grpc_pushback(v.as_bytes()))
    {
        return pushback;
    }
    if status != StatusCode::TOO_MANY_REQUESTS && status != StatusCode::SERVICE_UNAVAILABLE {
        return Pushback::None;
    }
    headers
        .get(http::header::RETRY_AFTER)
        .and_then(|v| parse_retry_after(v.as_bytes()))
        .map_or(Pushback::None, Pushback::After)
}

/// Whether an answer that is not a 5xx is still worth retrying: a 429 that says when to come
/// back. Every other 4xx is final.
pub fn retryable_4xx(status: StatusCode, headers: &HeaderMap) -> bool {
    status == StatusCode::TOO_MANY_REQUESTS && pushback_of(status, headers) != Pushback::None
}

/// Whether an answer failed in a way another attempt may fix: a 5xx, or a 429 that says when
/// to come back.
pub fn retryable(status: StatusCode, headers: &HeaderMap) -> bool {
    status.is_server_error() || retryable_4xx(status, headers)
}

/// Whether a request with `method` may be sent twice as it is: `GET`, `HEAD`, `OPTIONS`,
/// `TRACE`, `PUT` and `DELETE` (a request with another method is retried only when it carries
/// an idempotency key; that is the client's business).
pub fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// The rule for retrying a callee's deadline 504 (see the [module docs](self#a-callees-deadline-504)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Callee504 {
    per_mille: u32,
}

impl Callee504 {
    /// Retry when the next budget is at least half of the one that ran out.
    pub const DEFAULT: Callee504 = Callee504 { per_mille: 500 };
    /// Always retry a callee's 504 when the planner has time (the rule off).
    pub const ALWAYS: Callee504 = Callee504 { per_mille: 0 };

    /// Retry when the next budget is at least `per_mille` thousandths of the one that ran out
    /// (clamped to 1,000: more than the same budget can never be planned).
    pub fn new(per_mille: u32) -> Callee504 {
        Callee504 {
            per_mille: per_mille.min(1_000),
        }
    }

    /// The ratio, in thousandths.
    pub fn per_mille(&self) -> u32 {
        self.per_mille
    }

    /// Whether a retry told `next` is worth sending after a 504 from a callee told `spent`.
    pub fn worth_retrying(&self, spent: Budget, next: Budget) -> bool {
        u128::from(next.as_millis()) * 1_000
            >= u128::from(spent.as_millis()) * u128::from(self.per_mille)
    }
}

impl Default for Callee504 {
    fn default() -> Callee504 {
        Callee504::DEFAULT
    }
}

/// What the last failed attempt told the planner.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LastAnswer {
    /// What the callee said about retrying.
    pub pushback: Pushback,
    /// The budget sent with the attempt, when the callee answered 504 to it.
    pub deadline_504: Option<Budget>,
}

/// How retries are paced and judged: the backoff and the callee-504 rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryRules {
    /// Backoff with full jitter before each retry.
    pub backoff: Backoff,
    /// When a callee's 504 is worth retrying.
    pub callee_504: Callee504,
}

impl RetryRules {
    /// Retries sent at once and every callee 504 retried: what a client without the library
    /// does, and how a hedge is planned (its delay is the wait).
    pub const IMMEDIATE: RetryRules = RetryRules {
        backoff: Backoff::NONE,
        callee_504: Callee504::ALWAYS,
    };
}

impl LastAnswer {
    /// Whether the answer was a refusal that asks for no wait (a pushback of zero: the enforce
    /// layer's admission answers 503 with `Retry-After: 0`). Such a *shed* is retried only with
    /// the permission of a retry budget's bucket (see the [module docs](self#a-shed)): a client
    /// whose retries are not throttled by failures does not retry it.
    pub fn is_shed(&self) -> bool {
        self.pushback == Pushback::After(Duration::ZERO)
    }

    /// What a failed answer with `status` and `headers` tells the planner, the attempt having
    /// told its callee `budget`: its pushback, and the budget it ran out of if it was a 504.
    pub fn of(status: StatusCode, headers: &HeaderMap, budget: Option<Budget>) -> LastAnswer {
        LastAnswer {
            pushback: pushback_of(status, headers),
            deadline_504: budget.filter(|_| status == StatusCode::GATEWAY_TIMEOUT),
        }
    }
}

/// Decides attempt `sent + 1` after `last` failed: as
/// [`decide_paced`](super::decide_paced), with the delay at least the callee's pushback, the
/// call ended by a negative pushback, and a callee's 504 retried only under the
/// [`Callee504`] rule. For the first attempt (`sent == 0`) `last` is ignored. Pure.
pub fn decide_retry(
    policy: &CallPolicy,
    rules: &RetryRules,
    sent: u32,
    deadline: Option<Deadline>,
    now: Instant,
    draw: u32,
    last: &LastAnswer,
) -> PacedDecision {
    let attempt = sent.saturating_add(1);
    let first = sent == 0;
    if !first && sent < policy.attempts() && last.pushback == Pushback::DoNotRetry {
        return PacedDecision::Stop(Stop::DoNotRetry { attempt });
    }
    let jitter = rules.backoff.delay(attempt, draw);
    let pushback = match last.pushback {
        Pushback::After(d) if !first => d,
        _ => Duration::ZERO,
    };
    if pushback <= jitter {
        let decision = super::decide_paced(policy, &rules.backoff, sent, deadline, now, draw);
        return apply_504_rule(decision, rules, last, first);
    }
    // The pushback is the longer wait: plan the attempt as of when it ends, unless it is
    // longer than every attempt together was configured to take.
    let planned = now
        .checked_add(pushback)
        .filter(|_| pushback <= max_pushback(policy))
        .map(|after| decide(policy, sent, deadline, after));
    let decision = match planned {
        Some(Decision::Send(planned)) => PacedDecision::Send(Delayed {
            delay: pushback,
            attempt: planned,
        }),
        Some(Decision::Stop(Stop::AttemptsExhausted { attempts })) => {
            PacedDecision::Stop(Stop::AttemptsExhausted { attempts })
        }
        // Out of time after the pushback, or a pushback past the end of the clock.
        _ => PacedDecision::Stop(Stop::PushbackTooLong {
            attempt,
            remaining: deadline.map_or(Duration::MAX, |d| d.remaining(now)),
            pushback,
        }),
    };
    apply_504_rule(decision, rules, last, first)
}

/// The longest pushback slept under `policy`: its attempts' whole configured time,
/// `attempts × timeout`.
pub fn max_pushback(policy: &CallPolicy) -> Duration {
    policy.timeout().saturating_mul(policy.attempts())
}

impl Plan {
    /// Decides the next attempt with [`decide_retry`]; a retry (not the first attempt) the
    /// planner would send is then offered to `admit` (a retry budget, say), and when refused
    /// the call stops with [`Stop::Throttled`] instead. A `Send` counts as sent.
    pub fn next_retry(
        &mut self,
        rules: &RetryRules,
        deadline: Option<Deadline>,
        now: Instant,
        draw: u32,
        last: &LastAnswer,
        admit: impl FnOnce(&Delayed) -> bool,
    ) -> PacedDecision {
        let decision = decide_retry(&self.policy, rules, self.sent, deadline, now, draw, last);
        match decision {
            PacedDecision::Send(delayed) if self.sent > 0 && !admit(&delayed) => {
                PacedDecision::Stop(Stop::Throttled {
                    attempt: delayed.attempt.number,
                })
            }
            PacedDecision::Send(_) => {
                self.sent += 1;
                decision
            }
            PacedDecision::Stop(_) => decision,
        }
    }
}

/// Turns a planned retry after a callee's 504 into a stop when its budget is too small.
fn apply_504_rule(
    decision: PacedDecision,
    rules: &RetryRules,
    last: &LastAnswer,
    first: bool,
) -> PacedDecision {
    let (PacedDecision::Send(delayed), Some(spent), false) = (decision, last.deadline_504, first)
    else {
        return decision;
    };
    match delayed.attempt.budget {
        Some(next) if !rules.callee_504.worth_retrying(spent, next) => {
            PacedDecision::Stop(Stop::CalleeOutOfTime {
                attempt: delayed.attempt.number,
                spent,
                next,
            })
        }
        _ => decision,
    }
}

/// Why a call sent no further attempt: one value per kind of [`Stop`], for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum StopReason {
    /// Every configured (or allowed) attempt was sent.
    AttemptsExhausted,
    /// Too little time for another attempt.
    NotEnoughTime,
    /// Too little time once the backoff delay is slept.
    NotEnoughTimeAfterBackoff,
    /// The callee's pushback does not fit the budget.
    PushbackTooLong,
    /// The callee said not to retry.
    DoNotRetry,
    /// The callee answered 504 and the retry would get too small a share of its budget.
    CalleeOutOfTime,
    /// The retry budget refused the retry.
    Throttled,
}

impl StopReason {
    /// Every reason, for a caller that keeps one counter each.
    pub const ALL: [StopReason; 7] = [
        StopReason::AttemptsExhausted,
        StopReason::NotEnoughTime,
        StopReason::NotEnoughTimeAfterBackoff,
        StopReason::PushbackTooLong,
        StopReason::DoNotRetry,
        StopReason::CalleeOutOfTime,
        StopReason::Throttled,
    ];

    /// A short snake-case name (a metrics label).
    pub fn as_str(&self) -> &'static str {
        match self {
            StopReason::AttemptsExhausted => "attempts_exhausted",
            StopReason::NotEnoughTime => "not_enough_time",
            StopReason::NotEnoughTimeAfterBackoff => "not_enough_time_after_backoff",
            StopReason::PushbackTooLong => "pushback_too_long",
            StopReason::DoNotRetry => "do_not_retry",
            StopReason::CalleeOutOfTime => "callee_out_of_time",
            StopReason::Throttled => "throttled",
        }
    }

    /// The outcome of the zero-length attempt span a call records when this stopped an
    /// attempt it would otherwise have sent; `None` when no attempt was refused (every attempt
    /// was used).
    pub fn span_outcome(&self) -> Option<&'static str> {
        use crate::trace::outcome;
        match self {
            StopReason::AttemptsExhausted => None,
            StopReason::NotEnoughTime => Some(outcome::SKIPPED),
            StopReason::NotEnoughTimeAfterBackoff => Some(outcome::SKIPPED_BACKOFF),
            StopReason::PushbackTooLong => Some(outcome::SKIPPED_PUSHBACK),
            StopReason::DoNotRetry => Some(outcome::NO_RETRY),
            StopReason::CalleeOutOfTime => Some(outcome::SKIPPED_504),
            StopReason::Throttled => Some(outcome::THROTTLED),
        }
    }

    /// Whether the caller's deadline is why no attempt followed.
    pub fn is_out_of_time(&self) -> bool {
        matches!(
            self,
            StopReason::NotEnoughTime
                | StopReason::NotEnoughTimeAfterBackoff
                | StopReason::PushbackTooLong
                | StopReason::CalleeOutOfTime
        )
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Stop {
    /// Which kind of stop this is.
    pub fn reason(&self) -> StopReason {
        match self {
            Stop::AttemptsExhausted { .. } => StopReason::AttemptsExhausted,
            Stop::NotEnoughTime { .. } => StopReason::NotEnoughTime,
            Stop::NotEnoughTimeAfterBackoff { .. } => StopReason::NotEnoughTimeAfterBackoff,
            Stop::PushbackTooLong { .. } => StopReason::PushbackTooLong,
            Stop::DoNotRetry { .. } => StopReason::DoNotRetry,
            Stop::CalleeOutOfTime { .. } => StopReason::CalleeOutOfTime,
            Stop::Throttled { .. } => StopReason::Throttled,
        }
    }
}

#[cfg(test)]
mod tests;

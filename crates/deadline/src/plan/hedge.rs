//! Hedging: a second attempt sent while the first is still out, when the first is slow.
//!
//! A tail-latency attempt (a slow replica, a lost segment, a GC pause) usually has nothing to do
//! with the request: the same request sent again is usually fast. A hedge sends it again after
//! a **hedge delay** with no answer, and takes whichever answer comes first; the others are
//! cancelled. Only idempotent requests may be hedged (both may run to completion), and hedges
//! count as retries: against `attempts` and against the retry budget.
//!
//! # Whether a hedge fits
//!
//! A hedge is an attempt like any other, planned when the delay ends:
//!
//! ```text
//! at       = first attempt sent + hedge delay     (then every delay after that, while allowed)
//! decision = decide(policy, sent, deadline, at)
//! ```
//!
//! so the five invariants hold for hedges too: a hedge gets at least `min_useful`, its answer
//! fits its wait, its wait ends by the caller's deadline. A hedge counts as a retry, so one the
//! planner would send is then drawn from the retry budget ([`Plan::next_hedge`]); a hedge the
//! planner would not send (out of attempts or of time) draws nothing, and one the retry budget
//! refuses is not sent ([`Stop::Throttled`]). A hedge always has at least as much
//! time as the attempt it backs up has left (both end by the same deadline, the hedge's timeout
//! starts later), so there is no "too late to help" rule beyond the planner's own.
//!
//! # The hedge delay
//!
//! Fixed ([`HedgeDelay::Fixed`]), or a latency percentile the client observes
//! ([`HedgeDelay::Percentile`]): with p95, about one call in twenty is hedged once latencies
//! are steady, which bounds the extra load near 5 % (Dean and Barroso's "The Tail at Scale").
//! Observed latencies come from [`Latencies`]: the last [`Latencies::CAPACITY`] answered
//! attempts, and no hedge until [`Latencies::MIN_SAMPLES`] have been seen.

use std::time::{Duration, Instant};

use super::{Attempt, CallPolicy, Decision, Plan, Stop, decide};
use crate::budget::Deadline;

/// When to send a hedge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HedgeDelay {
    /// After this long without an answer.
    Fixed(Duration),
    /// After the given percentile (in thousandths: 950 is p95) of the latencies observed.
    Percentile {
        /// The percentile, 1 to 999 thousandths.
        per_mille: u16,
    },
}

impl HedgeDelay {
    /// The delay now, given what the client observed; `None` when a percentile is asked for and
    /// too few latencies were seen.
    pub fn resolve(&self, observed: &mut Latencies) -> Option<Duration> {
        match *self {
            HedgeDelay::Fixed(delay) => Some(delay),
            HedgeDelay::Percentile { per_mille } => observed.percentile(per_mille),
        }
    }
}

/// Decides the hedge that would be sent at `now` while `sent` attempts are out or done: the
/// planner's decision at that instant. Pure.
pub fn decide_hedge(
    policy: &CallPolicy,
    sent: u32,
    deadline: Option<Deadline>,
    now: Instant,
) -> Decision {
    decide(policy, sent, deadline, now)
}

impl Plan {
    /// Decides the hedge sent at `now` with [`decide_hedge`]; a hedge the planner would send
    /// (any attempt after the first) is then offered to `admit` (the retry budget), and when
    /// refused the hedge is not sent ([`Stop::Throttled`]). A `Send` counts as sent; `admit` is
    /// asked nothing when the planner would not send.
    pub fn next_hedge(
        &mut self,
        deadline: Option<Deadline>,
        now: Instant,
        admit: impl FnOnce(&Attempt) -> bool,
    ) -> Decision {
        match decide_hedge(&self.policy, self.sent, deadline, now) {
            Decision::Send(attempt) if self.sent > 0 && !admit(&attempt) => {
                Decision::Stop(Stop::Throttled {
                    attempt: attempt.number,
                })
            }
            Decision::Send(attempt) => {
                self.sent += 1;
                Decision::Send(attempt)
            }
            stop => stop,
        }
    }
}

/// The latencies of the last answered attempts, for a percentile hedge delay.
#[derive(Clone, Debug)]
pub struct Latencies {
    /// Microseconds, a ring: the next sample goes at `added % CAPACITY`.
    ring: Vec<u32>,
    /// The ring sorted when last asked, and how many samples had been added then.
    sorted: Vec<u32>,
    added: u64,
    sorted_at: u64,
}

impl Default for Latencies {
    fn default() -> Latencies {
        Latencies::new()
    }
}

impl Latencies {
    /// Latencies kept.
    pub const CAPACITY: usize = 512;
    /// Latencies needed before a percentile is given.
    pub const MIN_SAMPLES: usize = 20;
    /// New samples after which the sorted copy is made again.
    const RESORT_EVERY: u64 = 32;

    /// None seen yet.
    pub fn new() -> Latencies {
        Latencies {
            ring: Vec::new(),
            sorted: Vec::new(),
            added: 0,
            sorted_at: 0,
        }
    }

    /// Adds one attempt's latency.
    pub fn record(&mut self, latency: Duration) {
        let us = u32::try_from(latency.as_micros()).unwrap_or(u32::MAX);
        if self.ring.len() < Self::CAPACITY {
            self.ring.push(us);
        } else {
            // `CAPACITY` fits a `u64` and the remainder is below it, so both casts are exact.
            self.ring[(self.added % Self::CAPACITY as u64) as usize] = us;
        }
        self.added += 1;
    }

    /// The `per_mille` percentile (nearest rank) of the kept latencies; `None` with fewer than
    /// [`MIN_SAMPLES`](Self::MIN_SAMPLES). Re-sorts at most every 32 new samples, so it may lag
    /// the newest few.
    pub fn percentile(&mut self, per_mille: u16) -> Option<Duration> {
        if self.ring.len() < Self::MIN_SAMPLES {
            return None;
        }
        if self.sorted.is_empty() || self.added - self.sorted_at >= Self::RESORT_EVERY {
            self.sorted.clone_from(&self.ring);
            self.sorted.sort_unstable();
            self.sorted_at = self.added;
        }
        let n = self.sorted.len();
        let rank = (usize::from(per_mille.min(1_000)) * n)
            .div_ceil(1_000)
            .clamp(1, n);
        Some(Duration::from_micros(u64::from(self.sorted[rank - 1])))
    }
}

#[cfg(test)]
mod tests;

//! Budgets on the wire and deadlines on the local clock.
//!
//! # Why a relative budget, not a timestamp
//!
//! A caller sends how many whole milliseconds it is still prepared to wait, not a time of day.
//! The callee turns that into an instant on its *own* monotonic clock the moment the request
//! arrives, so two hosts whose wall clocks disagree by seconds still agree on how long the user
//! has left. The price is that network transit is not counted; callers keep a margin back for it
//! (see [`CallPolicy`](crate::plan::CallPolicy)). gRPC's `grpc-timeout` makes the same choice.
//!
//! # Why the arithmetic saturates
//!
//! [`Instant`] and [`Duration`] arithmetic panics on overflow, and a budget comes from the
//! network. Every operation here is checked or saturating, and budgets are truncated to whole
//! milliseconds when they go out (never rounded up), so a callee is never told it has more time
//! than its caller will wait.

use std::fmt;
use std::num::NonZeroU64;
use std::time::{Duration, Instant};

/// Whole milliseconds a caller is still prepared to wait: always at least 1.
///
/// A budget of zero or less is not a `Budget`: it is
/// [`BudgetValue::Expired`](crate::header::BudgetValue::Expired), so "nothing left" can never be
/// mistaken for "no budget at all".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Budget(NonZeroU64);

impl Budget {
    /// The default largest budget a service accepts: one hour. Larger values are clamped to it.
    pub const DEFAULT_MAX: Budget = Budget(NonZeroU64::new(3_600_000).expect("non-zero"));

    /// One millisecond, the smallest budget.
    pub const ONE_MS: Budget = Budget(NonZeroU64::MIN);

    /// A budget of `ms` milliseconds, or `None` for zero.
    pub const fn from_millis(ms: u64) -> Option<Budget> {
        match NonZeroU64::new(ms) {
            Some(ms) => Some(Budget(ms)),
            None => None,
        }
    }

    /// The whole milliseconds in `duration`, truncated (never rounded up); `None` below 1 ms.
    pub fn from_duration(duration: Duration) -> Option<Budget> {
        let ms = u64::try_from(duration.as_millis()).unwrap_or(u64::MAX);
        Budget::from_millis(ms)
    }

    /// The budget in milliseconds.
    pub const fn as_millis(self) -> u64 {
        self.0.get()
    }

    /// The budget as a [`Duration`].
    pub const fn as_duration(self) -> Duration {
        Duration::from_millis(self.0.get())
    }
}

impl fmt::Display for Budget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// The instant, on this host's monotonic clock, after which nobody is waiting for the answer.
///
/// Made from a [`Budget`] at the moment a request arrives ([`Deadline::after`]); compared with a
/// `now` that the caller reads, never with a clock read here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Deadline(Instant);

/// How far [`Deadline::after`] falls back when `arrival + budget` does not fit in an [`Instant`].
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

impl Deadline {
    /// A deadline at `instant`.
    pub const fn at(instant: Instant) -> Deadline {
        Deadline(instant)
    }

    /// The deadline `budget` after `arrival`. Saturates instead of overflowing: a budget too large
    /// for the platform's clock becomes a deadline a century away.
    pub fn after(arrival: Instant, budget: Budget) -> Deadline {
        Deadline::after_duration(arrival, budget.as_duration())
    }

    /// The deadline `duration` after `start`, saturating like [`Deadline::after`].
    pub fn after_duration(start: Instant, duration: Duration) -> Deadline {
        let instant = start
            .checked_add(duration)
            .or_else(|| start.checked_add(FAR_FUTURE))
            .unwrap_or(start);
        Deadline(instant)
    }

    /// The deadline `duration` after `start`, and the same deadline moved `reserve` earlier
    /// (never before `start`): `(after_duration(start, duration), that.earlier_by(reserve,
    /// start))`, the same two values, worked out from `duration` itself.
    ///
    /// A request's deadline and its cutoff on arrival. The deadline less `start` is `duration`
    /// whenever the sum fits (an [`Instant`] adds and subtracts exactly, in whole nanoseconds),
    /// so nothing is subtracted from an instant: one addition each where the two calls take
    /// three instant operations.
    pub fn after_with_reserve(
        start: Instant,
        duration: Duration,
        reserve: Duration,
    ) -> (Deadline, Deadline) {
        match start.checked_add(duration) {
            Some(deadline) => (
                Deadline(deadline),
                Deadline::after_duration(start, duration.saturating_sub(reserve)),
            ),
            None => {
                let deadline = Deadline::after_duration(start, duration);
                (deadline, deadline.earlier_by(reserve, start))
            }
        }
    }

    /// The instant itself.
    pub const fn instant(self) -> Instant {
        self.0
    }

    /// Time left at `now`; zero once the deadline has passed.
    pub fn remaining(self, now: Instant) -> Duration {
        self.0.saturating_duration_since(now)
    }

    /// Whether the deadline has passed at `now` (a deadline *at* `now` has passed: nothing is left).
    pub fn is_expired(self, now: Instant) -> bool {
        now >= self.0
    }

    /// The budget to tell a callee at `now`: the time left truncated to whole milliseconds, or
    /// `None` when less than 1 ms is left.
    pub fn budget(self, now: Instant) -> Option<Budget> {
        Budget::from_duration(self.remaining(now))
    }

    /// The earlier of two deadlines: when several sources set one, the tightest wins.
    pub fn min(self, other: Deadline) -> Deadline {
        if other.0 < self.0 { other } else { self }
    }

    /// The deadline moved `reserve` earlier, but never before `not_before` (typically the
    /// request's arrival): for example to keep time back for writing a reply.
    ///
    /// Computed forwards from `not_before`, so no [`Instant`] is ever subtracted: on platforms
    /// whose clock starts at boot, a reserve longer than the uptime still applies in full.
    pub fn earlier_by(self, reserve: Duration, not_before: Instant) -> Deadline {
        let span = self.0.saturating_duration_since(not_before);
        Deadline::after_duration(not_before, span.saturating_sub(reserve))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin() -> Instant {
        #[allow(clippy::disallowed_methods)] // tests need one arbitrary origin instant
        Instant::now()
    }

    /// The deadline and cutoff made together are the two made one after the other, for
    /// budgets below, at and above the reserve and for durations too large for the clock.
    #[test]
    fn deadline_and_cutoff_together_match_one_after_the_other() {
        let start = origin();
        let durations = [
            Duration::ZERO,
            Duration::from_nanos(1),
            Duration::from_millis(9),
            Duration::from_millis(10),
            Duration::from_millis(11),
            Duration::from_millis(1_950),
            Duration::from_secs(3_600),
            FAR_FUTURE,
            Duration::from_secs(u64::MAX / 4),
            Duration::MAX,
        ];
        let reserves = [
            Duration::ZERO,
            Duration::from_millis(10),
            Duration::from_secs(3_600),
            Duration::MAX,
        ];
        for duration in durations {
            for reserve in reserves {
                let deadline = Deadline::after_duration(start, duration);
                assert_eq!(
                    Deadline::after_with_reserve(start, duration, reserve),
                    (deadline, deadline.earlier_by(reserve, start)),
                    "duration {duration:?}, reserve {reserve:?}"
                );
            }
        }
    }

    #[test]
    fn budget_truncates_never_rounds_up() {
        assert_eq!(
            Budget::from_duration(Duration::from_micros(1_999)).map(Budget::as_millis),
            Some(1)
        );
        assert_eq!(Budget::from_duration(Duration::from_micros(999)), None);
        assert_eq!(Budget::from_duration(Duration::ZERO), None);
        assert_eq!(
            Budget::from_duration(Duration::MAX).map(Budget::as_millis),
            Some(u64::MAX)
        );
        assert_eq!(Budget::from_millis(0), None);
    }

    #[test]
    fn deadline_arithmetic_saturates() {
        let t0 = origin();
        let huge = Budget::from_millis(u64::MAX).unwrap();
        let d = Deadline::after(t0, huge);
        assert!(d.instant() > t0);
        assert!(!d.is_expired(t0));
        let d = Deadline::after(t0, Budget::from_millis(100).unwrap());
        assert_eq!(d.remaining(t0), Duration::from_millis(100));
        assert_eq!(d.remaining(t0 + Duration::from_secs(5)), Duration::ZERO);
        assert!(
            d.is_expired(d.instant()),
            "a deadline at now has nothing left"
        );
        assert_eq!(d.budget(t0 + Duration::from_micros(99_500)), None);
        assert_eq!(
            d.budget(t0 + Duration::from_micros(98_500))
                .map(Budget::as_millis),
            Some(1)
        );
        assert_eq!(
            d.earlier_by(Duration::from_millis(10), t0).remaining(t0),
            Duration::from_millis(90)
        );
        assert_eq!(
            d.earlier_by(Duration::from_secs(3600), t0),
            Deadline::at(t0),
            "saturates at not_before"
        );
        let e = Deadline::after(t0, Budget::from_millis(50).unwrap());
        assert_eq!(d.min(e), e);
        assert_eq!(e.min(d), e);
    }
}

//! Degrading by what is left: choose a cheaper strategy when little time remains.
//!
//! A handler often has more than one way to answer: a fresh computation, a cheaper
//! approximation, a cached answer. With the deadline in hand the choice is a one-liner: list
//! the tiers best first, each with the time it needs, and take the first that fits what is left
//! before the work must stop (the deadline less the reply reserve).
//!
//! ```
//! use std::time::Duration;
//! use deadline_http::pick;
//!
//! #[derive(Debug, PartialEq)]
//! enum Answer { Fresh, Approximate, Cached }
//!
//! let tiers = [
//!     (Duration::from_millis(400), Answer::Fresh),
//!     (Duration::from_millis(80), Answer::Approximate),
//!     (Duration::ZERO, Answer::Cached),
//! ];
//! // Outside a request with a deadline, the best tier: nobody is in a hurry.
//! assert_eq!(pick(&tiers), Some(&Answer::Fresh));
//! ```
//!
//! Inside a handler served by the enforce layer, with 250 ms left the same call picks
//! `Approximate`; with 50 ms, `Cached`. A list whose last tier needs more than is left gives
//! `None`: nothing can finish, and the handler can say so at once instead of starting.

use std::time::Duration;

use crate::context::DeadlineContext;

impl DeadlineContext {
    /// The first of `tiers` (best first, each with the time it needs) that fits in what is left
    /// of this request's time ([`remaining`](Self::remaining)); without a deadline, the first.
    /// `None` when none fits.
    pub fn pick<'a, T>(&self, tiers: &'a [(Duration, T)]) -> Option<&'a T> {
        pick_within(self.remaining(), tiers)
    }
}

/// [`DeadlineContext::pick`] for the current request's context; outside any request, or in one
/// without a deadline, the first tier.
pub fn pick<T>(tiers: &[(Duration, T)]) -> Option<&T> {
    pick_within(
        DeadlineContext::current().and_then(|c| c.remaining()),
        tiers,
    )
}

/// The first tier needing no more than `left` (any tier when `left` is `None`).
fn pick_within<T>(left: Option<Duration>, tiers: &[(Duration, T)]) -> Option<&T> {
    tiers
        .iter()
        .find(|(needs, _)| left.is_none_or(|left| *needs <= left))
        .map(|(_, tier)| tier)
}

#[cfg(test)]
mod tests {
    use deadline::Deadline;
    use tokio::time::Instant;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    const TIERS: [(Duration, &str); 3] = [
        (Duration::from_millis(400), "fresh"),
        (Duration::from_millis(80), "approximate"),
        (Duration::from_millis(5), "cached"),
    ];

    #[tokio::test(start_paused = true)]
    async fn the_first_tier_that_fits_what_is_left() {
        let arrival = Instant::now();
        let deadline = Deadline::after_duration(arrival.into_std(), ms(260));
        // 260 ms less the 10 ms reserve: 250 left.
        let context = DeadlineContext::new(Some(deadline), ms(10), arrival);
        assert_eq!(context.pick(&TIERS), Some(&"approximate"));
        tokio::time::advance(ms(170)).await; // 80 left: still fits exactly
        assert_eq!(context.pick(&TIERS), Some(&"approximate"));
        tokio::time::advance(ms(1)).await;
        assert_eq!(context.pick(&TIERS), Some(&"cached"));
        let picked = context.clone().scope(async { pick(&TIERS).copied() }).await;
        assert_eq!(picked, Some("cached"));
        tokio::time::advance(ms(76)).await; // 3 left: nothing fits
        assert_eq!(context.pick(&TIERS), None);
        let none: [(Duration, u8); 0] = [];
        assert_eq!(context.pick(&none), None);
    }

    #[tokio::test(start_paused = true)]
    async fn without_a_deadline_the_best_tier() {
        assert_eq!(pick(&TIERS), Some(&"fresh"));
        let context = DeadlineContext::new(None, ms(10), Instant::now());
        assert_eq!(context.pick(&TIERS), Some(&"fresh"));
    }
}

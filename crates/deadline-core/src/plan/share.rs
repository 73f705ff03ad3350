//! Share caps: how much of what is left one call may take.
//!
//! A per-attempt timeout caps one attempt, but a handler that makes several calls in a row needs
//! more: the first call must leave time for the ones after it. A share caps the callee's deadline
//! at a fraction of what the caller has left when the attempt is sent:
//!
//! ```text
//! wait = min(timeout, remaining, share × remaining)
//! ```
//!
//! so the callee's deadline is `min(parent deadline, now + share × remaining)`. A fixed share of
//! what is left behaves the same under any budget, where a fixed number of milliseconds kept
//! back would be too much under a short budget and too little under a long one.

use std::fmt;
use std::time::Duration;

/// A fraction of the remaining budget, above 0 and at most 1, kept in parts per million.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Share(u32);

/// Why a share was rejected.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ShareError {
    share: f64,
}

impl ShareError {
    /// The rejected value.
    pub fn share(&self) -> f64 {
        self.share
    }
}

impl fmt::Display for ShareError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "a share of the remaining budget must be above 0 and at most 1 (at least 0.000001), not {}",
            self.share
        )
    }
}

impl std::error::Error for ShareError {}

const PARTS: u32 = 1_000_000;

impl Share {
    /// The whole remaining budget: no cap beyond the timeout.
    pub const WHOLE: Share = Share(PARTS);

    /// A share from a fraction in `(0, 1]`, rounded down to parts per million; a fraction that
    /// rounds to zero, is above one or is not a number is rejected.
    pub fn new(share: f64) -> Result<Share, ShareError> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(ShareError { share });
        }
        // In (0, 1e6] after the check above, so the cast cannot saturate.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let parts = (share * f64::from(PARTS)) as u32;
        if parts == 0 {
            return Err(ShareError { share });
        }
        Ok(Share(parts))
    }

    /// The fraction, for display.
    pub fn as_f64(self) -> f64 {
        f64::from(self.0) / f64::from(PARTS)
    }

    /// This share of `remaining`, truncated to whole nanoseconds (never rounded up).
    pub fn of(self, remaining: Duration) -> Duration {
        if self == Share::WHOLE {
            return remaining;
        }
        let nanos = remaining.as_nanos() * u128::from(self.0) / u128::from(PARTS);
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// The least remaining budget whose share is at least `needed`: `needed / share`, rounded
    /// up to whole nanoseconds, saturating.
    pub fn needed_for(self, needed: Duration) -> Duration {
        if self == Share::WHOLE {
            return needed;
        }
        let nanos = (needed.as_nanos() * u128::from(PARTS)).div_ceil(u128::from(self.0));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }
}

impl Default for Share {
    fn default() -> Share {
        Share::WHOLE
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.as_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn shares_outside_zero_to_one_are_rejected() {
        for bad in [0.0, -0.5, 1.000_001, 2.0, f64::NAN, f64::INFINITY, 1e-7] {
            let err = Share::new(bad).expect_err("rejected");
            assert!(err.share() == bad || bad.is_nan());
            assert!(err.to_string().contains("above 0 and at most 1"));
        }
        assert_eq!(Share::new(1.0), Ok(Share::WHOLE));
        assert_eq!(Share::new(0.5).unwrap().as_f64(), 0.5);
        assert_eq!(
            Share::new(0.000_001).unwrap().of(ms(1_000)),
            Duration::from_micros(1)
        );
        assert_eq!(Share::default(), Share::WHOLE);
        assert_eq!(Share::new(0.25).unwrap().to_string(), "0.25");
    }

    #[test]
    fn a_share_truncates_and_its_inverse_rounds_up() {
        let half = Share::new(0.5).unwrap();
        assert_eq!(half.of(ms(1_000)), ms(500));
        assert_eq!(half.of(Duration::from_nanos(3)), Duration::from_nanos(1));
        assert_eq!(half.needed_for(ms(100)), ms(200));
        let third = Share::new(1.0 / 3.0).unwrap(); // 333,333 parts per million
        // The least remaining whose share reaches `needed`: one nanosecond less falls short.
        for needed in [
            Duration::from_nanos(1),
            ms(1),
            ms(100),
            Duration::from_micros(281_001),
        ] {
            let least = third.needed_for(needed);
            assert!(third.of(least) >= needed, "{needed:?}");
            assert!(
                third.of(least - Duration::from_nanos(1)) < needed,
                "{needed:?}"
            );
        }
        assert_eq!(Share::WHOLE.of(Duration::MAX), Duration::MAX);
        assert_eq!(
            half.needed_for(Duration::MAX),
            Duration::from_nanos(u64::MAX)
        );
    }
}

//! Expiry for work that leaves the request: a message that carries when it stops being useful.
//!
//! A deadline travels with a request while the chain is synchronous. Work put on a queue, or
//! handed to a batch job, outlives the request that made it, and the monotonic clock it was
//! measured on stays behind. So the expiry travels as an absolute instant on the wall clock
//! (RFC 3339 with milliseconds, the same text as `X-Request-Deadline`), and the consumer checks
//! it with the same [`SkewGuard`] before working: a message whose reader has given up is
//! discarded instead of worked on.
//!
//! ```
//! use std::time::Duration;
//! use deadline_core::absolute::{SkewGuard, WallInstant};
//! use deadline_core::expiry::{Freshness, MessageExpiry};
//!
//! // Producer: the request had 2 s left when it queued the message.
//! let sent = WallInstant::from_unix_nanos(1_768_473_045_000_000_000);
//! let header = MessageExpiry::after(sent, Duration::from_secs(2)).encode().unwrap();
//! assert_eq!(header, "2026-01-15T10:30:47.000Z");
//!
//! // Consumer, 1.5 s later: still live, with 450 ms to work (50 ms kept back for clock skew).
//! let expiry = MessageExpiry::decode(header.as_bytes()).unwrap();
//! let now = sent.after(Duration::from_millis(1_500));
//! assert!(matches!(expiry.check(now, &SkewGuard::DEFAULT), Freshness::Live(b) if b.as_millis() == 450));
//!
//! // Consumer, 3 s later: expired, discarded.
//! let late = sent.after(Duration::from_secs(3));
//! assert!(matches!(expiry.check(late, &SkewGuard::DEFAULT), Freshness::Expired { .. }));
//! ```

use std::time::Duration;

use http::HeaderName;

use crate::absolute::{SkewGuard, WallInstant};
use crate::budget::Budget;
use crate::header::{BudgetValue, MalformedBudget};

/// `Deadline-Expires-At`: a suggested message header (or field name) for the expiry text.
pub const EXPIRES_AT_HEADER: HeaderName = HeaderName::from_static("deadline-expires-at");

/// No clamp: the largest budget there is.
const UNCLAMPED: Budget = match Budget::from_millis(u64::MAX) {
    Some(budget) => budget,
    None => Budget::ONE_MS,
};

/// When a message stops being worth working on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct MessageExpiry {
    at: WallInstant,
}

/// What a consumer should do with a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Freshness {
    /// Work on it, within this budget (the skew guard's assumed skew already kept back).
    Live(Budget),
    /// Discard it: it expired this long ago (counting the assumed skew).
    Expired {
        /// How long ago, at least zero.
        by: Duration,
    },
}

impl MessageExpiry {
    /// A message that expires at `at`.
    pub const fn at(at: WallInstant) -> MessageExpiry {
        MessageExpiry { at }
    }

    /// A message made at `wall_now` by work with `remaining` left.
    pub fn after(wall_now: WallInstant, remaining: Duration) -> MessageExpiry {
        MessageExpiry {
            at: wall_now.after(remaining),
        }
    }

    /// The instant it expires.
    pub fn instant(&self) -> WallInstant {
        self.at
    }

    /// The text to carry with the message: RFC 3339 in UTC with milliseconds, truncated (so
    /// a message never lives longer than its maker allowed). `None` outside years 0000–9999.
    pub fn encode(&self) -> Option<String> {
        self.at.to_rfc3339_millis()
    }

    /// Reads the text back; the two spellings of [`WallInstant::parse`] are accepted.
    pub fn decode(raw: &[u8]) -> Result<MessageExpiry, MalformedBudget> {
        WallInstant::parse(raw).map(MessageExpiry::at)
    }

    /// Whether the message is still worth working on at `wall_now`.
    ///
    /// The budget of a live message is not clamped to a request's maximum (an hour by
    /// default): a message can wait on a queue for a day, and its consumer is told all of the
    /// time it really has left.
    pub fn check(&self, wall_now: WallInstant, guard: &SkewGuard) -> Freshness {
        match guard.remaining(self.at, wall_now, UNCLAMPED) {
            BudgetValue::Remaining(budget) => Freshness::Live(budget),
            BudgetValue::Expired => {
                let skew = i128::try_from(guard.assumed_skew().as_nanos()).unwrap_or(i128::MAX);
                let late = wall_now.nanos_since(self.at).saturating_add(skew).max(0);
                Freshness::Expired {
                    by: Duration::from_nanos(u64::try_from(late).unwrap_or(u64::MAX)),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_message_lives_until_its_expiry_less_the_assumed_skew() {
        let made = WallInstant::from_unix_nanos(1_768_473_045_123_000_000);
        let expiry = MessageExpiry::after(made, ms(1_000));
        let guard = SkewGuard::DEFAULT;
        assert_eq!(
            expiry.check(made, &guard),
            Freshness::Live(Budget::from_millis(950).unwrap())
        );
        assert_eq!(
            expiry.check(made.after(ms(949)), &guard),
            Freshness::Live(Budget::ONE_MS)
        );
        assert_eq!(
            expiry.check(made.after(ms(950)), &guard),
            Freshness::Expired { by: ms(0) }
        );
        assert_eq!(
            expiry.check(made.after(ms(1_200)), &guard),
            Freshness::Expired { by: ms(250) }
        );
        assert_eq!(expiry.instant(), made.after(ms(1_000)));
    }

    /// A message queued for a day is told it has a day, not the hour a request may have.
    #[test]
    fn a_long_lived_message_is_not_clamped_to_a_request_maximum() {
        let made = WallInstant::from_unix_nanos(1_768_473_045_000_000_000);
        let day = ms(86_400_000);
        let expiry = MessageExpiry::after(made, day);
        assert_eq!(
            expiry.check(made, &SkewGuard::DEFAULT),
            Freshness::Live(Budget::from_millis(86_400_000 - 50).unwrap())
        );
    }

    #[test]
    fn the_text_round_trips_truncated_to_the_millisecond() {
        let made = WallInstant::from_unix_nanos(1_768_473_045_123_999_999);
        let expiry = MessageExpiry::after(made, ms(0));
        let text = expiry.encode().unwrap();
        assert_eq!(text, "2026-01-15T10:30:45.123Z");
        let back = MessageExpiry::decode(text.as_bytes()).unwrap();
        assert!(back <= expiry, "truncation never extends a message's life");
        assert!(MessageExpiry::decode(b"soon").is_err());
        assert_eq!(
            MessageExpiry::at(WallInstant::from_unix_nanos(i128::MAX)).encode(),
            None
        );
    }
}

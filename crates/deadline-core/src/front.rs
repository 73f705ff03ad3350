//! What stands in front of a hop: a proxy's timeout and the time a request spent there.
//!
//! A proxy in front of a service (nginx, HAProxy, a cloud balancer) has a timeout of its own,
//! configured elsewhere, often shorter than the user's wait. When it fires, the user hears the
//! proxy's bodyless 504 while the service works on for nobody. Two rules let the hop see it:
//!
//! - **The front timeout** ([`with_front`]): told that whatever stands in front gives up after
//!   `d`, the hop's budget is the smaller of the caller's and `d` less a margin; without a budget
//!   header, `d` less the margin *is* the budget. So the hop answers with its own 504 and trace
//!   before the proxy's timer fires, and its calls carry the shorter budget.
//! - **The time spent in front** ([`parse_request_start`], [`time_in_front`]): a proxy can stamp
//!   when it received the request (`X-Request-Start`, nginx's `t=${msec}`); the time since is
//!   taken from the budget, since the proxy's timer and the caller's wait both ran during it.
//!   The stamp is another machine's clock, so it is guarded as absolute deadlines are: a start
//!   in the future by more than the assumed skew, or older than the maximum skew, is ignored
//!   (and the caller counts it). Trusting the header is the application's choice: only a proxy
//!   should set it, and anyone can send it.
//!
//! Pure functions: the wall clock is an argument.

use std::time::Duration;

use http::HeaderName;

use crate::absolute::{SkewGuard, WallInstant};
use crate::budget::Budget;
use crate::header::BudgetValue;

/// `X-Request-Start`: when the proxy in front received the request.
pub const REQUEST_START_HEADER: HeaderName = HeaderName::from_static("x-request-start");

/// The budget of a request at a hop whose front gives up after `front`: the smaller of the
/// caller's budget and `front` less `margin` (at least 1 ms). The flag says whether the front
/// set it (it was the smaller, or the caller sent none): the source a trace names.
///
/// ```
/// use std::time::Duration;
/// use deadline_core::Budget;
/// use deadline_core::front::with_front;
/// use deadline_core::header::BudgetValue;
///
/// let ms = |n| BudgetValue::Remaining(Budget::from_millis(n).unwrap());
/// let front = Duration::from_millis(1_000);
/// let margin = Duration::from_millis(50);
/// assert_eq!(with_front(None, front, margin), (ms(950), true));
/// assert_eq!(with_front(Some(ms(2_000)), front, margin), (ms(950), true));
/// assert_eq!(with_front(Some(ms(400)), front, margin), (ms(400), false));
/// ```
pub fn with_front(
    caller: Option<BudgetValue>,
    front: Duration,
    margin: Duration,
) -> (BudgetValue, bool) {
    let own = Budget::from_duration(front.saturating_sub(margin))
        .or(Budget::from_millis(1))
        .map_or(BudgetValue::Expired, BudgetValue::Remaining);
    match caller {
        Some(caller) if caller.min(own) == caller => (caller, false),
        _ => (own, true),
    }
}

/// A request's budget less `spent` before the hop read it: expired when nothing is left.
pub fn less_time_in_front(budget: BudgetValue, spent: Duration) -> BudgetValue {
    match budget {
        BudgetValue::Expired => BudgetValue::Expired,
        BudgetValue::Remaining(budget) => {
            Budget::from_duration(budget.as_duration().saturating_sub(spent))
                .map_or(BudgetValue::Expired, BudgetValue::Remaining)
        }
    }
}

/// An `X-Request-Start` value: `t=` (optional) then seconds since the Unix epoch with a
/// fraction (`1700000000.123`, nginx's `$msec`), or whole seconds, milliseconds or microseconds
/// since the epoch, told apart by their size (below 10^11 seconds, below 10^14 milliseconds,
/// else microseconds). `None` for anything else (the caller ignores and counts it).
///
/// ```
/// use deadline_core::front::parse_request_start;
///
/// let at = |nanos: i128| Some(deadline_core::absolute::WallInstant::from_unix_nanos(nanos));
/// assert_eq!(parse_request_start(b"t=1700000000.123"), at(1_700_000_000_123_000_000));
/// assert_eq!(parse_request_start(b"1700000000123"), at(1_700_000_000_123_000_000));
/// assert_eq!(parse_request_start(b"t=1700000000123456"), at(1_700_000_000_123_456_000));
/// assert_eq!(parse_request_start(b"soon"), None);
/// ```
pub fn parse_request_start(raw: &[u8]) -> Option<WallInstant> {
    let raw = raw.strip_prefix(b"t=").unwrap_or(raw);
    let digits = |part: &[u8]| !part.is_empty() && part.iter().all(u8::is_ascii_digit);
    let number = |part: &[u8]| {
        part.iter().try_fold(0i128, |n, d| {
            n.checked_mul(10)?.checked_add(i128::from(d - b'0'))
        })
    };
    match raw.iter().position(|b| *b == b'.') {
        Some(dot) => {
            let (whole, fraction) = (&raw[..dot], &raw[dot + 1..]);
            if !digits(whole) || !digits(fraction) || whole.len() > 11 || fraction.len() > 9 {
                return None;
            }
            let scale = 10i128.pow(9 - u32::try_from(fraction.len()).ok()?);
            let nanos = number(whole)? * 1_000_000_000 + number(fraction)? * scale;
            Some(WallInstant::from_unix_nanos(nanos))
        }
        None => {
            if !digits(raw) || raw.len() > 17 {
                return None;
            }
            let value = number(raw)?;
            let nanos = if value < 100_000_000_000 {
                value * 1_000_000_000
            } else if value < 100_000_000_000_000 {
                value * 1_000_000
            } else {
                value * 1_000
            };
            Some(WallInstant::from_unix_nanos(nanos))
        }
    }
}

/// Why an `X-Request-Start` was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartIgnored {
    /// Not a value [`parse_request_start`] reads.
    Malformed,
    /// Later than the hop's clock by more than the assumed skew.
    InTheFuture,
    /// Earlier than the hop's clock by more than the maximum skew.
    TooOld,
}

/// How long a request stamped `start` by the proxy in front spent before a hop that read it at
/// `wall_now`: a start later than now but within the guard's assumed skew counts as no time.
pub fn time_in_front(
    start: WallInstant,
    wall_now: WallInstant,
    guard: &SkewGuard,
) -> Result<Duration, StartIgnored> {
    let elapsed = wall_now.nanos_since(start);
    if elapsed < 0 {
        let ahead = u128::try_from(-elapsed).unwrap_or(u128::MAX);
        return if ahead <= guard.assumed_skew().as_nanos() {
            Ok(Duration::ZERO)
        } else {
            Err(StartIgnored::InTheFuture)
        };
    }
    let elapsed = u128::try_from(elapsed).unwrap_or(u128::MAX);
    if elapsed > guard.max_skew().as_nanos() {
        return Err(StartIgnored::TooOld);
    }
    Ok(Duration::from_nanos(
        u64::try_from(elapsed).unwrap_or(u64::MAX),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> BudgetValue {
        BudgetValue::Remaining(Budget::from_millis(n).expect("a budget"))
    }

    #[test]
    fn the_front_caps_the_budget_and_sets_one_where_none_came() {
        let front = Duration::from_millis(1_000);
        let margin = Duration::from_millis(50);
        assert_eq!(with_front(None, front, margin), (ms(950), true));
        assert_eq!(with_front(Some(ms(951)), front, margin), (ms(950), true));
        assert_eq!(with_front(Some(ms(950)), front, margin), (ms(950), false));
        assert_eq!(
            with_front(Some(BudgetValue::Expired), front, margin),
            (BudgetValue::Expired, false)
        );
        // A margin as long as the front timeout leaves the least budget, not none.
        assert_eq!(with_front(None, margin, front), (ms(1), true));
    }

    #[test]
    fn time_in_front_comes_off_the_budget() {
        assert_eq!(
            less_time_in_front(ms(1_000), Duration::from_millis(300)),
            ms(700)
        );
        assert_eq!(
            less_time_in_front(ms(1_000), Duration::from_millis(1_000)),
            BudgetValue::Expired
        );
        assert_eq!(
            less_time_in_front(BudgetValue::Expired, Duration::ZERO),
            BudgetValue::Expired
        );
    }

    #[test]
    fn request_start_reads_seconds_milliseconds_and_microseconds() {
        let at = |nanos: i128| Some(WallInstant::from_unix_nanos(nanos));
        assert_eq!(
            parse_request_start(b"t=1700000000.5"),
            at(1_700_000_000_500_000_000)
        );
        assert_eq!(
            parse_request_start(b"1700000000.123456789"),
            at(1_700_000_000_123_456_789)
        );
        assert_eq!(
            parse_request_start(b"t=1700000000"),
            at(1_700_000_000_000_000_000)
        );
        assert_eq!(
            parse_request_start(b"1700000000123"),
            at(1_700_000_000_123_000_000)
        );
        assert_eq!(
            parse_request_start(b"1700000000123456"),
            at(1_700_000_000_123_456_000)
        );
        for bad in [
            &b""[..],
            b"t=",
            b"t=.5",
            b"t=5.",
            b"1.2.3",
            b"-1700000000",
            b"1700000000.1234567890",
            b"999999999999999999",
            b"t=1e9",
            b"T=1700000000",
            b" 1700000000",
            b"\xff",
        ] {
            assert_eq!(parse_request_start(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_start_in_the_future_or_too_old_is_ignored() {
        let guard = SkewGuard::new(Duration::from_millis(50), Duration::from_secs(60));
        let now = WallInstant::from_unix_nanos(1_700_000_000_000_000_000);
        let ms_ago = |n: i128| WallInstant::from_unix_nanos(now.unix_nanos() - n * 1_000_000);
        assert_eq!(
            time_in_front(ms_ago(300), now, &guard),
            Ok(Duration::from_millis(300))
        );
        assert_eq!(time_in_front(ms_ago(-50), now, &guard), Ok(Duration::ZERO));
        assert_eq!(
            time_in_front(ms_ago(-51), now, &guard),
            Err(StartIgnored::InTheFuture)
        );
        assert_eq!(
            time_in_front(ms_ago(60_000), now, &guard),
            Ok(Duration::from_secs(60))
        );
        assert_eq!(
            time_in_front(ms_ago(60_001), now, &guard),
            Err(StartIgnored::TooOld)
        );
    }
}

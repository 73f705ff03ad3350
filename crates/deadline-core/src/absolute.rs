//! Absolute deadlines: an instant on the wall clock, read against a skew guard.
//!
//! Some callers send when they give up rather than how long they will wait:
//! `X-Request-Deadline: 2026-01-15T10:30:45.123Z` (RFC 3339 with an offset or `Z`), or the same
//! instant as whole microseconds since the Unix epoch (`1768473045123000`). The two spellings are
//! told apart by syntax: digits alone are microseconds, anything with a `T` is a date-time.
//!
//! # Why the relative budget stays the default
//!
//! An absolute instant means something only if both hosts' wall clocks agree, and wall clocks
//! drift, step and are sometimes simply wrong. A relative budget needs no agreement: each hop
//! turns it into an instant on its own monotonic clock. So an absolute deadline is converted
//! **once**, at arrival, against the wall clock read then (by the caller of this module: the core
//! never reads a clock), and lives on the monotonic clock like every other deadline from then on.
//!
//! # The skew guard
//!
//! ```text
//! remaining = instant − wall_now − assumed_skew      (≤ 0: expired)
//! ```
//!
//! Subtracting the assumed skew (default 50 ms) makes the hop err early: if its clock is off by
//! no more than that, it never works past the caller's true deadline. When a relative budget came
//! with the request too and the two disagree by more than the maximum skew (default 60 s), the
//! clocks are not merely skewed but broken, and the absolute value is ignored: a wrong clock must
//! neither expire a live request nor extend one. [`SkewGuard::reconcile`] says which happened, so
//! the layer can count and log it.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderName;

use crate::budget::Budget;
use crate::header::{BudgetValue, MalformedBudget, MalformedReason, trim};

/// `X-Request-Deadline`: the instant the caller gives up, on the wall clock.
pub const REQUEST_DEADLINE_HEADER: HeaderName = HeaderName::from_static("x-request-deadline");

const NANOS_PER_SEC: i128 = 1_000_000_000;
const SECS_PER_DAY: i128 = 86_400;

/// An instant on the wall clock, in nanoseconds since the Unix epoch (negative before it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WallInstant {
    nanos: i128,
}

impl WallInstant {
    /// The instant `time` stands for.
    pub fn from_system_time(time: SystemTime) -> WallInstant {
        let nanos = match time.duration_since(UNIX_EPOCH) {
            Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
            Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
        };
        WallInstant { nanos }
    }

    /// The instant `nanos` nanoseconds after the Unix epoch (before it when negative).
    pub const fn from_unix_nanos(nanos: i128) -> WallInstant {
        WallInstant { nanos }
    }

    /// Nanoseconds since the Unix epoch.
    pub const fn unix_nanos(self) -> i128 {
        self.nanos
    }

    /// This instant moved `by` later, saturating.
    pub fn after(self, by: Duration) -> WallInstant {
        let by = i128::try_from(by.as_nanos()).unwrap_or(i128::MAX);
        WallInstant {
            nanos: self.nanos.saturating_add(by),
        }
    }

    /// `self − earlier` in nanoseconds, negative when `self` is earlier.
    pub fn nanos_since(self, earlier: WallInstant) -> i128 {
        self.nanos.saturating_sub(earlier.nanos)
    }

    /// Parses either spelling of an absolute deadline: an RFC 3339 date-time with an offset or
    /// `Z` (fractions of a second beyond nanoseconds are truncated), or whole microseconds since
    /// the Unix epoch (1 to 19 digits). Spaces and tabs around the value are ignored.
    pub fn parse(raw: &[u8]) -> Result<WallInstant, MalformedBudget> {
        let value = trim(raw);
        let parsed = if !value.is_empty() && value.iter().all(u8::is_ascii_digit) {
            parse_epoch_micros(value)
        } else {
            parse_rfc3339(value)
        };
        parsed.ok_or_else(|| {
            MalformedBudget::new(
                &REQUEST_DEADLINE_HEADER,
                raw,
                MalformedReason::BadAbsoluteDeadline,
            )
        })
    }

    /// RFC 3339 in UTC with milliseconds, truncated: `2026-01-15T10:30:45.123Z`. `None` for
    /// years outside 0000–9999, which the format cannot spell.
    pub fn to_rfc3339_millis(self) -> Option<String> {
        let secs = self.nanos.div_euclid(NANOS_PER_SEC);
        let millis = self.nanos.rem_euclid(NANOS_PER_SEC) / 1_000_000;
        let days = secs.div_euclid(SECS_PER_DAY);
        let of_day = secs.rem_euclid(SECS_PER_DAY);
        let (year, month, day) = civil_from_days(i64::try_from(days).ok()?);
        if !(0..=9999).contains(&year) {
            return None;
        }
        Some(format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
            of_day / 3600,
            of_day % 3600 / 60,
            of_day % 60
        ))
    }

    /// Whole microseconds since the Unix epoch, truncated; `None` before the epoch.
    pub fn to_epoch_micros(self) -> Option<u64> {
        u64::try_from(self.nanos / 1_000).ok()
    }
}

impl fmt::Display for WallInstant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_rfc3339_millis() {
            Some(text) => f.write_str(&text),
            None => write!(f, "{} ns since the Unix epoch", self.nanos),
        }
    }
}

fn parse_epoch_micros(digits: &[u8]) -> Option<WallInstant> {
    if digits.len() > 19 {
        return None;
    }
    let micros = digits
        .iter()
        .try_fold(0i128, |acc, d| Some(acc * 10 + i128::from(d - b'0')))?;
    Some(WallInstant {
        nanos: micros * 1_000,
    })
}

/// A fixed-width run of ASCII digits as a number.
fn number(bytes: &[u8]) -> Option<u32> {
    if bytes.is_empty() || !bytes.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(
        bytes
            .iter()
            .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0')),
    )
}

/// `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`, `T` and `Z` in either case.
fn parse_rfc3339(v: &[u8]) -> Option<WallInstant> {
    if v.len() < 20 || v.get(4) != Some(&b'-') || v.get(7) != Some(&b'-') {
        return None;
    }
    if !matches!(v[10], b'T' | b't') || v[13] != b':' || v[16] != b':' {
        return None;
    }
    let year = number(&v[0..4])?;
    let month = number(&v[5..7])?;
    let day = number(&v[8..10])?;
    let hour = number(&v[11..13])?;
    let minute = number(&v[14..16])?;
    let second = number(&v[17..19])?;
    if !(1..=12).contains(&month) || day == 0 || day > days_in_month(year, month) {
        return None;
    }
    // 60 is a leap second; it is read as the first second of the next minute.
    if hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let mut rest = &v[19..];
    let mut frac_nanos: i128 = 0;
    if let [b'.', tail @ ..] = rest {
        let len = tail.iter().take_while(|b| b.is_ascii_digit()).count();
        if len == 0 || len > 18 {
            return None;
        }
        let mut scale = 100_000_000i128;
        for d in &tail[..len.min(9)] {
            frac_nanos += i128::from(d - b'0') * scale;
            scale /= 10;
        }
        rest = &tail[len..];
    }
    let offset_secs: i128 = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let hours = number(&[*h1, *h2])?;
            let minutes = number(&[*m1, *m2])?;
            if hours > 23 || minutes > 59 {
                return None;
            }
            let offset = i128::from(hours * 3600 + minutes * 60);
            if *sign == b'+' { offset } else { -offset }
        }
        _ => return None,
    };
    let days = i128::from(days_from_civil(i64::from(year), month, day));
    let secs = days * SECS_PER_DAY + i128::from(hour * 3600 + minute * 60 + second) - offset_secs;
    Some(WallInstant {
        nanos: secs * NANOS_PER_SEC + frac_nanos,
    })
}

fn is_leap(year: u32) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (eras of 400 years, March-based years).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y.rem_euclid(400);
    let march_month = i64::from((month + 9) % 12);
    let day_of_year = (153 * march_month + 2) / 5 + i64::from(day) - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day counted from 1970-01-01: the inverse of [`days_from_civil`].
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let march_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * march_month + 2) / 5 + 1;
    let month = if march_month < 10 {
        march_month + 3
    } else {
        march_month - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    // In range by construction: 1..=12 and 1..=31.
    let small = |n: i64| u32::try_from(n).unwrap_or(1);
    (year, small(month), small(day))
}

/// The skew guard: how far the hop's wall clock may be trusted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SkewGuard {
    assumed_skew: Duration,
    max_skew: Duration,
}

/// What [`SkewGuard::reconcile`] did with the absolute deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbsoluteUse {
    /// It set the budget, alone or as the tighter of the two.
    Used,
    /// A relative budget was tighter, and the two agreed within the maximum skew.
    Looser,
    /// The two disagreed by more than the maximum skew: the absolute one was ignored.
    Ignored {
        /// How far apart they were (absolute minus relative), in whole ms, negative when the
        /// absolute deadline was the earlier.
        disagreement_ms: i64,
    },
}

/// The budget a request gets from an absolute deadline and an optional relative budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reconciled {
    /// The budget the request runs with.
    pub value: BudgetValue,
    /// What became of the absolute deadline.
    pub absolute: AbsoluteUse,
}

impl Default for SkewGuard {
    fn default() -> SkewGuard {
        SkewGuard::DEFAULT
    }
}

impl SkewGuard {
    /// 50 ms assumed skew, 60 s maximum.
    pub const DEFAULT: SkewGuard = SkewGuard {
        assumed_skew: Duration::from_millis(50),
        max_skew: Duration::from_secs(60),
    };

    /// A guard assuming clocks within `assumed_skew` of each other, and broken beyond
    /// `max_skew` (raised to `assumed_skew` if below it).
    pub fn new(assumed_skew: Duration, max_skew: Duration) -> SkewGuard {
        SkewGuard {
            assumed_skew,
            max_skew: max_skew.max(assumed_skew),
        }
    }

    /// The skew subtracted from every absolute deadline.
    pub fn assumed_skew(&self) -> Duration {
        self.assumed_skew
    }

    /// The disagreement with a relative budget beyond which the absolute one is ignored.
    pub fn max_skew(&self) -> Duration {
        self.max_skew
    }

    /// The budget `deadline` leaves at `wall_now`: `deadline − wall_now − assumed_skew`,
    /// truncated to whole ms and clamped to `max`; nothing left is expired.
    pub fn remaining(
        &self,
        deadline: WallInstant,
        wall_now: WallInstant,
        max: Budget,
    ) -> BudgetValue {
        let skew = i128::try_from(self.assumed_skew.as_nanos()).unwrap_or(i128::MAX);
        let nanos = deadline.nanos_since(wall_now).saturating_sub(skew);
        let millis = u64::try_from(nanos.max(0) / 1_000_000).unwrap_or(u64::MAX);
        match Budget::from_millis(millis) {
            None => BudgetValue::Expired,
            Some(budget) => BudgetValue::Remaining(budget.min(max)),
        }
    }

    /// The budget of a request that carried the absolute `deadline` and perhaps a `relative`
    /// budget too: the tighter of the two, unless they disagree by more than the maximum skew,
    /// when the relative one alone counts (a broken clock must neither expire nor extend work).
    ///
    /// `relative` is expected clamped to the same `max`; the absolute deadline is clamped to it
    /// before the two are compared, so budgets beyond the maximum never count as disagreeing.
    pub fn reconcile(
        &self,
        deadline: WallInstant,
        wall_now: WallInstant,
        relative: Option<BudgetValue>,
        max: Budget,
    ) -> Reconciled {
        let absolute = self.remaining(deadline, wall_now, max);
        let Some(relative) = relative else {
            return Reconciled {
                value: absolute,
                absolute: AbsoluteUse::Used,
            };
        };
        let relative_nanos = match relative {
            BudgetValue::Expired => 0,
            BudgetValue::Remaining(budget) => i128::from(budget.as_millis()) * 1_000_000,
        };
        // Compared before the skew is subtracted and before anything is clamped at zero, so a
        // clock that is minutes ahead shows as minutes of disagreement, not as "expired". But
        // clamped to `max` like the relative budget was: a caller with two hours left sends a
        // relative budget the receiver reads as one (the maximum), and its absolute deadline
        // two hours away agrees with that, not disagrees by an hour.
        let max_nanos = i128::from(max.as_millis()) * 1_000_000;
        let disagreement = deadline.nanos_since(wall_now).min(max_nanos) - relative_nanos;
        let max_skew = i128::try_from(self.max_skew.as_nanos()).unwrap_or(i128::MAX);
        if disagreement.abs() > max_skew {
            return Reconciled {
                value: relative,
                absolute: AbsoluteUse::Ignored {
                    disagreement_ms: i64::try_from(disagreement / 1_000_000)
                        .unwrap_or(if disagreement < 0 { i64::MIN } else { i64::MAX }),
                },
            };
        }
        let value = absolute.min(relative);
        Reconciled {
            value,
            absolute: if value == absolute {
                AbsoluteUse::Used
            } else {
                AbsoluteUse::Looser
            },
        }
    }
}

#[cfg(test)]
mod tests;

//! The `Deadline-Budget-Ms` header: parsing what a caller sent and formatting what to send on.
//!
//! # Three outcomes, never two
//!
//! Reading the header has three outcomes, and the types keep them apart:
//!
//! | header | result |
//! |---|---|
//! | absent | `Ok(None)`: no deadline, as if the library were not there |
//! | `1` … max (larger values clamp to max) | `Ok(Some(BudgetValue::Remaining(budget)))` |
//! | `0`, `-0`, `-20`, any minus sign and digits | `Ok(Some(BudgetValue::Expired))`: answer 504 at once |
//! | anything else | `Err(MalformedBudget)`: answer 400 at once |
//!
//! An expired budget is a *value*, not an error and not a sentinel number, so it can never be
//! confused with "absent". The reference system once returned `-1` for both, and an expired
//! request then ran with no deadline at all.
//!
//! Several values (repeated header lines, or a comma-separated list) must all be valid, and the
//! smallest wins. Spaces and tabs around each value are ignored. Nothing else is lenient:
//! `+5`, `1.5`, `1e3`, `0x10`, `12ms` and `5 5` are malformed, because a budget that was
//! misread as "absent" would run without a deadline.
//!
//! # More dialects
//!
//! A [`BudgetSource`] reads one dialect from the request headers. [`DeadlineBudgetMs`] is this
//! project's; [`GrpcTimeout`] reads gRPC's `grpc-timeout`, so a service behind a gRPC-speaking
//! proxy gets the same treatment. [`read_tightest`] consults several sources and the tightest
//! budget wins; a malformed value in any of them is an error.

use std::fmt;
use std::time::Duration;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::budget::{Budget, Deadline};

/// `Deadline-Budget-Ms`: whole milliseconds the caller is still prepared to wait.
pub const BUDGET_HEADER: HeaderName = HeaderName::from_static("deadline-budget-ms");

/// gRPC's `grpc-timeout` header, read by [`GrpcTimeout`].
pub const GRPC_TIMEOUT_HEADER: HeaderName = HeaderName::from_static("grpc-timeout");

/// How many bytes of an offending value an error message quotes.
const QUOTE_LIMIT: usize = 64;

/// A budget a caller sent: time left, or already nothing left.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BudgetValue {
    /// Zero or negative: the caller had already run out when it sent the request.
    Expired,
    /// Time left, already clamped to the receiver's maximum.
    Remaining(Budget),
}

impl BudgetValue {
    /// The deadline this value sets for a request that arrived at `arrival`. An expired value
    /// sets a deadline at the arrival itself, which has already passed.
    pub fn deadline(self, arrival: std::time::Instant) -> Deadline {
        Deadline::after_duration(arrival, self.remaining())
    }

    /// The time this value leaves: zero for an expired one.
    pub fn remaining(self) -> Duration {
        match self {
            BudgetValue::Expired => Duration::ZERO,
            BudgetValue::Remaining(budget) => budget.as_duration(),
        }
    }

    /// The smaller of two values; expired is the smallest of all.
    pub fn min(self, other: BudgetValue) -> BudgetValue {
        match (self, other) {
            (BudgetValue::Remaining(a), BudgetValue::Remaining(b)) => {
                BudgetValue::Remaining(a.min(b))
            }
            _ => BudgetValue::Expired,
        }
    }
}

/// Why a budget header value was rejected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MalformedReason {
    /// The value (or one element of a list) was empty.
    Empty,
    /// A leading `+`: accepted by Rust's integer parser, rejected here so that every sender and
    /// receiver agrees on one spelling.
    PlusSign,
    /// Bytes outside ASCII, including digits of other scripts such as `٣`.
    NotAscii,
    /// Anything else that is not an optional minus sign followed by ASCII digits.
    NotAnInteger,
    /// A `grpc-timeout` value that is not 1 to 8 digits followed by a unit (`H M S m u n`).
    BadGrpcTimeout,
    /// More digits than the dialect allows (Connect's `connect-timeout-ms` takes at most 10).
    TooManyDigits,
    /// An absolute deadline that is neither an RFC 3339 date-time with an offset nor whole
    /// microseconds since the Unix epoch (see [`crate::absolute`]).
    BadAbsoluteDeadline,
}

impl fmt::Display for MalformedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MalformedReason::Empty => "the value is empty",
            MalformedReason::PlusSign => "a leading '+' is not allowed",
            MalformedReason::NotAscii => "the value has non-ASCII bytes",
            MalformedReason::NotAnInteger => "the value is not a whole number of milliseconds",
            MalformedReason::BadGrpcTimeout => {
                "the value is not 1 to 8 digits and a unit (H, M, S, m, u, n)"
            }
            MalformedReason::TooManyDigits => "the value has more digits than the header allows",
            MalformedReason::BadAbsoluteDeadline => {
                "the value is neither an RFC 3339 date-time with an offset nor whole microseconds \
                 since the Unix epoch"
            }
        })
    }
}

/// A budget header that could not be read. The request should be answered with 400, and its
/// handler must not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedBudget {
    header: HeaderName,
    value: String,
    reason: MalformedReason,
}

impl MalformedBudget {
    pub(crate) fn new(header: &HeaderName, raw: &[u8], reason: MalformedReason) -> MalformedBudget {
        MalformedBudget {
            header: header.clone(),
            value: escape(raw, QUOTE_LIMIT),
            reason,
        }
    }

    /// The header that held the value.
    pub fn header(&self) -> &HeaderName {
        &self.header
    }

    /// The offending value, escaped to printable ASCII and truncated.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Why it was rejected.
    pub fn reason(&self) -> MalformedReason {
        self.reason
    }
}

impl fmt::Display for MalformedBudget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid {} value \"{}\": {}",
            self.header, self.value, self.reason
        )
    }
}

impl std::error::Error for MalformedBudget {}

/// Escapes `raw` to printable ASCII (`\xNN` for anything else, `\"` and `\\` escaped), stopping
/// after `limit` input bytes with a trailing `...`.
fn escape(raw: &[u8], limit: usize) -> String {
    let mut out = String::with_capacity(raw.len().min(limit) + 3);
    for &b in raw.iter().take(limit) {
        match b {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            0x20..=0x7e => out.push(char::from(b)),
            _ => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    if raw.len() > limit {
        out.push_str("...");
    }
    out
}

/// `bytes` without leading and trailing spaces and tabs (HTTP's optional whitespace), the one
/// trim every codec here uses.
pub(crate) fn trim(bytes: &[u8]) -> &[u8] {
    let is_ws = |b: &u8| *b == b' ' || *b == b'\t';
    let start = bytes.iter().position(|b| !is_ws(b)).unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !is_ws(b))
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Parses one `Deadline-Budget-Ms` element (already split from any list, not yet trimmed).
fn parse_element(raw: &[u8], max: Budget) -> Result<BudgetValue, MalformedReason> {
    let value = trim(raw);
    let (negative, digits) = match value {
        [] => return Err(MalformedReason::Empty),
        [b'-', rest @ ..] => (true, rest),
        [b'+', ..] => return Err(MalformedReason::PlusSign),
        _ => (false, value),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(if value.is_ascii() {
            MalformedReason::NotAnInteger
        } else {
            MalformedReason::NotAscii
        });
    }
    if negative {
        return Ok(BudgetValue::Expired);
    }
    // Accumulate with saturation: a value with a thousand digits clamps like any other large one.
    let ms = digits.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Ok(budget_value(ms, max))
}

/// A whole number of milliseconds as a budget: 0 is expired, more is clamped to `max`.
fn budget_value(ms: u64, max: Budget) -> BudgetValue {
    match Budget::from_millis(ms) {
        None => BudgetValue::Expired,
        Some(budget) => BudgetValue::Remaining(budget.min(max)),
    }
}

/// Parses one `Deadline-Budget-Ms` header line, which may be a comma-separated list: every
/// element must be valid and the smallest wins. Values above `max` are clamped to it.
pub fn parse_budget(raw: &[u8], max: Budget) -> Result<BudgetValue, MalformedBudget> {
    // Nearly every line is one plain number: read in one pass, it needs none of the list's
    // splitting, trimming and checks, which give the same value for it.
    match plain_millis(raw) {
        Some(ms) => Ok(budget_value(ms, max)),
        None => parse_list(raw, max),
    }
}

/// `raw` as a number of milliseconds when it is only 1 to 19 ASCII digits (so it cannot
/// overflow), `None` for anything else (a list, spaces, a sign, a longer number).
fn plain_millis(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 19 {
        return None;
    }
    let mut ms = 0u64;
    for &b in raw {
        let digit = b.wrapping_sub(b'0');
        if digit > 9 {
            return None;
        }
        ms = ms * 10 + u64::from(digit);
    }
    Some(ms)
}

/// [`parse_budget`] by the grammar's general path: split the list, trim and check each element.
fn parse_list(raw: &[u8], max: Budget) -> Result<BudgetValue, MalformedBudget> {
    raw.split(|b| *b == b',')
        .map(|element| parse_element(element, max))
        .try_fold(None, |smallest: Option<BudgetValue>, value| {
            let value = value?;
            Ok(Some(smallest.map_or(value, |s| s.min(value))))
        })
        .map_err(|reason| MalformedBudget::new(&BUDGET_HEADER, raw, reason))
        .map(|value| value.unwrap_or(BudgetValue::Expired))
}

/// Reads every `Deadline-Budget-Ms` line in `headers`: `Ok(None)` when there is none, the
/// smallest value when all are valid, an error naming the first bad one otherwise.
pub fn read_budget(
    headers: &HeaderMap,
    max: Budget,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    read_lines(headers, &BUDGET_HEADER, |raw| parse_budget(raw, max))
}

/// Adds one `Deadline-Budget-Ms` line, `raw`, to the lines read before it (`smallest`, their
/// value so far): the smaller of the two, or the line's error. [`read_budget`] is this over
/// every line of the header; a reader that meets a request's lines one by one (a single pass
/// over all its headers) calls it for each budget line, and stops at the first error.
pub fn add_budget_line(
    smallest: Option<BudgetValue>,
    raw: &[u8],
    max: Budget,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    add_line(smallest, raw, |raw| parse_budget(raw, max))
}

/// One more line of a budget header, read with `parse`, added to the value of the lines before
/// it: the smaller of the two, or the line's error.
fn add_line(
    smallest: Option<BudgetValue>,
    raw: &[u8],
    parse: impl Fn(&[u8]) -> Result<BudgetValue, MalformedBudget>,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    let value = parse(raw)?;
    Ok(Some(smallest.map_or(value, |s| s.min(value))))
}

/// Reads every line of header `name` with `parse`: `Ok(None)` when there is none, the smallest
/// value when all are valid, the first error otherwise.
pub(crate) fn read_lines(
    headers: &HeaderMap,
    name: &HeaderName,
    parse: impl Fn(&[u8]) -> Result<BudgetValue, MalformedBudget>,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    headers
        .get_all(name)
        .iter()
        .try_fold(None, |smallest, line| {
            add_line(smallest, line.as_bytes(), &parse)
        })
}

/// The header value telling a callee it has `remaining`: truncated to whole milliseconds, never
/// rounded up. `None` when less than 1 ms is left: such an attempt must not be sent at all, since
/// `0` would read as expired and no header would read as "no deadline".
pub fn format_budget(remaining: Duration) -> Option<HeaderValue> {
    Budget::from_duration(remaining).map(Budget::to_header_value)
}

/// Tells a callee `budget` in `headers`: `Deadline-Budget-Ms` set to it (`insert` replaces every
/// value the request arrived with, never a second line), or removed when there is none, so a
/// copied request never passes on its caller's budget.
pub fn set_budget(headers: &mut HeaderMap, budget: Option<Budget>) {
    match budget {
        Some(budget) => {
            headers.insert(BUDGET_HEADER, budget.to_header_value());
        }
        None => {
            headers.remove(BUDGET_HEADER);
        }
    }
}

impl Budget {
    /// This budget as a `Deadline-Budget-Ms` value. Written on the stack ([`Decimal`]) and
    /// copied once: it runs before every outbound attempt, and `HeaderValue::from(u64)` formats
    /// into a growable buffer that then costs a second allocation.
    ///
    /// [`Decimal`]: crate::decimal::Decimal
    pub fn to_header_value(self) -> HeaderValue {
        // ASCII digits only: always a valid value, so the fallback is never taken.
        HeaderValue::from_bytes(crate::decimal::Decimal::new(self.as_millis()).as_bytes())
            .unwrap_or_else(|_| HeaderValue::from(self.as_millis()))
    }
}

/// One dialect of "how long the caller will wait", read from request headers.
pub trait BudgetSource: fmt::Debug + Send + Sync {
    /// Reads this source's budget: `Ok(None)` when its header is absent.
    fn read(&self, headers: &HeaderMap) -> Result<Option<BudgetValue>, MalformedBudget>;
}

/// The `Deadline-Budget-Ms` dialect, clamped to a maximum.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeadlineBudgetMs {
    /// Budgets above this are clamped to it.
    pub max: Budget,
}

impl Default for DeadlineBudgetMs {
    fn default() -> Self {
        DeadlineBudgetMs {
            max: Budget::DEFAULT_MAX,
        }
    }
}

impl BudgetSource for DeadlineBudgetMs {
    fn read(&self, headers: &HeaderMap) -> Result<Option<BudgetValue>, MalformedBudget> {
        read_budget(headers, self.max)
    }
}

/// gRPC's `grpc-timeout` (`1*8DIGIT unit`, units `H M S m u n`), truncated to whole
/// milliseconds and clamped to a maximum. Under 1 ms reads as expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrpcTimeout {
    /// Budgets above this are clamped to it.
    pub max: Budget,
}

impl Default for GrpcTimeout {
    fn default() -> Self {
        GrpcTimeout {
            max: Budget::DEFAULT_MAX,
        }
    }
}

impl GrpcTimeout {
    /// Parses one `grpc-timeout` value.
    pub fn parse(&self, raw: &[u8]) -> Result<BudgetValue, MalformedBudget> {
        let bad =
            || MalformedBudget::new(&GRPC_TIMEOUT_HEADER, raw, MalformedReason::BadGrpcTimeout);
        let value = trim(raw);
        let (unit, digits) = value.split_last().ok_or_else(bad)?;
        if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(bad());
        }
        let n = digits
            .iter()
            .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
        let duration = match unit {
            b'H' => Duration::from_secs(n.saturating_mul(3600)),
            b'M' => Duration::from_secs(n.saturating_mul(60)),
            b'S' => Duration::from_secs(n),
            b'm' => Duration::from_millis(n),
            b'u' => Duration::from_micros(n),
            b'n' => Duration::from_nanos(n),
            _ => return Err(bad()),
        };
        Ok(match Budget::from_duration(duration) {
            None => BudgetValue::Expired,
            Some(budget) => BudgetValue::Remaining(budget.min(self.max)),
        })
    }
}

impl BudgetSource for GrpcTimeout {
    fn read(&self, headers: &HeaderMap) -> Result<Option<BudgetValue>, MalformedBudget> {
        read_lines(headers, &GRPC_TIMEOUT_HEADER, |raw| self.parse(raw))
    }
}

/// Reads every source; the tightest budget wins. A malformed value in any source is an error,
/// so a request never runs with a looser deadline than one of its headers asked for.
pub fn read_tightest(
    sources: &[&dyn BudgetSource],
    headers: &HeaderMap,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    let mut tightest: Option<BudgetValue> = None;
    for source in sources {
        if let Some(value) = source.read(headers)? {
            tightest = Some(tightest.map_or(value, |t| t.min(value)));
        }
    }
    Ok(tightest)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use BudgetValue::{Expired, Remaining};

    proptest! {
        /// The one-pass reading of a plain number gives what the general path gives, for any
        /// line: digits, spaces, signs, lists, other bytes, numbers too long for it.
        #[test]
        fn the_plain_number_path_agrees_with_the_general_one(
            raw in prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..24),
                "[0-9]{0,24}".prop_map(String::into_bytes),
                "[0-9 ,+-]{0,12}".prop_map(String::into_bytes),
            ],
            max_ms in prop_oneof![1u64..5_000, 1u64..=u64::MAX],
        ) {
            let max = Budget::from_millis(max_ms).unwrap();
            prop_assert_eq!(parse_budget(&raw, max), parse_list(&raw, max));
        }
    }

    /// Plain numbers at the edges of the one-pass reading: 19 digits is the longest it takes,
    /// and it clamps, expires and refuses as the grammar says.
    #[test]
    fn plain_numbers_at_the_edges() {
        assert_eq!(
            plain_millis(b"9999999999999999999"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(plain_millis(b"18446744073709551615"), None);
        assert_eq!(plain_millis(b""), None);
        assert_eq!(plain_millis(b"1950"), Some(1950));
        assert_eq!(parse_budget(b"0", MAX), Ok(Expired));
        assert_eq!(
            parse_budget(b"9999999999999999999", MAX),
            Ok(Remaining(MAX))
        );
        assert_eq!(parse_budget(b"1950", MAX), Ok(ms(1950)));
        assert!(parse_budget(b"19a0", MAX).is_err());
    }

    const MAX: Budget = Budget::DEFAULT_MAX;

    fn ms(n: u64) -> BudgetValue {
        Remaining(Budget::from_millis(n).unwrap())
    }

    fn headers(lines: &[&[u8]]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for line in lines {
            map.append(BUDGET_HEADER, HeaderValue::from_bytes(line).unwrap());
        }
        map
    }

    fn read(lines: &[&[u8]]) -> Result<Option<BudgetValue>, MalformedBudget> {
        read_budget(&headers(lines), MAX)
    }

    /// The header's rules, row by row: absent, budgets in range, spent, malformed.
    #[test]
    fn absent_is_no_deadline() {
        assert_eq!(read(&[]), Ok(None));
    }

    #[test]
    fn in_range_values_are_budgets() {
        assert_eq!(read(&[b"1"]), Ok(Some(ms(1))));
        assert_eq!(read(&[b"1950"]), Ok(Some(ms(1950))));
        assert_eq!(read(&[b"3600000"]), Ok(Some(ms(3_600_000))));
        assert_eq!(
            read(&[b" \t600\t "]),
            Ok(Some(ms(600))),
            "spaces and tabs are trimmed"
        );
        assert_eq!(
            read(&[b"007"]),
            Ok(Some(ms(7))),
            "leading zeros are still digits"
        );
    }

    #[test]
    fn values_above_the_max_clamp_never_error() {
        assert_eq!(read(&[b"3600001"]), Ok(Some(ms(3_600_000))));
        assert_eq!(read(&[b"18446744073709551615"]), Ok(Some(ms(3_600_000))));
        assert_eq!(
            read(&[b"99999999999999999999999999999999999999"]),
            Ok(Some(ms(3_600_000)))
        );
        let small_max = Budget::from_millis(5_000).unwrap();
        assert_eq!(
            read_budget(&headers(&[b"60000"]), small_max),
            Ok(Some(ms(5_000)))
        );
    }

    #[test]
    fn zero_and_negative_are_expired() {
        for raw in [
            &b"0"[..],
            b"-0",
            b"-20",
            b"-99999999999999999999",
            b"000",
            b" -1 ",
        ] {
            assert_eq!(
                read(&[raw]),
                Ok(Some(Expired)),
                "{}",
                String::from_utf8_lossy(raw)
            );
        }
    }

    #[test]
    fn everything_else_is_malformed_with_a_reason() {
        let cases: &[(&[u8], MalformedReason)] = &[
            (b"", MalformedReason::Empty),
            (b"  ", MalformedReason::Empty),
            (b"1.5", MalformedReason::NotAnInteger),
            (b"1e3", MalformedReason::NotAnInteger),
            (b"+5", MalformedReason::PlusSign),
            (b"0x10", MalformedReason::NotAnInteger),
            (b"12ms", MalformedReason::NotAnInteger),
            (b"5 5", MalformedReason::NotAnInteger),
            (b"-", MalformedReason::NotAnInteger),
            (b"--5", MalformedReason::NotAnInteger),
            ("٣".as_bytes(), MalformedReason::NotAscii),
            (b"\xff\xfe", MalformedReason::NotAscii),
        ];
        for (raw, reason) in cases {
            let err = read(&[raw]).unwrap_err();
            assert_eq!(err.reason(), *reason, "{raw:?}");
            assert_eq!(err.header(), BUDGET_HEADER);
        }
    }

    #[test]
    fn error_names_the_header_and_escapes_the_value() {
        let err = read(&[b"12\"ms\xff"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid deadline-budget-ms value \"12\\\"ms\\xff\": the value has non-ASCII bytes"
        );
        let long = vec![b'x'; 500];
        let err = read(&[&long]).unwrap_err();
        assert_eq!(
            err.value().len(),
            QUOTE_LIMIT + 3,
            "quoted values are truncated"
        );
    }

    #[test]
    fn several_values_smallest_wins_and_all_must_be_valid() {
        assert_eq!(read(&[b"900, 300 ,600"]), Ok(Some(ms(300))));
        assert_eq!(read(&[b"900", b"300"]), Ok(Some(ms(300))));
        assert_eq!(read(&[b"900", b"-1"]), Ok(Some(Expired)));
        assert_eq!(read(&[b"900, 0"]), Ok(Some(Expired)));
        assert_eq!(
            read(&[b"900", b"abc"]).unwrap_err().reason(),
            MalformedReason::NotAnInteger
        );
        assert_eq!(
            read(&[b"900,"]).unwrap_err().reason(),
            MalformedReason::Empty
        );
        assert_eq!(
            read(&[b"-5", b"x"]).unwrap_err().reason(),
            MalformedReason::NotAnInteger
        );
    }

    /// Regression: the reference system's parser returned -1 for both a missing header and
    /// "-20", so an expired request ran with no deadline at all. Here the outcomes are different
    /// types, and every negative spelling stays distinct from absent.
    #[test]
    fn regression_absent_and_negative_are_never_confused() {
        let absent = read(&[]);
        for raw in [&b"-1"[..], b"-20", b"-0", b"0", b"-99999999999999999999"] {
            let negative = read(&[raw]);
            assert_ne!(absent, negative);
            assert_eq!(negative, Ok(Some(Expired)));
        }
        assert_eq!(absent, Ok(None));
    }

    #[test]
    fn format_truncates_and_never_emits_zero() {
        assert_eq!(
            format_budget(Duration::from_micros(950_999)).unwrap(),
            "950"
        );
        assert_eq!(format_budget(Duration::from_micros(1_000)).unwrap(), "1");
        assert_eq!(format_budget(Duration::from_micros(999)), None);
        assert_eq!(format_budget(Duration::ZERO), None);
    }

    #[test]
    fn header_values_are_the_decimal_digits() {
        for n in [1u64, 9, 10, 950, 1950, 3_600_000, u64::MAX] {
            let budget = Budget::from_millis(n).unwrap();
            assert_eq!(budget.to_header_value(), HeaderValue::from(n), "{n}");
        }
    }

    #[test]
    fn formatted_budgets_parse_back() {
        for n in [1u64, 9, 10, 950, 3_600_000] {
            let v = format_budget(Duration::from_millis(n)).unwrap();
            assert_eq!(parse_budget(v.as_bytes(), MAX), Ok(ms(n)));
        }
    }

    #[test]
    fn grpc_timeout_dialect() {
        let g = GrpcTimeout::default();
        assert_eq!(g.parse(b"1S"), Ok(ms(1000)));
        assert_eq!(g.parse(b"250m"), Ok(ms(250)));
        assert_eq!(g.parse(b"1500000u"), Ok(ms(1500)));
        assert_eq!(g.parse(b"999u"), Ok(Expired));
        assert_eq!(g.parse(b"99999999H"), Ok(ms(3_600_000)));
        for bad in [&b""[..], b"S", b"123456789S", b"5s", b"-5S", b"5"] {
            assert_eq!(
                g.parse(bad).unwrap_err().reason(),
                MalformedReason::BadGrpcTimeout
            );
        }
    }

    #[test]
    fn tightest_source_wins() {
        let mut map = headers(&[b"900"]);
        map.insert(GRPC_TIMEOUT_HEADER, HeaderValue::from_static("300m"));
        let ours = DeadlineBudgetMs::default();
        let grpc = GrpcTimeout::default();
        assert_eq!(read_tightest(&[&ours, &grpc], &map), Ok(Some(ms(300))));
        assert_eq!(read_tightest(&[&ours], &map), Ok(Some(ms(900))));
        assert_eq!(read_tightest(&[&ours, &grpc], &HeaderMap::new()), Ok(None));
        map.insert(GRPC_TIMEOUT_HEADER, HeaderValue::from_static("soon"));
        assert!(read_tightest(&[&ours, &grpc], &map).is_err());
    }
}

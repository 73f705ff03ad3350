//! Other dialects of "how long the caller will wait": Connect's and Envoy's headers in, every
//! supported header out.
//!
//! A service rarely chooses what its callers speak. Connect clients send `connect-timeout-ms`,
//! a service behind Envoy gets `x-envoy-expected-rq-timeout-ms`, gRPC sends `grpc-timeout`, and
//! some systems send an absolute `X-Request-Deadline`. Inbound, each is a
//! [`BudgetSource`] a service switches on, the tightest valid one
//! winning ([`read_tightest`](crate::header::read_tightest)). Outbound, [`Dialect::encode`]
//! writes any of them **from the one callee budget the planner chose**, so the headers a request
//! carries can never disagree beyond each format's truncation, and a service that accepts one
//! dialect and sends another translates between them.
//!
//! | dialect | inbound | outbound |
//! |---|---|---|
//! | `Deadline-Budget-Ms` | [`DeadlineBudgetMs`](crate::header::DeadlineBudgetMs) | whole ms |
//! | `grpc-timeout` | [`GrpcTimeout`](crate::header::GrpcTimeout) | the finest unit that fits 8 digits, truncated |
//! | `connect-timeout-ms` | [`ConnectTimeoutMs`]: 1–10 digits; `0` is expired | whole ms |
//! | `x-envoy-expected-rq-timeout-ms` | [`EnvoyExpectedTimeoutMs`]: digits; `0` is no deadline | — |
//! | `x-envoy-upstream-rq-timeout-ms` | — | whole ms, never `0` (Envoy reads `0` as "no timeout") |
//! | `X-Request-Deadline` | [`absolute`](crate::absolute), with its skew guard | wall now + budget, RFC 3339 with ms or epoch µs |

use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName, HeaderValue};

use crate::absolute::{REQUEST_DEADLINE_HEADER, WallInstant};
use crate::budget::Budget;
use crate::decimal::Decimal;
use crate::header::{
    BUDGET_HEADER, BudgetSource, BudgetValue, GRPC_TIMEOUT_HEADER, MalformedBudget,
    MalformedReason, read_lines, trim,
};

/// Connect's `connect-timeout-ms`.
pub const CONNECT_TIMEOUT_HEADER: HeaderName = HeaderName::from_static("connect-timeout-ms");
/// Envoy's `x-envoy-expected-rq-timeout-ms`: the time the caller expects the request to take.
pub const ENVOY_EXPECTED_TIMEOUT_HEADER: HeaderName =
    HeaderName::from_static("x-envoy-expected-rq-timeout-ms");
/// Envoy's `x-envoy-upstream-rq-timeout-ms`: the timeout Envoy applies to the request it routes.
pub const ENVOY_UPSTREAM_TIMEOUT_HEADER: HeaderName =
    HeaderName::from_static("x-envoy-upstream-rq-timeout-ms");

/// The largest `connect-timeout-ms`: ten digits.
const CONNECT_MAX_MS: u64 = 9_999_999_999;

/// Parses whole milliseconds of at most `max_digits` digits, clamped to `max`; `zero` says what
/// `0` means in this dialect.
fn parse_ms(
    header: &HeaderName,
    raw: &[u8],
    max_digits: usize,
    max: Budget,
) -> Result<Option<BudgetValue>, MalformedBudget> {
    let value = trim(raw);
    let bad = |reason| MalformedBudget::new(header, raw, reason);
    if value.is_empty() {
        return Err(bad(MalformedReason::Empty));
    }
    if !value.iter().all(u8::is_ascii_digit) {
        return Err(bad(if !value.is_ascii() {
            MalformedReason::NotAscii
        } else if value[0] == b'+' {
            MalformedReason::PlusSign
        } else {
            MalformedReason::NotAnInteger
        }));
    }
    if value.len() > max_digits {
        return Err(bad(MalformedReason::TooManyDigits));
    }
    let ms = value.iter().fold(0u64, |acc, d| {
        acc.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Ok(Budget::from_millis(ms).map(|budget| BudgetValue::Remaining(budget.min(max))))
}

/// Connect's `connect-timeout-ms` (1 to 10 digits of ms); `0` is already expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectTimeoutMs {
    /// Budgets above this are clamped to it.
    pub max: Budget,
}

impl Default for ConnectTimeoutMs {
    fn default() -> Self {
        ConnectTimeoutMs {
            max: Budget::DEFAULT_MAX,
        }
    }
}

impl ConnectTimeoutMs {
    /// Parses one value.
    pub fn parse(&self, raw: &[u8]) -> Result<BudgetValue, MalformedBudget> {
        parse_ms(&CONNECT_TIMEOUT_HEADER, raw, 10, self.max)
            .map(|value| value.unwrap_or(BudgetValue::Expired))
    }
}

impl BudgetSource for ConnectTimeoutMs {
    fn read(&self, headers: &HeaderMap) -> Result<Option<BudgetValue>, MalformedBudget> {
        read_lines(headers, &CONNECT_TIMEOUT_HEADER, |raw| self.parse(raw))
    }
}

/// Envoy's `x-envoy-expected-rq-timeout-ms` (digits of ms). Envoy writes `0` for a route with
/// its timeout disabled, so `0` reads as no deadline, never as expired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EnvoyExpectedTimeoutMs {
    /// Budgets above this are clamped to it.
    pub max: Budget,
}

impl Default for EnvoyExpectedTimeoutMs {
    fn default() -> Self {
        EnvoyExpectedTimeoutMs {
            max: Budget::DEFAULT_MAX,
        }
    }
}

impl EnvoyExpectedTimeoutMs {
    /// Parses one value: `Ok(None)` for `0`.
    pub fn parse(&self, raw: &[u8]) -> Result<Option<BudgetValue>, MalformedBudget> {
        // Any number of digits: a long value clamps like Deadline-Budget-Ms does.
        parse_ms(&ENVOY_EXPECTED_TIMEOUT_HEADER, raw, usize::MAX, self.max)
    }
}

impl BudgetSource for EnvoyExpectedTimeoutMs {
    fn read(&self, headers: &HeaderMap) -> Result<Option<BudgetValue>, MalformedBudget> {
        let mut tightest: Option<BudgetValue> = None;
        for line in headers.get_all(&ENVOY_EXPECTED_TIMEOUT_HEADER) {
            if let Some(value) = self.parse(line.as_bytes())? {
                tightest = Some(tightest.map_or(value, |t| t.min(value)));
            }
        }
        Ok(tightest)
    }
}

/// How an outbound absolute deadline is spelled.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum AbsoluteFormat {
    /// RFC 3339 in UTC with milliseconds: `2026-01-15T10:30:45.123Z`.
    #[default]
    Rfc3339Millis,
    /// Whole microseconds since the Unix epoch.
    EpochMicros,
}

/// A header a caller can write the callee's budget in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// `Deadline-Budget-Ms`: whole ms.
    DeadlineBudgetMs,
    /// `grpc-timeout`: the finest unit that fits 8 digits.
    GrpcTimeout,
    /// `connect-timeout-ms`: whole ms.
    ConnectTimeoutMs,
    /// `x-envoy-upstream-rq-timeout-ms`: whole ms.
    EnvoyUpstreamTimeoutMs,
    /// `X-Request-Deadline`: the wall clock now plus the budget.
    RequestDeadline(AbsoluteFormat),
}

/// A header name that names no outbound dialect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownDialect(String);

impl fmt::Display for UnknownDialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown deadline header {:?}: expected one of deadline-budget-ms, grpc-timeout, \
             connect-timeout-ms, x-envoy-upstream-rq-timeout-ms, x-request-deadline",
            self.0
        )
    }
}

impl std::error::Error for UnknownDialect {}

impl FromStr for Dialect {
    type Err = UnknownDialect;

    /// A header name, case-insensitive; `x-request-deadline` writes RFC 3339 and
    /// `x-request-deadline:us` epoch microseconds.
    fn from_str(name: &str) -> Result<Dialect, UnknownDialect> {
        let dialect = match name.trim().to_ascii_lowercase().as_str() {
            "deadline-budget-ms" => Dialect::DeadlineBudgetMs,
            "grpc-timeout" => Dialect::GrpcTimeout,
            "connect-timeout-ms" => Dialect::ConnectTimeoutMs,
            "x-envoy-upstream-rq-timeout-ms" => Dialect::EnvoyUpstreamTimeoutMs,
            "x-request-deadline" => Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis),
            "x-request-deadline:us" => Dialect::RequestDeadline(AbsoluteFormat::EpochMicros),
            _ => return Err(UnknownDialect(name.to_owned())),
        };
        Ok(dialect)
    }
}

impl Dialect {
    /// The header this dialect writes.
    pub fn header_name(self) -> HeaderName {
        match self {
            Dialect::DeadlineBudgetMs => BUDGET_HEADER,
            Dialect::GrpcTimeout => GRPC_TIMEOUT_HEADER,
            Dialect::ConnectTimeoutMs => CONNECT_TIMEOUT_HEADER,
            Dialect::EnvoyUpstreamTimeoutMs => ENVOY_UPSTREAM_TIMEOUT_HEADER,
            Dialect::RequestDeadline(_) => REQUEST_DEADLINE_HEADER,
        }
    }

    /// The value telling a callee it has `budget`, read at `wall_now` for the absolute dialect
    /// (ignored by the others). `None` only for an absolute deadline the format cannot spell
    /// (outside years 0000–9999).
    pub fn encode(self, budget: Budget, wall_now: WallInstant) -> Option<HeaderValue> {
        let ms = || budget.to_header_value();
        let text = match self {
            Dialect::DeadlineBudgetMs | Dialect::EnvoyUpstreamTimeoutMs => return Some(ms()),
            // Connect allows at most 10 digits: a longer budget is written as the largest.
            Dialect::ConnectTimeoutMs => {
                return Some(
                    Budget::from_millis(budget.as_millis().min(CONNECT_MAX_MS))
                        .unwrap_or(budget)
                        .to_header_value(),
                );
            }
            Dialect::GrpcTimeout => return Some(grpc_timeout(budget)),
            Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis) => {
                wall_now.after(budget.as_duration()).to_rfc3339_millis()?
            }
            Dialect::RequestDeadline(AbsoluteFormat::EpochMicros) => wall_now
                .after(budget.as_duration())
                .to_epoch_micros()?
                .to_string(),
        };
        HeaderValue::from_str(&text).ok()
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dialect::RequestDeadline(AbsoluteFormat::EpochMicros) => {
                f.write_str("x-request-deadline:us")
            }
            other => f.write_str(other.header_name().as_str()),
        }
    }
}

/// `grpc-timeout` for `budget`: the finest unit whose count fits gRPC's 8 digits, truncated
/// (never rounded up), so the callee never gets more than the budget.
pub fn grpc_timeout(budget: Budget) -> HeaderValue {
    const MAX: u64 = 99_999_999;
    let ms = budget.as_millis();
    let (count, unit) = [
        (ms.saturating_mul(1_000_000), b'n'),
        (ms.saturating_mul(1_000), b'u'),
        (ms, b'm'),
        (ms / 1_000, b'S'),
        (ms / 60_000, b'M'),
        (ms / 3_600_000, b'H'),
    ]
    .into_iter()
    .find(|&(count, _)| count <= MAX)
    // A budget is at most u64::MAX ms, about 5e12 hours: 8 digits of hours cap it.
    .unwrap_or((MAX, b'H'));
    let digits = Decimal::new(count);
    let mut value = [0u8; 21];
    let len = digits.as_bytes().len();
    value[..len].copy_from_slice(digits.as_bytes());
    value[len] = unit;
    HeaderValue::from_bytes(&value[..=len]).unwrap_or_else(|_| HeaderValue::from_static("1m"))
}

#[cfg(test)]
mod tests;

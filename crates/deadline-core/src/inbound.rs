//! Which headers a service reads a budget from, and the one budget a request gets from them.
//!
//! A service names the dialects it accepts ([`SourceSet`]); [`read_inbound`] reads every
//! enabled one, and:
//!
//! - a malformed value in **any** enabled source is an error (answer 400): a request must never
//!   run with a looser deadline than one of its headers asked for because that header was
//!   misread as absent;
//! - the tightest valid relative budget wins;
//! - an absolute `X-Request-Deadline` is turned into a budget against the wall-clock reading the
//!   caller passes in (the core reads no clock), through the [`SkewGuard`]: the tighter of it
//!   and the relative budget, unless the two disagree by more than the maximum skew, when the
//!   absolute one is ignored and [`Inbound::absolute`] says so, for the caller to count.
//!
//! A source that is not enabled is not read at all, not even checked: a service that does not
//! accept Envoy's header is not answering 400 for a malformed one.

use std::fmt;
use std::str::FromStr;

use http::HeaderMap;

use crate::absolute::{AbsoluteUse, REQUEST_DEADLINE_HEADER, SkewGuard, WallInstant};
use crate::budget::Budget;
use crate::dialect::{
    CONNECT_TIMEOUT_HEADER, ConnectTimeoutMs, ENVOY_EXPECTED_TIMEOUT_HEADER, EnvoyExpectedTimeoutMs,
};
use crate::header::{
    BUDGET_HEADER, BudgetSource, BudgetValue, DeadlineBudgetMs, GRPC_TIMEOUT_HEADER, GrpcTimeout,
    MalformedBudget,
};

/// One header a budget can arrive in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// `Deadline-Budget-Ms`: whole ms, negative is expired.
    DeadlineBudgetMs,
    /// gRPC's `grpc-timeout`.
    GrpcTimeout,
    /// Connect's `connect-timeout-ms`: 1–10 digits of ms.
    ConnectTimeoutMs,
    /// Envoy's `x-envoy-expected-rq-timeout-ms`: digits of ms, `0` is no deadline.
    EnvoyExpectedTimeoutMs,
    /// `X-Request-Deadline`: an absolute instant, read against the skew guard.
    RequestDeadline,
}

impl Source {
    /// Every source, in the order they are read.
    pub const ALL: [Source; 5] = [
        Source::DeadlineBudgetMs,
        Source::GrpcTimeout,
        Source::ConnectTimeoutMs,
        Source::EnvoyExpectedTimeoutMs,
        Source::RequestDeadline,
    ];

    /// The header this source reads.
    pub fn header_name(self) -> http::HeaderName {
        match self {
            Source::DeadlineBudgetMs => BUDGET_HEADER,
            Source::GrpcTimeout => GRPC_TIMEOUT_HEADER,
            Source::ConnectTimeoutMs => CONNECT_TIMEOUT_HEADER,
            Source::EnvoyExpectedTimeoutMs => ENVOY_EXPECTED_TIMEOUT_HEADER,
            Source::RequestDeadline => REQUEST_DEADLINE_HEADER,
        }
    }

    const fn bit(self) -> u8 {
        1 << self as u8
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.header_name().as_str())
    }
}

/// A header name that names no inbound source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownSource(String);

impl fmt::Display for UnknownSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown deadline header {:?}: expected one of deadline-budget-ms, grpc-timeout, \
             connect-timeout-ms, x-envoy-expected-rq-timeout-ms, x-request-deadline",
            self.0
        )
    }
}

impl std::error::Error for UnknownSource {}

impl FromStr for Source {
    type Err = UnknownSource;

    /// A header name, case-insensitive, spaces around it ignored.
    fn from_str(name: &str) -> Result<Source, UnknownSource> {
        let lower = name.trim().to_ascii_lowercase();
        Source::ALL
            .into_iter()
            .find(|source| source.header_name().as_str() == lower)
            .ok_or_else(|| UnknownSource(name.to_owned()))
    }
}

/// The sources a service reads, a small set.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SourceSet(u8);

impl SourceSet {
    /// No source at all: every request runs without a deadline.
    pub const NONE: SourceSet = SourceSet(0);

    /// `Deadline-Budget-Ms` alone, the default. (gRPC requests have their `grpc-timeout` read
    /// as well; that is the serving layer's decision, since only it knows the protocol.)
    pub const DEFAULT: SourceSet = SourceSet(Source::DeadlineBudgetMs.bit());

    /// This set with `source` added.
    #[must_use = "this returns a new set"]
    pub const fn with(self, source: Source) -> SourceSet {
        SourceSet(self.0 | source.bit())
    }

    /// This set without `source`.
    #[must_use = "this returns a new set"]
    pub const fn without(self, source: Source) -> SourceSet {
        SourceSet(self.0 & !source.bit())
    }

    /// Whether `source` is read.
    pub const fn contains(self, source: Source) -> bool {
        self.0 & source.bit() != 0
    }

    /// Whether no source is read.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The sources in the set, in [`Source::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Source> {
        Source::ALL.into_iter().filter(move |s| self.contains(*s))
    }
}

impl Default for SourceSet {
    fn default() -> SourceSet {
        SourceSet::DEFAULT
    }
}

impl FromIterator<Source> for SourceSet {
    fn from_iter<I: IntoIterator<Item = Source>>(iter: I) -> SourceSet {
        iter.into_iter().fold(SourceSet::NONE, SourceSet::with)
    }
}

impl fmt::Debug for SourceSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.iter()).finish()
    }
}

impl fmt::Display for SourceSet {
    /// The header names, comma-separated: what [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, source) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{source}")?;
        }
        Ok(())
    }
}

impl FromStr for SourceSet {
    type Err = UnknownSource;

    /// Comma-separated header names (`deadline-budget-ms,connect-timeout-ms`); an empty
    /// element is an error, so a typo such as `a,,b` is not silently one source short.
    fn from_str(list: &str) -> Result<SourceSet, UnknownSource> {
        list.split(',').map(str::parse::<Source>).collect()
    }
}

/// What a request's headers say about its budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Inbound {
    /// The budget the request runs with; `None`: no deadline.
    pub value: Option<BudgetValue>,
    /// What became of an absolute deadline, when one was read.
    pub absolute: Option<AbsoluteUse>,
}

/// Reads every `X-Request-Deadline` value (repeated lines or a comma-separated list): the
/// earliest instant, `Ok(None)` without the header, an error if any value is malformed.
pub fn read_request_deadline(headers: &HeaderMap) -> Result<Option<WallInstant>, MalformedBudget> {
    let mut earliest: Option<WallInstant> = None;
    for line in headers.get_all(REQUEST_DEADLINE_HEADER) {
        for element in line.as_bytes().split(|b| *b == b',') {
            let at = WallInstant::parse(element)?;
            earliest = Some(earliest.map_or(at, |e| e.min(at)));
        }
    }
    Ok(earliest)
}

/// The budget of a request whose headers are `headers`, reading the sources in `set`, each
/// clamped to `max`. `wall_now` is this hop's wall clock read at the request's arrival; it is
/// needed only when `set` holds [`Source::RequestDeadline`] (without it, that source is not
/// read). See the [module docs](self) for the rules.
pub fn read_inbound(
    set: SourceSet,
    headers: &HeaderMap,
    max: Budget,
    guard: &SkewGuard,
    wall_now: Option<WallInstant>,
) -> Result<Inbound, MalformedBudget> {
    let mut relative: Option<BudgetValue> = None;
    let mut tighten = |value: Option<BudgetValue>| {
        if let Some(value) = value {
            relative = Some(relative.map_or(value, |r| r.min(value)));
        }
    };
    if set.contains(Source::DeadlineBudgetMs) {
        tighten(DeadlineBudgetMs { max }.read(headers)?);
    }
    if set.contains(Source::GrpcTimeout) {
        tighten(GrpcTimeout { max }.read(headers)?);
    }
    if set.contains(Source::ConnectTimeoutMs) {
        tighten(ConnectTimeoutMs { max }.read(headers)?);
    }
    if set.contains(Source::EnvoyExpectedTimeoutMs) {
        tighten(EnvoyExpectedTimeoutMs { max }.read(headers)?);
    }
    let absolute = match wall_now {
        Some(wall_now) if set.contains(Source::RequestDeadline) => {
            read_request_deadline(headers)?.map(|at| (at, wall_now))
        }
        _ => None,
    };
    let Some((at, wall_now)) = absolute else {
        return Ok(Inbound {
            value: relative,
            absolute: None,
        });
    };
    let reconciled = guard.reconcile(at, wall_now, relative, max);
    Ok(Inbound {
        value: Some(reconciled.value),
        absolute: Some(reconciled.absolute),
    })
}

#[cfg(test)]
mod tests;

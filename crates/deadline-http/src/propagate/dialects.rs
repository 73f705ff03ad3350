//! The outbound dialects: the headers besides `Deadline-Budget-Ms` an attempt tells its callee's
//! budget in.
//!
//! A service behind Envoy, or one calling a Connect or gRPC service, passes the budget on in a
//! header the next hop understands. Every header an attempt carries is written from **the one
//! budget the planner chose for it** ([`Dialect::encode`]), so they can never disagree by more
//! than each format's truncation: `grpc-timeout` keeps 8 digits of the finest unit that fits,
//! `X-Request-Deadline` is the wall clock now plus the budget, truncated to the millisecond (or
//! microsecond), and `connect-timeout-ms` stops at ten digits. The wall clock is read only when
//! an absolute dialect is configured, once per attempt.
//!
//! Without a budget (no deadline, or propagation off) every configured header is removed from
//! the attempt, as `Deadline-Budget-Ms` is: a stale value copied from somewhere must not
//! outlive the deadline it came from.
//!
//! A service that accepts one dialect and sends another translates between them: accept
//! `connect-timeout-ms`, send `x-envoy-upstream-rq-timeout-ms`, and a Connect client's budget
//! reaches a service behind Envoy.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use deadline::Budget;
use deadline::dialect::{Dialect, UnknownDialect};
use http::HeaderMap;

use crate::time;

/// The dialects an attempt writes besides `Deadline-Budget-Ms`, which is always written. At
/// most one per header: a later absolute format replaces an earlier one. Cloning is a
/// reference count.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct DialectSet(Arc<[Dialect]>);

impl DialectSet {
    /// No dialect besides `Deadline-Budget-Ms`: the default.
    pub fn none() -> DialectSet {
        DialectSet::default()
    }

    /// The dialects `dialects` names, one per header (the last one for a header wins).
    /// `Deadline-Budget-Ms` may be named; it is written anyway.
    pub fn new(dialects: impl IntoIterator<Item = Dialect>) -> DialectSet {
        let mut kept: Vec<Dialect> = Vec::new();
        for dialect in dialects {
            if dialect == Dialect::DeadlineBudgetMs {
                continue;
            }
            match kept
                .iter_mut()
                .find(|k| k.header_name() == dialect.header_name())
            {
                Some(slot) => *slot = dialect,
                None => kept.push(dialect),
            }
        }
        DialectSet(kept.into())
    }

    /// The dialects written besides `Deadline-Budget-Ms`.
    pub fn iter(&self) -> impl Iterator<Item = Dialect> + '_ {
        self.0.iter().copied()
    }

    /// Whether only `Deadline-Budget-Ms` is written.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Sets every dialect's header in `headers` to `budget`, or removes it without one.
    pub(crate) fn write(&self, headers: &mut HeaderMap, budget: Option<Budget>) {
        if self.0.is_empty() {
            return;
        }
        let Some(budget) = budget else {
            for dialect in self.iter() {
                headers.remove(dialect.header_name());
            }
            return;
        };
        let absolute = self
            .iter()
            .any(|d| matches!(d, Dialect::RequestDeadline(_)));
        // The relative dialects ignore the instant: the epoch stands in when none is read.
        let now = if absolute {
            time::wall_now()
        } else {
            deadline::absolute::WallInstant::from_unix_nanos(0)
        };
        for dialect in self.iter() {
            // `insert` replaces every value the request held; never a second line.
            match dialect.encode(budget, now) {
                Some(value) => {
                    headers.insert(dialect.header_name(), value);
                }
                // An instant past year 9999 cannot be written: better no header than a wrong one.
                None => {
                    headers.remove(dialect.header_name());
                }
            }
        }
    }
}

impl fmt::Debug for DialectSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl fmt::Display for DialectSet {
    /// The dialects' names, comma-separated: what [`FromStr`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, dialect) in self.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{dialect}")?;
        }
        Ok(())
    }
}

impl FromStr for DialectSet {
    type Err = UnknownDialect;

    /// Comma-separated header names (see [`Dialect`]'s `FromStr`: `x-request-deadline` writes
    /// RFC 3339, `x-request-deadline:us` epoch microseconds); an empty element is an error.
    fn from_str(list: &str) -> Result<DialectSet, UnknownDialect> {
        let dialects = list
            .split(',')
            .map(str::parse::<Dialect>)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DialectSet::new(dialects))
    }
}

impl FromIterator<Dialect> for DialectSet {
    fn from_iter<I: IntoIterator<Item = Dialect>>(iter: I) -> DialectSet {
        DialectSet::new(iter)
    }
}

#[cfg(test)]
mod tests {
    use deadline::dialect::AbsoluteFormat;
    use http::HeaderValue;

    use super::*;

    #[test]
    fn sets_parse_dedupe_and_print_back() {
        let set: DialectSet =
            "grpc-timeout, Deadline-Budget-Ms,x-request-deadline,x-request-deadline:us"
                .parse()
                .unwrap();
        assert_eq!(
            set.iter().collect::<Vec<_>>(),
            [
                Dialect::GrpcTimeout,
                Dialect::RequestDeadline(AbsoluteFormat::EpochMicros)
            ]
        );
        assert_eq!(set.to_string(), "grpc-timeout,x-request-deadline:us");
        assert_eq!(set.to_string().parse::<DialectSet>(), Ok(set));
        for bad in ["", "grpc-timeout,", "x-envoy-expected-rq-timeout-ms"] {
            assert!(bad.parse::<DialectSet>().is_err(), "{bad}");
        }
        assert!(DialectSet::none().is_empty());
        assert!(
            "deadline-budget-ms"
                .parse::<DialectSet>()
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn every_dialect_is_set_from_the_budget_or_removed_without_one() {
        let set: DialectSet =
            "grpc-timeout,connect-timeout-ms,x-envoy-upstream-rq-timeout-ms,x-request-deadline:us"
                .parse()
                .unwrap();
        let mut headers = HeaderMap::new();
        headers.append("connect-timeout-ms", HeaderValue::from_static("99999"));
        headers.append("connect-timeout-ms", HeaderValue::from_static("88888"));
        let before = time::wall_now().unix_nanos();
        set.write(&mut headers, Budget::from_millis(950));
        let after = time::wall_now().unix_nanos();
        assert_eq!(headers.get_all("connect-timeout-ms").iter().count(), 1);
        assert_eq!(headers["connect-timeout-ms"], "950");
        assert_eq!(headers["x-envoy-upstream-rq-timeout-ms"], "950");
        assert_eq!(headers["grpc-timeout"], "950000u");
        let micros: i128 = headers["x-request-deadline"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        // The instant written is the wall clock read during `write` plus 950 ms, truncated to
        // the microsecond: between the two reads around it, to the microsecond.
        let earliest = (before + 950_000_000).div_euclid(1_000);
        let latest = (after + 950_000_000).div_euclid(1_000);
        assert!(
            (earliest..=latest).contains(&micros),
            "{micros} µs written, not within [{earliest}, {latest}]"
        );
        set.write(&mut headers, None);
        assert!(headers.is_empty(), "{headers:?}");
    }
}

//! Which headers the enforce layer reads a budget from, and the skew guard of the absolute one.
//!
//! A service names the dialects its callers speak with
//! [`EnforceDeadlineLayer::accept`](super::EnforceDeadlineLayer::accept): by default only
//! `Deadline-Budget-Ms`; `grpc-timeout`, Connect's `connect-timeout-ms`, Envoy's
//! `x-envoy-expected-rq-timeout-ms` and the absolute `X-Request-Deadline` on request. Every
//! enabled source is read, the tightest valid budget wins, and a malformed value in any of them
//! is answered 400 naming that header (see [`deadline::inbound`]).
//!
//! # The absolute source
//!
//! `X-Request-Deadline` is an instant on the caller's wall clock. The layer reads this host's
//! wall clock **once**, at the request's arrival (and only when the source is enabled), turns
//! the instant into a budget with the [`SkewGuard`] (`instant − wall now − assumed skew`, 50 ms
//! by default; nothing left is a 504 on arrival) and from then on the request lives on the
//! monotonic clock like any other. When a relative budget came too and the two disagree by
//! more than the maximum skew (60 s by default), one of the clocks is broken, not merely
//! skewed: the absolute value is ignored, so a broken clock neither expires nor extends the
//! work, and the layer counts it
//! ([`ignored_absolute_deadlines`](super::EnforceDeadlineLayer::ignored_absolute_deadlines))
//! and logs a `warn` event with target `deadline::skew`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use deadline::BUDGET_HEADER;
use deadline::Budget;
use deadline::absolute::{AbsoluteUse, REQUEST_DEADLINE_HEADER, SkewGuard};
use deadline::header::{BudgetValue, MalformedBudget, add_budget_line, read_budget};
use deadline::inbound::{Source, SourceSet, read_inbound};
use http::HeaderMap;
use http::header::CONTENT_TYPE;

use super::caller::{CONNECT_PROTOCOL_VERSION, Caller};
use crate::time;

/// The most header lines a request may have for [`Sources::read_request`] to walk them rather
/// than look its two names up. Timed in one run (release build, two million reads each, the
/// lines standard names and then `x-pad-N`): the walk 20.0 ns against the lookups' 30.4 at 8
/// lines, 30.7 against 34.7 at 16, 31.3 against 34.6 at 20, and 38.5 against 30.6 at 24.
const WALK_MAX_LINES: usize = 16;

/// The inbound settings of one layer: the sources it reads, the skew guard, and the count of
/// absolute deadlines it ignored (shared by every clone of the layer and its services).
#[derive(Clone, Debug, Default)]
pub(crate) struct Sources {
    pub(crate) set: SourceSet,
    pub(crate) guard: SkewGuard,
    ignored: Arc<AtomicU64>,
}

impl Sources {
    /// The budget of a request with `headers` at the hop `name`, each source clamped to `max`.
    /// `grpc`: read `grpc-timeout` whatever the set says (a gRPC request's own header).
    pub(crate) fn read(
        &self,
        name: &str,
        headers: &HeaderMap,
        max: Budget,
        grpc: bool,
    ) -> Result<Option<BudgetValue>, MalformedBudget> {
        let set = if grpc {
            self.set.with(Source::GrpcTimeout)
        } else {
            self.set
        };
        // The default set, `Deadline-Budget-Ms` alone: nothing to reconcile, so the header is
        // read directly (the general path's dispatch and its result cost about 70
        // instructions a request for nothing).
        if set == SourceSet::DEFAULT {
            return read_budget(headers, max);
        }
        // The wall clock is read only when the request carries an absolute deadline this hop
        // accepts.
        let wall_now = (set.contains(Source::RequestDeadline)
            && headers.contains_key(REQUEST_DEADLINE_HEADER))
        .then(time::wall_now);
        let inbound = read_inbound(set, headers, max, &self.guard, wall_now)?;
        if let Some(AbsoluteUse::Ignored { disagreement_ms }) = inbound.absolute {
            self.ignored.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                target: "deadline::skew",
                service = name,
                disagreement_ms,
                max_skew_ms = u64::try_from(self.guard.max_skew().as_millis()).unwrap_or(u64::MAX),
                "X-Request-Deadline ignored: it disagrees with the relative budget by more than \
                 the maximum clock skew, so one of the clocks is wrong"
            );
        }
        Ok(inbound.value)
    }

    /// The caller of a request with `headers` and its budget at the hop `name` (see
    /// [`read`](Self::read)): [`Caller::of`] and `read` in one.
    ///
    /// A request with few header lines and the default source set is read in one pass over
    /// its lines, comparing names, instead of two hashed lookups (one for the content type,
    /// one for `Deadline-Budget-Ms`), each of which hashes its name byte by byte and probes
    /// the table: a few header lines cost less to walk than one name costs to hash. The walk
    /// keeps what the lookups would give: the first content type, and every budget line in
    /// order, the first malformed one ending the read. Every other source set takes the
    /// lookups' path, and so does a gRPC request (whose own timeout header is read too), after
    /// the walk that found its content type.
    pub(crate) fn read_request(
        &self,
        name: &str,
        headers: &HeaderMap,
        max: Budget,
    ) -> (Caller, Result<Option<BudgetValue>, MalformedBudget>) {
        if self.set == SourceSet::DEFAULT && headers.len() <= WALK_MAX_LINES {
            let mut content_type = None;
            let mut connect = false;
            let mut budget: Result<Option<BudgetValue>, MalformedBudget> = Ok(None);
            for (line, value) in headers {
                if line == CONTENT_TYPE {
                    content_type = content_type.or(Some(value));
                } else if line == BUDGET_HEADER {
                    budget = budget
                        .and_then(|smallest| add_budget_line(smallest, value.as_bytes(), max));
                } else if line == CONNECT_PROTOCOL_VERSION {
                    connect = true;
                }
            }
            let caller = Caller::from_parts(content_type, || connect);
            if !caller.is_grpc() {
                return (caller, budget);
            }
            return (caller, self.read(name, headers, max, true));
        }
        let caller = Caller::of(headers);
        (caller, self.read(name, headers, max, caller.is_grpc()))
    }

    /// Absolute deadlines ignored so far because they disagreed with a relative budget.
    pub(crate) fn ignored(&self) -> u64 {
        self.ignored.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderName, HeaderValue};

    use super::*;

    /// The one pass gives what the two lookups give, line for line: for few lines, the most the
    /// walk takes and one more, one budget line and several (a malformed one first, last or
    /// between), with and without a content type (gRPC, Connect, other, repeated), and the
    /// gRPC timeout read for gRPC.
    #[test]
    fn one_pass_reads_what_the_lookups_read() {
        let max = Budget::from_millis(60_000).expect("a budget");
        let budgets: &[&[&str]] = &[
            &[],
            &["900"],
            &["900", "300"],
            &["300, 900"],
            &["nine", "300"],
            &["300", "nine"],
            &["0"],
            &["300", "0", "x"],
        ];
        let kinds: &[&[(&str, &str)]] = &[
            &[],
            &[("content-type", "text/plain")],
            &[("content-type", "application/grpc")],
            &[("content-type", "application/grpc"), ("grpc-timeout", "2S")],
            &[("content-type", "application/grpc"), ("grpc-timeout", "x")],
            &[
                ("content-type", "application/json"),
                ("connect-protocol-version", "1"),
            ],
            &[("connect-protocol-version", "1")],
            &[
                ("content-type", "text/plain"),
                ("content-type", "application/grpc"),
            ],
            &[
                ("content-type", "application/grpc"),
                ("content-type", "text/plain"),
            ],
        ];
        let sources = Sources::default();
        for budget in budgets {
            for kind in kinds {
                // Few lines, as many as the walk takes, and one more (the lookups' path).
                let own = 1 + kind.len() + budget.len();
                for lines in [own, own + 2, WALK_MAX_LINES, WALK_MAX_LINES + 1] {
                    let padding = lines.saturating_sub(own);
                    let mut headers = HeaderMap::new();
                    headers.insert("host", HeaderValue::from_static("svc"));
                    for i in 0..padding {
                        let name = HeaderName::try_from(format!("x-pad-{i}")).expect("a name");
                        headers.insert(name, HeaderValue::from_static("1"));
                    }
                    for (name, value) in *kind {
                        headers.append(*name, HeaderValue::from_static(value));
                    }
                    for value in *budget {
                        headers.append(BUDGET_HEADER, HeaderValue::from_static(value));
                    }
                    assert_eq!(headers.len(), lines.max(own));
                    let caller = Caller::of(&headers);
                    let expected = (caller, sources.read("svc", &headers, max, caller.is_grpc()));
                    let case = format!("{headers:?}");
                    assert_eq!(
                        sources.read_request("svc", &headers, max),
                        expected,
                        "{case}"
                    );
                }
            }
        }
    }
}

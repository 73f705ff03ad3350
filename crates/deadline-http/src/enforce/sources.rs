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

use deadline::Budget;
use deadline::absolute::{AbsoluteUse, REQUEST_DEADLINE_HEADER, SkewGuard};
use deadline::header::{BudgetValue, MalformedBudget, read_budget};
use deadline::inbound::{Source, SourceSet, read_inbound};
use http::HeaderMap;

use crate::time;

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

    /// Absolute deadlines ignored so far because they disagreed with a relative budget.
    pub(crate) fn ignored(&self) -> u64 {
        self.ignored.load(Ordering::Relaxed)
    }
}

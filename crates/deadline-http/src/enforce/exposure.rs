//! Who sees this hop's `Deadline-Trace` header: [`TraceExposure`].
//!
//! # The default: the trace where the caller can use it
//!
//! A caller that sent a budget (in any dialect the layer accepts) is deadline-aware: it can
//! read the trace, splice it into its own, and show where the time went. A caller that sent
//! none (a browser, a health check, a client that knows nothing of deadlines) has no use for
//! it, and writing it costs every answer a value made and a header line (measured in
//! `docs/performance.md`). So the default is
//! [`Budgeted`](TraceExposure::Budgeted): the trace goes on answers to requests that carried a
//! budget, and nowhere else. `Server-Timing` is not governed here: it is off unless the
//! application turns it on
//! ([`server_timing(true)`](super::EnforceDeadlineLayer::server_timing)), and then on every
//! answer.
//!
//! # An edge shows its timings only to callers it trusts
//!
//! A `Deadline-Trace` answer names every service the request went through, how the calls
//! nested, how long each queued and worked, and which attempts were retried, hedged or shed.
//! Between services of one system that is the point. At an edge that faces the public, it is a
//! map of the internal call graph and its timings for anyone who asks: service names to aim
//! at, which path is slow, how full the queues are (an attacker can time an overload by it).
//! So a service reachable by callers outside the system sets an exposure that excludes them:
//!
//! | exposure | answers carry the trace |
//! |---|---|
//! | [`Budgeted`](TraceExposure::Budgeted) (the default) | only to callers that sent a budget header (`Deadline-Budget-Ms`, `grpc-timeout` or another accepted source): deadline-aware hops, not a browser |
//! | [`Always`](TraceExposure::Always) | to every caller |
//! | [`trusted`](TraceExposure::trusted) | only to requests the application's predicate accepts (a header set by its own proxy, a peer address from the request extensions) |
//! | [`Off`](TraceExposure::Off) | to nobody |
//!
//! `Budgeted` is a convenience, not a boundary: any caller can send the header. Where the
//! public can reach the service, use `trusted` with something the public cannot forge, or
//! `Off`. The exposure changes what is *sent*, and with it what is kept of the downstream: the
//! hop's hold reports, metrics and the calls it makes are unchanged, and its calls and their
//! attempts are recorded as always.
//!
//! # A downstream's spans go only where this hop's trace goes
//!
//! A callee's `Deadline-Trace` is the callee's word: its service names, its timings, whatever a
//! misbehaving or foreign downstream chooses to put there (within the codec's bounds). Such a
//! trace is kept in this hop's trace, under the attempt that got it, only for a request whose
//! answer shows the trace; for any other the attempt is recorded without it, so a downstream's
//! spans reach no caller the exposure excludes, and a request whose trace goes nowhere does not
//! hold its callees' traces in memory. When the trace is not exposed, a `Deadline-Trace` the
//! inner service wrote itself is removed too, so no downstream hop's trace leaks through this
//! one either way. A request that sent no budget and is shown no trace goes without a
//! context by default, so that it costs what it would without the layer:
//! [`context_without_budget`](super::EnforceDeadlineLayer::context_without_budget).

use std::fmt;
use std::sync::Arc;

use http::{Extensions, HeaderMap};

/// A predicate on a request's headers and extensions: `true` for a caller that may see this
/// hop's timings.
type Trust = Arc<dyn Fn(&HeaderMap, &Extensions) -> bool + Send + Sync>;

/// Which callers get this hop's `Deadline-Trace` header (see the [module docs](self) for the
/// default and for why an edge limits it). Set it with
/// [`EnforceDeadlineLayer::trace_exposure`](super::EnforceDeadlineLayer::trace_exposure).
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum TraceExposure {
    /// Every caller.
    Always,
    /// Only callers that sent a budget header (any source the layer accepts, even a malformed
    /// or expired value): the default.
    #[default]
    Budgeted,
    /// Only callers the application's predicate trusts: build it with
    /// [`TraceExposure::trusted`].
    Trusted(Trust),
    /// Nobody.
    Off,
}

impl TraceExposure {
    /// Only requests for which `trust(headers, extensions)` is `true`: for example a header
    /// that the application's own proxy sets and strips from outside traffic, or a peer
    /// address an acceptor put in the extensions (axum's `ConnectInfo`).
    ///
    /// ```
    /// use deadline_http::EnforceDeadlineLayer;
    /// use deadline_http::enforce::TraceExposure;
    ///
    /// let edge = EnforceDeadlineLayer::new("gateway").trace_exposure(TraceExposure::trusted(
    ///     |headers, _extensions| headers.contains_key("x-internal-caller"),
    /// ));
    /// # let _ = edge;
    /// ```
    pub fn trusted(
        trust: impl Fn(&HeaderMap, &Extensions) -> bool + Send + Sync + 'static,
    ) -> TraceExposure {
        TraceExposure::Trusted(Arc::new(trust))
    }

    /// Whether a request with `headers` and `extensions` gets the trace; `budgeted` says
    /// whether it sent a budget.
    pub(crate) fn allows(
        &self,
        headers: &HeaderMap,
        extensions: &Extensions,
        budgeted: bool,
    ) -> bool {
        match self {
            TraceExposure::Always => true,
            TraceExposure::Budgeted => budgeted,
            TraceExposure::Trusted(trust) => trust(headers, extensions),
            TraceExposure::Off => false,
        }
    }
}

impl fmt::Debug for TraceExposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TraceExposure::Always => "Always",
            TraceExposure::Budgeted => "Budgeted",
            TraceExposure::Trusted(_) => "Trusted(..)",
            TraceExposure::Off => "Off",
        })
    }
}

/// `always`, `budgeted` or `off`, as a command line gives it (a predicate has no text form).
impl std::str::FromStr for TraceExposure {
    type Err = UnknownExposure;

    fn from_str(text: &str) -> Result<TraceExposure, UnknownExposure> {
        match text {
            "always" => Ok(TraceExposure::Always),
            "budgeted" => Ok(TraceExposure::Budgeted),
            "off" => Ok(TraceExposure::Off),
            _ => Err(UnknownExposure(text.chars().take(64).collect())),
        }
    }
}

/// A trace exposure that is not `always`, `budgeted` or `off`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownExposure(String);

impl fmt::Display for UnknownExposure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown trace exposure {:?}: expected always, budgeted or off",
            self.0
        )
    }
}

impl std::error::Error for UnknownExposure {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_exposure_allows_whom_it_says() {
        let mut internal = HeaderMap::new();
        internal.insert("x-internal-caller", "1".parse().unwrap());
        let outside = HeaderMap::new();
        let none = Extensions::new();
        let trusted = TraceExposure::trusted(|h, _| h.contains_key("x-internal-caller"));
        for (budgeted, headers) in [(false, &outside), (true, &outside), (false, &internal)] {
            assert!(TraceExposure::Always.allows(headers, &none, budgeted));
            assert!(!TraceExposure::Off.allows(headers, &none, budgeted));
            assert_eq!(
                TraceExposure::Budgeted.allows(headers, &none, budgeted),
                budgeted
            );
            assert_eq!(
                trusted.allows(headers, &none, budgeted),
                headers.contains_key("x-internal-caller")
            );
        }
    }

    #[test]
    fn parses_the_command_line_words_only() {
        assert!(matches!("off".parse(), Ok(TraceExposure::Off)));
        assert!(matches!("budgeted".parse(), Ok(TraceExposure::Budgeted)));
        assert!(matches!("always".parse(), Ok(TraceExposure::Always)));
        let error = "Off".parse::<TraceExposure>().unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown trace exposure \"Off\": expected always, budgeted or off"
        );
    }
}

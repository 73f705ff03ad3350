//! The labels every series carries: the fixed sets of tokens (how a request, an attempt or a
//! statement ended, why an attempt was skipped, the phase time ran out in) and the label sets
//! built from them and the application's service and target names. A leaf: the recorders and
//! the families import it, it imports none of them.

use std::fmt;
use std::sync::Arc;

use http::StatusCode;
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::hold::{Hold, HoldOutcome};

/// The `outcome` label of `deadline_requests_total`: how a request ended at this hop.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Outcome {
    /// Answered, with anything but a 5xx.
    Ok,
    /// Time ran out (the layer's 504, or the handler's own).
    Deadline,
    /// The caller went away before the answer was ready.
    HungUp,
    /// Refused on arrival for a reason other than the two below.
    Rejected,
    /// A budget header that does not parse: answered 400 on arrival.
    Malformed,
    /// A budget already spent (or no larger than the reply reserve): answered 504 on arrival.
    ExpiredOnArrival,
    /// Turned away because the hop was overloaded.
    Shed,
    /// The inner service failed, or answered a 5xx other than 504.
    Error,
}

impl Outcome {
    /// Every outcome, in label order.
    pub const ALL: [Outcome; 8] = [
        Outcome::Ok,
        Outcome::Deadline,
        Outcome::HungUp,
        Outcome::Rejected,
        Outcome::Malformed,
        Outcome::ExpiredOnArrival,
        Outcome::Shed,
        Outcome::Error,
    ];

    /// The label value: `ok`, `deadline`, `hung_up`, `rejected`, `malformed`,
    /// `expired_on_arrival`, `shed` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Deadline => "deadline",
            Outcome::HungUp => "hung_up",
            Outcome::Rejected => "rejected",
            Outcome::Malformed => "malformed",
            Outcome::ExpiredOnArrival => "expired_on_arrival",
            Outcome::Shed => "shed",
            Outcome::Error => "error",
        }
    }

    /// The outcome of `hold`.
    pub fn of(hold: &Hold) -> Outcome {
        Outcome::of_parts(hold.outcome, hold.status)
    }

    /// The outcome of a hold that ended with `outcome` and answered `status`.
    pub(crate) fn of_parts(outcome: HoldOutcome, status: Option<StatusCode>) -> Outcome {
        match outcome {
            HoldOutcome::Ok => Outcome::Ok,
            HoldOutcome::Deadline => Outcome::Deadline,
            HoldOutcome::HungUp => Outcome::HungUp,
            HoldOutcome::Rejected => match status {
                Some(StatusCode::BAD_REQUEST) => Outcome::Malformed,
                Some(StatusCode::GATEWAY_TIMEOUT) => Outcome::ExpiredOnArrival,
                _ => Outcome::Rejected,
            },
            HoldOutcome::Shed => Outcome::Shed,
            HoldOutcome::Error => Outcome::Error,
        }
    }
}

impl Token for Outcome {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

/// The `kind` label of `deadline_attempts_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AttemptKind {
    /// The call's first attempt.
    First,
    /// An attempt sent after an earlier one failed.
    Retry,
    /// An attempt sent while an earlier one is still in flight.
    Hedge,
}

impl AttemptKind {
    /// Every kind, in label order.
    pub const ALL: [AttemptKind; 3] = [AttemptKind::First, AttemptKind::Retry, AttemptKind::Hedge];

    /// The label value: `first`, `retry` or `hedge`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptKind::First => "first",
            AttemptKind::Retry => "retry",
            AttemptKind::Hedge => "hedge",
        }
    }

    /// The kind of a sequential attempt that is the `sent`-th of its call (from 1).
    pub fn nth(sent: u32) -> AttemptKind {
        if sent <= 1 {
            AttemptKind::First
        } else {
            AttemptKind::Retry
        }
    }
}

impl Token for AttemptKind {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

/// The `reason` label of `deadline_attempts_skipped_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SkipReason {
    /// Too little time was left for the attempt to be useful (before or after a backoff).
    NotEnoughTime,
    /// A retry budget shared across calls was spent.
    Throttled,
    /// The downstream asked not to be retried (pushback).
    Pushback,
}

impl SkipReason {
    /// Every reason, in label order.
    pub const ALL: [SkipReason; 3] = [
        SkipReason::NotEnoughTime,
        SkipReason::Throttled,
        SkipReason::Pushback,
    ];

    /// The label value: `not_enough_time`, `throttled` or `pushback`.
    pub fn as_str(self) -> &'static str {
        match self {
            SkipReason::NotEnoughTime => "not_enough_time",
            SkipReason::Throttled => "throttled",
            SkipReason::Pushback => "pushback",
        }
    }

    /// The reason the planner's `stop` skipped an attempt, if it skipped one (a call that used
    /// all its attempts skipped none).
    pub fn of_stop(stop: &deadline::Stop) -> Option<SkipReason> {
        match stop {
            deadline::Stop::NotEnoughTime { .. }
            | deadline::Stop::NotEnoughTimeAfterBackoff { .. }
            | deadline::Stop::CalleeOutOfTime { .. } => Some(SkipReason::NotEnoughTime),
            deadline::Stop::Throttled { .. } => Some(SkipReason::Throttled),
            deadline::Stop::PushbackTooLong { .. } | deadline::Stop::DoNotRetry { .. } => {
                Some(SkipReason::Pushback)
            }
            _ => None,
        }
    }
}

impl Token for SkipReason {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

/// The `outcome` label of `deadline_queries_total`: how one database statement ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum QueryOutcome {
    /// The statement finished.
    Ok,
    /// The request's deadline stopped it: the server's `statement_timeout` or the local timer.
    Deadline,
    /// Its caller stopped waiting (the statement's future was dropped) while it ran.
    Cancelled,
    /// It was not sent: too little time was left (or the pool wait used it up).
    NotSent,
    /// The database or the connection failed.
    Error,
}

impl QueryOutcome {
    /// Every outcome, in label order.
    pub const ALL: [QueryOutcome; 5] = [
        QueryOutcome::Ok,
        QueryOutcome::Deadline,
        QueryOutcome::Cancelled,
        QueryOutcome::NotSent,
        QueryOutcome::Error,
    ];

    /// The label value: `ok`, `deadline`, `cancelled`, `not_sent` or `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            QueryOutcome::Ok => "ok",
            QueryOutcome::Deadline => "deadline",
            QueryOutcome::Cancelled => "cancelled",
            QueryOutcome::NotSent => "not_sent",
            QueryOutcome::Error => "error",
        }
    }
}

impl Token for QueryOutcome {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

/// A label value from a fixed set of lowercase tokens.
pub(super) trait Token: Copy {
    fn token(self) -> &'static str;
}

/// Encodes a [`Token`] as its text.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Tok<T>(pub(super) T);

impl<T: Token> EncodeLabelValue for Tok<T> {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> Result<(), fmt::Error> {
        fmt::Write::write_str(encoder, self.0.token())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ServiceLabels {
    pub(super) service: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct OutcomeLabels {
    pub(super) service: Arc<str>,
    pub(super) outcome: Tok<Outcome>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct QueryLabels {
    pub(super) service: Arc<str>,
    pub(super) outcome: Tok<QueryOutcome>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PhaseLabels {
    pub(super) service: Arc<str>,
    pub(super) phase: Tok<crate::phase::Phase>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct TargetLabels {
    pub(super) service: Arc<str>,
    pub(super) target: Arc<str>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct AttemptLabels {
    pub(super) service: Arc<str>,
    pub(super) target: Arc<str>,
    pub(super) kind: Tok<AttemptKind>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct SkipLabels {
    pub(super) service: Arc<str>,
    pub(super) target: Arc<str>,
    pub(super) reason: Tok<SkipReason>,
}

impl Token for crate::phase::Phase {
    fn token(self) -> &'static str {
        self.as_str()
    }
}

//! The client side's series: attempts sent and skipped, and each call's duration.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

use super::{AttemptLabels, Families, SkipLabels, TargetLabels, Tok, Token};

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

/// One service's series for calls to one target, resolved once.
#[derive(Debug)]
pub(crate) struct TargetRecorder {
    attempts: [Counter; AttemptKind::ALL.len()],
    skipped: [Counter; SkipReason::ALL.len()],
    duration: Histogram,
}

impl TargetRecorder {
    pub(super) fn new(families: &Families, service: &Arc<str>, target: &Arc<str>) -> Self {
        TargetRecorder {
            attempts: AttemptKind::ALL.map(|kind| {
                families.attempts.get_or_create_owned(&AttemptLabels {
                    service: service.clone(),
                    target: target.clone(),
                    kind: Tok(kind),
                })
            }),
            skipped: SkipReason::ALL.map(|reason| {
                families.skipped.get_or_create_owned(&SkipLabels {
                    service: service.clone(),
                    target: target.clone(),
                    reason: Tok(reason),
                })
            }),
            duration: families.call_duration.get_or_create_owned(&TargetLabels {
                service: service.clone(),
                target: target.clone(),
            }),
        }
    }
}

/// One call's recorder: counts its attempts and skips, and observes its duration when dropped
/// (however the call ended, a dropped call included).
#[derive(Debug)]
pub(crate) struct CallRecorder {
    target: Arc<TargetRecorder>,
    start: Instant,
}

impl CallRecorder {
    pub(crate) fn start(target: Arc<TargetRecorder>) -> CallRecorder {
        CallRecorder {
            target,
            start: Instant::now(),
        }
    }

    pub(crate) fn attempt(&self, kind: AttemptKind) {
        self.target.attempts[kind as usize].inc();
    }

    pub(crate) fn skipped(&self, reason: SkipReason) {
        self.target.skipped[reason as usize].inc();
    }
}

impl Drop for CallRecorder {
    fn drop(&mut self) {
        self.target.duration.observe(
            Instant::now()
                .saturating_duration_since(self.start)
                .as_secs_f64(),
        );
    }
}

//! The client side's series: attempts sent and skipped, and each call's duration.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::families::Families;
use super::histogram::SecondsHistogram;
use super::labels::{AttemptKind, AttemptLabels, SkipLabels, SkipReason, TargetLabels, Tok};

/// One service's series for calls to one target, resolved once.
#[derive(Debug)]
pub(crate) struct TargetRecorder {
    attempts: [Counter; AttemptKind::ALL.len()],
    skipped: [Counter; SkipReason::ALL.len()],
    duration: SecondsHistogram,
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

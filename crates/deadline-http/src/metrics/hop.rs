//! The server side's series: one request's [`Hold`] recorded when it is reported.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use tokio::time::Instant;

use super::families::{Families, Seconds};
use super::histogram::SecondsHistogram;
use super::labels::{Outcome, OutcomeLabels, PhaseLabels, ServiceLabels, Tok};
use crate::hold::HoldFacts;
use crate::phase::Phase;

const PHASES: [Phase; 4] = [Phase::Queue, Phase::Work, Phase::Calling, Phase::Stream];

/// One service's server-side series, resolved once.
#[derive(Debug)]
pub(crate) struct HopRecorder {
    requests: [Counter; Outcome::ALL.len()],
    budget: SecondsHistogram,
    queue_wait: SecondsHistogram,
    work: SecondsHistogram,
    headroom: SecondsHistogram,
    exceeded: [Counter; PHASES.len()],
    after_caller_left: Seconds,
}

impl HopRecorder {
    pub(super) fn new(families: &Families, service: &Arc<str>) -> HopRecorder {
        let labels = ServiceLabels {
            service: service.clone(),
        };
        HopRecorder {
            requests: Outcome::ALL.map(|outcome| {
                families.requests.get_or_create_owned(&OutcomeLabels {
                    service: service.clone(),
                    outcome: Tok(outcome),
                })
            }),
            budget: families.budget.get_or_create_owned(&labels),
            queue_wait: families.queue_wait.get_or_create_owned(&labels),
            work: families.work.get_or_create_owned(&labels),
            headroom: families.headroom.get_or_create_owned(&labels),
            exceeded: PHASES.map(|phase| {
                families.exceeded.get_or_create_owned(&PhaseLabels {
                    service: service.clone(),
                    phase: Tok(phase),
                })
            }),
            after_caller_left: families.after_caller_left.get_or_create_owned(&labels),
        }
    }

    /// Records `hold`, reported now (just after its reply was written, if it was).
    pub(crate) fn record(&self, hold: &HoldFacts) {
        let outcome = Outcome::of_parts(hold.outcome, hold.status);
        self.requests[outcome as usize].inc();
        let budget = hold.budget_ms.map(Duration::from_millis);
        if let Some(budget) = budget {
            self.budget.observe(budget.as_secs_f64());
        }
        if !matches!(
            outcome,
            Outcome::Malformed | Outcome::ExpiredOnArrival | Outcome::Rejected
        ) {
            self.queue_wait.observe(hold.queued.as_secs_f64());
        }
        if hold.started() {
            self.work.observe(hold.worked.as_secs_f64());
        }
        if let Some(budget) = budget {
            if hold.reply_written && outcome != Outcome::ExpiredOnArrival {
                let taken = Instant::now().saturating_duration_since(hold.arrival);
                self.headroom
                    .observe(budget.saturating_sub(taken).as_secs_f64());
            }
        }
        if let Some(phase) = hold.exceeded {
            // `PHASES` is in declaration order.
            self.exceeded[phase as usize].inc();
        }
        if !hold.after_caller_left.is_zero() {
            self.after_caller_left
                .inc_by(hold.after_caller_left.as_secs_f64());
        }
    }
}

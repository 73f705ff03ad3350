//! The server side's series: one request's [`Hold`] recorded when it is reported.

use std::sync::Arc;
use std::time::Duration;

use http::StatusCode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;
use tokio::time::Instant;

use super::{Families, OutcomeLabels, PhaseLabels, Seconds, ServiceLabels, Tok, Token};
use crate::hold::{Hold, HoldOutcome};
use crate::phase::Phase;

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
        match hold.outcome {
            HoldOutcome::Ok => Outcome::Ok,
            HoldOutcome::Deadline => Outcome::Deadline,
            HoldOutcome::HungUp => Outcome::HungUp,
            HoldOutcome::Rejected => match hold.status {
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

const PHASES: [Phase; 4] = [Phase::Queue, Phase::Work, Phase::Calling, Phase::Stream];

/// One service's server-side series, resolved once.
#[derive(Debug)]
pub(crate) struct HopRecorder {
    requests: [Counter; Outcome::ALL.len()],
    budget: Histogram,
    queue_wait: Histogram,
    work: Histogram,
    headroom: Histogram,
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
    pub(crate) fn record(&self, hold: &Hold) {
        let outcome = Outcome::of(hold);
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
        if hold.work_start.is_some() {
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
        let after = worked_after_caller_left(hold);
        if !after.is_zero() {
            self.after_caller_left.inc_by(after.as_secs_f64());
        }
    }
}

/// The part of `hold`'s work done after its caller left.
pub(crate) fn worked_after_caller_left(hold: &Hold) -> Duration {
    match (hold.caller_left, hold.work_start, hold.work_end) {
        (Some(left), Some(start), Some(end)) => end.saturating_duration_since(left.max(start)),
        _ => Duration::ZERO,
    }
}

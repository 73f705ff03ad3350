//! One command's record: a `query` span in the hop's trace and a count in the metrics, written
//! when the command ends **or when its future is dropped** (then as `cancelled`), as
//! deadline-postgres records its statements.
//!
//! The span is named `query`, the core's one name for a store's command, not after the command:
//! the tools that read traces (the `deadline` command's summaries) tell a hop from the work
//! inside it by span name, and a span named `BLPOP` would read as a hop called BLPOP.

use std::time::Duration;

use deadline::trace::{Span, name, outcome};
use deadline_http::DeadlineContext;
use tokio::time::Instant;

use crate::settings::Settings;

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    Ok,
    Deadline,
    Cancelled,
    NotSent,
    Error,
}

impl Outcome {
    fn word(self) -> &'static str {
        match self {
            Outcome::Ok => outcome::OK,
            Outcome::Deadline => outcome::DEADLINE,
            Outcome::Cancelled => outcome::CANCELLED,
            Outcome::NotSent => outcome::NOT_SENT,
            Outcome::Error => outcome::ERROR,
        }
    }

    #[cfg(feature = "metrics")]
    fn metric(self) -> deadline_http::metrics::QueryOutcome {
        use deadline_http::metrics::QueryOutcome;
        match self {
            Outcome::Ok => QueryOutcome::Ok,
            Outcome::Deadline => QueryOutcome::Deadline,
            Outcome::Cancelled => QueryOutcome::Cancelled,
            Outcome::NotSent => QueryOutcome::NotSent,
            Outcome::Error => QueryOutcome::Error,
        }
    }
}

/// A command under way; recorded when dropped.
pub(crate) struct Record<'a> {
    settings: &'a Settings,
    context: Option<DeadlineContext>,
    start: Instant,
    outcome: Outcome,
}

impl<'a> Record<'a> {
    pub(crate) fn start(settings: &'a Settings, context: Option<DeadlineContext>) -> Record<'a> {
        Record {
            settings,
            context,
            start: Instant::now(),
            // What a dropped command is recorded as.
            outcome: Outcome::Cancelled,
        }
    }

    pub(crate) fn end(&mut self, outcome: Outcome) {
        self.outcome = outcome;
    }
}

impl Drop for Record<'_> {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Some(context) = &self.context {
            let span = Span::new(
                name::QUERY,
                context.ms_since_arrival(self.start),
                context.ms_since_arrival(now),
            )
            .with_outcome(self.outcome.word());
            context.record(span);
        }
        #[cfg(feature = "metrics")]
        if let Some(metrics) = &self.settings.metrics {
            metrics.statement(
                self.outcome.metric(),
                now.saturating_duration_since(self.start),
            );
        }
        #[cfg(not(feature = "metrics"))]
        let _ = self.settings;
    }
}

/// Records a wait for a pooled connection that began at `start` and got one or gave up.
pub(crate) fn pool_wait(
    settings: &Settings,
    context: Option<&DeadlineContext>,
    start: Instant,
    got: bool,
) {
    let now = Instant::now();
    let waited: Duration = now.saturating_duration_since(start);
    if let Some(context) = context {
        // A wait that found a connection at once is not worth a span; one that waited, or gave
        // up, says where the time went.
        if !got || waited >= Duration::from_millis(1) {
            let span = Span::new(
                name::POOL,
                context.ms_since_arrival(start),
                context.ms_since_arrival(now),
            )
            .with_outcome(if got { outcome::OK } else { outcome::DEADLINE });
            context.record(span);
        }
    }
    #[cfg(feature = "metrics")]
    if let Some(metrics) = &settings.metrics {
        metrics.pool_wait(waited);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = settings;
}

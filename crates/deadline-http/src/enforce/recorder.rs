//! The recorder that fills in one request's [`Hold`] as it goes and reports it once.

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "baseline")]
use std::sync::OnceLock;
use std::time::Duration;

use http::{HeaderValue, Request, StatusCode, Uri};
use tokio::time::Instant;

use super::settings::HopSettings;
use crate::hold::{Hold, HoldOutcome};
use crate::phase::Phase;

/// Fills in one request's [`Hold`] as it goes and reports it exactly once: explicitly through
/// [`finish`](Recorder::finish), or when dropped unfinished.
///
/// Ownership does the bookkeeping: the recorder lives in the response future until the answer
/// is ready, then in the response body (or, in baseline mode, in the spawned task until the work
/// ends). Whoever holds it last reports it, so a request is reported once however it ends.
///
/// The report's two strings (`request_id` and `path`) are made only for an
/// [`on_hold`](super::EnforceDeadlineLayer::on_hold) hook: until then the recorder keeps the
/// request's header value and URI, which are clones of hyper's buffers (a reference count, no
/// copy), and the `tracing` event reads them in place. Without a hook or the hold log listening,
/// a report allocates nothing.
pub(crate) struct Recorder {
    /// Inline, not boxed: moving the recorder from the response future into the response body
    /// copies a few hundred bytes, which costs less than an allocation per request.
    draft: HoldDraft,
    settings: Arc<HopSettings>,
    /// The answer reached the caller's side (the response future completed with it).
    delivered: bool,
    reported: bool,
    /// Baseline mode: set when the caller's response future is dropped, which the recorder (on
    /// the work's own task) does not see itself.
    #[cfg(feature = "baseline")]
    pub(crate) caller_gone: Option<CallerGone>,
    /// The request's OpenTelemetry server span, ended with the report.
    #[cfg(feature = "otel")]
    span: crate::otel::ServerSpan,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("hold", &self.draft.hold)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// The recorder of `request`, which reached the hop at `arrival`: its hold starts with
    /// nothing done yet (an outcome of `Ok` until something else happens).
    pub(crate) fn arrived<B>(
        settings: Arc<HopSettings>,
        request: &Request<B>,
        arrival: Instant,
    ) -> Recorder {
        let hold = Hold {
            service: settings.name.clone(),
            // Filled in only for an `on_hold` hook (see `Recorder`).
            request_id: None,
            method: request.method().clone(),
            path: String::new(),
            budget_ms: None,
            arrival,
            work_start: None,
            work_end: None,
            queued: Duration::ZERO,
            worked: Duration::ZERO,
            streamed: Duration::ZERO,
            outcome: HoldOutcome::Ok,
            status: None,
            reply_written: false,
            exceeded: None,
            caller_left: None,
        };
        // The request id and the URI are read only when something will report them: the
        // hold log (when its target is enabled) or an `on_hold` hook. Otherwise they would be
        // copied into every request's recorder and moved with it for nothing.
        let detail = (settings.on_hold.is_some()
            || tracing::enabled!(target: "deadline::hold", tracing::Level::INFO))
        .then(|| {
            Box::new(Detail {
                request_id: request
                    .headers()
                    .get(super::request_id::REQUEST_ID_HEADER)
                    .filter(|id| super::request_id::is_usable_request_id(id.as_bytes()))
                    .cloned(),
                uri: request.uri().clone(),
            })
        });
        #[cfg(feature = "otel")]
        let span =
            crate::otel::ServerSpan::start(&settings.tracing, request.method(), request.headers());
        Recorder {
            draft: HoldDraft { hold, detail },
            settings,
            delivered: false,
            reported: false,
            #[cfg(feature = "baseline")]
            caller_gone: None,
            #[cfg(feature = "otel")]
            span,
        }
    }

    /// The hold so far (without its `request_id` and `path`, which only the hook gets).
    pub(crate) fn hold(&self) -> &Hold {
        &self.draft.hold
    }

    /// The context of the request's server span (the parent of its outbound attempts).
    #[cfg(feature = "otel")]
    pub(crate) fn span_context(&self) -> &opentelemetry::trace::SpanContext {
        self.span.context()
    }

    /// The budget the caller sent, in ms (0 for a spent one).
    pub(crate) fn set_budget(&mut self, budget_ms: Option<u64>) {
        self.draft.hold.budget_ms = budget_ms;
    }

    /// The request stopped waiting for a slot at `at` without starting.
    pub(crate) fn left_queue(&mut self, at: Instant) {
        self.draft.hold.queued = at.saturating_duration_since(self.draft.hold.arrival);
    }

    /// The work started at `at`.
    pub(crate) fn start(&mut self, at: Instant) {
        self.left_queue(at);
        self.draft.hold.work_start = Some(at);
    }

    /// The work ended (or was dropped) at `at`. Only the first call counts.
    pub(crate) fn end(&mut self, at: Instant) {
        if let (Some(start), None) = (self.draft.hold.work_start, self.draft.hold.work_end) {
            self.draft.hold.work_end = Some(at);
            self.draft.hold.worked = at.saturating_duration_since(start);
        }
    }

    /// The response body streamed until `at` (since the work ended, or since arrival if it
    /// never started).
    pub(crate) fn streamed_until(&mut self, at: Instant) {
        let hold = &mut self.draft.hold;
        let from = hold.work_end.unwrap_or(hold.arrival);
        hold.streamed = at.saturating_duration_since(from);
    }

    /// The caller went away at `at`.
    pub(crate) fn caller_left(&mut self, at: Instant) {
        self.draft.hold.caller_left = Some(at);
    }

    /// The settings of the hop this request is held by.
    pub(crate) fn settings(&self) -> &HopSettings {
        &self.settings
    }

    /// The layer answers 504 because the time ran out while the request was in `phase`.
    pub(crate) fn exceeded(&mut self, phase: Phase) {
        self.draft.hold.exceeded = Some(phase);
    }

    /// The answer is `status` (if any), with `outcome`.
    pub(crate) fn answer(&mut self, status: Option<StatusCode>, outcome: HoldOutcome) {
        self.draft.hold.status = status;
        self.draft.hold.outcome = outcome;
    }

    /// The answer was handed to the caller's side: from now on, a drop means the reply was not
    /// written, not that the caller hung up before it was ready.
    pub(crate) fn delivered(&mut self) {
        self.delivered = true;
    }

    /// Reports the hold now.
    pub(crate) fn finish(mut self, reply_written: bool) {
        self.draft.hold.reply_written = reply_written;
        self.report();
    }

    fn report(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        self.settings.metrics.record(&self.draft.hold);
        self.settings.prometheus.record(&self.draft.hold);
        #[cfg(feature = "otel")]
        self.span.end(&self.draft.hold);
        let detail = self.draft.detail.as_deref();
        let request_id = detail
            .and_then(|d| d.request_id.as_ref())
            .and_then(|v| v.to_str().ok());
        let path = detail.map_or("", |d| d.uri.path());
        let hold = &self.draft.hold;
        tracing::info!(
            target: "deadline::hold",
            service = %hold.service,
            request_id,
            method = %hold.method,
            path,
            budget_ms = hold.budget_ms,
            queued_ms = u64::try_from(hold.queued.as_millis()).unwrap_or(u64::MAX),
            worked_ms = u64::try_from(hold.worked.as_millis()).unwrap_or(u64::MAX),
            streamed_ms = u64::try_from(hold.streamed.as_millis()).unwrap_or(u64::MAX),
            exceeded = hold.exceeded.map(Phase::as_str),
            outcome = hold.outcome.as_str(),
            status = hold.status.map(|s| s.as_u16()),
            reply_written = hold.reply_written,
            "worker hold"
        );
        if let Some(hook) = &self.settings.on_hold {
            self.draft.hold.request_id = request_id.map(str::to_owned);
            self.draft.hold.path = path.to_owned();
            hook(&self.draft.hold);
        }
    }
}

/// What a [`Recorder`] keeps for the report: the hold so far and what its strings are made
/// from.
struct HoldDraft {
    /// `request_id` and `path` stay empty here until [`report`](Recorder::report) needs them.
    hold: Hold,
    /// What the strings are made from, kept only when the hold log or a hook listens (boxed:
    /// the recorder moves with the request's future and body, and most services do not listen).
    detail: Option<Box<Detail>>,
}

/// The request's id header and URI, for the hold log and the `on_hold` hook.
struct Detail {
    request_id: Option<HeaderValue>,
    uri: Uri,
}

impl Drop for Recorder {
    fn drop(&mut self) {
        if self.reported {
            return;
        }
        if !self.delivered {
            // The response future (or, in baseline mode, the task's result) was dropped before
            // the answer reached the caller's side: the caller went away. One that left while
            // still queued has queued until now (regression: it was logged as 0 ms queued).
            let now = Instant::now();
            if self.draft.hold.work_start.is_none() {
                self.left_queue(now);
            }
            self.end(now);
            self.draft.hold.outcome = HoldOutcome::HungUp;
            #[cfg(feature = "baseline")]
            let now = self
                .caller_gone
                .as_ref()
                .and_then(|gone| gone.at())
                .unwrap_or(now);
            self.draft.hold.caller_left = Some(now);
        }
        self.draft.hold.reply_written = false;
        self.report();
    }
}

/// When the caller of a baseline request went away, shared by its response future (which sees
/// it) and its recorder (on the work's task, which reports it).
#[cfg(feature = "baseline")]
#[derive(Clone, Debug, Default)]
pub(crate) struct CallerGone(Arc<OnceLock<Instant>>);

#[cfg(feature = "baseline")]
impl CallerGone {
    /// When the caller went away, if it has (or when its response future was dropped after
    /// the answer; the recorder then knows the answer was delivered and ignores this).
    pub(crate) fn at(&self) -> Option<Instant> {
        self.0.get().copied()
    }
}

/// Notes the moment the response future is dropped.
#[cfg(feature = "baseline")]
pub(crate) struct CallerWatch(pub(crate) CallerGone);

#[cfg(feature = "baseline")]
impl Drop for CallerWatch {
    fn drop(&mut self) {
        let _ = self.0.0.set(Instant::now());
    }
}

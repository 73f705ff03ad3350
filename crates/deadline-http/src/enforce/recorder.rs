//! The recorder that keeps one request's hold (a compact draft) as it goes and reports it once.

use std::fmt;
use std::sync::Arc;
#[cfg(feature = "baseline")]
use std::sync::OnceLock;
use std::time::Duration;

use http::{HeaderValue, Method, Request, StatusCode, Uri};
use tokio::time::Instant;

use super::settings::HopSettings;
use crate::hold::{Hold, HoldFacts, HoldOutcome};
use crate::phase::Phase;

/// Keeps one request's hold as it goes (a compact draft, made into a [`Hold`] only for a reader
/// that takes one) and reports it exactly once: explicitly through
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
    /// Inline, not boxed, and kept small (times as nanoseconds since arrival, the strings
    /// elsewhere): the recorder moves with the request's future and then its response body,
    /// several times each, so every byte here is copied on every request; an allocation to
    /// avoid the copies would cost more.
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
            .field("hold", &self.hold())
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
        let (method, other_method) = method_parts(request.method());
        let draft = HoldDraft {
            arrival,
            method,
            other_method,
            budget_ms: UNSET,
            queued: 0,
            work_start: UNSET,
            work_end: UNSET,
            streamed: 0,
            caller_left: UNSET,
            status: None,
            outcome: HoldOutcome::Ok,
            exceeded: None,
            reply_written: false,
            detail,
        };
        #[cfg(feature = "otel")]
        let span =
            crate::otel::ServerSpan::start(&settings.tracing, request.method(), request.headers());
        Recorder {
            draft,
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
    pub(crate) fn hold(&self) -> Hold {
        let d = &self.draft;
        let at = |ns: u64| (ns != UNSET).then(|| d.at(ns));
        Hold {
            service: self.settings.name.clone(),
            request_id: None,
            method: d.method().clone(),
            path: String::new(),
            budget_ms: d.budget_ms(),
            arrival: d.arrival,
            work_start: at(d.work_start),
            work_end: at(d.work_end),
            queued: Duration::from_nanos(d.queued),
            worked: d.worked(),
            streamed: Duration::from_nanos(d.streamed),
            outcome: d.outcome,
            status: d.status,
            reply_written: d.reply_written,
            exceeded: d.exceeded,
            caller_left: at(d.caller_left),
        }
    }

    /// The hold's figures for its counters, series, log and answer headers, without making
    /// the whole hold.
    pub(crate) fn facts(&self) -> HoldFacts {
        let d = &self.draft;
        let ms = |ns: u64| (ns != UNSET).then_some(ns / 1_000_000);
        let after_caller_left =
            if d.caller_left != UNSET && d.work_start != UNSET && d.work_end != UNSET {
                d.work_end.saturating_sub(d.caller_left.max(d.work_start))
            } else {
                0
            };
        HoldFacts {
            outcome: d.outcome,
            status: d.status,
            budget_ms: d.budget_ms(),
            arrival: d.arrival,
            work_start_ms: ms(d.work_start),
            work_end_ms: ms(d.work_end),
            queued: Duration::from_nanos(d.queued),
            worked: d.worked(),
            reply_written: d.reply_written,
            exceeded: d.exceeded,
            after_caller_left: Duration::from_nanos(after_caller_left),
        }
    }

    /// The context of the request's server span (the parent of its outbound attempts).
    #[cfg(feature = "otel")]
    pub(crate) fn span_context(&self) -> &opentelemetry::trace::SpanContext {
        self.span.context()
    }

    /// The budget the caller sent, in ms (0 for a spent one).
    pub(crate) fn set_budget(&mut self, budget_ms: Option<u64>) {
        // A budget of `UNSET` ms (585 million years) is read as the largest one below it.
        self.draft.budget_ms = budget_ms.map_or(UNSET, |ms| ms.min(UNSET - 1));
    }

    /// The request stopped waiting for a slot at `at` without starting.
    pub(crate) fn left_queue(&mut self, at: Instant) {
        self.draft.queued = self.draft.since(at);
    }

    /// The work started at `at`.
    pub(crate) fn start(&mut self, at: Instant) {
        let since = self.draft.since(at);
        self.draft.queued = since;
        self.draft.work_start = since;
    }

    /// The work started as the request arrived: nothing queued.
    pub(crate) fn start_on_arrival(&mut self) {
        self.draft.queued = 0;
        self.draft.work_start = 0;
    }

    /// The work ended (or was dropped) at `at`. Only the first call counts.
    pub(crate) fn end(&mut self, at: Instant) {
        if self.draft.work_start != UNSET && self.draft.work_end == UNSET {
            self.draft.work_end = self.draft.since(at);
        }
    }

    /// The response body streamed until `at` (since the work ended, or since arrival if it
    /// never started).
    pub(crate) fn streamed_until(&mut self, at: Instant) {
        let d = &mut self.draft;
        let from = if d.work_end == UNSET { 0 } else { d.work_end };
        d.streamed = d.since(at).saturating_sub(from);
    }

    /// The caller went away at `at`.
    pub(crate) fn caller_left(&mut self, at: Instant) {
        self.draft.caller_left = self.draft.since(at);
    }

    /// The status the answer stands for so far.
    pub(crate) fn status(&self) -> Option<StatusCode> {
        self.draft.status
    }

    /// The settings of the hop this request is held by.
    pub(crate) fn settings(&self) -> &HopSettings {
        &self.settings
    }

    /// The layer answers 504 because the time ran out while the request was in `phase`.
    pub(crate) fn exceeded(&mut self, phase: Phase) {
        self.draft.exceeded = Some(phase);
    }

    /// The answer is `status` (if any), with `outcome`.
    pub(crate) fn answer(&mut self, status: Option<StatusCode>, outcome: HoldOutcome) {
        self.draft.status = status;
        self.draft.outcome = outcome;
    }

    /// The answer was handed to the caller's side: from now on, a drop means the reply was not
    /// written, not that the caller hung up before it was ready.
    pub(crate) fn delivered(&mut self) {
        self.delivered = true;
    }

    /// Reports the hold now.
    pub(crate) fn finish(mut self, reply_written: bool) {
        self.draft.reply_written = reply_written;
        self.report();
    }

    fn report(&mut self) {
        if std::mem::replace(&mut self.reported, true) {
            return;
        }
        let facts = self.facts();
        self.settings.metrics.count(&facts);
        self.settings.prometheus.record(&facts);
        let detail = self.draft.detail.as_deref();
        let request_id = detail
            .and_then(|d| d.request_id.as_ref())
            .and_then(|v| v.to_str().ok());
        let path = detail.map_or("", |d| d.uri.path());
        // The log reads the draft's figures: the event checks its own callsite and evaluates
        // them only when something listens.
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        tracing::info!(
            target: "deadline::hold",
            service = %self.settings.name,
            request_id,
            method = %self.draft.method(),
            path,
            budget_ms = facts.budget_ms,
            queued_ms = ms(facts.queued),
            worked_ms = ms(facts.worked),
            streamed_ms = ms(Duration::from_nanos(self.draft.streamed)),
            exceeded = facts.exceeded.map(Phase::as_str),
            outcome = facts.outcome.as_str(),
            status = facts.status.map(|s| s.as_u16()),
            reply_written = facts.reply_written,
            "worker hold"
        );
        // The whole hold is made only for a reader that takes one: the OpenTelemetry span or a
        // hook. The counters, the series and the log take its figures above.
        #[cfg(feature = "otel")]
        let span = self.span.is_on();
        #[cfg(not(feature = "otel"))]
        let span = false;
        if !span && self.settings.on_hold.is_none() {
            return;
        }
        let mut hold = self.hold();
        #[cfg(feature = "otel")]
        self.span.end(&hold);
        if let Some(hook) = &self.settings.on_hold {
            hold.request_id = request_id.map(str::to_owned);
            hold.path = path.to_owned();
            hook(&hold);
        }
    }
}

/// A time not reached (yet), or no budget, in a [`HoldDraft`].
const UNSET: u64 = u64::MAX;

/// The methods a [`HoldDraft`] keeps as one byte, its index here; any other method is boxed.
static STANDARD_METHODS: [Method; 9] = [
    Method::GET,
    Method::POST,
    Method::PUT,
    Method::DELETE,
    Method::HEAD,
    Method::OPTIONS,
    Method::PATCH,
    Method::CONNECT,
    Method::TRACE,
];

/// `method` in one byte, its index in [`STANDARD_METHODS`], and the method itself boxed when it
/// is not a standard one (the index is then not read).
fn method_parts(method: &Method) -> (u8, Option<Box<Method>>) {
    match STANDARD_METHODS.iter().position(|m| m == method) {
        Some(i) => (i as u8, None),
        None => (0, Some(Box::new(method.clone()))),
    }
}

/// What a [`Recorder`] keeps for the report: the hold so far, in a compact form that
/// [`Recorder::hold`] turns into a [`Hold`], and what its strings are made from.
///
/// Every time is nanoseconds since `arrival` ([`UNSET`] when not reached), rather than an
/// `Option<Instant>` or a `Duration` (16 bytes each), `worked` follows from the work's start and
/// end, and the service's name comes from the settings: the draft is about half the size of a
/// `Hold`, which moves with every request. A `u64` of nanoseconds lasts 584 years. The method is
/// one byte (an index into [`STANDARD_METHODS`]) and the budget a `u64` with [`UNSET`] for none, so that the whole
/// recorder stays within 128 bytes, which the compiler moves with a few vector stores instead of
/// a call to `memcpy` (on x86-64 with the default target features; a test holds the size).
struct HoldDraft {
    arrival: Instant,
    /// The method's index in [`STANDARD_METHODS`], read only when `other_method` is `None`.
    method: u8,
    /// The method when it is not one of [`STANDARD_METHODS`].
    other_method: Option<Box<Method>>,
    /// The budget the caller sent, in ms (0 for a spent one), or [`UNSET`] for none.
    budget_ms: u64,
    queued: u64,
    work_start: u64,
    work_end: u64,
    streamed: u64,
    caller_left: u64,
    status: Option<StatusCode>,
    outcome: HoldOutcome,
    exceeded: Option<Phase>,
    reply_written: bool,
    /// What the strings are made from, kept only when the hold log or a hook listens (boxed:
    /// the recorder moves with the request's future and body, and most services do not listen).
    detail: Option<Box<Detail>>,
}

impl HoldDraft {
    /// The request's method.
    fn method(&self) -> &Method {
        match &self.other_method {
            Some(method) => method,
            None => &STANDARD_METHODS[usize::from(self.method)],
        }
    }

    /// The budget the caller sent, in ms, if any.
    fn budget_ms(&self) -> Option<u64> {
        (self.budget_ms != UNSET).then_some(self.budget_ms)
    }

    /// `at` in nanoseconds since arrival (0 before it), below [`UNSET`].
    fn since(&self, at: Instant) -> u64 {
        let ns = at.saturating_duration_since(self.arrival).as_nanos();
        u64::try_from(ns).unwrap_or(UNSET - 1).min(UNSET - 1)
    }

    /// The instant `ns` after arrival.
    fn at(&self, ns: u64) -> Instant {
        self.arrival
            .checked_add(Duration::from_nanos(ns))
            .unwrap_or(self.arrival)
    }

    /// How long the work held the slot: from its start to its end, once it has ended.
    fn worked(&self) -> Duration {
        if self.work_start == UNSET || self.work_end == UNSET {
            return Duration::ZERO;
        }
        Duration::from_nanos(self.work_end.saturating_sub(self.work_start))
    }
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
            if self.draft.work_start == UNSET {
                self.left_queue(now);
            }
            self.end(now);
            self.draft.outcome = HoldOutcome::HungUp;
            #[cfg(feature = "baseline")]
            let now = self
                .caller_gone
                .as_ref()
                .and_then(|gone| gone.at())
                .unwrap_or(now);
            self.caller_left(now);
        }
        self.draft.reply_written = false;
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use http::Method;

    use super::*;
    use crate::EnforceDeadlineLayer;

    /// The recorder moves with every request's future and then its body: at 128 bytes or less
    /// the compiler moves it with vector stores (on x86-64 with the default target features),
    /// above that each move is a call to `memcpy` (about 30 instructions, several times a
    /// request). Run with every feature on, as the workspace's tests are, it has no byte to
    /// spare.
    #[test]
    fn the_recorder_fits_in_128_bytes() {
        let size = std::mem::size_of::<Recorder>();
        assert!(size <= 128, "the recorder is {size} bytes");
    }

    /// Every standard method is kept as its one-byte tag, and any other one as itself.
    #[test]
    fn the_method_comes_back_from_its_tag() {
        for method in STANDARD_METHODS
            .iter()
            .chain(&[Method::from_bytes(b"PURGE").unwrap()])
        {
            let (settings, _) = plain();
            let request = Request::builder().method(method.clone()).body(()).unwrap();
            let recorder = Recorder::arrived(settings, &request, Instant::now());
            assert_eq!(recorder.hold().method, *method);
            let other = recorder.draft.other_method.is_some();
            assert_eq!(other, method.as_str() == "PURGE", "{method}");
        }
    }

    /// A hop's settings with nothing listening but the counters, and a `GET /`.
    fn plain() -> (Arc<HopSettings>, Request<()>) {
        let layer = EnforceDeadlineLayer::new("inventory");
        let request = Request::get("/").body(()).unwrap();
        (Arc::new(layer.settings.clone()), request)
    }

    /// The compact draft gives back the hold the recorder was told, to the nanosecond: the
    /// work's start and end and the caller's leaving as instants, the queue, work and stream
    /// as durations; and a hook gets that same hold.
    #[tokio::test(start_paused = true)]
    async fn the_hold_is_what_the_recorder_was_told() {
        let seen: Arc<Mutex<Vec<Hold>>> = Arc::default();
        let sink = Arc::clone(&seen);
        let layer = EnforceDeadlineLayer::new("inventory")
            .on_hold(move |hold| sink.lock().unwrap().push(hold.clone()));
        let settings = Arc::new(layer.settings.clone());
        let request = Request::post("/stock/7").body(()).unwrap();
        let arrival = Instant::now();
        let at = |us: u64| arrival + Duration::from_micros(us);
        let mut recorder = Recorder::arrived(settings, &request, arrival);
        recorder.set_budget(Some(950));
        assert_eq!(recorder.facts().work_start_ms, None);
        recorder.start(at(3_250));
        recorder.end(at(41_254_001));
        recorder.end(at(50_000_000)); // only the first end counts
        recorder.streamed_until(at(60_000_123));
        recorder.caller_left(at(45_000_007));
        recorder.answer(Some(StatusCode::OK), HoldOutcome::Ok);
        recorder.delivered();

        let hold = recorder.hold();
        assert_eq!(&*hold.service, "inventory");
        assert_eq!(hold.method, Method::POST);
        assert_eq!(hold.budget_ms, Some(950));
        assert_eq!(hold.arrival, arrival);
        assert_eq!(hold.work_start, Some(at(3_250)));
        assert_eq!(hold.work_end, Some(at(41_254_001)));
        assert_eq!(hold.queued, Duration::from_micros(3_250));
        assert_eq!(hold.worked, Duration::from_micros(41_254_001 - 3_250));
        assert_eq!(
            hold.streamed,
            Duration::from_micros(60_000_123 - 41_254_001)
        );
        assert_eq!(hold.caller_left, Some(at(45_000_007)));
        assert_eq!(hold.status, Some(StatusCode::OK));
        let facts = recorder.facts();
        assert!(facts.started());
        assert_eq!((facts.queued, facts.worked), (hold.queued, hold.worked));
        assert_eq!(
            facts.after_caller_left,
            Duration::ZERO,
            "left after the work ended"
        );
        let times = recorder.facts();
        assert_eq!(
            (times.work_start_ms, times.work_end_ms),
            (Some(3), Some(41_254))
        );
        assert_eq!((times.queued, times.worked), (hold.queued, hold.worked));

        recorder.finish(true);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let reported = &seen[0];
        assert_eq!(reported.path, "/stock/7");
        assert!(reported.reply_written);
        assert_eq!(
            (reported.work_start, reported.work_end, reported.caller_left),
            (hold.work_start, hold.work_end, hold.caller_left)
        );
        assert_eq!(
            (reported.queued, reported.worked, reported.streamed),
            (hold.queued, hold.worked, hold.streamed)
        );
    }

    /// Work done after the caller left is counted from when it left (or from the start, for a
    /// caller gone before the work began) to the work's end.
    #[tokio::test(start_paused = true)]
    async fn the_work_after_the_caller_left_is_counted_from_when_it_left() {
        let (settings, request) = plain();
        for (left_ms, after_ms) in [(10, 31), (1, 38), (50, 0)] {
            let arrival = Instant::now();
            let mut recorder = Recorder::arrived(settings.clone(), &request, arrival);
            recorder.start(arrival + Duration::from_millis(3));
            recorder.caller_left(arrival + Duration::from_millis(left_ms));
            recorder.end(arrival + Duration::from_millis(41));
            let facts = recorder.facts();
            assert_eq!(
                facts.after_caller_left,
                Duration::from_millis(after_ms),
                "{left_ms}"
            );
            recorder.delivered();
            recorder.finish(true);
        }
    }

    /// Work times in the answer headers are whole ms since arrival, rounded down, as the
    /// context counts them.
    #[tokio::test(start_paused = true)]
    async fn the_headers_times_are_whole_ms_rounded_down() {
        let (settings, request) = plain();
        let arrival = Instant::now();
        let ctx = crate::DeadlineContext::new(None, Duration::ZERO, arrival);
        let mut recorder = Recorder::arrived(settings, &request, arrival);
        let start = arrival + Duration::from_micros(3_750);
        let end = arrival + Duration::from_micros(41_999);
        recorder.start(start);
        recorder.end(end);
        let times = recorder.facts();
        assert_eq!(times.work_start_ms, Some(ctx.ms_since_arrival(start)));
        assert_eq!(times.work_end_ms, Some(ctx.ms_since_arrival(end)));
        assert_eq!(
            (times.work_start_ms, times.work_end_ms),
            (Some(3), Some(41))
        );
        recorder.delivered();
        recorder.finish(true);
    }

    /// A request that never started: no work times, nothing worked, and the stream counted
    /// from arrival.
    #[tokio::test(start_paused = true)]
    async fn a_request_that_never_started_has_no_work_times() {
        let (settings, request) = plain();
        let arrival = Instant::now();
        let mut recorder = Recorder::arrived(settings, &request, arrival);
        recorder.left_queue(arrival + Duration::from_millis(7));
        recorder.end(arrival + Duration::from_millis(9)); // no start: ignored
        recorder.streamed_until(arrival + Duration::from_millis(12));
        let hold = recorder.hold();
        assert_eq!(
            (hold.work_start, hold.work_end, hold.caller_left),
            (None, None, None)
        );
        assert_eq!(hold.queued, Duration::from_millis(7));
        assert_eq!(hold.worked, Duration::ZERO);
        assert_eq!(hold.streamed, Duration::from_millis(12));
        recorder.delivered();
        recorder.finish(true);
    }
}

//! Baseline mode (feature `baseline`): a service built without this library, for comparisons.
//!
//! [`enforce(false)`](super::EnforceDeadlineLayer::enforce) turns enforcement off: budget
//! headers are ignored (never a 400 or 504), slots are a plain FIFO wait, and the queue wait and
//! the work run on a task of their own (`tokio::spawn`), so they run to their end even when the
//! caller hangs up, like a database call no one cancels. That hold is still reported, when the
//! work ends, as [`HoldOutcome::HungUp`] with its real `work_end`
//! and `reply_written: false`. Traces are still added.
//!
//! It exists for the `deadline` command's demo and load comparison, so it sits behind a cargo
//! feature: the library's default surface carries no such hook.

use std::sync::Arc;

use http::{Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;
use tower_service::Service;

use super::EnforceDeadlineLayer;
use super::future::{Reply, ResponseFuture, State, Task};
use super::recorder::{CallerGone, CallerWatch, Recorder};
use super::settings::HopSettings;
use crate::context::{Activity, DeadlineContext};
use crate::hold::HoldOutcome;

impl EnforceDeadlineLayer {
    /// `false` turns enforcement off (the baseline): budget headers are ignored, slots are a
    /// plain wait, and work runs to its end even when the caller hangs up. Traces and hold
    /// reports still work. Default `true`. See the [baseline module](self).
    pub fn enforce(mut self, enforce: bool) -> Self {
        self.settings.enforce = enforce;
        self
    }
}

/// The queue wait and the work on their own task, run to their end whatever happens to the
/// caller.
pub(crate) fn call<S, ReqB, ResB, F>(
    inner: S,
    settings: &Arc<HopSettings>,
    mut request: Request<ReqB>,
    mut recorder: Recorder,
    arrival: Instant,
) -> ResponseFuture<ResB, S::Error, F>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Send + 'static,
{
    let ctx = DeadlineContext::new(None, settings.reserve, arrival);
    let caller = super::Caller::of(request.headers());
    // Baseline reads no budget: a budget header's presence is what "sent a budget" means here.
    let budgeted = request.headers().contains_key(deadline::BUDGET_HEADER);
    let expose = settings
        .exposure
        .allows(request.headers(), request.extensions(), budgeted);
    if settings.extensions {
        request.extensions_mut().insert(ctx.clone());
    }
    let slots = settings.slots.clone();
    let task_ctx = ctx.clone();
    let gone = CallerGone::default();
    recorder.caller_gone = Some(gone.clone());
    let handle = tokio::spawn(async move {
        let permit = match slots {
            Some(slots) => {
                let _queued = task_ctx.enter(Activity::Queued);
                Some(slots.acquire().await)
            }
            None => None,
        };
        recorder.start(Instant::now());
        let result = task_ctx.scope(inner.oneshot(request)).await;
        recorder.end(Instant::now());
        drop(permit);
        match &result {
            Ok(response) => recorder.answer(
                Some(response.status()),
                HoldOutcome::of_status(response.status()),
            ),
            Err(_) => recorder.answer(None, HoldOutcome::Error),
        }
        (result, recorder)
    });
    let task = Task {
        _watch: CallerWatch(gone),
        handle,
    };
    let reply = Reply {
        cutoff: None,
        ctx: Some(ctx),
        settings: settings.clone(),
        recorder: None,
        caller,
        expose,
    };
    ResponseFuture::new(State::Baseline { task }, None, reply)
}

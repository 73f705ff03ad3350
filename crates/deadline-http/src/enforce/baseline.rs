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

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use http::{Request, Response, StatusCode};
use tokio::task::{JoinError, JoinHandle};
use tokio::time::Instant;
use tower::ServiceExt;
use tower_service::Service;

use super::body::EnforceBody;
use super::future::{Reply, ResponseFuture, State, fail, text_response};
use super::hold::{HoldOutcome, Recorder};
use super::hop_trace::root_only;
use super::{EnforceDeadlineLayer, HopSettings};
use crate::context::{Activity, DeadlineContext};

/// A baseline task: the work's own task, handing back its result and the hold it filled in.
pub(crate) struct Task<B, E> {
    /// First, so a caller that leaves is noted before a finished task's hold is reported.
    _watch: CallerWatch,
    handle: JoinHandle<(Result<Response<B>, E>, Recorder)>,
}

/// When the caller of a baseline request went away, shared by its response future (which sees
/// it) and its recorder (on the work's task, which reports it).
#[derive(Clone, Debug, Default)]
pub(crate) struct CallerGone(Arc<OnceLock<Instant>>);

impl CallerGone {
    /// When the caller went away, if it has (or when its response future was dropped after
    /// the answer; the recorder then knows the answer was delivered and ignores this).
    pub(crate) fn at(&self) -> Option<Instant> {
        self.0.get().copied()
    }
}

/// Notes the moment the response future is dropped.
struct CallerWatch(CallerGone);

impl Drop for CallerWatch {
    fn drop(&mut self) {
        let _ = self.0.0.set(Instant::now());
    }
}

/// The task's end: its output, or why it has none.
pub(crate) type Joined<B, E> = Result<(Result<Response<B>, E>, Recorder), JoinError>;

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
    request.extensions_mut().insert(ctx.clone());
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
        ctx,
        settings: settings.clone(),
        recorder: None,
        caller,
        expose,
    };
    ResponseFuture::new(State::Baseline { task }, None, reply)
}

/// Waits for the task.
pub(crate) fn poll<B, E>(task: &mut Task<B, E>, cx: &mut Context<'_>) -> Poll<Joined<B, E>> {
    std::pin::Pin::new(&mut task.handle).poll(cx)
}

/// The answer once the task ended: its response with this hop's trace, its error, or a 503 if
/// the runtime cancelled it; a panic in it is resumed here.
pub(crate) fn answer<B, E>(
    reply: &mut Reply,
    joined: Joined<B, E>,
) -> Result<Response<EnforceBody<B>>, E> {
    match joined {
        Ok((Ok(response), recorder)) => Ok(reply.deliver(recorder, response, Instant::now())),
        Ok((Err(error), recorder)) => {
            fail(recorder);
            Err(error)
        }
        Err(join) => match join.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Cancelled: the runtime is shutting down. The task's recorder was dropped with it
            // and reported the hold. The answer still carries this hop's trace, as every
            // answer the layer gives does.
            Err(_) => {
                let status = StatusCode::SERVICE_UNAVAILABLE;
                let end_ms = reply.ctx.ms_since_arrival(Instant::now());
                let mut response = text_response(
                    status,
                    EnforceBody::text(format!("{} is shutting down\n", reply.settings.name), None),
                );
                if reply.expose {
                    response.headers_mut().insert(
                        deadline::TRACE_HEADER,
                        root_only(&reply.settings, end_ms, status),
                    );
                }
                Ok(response)
            }
        },
    }
}

//! Work that belongs to the request but runs off its task: [`spawn`] and [`run_blocking`].
//!
//! A plain `tokio::spawn` loses the request: task-locals do not flow into the new task, so its
//! outbound calls carry no budget, and the task is not cancelled when the request is (at its
//! deadline or when the caller hangs up), so it keeps a worker busy for nobody. [`spawn`]
//! carries the current [`DeadlineContext`] into the task and aborts the task at the cutoff (the
//! deadline less the reply reserve) and when its [`RequestTask`] handle is dropped, which is what
//! happens when the request's future is dropped.
//!
//! # What cannot be stopped
//!
//! A blocking call cannot be interrupted: [`run_blocking`] stops *waiting* for it at the cutoff
//! (the request answers 504 on time), but the closure runs on its blocking-pool thread until it
//! returns. Give it a [`BlockingCheck`] to look at between steps, and it can stop early:
//! the check fails once the cutoff has passed or once nobody is waiting for the result. A
//! closure that never checks runs to its end, even though the request was answered long ago.
//!
//! # Traces of spawned work at the cutoff
//!
//! Outbound calls made inside a [`spawn`]ed task record their spans in the request's context
//! like any other. At the cutoff, though, the task is aborted *after* the handler is dropped,
//! and an abort takes effect at the task's next poll: the 504's `Deadline-Trace` is written
//! before that, so a call still in flight inside a spawned task can be missing from it (it is
//! still stopped). Calls awaited on the handler's own task are always in the trace.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use tokio::task::{JoinError, JoinHandle};

use crate::context::{Activity, DeadlineContext};
use crate::error::DeadlineExceeded;

/// Runs `future` on a new tokio task that carries the current request's [`DeadlineContext`]
/// and is aborted at the request's cutoff, or when the returned handle is dropped.
///
/// Awaiting the handle gives the future's output, or a [`TaskError`] saying whether the task
/// was cut at the deadline, panicked, or was cancelled. Outside a request (no current context)
/// the task has no deadline but is still aborted with its handle. If the cutoff has already
/// passed, the future is not polled at all.
///
/// ```
/// # async fn handler() -> Result<(), deadline_http::TaskError> {
/// let a = deadline_http::spawn(async { /* call orders */ 1 });
/// let b = deadline_http::spawn(async { /* call inventory */ 2 });
/// let (a, b) = (a.await?, b.await?);
/// # let _ = (a, b); Ok(()) }
/// ```
pub fn spawn<F>(future: F) -> RequestTask<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handle = match DeadlineContext::current() {
        None => tokio::spawn(async move { Ok(future.await) }),
        Some(ctx) => {
            let cutoff = ctx.cutoff();
            let task_ctx = ctx.clone();
            tokio::spawn(ctx.scope(async move {
                let Some(cutoff) = cutoff else {
                    return Ok(future.await);
                };
                task_ctx.check()?;
                let cutoff = crate::time::sleep_until(cutoff);
                tokio::select! {
                    biased;
                    output = future => Ok(output),
                    () = cutoff => Err(DeadlineExceeded::new(task_ctx.activity())),
                }
            }))
        }
    };
    RequestTask { handle }
}

/// A task started by [`spawn`]: await it for its output; drop it to abort the task.
#[must_use = "dropping a RequestTask aborts its task"]
pub struct RequestTask<T> {
    handle: JoinHandle<Result<T, DeadlineExceeded>>,
}

impl<T> fmt::Debug for RequestTask<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RequestTask")
            .field("id", &self.handle.id())
            .field("finished", &self.handle.is_finished())
            .finish()
    }
}

impl<T> RequestTask<T> {
    /// Aborts the task now (it stops at its next await point).
    pub fn abort(&self) {
        self.handle.abort();
    }

    /// Whether the task has finished (completed, been cut, panicked or been aborted).
    pub fn is_finished(&self) -> bool {
        self.handle.is_finished()
    }
}

impl<T> Drop for RequestTask<T> {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl<T> Future for RequestTask<T> {
    type Output = Result<T, TaskError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let joined = ready!(Pin::new(&mut self.handle).poll(cx));
        Poll::Ready(match joined {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(exceeded)) => Err(TaskError::Deadline(exceeded)),
            Err(error) => Err(TaskError::from_join(error)),
        })
    }
}

/// Why a [`RequestTask`] gave no output.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskError {
    /// The request's cutoff passed first: the task was stopped at its next await point.
    Deadline(DeadlineExceeded),
    /// The task panicked.
    Panicked {
        /// The panic message, when it was a string.
        message: String,
    },
    /// The task was cancelled: aborted, or its runtime shut down.
    Cancelled,
}

impl TaskError {
    fn from_join(error: JoinError) -> TaskError {
        match error.try_into_panic() {
            Ok(payload) => {
                let message = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                TaskError::Panicked { message }
            }
            Err(_) => TaskError::Cancelled,
        }
    }
}

impl fmt::Display for TaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskError::Deadline(exceeded) => write!(f, "request task stopped: {exceeded}"),
            TaskError::Panicked { message } if message.is_empty() => {
                f.write_str("request task panicked")
            }
            TaskError::Panicked { message } => write!(f, "request task panicked: {message}"),
            TaskError::Cancelled => f.write_str("request task was cancelled"),
        }
    }
}

impl std::error::Error for TaskError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            TaskError::Deadline(exceeded) => Some(exceeded),
            _ => None,
        }
    }
}

/// The cooperative check handed to a [`run_blocking`] closure.
#[derive(Clone, Debug)]
pub struct BlockingCheck {
    ctx: Option<DeadlineContext>,
    abandoned: Arc<AtomicBool>,
}

impl BlockingCheck {
    /// `Err` once the closure should stop: the request's cutoff has passed, or nobody is waiting
    /// for the result any more (the request was answered or dropped). Cheap: an atomic load, a
    /// clock read and a comparison.
    pub fn check(&self) -> Result<(), DeadlineExceeded> {
        if self.abandoned.load(Ordering::Relaxed) {
            let activity = self
                .ctx
                .as_ref()
                .map_or(Activity::Working, |c| c.activity());
            return Err(DeadlineExceeded::new(activity));
        }
        self.ctx.as_ref().map_or(Ok(()), DeadlineContext::check)
    }

    /// Time left before the cutoff, or `None` without a deadline.
    pub fn remaining(&self) -> Option<Duration> {
        self.ctx.as_ref().and_then(DeadlineContext::remaining)
    }
}

/// Sets the flag when the awaiting side goes away, however it goes.
struct Abandon(Arc<AtomicBool>);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Runs the blocking closure `f` on tokio's blocking pool and waits for it until the current
/// request's cutoff.
///
/// The closure gets a [`BlockingCheck`] to call between steps. At the cutoff this returns
/// `Err(DeadlineExceeded)` so the request can answer in time, and the check starts failing;
/// but **a closure that never checks runs to its end on its thread** even though the request was
/// answered 504 (the await is dropped, the thread is not). If the cutoff has already passed, `f`
/// is not started. Outside a request there is no deadline. A panic in `f` is resumed here. If
/// the runtime shuts down before the closure starts, the result is also `Err`.
///
/// ```
/// # async fn handler(rows: Vec<u64>) -> Result<u64, deadline_http::DeadlineExceeded> {
/// let sum = deadline_http::run_blocking(move |check| {
///     let mut sum = 0;
///     for chunk in rows.chunks(1_000) {
///         check.check()?; // stop when nobody waits any more
///         sum += chunk.iter().sum::<u64>();
///     }
///     Ok(sum)
/// })
/// .await??;
/// # Ok(sum) }
/// ```
pub async fn run_blocking<F, T>(f: F) -> Result<T, DeadlineExceeded>
where
    F: FnOnce(BlockingCheck) -> T + Send + 'static,
    T: Send + 'static,
{
    let ctx = DeadlineContext::current();
    if let Some(ctx) = &ctx {
        ctx.check()?;
    }
    let abandoned = Arc::new(AtomicBool::new(false));
    let _abandon = Abandon(abandoned.clone());
    let cutoff = ctx.as_ref().and_then(DeadlineContext::cutoff);
    let check = BlockingCheck {
        ctx: ctx.clone(),
        abandoned,
    };
    let handle = tokio::task::spawn_blocking(move || f(check));
    let joined = match cutoff {
        None => handle.await,
        Some(cutoff) => {
            let cutoff = crate::time::sleep_until(cutoff);
            tokio::select! {
                biased;
                joined = handle => joined,
                () = cutoff => {
                    let activity = ctx.as_ref().map_or(Activity::Working, |c| c.activity());
                    return Err(DeadlineExceeded::new(activity));
                }
            }
        }
    };
    match joined {
        Ok(output) => Ok(output),
        Err(error) => match error.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(_) => Err(DeadlineExceeded::new(Activity::Working)),
        },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use deadline::Deadline;

    use tokio::time::Instant;

    use super::*;
    use crate::context::current_deadline;

    fn context(budget_ms: u64) -> DeadlineContext {
        let now = Instant::now();
        let deadline = Deadline::after_duration(now.into_std(), Duration::from_millis(budget_ms));
        DeadlineContext::new(Some(deadline), Duration::from_millis(10), now)
    }

    struct SetOnDrop(Arc<AtomicBool>);

    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn spawned_task_carries_the_context() {
        let ctx = context(600);
        let expected = ctx.deadline();
        let result = ctx
            .scope(async { spawn(async { current_deadline() }).await })
            .await;
        assert_eq!(result, Ok(expected));
    }

    #[tokio::test(start_paused = true)]
    async fn spawned_task_is_cut_at_the_deadline_less_reserve() {
        let t0 = Instant::now();
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(dropped.clone());
        let result = context(600)
            .scope(async move {
                spawn(async move {
                    let _guard = guard;
                    tokio::time::sleep(Duration::from_secs(5)).await;
                })
                .await
            })
            .await;
        assert!(
            matches!(&result, Err(TaskError::Deadline(e)) if *e.activity() == Activity::Working),
            "{result:?}"
        );
        assert_eq!(Instant::now() - t0, Duration::from_millis(590));
        assert!(dropped.load(Ordering::SeqCst), "the work was dropped");
    }

    #[tokio::test(start_paused = true)]
    async fn task_past_its_cutoff_never_starts() {
        let ctx = context(600);
        tokio::time::sleep(Duration::from_millis(590)).await;
        let polled = Arc::new(AtomicBool::new(false));
        let flag = polled.clone();
        let result = ctx
            .scope(async move { spawn(async move { flag.store(true, Ordering::SeqCst) }).await })
            .await;
        assert!(matches!(result, Err(TaskError::Deadline(_))));
        assert!(!polled.load(Ordering::SeqCst));
    }

    #[tokio::test(start_paused = true)]
    async fn dropping_the_handle_aborts_the_task() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guard = SetOnDrop(dropped.clone());
        let task = spawn(async move {
            let _guard = guard;
            std::future::pending::<()>().await;
        });
        tokio::task::yield_now().await;
        assert!(!dropped.load(Ordering::SeqCst));
        drop(task);
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        assert!(dropped.load(Ordering::SeqCst), "the task was aborted");
    }

    #[tokio::test(start_paused = true)]
    async fn outside_a_request_there_is_no_deadline() {
        let t0 = Instant::now();
        let task = spawn(async {
            tokio::time::sleep(Duration::from_secs(3600)).await;
            current_deadline()
        });
        assert_eq!(task.await, Ok(None));
        assert_eq!(Instant::now() - t0, Duration::from_secs(3600));
    }

    #[tokio::test(start_paused = true)]
    async fn a_panic_is_told_apart_from_a_cut() {
        let task = spawn(async { panic!("boom") });
        assert_eq!(
            task.await,
            Err(TaskError::Panicked {
                message: "boom".into()
            })
        );
        assert_eq!(
            TaskError::Panicked {
                message: "boom".into()
            }
            .to_string(),
            "request task panicked: boom"
        );
    }

    /// Real time: a blocking thread cannot be moved by a paused clock. The cutoff is at 190 ms
    /// (a 200 ms budget less the 10 ms margin); the answer and the closure's own stop must both
    /// come at it, with 400 ms of slack for two shared cores, not at some later time.
    #[tokio::test]
    async fn blocking_work_that_checks_stops_at_the_cutoff() {
        const CUTOFF: Duration = Duration::from_millis(190);
        const SLACK: Duration = Duration::from_millis(400);
        let steps = Arc::new(AtomicUsize::new(0));
        let counter = steps.clone();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        let t0 = Instant::now();
        let wait = context(200).scope(run_blocking(move |check| {
            let stopped = loop {
                if let Err(stopped) = check.check() {
                    break stopped;
                }
                counter.fetch_add(1, Ordering::Relaxed);
                std::hint::spin_loop();
            };
            let _ = done_tx.send(Instant::now());
            stopped
        }));
        // A closure or a wait that missed the cutoff would run on: give up long before 5 s.
        let result = tokio::time::timeout(CUTOFF + SLACK, wait)
            .await
            .expect("answered near the cutoff");
        let waited = Instant::now() - t0;
        // Whichever noticed the cutoff first answered: the wait for the closure (an error), or
        // the closure itself, returning the check's error. Either way it says the deadline.
        let stopped = match result {
            Err(waited_out) => waited_out,
            Ok(checked) => checked,
        };
        assert_eq!(stopped, DeadlineExceeded::new(Activity::Working));
        assert!(waited >= CUTOFF, "answered before the cutoff: {waited:?}");
        assert!(waited < CUTOFF + SLACK, "{waited:?}");
        let closure_stopped = tokio::time::timeout(SLACK, done_rx)
            .await
            .expect("the closure stopped by itself, near the cutoff")
            .expect("and said so");
        let at = closure_stopped - t0;
        assert!(at >= CUTOFF && at < CUTOFF + SLACK, "{at:?}");
        assert!(steps.load(Ordering::Relaxed) > 0);
    }

    #[tokio::test]
    async fn blocking_work_that_checks_stops_when_nobody_waits_any_more() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel();
        // No deadline: only the dropped wait can stop it.
        let wait = run_blocking(move |check| {
            while check.check().is_ok() {
                std::hint::spin_loop();
            }
            let _ = done_tx.send(());
        });
        let gave_up = tokio::time::timeout(Duration::from_millis(50), wait).await;
        assert!(gave_up.is_err(), "still running when the wait was dropped");
        tokio::time::timeout(Duration::from_secs(5), done_rx)
            .await
            .expect("the closure noticed")
            .expect("and stopped");
    }

    #[tokio::test]
    async fn blocking_work_that_never_checks_runs_to_its_end_after_the_answer() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let result = context(100)
            .scope(run_blocking(move |_check| {
                #[allow(clippy::disallowed_methods)] // a blocking call is what this test models
                std::thread::sleep(Duration::from_millis(400));
                flag.store(true, Ordering::SeqCst);
                let _ = tx.send(());
            }))
            .await;
        assert!(result.is_err(), "answered at the cutoff");
        assert!(
            !finished.load(Ordering::SeqCst),
            "the caller was answered before the blocking call ended"
        );
        rx.await.expect("the blocking call still ran to its end");
        assert!(finished.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn blocking_work_without_a_deadline_returns_its_value() {
        assert_eq!(
            run_blocking(|check| check.check().map(|()| 7)).await,
            Ok(Ok(7))
        );
    }
}

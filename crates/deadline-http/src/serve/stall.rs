//! The send timeout of an HTTP/2 stream: a stream whose answer the peer will not take is ended.
//!
//! HTTP/2 flow control lets a peer stop one stream's data without stopping the connection: it
//! opens a stream with a window of zero bytes (or never grants more) and the answer waits for
//! window that never comes. The socket stays writable, so the connection-level send timeout
//! (see [`conn`](super::conn)) never fires, and each such stream holds a task and its answer's
//! buffers for as long as the peer keeps the connection: 100 connections of 200 streams held
//! 20,000 tasks.
//!
//! # How a stalled stream is seen
//!
//! hyper runs each HTTP/2 stream (the service's future, then the writing of its answer) as a
//! task it hands to the executor, and asks the answer's body for data only once the stream has
//! window for it. So the body knows when the stream is waiting on the peer: from the moment the
//! answer is ready, and after each data frame it gave, until it is asked for the next one. The
//! body notes that moment in a [`StreamClock`]. The executor ([`StreamExec`]) wraps each stream
//! task with a timer that reads the clock; once the stream has waited on the peer for the send
//! timeout, the task is dropped, which resets the stream (`RST_STREAM`) and frees what it held.
//! A body that is slow itself (it returned `Pending`) is not waiting on the peer: its own time
//! is the enforce layer's business, not this timer's.
//!
//! The clock reaches the body through a task-local set by the executor around the stream's
//! task: the service's future completes inside that task, and the response it makes picks the
//! clock up there. HTTP/1.1 has no streams to stall one by one: its answers are written on the
//! connection's task, and a peer that takes none is the connection-level send timeout's case.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    /// The clock of the HTTP/2 stream whose task this is.
    static STREAM: Arc<StreamClock>;
}

/// Since when an HTTP/2 stream's answer has been waiting on the peer.
#[derive(Debug)]
pub(super) struct StreamClock {
    base: Instant,
    /// Milliseconds since `base`, plus one, since the answer waits on the peer; 0: it does not.
    waiting_ms: AtomicU64,
    /// The task ended in the poll that made its answer wait: the answer went out at once.
    at_once: AtomicBool,
}

impl StreamClock {
    fn new() -> StreamClock {
        StreamClock {
            base: Instant::now(),
            waiting_ms: AtomicU64::new(0),
            at_once: AtomicBool::new(false),
        }
    }

    /// The clock of the current task's stream, if the current task is an HTTP/2 stream run by
    /// [`StreamExec`].
    pub(super) fn current() -> Option<Arc<StreamClock>> {
        STREAM.try_with(Arc::clone).ok()
    }

    /// The answer now waits for the peer to take it (window to send in).
    pub(super) fn waiting(&self) {
        let ms = u64::try_from(
            Instant::now()
                .saturating_duration_since(self.base)
                .as_millis(),
        )
        .unwrap_or(u64::MAX)
        .saturating_add(1);
        self.waiting_ms.store(ms, Ordering::Relaxed);
    }

    /// The answer is being produced (or is finished): the peer is not what it waits on.
    pub(super) fn not_waiting(&self) {
        self.waiting_ms.store(0, Ordering::Relaxed);
    }

    /// Whether the stream's task ended in the same poll in which its answer began waiting on
    /// the peer: there was window for it, so the peer took it (see [`conn`](super::conn)).
    pub(super) fn sent_at_once(&self) -> bool {
        self.at_once.load(Ordering::Relaxed)
    }

    fn is_waiting(&self) -> bool {
        self.waiting_ms.load(Ordering::Relaxed) != 0
    }

    fn waiting_since(&self) -> Option<Instant> {
        match self.waiting_ms.load(Ordering::Relaxed) {
            0 => None,
            ms => self.base.checked_add(Duration::from_millis(ms - 1)),
        }
    }
}

/// The executor `serve` gives hyper: spawns each HTTP/2 stream's task on tokio, ended once its
/// answer has waited on the peer for `send_timeout` (see the [module docs](self)).
#[derive(Clone, Copy, Debug)]
pub(super) struct StreamExec {
    pub(super) send_timeout: Duration,
}

impl<F> hyper::rt::Executor<F> for StreamExec
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, task: F) {
        let clock = Arc::new(StreamClock::new());
        let send_timeout = self.send_timeout;
        tokio::spawn(STREAM.scope(clock.clone(), async move {
            until_stalled(task, &clock, send_timeout).await;
        }));
    }
}

/// Runs `task` until it ends, or until `clock` says its answer has waited on the peer for
/// `send_timeout`.
async fn until_stalled<F: Future>(task: F, clock: &StreamClock, send_timeout: Duration) {
    let mut task = pin!(task);
    let timer = pin!(tokio::time::sleep(send_timeout));
    let mut timer = timer;
    loop {
        let ended = std::future::poll_fn(|cx| {
            let waited = clock.is_waiting();
            if task.as_mut().poll(cx).is_ready() {
                if !waited && clock.is_waiting() {
                    clock.at_once.store(true, Ordering::Relaxed);
                }
                return Poll::Ready(true);
            }
            timer.as_mut().poll(cx).map(|()| false)
        })
        .await;
        if ended {
            return;
        }
        let now = Instant::now();
        let next = match clock.waiting_since() {
            Some(since) if now.saturating_duration_since(since) >= send_timeout => {
                tracing::debug!(
                    waited_ms = now.saturating_duration_since(since).as_millis(),
                    "HTTP/2 stream reset: the peer took none of its answer for the send timeout"
                );
                return;
            }
            Some(since) => since + send_timeout,
            None => now + send_timeout,
        };
        timer.as_mut().reset(next);
    }
}

//! The future returned by [`PropagateDeadline`](super::PropagateDeadline).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::Response;

use super::body::CallBody;
use crate::error::CallError;

type BoxFuture<RB> =
    Pin<Box<dyn Future<Output = Result<Response<CallBody<RB>>, CallError>> + Send>>;

/// The whole outbound call: every attempt, the waits between them and the trace recording.
/// Its response's body is a [`CallBody`], bounded in size and by the attempt's wait.
///
/// Dropping it cancels the attempt in flight (with hyper, that closes the attempt's HTTP/1
/// connection, so the callee sees the hang-up) and still records the call's span, with the
/// attempt in flight marked `cancelled`.
///
/// It is a boxed `async` block: the attempt loop holds a clone of the inner service, the
/// request, the planner and the trace recorder across awaits, which is much clearer as
/// `async` code than as a hand-written state machine. The allocation is one per call, not per
/// attempt (a hedged call boxes its own loop apart, one more); the `propagate` benchmark
/// measures the layer's whole cost.
pub struct ResponseFuture<RB> {
    inner: BoxFuture<RB>,
}

impl<RB> ResponseFuture<RB> {
    pub(super) fn new(
        future: impl Future<Output = Result<Response<CallBody<RB>>, CallError>> + Send + 'static,
    ) -> ResponseFuture<RB> {
        ResponseFuture {
            inner: Box::pin(future),
        }
    }
}

impl<RB> Future for ResponseFuture<RB> {
    type Output = Result<Response<CallBody<RB>>, CallError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<RB> fmt::Debug for ResponseFuture<RB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

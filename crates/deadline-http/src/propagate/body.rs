//! The body of an outbound call's response, bounded in size and in time.
//!
//! A call returns as soon as the callee's response *head* arrives; its body comes later, read
//! by the caller. Without a bound a callee decides how much the caller holds in memory (a
//! 300 MB body read whole by a gateway) and how long it waits (headers at once, then a body
//! that never ends). [`CallBody`] wraps the response body of every call made through
//! [`PropagateDeadline`](super::PropagateDeadline) (and so [`DeadlineClient`](super::DeadlineClient)
//! and the reqwest middleware) and ends it with a [`BodyError`]:
//!
//! - **Size**: once more than the limit ([`DEFAULT_MAX_BODY`], 4 MiB, unless set with
//!   [`PropagateDeadline::max_body`](super::PropagateDeadline::max_body)) has arrived, or at
//!   once when the body announces more (a `Content-Length` above the limit), with
//!   [`BodyError::TooLarge`]. Nothing more is read.
//! - **Time**: the attempt's wait covers its body too. The wait is the policy's per-attempt
//!   timeout, cut to the caller's deadline when there is one; a body still arriving when it
//!   ends fails with [`BodyError::DeadlineExceeded`] (the deadline cut the wait) or
//!   [`BodyError::TimedOut`] (the full timeout ran, as without a budget). So a call without a
//!   budget is bounded by its configured timeout, body included, and a call with one never
//!   outlives the caller's deadline however slowly the callee streams.
//! - **Truncation**: an inner error (a connection closed before `Content-Length` bytes came)
//!   is [`BodyError::Inner`]: a body that was cut short is an error, never a short success.
//!
//! On any of these the inner body is dropped at once: with hyper over HTTP/1.1 that closes the
//! connection (it is not returned to the pool half-read), over HTTP/2 it resets the stream
//! (`RST_STREAM`), so the callee sees the hang-up and the memory is returned.
//!
//! # A gRPC status in the trailers
//!
//! A gRPC server that fails after sending messages puts its status in the body's trailers. The
//! body reads it as the trailers pass ([`CallBody::grpc_status`]); the call is not retried,
//! since the caller has consumed messages by then, and a non-zero status there is reported as
//! the caller reads it.
//!
//! # Cost
//!
//! One timer per body, created (and boxed) only the first time the body has to wait for a frame
//! and armed once at the attempt's end; a body that is whole when the head arrives never
//! touches the timer. The per-frame path adds a byte count and a comparison: no timer, no
//! allocation, no clock read.

use std::error::Error;
use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Buf;
use deadline::grpc::GrpcCode;
use deadline::trace::{Outcome, outcome};
use deadline::{Attempt, CallPolicy};
use http::Response;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use crate::context::CallSlot;
use crate::error::BoxError;

/// The default largest response body a call reads: 4 MiB.
pub const DEFAULT_MAX_BODY: u64 = 4 * 1024 * 1024;

/// When the attempt that got a response must have its whole body: the end of its wait.
///
/// The call loop wraps each attempt's response body with it where the response arrives (for
/// every client that runs the loop, the reqwest middleware included); a client with a loop of
/// its own gives it to [`CallBody::new`] the same way.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptEnd {
    /// The end of the attempt's wait.
    pub(super) at: Instant,
    /// Whether the caller's deadline cut the wait short of the policy's timeout.
    pub(super) capped: bool,
    /// The policy's per-attempt timeout.
    pub(super) timeout: Duration,
}

impl AttemptEnd {
    /// An attempt whose wait ends `at`, under a policy whose per-attempt timeout is `timeout`;
    /// `capped` when the caller's deadline cut the wait short of that timeout (a body still
    /// arriving at `at` then fails with [`BodyError::DeadlineExceeded`], else with
    /// [`BodyError::TimedOut`]).
    pub fn new(at: Instant, timeout: Duration, capped: bool) -> AttemptEnd {
        AttemptEnd {
            at,
            capped,
            timeout,
        }
    }

    /// The end of `attempt`'s wait, sent at `sent_at` under `policy`.
    pub(super) fn of(sent_at: Instant, attempt: &Attempt, policy: &CallPolicy) -> AttemptEnd {
        AttemptEnd {
            at: sent_at + attempt.wait,
            capped: attempt.wait < policy.timeout(),
            timeout: policy.timeout(),
        }
    }

    /// `response` with its body bounded by this end and by `max_body` bytes.
    pub(super) fn bound<RB>(self, response: Response<RB>, max_body: u64) -> Response<CallBody<RB>> {
        response.map(|body| CallBody::new(body, Some(self), max_body))
    }
}

pin_project! {
    /// The response body of an outbound call: the callee's body, ended with a [`BodyError`]
    /// when it grows past the size limit, is still arriving when the attempt's wait ends, or
    /// fails. See the [module docs](self).
    ///
    /// For a response body type that is not an [`http_body::Body`] (a test's plain value),
    /// [`get_ref`](Self::get_ref) and [`into_inner`](Self::into_inner) give it back.
    pub struct CallBody<B> {
        #[pin]
        inner: Option<B>,
        // Created the first time the body waits for a frame (boxed, so the body is `Unpin`
        // whenever the callee's is: one allocation per body that ever waits, none per frame).
        sleep: Option<Pin<Box<Sleep>>>,
        end: Option<AttemptEnd>,
        limit: u64,
        read: u64,
        grpc_status: Option<GrpcCode>,
        // The announced size was checked against the limit.
        checked: bool,
        // Where the call that got this body sits in its hop's trace: a body that fails, or
        // ends with a gRPC error in its trailers, corrects the call's outcome there.
        slot: Option<CallSlot>,
    }
}

impl<B> CallBody<B> {
    /// `inner`, read until the attempt's `end` (none: no time bound) and at most `limit` bytes
    /// (`u64::MAX`: no limit).
    pub fn new(inner: B, end: Option<AttemptEnd>, limit: u64) -> CallBody<B> {
        CallBody {
            inner: Some(inner),
            sleep: None,
            end,
            limit,
            read: 0,
            grpc_status: None,
            checked: false,
            slot: None,
        }
    }

    /// Reports how this body ends to the call span at `slot`.
    pub(super) fn report_to(&mut self, slot: CallSlot) {
        self.slot = Some(slot);
    }

    /// The callee's body, until it ended or was dropped by an error.
    pub fn get_ref(&self) -> Option<&B> {
        self.inner.as_ref()
    }

    /// The callee's body, unwrapped (no bounds apply to it any more); `None` once it ended or
    /// was dropped by an error.
    pub fn into_inner(self) -> Option<B> {
        self.inner
    }

    /// The size limit, in bytes.
    pub fn max_body(&self) -> u64 {
        self.limit
    }

    /// Bytes of data read so far.
    pub fn bytes_read(&self) -> u64 {
        self.read
    }

    /// The `grpc-status` of the body's trailers, once they have been read (a gRPC answer that
    /// carries its status in the headers, trailers-only, has none here).
    pub fn grpc_status(&self) -> Option<GrpcCode> {
        self.grpc_status
    }
}

impl<B> Body for CallBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, BodyError>>> {
        let mut this = self.project();
        let Some(inner) = this.inner.as_mut().as_pin_mut() else {
            return Poll::Ready(None);
        };
        if !*this.checked {
            *this.checked = true;
            if inner.size_hint().lower() > *this.limit {
                this.inner.set(None);
                return Poll::Ready(Some(Err(BodyError::TooLarge { limit: *this.limit })));
            }
        }
        let polled = inner.poll_frame(cx);
        let result = match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let len = u64::try_from(data.remaining()).unwrap_or(u64::MAX);
                    *this.read = this.read.saturating_add(len);
                    if *this.read > *this.limit {
                        this.inner.set(None);
                        return Poll::Ready(Some(Err(BodyError::TooLarge { limit: *this.limit })));
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    *this.grpc_status = GrpcCode::of_headers(trailers);
                    if let (Some(code), Some(slot)) = (*this.grpc_status, this.slot.take()) {
                        if code != GrpcCode::Ok {
                            let status = crate::enforce::answer::http_status(code);
                            slot.body_ended(Outcome::Status(status));
                        }
                    }
                }
                Some(Ok(frame))
            }
            Poll::Ready(Some(Err(error))) => Some(Err(BodyError::Inner(error.into()))),
            Poll::Ready(None) => None,
            Poll::Pending => {
                let Some(end) = *this.end else {
                    return Poll::Pending;
                };
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(end.at)));
                ready!(sleep.as_mut().poll(cx));
                Some(Err(if end.capped {
                    BodyError::DeadlineExceeded
                } else {
                    BodyError::TimedOut {
                        timeout: end.timeout,
                    }
                }))
            }
        };
        if !matches!(result, Some(Ok(_))) {
            // Ended, failed or out of time: let go of the callee's body (its connection or
            // stream) now, not when the caller drops this.
            this.inner.set(None);
            *this.sleep = None;
            if let (Some(Err(error)), Some(slot)) = (&result, this.slot.take()) {
                slot.body_ended(Outcome::Word(error.outcome()));
            }
        }
        Poll::Ready(result)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or(SizeHint::with_exact(0), Body::size_hint)
    }
}

impl<B> fmt::Debug for CallBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallBody")
            .field("open", &self.inner.is_some())
            .field("limit", &self.limit)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

/// Why a call's response body ended early. See the [module docs](self).
#[derive(Debug)]
#[non_exhaustive]
pub enum BodyError {
    /// More than `limit` bytes arrived, or were announced.
    #[non_exhaustive]
    TooLarge {
        /// The limit, in bytes.
        limit: u64,
    },
    /// The caller's deadline passed while the body was still arriving.
    DeadlineExceeded,
    /// The attempt's full per-attempt timeout passed while the body was still arriving.
    #[non_exhaustive]
    TimedOut {
        /// The per-attempt timeout.
        timeout: Duration,
    },
    /// Reading the callee's body failed: the connection closed before the whole body came (a
    /// truncated reply), or the stream was reset.
    Inner(BoxError),
}

impl BodyError {
    /// The word the call's trace span ends with when its body fails so: `deadline`, `timeout`,
    /// or `error` (too large, or cut short).
    pub fn outcome(&self) -> &'static str {
        match self {
            BodyError::DeadlineExceeded => outcome::DEADLINE,
            BodyError::TimedOut { .. } => outcome::TIMEOUT,
            BodyError::TooLarge { .. } | BodyError::Inner(_) => outcome::ERROR,
        }
    }

    /// Whether the body was larger than the limit.
    pub fn is_too_large(&self) -> bool {
        matches!(self, BodyError::TooLarge { .. })
    }

    /// Whether the caller's deadline ended the body.
    pub fn is_deadline(&self) -> bool {
        matches!(self, BodyError::DeadlineExceeded)
    }

    /// Whether the per-attempt timeout ended the body.
    pub fn is_timeout(&self) -> bool {
        matches!(self, BodyError::TimedOut { .. })
    }
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TooLarge { limit } => {
                write!(f, "response body larger than the limit of {limit} bytes")
            }
            BodyError::DeadlineExceeded => {
                f.write_str("deadline exceeded while the response body was arriving")
            }
            BodyError::TimedOut { timeout } => write!(
                f,
                "response body still arriving when the attempt's timeout of {} ms ended",
                timeout.as_millis()
            ),
            BodyError::Inner(error) => write!(f, "response body cut short: {error}"),
        }
    }
}

impl Error for BodyError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        match self {
            BodyError::Inner(error) => Some(&**error),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests;

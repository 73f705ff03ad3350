//! A callee's "the deadline ran out here" answer turned into an error, for clients that ask for
//! it ([`PropagateDeadline::deadline_answer_as_error`](super::PropagateDeadline::deadline_answer_as_error)).
//!
//! By default a response is never an error: a 504 comes back as `Ok`, because its status and
//! its callee's trace are what a caller inspects. A handler that only passes the verdict on
//! would then check every reply's status by hand. With the option on, a call that *ends* with
//! a callee saying that the deadline it carried ran out downstream (HTTP 504, or a
//! trailers-only gRPC DEADLINE_EXCEEDED) fails with [`CallError::DeadlineExceeded`], which `?`
//! turns into the handler's own 504. Whether to retry that answer was decided before, by the
//! planner (see [retries](super#retries)): only the answer the call ends with is converted.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use deadline::grpc::GrpcCode;
use http::{Response, StatusCode};
use pin_project_lite::pin_project;

use crate::error::{CallError, DeadlineExceeded};

pin_project! {
    /// A call's future, its final deadline answer from `target` turned into an error when a
    /// target is given (the option is on). Written by hand rather than as an `async` block
    /// around the call: such a block moves the whole call future into itself once more at its
    /// first poll. The boxed path wraps a call only when the option is on.
    pub(super) struct Answered<F> {
        #[pin]
        call: F,
        target: Option<Arc<str>>,
    }
}

impl<F> Answered<F> {
    /// `call`, converting a final deadline answer from `target` when there is one.
    pub(super) fn new(call: F, target: Option<Arc<str>>) -> Answered<F> {
        Answered { call, target }
    }
}

impl<F, RB> Future for Answered<F>
where
    F: Future<Output = Result<Response<RB>, CallError>>,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let result = ready!(this.call.poll(cx));
        Poll::Ready(match this.target.take() {
            None => result,
            Some(target) => deadline_answer_as_error(result, &target),
        })
    }
}

/// `result`, with a final deadline answer from `target` turned into an error.
pub(super) fn deadline_answer_as_error<RB>(
    result: Result<Response<RB>, CallError>,
    target: &str,
) -> Result<Response<RB>, CallError> {
    let response = result?;
    let answer = match GrpcCode::of_headers(response.headers()) {
        Some(GrpcCode::DeadlineExceeded) => "DEADLINE_EXCEEDED",
        Some(GrpcCode::Ok) | None if response.status() == StatusCode::GATEWAY_TIMEOUT => "504",
        _ => return Ok(response),
    };
    Err(CallError::DeadlineExceeded(DeadlineExceeded::answered(
        target, answer,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, grpc_status: Option<&'static str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(code) = grpc_status {
            builder = builder
                .header("content-type", "application/grpc")
                .header("grpc-status", code);
        }
        builder.body(()).expect("a valid response")
    }

    #[test]
    fn only_a_deadline_answer_becomes_an_error() {
        let cases = [
            (
                504,
                None,
                Some("deadline exceeded while calling inventory (it answered 504)"),
            ),
            (
                200,
                Some("4"),
                Some("deadline exceeded while calling inventory (it answered DEADLINE_EXCEEDED)"),
            ),
            (200, None, None),
            (503, None, None),
            (500, None, None),
            (200, Some("14"), None),
            (200, Some("0"), None),
        ];
        for (status, grpc, expected) in cases {
            let result = deadline_answer_as_error(Ok(response(status, grpc)), "inventory");
            match (result, expected) {
                (Err(error), Some(message)) => {
                    assert!(error.is_deadline(), "{status} {grpc:?}");
                    assert_eq!(error.to_string(), message);
                }
                (Ok(kept), None) => assert_eq!(kept.status().as_u16(), status),
                (result, expected) => {
                    panic!("{status} {grpc:?}: {result:?}, expected {expected:?}")
                }
            }
        }
    }

    #[test]
    fn an_error_stays_the_same_error() {
        let error = CallError::TimedOut {
            attempts_sent: 2,
            timeout: std::time::Duration::from_millis(100),
        };
        let result = deadline_answer_as_error::<()>(Err(error), "inventory");
        assert!(matches!(
            result,
            Err(CallError::TimedOut {
                attempts_sent: 2,
                ..
            })
        ));
    }
}

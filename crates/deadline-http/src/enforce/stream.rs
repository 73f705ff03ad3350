//! How a response body still streaming at the cutoff is ended, in each protocol's terms.
//!
//! By the time the cutoff comes, the response head (status and headers) is gone: the layer can
//! no longer answer 504. What it can still do is end the stream so that the caller *sees* it
//! ended early, rather than a body that merely stopped:
//!
//! | caller | what goes on the wire |
//! |---|---|
//! | HTTP/1.1 | the connection is closed without the final chunk (or short of `Content-Length`): the client reads an incomplete message |
//! | HTTP/2 | the stream is reset: `RST_STREAM` with `CANCEL` |
//! | gRPC | the messages already sent, then trailers `grpc-status: 4` (DEADLINE_EXCEEDED) and a `grpc-message` naming the service, with a `Server-Timing` trailer when `server_timing(true)` |
//!
//! The first two come from the same thing: the body fails with a [`StreamCut`] error. hyper
//! closes an HTTP/1.1 connection whose response body fails, and resets an HTTP/2 stream with
//! the reason it finds in the error's chain of sources, which [`StreamCut`] sets to `CANCEL`
//! (hyper's default would be `INTERNAL_ERROR`, which reads as a server fault).
//!
//! A gRPC stream is ended as gRPC ends any call: with a status in its trailers, so a gRPC
//! client reports DEADLINE_EXCEEDED after the messages it received, exactly as it does for a
//! call whose deadline passed on the client side. The message reads like the 504 body:
//! `deadline exceeded at inventory while streaming the response: budget 550 ms, queued 0 ms,
//! worked 3 ms, streamed 537 ms`. A message split over several data frames and cut between
//! them would leave a partial message before the trailers; a server that streams one message
//! per frame (tonic, and `deadline service`) never does that.
//!
//! The hold is reported with outcome `deadline` in the [`Stream`](super::Phase::Stream) phase,
//! and [`streamed`](super::Hold::streamed) says how long the body ran. Its status is the
//! response head's for HTTP (the 200 already sent), 504 for gRPC (DEADLINE_EXCEEDED, as the
//! trace and metrics read gRPC statuses); its reply counts as written for gRPC (the trailers
//! went out) and not for HTTP (the message is incomplete).

use std::error::Error;
use std::fmt;

use deadline::grpc::{GRPC_MESSAGE_HEADER, GRPC_STATUS_HEADER, GrpcCode, encode_message};
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;

use super::caller::Caller;
use super::recorder::Recorder;
use super::server_timing;
use crate::hold::HoldOutcome;
use crate::phase::Phase;

/// The error a response body gets when the enforce layer ends it at the request's cutoff
/// (for any caller but gRPC, whose stream ends with trailers instead).
///
/// hyper closes an HTTP/1.1 connection on it; on HTTP/2 it resets the stream with `CANCEL`, the
/// reason carried by its [`source`](Error::source).
#[derive(Debug)]
pub struct StreamCut {
    message: String,
    reason: h2::Error,
}

impl StreamCut {
    fn new(message: String) -> StreamCut {
        StreamCut {
            message,
            reason: h2::Error::from(h2::Reason::CANCEL),
        }
    }
}

impl fmt::Display for StreamCut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Error for StreamCut {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&self.reason)
    }
}

/// How the stream ends.
pub(crate) enum Ending {
    /// gRPC: these trailers are the last frame.
    Trailers(HeaderMap),
    /// Anything else: the body fails with this error.
    Error(StreamCut),
}

/// The cutoff came at `now` while the body was streaming to `caller`: the hold says so (the
/// caller reports it), and this is how the stream ends.
pub(crate) fn cut(recorder: &mut Recorder, caller: Caller, now: Instant) -> Ending {
    let grpc = caller.is_grpc();
    let head = recorder.status();
    let status = if grpc {
        Some(StatusCode::GATEWAY_TIMEOUT)
    } else {
        head
    };
    recorder.stream_cut(now, status);
    let hold = recorder.hold();
    let message = format!(
        "deadline exceeded at {} while streaming the response: budget {} ms, queued {} ms, \
         worked {} ms, streamed {} ms",
        hold.service,
        hold.budget_ms.unwrap_or(0),
        hold.queued.as_millis(),
        hold.worked.as_millis(),
        hold.streamed.as_millis(),
    );
    if !grpc {
        return Ending::Error(StreamCut::new(message));
    }
    let mut trailers = HeaderMap::with_capacity(3);
    trailers.insert(
        GRPC_STATUS_HEADER,
        GrpcCode::DeadlineExceeded.to_header_value(),
    );
    trailers.insert(GRPC_MESSAGE_HEADER, encode_message(&message));
    trailers.extend(server_timing::trailer(recorder.settings(), &hold));
    Ending::Trailers(trailers)
}

impl Recorder {
    /// The body was cut at the cutoff, `now`; the answer stands for `status`.
    pub(crate) fn stream_cut(&mut self, now: Instant, status: Option<StatusCode>) {
        self.streamed_until(now);
        self.answer(status, HoldOutcome::Deadline);
        self.exceeded(Phase::Stream);
    }

    /// The caller went away at `now` while the body was streaming.
    pub(crate) fn hung_up_mid_stream(&mut self, now: Instant) {
        self.streamed_until(now);
        let status = self.status();
        self.answer(status, HoldOutcome::HungUp);
        self.caller_left(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_stream_resets_an_http2_stream_with_cancel() {
        let cut = StreamCut::new("deadline exceeded at a".into());
        let reason = cut
            .source()
            .and_then(|s| s.downcast_ref::<h2::Error>())
            .and_then(h2::Error::reason);
        assert_eq!(reason, Some(h2::Reason::CANCEL));
        assert_eq!(cut.to_string(), "deadline exceeded at a");
    }
}

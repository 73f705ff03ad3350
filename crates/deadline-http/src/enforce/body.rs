//! The response body of [`EnforceDeadline`](super::EnforceDeadline): the inner service's body, or
//! the layer's own short text; either way it reports the request's hold when it ends.
//!
//! # A body still streaming at the cutoff
//!
//! The deadline covers the whole call, not just the response head: an inner body that is still
//! streaming when the request's cutoff (the deadline less the reply reserve) comes is ended
//! there, in the terms of the protocol it travels in (see [`stream`](super::stream)). The inner
//! body is dropped at that moment, and with it whatever produces its frames (a channel's
//! receiver, a stream holding the handler's state), so the work stops.
//!
//! What this costs per frame: nothing without a deadline (one `Option` test); with one, a frame
//! that is ready passes with one atomic load (has the timer fired?). The timer itself is one
//! `Sleep`, armed (and boxed) the first time the inner body has to wait and never again, sleeping
//! until the cutoff computed on arrival; nothing is allocated per frame, and a body that never
//! waits never allocates its timer.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

use super::caller::Caller;
use super::recorder::Recorder;
use super::stream;
use crate::error::BoxError;

pin_project! {
    /// The response body of [`EnforceDeadline`](super::EnforceDeadline).
    ///
    /// Either the inner service's body, passed through frame by frame, or the layer's own short
    /// text (for its 400 and 504 answers). It watches for the end of the stream: when the last
    /// frame has been handed on, the request's [`Hold`](super::Hold) is reported with
    /// `reply_written: true`; if the body is dropped before that (the caller went away while
    /// the answer was being written), it is reported with `reply_written: false`, and as
    /// [`HungUp`](super::HoldOutcome::HungUp) when the body had begun to stream.
    ///
    /// An inner body still streaming at the request's cutoff is ended there (see the
    /// [module docs](self)): a gRPC caller gets trailers `grpc-status: 4`; any other caller a
    /// [`StreamCut`](super::StreamCut) error, which hyper turns into a closed HTTP/1.1
    /// connection (no final chunk) or an HTTP/2 `RST_STREAM` with `CANCEL`.
    pub struct EnforceBody<B> {
        #[pin]
        kind: Kind<B>,
        // The request's cutoff, for an inner body under a deadline; `None`: no deadline, and
        // the body passes through untouched.
        cutoff: Option<Instant>,
        // The one timer for the cutoff, armed the first time the inner body has to wait. Boxed:
        // most bodies never wait (a whole answer in one frame), and the body is moved several
        // times on its way to the connection, so an inline timer would be copied each time.
        sleep: Option<Pin<Box<Sleep>>>,
        caller: Caller,
        recorder: Option<Recorder>,
        // Set when `is_end_stream` said so: the server may then drop the body without polling
        // it (an empty body, say), and that still counts as written.
        ended: AtomicBool,
        // The inner body has been polled: dropping it unfinished from now on is a hang-up
        // mid-stream (one dropped before its first poll, as for a HEAD request, is not).
        streaming: bool,
        // The inner body had to wait for a frame at least once: the stream took time, and its
        // duration is read from the clock when it ends.
        waited: bool,
    }

    impl<B> PinnedDrop for EnforceBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(mut recorder) = this.recorder.take() {
                let ended = this.ended.load(Ordering::Relaxed);
                if !ended && *this.streaming {
                    recorder.hung_up_mid_stream(Instant::now());
                }
                recorder.finish(ended);
            }
        }
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Text { text: Option<Bytes> },
        // A gRPC stream cut at the cutoff, whose closing trailers have been handed on: the
        // end. (The trailers go out as the frame that makes the cut, so nothing is kept here:
        // a map in this variant would make every body 56 bytes larger, moved with every
        // response.)
        Cut,
    }
}

impl<B> EnforceBody<B> {
    /// The inner service's `body`, ended at `cutoff` (if any) in `caller`'s terms.
    pub(crate) fn inner(
        body: B,
        recorder: Recorder,
        cutoff: Option<Instant>,
        caller: Caller,
    ) -> EnforceBody<B> {
        EnforceBody::new(Kind::Inner { body }, Some(recorder), cutoff, caller)
    }

    pub(crate) fn text(text: String, recorder: Option<Recorder>) -> EnforceBody<B> {
        let kind = Kind::Text {
            text: Some(Bytes::from(text)),
        };
        EnforceBody::new(kind, recorder, None, Caller::Http)
    }

    /// The layer's own answer as ready-made bytes (a Connect error body).
    pub(crate) fn bytes(bytes: Bytes, recorder: Recorder) -> EnforceBody<B> {
        let kind = Kind::Text { text: Some(bytes) };
        EnforceBody::new(kind, Some(recorder), None, Caller::Http)
    }

    /// The layer's own answer with no body at all: a gRPC trailers-only answer, whose headers
    /// end the stream.
    pub(crate) fn empty(recorder: Recorder) -> EnforceBody<B> {
        EnforceBody::new(
            Kind::Text { text: None },
            Some(recorder),
            None,
            Caller::Grpc,
        )
    }

    fn new(
        kind: Kind<B>,
        recorder: Option<Recorder>,
        cutoff: Option<Instant>,
        caller: Caller,
    ) -> EnforceBody<B> {
        EnforceBody {
            kind,
            cutoff,
            sleep: None,
            caller,
            recorder,
            ended: AtomicBool::new(false),
            streaming: false,
            waited: false,
        }
    }

    /// Whether this is the layer's own answer (a 400 or 504 it made), not the inner service's.
    pub fn is_from_layer(&self) -> bool {
        matches!(self.kind, Kind::Text { .. })
    }
}

impl<B> fmt::Debug for EnforceBody<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match &self.kind {
            Kind::Inner { .. } => "inner",
            Kind::Text { .. } => "text",
            Kind::Cut => "cut",
        };
        f.debug_struct("EnforceBody")
            .field("kind", &kind)
            .field("cutoff", &self.cutoff)
            .field("reported", &self.recorder.is_none())
            .finish()
    }
}

type PollFrame<D> = Poll<Option<Result<Frame<D>, BoxError>>>;

impl<B> Body for EnforceBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> PollFrame<B::Data> {
        let mut this = self.project();
        let (poll, end) = match this.kind.as_mut().project() {
            KindProj::Inner { body } => {
                *this.streaming = true;
                // A timer that has fired means the cutoff has passed: a frame the server asks
                // for now is too late, however ready it is.
                if this.sleep.as_ref().is_some_and(|sleep| sleep.is_elapsed()) {
                    return cut(this.kind, this.recorder, *this.caller, this.ended);
                }
                let mut body = body;
                let poll = body.as_mut().poll_frame(cx);
                let end = match &poll {
                    Poll::Ready(None) => true,
                    // Trailers are always the last frame: the server stops polling there.
                    Poll::Ready(Some(Ok(frame))) => frame.is_trailers() || body.is_end_stream(),
                    // The inner body failed: not a hang-up, whatever happens next.
                    Poll::Ready(Some(Err(_))) => {
                        *this.streaming = false;
                        false
                    }
                    Poll::Pending => {
                        *this.waited = true;
                        if let Some(cutoff) = *this.cutoff {
                            let sleep = this
                                .sleep
                                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(cutoff)));
                            if sleep.as_mut().poll(cx).is_ready() {
                                return cut(this.kind, this.recorder, *this.caller, this.ended);
                            }
                        }
                        return Poll::Pending;
                    }
                };
                (
                    poll.map(|frame| frame.map(|frame| frame.map_err(Into::into))),
                    end,
                )
            }
            KindProj::Text { text } => {
                let frame = text
                    .take()
                    .map(|bytes| Ok(Frame::data(B::Data::from(bytes))));
                (Poll::Ready(frame), true)
            }
            KindProj::Cut => (Poll::Ready(None), true),
        };
        if end {
            this.ended.store(true, Ordering::Relaxed);
            if let Some(mut recorder) = this.recorder.take() {
                if *this.waited {
                    recorder.streamed_until(Instant::now());
                }
                recorder.finish(true);
            }
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        let end = match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Text { text } => text.is_none(),
            Kind::Cut => true,
        };
        if end {
            self.ended.store(true, Ordering::Relaxed);
        }
        end
    }

    fn size_hint(&self) -> SizeHint {
        match &self.kind {
            Kind::Inner { body } => body.size_hint(),
            Kind::Text { text } => {
                SizeHint::with_exact(text.as_ref().map_or(0, |t| t.len() as u64))
            }
            Kind::Cut => SizeHint::default(),
        }
    }
}

/// The cutoff came while the inner body was streaming: drop it (and whatever produces its
/// frames), report the hold, and end the stream in `caller`'s terms.
fn cut<B: Body>(
    mut kind: Pin<&mut Kind<B>>,
    recorder: &mut Option<Recorder>,
    caller: Caller,
    ended: &AtomicBool,
) -> PollFrame<B::Data> {
    let now = Instant::now();
    let Some(mut recorder) = recorder.take() else {
        // Reported already (cannot happen while the inner body streams): just end.
        kind.set(Kind::Text { text: None });
        return Poll::Ready(None);
    };
    let ending = stream::cut(&mut recorder, caller, now);
    match ending {
        stream::Ending::Trailers(trailers) => {
            // The inner body goes now; its trailers are the stream's last frame.
            kind.set(Kind::Cut);
            ended.store(true, Ordering::Relaxed);
            recorder.finish(true);
            Poll::Ready(Some(Ok(Frame::trailers(trailers))))
        }
        stream::Ending::Error(error) => {
            kind.set(Kind::Text { text: None });
            ended.store(true, Ordering::Relaxed);
            recorder.finish(false);
            Poll::Ready(Some(Err(Box::new(error))))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;
    use http::Request;
    use http_body_util::channel::Channel;
    use http_body_util::{BodyExt, Full};

    use super::*;
    use crate::EnforceDeadlineLayer;

    /// A gRPC stream still going at its cutoff is ended there with its closing trailers
    /// (`grpc-status: 4`) as its last frame; after them it is over: it says so, and nothing more
    /// comes out of it.
    #[tokio::test(start_paused = true)]
    async fn a_cut_grpc_stream_ends_after_its_trailers() {
        let settings = Arc::new(EnforceDeadlineLayer::new("inventory").settings.clone());
        let request = Request::get("/").body(()).unwrap();
        let arrival = Instant::now();
        let recorder = Recorder::arrived(settings, &request, arrival);
        let cutoff = arrival + Duration::from_millis(50);
        // A stream whose sender sends nothing and stays: still going at its cutoff.
        let (_sender, stream) = Channel::<Bytes, Infallible>::new(1);
        let mut body = Box::pin(EnforceBody::inner(
            stream,
            recorder,
            Some(cutoff),
            Caller::Grpc,
        ));
        assert!(!body.is_end_stream());

        let frame = body.frame().await.expect("a last frame").expect("trailers");
        assert_eq!(Instant::now(), cutoff);
        let trailers = frame.into_trailers().expect("the frame is trailers");
        assert_eq!(trailers["grpc-status"], "4");

        assert!(body.is_end_stream());
        assert!(body.frame().await.is_none());
        assert!(body.is_end_stream());
    }

    /// Every response carries this body and is moved by value several times on its way to the
    /// connection (hyper-util's service future, the connection counter, hyper's dispatcher), so
    /// its size is paid on every request: with every feature on, as the workspace's tests run,
    /// it is the 128-byte recorder, the inner body and the cutoff's timer. A variant that kept a
    /// header map (a cut gRPC stream's trailers, as it once did) made it 256 bytes, and each of
    /// those moves a longer `memcpy`.
    #[test]
    fn the_body_holds_no_more_than_its_recorder_inner_body_and_timer() {
        let size = std::mem::size_of::<EnforceBody<Full<Bytes>>>();
        assert!(size <= 200, "the body is {size} bytes");
    }
}

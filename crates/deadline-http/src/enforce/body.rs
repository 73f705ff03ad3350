//! The response body of [`EnforceDeadline`](super::EnforceDeadline): the inner service's body, or
//! the layer's own short text; either way it reports the request's hold when it ends.

use std::fmt;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;

use super::hold::Recorder;

pin_project! {
    /// The response body of [`EnforceDeadline`](super::EnforceDeadline).
    ///
    /// Either the inner service's body, passed through frame by frame, or the layer's own short
    /// text (for its 400 and 504 answers). It watches for the end of the stream: when the last
    /// frame has been handed on, the request's [`Hold`](super::Hold) is reported with
    /// `reply_written: true`; if the body is dropped before that (the caller went away while
    /// the answer was being written), it is reported with `reply_written: false`.
    pub struct EnforceBody<B> {
        #[pin]
        kind: Kind<B>,
        recorder: Option<Recorder>,
        // Set when `is_end_stream` said so: the server may then drop the body without polling
        // it (an empty body, say), and that still counts as written.
        ended: AtomicBool,
    }

    impl<B> PinnedDrop for EnforceBody<B> {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some(recorder) = this.recorder.take() {
                recorder.finish(this.ended.load(Ordering::Relaxed));
            }
        }
    }
}

pin_project! {
    #[project = KindProj]
    enum Kind<B> {
        Inner { #[pin] body: B },
        Text { text: Option<Bytes> },
    }
}

impl<B> EnforceBody<B> {
    pub(crate) fn inner(body: B, recorder: Recorder) -> EnforceBody<B> {
        EnforceBody {
            kind: Kind::Inner { body },
            recorder: Some(recorder),
            ended: AtomicBool::new(false),
        }
    }

    pub(crate) fn text(text: String, recorder: Option<Recorder>) -> EnforceBody<B> {
        EnforceBody {
            kind: Kind::Text {
                text: Some(Bytes::from(text)),
            },
            recorder,
            ended: AtomicBool::new(false),
        }
    }

    /// The layer's own answer as ready-made bytes (a Connect error body).
    pub(crate) fn bytes(bytes: Bytes, recorder: Recorder) -> EnforceBody<B> {
        EnforceBody {
            kind: Kind::Text { text: Some(bytes) },
            recorder: Some(recorder),
            ended: AtomicBool::new(false),
        }
    }

    /// The layer's own answer with no body at all: a gRPC trailers-only answer, whose headers
    /// end the stream.
    pub(crate) fn empty(recorder: Recorder) -> EnforceBody<B> {
        EnforceBody {
            kind: Kind::Text { text: None },
            recorder: Some(recorder),
            ended: AtomicBool::new(false),
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
        };
        f.debug_struct("EnforceBody")
            .field("kind", &kind)
            .field("reported", &self.recorder.is_none())
            .finish()
    }
}

impl<B> Body for EnforceBody<B>
where
    B: Body,
    B::Data: From<Bytes>,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let (poll, end) = match this.kind.project() {
            KindProj::Inner { mut body } => {
                let poll = body.as_mut().poll_frame(cx);
                let end = match &poll {
                    Poll::Ready(None) => true,
                    Poll::Ready(Some(Ok(_))) => body.is_end_stream(),
                    Poll::Ready(Some(Err(_))) | Poll::Pending => false,
                };
                (poll, end)
            }
            KindProj::Text { text } => {
                let frame = text
                    .take()
                    .map(|bytes| Ok(Frame::data(B::Data::from(bytes))));
                (Poll::Ready(frame), true)
            }
        };
        if end {
            this.ended.store(true, Ordering::Relaxed);
            if let Some(recorder) = this.recorder.take() {
                recorder.finish(true);
            }
        }
        poll
    }

    fn is_end_stream(&self) -> bool {
        let end = match &self.kind {
            Kind::Inner { body } => body.is_end_stream(),
            Kind::Text { text } => text.is_none(),
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
        }
    }
}

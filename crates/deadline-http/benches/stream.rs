//! What the enforce layer adds per frame of a streaming response body.
//!
//! A response of 1,000 frames, each of which makes the body wait once (the inner body returns
//! `Pending`, wakes itself, then hands over a frame), as a body fed by a producer does. One
//! iteration polls the whole body to its end with a no-op waker; the response itself is made
//! outside the timed part, so a row is the body's frames only (and, once, the hold report at
//! its end). Rows:
//!
//! - `bare`: the inner body polled directly, without the layer;
//! - `no_deadline`: through the layer, for a request without a budget: the frames pass
//!   through untouched (one `Option` test each);
//! - `deadline`: through the layer with a budget far from running out: the cutoff's one
//!   `Sleep` is armed at the first wait and polled again at each later one; a ready frame is
//!   checked with one atomic load.
//!
//! Allocations are counted with divan's [`AllocProfiler`]: zero in every row means none per
//! frame (and none per stream). Divide a row's time by 1,000 for the time per frame, or read
//! the throughput line.
//!
//! Run with `cargo bench -p deadline-http --bench stream`.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use deadline::BUDGET_HEADER;
use deadline_http::{EnforceBody, EnforceDeadlineLayer};
use divan::counter::ItemsCount;
use divan::{AllocProfiler, Bencher};
use http::{HeaderValue, Request, Response};
use http_body::{Body, Frame};
use tokio::runtime::Runtime;
use tower::{Layer, ServiceExt, service_fn};

#[global_allocator]
static ALLOC: AllocProfiler = AllocProfiler::system();

const FRAMES: usize = 1_000;

fn main() {
    divan::Divan::default()
        .sample_count(500)
        .config_with_args()
        .main();
}

/// `FRAMES` frames of static bytes; before each, one `Pending` (having woken its waker).
struct Waits {
    left: usize,
    waited: bool,
}

impl Waits {
    fn new() -> Waits {
        Waits {
            left: FRAMES,
            waited: false,
        }
    }
}

impl Body for Waits {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        if !self.waited {
            self.waited = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.waited = false;
        self.left -= 1;
        Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"chunk\n")))))
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime")
}

/// Polls `body` to its end with a no-op waker; returns it (dropped outside the timing) and
/// the frames it gave.
fn drain<B: Body + Unpin>(mut body: B) -> (B, usize) {
    let mut cx = Context::from_waker(Waker::noop());
    let mut frames = 0;
    loop {
        match Pin::new(&mut body).poll_frame(&mut cx) {
            Poll::Ready(Some(_)) => frames += 1,
            Poll::Ready(None) => return (body, frames),
            Poll::Pending => {}
        }
    }
}

/// A response made by the layer, for a request with `budget` (if any).
fn through_layer(rt: &Runtime, budget: Option<&'static str>) -> Response<EnforceBody<Waits>> {
    let handler = service_fn(|_request: Request<()>| async {
        Ok::<_, Infallible>(Response::new(Waits::new()))
    });
    let service = EnforceDeadlineLayer::new("inventory").layer(handler);
    let mut request = Request::new(());
    if let Some(budget) = budget {
        request
            .headers_mut()
            .insert(BUDGET_HEADER, HeaderValue::from_static(budget));
    }
    rt.block_on(service.oneshot(request)).expect("infallible")
}

#[divan::bench]
fn bare(bencher: Bencher) {
    bencher
        .counter(ItemsCount::new(FRAMES))
        .with_inputs(Waits::new)
        .bench_local_values(|body| {
            let (body, frames) = drain(body);
            assert_eq!(frames, FRAMES);
            body
        });
}

#[divan::bench]
fn no_deadline(bencher: Bencher) {
    let rt = runtime();
    let _context = rt.enter();
    bencher
        .counter(ItemsCount::new(FRAMES))
        .with_inputs(|| Box::pin(through_layer(&rt, None).into_body()))
        .bench_local_values(|body| {
            let (body, frames) = drain(body);
            assert_eq!(frames, FRAMES);
            body
        });
}

#[divan::bench]
fn deadline(bencher: Bencher) {
    let rt = runtime();
    let _context = rt.enter();
    bencher
        .counter(ItemsCount::new(FRAMES))
        .with_inputs(|| Box::pin(through_layer(&rt, Some("600000")).into_body()))
        .bench_local_values(|body| {
            let (body, frames) = drain(body);
            assert_eq!(frames, FRAMES);
            body
        });
}

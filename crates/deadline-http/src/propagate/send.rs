//! What the call loop needs of the client below it: [`SendAttempt`], and the tower service as
//! one ([`Tower`]). The trait's docs say why it is not `tower::Service`.

use std::future::{Future, poll_fn};

use http::{Request, Response};
use tower_service::Service;

use crate::error::BoxError;

/// Sends one attempt of an outbound call, for the call loop of
/// [`PropagateDeadline`](super::PropagateDeadline).
///
/// The loop (plan, pace, send, judge, record) is written once, over this trait. The tower
/// layer sends through its inner service (readiness, then the call); another client drives
/// the same loop with [`PropagateDeadline::call_with`](super::PropagateDeadline::call_with) and
/// a sender of its own. The reqwest middleware (`deadline-reqwest`) does: its sender runs the
/// rest of a `reqwest-middleware` chain, which it only borrows for the duration of the call, so
/// the loop's future may borrow the sender (it is not boxed, and need not be `'static`).
///
/// The loop stamps each attempt's budget headers before it hands the request over, bounds the
/// attempt by its wait (the response's body too), and judges the answer: the sender only
/// sends. A hedged call runs several attempts at once, each on its own clone of the sender.
///
/// # Why not `tower::Service`
///
/// A `Service` is called through `&mut self` after `poll_ready`, and its future owns what it
/// needs: a client whose send borrows (`reqwest_middleware::Next::run` borrows the request's
/// extensions for as long as the attempt runs) cannot be one without boxing and cloning around
/// that borrow. Two methods returning futures that may borrow the sender serve both, and keep
/// the tower path the code it was: readiness ([`ready`](Self::ready), `poll_ready`), then the
/// call ([`send`](Self::send), the service's own future, not wrapped), on one clone of the
/// inner service per call (per attempt when hedging, as before).
pub trait SendAttempt<B>: Clone + Send {
    /// The body of the callee's response.
    type Body: Send;
    /// How sending an attempt fails (a refused connection, a reset stream).
    type Error: Into<BoxError>;

    /// Waits until the sender can take an attempt (a tower service's readiness). Awaited
    /// within the attempt's wait, just before [`send`](Self::send).
    fn ready(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send;

    /// Sends `request` (the call's request for the first attempt, made again for a later one;
    /// budget headers set) and returns the callee's response head.
    fn send(
        &mut self,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<Self::Body>, Self::Error>> + Send;

    /// Whether `request` can be sent more than once (default: yes, every attempt gets a clone
    /// of its body). A sender whose bodies cannot all be copied (a streaming body) says no, and
    /// the call then gets one attempt, never hedged.
    fn repeatable(&self, request: &Request<B>) -> bool {
        let _ = request;
        true
    }
}

/// A tower client service as an attempt sender: readiness, then the call. What the layer's
/// [`Service::call`](super::PropagateDeadline) sends through.
#[derive(Clone, Debug)]
pub(super) struct Tower<S>(pub(super) S);

impl<S, B, RB> SendAttempt<B> for Tower<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Send,
    RB: Send,
{
    type Body = RB;
    type Error = S::Error;

    fn ready(&mut self) -> impl Future<Output = Result<(), S::Error>> + Send {
        poll_fn(|cx| self.0.poll_ready(cx))
    }

    fn send(
        &mut self,
        request: Request<B>,
    ) -> impl Future<Output = Result<Response<RB>, S::Error>> + Send {
        self.0.call(request)
    }
}

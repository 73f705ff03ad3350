//! Deadline propagation for [tonic]: a gRPC service's callees learn how long the user is still
//! waiting, with no deadline code in the handlers.
//!
//! tonic carries a deadline in one hop only: a client may send `grpc-timeout`, and the server
//! stops waiting when it runs out, but a handler's own outbound calls start from nothing again.
//! With this crate, every call made while handling a request carries what is left of that
//! request's deadline (in `grpc-timeout` and `Deadline-Budget-Ms`), is planned by the deadline
//! planner (an attempt that could not finish is not sent; retries back off inside the budget),
//! and a deadline that runs out reaches the caller as DEADLINE_EXCEEDED naming the callee.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use deadline_tonic::{CallPolicy, DeadlineChannel, EnforceDeadlineLayer};
//! use tonic::transport::{Endpoint, Server};
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! // Client: wrap the Channel from outside; a generated client takes it as its transport,
//! // e.g. `InventoryClient::new(inventory)`.
//! let channel = Endpoint::from_static("http://127.0.0.1:50051").connect_lazy();
//! let policy = CallPolicy::new(Duration::from_secs(1), 3)?;
//! let inventory = DeadlineChannel::new(channel, policy, "inventory");
//!
//! // Server: the enforce layer inside tonic's builder, with the worker slots (leave tonic's
//! // own concurrency limit off), then `.add_service(..)` and `.serve(..)` as usual.
//! let server = Server::builder().layer(EnforceDeadlineLayer::new("orders").slots(16));
//! # let _ = (inventory, server);
//! # Ok(()) }
//! ```
//!
//! The example crate of this repository runs gateway → orders → inventory this way
//! (`cargo run -p deadline-tonic-example --example tonic_chain`).
//!
//! # The server side
//!
//! Each hop is a plain tonic server with [`EnforceDeadlineLayer`] added by
//! `Server::builder().layer(..)`. A user layer sits inside tonic's own `GrpcTimeout` (and its
//! concurrency limit, if one is set), so:
//!
//! - leave tonic's `concurrency_limit_per_connection` off and give the enforce layer the worker
//!   slots, or time spent waiting for tonic's permit would not count against the budget;
//! - the enforce layer answers DEADLINE_EXCEEDED at the deadline less its reply reserve, before
//!   tonic's own timer would answer CANCELLED at the deadline itself.
//!
//! # The client side
//!
//! A `tonic::transport::Channel` is a buffer served by a worker task, so a task-local deadline is
//! invisible inside it: the propagate layer wraps the channel **from outside**
//! ([`DeadlineChannel`]). tonic's request body is a stream, which cannot be sent twice; unary
//! requests are small, so [`DeadlineChannel`] holds the body in memory first, which lets the
//! planner re-send it on a retry.
//!
//! The channel has a timer of its own: tonic's client stops waiting when the request's
//! `grpc-timeout` (which the propagate layer sets to the callee's budget) runs out, and reports
//! that as CANCELLED "Timeout expired". The callee's enforce layer normally answers first (at its
//! deadline less its reply reserve), but on a busy machine its answer can arrive after the
//! channel gave up. [`DeadlineChannel`] reports that, and every other way the deadline ended the
//! call, as DEADLINE_EXCEEDED naming the callee, so the handler passes on the right status.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use deadline_http::{CallError, PropagateDeadline};
use http_body_util::{BodyExt, Full};
use tonic::Status;
use tonic::transport::Channel;
use tower::Service;
use tower::util::MapRequest;

pub use deadline_http::{CallPolicy, EnforceDeadlineLayer, PolicyError};

/// A boxed error, as tower and tonic erase them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type ToTonic = fn(http::Request<Full<Bytes>>) -> http::Request<tonic::body::Body>;

/// A `tonic::transport::Channel` wrapped from outside by the propagate layer: every call made
/// through it carries what is left of the current request's deadline, in `grpc-timeout` and
/// `Deadline-Budget-Ms`, and is planned and retried by the call planner.
#[derive(Clone, Debug)]
pub struct DeadlineChannel {
    inner: PropagateDeadline<MapRequest<Channel, ToTonic>>,
    target: Arc<str>,
}

impl DeadlineChannel {
    /// `channel` with calls made under `policy`, named `target` in the hop's trace.
    pub fn new(channel: Channel, policy: CallPolicy, target: &str) -> DeadlineChannel {
        let to_tonic: ToTonic = |request| request.map(tonic::body::Body::new);
        DeadlineChannel {
            inner: PropagateDeadline::new(MapRequest::new(channel, to_tonic), policy)
                .target(target),
            target: Arc::from(target),
        }
    }
}

impl Service<http::Request<tonic::body::Body>> for DeadlineChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The propagate layer awaits the channel's readiness inside each attempt's wait.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let target = self.target.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // A unary request: one small message, held so an attempt can be sent again.
            let body = body.collect().await?.to_bytes();
            let request = http::Request::from_parts(parts, Full::new(body));
            // Called here, on the handler's task, so the propagate layer sees its deadline.
            let response = inner
                .call(request)
                .await
                .map_err(|e| deadline_status(&target, e))?;
            // The reply's body is bounded by the attempt's wait: one still arriving when the
            // deadline passes ends as DEADLINE_EXCEEDED, as the call itself would.
            Ok(response.map(|body| {
                tonic::body::Body::new(body.map_err(move |e| -> BoxError {
                    if e.is_deadline() {
                        Box::new(Status::deadline_exceeded(e.to_string()))
                    } else {
                        Box::new(e)
                    }
                }))
            }))
        })
    }
}

/// The call's error as tonic's client should report it: DEADLINE_EXCEEDED when the deadline
/// ended the call (the planner's verdict, or the channel's own `grpc-timeout` timer), else the
/// error as it is.
fn deadline_status(target: &str, error: CallError) -> BoxError {
    let timed_out = {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        std::iter::from_fn(|| {
            let current = source?;
            source = current.source();
            Some(current)
        })
        .any(|e| e.is::<tonic::TimeoutExpired>())
    };
    if error.is_deadline() || timed_out {
        Box::new(Status::deadline_exceeded(format!(
            "deadline exceeded while calling {target}: {error}"
        )))
    } else {
        Box::new(error)
    }
}

//! The server side: enforce the budget a caller sent.
//!
//! [`EnforceDeadlineLayer`] wraps a service (an axum `Router`, a `service_fn`, any tower
//! service over `http` types). For every request it:
//!
//! 1. notes the arrival on tokio's monotonic clock and reads `Deadline-Budget-Ms` (and the other
//!    dialects it [accepts](EnforceDeadlineLayer::accept), `grpc-timeout` always for a gRPC
//!    request; the tightest wins; see [`sources`]). A malformed value is answered **400** at
//!    once, naming
//!    the header and the (escaped) value; a budget already spent (`0`, `-20`) **504** at once;
//!    no header means no deadline at all. The inner service never sees a rejected request.
//! 2. sets the deadline at arrival + budget and the *cutoff* at the deadline less the reply
//!    reserve (10 ms by default), so the 504 still reaches the caller in time. A budget no
//!    larger than the reserve is answered 504 on arrival too.
//! 3. if the layer has worker [`slots`](EnforceDeadlineLayer::slots), waits for one in a queue
//!    served in arrival order or earliest deadline first ([`queue`](EnforceDeadlineLayer::queue)),
//!    but only until the cutoff: then it leaves the queue and answers 504, with the time queued
//!    in its trace. A slot that comes free at the cutoff itself is too late: nothing starts after
//!    its deadline. With [`admission`](EnforceDeadlineLayer::admission) on, a request that could
//!    not finish after its expected wait is answered 503 at once (outcome `shed`).
//! 4. runs the inner service with the request's [`DeadlineContext`](crate::DeadlineContext) as the task-local current
//!    context (so outbound calls, [`current_deadline`](crate::current_deadline) and the axum
//!    extractors pick up what is left of the budget), racing it against the same cutoff. With
//!    [`request_extensions`](EnforceDeadlineLayer::request_extensions) on, the context and the
//!    [`Deadline`](deadline::Deadline) go in the request extensions too, for code that reads them there.
//!    (With [`context_without_budget(false)`](EnforceDeadlineLayer::context_without_budget), a
//!    request that sent no budget and is shown no trace runs without a context of its own
//!    instead, outside any scope: as if the layer were not there.)
//!    When the cutoff wins, the inner future is **dropped** (its work stops at its current
//!    await point, and its outbound calls with it) and the layer answers **504** with what the
//!    hop was doing: `deadline exceeded at inventory while calling orders: budget 600 ms,
//!    queued 0 ms, worked 590 ms`. The slot is released as soon as the work ends.
//! 5. adds a [`Deadline-Trace`](deadline::trace) header to every answer it gives to a request
//!    that carried a budget (any accepted dialect), 200, 400 and 504 alike, or to whichever
//!    callers the [trace exposure](EnforceDeadlineLayer::trace_exposure) names: one root span
//!    named after the hop, from arrival to the answer, whose outcome is the status code and
//!    which carries the budget the hop read on arrival (none without a deadline); under it
//!    `queue`, `work` (outcome `ok`, `deadline` or `error`) and the spans the handler's
//!    outbound calls recorded, their callees' budgets kept. Where the application
//!    [turns it on](EnforceDeadlineLayer::server_timing), it adds a W3C
//!    [`Server-Timing`](server_timing) header to every answer too (`queue;dur=0.004,
//!    work;dur=41.250, budget;dur=200`).
//! 6. gives its own answers (400, 503, 504) in the caller's terms: a gRPC caller gets a
//!    trailers-only `grpc-status` (DEADLINE_EXCEEDED, INVALID_ARGUMENT, UNAVAILABLE) with the
//!    same text, a Connect caller a JSON error body; see [`answer`].
//! 7. bounds the whole call, not just the response head: a response body still streaming at
//!    the cutoff is ended there, visibly to the protocol (an HTTP/1.1 connection closed without
//!    its final chunk, an HTTP/2 stream reset with `CANCEL`, a gRPC stream ended with trailers
//!    `grpc-status: 4` after the messages already sent), and what produced it is dropped; see
//!    [`stream`]. A request body still arriving at the cutoff is read by work that the cutoff
//!    drops, so the request is answered 504 (DEADLINE_EXCEEDED) there too.
//! 8. reports the request's [`Hold`] of the hop exactly once, when the answer has been handed on
//!    (or could not be), as a `tracing` event with target `deadline::hold`, to the
//!    [`on_hold`](EnforceDeadlineLayer::on_hold) hook and to the [`HoldMetrics`] counters.
//!
//! ```
//! use deadline_http::EnforceDeadlineLayer;
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # // Paused time: the trace's ms are exact however busy the machine running the example is.
//! # #[tokio::main(flavor = "current_thread", start_paused = true)]
//! # async fn main() {
//! let handler = service_fn(|_req: Request<()>| async {
//!     let left = deadline_http::DeadlineContext::current().and_then(|c| c.remaining());
//!     Ok::<_, std::convert::Infallible>(Response::new(format!("{left:?}")))
//! });
//! let service = ServiceBuilder::new()
//!     .layer(EnforceDeadlineLayer::new("inventory").slots(8)) // outermost
//!     .service(handler);
//!
//! let spent = Request::builder().header("deadline-budget-ms", "-20").body(()).unwrap();
//! let response = service.clone().oneshot(spent).await.unwrap();
//! assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
//! assert_eq!(response.headers()["deadline-trace"], "inventory@0-0=504,^0=0");
//!
//! let bad = Request::builder().header("deadline-budget-ms", "1.5").body(()).unwrap();
//! let response = service.clone().oneshot(bad).await.unwrap();
//! assert_eq!(response.status(), StatusCode::BAD_REQUEST);
//!
//! let fine = Request::builder().header("deadline-budget-ms", "600").body(()).unwrap();
//! let response = service.clone().oneshot(fine).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! assert!(response.headers().contains_key("deadline-trace"));
//!
//! // No budget: no deadline, and by default no trace on the answer.
//! let plain = Request::builder().body(()).unwrap();
//! let response = service.oneshot(plain).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! assert!(!response.headers().contains_key("deadline-trace"));
//! # }
//! ```
//!
//! # Why the layer must be outermost
//!
//! The budget is how long the caller will wait *in total*, and a request that waits for a worker
//! is spending it. So the layer notes the arrival before anything else and owns the slot queue
//! itself: a request waits only as long as its budget allows, then gives up its place. If a
//! concurrency limit sat outside the deadline layer (tonic's server puts its limit outside its
//! timeout), queue time would be free: a request could wait a second for a slot and then start a
//! full budget's worth of work that nobody is waiting for any more. tower's `ConcurrencyLimit`
//! cannot help here: it makes every request wait in `poll_ready`, without knowing any request's
//! deadline. Put this layer outside every other layer (for axum, the last
//! [`Router::layer`](https://docs.rs/axum/0.8/axum/struct.Router.html#method.layer) call), and
//! give it the slots instead of a separate limit.
//!
//! The layer's `poll_ready` is always ready; the inner service's readiness is awaited inside each
//! request's future, after its slot and before its cutoff, so a slow `poll_ready` inside is
//! bounded by the deadline too.
//!
//! # No header, no timer
//!
//! A request without a budget behaves as if the layer were not there: no timer is created (the
//! cutoff is an `Option<Sleep>`, as in tonic's `grpc_timeout.rs`), slots are a plain wait, and
//! the handler runs to its end; by default it gets no context and no trace either (see
//! [`context_without_budget`](EnforceDeadlineLayer::context_without_budget)). Only the hold
//! report is added. Every stage
//! of a request with a budget sleeps until the *same* instant, computed once on arrival, so the
//! queue and the work cannot each take a full budget.
//!
//! # Caller hang-up: what is detected
//!
//! hyper drops the service future of an HTTP/1.1 request when the client closes the connection
//! while hyper is reading the socket; here that drops the inner work, releases the slot and
//! reports the hold as [`HoldOutcome::HungUp`]. A client that half-closes its write side after
//! sending is treated the same way. It is **not** detected when:
//!
//! - the request body is unread and larger than hyper's read buffer (hyper is not reading the
//!   socket, so it does not see the close);
//! - the server sets `half_close(true)` (this crate's [`serve`](crate::serve()) does not);
//! - the work was moved to a task with plain `tokio::spawn` (use [`spawn`](crate::spawn()),
//!   which is aborted with the request);
//! - the peer vanishes without closing (a pulled cable, a crashed host): nothing arrives to read.
//!
//! The deadline is the real guarantee; hang-up detection is a bonus.
//!
//! # What cannot be stopped
//!
//! Dropping a future stops it at its next await point. Code that does not await cannot be
//! interrupted: a CPU-bound loop must check [`check`](crate::check()) itself, and a blocking call
//! run with [`run_blocking`](crate::run_blocking) keeps its thread until it returns, even after
//! the request has been answered 504. A call that has already reached another system (a database
//! query, a request to a service that ignores budgets) runs on there; dropping it only stops
//! waiting for it.
//!
//! # Baseline mode
//!
//! With the cargo feature `baseline`, `EnforceDeadlineLayer::enforce(false)` models a service
//! built without this library, for comparisons (the `deadline` command's demo and load runs turn
//! it on): budgets are ignored and the work runs on a task of its own, to its end even when the
//! caller hangs up. The `baseline` module, documented when the feature is on, says exactly what
//! it does.
//!
//! # Errors
//!
//! An `Err` from the inner service passes through unchanged (the layer's error type is the inner
//! one); having no response, it carries no trace, and its hold is reported as
//! [`HoldOutcome::Error`]. axum services never fail, so with axum every answer to a request
//! with a budget carries a trace.
//!
//! A tokio runtime with the time driver enabled is required (as for any tokio timer).

pub mod answer;
#[cfg(feature = "baseline")]
pub mod baseline;
mod body;
mod caller;
pub mod exposure;
pub mod future;
mod hop_trace;
mod layer;
mod queue;
mod recorder;
mod request_id;
pub mod server_timing;
mod service;
mod settings;
pub mod sources;
pub mod stream;

pub use crate::hold::{Hold, HoldMetrics, HoldOutcome, HoldSnapshot};
pub use crate::phase::Phase;
pub use answer::Caller;
pub use body::EnforceBody;
pub use exposure::{TraceExposure, UnknownExposure};
pub use layer::EnforceDeadlineLayer;
pub use queue::{QueueOrder, UnknownQueueOrder};
pub use request_id::{MAX_REQUEST_ID_LEN, REQUEST_ID_HEADER, is_usable_request_id};
pub use server_timing::SERVER_TIMING_HEADER;
pub use service::EnforceDeadline;
pub use stream::StreamCut;

//! Tower layers that make HTTP services deadline-aware: the server side enforces the budget a
//! caller sent, the client side propagates what is left of it.
//!
//! Plain HTTP services set timeouts one hop at a time, and each looks sensible alone. A request
//! the user abandoned at 2 s can keep a chain of services busy for ten more, and under load that
//! dead work crowds out live requests. gRPC has deadlines; plain HTTP has nothing.
//!
//! With these layers every hop knows how long the user is still waiting. The server side
//! ([`EnforceDeadlineLayer`]) turns `Deadline-Budget-Ms` into a deadline on its own clock the
//! moment a request arrives, refuses work that is already late, waits for a worker only while
//! the budget lasts, drops the handler's future when the budget runs out, and answers with a
//! `Deadline-Trace` of where the time went. The client side ([`PropagateDeadlineLayer`],
//! [`DeadlineClient`]) picks the deadline up from the handler's context, caps every attempt by
//! it, tells the callee what is left less a margin, skips retries that could not finish, and
//! nests the callee's trace under the attempt.
//!
//! ```
//! use std::convert::Infallible;
//! use std::time::Duration;
//!
//! use deadline_http::{DeadlineContext, EnforceDeadlineLayer};
//! use http::{Request, Response, StatusCode};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().unwrap();
//! # rt.block_on(async {
//! // A handler whose work takes 1.5 s.
//! let handler = service_fn(|_req: Request<()>| async {
//!     tokio::time::sleep(Duration::from_millis(1_500)).await;
//!     Ok::<_, Infallible>(Response::new("done".to_owned()))
//! });
//! let service = ServiceBuilder::new()
//!     .layer(EnforceDeadlineLayer::new("inventory").slots(1)) // outermost: queue time counts
//!     .service(handler);
//!
//! // The caller will wait 600 ms: the work is dropped at 590 (10 ms reserve for the reply).
//! let start = tokio::time::Instant::now();
//! let request = Request::builder().header("deadline-budget-ms", "600").body(()).unwrap();
//! let response = service.clone().oneshot(request).await.unwrap();
//! assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
//! assert_eq!(start.elapsed(), Duration::from_millis(590));
//! assert_eq!(
//!     response.headers()["deadline-trace"],
//!     "inventory@0-590=504,.queue@0-0,.work@0-590=deadline,^0=600"
//! );
//!
//! // No header: no deadline, the layer behaves as if it were not there.
//! let response = service.oneshot(Request::new(())).await.unwrap();
//! assert_eq!(response.status(), StatusCode::OK);
//! # });
//! ```
//!
//! Handlers read their deadline with [`current_deadline`], [`DeadlineContext::current`] or the
//! axum extractor [`RequestDeadline`], and choose a cheaper answer when little is left with
//! [`pick`]; CPU-bound code calls [`check`]
//! between slices of work; [`spawn()`] and [`run_blocking`] run work on other tasks or threads
//! that still stops at the deadline; [`detach`] runs work that must not inherit it. [`serve()`]
//! serves any of it over HTTP/1.1 and cleartext HTTP/2 (h2c) on one port, with `TCP_NODELAY` and
//! graceful shutdown; with the `tls` feature, `serve::serve_tls` speaks TLS on its port, ALPN
//! choosing HTTP/2 or HTTP/1.1 (see the `tls` module). With the `otel` feature the layers start
//! OpenTelemetry spans, one per request and one per outbound attempt, and carry W3C
//! `traceparent` between hops (see the `otel` module).
//!
//! gRPC callers (tonic, grpc-go, grpcio, grpc-js) get the same behaviour in their own terms:
//! `grpc-timeout` is read as a budget, the layer's own answers are trailers-only
//! DEADLINE_EXCEEDED or INVALID_ARGUMENT (see [`enforce::answer`]), and outbound gRPC calls
//! carry `grpc-timeout` and are retried by their `grpc-status`. [`DeadlineClient::h2c`] speaks
//! HTTP/2 with prior knowledge.

mod activity;
pub mod context;
pub mod degrade;
pub mod enforce;
pub mod error;
#[cfg(feature = "axum")]
pub mod extract;
mod hold;
pub mod log_limit;
#[cfg(feature = "metrics")]
pub mod metrics;
mod metrics_hook;
#[cfg(feature = "otel")]
pub mod otel;
mod phase;
pub mod propagate;
pub mod serve;
pub mod spawn;
mod time;
#[cfg(feature = "tls")]
pub mod tls;

pub use context::{Activity, DeadlineContext, check, current_deadline, detach, with_deadline};
pub use degrade::pick;
pub use enforce::{
    EnforceBody, EnforceDeadline, EnforceDeadlineLayer, Hold, HoldMetrics, HoldOutcome,
    HoldSnapshot,
};
pub use error::CallError;
pub use error::{AttemptSkipped, DeadlineExceeded};
#[cfg(feature = "axum")]
pub use extract::RequestDeadline;
pub use propagate::{DeadlineClient, IDEMPOTENCY_KEY, PropagateDeadline, PropagateDeadlineLayer};
// The policy a `DeadlineClient` calls under, from the core crate, so a service needs only
// this crate.
pub use deadline::{CallPolicy, PolicyError};
pub use serve::{serve, serve_connection};
pub use spawn::{BlockingCheck, RequestTask, TaskError, run_blocking, spawn};

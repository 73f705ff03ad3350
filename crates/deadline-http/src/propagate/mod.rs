//! The client side: outbound calls that carry what is left of the user's wait.
//!
//! A service that calls another with a fixed timeout and a few retries keeps working, and keeps
//! its callees working, long after the user it serves has given up: the timeouts of each hop
//! add up, and every retry starts the whole chain below it again. [`PropagateDeadline`] wraps a
//! client service (hyper-util's pooled client, or anything that is a
//! `Service<http::Request<B>>`) so that each call asks the call planner
//! ([`deadline::plan`]) before every attempt whether there is still time to send it, waits no
//! longer than the caller's own deadline, and tells the callee in `Deadline-Budget-Ms` how long
//! it has.
//!
//! The handler does not thread the deadline through by hand: the enforce layer runs it inside a
//! [`DeadlineContext`], and the calls it makes pick the deadline up from there. The same context
//! collects this hop's trace: each call records one `call:<target>` span with its attempts and
//! the callees' own traces nested under them, and the enforce layer sends that back to its
//! caller in `Deadline-Trace`.
//!
//! ```
//! use std::time::Duration;
//!
//! use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
//! use deadline_http::{PropagateDeadlineLayer, with_deadline};
//! use http::{Request, Response};
//! use http_body_util::BodyExt;
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! # let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build()?;
//! # rt.block_on(async {
//! // A stand-in for the downstream: it answers with the budget it was given.
//! let inventory = service_fn(|request: Request<String>| async move {
//!     let budget = request.headers()[BUDGET_HEADER].to_str()?.to_owned();
//!     Ok::<_, Box<dyn std::error::Error + Send + Sync>>(Response::new(budget))
//! });
//! let policy = CallPolicy::new(Duration::from_secs(1), 3)?; // 1 s per attempt, 3 attempts
//! let client = ServiceBuilder::new()
//!     .layer(PropagateDeadlineLayer::new(policy).target("inventory"))
//!     .service(inventory);
//!
//! // The user will wait 600 ms more. The callee is told that, less the 50 ms margin.
//! let now = tokio::time::Instant::now().into_std();
//! let deadline = Deadline::after_duration(now, Duration::from_millis(600));
//! let response = with_deadline(deadline, client.oneshot(Request::new(String::new()))).await?;
//! assert_eq!(response.into_body().collect().await?.to_bytes(), "550");
//! # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! # })?;
//! # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! For plain HTTP calls, [`DeadlineClient`] is this layer over hyper-util's pooled client, with
//! `TCP_NODELAY` set. For `https://` calls (feature `tls`), `DeadlineClient::https` puts it over
//! a pool that connects first and stamps the budget once the connection is ready, so a TLS
//! handshake is taken off the budget the callee is told.
//!
//! A client that is not a tower service drives the same call loop (everything below) with
//! [`PropagateDeadline::call_with`] and a [`SendAttempt`] of its own: the reqwest middleware
//! (`deadline-reqwest`) does, so there is one loop for both.
//!
//! # Where the deadline comes from
//!
//! Two places: a [`deadline::Deadline`] in the request's extensions (for callers outside a
//! served request that still want a budget; [`with_deadline`](crate::with_deadline) does the same
//! for a whole block), and the deadline of [`DeadlineContext::current`]. When both exist the
//! tighter wins: an explicit deadline can shorten the served request's, never lengthen it.
//! Without either, the call is made as if the library were not there: no header, the full
//! timeout for every attempt, every configured attempt.
//!
//! The context is read when the service is *called*, so the layer must be called on the
//! handler's task. Put anything that hands calls to another task (tower's `Buffer`, for one)
//! *inside* this layer, between it and the client, not outside it.
//!
//! ## Why the deadline, not the cutoff
//!
//! The context also has a cutoff (the deadline less the reply reserve), when the hop's own work
//! must stop. Calls use the deadline itself: the callee's budget is what the user is still
//! prepared to wait, less the transit margin, and the margin already covers getting the answer
//! back. Using the cutoff would take the reserve off twice at every hop.
//!
//! # The attempt loop
//!
//! Before every attempt the planner ([`Plan::next`]) is asked with the current time
//! (`tokio::time::Instant`, so paused-time tests drive it):
//!
//! - **Send**: the first attempt is the caller's request itself, each later one is made again
//!   from what was kept of it (method, URI, version, headers and a clone of the body; no
//!   attempt carries the caller's extensions, except a [`Deadline`](deadline::Deadline)), its
//!   `Deadline-Budget-Ms` is *set* to the planned budget (replacing any value the request
//!   arrived with, never appending a second one), or *removed* when the plan has no budget (no
//!   deadline, or propagation off). The attempt gets at most the planned wait, which never runs
//!   past the caller's deadline; readiness of the inner service counts inside that wait. While
//!   it runs, the context's activity is [`Activity::Calling`], so a 504 at this hop says which
//!   downstream it was waiting for.
//! - **Stop**: no more attempts; the call ends with what the last attempt gave.
//!
//! For a gRPC request (`content-type: application/grpc…`) the budget also goes in
//! `grpc-timeout`, and a `grpc-status` in the response headers is judged as the HTTP status it
//! stands for: UNAVAILABLE as a 503, DEADLINE_EXCEEDED as a 504, any other non-zero status as
//! final.
//!
//! ## Retries
//!
//! An attempt is retried when it got a 5xx response, when the inner service failed (a refused
//! or reset connection) or when it timed out; never after a 1xx–4xx response, which is returned
//! as it is. Methods that are not idempotent (`POST`, `PATCH` and any unknown method) are
//! retried only when the request carries an [`IDEMPOTENCY_KEY`] header; `GET`, `HEAD`,
//! `OPTIONS`, `TRACE`, `PUT` and `DELETE` always may be.
//!
//! Before a retry the call sleeps a backoff with full jitter (a delay drawn from `[0,
//! min(max, base × 2^(n−2))]`, 25 ms doubling to 250 ms by default), spent from the budget: the
//! planner decides the retry as of the moment the sleep would end, and when it would not be
//! sent then, the call neither sleeps nor sends it. A callee's pushback (`Retry-After` in
//! delta-seconds on a 429 or 503, `grpc-retry-pushback-ms`) makes the delay at least that long,
//! or ends the call when it does not fit the budget; a negative `grpc-retry-pushback-ms` means
//! "do not retry", and a 429 that carries a pushback is retried like a 5xx. A callee's 504 is
//! retried only when the retry would get at least half the budget that just ran out
//! ([`Callee504`]): less rarely finishes what more could not.
//!
//! Retries also draw from a **retry budget** per target, shared by every clone of the client:
//! within a sliding 10 s window retries may be at most 20 % of the requests plus 10, and each
//! retry takes a token from a bucket of 5 that a retry which works gives back and successful
//! first attempts refill by half a token ([`RetryBudgetConfig`]). A per-call attempt limit does
//! not bound what retries do to a callee that is down (every request becomes `attempts` calls,
//! and hops multiply); the budget does: in a full outage, about one call per request.
//! A retry it refuses ends the call with what the last attempt returned. See
//! [`deadline::plan::retry`] for the rules, and [`PropagateDeadline::backoff`],
//! [`retry_budget`](PropagateDeadline::retry_budget) and
//! [`callee_504`](PropagateDeadline::callee_504) to change them. With propagation off (the
//! baseline) none of this applies: retries go out at once, unbudgeted.
//!
//! ## What the call returns
//!
//! A response that is not retried is returned as `Ok`. When the retries stop (every attempt
//! used, or too little time for another) after a 5xx *response*, that last response is
//! returned as `Ok` too: its status and its callee's `Deadline-Trace` are what the caller needs
//! (a callee's 504 tells the edge which hop ran out). When the last attempt ended without a
//! response, or no attempt could be sent, the call fails with a typed [`CallError`](crate::CallError):
//!
//! | how it ended | error |
//! |---|---|
//! | the first attempt was never sent: too little time | [`CallError::AttemptSkipped`](crate::CallError::AttemptSkipped) |
//! | the last attempt's wait was cut short by the deadline and it timed out, or the planner stopped for lack of time after timeouts or errors | [`CallError::DeadlineExceeded`](crate::CallError::DeadlineExceeded) |
//! | the last attempt used its full timeout, none allowed after it | [`CallError::TimedOut`](crate::CallError::TimedOut) |
//! | the inner service failed on the last attempt, none allowed after it | [`CallError::Inner`](crate::CallError::Inner) |
//!
//! # The trace
//!
//! Inside a context, the call becomes one span `call:<target>` (ms since the hop's arrival),
//! ending with the final status, or `deadline`, `skipped`, `timeout` or `error`. Under it, one
//! `attempt` span per attempt sent, ending with the status, `timeout`, `error` or `cancelled`,
//! and a zero-length `attempt` span when the planner refused one, its outcome the reason:
//! `skipped` (too little time), `skipped-backoff` (too little once the backoff is slept),
//! `skipped-pushback`, `skipped-504`, `no-retry`, or `throttled` (the retry budget said no);
//! [`StopReason`](deadline::plan::retry::StopReason) names them for counting. A hedged call
//! ([`PropagateDeadline::hedge`]) records every attempt it sent, the ones that lost the race
//! ending `lost`.
//! The callee's own `Deadline-Trace`, from each attempt's response, is shifted by the time the
//! attempt was sent and nested under that attempt; a malformed one gives its valid prefix
//! (often an empty subtree), never an error, and the spans it says it dropped are counted in
//! the hop's trace. It is kept as the header value it came in, checked but not decoded, and
//! written into this hop's trace straight from the text
//! ([`EncodedTrace`](deadline::trace::EncodedTrace)).
//!
//! The span is recorded when the call ends **or when its future is dropped**: the enforce layer
//! drops the handler at its cutoff and still wants to report where the time went, so a dropped
//! call records what it has, with the attempt in flight marked `cancelled` and the call too.
//! Outside any context nothing is recorded (and the callee's trace is not even read).
//!
//! # Cancellation
//!
//! Dropping the call's future drops the attempt in flight. With hyper's HTTP/1 client that
//! closes the attempt's connection, so the callee sees the hang-up and drops its own handler,
//! whose calls close their connections in turn: cancellation cascades hop by hop. Over HTTP/2
//! ([`DeadlineClient::h2c`]) the attempt's stream is reset (`RST_STREAM`) instead, and only that
//! request hangs up at the callee: the other calls on the connection go on. The deadline timers
//! are still what guarantees it; the hang-up makes it prompt.
//!
//! # Work that must not inherit the deadline
//!
//! A handler sometimes starts work that outlives the request: refreshing a cache, sending an
//! audit record. Its calls must not carry the user's deadline, or they would be cut short (or
//! skipped) when the user's time runs out. Run such work inside [`detach`](crate::detach): no
//! context is current there, so its calls carry no `Deadline-Budget-Ms` and use their full
//! timeouts, as without the library.
//!
//! ```
//! # async fn refresh_cache() {}
//! # async fn handler() {
//! // Spawned, so the request's cancellation does not reach it, and detached, so its calls
//! // carry no deadline even if something polls it inside the request's context.
//! tokio::spawn(deadline_http::detach(refresh_cache()));
//! # }
//! ```
//!
//! [`DeadlineContext`]: crate::DeadlineContext
//! [`DeadlineContext::current`]: crate::DeadlineContext::current
//! [`Activity::Calling`]: crate::Activity::Calling
//! [`Plan::next`]: deadline::Plan::next
mod answers;
mod attempt;
pub mod body;
mod call;
mod client;
#[cfg(feature = "tls")]
mod connect_first;
pub mod dialects;
mod evict;
pub mod future;
mod grpc;
mod hedge;
mod layer;
mod record;
mod retry;
mod send;
mod service;
mod target;

pub use self::attempt::IDEMPOTENCY_KEY;
pub use self::body::{AttemptEnd, BodyError, CallBody, DEFAULT_MAX_BODY};
pub use self::client::DeadlineClient;
pub use self::dialects::DialectSet;
pub use self::evict::{H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT};
pub use self::future::ResponseFuture;
pub use self::layer::PropagateDeadlineLayer;
pub use self::retry::{Draws, RetrySettings};
pub use self::send::SendAttempt;
pub use self::service::PropagateDeadline;
pub use deadline::plan::backoff::Backoff;
pub use deadline::plan::hedge::HedgeDelay;
pub use deadline::plan::retry::Callee504;
pub use deadline::plan::retry_budget::{RetryBucket, RetryBudgetConfig};

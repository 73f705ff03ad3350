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
//! assert_eq!(response.body(), "550");
//! # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! # })?;
//! # Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
//! ```
//!
//! For plain HTTP calls, [`DeadlineClient`] is this layer over hyper-util's pooled client, with
//! `TCP_NODELAY` set.
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
//! - **Send**: the request is rebuilt from the original (method, URI, version, headers and a
//!   clone of the body; extensions are not copied, except a [`Deadline`]), its
//!   `Deadline-Budget-Ms` is *set* to the planned budget (replacing any value the request
//!   arrived with, never appending a second one), or *removed* when the plan has no budget (no
//!   deadline, or propagation off). The attempt gets at most the planned wait, which never runs
//!   past the caller's deadline; readiness of the inner service counts inside that wait. While
//!   it runs, the context's activity is [`Activity::Calling`], so a 504 at this hop says which
//!   downstream it was waiting for.
//! - **Stop**: no more attempts; the call ends with what the last attempt gave.
//!
//! ## Retries
//!
//! An attempt is retried when it got a 5xx response, when the inner service failed (a refused
//! or reset connection) or when it timed out; never after a 1xx–4xx response, which is returned
//! as it is. Methods that are not idempotent (`POST`, `PATCH` and any unknown method) are
//! retried only when the request carries an [`IDEMPOTENCY_KEY`] header; `GET`, `HEAD`,
//! `OPTIONS`, `TRACE`, `PUT` and `DELETE` always may be.
//!
//! There is no backoff between attempts yet: a retry goes out as soon as the planner allows it.
//! A jittered backoff, and a retry budget shared across calls (tower's `retry::budget`), are
//! future work; the planner already refuses attempts that could not finish in time.
//!
//! ## What the call returns
//!
//! A response that is not retried is returned as `Ok`. When the retries stop (every attempt
//! used, or too little time for another) after a 5xx *response*, that last response is
//! returned as `Ok` too: its status and its callee's `Deadline-Trace` are what the caller needs
//! (a callee's 504 tells the edge which hop ran out). When the last attempt ended without a
//! response, or no attempt could be sent, the call fails with a typed [`CallError`]:
//!
//! | how it ended | error |
//! |---|---|
//! | the first attempt was never sent: too little time | [`CallError::AttemptSkipped`] |
//! | the last attempt's wait was cut short by the deadline and it timed out, or the planner stopped for lack of time after timeouts or errors | [`CallError::DeadlineExceeded`] |
//! | the last attempt used its full timeout, none allowed after it | [`CallError::TimedOut`] |
//! | the inner service failed on the last attempt, none allowed after it | [`CallError::Inner`] |
//!
//! # The trace
//!
//! Inside a context, the call becomes one span `call:<target>` (ms since the hop's arrival),
//! ending with the final status, or `deadline`, `skipped`, `timeout` or `error`. Under it, one
//! `attempt` span per attempt sent, ending with the status, `timeout`, `error` or `cancelled`,
//! and a zero-length `attempt` span `skipped` when the planner refused one for lack of time.
//! The callee's own `Deadline-Trace`, from each attempt's response, is shifted by the time the
//! attempt was sent and nested under that attempt; a malformed one gives an empty subtree,
//! never an error, and the spans it says it dropped are counted in the context.
//!
//! The span is recorded when the call ends **or when its future is dropped**: the enforce layer
//! drops the handler at its cutoff and still wants to report where the time went, so a dropped
//! call records what it has, with the attempt in flight marked `cancelled` and the call too.
//! Outside any context nothing is recorded (and the callee's trace is not even decoded).
//!
//! # Cancellation
//!
//! Dropping the call's future drops the attempt in flight. With hyper's HTTP/1 client that
//! closes the attempt's connection, so the callee sees the hang-up and drops its own handler,
//! whose calls close their connections in turn: cancellation cascades hop by hop. The
//! deadline timers are still what guarantees it; the hang-up makes it prompt.
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

mod client;
pub mod future;
mod layer;

use std::sync::Arc;
use std::task::{Context, Poll};

use deadline::trace::{Span, TRACE_HEADER, Trace, name, outcome};
use deadline::{BUDGET_HEADER, Budget, CallPolicy, Deadline, Decision, Plan, Stop};
use http::{HeaderName, Method, Request, Response};
use tokio::time::Instant;
use tower::ServiceExt;
use tower_service::Service;

pub use self::client::DeadlineClient;
pub use self::future::ResponseFuture;
pub use self::layer::PropagateDeadlineLayer;
use crate::context::DeadlineContext;
use crate::error::{AttemptSkipped, BoxError, CallError, DeadlineExceeded};

/// The `Idempotency-Key` request header: a request that carries one may be retried even when
/// its method is not idempotent.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The name used for a call whose URI has no authority and whose layer was given no target.
const UNNAMED_TARGET: &str = "downstream";

/// A client service whose calls carry the current deadline, are retried by the call planner
/// and are recorded in the hop's trace. See the [module docs](self).
///
/// The inner service is cloned for every attempt (readiness is awaited inside the attempt's
/// wait), so [`poll_ready`](Service::poll_ready) is always ready.
#[derive(Clone, Debug)]
pub struct PropagateDeadline<S> {
    inner: S,
    policy: CallPolicy,
    target: Option<Target>,
}

/// A configured downstream name and its call span's name, both made once per layer rather than
/// once per call (cloning them is two reference counts).
#[derive(Clone, Debug)]
struct Target {
    name: Arc<str>,
    span: Arc<str>,
}

impl Target {
    fn new(name: &str) -> Target {
        Target {
            name: Arc::from(name),
            span: Arc::from(name::call(name)),
        }
    }
}

impl<S> PropagateDeadline<S> {
    /// Wraps `inner`, making calls under `policy`.
    pub fn new(inner: S, policy: CallPolicy) -> PropagateDeadline<S> {
        PropagateDeadline {
            inner,
            policy,
            target: None,
        }
    }

    /// A [`PropagateDeadlineLayer`] making calls under `policy`.
    pub fn layer(policy: CallPolicy) -> PropagateDeadlineLayer {
        PropagateDeadlineLayer::new(policy)
    }

    /// Names the downstream in the call's span (`call:<name>`) and in the hop's activity
    /// (`calling <name>`). Without a name, the request URI's authority (`host:port`) is used.
    pub fn target(mut self, name: impl Into<String>) -> PropagateDeadline<S> {
        self.target = Some(Target::new(&name.into()));
        self
    }

    /// The call policy.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }

    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// The inner service, unwrapped.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, RB> Service<Request<B>> for PropagateDeadline<S>
where
    S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Clone + Send + 'static,
    RB: Send + 'static,
{
    type Response = Response<RB>;
    type Error = CallError;
    type Future = ResponseFuture<RB>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), CallError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<B>) -> ResponseFuture<RB> {
        self.start(request)
    }
}

impl<S> PropagateDeadline<S> {
    /// The call of `request`: what [`Service::call`] returns, from a shared reference, so
    /// [`DeadlineClient`] need not clone the whole service (its pooled client) before cloning
    /// the inner client for the call.
    fn start<B, RB>(&self, request: Request<B>) -> ResponseFuture<RB>
    where
        S: Service<Request<B>, Response = Response<RB>> + Clone + Send + 'static,
        S::Future: Send + 'static,
        S::Error: Into<BoxError>,
        B: Clone + Send + 'static,
        RB: Send + 'static,
    {
        let explicit = request.extensions().get::<Deadline>().copied();
        let context = DeadlineContext::current();
        // Both apply when both exist: an explicit deadline can tighten the request's, never
        // loosen it, or a callee could be told more time than the user is still waiting.
        let deadline = match (
            explicit,
            context.as_ref().and_then(DeadlineContext::deadline),
        ) {
            (Some(explicit), Some(served)) => Some(explicit.min(served)),
            (explicit, served) => explicit.or(served),
        };
        let call = Call {
            inner: self.inner.clone(),
            policy: self.policy,
            request,
            explicit,
            deadline,
            target: self.target.clone(),
            context,
        };
        ResponseFuture::new(call.run())
    }
}

/// Everything one call needs, moved into its future.
struct Call<S, B> {
    inner: S,
    policy: CallPolicy,
    request: Request<B>,
    explicit: Option<Deadline>,
    deadline: Option<Deadline>,
    /// The configured target; the URI's authority is only looked up when a name is needed.
    target: Option<Target>,
    context: Option<DeadlineContext>,
}

/// How the last attempt that did not succeed ended.
enum Failure<RB> {
    /// A 5xx response, kept to return if no further attempt is sent.
    Response(Response<RB>),
    /// The inner service failed.
    Error(BoxError),
    /// The attempt's wait elapsed; `capped` when the caller's deadline cut the wait short of
    /// the policy's timeout.
    Timeout { capped: bool },
}

impl<S, B, RB> Call<S, B>
where
    S: Service<Request<B>, Response = Response<RB>> + Send,
    S::Future: Send,
    S::Error: Into<BoxError>,
    B: Clone + Send,
    RB: Send,
{
    async fn run(self) -> Result<Response<RB>, CallError> {
        let Call {
            mut inner,
            policy,
            request,
            explicit,
            deadline,
            target,
            context,
        } = self;
        let start = Instant::now();
        // The downstream's name, as shared by the call's span and its attempts' activity. Made
        // from the URI only when a context needs it (or, below, before the request is moved
        // into its last attempt): without either, only an error message would ever read it.
        let (mut target, span_name) = match (target, &context) {
            (Some(target), _) => (Some(target.name), Some(target.span)),
            (None, Some(_)) => {
                let name = authority_name(&request);
                (Some(Arc::from(name)), None)
            }
            (None, None) => (None, None),
        };
        // Recorded when dropped, whether the call finished or was itself dropped.
        let mut record = match (context, &target) {
            (Some(context), Some(target)) => {
                let name = match &span_name {
                    Some(span) => String::from(&**span),
                    None => name::call(target),
                };
                Some(CallRecord::new(context, target.clone(), name, start))
            }
            _ => None,
        };
        // A request that must not be sent twice gets one attempt, and the call says so as
        // the planner would.
        let allowed = if may_retry(&request) {
            policy.attempts()
        } else {
            1
        };
        // Kept for the attempts after the first, and moved into the last one allowed.
        let mut original = Some(request);
        let mut plan = Plan::new(policy);
        let mut last: Option<Failure<RB>> = None;
        loop {
            let now = Instant::now();
            // `original` is only gone once the last allowed attempt was sent.
            let decision = if plan.sent() >= allowed || original.is_none() {
                Decision::Stop(Stop::AttemptsExhausted { attempts: allowed })
            } else {
                plan.next(deadline, now.into_std())
            };
            let attempt = match decision {
                Decision::Send(attempt) => attempt,
                Decision::Stop(stop) => {
                    if let (Some(record), Stop::NotEnoughTime { .. }) = (&mut record, stop) {
                        record.skipped(now);
                    }
                    let target = || match (&target, &original) {
                        (Some(target), _) => String::from(&**target),
                        (None, Some(request)) => authority_name(request).to_owned(),
                        (None, None) => UNNAMED_TARGET.to_owned(),
                    };
                    let result = stopped(last, plan.sent(), stop, &policy, target);
                    if let Some(record) = &mut record {
                        record.finish(&result);
                    }
                    return result;
                }
            };
            // A 5xx kept from the previous attempt is only returned if none follows it: let it
            // go (and its connection with it) before the next attempt.
            drop(last.take());
            // No attempt can follow the last one allowed, so it takes the original instead of
            // a copy (a request sent once, such as a `POST`, is never copied).
            let attempt_request = match original.take() {
                Some(request) if plan.sent() >= allowed => {
                    if target.is_none() {
                        target = Some(Arc::from(authority_name(&request)));
                    }
                    into_attempt(request, attempt.budget, explicit)
                }
                Some(request) => {
                    let copy = rebuild(&request, attempt.budget, explicit);
                    original = Some(request);
                    copy
                }
                // Ruled out by the check before planning; stop as if the attempts were used.
                None => continue,
            };
            let _calling = record.as_mut().map(|record| record.begin(now));
            let outcome = tokio::time::timeout_at(now + attempt.wait, async {
                let ready = inner.ready().await.map_err(Into::into)?;
                ready.call(attempt_request).await.map_err(Into::into)
            })
            .await;
            let end = Instant::now();
            let failure = match outcome {
                Ok(Ok(response)) => {
                    if let Some(record) = &mut record {
                        record.end_with_response(end, &response);
                    }
                    if !response.status().is_server_error() {
                        let result = Ok(response);
                        if let Some(record) = &mut record {
                            record.finish(&result);
                        }
                        return result;
                    }
                    Failure::Response(response)
                }
                Ok(Err(error)) => {
                    if let Some(record) = &mut record {
                        record.end(end, outcome::ERROR);
                    }
                    Failure::Error(error)
                }
                Err(_elapsed) => {
                    if let Some(record) = &mut record {
                        record.end(end, outcome::TIMEOUT);
                    }
                    Failure::Timeout {
                        capped: attempt.wait < policy.timeout(),
                    }
                }
            };
            last = Some(failure);
        }
    }
}

/// Whether a failed attempt of `request` may be sent again: its method is idempotent, or it
/// carries an [`IDEMPOTENCY_KEY`].
fn may_retry<B>(request: &Request<B>) -> bool {
    let idempotent = matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    );
    idempotent || request.headers().contains_key(IDEMPOTENCY_KEY)
}

/// The request for one attempt: the original's method, URI, version, headers and a clone of its
/// body, with `Deadline-Budget-Ms` set to `budget` or removed. Extensions are not copied, except
/// an explicit deadline.
fn rebuild<B: Clone>(
    original: &Request<B>,
    budget: Option<Budget>,
    explicit: Option<Deadline>,
) -> Request<B> {
    let mut request = Request::new(original.body().clone());
    *request.method_mut() = original.method().clone();
    *request.uri_mut() = original.uri().clone();
    *request.version_mut() = original.version();
    *request.headers_mut() = original.headers().clone();
    set_budget(&mut request, budget);
    if let Some(deadline) = explicit {
        request.extensions_mut().insert(deadline);
    }
    request
}

/// The original request made the attempt's, as [`rebuild`] would copy it: the same parts, its
/// `Deadline-Budget-Ms` set to `budget` or removed, its extensions cleared except an explicit
/// deadline.
fn into_attempt<B>(
    mut request: Request<B>,
    budget: Option<Budget>,
    explicit: Option<Deadline>,
) -> Request<B> {
    set_budget(&mut request, budget);
    let extensions = request.extensions_mut();
    extensions.clear();
    if let Some(deadline) = explicit {
        extensions.insert(deadline);
    }
    request
}

/// Sets the attempt's `Deadline-Budget-Ms` to `budget`, or removes it without one.
fn set_budget<B>(request: &mut Request<B>, budget: Option<Budget>) {
    let headers = request.headers_mut();
    match budget {
        // `insert` replaces every value the request arrived with; never a second line.
        Some(budget) => {
            headers.insert(BUDGET_HEADER, budget.to_header_value());
        }
        None => {
            headers.remove(BUDGET_HEADER);
        }
    }
}

/// The downstream's name when none was configured: the request URI's authority.
fn authority_name<B>(request: &Request<B>) -> &str {
    request
        .uri()
        .authority()
        .map_or(UNNAMED_TARGET, |a| a.as_str())
}

/// The call's result once the planner sends no more attempts (`target` names the downstream,
/// for the deadline error's message).
fn stopped<RB>(
    last: Option<Failure<RB>>,
    sent: u32,
    stop: Stop,
    policy: &CallPolicy,
    target: impl FnOnce() -> String,
) -> Result<Response<RB>, CallError> {
    let out_of_time = matches!(stop, Stop::NotEnoughTime { .. });
    let deadline = || CallError::DeadlineExceeded(DeadlineExceeded::calling(target(), sent, stop));
    match last {
        None => Err(CallError::AttemptSkipped(AttemptSkipped::new(sent, stop))),
        Some(Failure::Response(response)) => Ok(response),
        Some(Failure::Timeout { capped }) if capped || out_of_time => Err(deadline()),
        Some(Failure::Timeout { .. }) => Err(CallError::TimedOut {
            attempts_sent: sent,
            timeout: policy.timeout(),
        }),
        Some(Failure::Error(_)) if out_of_time => Err(deadline()),
        Some(Failure::Error(source)) => Err(CallError::Inner {
            attempts_sent: sent,
            source,
        }),
    }
}

/// The call's span under construction, recorded into the context when dropped.
struct CallRecord {
    context: DeadlineContext,
    /// The downstream, shared with each attempt's activity.
    target: Arc<str>,
    /// The call span's name, already a token.
    name: String,
    start_ms: u64,
    attempts: Vec<Span>,
    /// When the attempt in flight started, in ms since arrival.
    in_flight: Option<u64>,
    /// How the call ended; `None` while it runs (and so when its future is dropped).
    outcome: Option<String>,
}

impl CallRecord {
    fn new(context: DeadlineContext, target: Arc<str>, name: String, start: Instant) -> CallRecord {
        let start_ms = context.ms_since_arrival(start);
        CallRecord {
            context,
            target,
            name,
            start_ms,
            // One span per attempt, and one more if the planner refuses one: never regrown.
            attempts: Vec::with_capacity(2),
            in_flight: None,
            outcome: None,
        }
    }

    /// An attempt starts at `now`; the hop is calling the target until the guard is dropped.
    fn begin(&mut self, now: Instant) -> crate::context::ActivityGuard {
        self.in_flight = Some(self.context.ms_since_arrival(now));
        self.context.enter_calling(Arc::clone(&self.target))
    }

    /// The attempt in flight ended at `end` without a response.
    fn end(&mut self, end: Instant, outcome: &str) {
        if let Some(span) = self.close(end, outcome) {
            self.attempts.push(span);
        }
    }

    /// The attempt in flight got `response` at `end`: its callee's trace goes under it.
    fn end_with_response<RB>(&mut self, end: Instant, response: &Response<RB>) {
        let Some(mut span) = self.close(end, response.status().as_str()) else {
            return;
        };
        if let Some(value) = response.headers().get(TRACE_HEADER) {
            let mut callee = Trace::from_header_value(value);
            callee.shift(span.start_ms);
            span.children = callee.spans;
            if callee.dropped > 0 {
                self.context.record_dropped(callee.dropped);
            }
        }
        self.attempts.push(span);
    }

    /// The planner refused an attempt at `now`: a zero-length `skipped` span.
    fn skipped(&mut self, now: Instant) {
        let at = self.context.ms_since_arrival(now);
        self.attempts
            .push(Span::new(name::ATTEMPT, at, at).with_outcome(outcome::SKIPPED));
    }

    fn finish<RB>(&mut self, result: &Result<Response<RB>, CallError>) {
        self.outcome = Some(match result {
            Ok(response) => response.status().as_str().to_owned(),
            Err(error) => error.outcome().to_owned(),
        });
    }

    fn close(&mut self, end: Instant, outcome: &str) -> Option<Span> {
        let start = self.in_flight.take()?;
        let end = self.context.ms_since_arrival(end);
        Some(Span::new(name::ATTEMPT, start, end).with_outcome(outcome))
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        let now = Instant::now();
        if let Some(span) = self.close(now, outcome::CANCELLED) {
            self.attempts.push(span);
        }
        let end = self.context.ms_since_arrival(now);
        let outcome = self
            .outcome
            .take()
            .unwrap_or_else(|| String::from(outcome::CANCELLED));
        let mut span =
            Span::new(std::mem::take(&mut self.name), self.start_ms, end).with_outcome(outcome);
        span.children = std::mem::take(&mut self.attempts);
        self.context.record(span);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: Method) -> Request<()> {
        Request::builder().method(method).body(()).unwrap()
    }

    #[test]
    fn idempotent_methods_may_be_retried_others_only_with_a_key() {
        for method in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::TRACE,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(may_retry(&request(method.clone())), "{method}");
        }
        let unknown = Method::from_bytes(b"PURGE").unwrap();
        for method in [Method::POST, Method::PATCH, Method::CONNECT, unknown] {
            assert!(!may_retry(&request(method.clone())), "{method}");
            let mut keyed = request(method.clone());
            keyed
                .headers_mut()
                .insert(IDEMPOTENCY_KEY, "k1".parse().unwrap());
            assert!(may_retry(&keyed), "{method} with a key");
        }
    }

    #[test]
    fn rebuild_copies_the_request_but_not_its_extensions() {
        let mut original = Request::builder()
            .method(Method::PUT)
            .uri("http://inventory:8080/items?id=7")
            .version(http::Version::HTTP_10)
            .header("x-request-id", "r1")
            .header(BUDGET_HEADER, "99999")
            .header(BUDGET_HEADER, "88888")
            .body("body".to_owned())
            .unwrap();
        original.extensions_mut().insert(7u8);
        let copy = rebuild(&original, Budget::from_millis(950), None);
        assert_eq!(copy.method(), Method::PUT);
        assert_eq!(copy.uri(), original.uri());
        assert_eq!(copy.version(), http::Version::HTTP_10);
        assert_eq!(copy.body(), "body");
        assert_eq!(copy.headers()["x-request-id"], "r1");
        let budgets: Vec<_> = copy.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["950"]);
        assert_eq!(copy.extensions().get::<u8>(), None);

        let copy = rebuild(&original, None, None);
        assert!(!copy.headers().contains_key(BUDGET_HEADER));
    }

    /// The last attempt moves the original instead of copying it: it must leave as the copy
    /// would have.
    #[test]
    fn the_moved_original_is_the_copy_it_replaces() {
        let explicit =
            Deadline::after_duration(Instant::now().into_std(), std::time::Duration::from_secs(1));
        for budget in [Budget::from_millis(950), None] {
            let mut original = Request::builder()
                .method(Method::POST)
                .uri("http://inventory:8080/items")
                .header("x-request-id", "r1")
                .header(BUDGET_HEADER, "99999")
                .header(BUDGET_HEADER, "88888")
                .body("body".to_owned())
                .unwrap();
            original.extensions_mut().insert(7u8);
            let copy = rebuild(&original, budget, Some(explicit));
            let moved = into_attempt(original, budget, Some(explicit));
            assert_eq!(moved.method(), copy.method());
            assert_eq!(moved.uri(), copy.uri());
            assert_eq!(moved.version(), copy.version());
            assert_eq!(moved.headers(), copy.headers());
            assert_eq!(moved.body(), copy.body());
            assert_eq!(moved.extensions().get::<u8>(), None);
            assert_eq!(moved.extensions().get::<Deadline>(), Some(&explicit));
        }
    }

    /// The call span's name is made once per layer; it must come out as `Span::new` would
    /// make it.
    #[test]
    fn names_match_what_span_new_makes() {
        for target in [
            "inventory",
            "127.0.0.1:8081",
            "crème brûlée",
            "",
            "a-target-name-longer-than-the-cap",
        ] {
            let expected = Span::new(format!("call:{target}"), 0, 0).name;
            assert_eq!(Target::new(target).span.as_ref(), expected, "{target:?}");
        }
    }
}

//! Deadline planning for [`reqwest`]: a [`reqwest_middleware`] middleware that makes a reqwest
//! client's calls carry what is left of the caller's deadline.
//!
//! Most Rust services call other services with `reqwest`, and reqwest knows nothing of the
//! request its caller is serving: a fixed timeout per call, retries (with
//! `reqwest-retry`) that sleep without looking at any deadline, and a callee that is never told
//! how long it has. [`DeadlineMiddleware`] gives reqwest the planning the `deadline-http`
//! client layer does: before every attempt the call planner ([`deadline::plan`]) decides
//! whether there is still time to send it, the attempt's timeout ([`reqwest::Request::timeout_mut`])
//! never runs past the caller's deadline, the callee is told its budget in
//! `Deadline-Budget-Ms`, retries back off with full jitter inside the budget and draw from a
//! retry budget shared by every clone of the client, the callee's pushback (`Retry-After`,
//! `grpc-retry-pushback-ms`) is honoured inside the budget, and the call with its attempts and
//! its callees' `Deadline-Trace` goes into the hop's trace.
//!
//! The deadline is picked up with no application code: inside a handler served by the
//! `deadline-http` enforce layer (or inside [`deadline_http::with_deadline`]), the task-local
//! deadline is the call's. A [`deadline::Deadline`] in the request's
//! [`http::Extensions`] (given with `reqwest_middleware::RequestBuilder::with_extension`) can
//! tighten it. Without either, the call runs as reqwest would run it: no header, the policy's
//! full timeout per attempt.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! use deadline_reqwest::{CallPolicy, DeadlineMiddleware};
//!
//! # async fn handler() -> Result<(), reqwest_middleware::Error> {
//! let policy = CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy");
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(DeadlineMiddleware::new(policy).target("inventory"))
//!     .build();
//! // Inside a request served by the enforce layer, this carries what is left of its deadline.
//! let response = client.get("http://127.0.0.1:8081/items/7").send().await?;
//! println!("inventory answered {}", response.status());
//! # Ok(()) }
//! ```
//!
//! # Where it goes in the middleware chain
//!
//! Last, or after anything that only decorates requests: it sends several attempts per call, so
//! a middleware after it runs once per attempt, one before it once per call. Do not combine it
//! with `reqwest-retry`'s middleware: that one sleeps without a deadline and retries any method.
//!
//! # Retries
//!
//! As in `deadline-http`: on a 5xx, a connection error or an attempt timeout, and on a 429 that
//! says when to come back; never on other 4xx. Only requests whose method is idempotent, or that
//! carry an `Idempotency-Key` header, are retried, and only when reqwest can copy the request
//! (`Request::try_clone`: not a streaming body). A callee's 504 is retried only when the retry
//! would get at least half the budget that ran out. With propagation off (the policy's
//! `propagate(false)`), every attempt runs with its full timeout, retried at once and
//! unbudgeted, as without the library.
//!
//! # Errors
//!
//! When the planner stops before any attempt, or after attempts that timed out or failed for
//! lack of time, the call fails with [`reqwest_middleware::Error::Middleware`] holding a
//! [`deadline_http::CallError`] (downcast it to tell a deadline from other failures). After a
//! 5xx response that is not retried further, that response is returned; after a transport error
//! with attempts left unused for other reasons, reqwest's error is returned.
//!
//! # The response body
//!
//! A response's body is read within its attempt's wait (which never runs past the caller's
//! deadline) and at most [`DeadlineMiddleware::max_body`] bytes (4 MiB by default), by the same
//! body wrapper the `deadline-http` client uses ([`deadline_http::propagate::body`]). A body
//! past the limit, still arriving at the deadline, or cut short fails the read (`bytes()`,
//! `chunk()`, …) with a reqwest error whose sources hold the [`BodyError`] ([`body_error`]
//! finds it), and its connection or HTTP/2 stream is dropped so the callee sees the hang-up.

use std::sync::{Arc, Mutex};

use deadline::header::set_budget;
use deadline::plan::backoff::{Backoff, Delayed, PacedDecision};
use deadline::plan::retry::{self, Callee504, LastAnswer, RetryRules, is_idempotent};
use deadline::plan::retry_budget::{RetryBudget, RetryBudgetConfig};
use deadline::trace::{Span, TRACE_HEADER, Trace, name, outcome};
use deadline::{Deadline, Plan, Stop};
use deadline_http::propagate::{AttemptEnd, BodyError, CallBody, DEFAULT_MAX_BODY, Draws};
use deadline_http::{
    AttemptSkipped, CallError, DeadlineContext, DeadlineExceeded, IDEMPOTENCY_KEY,
};
use http::Extensions;
use reqwest::{Request, Response};
use reqwest_middleware::{Middleware, Next};
use tokio::time::Instant;

// The policy a `DeadlineMiddleware` calls under, from the core crate, so a caller needs no
// other import.
pub use deadline::{CallPolicy, PolicyError};

/// The middleware: see the [crate docs](crate). Cloning it is cheap, and clones share one retry
/// budget.
#[derive(Clone, Debug)]
pub struct DeadlineMiddleware {
    policy: CallPolicy,
    target: Option<Arc<str>>,
    rules: RetryRules,
    shared: Arc<Shared>,
    max_body: u64,
}

/// What every clone shares: the retry budget and the random draws.
#[derive(Debug)]
struct Shared {
    budget: Option<Mutex<RetryBudget>>,
    draws: Draws,
}

impl Shared {
    fn new(config: Option<RetryBudgetConfig>) -> Arc<Shared> {
        Arc::new(Shared {
            budget: config.map(|c| Mutex::new(RetryBudget::new(c, Instant::now().into_std()))),
            draws: Draws::seeded(),
        })
    }

    fn with_budget<T>(&self, f: impl FnOnce(&mut RetryBudget) -> T) -> Option<T> {
        self.budget
            .as_ref()
            .map(|b| f(&mut b.lock().unwrap_or_else(|e| e.into_inner())))
    }
}

impl DeadlineMiddleware {
    /// Calls under `policy`, with the default backoff (25 ms doubling to 250 ms, full jitter)
    /// and retry budget ([`RetryBudgetConfig::DEFAULT`]: 20 % of requests plus 10 per 10 s
    /// window, and a bucket of 5 tokens that failed retries empty and successes refill).
    pub fn new(policy: CallPolicy) -> DeadlineMiddleware {
        DeadlineMiddleware {
            policy,
            target: None,
            rules: RetryRules::default(),
            shared: Shared::new(Some(RetryBudgetConfig::DEFAULT)),
            max_body: DEFAULT_MAX_BODY,
        }
    }

    /// The largest response body a call reads, in bytes (default
    /// [`DEFAULT_MAX_BODY`], 4 MiB): past it, or when the callee announces more, reading the
    /// body fails with a [`BodyError::TooLarge`] (in the reqwest error's sources) and the
    /// connection or stream is dropped. `u64::MAX` is no limit. See
    /// [`deadline_http::propagate::body`].
    #[must_use = "this returns the middleware with the limit set; the original is unchanged"]
    pub fn max_body(mut self, limit: u64) -> DeadlineMiddleware {
        self.max_body = limit;
        self
    }

    /// Names the downstream in the call's span (`call:<name>`; default: the URL's host and
    /// port). The retry budget is one per middleware: give each target its own.
    #[must_use = "this returns the middleware with the target set; the original is unchanged"]
    pub fn target(mut self, name: impl Into<String>) -> DeadlineMiddleware {
        self.target = Some(Arc::from(name.into()));
        self
    }

    /// The backoff before retries ([`Backoff::NONE`] retries at once).
    #[must_use = "this returns the middleware with the backoff set; the original is unchanged"]
    pub fn backoff(mut self, backoff: Backoff) -> DeadlineMiddleware {
        self.rules.backoff = backoff;
        self
    }

    /// The rule for retrying a callee's 504.
    #[must_use = "this returns the middleware with the rule set; the original is unchanged"]
    pub fn callee_504(mut self, rule: Callee504) -> DeadlineMiddleware {
        self.rules.callee_504 = rule;
        self
    }

    /// The retry budget (`None`: retries are not budgeted). Starts a new budget, shared by the
    /// clones made from here on.
    #[must_use = "this returns the middleware with the budget set; the original is unchanged"]
    pub fn retry_budget(mut self, budget: Option<RetryBudgetConfig>) -> DeadlineMiddleware {
        self.shared = Shared::new(budget);
        self
    }

    /// The call policy.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }
}

/// How the last attempt that did not succeed ended.
enum Failure {
    Response(Response),
    Error(reqwest_middleware::Error),
    Timeout(reqwest_middleware::Error, bool),
}

/// The call's span, recorded into the hop's context when dropped (so a call whose future is
/// dropped still says where its time went).
struct Record {
    context: DeadlineContext,
    span: Span,
    in_flight: Option<u64>,
    dropped: u64,
}

impl Record {
    fn attempt(&mut self, end: Instant, word: String, callee: Option<Trace>) {
        let Some(start_ms) = self.in_flight.take() else {
            return;
        };
        let end_ms = self.context.ms_since_arrival(end);
        let mut span = Span::new("attempt", start_ms, end_ms);
        span.outcome = Some(word);
        if let Some(mut callee) = callee {
            // Held inside the attempt: a callee cannot place its spans before the attempt was
            // sent or after its answer came.
            callee.nest_within(start_ms, end_ms);
            self.dropped += callee.dropped;
            span.children = callee.spans;
        }
        self.span.children.push(span);
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let now = Instant::now();
        self.attempt(now, outcome::CANCELLED.to_owned(), None);
        self.span.end_ms = self.context.ms_since_arrival(now).max(self.span.start_ms);
        if self.span.outcome.is_none() {
            self.span.outcome = Some(outcome::CANCELLED.to_owned());
        }
        self.context
            .record(std::mem::replace(&mut self.span, Span::new("_", 0, 0)));
        if self.dropped > 0 {
            self.context.record_dropped(self.dropped);
        }
    }
}

fn may_retry(request: &Request) -> bool {
    is_idempotent(request.method()) || request.headers().contains_key(IDEMPOTENCY_KEY)
}

fn middleware_error(error: CallError) -> reqwest_middleware::Error {
    reqwest_middleware::Error::Middleware(anyhow::Error::new(error))
}

#[async_trait::async_trait]
impl Middleware for DeadlineMiddleware {
    async fn handle(
        &self,
        request: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let context = DeadlineContext::current();
        let explicit = extensions.get::<Deadline>().copied();
        let deadline = match (
            explicit,
            context.as_ref().and_then(DeadlineContext::deadline),
        ) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let target: Arc<str> = self.target.clone().unwrap_or_else(|| {
            let url = request.url();
            let host = url.host_str().unwrap_or("downstream");
            Arc::from(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host.to_owned(),
            })
        });
        let start = Instant::now();
        let mut record = context.map(|context| Record {
            span: Span::new(name::call(&target), context.ms_since_arrival(start), 0),
            context,
            in_flight: None,
            dropped: 0,
        });
        // Retried only when allowed and when reqwest can copy it (not a streaming body).
        let retryable = may_retry(&request) && request.try_clone().is_some();
        let mut original = Some(request);
        let mut plan = Plan::new(self.policy);
        let mut answer = LastAnswer::default();
        let mut last: Option<Failure> = None;
        let propagate = self.policy.propagate();
        loop {
            let now = Instant::now();
            let std_now = now.into_std();
            let decision = if plan.sent() >= 1 && (!retryable || original.is_none()) {
                PacedDecision::Stop(Stop::AttemptsExhausted {
                    attempts: plan.sent(),
                })
            } else if !propagate {
                let no_answer = LastAnswer::default();
                plan.next_retry(
                    &RetryRules::IMMEDIATE,
                    deadline,
                    std_now,
                    0,
                    &no_answer,
                    |_| true,
                )
            } else {
                let first = plan.sent() == 0;
                let decision = plan.next_retry(
                    &self.rules,
                    deadline,
                    std_now,
                    self.shared.draws.next(),
                    &answer,
                    {
                        // A shed is retried only with a bucket's permission.
                        |_: &Delayed| {
                            let shed = answer.is_shed();
                            self.shared
                                .with_budget(|b| {
                                    (!shed || b.config().retry_bucket().is_some())
                                        && b.try_withdraw(std_now)
                                })
                                .unwrap_or(!shed)
                        }
                    },
                );
                if first && matches!(decision, PacedDecision::Send(_)) {
                    self.shared.with_budget(|b| b.deposit(std_now));
                }
                decision
            };
            let (at, attempt) = match decision {
                PacedDecision::Send(Delayed { delay, attempt }) => {
                    let at = now + delay;
                    if !delay.is_zero() {
                        tokio::time::sleep_until(at).await;
                    }
                    (at, attempt)
                }
                PacedDecision::Stop(stop) => {
                    return stopped(last, plan.sent(), stop, &target, record.as_mut(), now);
                }
            };
            // A copy while another attempt may follow; the original itself for the last.
            let last_allowed = plan.sent() >= self.policy.attempts() || !retryable;
            let copy = if last_allowed {
                None
            } else {
                original.as_ref().and_then(Request::try_clone)
            };
            let Some(mut request) = copy.or_else(|| original.take()) else {
                continue;
            };
            set_budget(request.headers_mut(), attempt.budget);
            *request.timeout_mut() = Some(attempt.wait);
            drop(last.take());
            if let Some(record) = &mut record {
                record.in_flight = Some(record.context.ms_since_arrival(at));
            }
            let capped = attempt.wait < self.policy.timeout();
            let result =
                tokio::time::timeout_at(at + attempt.wait, next.clone().run(request, extensions))
                    .await;
            let end = Instant::now();
            match result {
                Ok(Ok(response)) => {
                    let until = AttemptEnd::new(at + attempt.wait, self.policy.timeout(), capped);
                    let response = bounded(response, until, self.max_body);
                    let callee = response
                        .headers()
                        .get(TRACE_HEADER)
                        .map(Trace::from_header_value);
                    if let Some(record) = &mut record {
                        record.attempt(end, response.status().as_u16().to_string(), callee);
                    }
                    if !retry::retryable(response.status(), response.headers()) {
                        if let Some(record) = &mut record {
                            record.span.outcome = Some(response.status().as_u16().to_string());
                        }
                        if propagate {
                            // A first attempt that worked tops the bucket up; a retry that
                            // worked gives its token back.
                            self.shared.with_budget(|b| {
                                if attempt.number <= 1 {
                                    b.first_attempt_succeeded();
                                } else {
                                    b.refund();
                                }
                            });
                        }
                        return Ok(response);
                    }
                    answer = LastAnswer::of(response.status(), response.headers(), attempt.budget);
                    last = Some(Failure::Response(response));
                }
                Ok(Err(error)) => {
                    let timed_out =
                        matches!(&error, reqwest_middleware::Error::Reqwest(e) if e.is_timeout());
                    if let Some(record) = &mut record {
                        let word = if timed_out {
                            outcome::TIMEOUT
                        } else {
                            outcome::ERROR
                        };
                        record.attempt(end, word.to_owned(), None);
                    }
                    answer = LastAnswer::default();
                    last = Some(if timed_out {
                        Failure::Timeout(error, capped)
                    } else {
                        Failure::Error(error)
                    });
                }
                Err(_elapsed) => {
                    if let Some(record) = &mut record {
                        record.attempt(end, outcome::TIMEOUT.to_owned(), None);
                    }
                    answer = LastAnswer::default();
                    let error = reqwest_middleware::Error::Middleware(anyhow::anyhow!(
                        "attempt {} got no answer within {} ms",
                        attempt.number,
                        attempt.wait.as_millis()
                    ));
                    last = Some(Failure::Timeout(error, capped));
                }
            }
        }
    }
}

/// `response` with its body read within the attempt's wait (`until`) and at most `max_body`
/// bytes, as the `deadline-http` client reads one (see [`deadline_http::propagate::body`]).
/// reqwest's own per-request timeout, set to the same wait, covers the body too; the size
/// limit is this one's alone. The response keeps its URL.
fn bounded(response: Response, until: AttemptEnd, max_body: u64) -> Response {
    let url = response.url().clone();
    let response: http::Response<reqwest::Body> = response.into();
    let (mut parts, body) = response.into_parts();
    let body = CallBody::new(body, Some(until), max_body);
    // reqwest reads a response's URL from an extension only its response builder sets.
    use reqwest::ResponseBuilderExt as _;
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        parts.extensions.extend(carrier.into_parts().0.extensions);
    }
    Response::from(http::Response::from_parts(parts, reqwest::Body::wrap(body)))
}

/// Whether `error` (from reading a response body) is a [`BodyError`] of this middleware's, and
/// which.
pub fn body_error<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyError> {
    let mut source = Some(error);
    while let Some(current) = source {
        if let Some(body) = current.downcast_ref::<BodyError>() {
            return Some(body);
        }
        source = current.source();
    }
    None
}

/// The call's result once the planner sends no more attempts.
fn stopped(
    last: Option<Failure>,
    sent: u32,
    stop: Stop,
    target: &str,
    record: Option<&mut Record>,
    now: Instant,
) -> reqwest_middleware::Result<Response> {
    let out_of_time = stop.reason().is_out_of_time();
    let deadline = || {
        middleware_error(CallError::DeadlineExceeded(DeadlineExceeded::calling(
            target, sent, stop,
        )))
    };
    let result = match last {
        None => Err(middleware_error(CallError::AttemptSkipped(
            AttemptSkipped::new(sent, stop),
        ))),
        Some(Failure::Response(response)) => Ok(response),
        Some(Failure::Timeout(_, capped)) if capped || out_of_time => Err(deadline()),
        Some(Failure::Error(_)) if out_of_time => Err(deadline()),
        Some(Failure::Timeout(error, _) | Failure::Error(error)) => Err(error),
    };
    if let Some(record) = record {
        if let Some(word) = stop.reason().span_outcome() {
            let at = record.context.ms_since_arrival(now);
            let mut span = Span::new("attempt", at, at);
            span.outcome = Some(word.to_owned());
            record.span.children.push(span);
        }
        record.span.outcome = Some(match &result {
            Ok(response) => response.status().as_u16().to_string(),
            Err(reqwest_middleware::Error::Middleware(e)) => match e.downcast_ref::<CallError>() {
                Some(CallError::AttemptSkipped(_)) => outcome::SKIPPED.to_owned(),
                Some(CallError::DeadlineExceeded(_)) => outcome::DEADLINE.to_owned(),
                Some(CallError::TimedOut { .. }) => outcome::TIMEOUT.to_owned(),
                _ => outcome::ERROR.to_owned(),
            },
            Err(_) => outcome::ERROR.to_owned(),
        });
    }
    result
}

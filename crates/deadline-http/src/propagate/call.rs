//! The call loop: one outbound call, from the first plan to its result.

use std::sync::Arc;

use deadline::trace::outcome;
use deadline::{CallPolicy, Deadline, Decision, Plan, Stop};
use http::{Request, Response};
use tokio::time::Instant;
use tokio::time::error::Elapsed;
use tower::ServiceExt;
use tower_service::Service;

use super::attempt::{AttemptRequests, authority_name};
use super::record::CallRecord;
use super::{Target, UNNAMED_TARGET};
use crate::context::DeadlineContext;
use crate::error::{AttemptSkipped, BoxError, CallError, DeadlineExceeded};

/// Everything one call needs, moved into its future.
pub(super) struct Call<S, B> {
    pub(super) inner: S,
    pub(super) policy: CallPolicy,
    pub(super) request: Request<B>,
    pub(super) explicit: Option<Deadline>,
    pub(super) deadline: Option<Deadline>,
    /// The configured target; the URI's authority is only looked up when a name is needed.
    pub(super) target: Option<Target>,
    pub(super) context: Option<DeadlineContext>,
}

/// How the last attempt that did not succeed ended.
enum Failure<RB> {
    /// A 5xx response (or a gRPC UNAVAILABLE or DEADLINE_EXCEEDED), kept to return if no
    /// further attempt is sent.
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
    /// Plans, sends and judges attempts until one is returned or the planner stops.
    pub(super) async fn run(self) -> Result<Response<RB>, CallError> {
        let Call {
            mut inner,
            policy,
            request,
            explicit,
            deadline,
            target,
            context,
        } = self;
        // The downstream's name, shared by the call's span and its attempts' activity. Made
        // from the URI only when a context needs it (or, below, before the request is moved
        // into its last attempt): without either, only an error message would ever read it.
        let (mut target, mut record) = start_record(target, context, &request);
        let mut requests = AttemptRequests::new(request, policy.attempts(), explicit);
        let mut plan = Plan::new(policy);
        let mut last: Option<Failure<RB>> = None;
        loop {
            let now = Instant::now();
            let attempt = match requests.plan(&mut plan, deadline, now) {
                Decision::Send(attempt) => attempt,
                Decision::Stop(stop) => {
                    let target = || match (&target, requests.original()) {
                        (Some(target), _) => String::from(&**target),
                        (None, Some(request)) => authority_name(request).to_owned(),
                        (None, None) => UNNAMED_TARGET.to_owned(),
                    };
                    let result = stopped(last, plan.sent(), stop, &policy, target);
                    if let Some(record) = &mut record {
                        record.stopped(now, stop, &result);
                    }
                    return result;
                }
            };
            // A 5xx kept from the previous attempt is only returned if none follows it: let it
            // go (and its connection with it) before the next attempt.
            drop(last.take());
            if target.is_none() && requests.is_last(plan.sent()) {
                target = requests.original().map(|r| Arc::from(authority_name(r)));
            }
            // Ruled out by the check before planning; stop as if the attempts were used.
            let Some(attempt_request) = requests.next(plan.sent(), attempt.budget) else {
                continue;
            };
            let _calling = record.as_mut().map(|record| record.begin(now));
            let outcome = tokio::time::timeout_at(now + attempt.wait, async {
                let ready = inner.ready().await.map_err(Into::into)?;
                ready.call(attempt_request).await.map_err(Into::into)
            })
            .await;
            let capped = attempt.wait < policy.timeout();
            match judge(outcome, Instant::now(), record.as_mut(), capped) {
                Ok(response) => return Ok(response),
                Err(failure) => last = Some(failure),
            }
        }
    }
}

/// The downstream's name (when it is already known or a context needs it) and the call's
/// record (inside a context).
fn start_record<B>(
    target: Option<Target>,
    context: Option<DeadlineContext>,
    request: &Request<B>,
) -> (Option<Arc<str>>, Option<CallRecord>) {
    let start = Instant::now();
    match (target, context) {
        (Some(target), Some(context)) => {
            let record = CallRecord::new(context, target.name.clone(), target.span, start);
            (Some(target.name), Some(record))
        }
        (Some(target), None) => (Some(target.name), None),
        (None, Some(context)) => {
            let name: Arc<str> = Arc::from(authority_name(request));
            let span: Arc<str> = Arc::from(deadline::trace::name::call(&name));
            (
                Some(name.clone()),
                Some(CallRecord::new(context, name, span, start)),
            )
        }
        (None, None) => (None, None),
    }
}

/// What an attempt's `outcome` at `end` means for the call: a response to return (anything but
/// a 5xx), or how it failed. The attempt's span is closed either way.
fn judge<RB>(
    outcome: Result<Result<Response<RB>, BoxError>, Elapsed>,
    end: Instant,
    mut record: Option<&mut CallRecord>,
    capped: bool,
) -> Result<Response<RB>, Failure<RB>> {
    match outcome {
        Ok(Ok(response)) => {
            if let Some(record) = &mut record {
                record.end_with_response(end, &response);
            }
            if super::grpc::is_retryable(&response) {
                return Err(Failure::Response(response));
            }
            if let Some(record) = record {
                record.finish_with(&response);
            }
            Ok(response)
        }
        Ok(Err(error)) => {
            if let Some(record) = record {
                record.end(end, outcome::ERROR);
            }
            Err(Failure::Error(error))
        }
        Err(_elapsed) => {
            if let Some(record) = record {
                record.end(end, outcome::TIMEOUT);
            }
            Err(Failure::Timeout { capped })
        }
    }
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

//! The service [`EnforceDeadlineLayer`](super::EnforceDeadlineLayer) makes: what happens when a
//! request arrives, up to the future that queues, works and replies (see the
//! [module docs](super) for the whole sequence).

use std::sync::Arc;
use std::task::{Context, Poll};

use deadline::Deadline;
use deadline::header::BudgetValue;
use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower_service::Service;

#[cfg(feature = "baseline")]
use super::baseline;
use super::body::EnforceBody;
use super::future::{Call, Reply, ResponseFuture, ScopedWork, Work};
use super::recorder::Recorder;
use super::settings::HopSettings;
use crate::context::DeadlineContext;
use crate::hold::HoldMetrics;
use crate::time;

/// Enforces each request's `Deadline-Budget-Ms` around an inner service: made by
/// [`EnforceDeadlineLayer`](super::EnforceDeadlineLayer); see the [module docs](super).
#[derive(Clone, Debug)]
pub struct EnforceDeadline<S> {
    pub(super) inner: S,
    pub(super) settings: Arc<HopSettings>,
}

impl<S> EnforceDeadline<S> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The counters of this service's hold reports (shared with the layer that made it).
    pub fn metrics(&self) -> HoldMetrics {
        self.settings.metrics.clone()
    }

    /// Absolute deadlines ignored because they disagreed with a relative budget by more than
    /// the maximum skew (shared with the layer that made it).
    pub fn ignored_absolute_deadlines(&self) -> u64 {
        self.settings.sources.ignored()
    }
}

impl<S, ReqB, ResB> Service<Request<ReqB>> for EnforceDeadline<S>
where
    S: Service<Request<ReqB>, Response = Response<ResB>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ReqB: Send + 'static,
    ResB: Send + 'static,
{
    type Response = Response<EnforceBody<ResB>>;
    type Error = S::Error;
    type Future = ResponseFuture<ResB, S::Error, ScopedWork<S, ReqB>>;

    /// Always ready: the inner service's readiness is awaited inside each request's future,
    /// after its slot and before its cutoff.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<ReqB>) -> Self::Future {
        let arrival = Instant::now();
        let settings = &self.settings;
        let mut recorder = Recorder::arrived(settings.clone(), &request, arrival);

        #[cfg(feature = "baseline")]
        if !settings.enforce {
            let inner = self.inner.clone();
            return baseline::call(inner, settings, request, recorder, arrival);
        }

        // A gRPC request's own deadline header is always read.
        let (caller, budget) =
            settings
                .sources
                .read_request(&settings.name, request.headers(), settings.max_budget);
        // What stands in front: its timeout, and the time the request spent there.
        let mut by_front = false;
        let budget = match budget {
            Ok(budget) if settings.front.timeout.is_some() || settings.front.request_start => {
                let (budget, set) = in_front(settings, request.headers(), budget);
                by_front = set;
                Ok(budget)
            }
            other => other,
        };
        let expose = settings.exposure.allows(
            request.headers(),
            request.extensions(),
            !matches!(budget, Ok(None)),
        );
        let reject = |recorder, status, message| {
            let reply = Reply {
                cutoff: None,
                ctx: Some(DeadlineContext::new(None, settings.reserve, arrival)),
                settings: settings.clone(),
                recorder: Some(recorder),
                caller,
                expose,
            };
            ResponseFuture::reject(reply, status, message)
        };
        let budget = match budget {
            Ok(budget) => budget,
            Err(malformed) => {
                return reject(recorder, StatusCode::BAD_REQUEST, format!("{malformed}\n"));
            }
        };
        let budget_ms = budget.map(|b| match b {
            BudgetValue::Expired => 0,
            BudgetValue::Remaining(b) => b.as_millis(),
        });
        recorder.set_budget(budget_ms);
        if budget == Some(BudgetValue::Expired) {
            let message = format!(
                "deadline exceeded at {} on arrival: the caller had already run out\n",
                settings.name
            );
            return reject(recorder, StatusCode::GATEWAY_TIMEOUT, message);
        }

        // The deadline and the cutoff (the deadline less the reply reserve) from the budget.
        let times = budget.map(|b| {
            Deadline::after_with_reserve(time::to_std(arrival), b.remaining(), settings.reserve)
        });
        let deadline = times.map(|(deadline, _)| deadline);
        // A request without a budget, whose answer shows no trace, runs without a context when
        // the layer is told so and nothing else needs one (see `context_without_budget`).
        let needs_context =
            settings.context_without_budget || deadline.is_some() || expose || settings.extensions;
        #[cfg(feature = "otel")]
        let needs_context = needs_context || recorder.span_context().is_valid();
        #[cfg(not(feature = "otel"))]
        let ctx =
            needs_context.then(|| DeadlineContext::with_cutoff(times, settings.reserve, arrival));
        #[cfg(feature = "otel")]
        let ctx = needs_context.then(|| {
            DeadlineContext::with_cutoff(times, settings.reserve, arrival)
                .with_span(recorder.span_context())
        });
        if let (true, Some(ctx)) = (by_front, &ctx) {
            ctx.record(deadline::Span::new(FRONT_SPAN, 0, 0));
        }
        // A downstream's spans go only where this hop's trace goes.
        let ctx = ctx.map(|ctx| {
            if expose {
                ctx
            } else {
                ctx.without_callee_traces()
            }
        });
        let cutoff = times.map(|(_, cutoff)| cutoff);
        if let Some(cutoff) = cutoff {
            if cutoff.is_expired(time::to_std(arrival)) {
                let message = format!(
                    "deadline exceeded at {} on arrival: a budget of {} ms leaves nothing once \
                     the reply reserve of {} ms is kept back\n",
                    settings.name,
                    budget_ms.unwrap_or(0),
                    settings.reserve.as_millis()
                );
                return reject(recorder, StatusCode::GATEWAY_TIMEOUT, message);
            }
        }

        if let (true, Some(ctx)) = (settings.extensions, &ctx) {
            let extensions = request.extensions_mut();
            extensions.insert(ctx.clone());
            if let Some(deadline) = deadline {
                extensions.insert(deadline);
            }
        }
        let work = Work::new(ctx.clone(), Call::new(self.inner.clone(), request));
        let reply = Reply {
            cutoff: cutoff.map(time::to_tokio),
            ctx,
            settings: settings.clone(),
            recorder: Some(recorder),
            caller,
            expose,
        };
        ResponseFuture::run(reply, work, settings.slots.clone())
    }
}

/// The span a hop's trace carries when the front timeout set its budget.
const FRONT_SPAN: &str = "budget:front";

/// The budget of a request with `headers` after what stands in front: capped by the front
/// timeout (or set by it, without a budget header), then less the time since the front's
/// `X-Request-Start` where it is trusted (a stamp not used is counted). The flag says whether
/// the front timeout set it.
fn in_front(
    settings: &HopSettings,
    headers: &http::HeaderMap,
    budget: Option<BudgetValue>,
) -> (Option<BudgetValue>, bool) {
    use deadline::front;
    let front = &settings.front;
    let (budget, by_front) = match front.timeout {
        Some(timeout) => {
            let (budget, set) = front::with_front(budget, timeout, front.margin);
            (Some(budget), set)
        }
        None => (budget, false),
    };
    let Some(value) = budget.filter(|_| front.request_start) else {
        return (budget, by_front);
    };
    let Some(stamp) = headers.get(front::REQUEST_START_HEADER) else {
        return (budget, by_front);
    };
    // An absolute deadline read from the request already counts the time spent in front:
    // taking it off again would count it twice.
    if settings
        .sources
        .set
        .contains(deadline::inbound::Source::RequestDeadline)
        && headers.contains_key(deadline::absolute::REQUEST_DEADLINE_HEADER)
    {
        return (budget, by_front);
    }
    let spent = front::parse_request_start(stamp.as_bytes())
        .ok_or(front::StartIgnored::Malformed)
        .and_then(|start| front::time_in_front(start, time::wall_now(), &settings.sources.guard));
    match spent {
        Ok(spent) => (Some(front::less_time_in_front(value, spent)), by_front),
        Err(_) => {
            front
                .ignored
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            (budget, by_front)
        }
    }
}

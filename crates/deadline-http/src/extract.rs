//! axum extractors for the request's deadline (feature `axum`).
//!
//! The enforce layer runs the handler with the request's [`DeadlineContext`] as the task-local
//! current context; these extractors read it there (or, when the layer was told to put them
//! there with [`request_extensions`](crate::EnforceDeadlineLayer::request_extensions), from the
//! request extensions, as axum's own `MatchedPath` reads what the router put there).
//!
//! ```
//! use axum::{Router, routing::get};
//! use deadline_http::{EnforceDeadlineLayer, RequestDeadline};
//!
//! async fn strict(RequestDeadline(deadline): RequestDeadline) -> String {
//!     format!("answer by {deadline:?}")
//! }
//!
//! async fn lenient(deadline: Option<RequestDeadline>) -> &'static str {
//!     if deadline.is_some() { "in a hurry" } else { "no deadline" }
//! }
//!
//! let app: Router = Router::new()
//!     .route("/strict", get(strict))
//!     .route("/lenient", get(lenient))
//!     .layer(EnforceDeadlineLayer::new("inventory")); // last `layer` call: outermost
//! ```
//!
//! Handlers can also return [`DeadlineExceeded`] (from [`check`](crate::check())): it answers
//! 504, which the layer reports as [`HoldOutcome::Deadline`](crate::HoldOutcome::Deadline).
//! So does a [`CallError`] that the deadline caused, so `?` works on outbound calls: a handler
//! returning `Result<_, CallError>` uses `?` on [`DeadlineClient`](crate::DeadlineClient)
//! calls and on `check()` alike (see [`CallError`'s response](CallError#impl-IntoResponse-for-CallError)).

use std::convert::Infallible;
use std::fmt;
use std::time::Duration;

use axum::extract::{FromRequestParts, OptionalFromRequestParts};
use axum::response::{IntoResponse, Response};
use deadline::Deadline;
use http::StatusCode;
use http::request::Parts;

use crate::context::DeadlineContext;
use crate::error::{AttemptSkipped, CallError, DeadlineExceeded};

/// The request's deadline, as set by the enforce layer from the caller's budget.
///
/// As an extractor it rejects a request without one ([`MissingDeadline`], a 400): the caller
/// sent no budget, or the layer is not in front of the handler. Extract `Option<RequestDeadline>`
/// to accept both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestDeadline(pub Deadline);

impl RequestDeadline {
    /// Time left before the deadline (not counting the reply reserve), now.
    pub fn remaining(&self) -> Duration {
        self.0.remaining(crate::time::now())
    }

    /// The deadline the enforce layer put in the request extensions, if any: the one lookup
    /// behind both the required and the optional extractor.
    fn from_parts(parts: &Parts) -> Option<RequestDeadline> {
        parts
            .extensions
            .get::<Deadline>()
            .copied()
            .or_else(crate::current_deadline)
            .map(RequestDeadline)
    }
}

impl<S> FromRequestParts<S> for RequestDeadline
where
    S: Send + Sync,
{
    type Rejection = MissingDeadline;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        RequestDeadline::from_parts(parts).ok_or(MissingDeadline)
    }
}

impl<S> OptionalFromRequestParts<S> for RequestDeadline
where
    S: Send + Sync,
{
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(RequestDeadline::from_parts(parts))
    }
}

/// Rejection of [`RequestDeadline`]: the request has no deadline. Answers 400.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingDeadline;

impl fmt::Display for MissingDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "this endpoint needs a deadline: send a Deadline-Budget-Ms header \
             (whole milliseconds you will wait)",
        )
    }
}

impl std::error::Error for MissingDeadline {}

impl IntoResponse for MissingDeadline {
    fn into_response(self) -> Response {
        (StatusCode::BAD_REQUEST, format!("{self}\n")).into_response()
    }
}

/// The whole request context (deadline, reserve, arrival, trace), with or without a deadline.
/// Rejects with [`MissingContext`] (a 500) when the request has none (the enforce layer is not
/// in front of the handler, or ran the request without one: by default, a request without a
/// budget); extract `Option<DeadlineContext>` to accept that, or give every request a context
/// with [`context_without_budget(true)`](crate::EnforceDeadlineLayer::context_without_budget).
impl<S> FromRequestParts<S> for DeadlineContext
where
    S: Send + Sync,
{
    type Rejection = MissingContext;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        context_of(parts).ok_or(MissingContext)
    }
}

impl<S> OptionalFromRequestParts<S> for DeadlineContext
where
    S: Send + Sync,
{
    type Rejection = Infallible;

    async fn from_request_parts(
        parts: &mut Parts,
        _state: &S,
    ) -> Result<Option<Self>, Self::Rejection> {
        Ok(context_of(parts))
    }
}

/// The request's context: from the extensions when the layer put it there, else the current
/// task-local one the layer runs the handler in.
fn context_of(parts: &Parts) -> Option<DeadlineContext> {
    parts
        .extensions
        .get::<DeadlineContext>()
        .cloned()
        .or_else(DeadlineContext::current)
}

/// Rejection of the [`DeadlineContext`] extractor: the enforce layer did not run for this
/// request (a server setup mistake), or ran it without a context because it sent no budget
/// and the layer was told so ([`context_without_budget`](
/// crate::EnforceDeadlineLayer::context_without_budget)) and no outer layer made one. Answers
/// 500.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MissingContext;

impl fmt::Display for MissingContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "no deadline context: the enforce layer is not in front of this handler, or it ran \
             this request without one (a request without a budget, by default; \
             context_without_budget(true) gives every request one)",
        )
    }
}

impl std::error::Error for MissingContext {}

impl IntoResponse for MissingContext {
    fn into_response(self) -> Response {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("{self}\n")).into_response()
    }
}

/// A handler that stops with [`DeadlineExceeded`] answers 504 with its message.
impl IntoResponse for DeadlineExceeded {
    fn into_response(self) -> Response {
        (StatusCode::GATEWAY_TIMEOUT, format!("{self}\n")).into_response()
    }
}

/// A handler that could not send a call in time answers 504 with the planner's reason.
impl IntoResponse for AttemptSkipped {
    fn into_response(self) -> Response {
        (StatusCode::GATEWAY_TIMEOUT, format!("{self}\n")).into_response()
    }
}

/// A handler whose outbound call failed (`?` on the call) answers for it: 504 when the deadline
/// ended the call ([`CallError::is_deadline`]: this request's time ran out during the call, too
/// little was left to send it, or, with
/// [`deadline_answer_as_error`](crate::PropagateDeadline::deadline_answer_as_error), the
/// callee said the deadline ran out there); 500 for a request the handler could not build; 502
/// for every other failure of the downstream. The body is the error's message: it names the
/// target and the attempts, never the underlying connection error, whose text can carry
/// internal addresses.
impl IntoResponse for CallError {
    fn into_response(self) -> Response {
        let status = if self.is_deadline() {
            StatusCode::GATEWAY_TIMEOUT
        } else if matches!(self, CallError::InvalidRequest(_)) {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::BAD_GATEWAY
        };
        (status, format!("{self}\n")).into_response()
    }
}

#[cfg(test)]
mod tests {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::EnforceDeadlineLayer;

    async fn strict(RequestDeadline(_): RequestDeadline) -> &'static str {
        "has a deadline"
    }

    async fn lenient(deadline: Option<RequestDeadline>, ctx: DeadlineContext) -> String {
        format!("{} {:?}", deadline.is_some(), ctx.deadline().is_some())
    }

    async fn context_only(ctx: DeadlineContext) -> String {
        format!("{:?}", ctx.reserve())
    }

    async fn optional_context(ctx: Option<DeadlineContext>) -> String {
        format!("{}", ctx.is_some())
    }

    async fn body(response: Response) -> String {
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    fn get_with(path: &str, budget: Option<&str>) -> Request<Body> {
        let mut request = Request::builder().uri(path);
        if let Some(budget) = budget {
            request = request.header(deadline::BUDGET_HEADER, budget);
        }
        request.body(Body::empty()).unwrap()
    }

    /// By default a request without a budget has no context: `DeadlineContext` rejects it
    /// (naming the setting that gives one), `Option<DeadlineContext>` is `None`.
    #[tokio::test(start_paused = true)]
    async fn by_default_a_request_without_a_budget_has_no_context_to_extract() {
        let app = Router::new()
            .route("/", get(context_only))
            .route("/optional", get(optional_context))
            .layer(EnforceDeadlineLayer::new("svc"));
        let response = app.clone().oneshot(get_with("/", None)).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            body(response)
                .await
                .contains("context_without_budget(true)")
        );
        let response = app
            .clone()
            .oneshot(get_with("/", Some("600")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let response = app.oneshot(get_with("/optional", None)).await.unwrap();
        assert_eq!(body(response).await, "false");
    }

    #[tokio::test(start_paused = true)]
    async fn extractors_behind_the_layer() {
        let app = Router::new()
            .route("/strict", get(strict))
            .route("/lenient", get(lenient))
            .layer(EnforceDeadlineLayer::new("svc").context_without_budget(true));

        let response = app
            .clone()
            .oneshot(get_with("/strict", Some("600")))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);

        let response = app
            .clone()
            .oneshot(get_with("/strict", None))
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let response = response.map(Body::new);
        assert!(body(response).await.contains("Deadline-Budget-Ms"));

        let response = app
            .clone()
            .oneshot(get_with("/lenient", None))
            .await
            .unwrap();
        assert_eq!(body(response.map(Body::new)).await, "false false");
        let response = app
            .oneshot(get_with("/lenient", Some("600")))
            .await
            .unwrap();
        assert_eq!(body(response.map(Body::new)).await, "true true");
    }

    #[tokio::test(start_paused = true)]
    async fn context_extractor_without_the_layer_is_a_server_error() {
        let app = Router::new().route("/", get(context_only));
        let response = app.oneshot(get_with("/", Some("600"))).await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(body(response).await.contains("enforce layer"));
    }
}

#[cfg(test)]
mod extensions {
    use axum::Router;
    use axum::body::Body;
    use axum::routing::get;
    use deadline::Deadline;
    use http::{Request, StatusCode};
    use tower::ServiceExt;

    use super::RequestDeadline;
    use crate::{DeadlineContext, EnforceDeadlineLayer};

    /// What a handler finds: the extractors' deadline and context, and the extensions'.
    async fn seen(
        RequestDeadline(deadline): RequestDeadline,
        ctx: DeadlineContext,
        request: Request<Body>,
    ) -> String {
        let extensions = (
            request.extensions().get::<Deadline>().copied(),
            request.extensions().get::<DeadlineContext>().is_some(),
        );
        assert_eq!(ctx.deadline(), Some(deadline));
        format!("{:?}", extensions)
    }

    async fn ask(layer: EnforceDeadlineLayer) -> (StatusCode, String) {
        let app = Router::new().route("/", get(seen)).layer(layer);
        let request = Request::builder()
            .uri("/")
            .header("deadline-budget-ms", "900")
            .body(Body::empty())
            .unwrap();
        let response = app.oneshot(request).await.unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), 1024)
            .await
            .unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    #[tokio::test]
    async fn the_extractors_read_the_task_local_context_without_extensions() {
        let (status, body) = ask(EnforceDeadlineLayer::new("svc")).await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "(None, false)"));
    }

    #[tokio::test]
    async fn the_extensions_carry_the_context_and_deadline_when_asked() {
        let (status, body) = ask(EnforceDeadlineLayer::new("svc").request_extensions(true)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            body.starts_with("(Some(") && body.ends_with(", true)"),
            "{body}"
        );
    }
}

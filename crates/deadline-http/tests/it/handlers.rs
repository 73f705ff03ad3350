//! Handlers that use `?` on outbound calls: the errors a handler meets answer for themselves
//! (504 for the deadline, 502 for a failed downstream), on paused time.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::get;
use deadline_http::{CallError, CallPolicy, EnforceDeadlineLayer, PropagateDeadline};
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use tower::ServiceExt;
use tower::util::BoxCloneSyncService;

type Callee = BoxCloneSyncService<Request<String>, Response<String>, std::io::Error>;
type Client = PropagateDeadline<Callee>;

/// A callee that answers `status` after 20 ms, or fails like a refused connection.
fn callee(status: Option<u16>) -> Callee {
    BoxCloneSyncService::new(tower::service_fn(move |_: Request<String>| async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        match status {
            Some(status) => Ok(Response::builder()
                .status(status)
                .body("deadline exceeded at inventory while working\n".to_owned())
                .expect("a valid response")),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "connection refused",
            )),
        }
    }))
}

/// The handler a user writes: `?` on the call, `?` on the cooperative check.
async fn order(State(client): State<Client>) -> Result<String, CallError> {
    let request = Request::get("http://inventory.test/stock/7")
        .body(String::new())
        .expect("a valid request");
    let reply = client.oneshot(request).await?;
    deadline_http::check()?;
    Ok(format!("inventory answered {}\n", reply.status()))
}

async fn serve(client: Client, budget: &str) -> (StatusCode, String) {
    let app = Router::new()
        .route("/order", get(order))
        .with_state(client)
        .layer(EnforceDeadlineLayer::new("orders"));
    let request = Request::get("/order")
        .header("deadline-budget-ms", budget)
        .body(Body::empty())
        .expect("a valid request");
    let response = app.oneshot(request).await.expect("infallible");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("a body")
        .to_bytes();
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn client(status: Option<u16>) -> Client {
    let policy = CallPolicy::new(Duration::from_secs(1), 1).expect("a valid policy");
    PropagateDeadline::new(callee(status), policy).target("inventory")
}

#[tokio::test(start_paused = true)]
async fn a_downstream_504_is_the_handlers_504_with_the_option() {
    let (status, body) = serve(client(Some(504)).deadline_answer_as_error(true), "1000").await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert_eq!(
        body,
        "deadline exceeded while calling inventory (it answered 504)\n"
    );
}

#[tokio::test(start_paused = true)]
async fn a_downstream_504_is_a_response_without_the_option() {
    let (status, body) = serve(client(Some(504)), "1000").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, "inventory answered 504 Gateway Timeout\n");
}

#[tokio::test(start_paused = true)]
async fn other_answers_pass_through_with_the_option() {
    let (status, body) = serve(client(Some(503)).deadline_answer_as_error(true), "1000").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body, "inventory answered 503 Service Unavailable\n");
}

#[tokio::test(start_paused = true)]
async fn a_failed_downstream_is_a_502() {
    let (status, body) = serve(client(None), "1000").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert_eq!(body, "the last of 1 attempt(s) failed\n");
}

#[tokio::test(start_paused = true)]
async fn too_little_time_for_the_call_is_a_504() {
    // 30 ms: less than an attempt needs (the transit margin and the minimum useful budget).
    let (status, body) = serve(client(Some(200)), "30").await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "{body}");
    assert!(body.starts_with("call not sent: "), "{body}");
}

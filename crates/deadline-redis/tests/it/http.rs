//! The "done when", through the enforce layer: under a 300 ms budget a `BLPOP` with a
//! 10 s timeout answers 504 within the budget, and 100 ms later Redis has no blocked client of
//! the service.

use deadline_http::EnforceDeadlineLayer;
use deadline_redis::DeadlinePool;
use http::{Request, Response, StatusCode};
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt, service_fn};

use crate::support::{Watcher, ms, name_it, pool, unique};

/// A handler that names its connection `name` and runs `BLPOP key 10` (alone, or in a
/// pipeline, which is not capped), answering 504 to a deadline error.
async fn handler(
    pool: DeadlinePool,
    name: String,
    key: String,
    pipeline: bool,
) -> Result<Response<String>, std::convert::Infallible> {
    let mut conn = match pool.get().await {
        Ok(conn) => conn,
        Err(e) => return Ok(answer(StatusCode::SERVICE_UNAVAILABLE, e.to_string())),
    };
    name_it(&mut conn, &name).await;
    let result = if pipeline {
        let mut pipe = redis::pipe();
        pipe.cmd("BLPOP").arg(&key).arg(10);
        conn.pipeline::<redis::Value>(&pipe).await
    } else {
        conn.query::<redis::Value>(redis::cmd("BLPOP").arg(&key).arg(10))
            .await
    };
    Ok(match result {
        Ok(value) => answer(StatusCode::OK, format!("{value:?}")),
        Err(e) => match e.deadline_exceeded() {
            Some(exceeded) => answer(StatusCode::GATEWAY_TIMEOUT, exceeded.to_string()),
            None => answer(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        },
    })
}

fn answer(status: StatusCode, body: String) -> Response<String> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}

async fn done_when(pipeline: bool) {
    let pool = pool(2).await;
    let watcher = Watcher::new().await;
    let (name, key) = (unique("http"), unique("http_key"));
    let service = ServiceBuilder::new()
        .layer(EnforceDeadlineLayer::new("svc"))
        .service(service_fn({
            let (name, key) = (name.clone(), key.clone());
            move |_req: Request<()>| handler(pool.clone(), name.clone(), key.clone(), pipeline)
        }));
    let request = Request::builder()
        .header("deadline-budget-ms", "300")
        .body(())
        .unwrap();
    let start = Instant::now();
    let (response, ()) = tokio::join!(
        service.oneshot(request),
        watcher.until_blocked(&name, ms(250)),
    );
    let took = Instant::now().saturating_duration_since(start);
    let response = response.unwrap();
    assert_eq!(
        response.status(),
        StatusCode::GATEWAY_TIMEOUT,
        "{response:?}"
    );
    assert!(
        took < ms(300),
        "answered after {took:?}, past the 300 ms budget"
    );
    let trace = response.headers()["deadline-trace"].to_str().unwrap();
    assert!(trace.contains("query"), "{trace}");
    tokio::time::sleep(ms(100)).await;
    let clients = watcher.clients(&name).await;
    assert!(
        !clients
            .iter()
            .any(|line| crate::support::blocked_line(line)),
        "a client of the service is still blocked: {clients:?}"
    );
    eprintln!("504 after {took:?}; trace {trace}; clients 100 ms later: {clients:?}");
}

/// The `BLPOP` alone: its 10 s are capped to the budget, Redis stops waiting itself, and the
/// handler answers the deadline error as 504.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_300_ms_budget_a_10_s_blpop_answers_504_and_leaves_no_blocked_client() {
    done_when(false).await;
}

/// The `BLPOP` in a pipeline (not capped): the enforce layer cuts the handler at its cutoff and
/// answers 504; the dropped command's connection is closed, and the blocked client with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_cut_by_the_enforce_layer_leaves_no_blocked_client() {
    done_when(true).await;
}

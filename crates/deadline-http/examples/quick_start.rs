//! The README's quick start: an axum service whose outbound call carries what is left of the
//! caller's deadline. Run it with `cargo run -p deadline-http --example quick_start`, then:
//!
//! ```text
//! curl -i -H 'Deadline-Budget-Ms: 2000' http://127.0.0.1:3000/order/7   # 200 after ~0.5 s
//! curl -i -H 'Deadline-Budget-Ms: 300' http://127.0.0.1:3000/order/7    # 504 after ~0.3 s
//! ```

use std::time::Duration;

use axum::Router;
use axum::extract::{Path, State};
use axum::routing::get;
use deadline_http::{CallError, CallPolicy, DeadlineClient, EnforceDeadlineLayer};

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // Calls to inventory: 1 s per attempt, at most 3 attempts, and never past the deadline of
    // the request being served (the client reads it from the task; no code in the handler).
    let policy = CallPolicy::new(Duration::from_secs(1), 3).expect("a valid policy");
    let inventory = DeadlineClient::new(policy)
        .target("inventory")
        // Inventory's "my deadline ran out" (504) becomes an error, passed on by `?`.
        .deadline_answer_as_error(true);

    let app = Router::new()
        .route("/order/{id}", get(order))
        .route("/stock/{id}", get(stock))
        .with_state(inventory)
        // Outermost layer: reads `Deadline-Budget-Ms` at arrival, gives the work 8 worker
        // slots (time queued for one counts), answers 504 at the deadline.
        .layer(EnforceDeadlineLayer::new("orders").slots(8));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
    deadline_http::serve(listener, app, std::future::pending()).await
}

/// Calls inventory with what is left of the caller's budget. `?` answers for a failed call:
/// 504 when the deadline ended it (here or at inventory), 502 when inventory failed.
async fn order(
    State(inventory): State<DeadlineClient>,
    Path(id): Path<u32>,
) -> Result<String, CallError> {
    let reply = inventory
        .get(format!("http://127.0.0.1:3000/stock/{id}"))
        .await?;
    Ok(format!(
        "order {id}: inventory answered {}\n",
        reply.status()
    ))
}

/// Stands in for the inventory service (here on the same server): 500 ms of work.
async fn stock(Path(id): Path<u32>) -> String {
    tokio::time::sleep(Duration::from_millis(500)).await;
    format!("item {id}: 3 in stock\n")
}

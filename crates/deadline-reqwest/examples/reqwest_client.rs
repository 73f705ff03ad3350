//! A reqwest client whose calls carry the caller's deadline.
//!
//! Starts a small inventory service on 127.0.0.1 (behind the enforce layer), then calls it
//! with reqwest through `DeadlineMiddleware` inside a 700 ms deadline, and prints what
//! inventory was told and the trace of the call:
//!
//! ```text
//! cargo run -p deadline-reqwest --example reqwest_client
//! ```

use std::convert::Infallible;
use std::time::Duration;

use deadline::trace::Trace;
use deadline::{BUDGET_HEADER, CallPolicy, Deadline};
use deadline_http::{DeadlineContext, EnforceDeadlineLayer, serve};
use deadline_reqwest::DeadlineMiddleware;
use http::{Request, Response};
use tokio::net::TcpListener;
use tokio::time::Instant;
use tower::{Layer, service_fn};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Inventory: works 30 ms and answers with the budget it was told.
    let inventory = service_fn(|request: Request<hyper::body::Incoming>| async move {
        tokio::time::sleep(Duration::from_millis(30)).await;
        let told = request
            .headers()
            .get(BUDGET_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("none")
            .to_owned();
        Ok::<_, Infallible>(Response::new(http_body_util::Full::new(
            bytes::Bytes::from(told),
        )))
    });
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = EnforceDeadlineLayer::new("inventory").layer(inventory);
    tokio::spawn(serve(listener, service, std::future::pending::<()>()));

    let policy = CallPolicy::new(Duration::from_secs(1), 3)?;
    let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(DeadlineMiddleware::new(policy).target("inventory"))
        .build();

    // What a handler behind the enforce layer runs in: a request with 700 ms left.
    let now = Instant::now();
    let deadline = Deadline::after_duration(now.into_std(), Duration::from_millis(700));
    let context = DeadlineContext::new(Some(deadline), Duration::from_millis(10), now);
    let response = context
        .clone()
        .scope(client.get(format!("http://{addr}/items/7")).send())
        .await?;
    println!(
        "inventory answered {}, told {} ms",
        response.status(),
        response.text().await?
    );
    let (spans, dropped) = context.take_spans();
    let mut trace = Trace::new();
    trace.spans = spans;
    trace.dropped = dropped;
    println!("trace: {}", trace.encode());
    Ok(())
}

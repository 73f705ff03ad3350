//! Example: an axum app behind the enforce layer, with Prometheus metrics on `/metrics`.
//!
//! Run with: cargo run -p deadline-http --example axum_service
//!
//! It prints `listening on http://127.0.0.1:PORT`; then, from another terminal:
//!
//! ```text
//! curl -i -H 'Deadline-Budget-Ms: 600' http://127.0.0.1:PORT/sleep   # 504 after ~590 ms
//! curl -i -H 'Deadline-Budget-Ms: 300' http://127.0.0.1:PORT/spin    # 504 after ~290 ms
//! curl -i -H 'Deadline-Budget-Ms: 2000' http://127.0.0.1:PORT/sleep  # 200 after 1.5 s
//! curl -i http://127.0.0.1:PORT/sleep                                # no budget: 200 after 1.5 s
//! curl -i -H 'Deadline-Budget-Ms: 1.5' http://127.0.0.1:PORT/sleep   # 400 at once
//! curl -H 'Deadline-Budget-Ms: 1000' http://127.0.0.1:PORT/answer     # fresh
//! curl -H 'Deadline-Budget-Ms: 200' http://127.0.0.1:PORT/answer      # approximate
//! curl -H 'Deadline-Budget-Ms: 40' http://127.0.0.1:PORT/answer       # cached
//! curl http://127.0.0.1:PORT/metrics                                 # what the layer counted
//! ```
//!
//! Every answer to a request that sent a budget carries a `deadline-trace` header (the
//! layer's default: a caller that sent none has no use for it), and every request's worker
//! hold is printed on stderr.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use deadline_http::metrics::{DeadlineMetrics, Registry};
use deadline_http::{DeadlineExceeded, EnforceDeadlineLayer, serve};
use tokio::net::TcpListener;
use tokio::time::Instant;

const WORK: Duration = Duration::from_millis(1500);

/// Waits 1.5 s. Waiting is an await point, so at the cutoff the layer simply drops this future.
async fn sleep() -> &'static str {
    tokio::time::sleep(WORK).await;
    "slept 1.5 s\n"
}

/// Burns CPU for 1.5 s. There is no await point to stop at, so the loop checks the deadline
/// itself; `DeadlineExceeded` answers 504. (For long loops, prefer `deadline_http::run_blocking`
/// so the runtime's worker thread stays free.)
async fn spin() -> Result<String, DeadlineExceeded> {
    let start = Instant::now();
    let (mut rounds, mut x) = (0u64, 0u64);
    while Instant::now().saturating_duration_since(start) < WORK {
        deadline_http::check()?;
        for i in 0..10_000 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        rounds += 1;
    }
    Ok(format!("spun {rounds} rounds\n"))
}

/// How `/answer` can answer, best first, with the time each needs.
#[derive(Clone, Copy, Debug)]
enum Strategy {
    Fresh,
    Approximate,
    Cached,
}

const STRATEGIES: [(Duration, Strategy); 3] = [
    (Duration::from_millis(500), Strategy::Fresh),
    (Duration::from_millis(100), Strategy::Approximate),
    (Duration::ZERO, Strategy::Cached),
];

/// Degrades by what is left: the best strategy that still fits before the deadline.
async fn answer() -> String {
    let strategy = *deadline_http::pick(&STRATEGIES).unwrap_or(&Strategy::Cached);
    let cost = match strategy {
        Strategy::Fresh => Duration::from_millis(450),
        Strategy::Approximate => Duration::from_millis(80),
        Strategy::Cached => Duration::ZERO,
    };
    tokio::time::sleep(cost).await;
    format!("{strategy:?}\n")
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    // The application owns the registry; the layer records into the series of its service.
    let mut registry = Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service("example");
    let enforce = EnforceDeadlineLayer::new("example")
        .slots(4)
        .on_hold(|hold| eprintln!("hold: {hold}"))
        .record_metrics(&metrics);
    let work = Router::new()
        .route("/sleep", get(sleep))
        .route("/spin", get(spin))
        .route("/answer", get(answer))
        // The last `layer` call is the outermost layer: queue time counts against the budget.
        .layer(enforce);
    // The scrape route sits beside the work, outside the enforce layer: a scrape never waits
    // for a worker slot and is not counted as a request.
    let app = Router::new()
        .route(
            "/metrics",
            deadline_http::metrics::route(Arc::new(registry)),
        )
        .merge(work);
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    println!("listening on http://{}", listener.local_addr()?);
    serve(listener, app, std::future::pending()).await
}

//! An axum route that answers scrapes (features `metrics` and `axum`).

use std::sync::Arc;

use axum::routing::{MethodRouter, get};

use super::{Registry, scrape};

/// A `GET` route answering Prometheus scrapes from `registry`: mount it beside the layers, not
/// under the enforce layer, so a scrape never waits for a worker slot and is not counted as a
/// request.
///
/// ```
/// use std::sync::Arc;
///
/// use axum::Router;
/// use deadline_http::EnforceDeadlineLayer;
/// use deadline_http::metrics::{DeadlineMetrics, Registry};
///
/// let mut registry = Registry::default();
/// let metrics = DeadlineMetrics::register(&mut registry).service("inventory");
/// let work = Router::new()
///     .route("/items", axum::routing::get(|| async { "items" }))
///     .layer(EnforceDeadlineLayer::new("inventory").record_metrics(&metrics));
/// let app: Router = Router::new()
///     .route("/metrics", deadline_http::metrics::route(Arc::new(registry)))
///     .merge(work);
/// # let _ = app;
/// ```
pub fn route<S>(registry: Arc<Registry>) -> MethodRouter<S>
where
    S: Clone + Send + Sync + 'static,
{
    get(move || {
        let registry = registry.clone();
        async move { scrape(&registry) }
    })
}

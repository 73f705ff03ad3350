//! What `deadline service` records about its work: the hold log (`--log`), the metrics
//! registry with this service's series (scraped at `/metrics`), and the OpenTelemetry span
//! export (`--otlp`), with the tracing switch the layers and the client share.

use std::sync::Arc;

use deadline_http::metrics::{DeadlineMetrics, Registry, ServiceMetrics};
use deadline_http::otel::Tracing;

use super::args::ServiceArgs;
use crate::holds::HoldLog;
use crate::otlp::Otlp;

/// Where the service's holds, metrics and spans go.
pub(super) struct Observers {
    /// The hold log, with `--log`.
    pub(super) log: Option<Arc<HoldLog>>,
    /// Every series this process exports, this service's and the span export's.
    pub(super) registry: Arc<Registry>,
    /// This service's series, for the layers and the client to record to.
    pub(super) metrics: ServiceMetrics,
    /// The span export, with `--otlp` (its endpoint checked before binding).
    pub(super) otlp: Option<Otlp>,
    /// Whether the layers and the client trace at all.
    pub(super) tracing: Tracing,
}

impl Observers {
    /// The log created, the metrics registered and the export to `otlp_endpoint` installed.
    pub(super) fn new(
        args: &ServiceArgs,
        otlp_endpoint: Option<String>,
    ) -> anyhow::Result<Observers> {
        let log = args
            .log
            .as_deref()
            .map(|path| HoldLog::create(path, args.log_refused))
            .transpose()?
            .map(Arc::new);
        let mut registry = Registry::default();
        let metrics = DeadlineMetrics::register(&mut registry).service(args.name.clone());
        let otlp = otlp_endpoint
            .map(|endpoint| crate::otlp::install(endpoint, &args.name, &mut registry))
            .transpose()?;
        // Without --otlp the service does not trace at all: no spans, no `traceparent` read or
        // written (the global no-op provider would still cost every request a lookup and a
        // span).
        let tracing = match otlp {
            Some(_) => Tracing::global(),
            None => Tracing::off(),
        };
        Ok(Observers {
            log,
            registry: Arc::new(registry),
            metrics,
            otlp,
            tracing,
        })
    }
}

//! `deadline service --otlp URL`: the service's OpenTelemetry spans exported over OTLP/HTTP
//! (protobuf, `POST /v1/traces`).
//!
//! The layers (feature `otel` of `deadline-http`) start their spans with the global tracer
//! provider; this module installs one made of opentelemetry-otlp's HTTP exporter, on hyper's
//! client (no TLS stack: the URL must be `http://`), behind [`BoundedBatch`], a span processor
//! of our own rather than the SDK's `BatchSpanProcessor`, for two reasons:
//!
//! - **Drops are counted where the service can show them.** The SDK's processor counts spans it
//!   drops on a full queue, but only logs the figure at shutdown; `BoundedBatch` counts them in
//!   the `deadline_otel_spans_dropped_total` counter of the service's `/metrics`, and the
//!   service logs the total on stderr when it stops.
//! - **Export runs on the service's tokio runtime.** The SDK's processor exports from a thread
//!   of its own with a plain `block_on`, which an async HTTP client (hyper, needing a tokio
//!   reactor) cannot run on.
//!
//! Serving never waits for export: a span that ends is offered to a bounded queue with
//! `try_send`, and dropped (and counted) when the queue is full. One task takes the queued
//! spans in batches and exports them one batch at a time. The exporter does not retry (a
//! failed batch is counted in `deadline_otel_spans_failed_total` and dropped): retrying would
//! hold the task while the queue fills behind it. After a failed batch the task waits before
//! the next one, 100 ms doubling to 5 s and back to none after a success: a collector that
//! fails every request at once (an answer too large to read, say) was otherwise called, and
//! reconnected to, as fast as spans arrived (12,582 times in 30 s), at five times the CPU;
//! spans that arrive meanwhile queue, and beyond the queue are dropped and counted. Shutdown
//! stops taking new spans, exports what is queued and shuts the exporter down, within a
//! timeout.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use opentelemetry_otlp::{Protocol, RetryPolicy, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

/// Spans queued for export at most; more are dropped and counted.
pub(crate) const QUEUE: usize = 2_048;
/// Spans per export request at most.
pub(crate) const BATCH: usize = 512;
/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// The wait after a failed export, doubled after each further failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two failed exports.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long shutdown waits for the queued spans to be exported.
pub(crate) const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The OTLP traces endpoint for `--otlp URL`: `http://HOST:PORT` (a path of `/` or none gets
/// `/v1/traces`, any other path is used as given).
pub(crate) fn endpoint(url: &str) -> anyhow::Result<String> {
    let uri: http::Uri = url
        .parse()
        .with_context(|| format!("--otlp {url:?} is not a URL (expected http://HOST:PORT)"))?;
    match uri.scheme_str() {
        Some("http") => {}
        Some("https") => bail!(
            "--otlp {url:?}: https is not supported (the exporter has no TLS client); give http://HOST:PORT"
        ),
        Some(other) => bail!("--otlp {url:?}: scheme {other:?} is not http"),
        // Without a scheme, opentelemetry-otlp would assume https.
        None => bail!("--otlp {url:?} has no scheme: give http://HOST:PORT"),
    }
    let Some(authority) = uri.authority() else {
        bail!("--otlp {url:?} has no host: give http://HOST:PORT");
    };
    if authority.host().is_empty() {
        bail!("--otlp {url:?} has no host: give http://HOST:PORT");
    }
    if uri.query().is_some() {
        bail!("--otlp {url:?}: a query is not allowed");
    }
    Ok(match uri.path() {
        "" | "/" => format!("http://{authority}/v1/traces"),
        path => format!("http://{authority}{path}"),
    })
}

/// The span counters, shown on `/metrics`.
#[derive(Clone, Debug, Default)]
pub(crate) struct SpanCounters {
    /// Spans dropped because the export queue was full.
    pub(crate) dropped: Counter,
    /// Spans in batches the receiver did not take (an error or a timeout).
    pub(crate) failed: Counter,
    /// Spans in batches exported.
    pub(crate) exported: Counter,
}

impl SpanCounters {
    /// Registers the counters in `registry`.
    pub(crate) fn register(registry: &mut deadline_http::metrics::Registry) -> SpanCounters {
        let counters = SpanCounters::default();
        registry.register(
            "deadline_otel_spans_dropped",
            "Spans dropped because the OTLP export queue was full",
            counters.dropped.clone(),
        );
        registry.register(
            "deadline_otel_spans_failed",
            "Spans whose OTLP export failed (not retried)",
            counters.failed.clone(),
        );
        registry.register(
            "deadline_otel_spans_exported",
            "Spans exported over OTLP",
            counters.exported.clone(),
        );
        counters
    }
}

/// A span processor with a bounded queue that never blocks the span's ender; see the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct BoundedBatch {
    queue: mpsc::Sender<SpanData>,
    counters: SpanCounters,
}

/// The export task of a [`BoundedBatch`], to stop at shutdown.
#[derive(Debug)]
pub(crate) struct Exporting {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl BoundedBatch {
    /// The processor and its export task (spawned on the current tokio runtime), queuing at
    /// most `queue` spans and exporting at most `batch` at a time.
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        queue: usize,
        batch: usize,
        counters: SpanCounters,
    ) -> (BoundedBatch, Exporting) {
        let (tx, rx) = mpsc::channel(queue.max(1));
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(export_loop(
            exporter,
            rx,
            stopped,
            batch.max(1),
            counters.clone(),
        ));
        (
            BoundedBatch {
                queue: tx,
                counters,
            },
            Exporting { stop, task },
        )
    }
}

impl SpanProcessor for BoundedBatch {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.queue.try_send(span).is_err() {
            self.counters.dropped.inc();
        }
    }

    /// Spans are exported as they come; there is nothing to hurry.
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// The export task is stopped by [`Exporting::shutdown`], which can wait for it.
    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }
}

/// Takes the queued spans in batches and exports them, until `stopped`; then exports what is
/// queued and shuts the exporter down.
async fn export_loop<E: SpanExporter>(
    exporter: E,
    mut queue: mpsc::Receiver<SpanData>,
    mut stopped: oneshot::Receiver<()>,
    batch: usize,
    counters: SpanCounters,
) {
    let warned = AtomicBool::new(false);
    let mut spans = Vec::with_capacity(batch);
    let mut backoff = None;
    loop {
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            n = queue.recv_many(&mut spans, batch) => if n == 0 { break },
        }
        if export(&exporter, &mut spans, &counters, &warned).await {
            backoff = None;
            continue;
        }
        let wait = backoff.map_or(FIRST_BACKOFF, |b: Duration| (b * 2).min(MAX_BACKOFF));
        backoff = Some(wait);
        tokio::select! {
            biased;
            _ = &mut stopped => break,
            () = tokio::time::sleep(wait) => {}
        }
    }
    queue.close();
    while queue.recv_many(&mut spans, batch).await > 0 {
        export(&exporter, &mut spans, &counters, &warned).await;
    }
    let _ = exporter.shutdown();
}

/// Exports one batch; false if it failed (counted, and the first failure logged).
async fn export<E: SpanExporter>(
    exporter: &E,
    spans: &mut Vec<SpanData>,
    counters: &SpanCounters,
    warned: &AtomicBool,
) -> bool {
    let count = spans.len() as u64;
    let batch = std::mem::take(spans);
    match tokio::time::timeout(EXPORT_TIMEOUT, exporter.export(batch)).await {
        Ok(Ok(())) => {
            counters.exported.inc_by(count);
            true
        }
        failed => {
            counters.failed.inc_by(count);
            if !warned.swap(true, Ordering::Relaxed) {
                let error = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no answer within {EXPORT_TIMEOUT:?}"),
                };
                tracing::warn!(%error, spans = count, "OTLP export failed (further failures are only counted)");
            }
            false
        }
    }
}

impl Exporting {
    /// Stops taking spans, exports those queued and shuts the exporter down, waiting at most
    /// `timeout`.
    pub(crate) async fn shutdown(self, timeout: Duration) -> bool {
        let _ = self.stop.send(());
        tokio::time::timeout(timeout, self.task).await.is_ok()
    }
}

/// The installed OTLP pipeline: the provider (global from now on) and its export task.
#[derive(Debug)]
pub(crate) struct Otlp {
    provider: SdkTracerProvider,
    exporting: Exporting,
    counters: SpanCounters,
    endpoint: String,
}

/// Builds the OTLP/HTTP exporter to `endpoint` for service `name` and installs it as the global
/// tracer provider, its counters in `registry`.
pub(crate) fn install(
    endpoint: String,
    name: &str,
    registry: &mut deadline_http::metrics::Registry,
) -> anyhow::Result<Otlp> {
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .with_retry_policy(RetryPolicy::disabled())
        .build()
        .with_context(|| format!("the OTLP exporter for {endpoint}"))?;
    let resource = Resource::builder()
        .with_service_name(name.to_owned())
        .build();
    exporter.set_resource(&resource);
    let counters = SpanCounters::register(registry);
    let (processor, exporting) = BoundedBatch::start(exporter, QUEUE, BATCH, counters.clone());
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_resource(resource)
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    Ok(Otlp {
        provider,
        exporting,
        counters,
        endpoint,
    })
}

impl Otlp {
    /// Exports what is queued, stops, and says on stderr what became of the spans.
    pub(crate) async fn shutdown(self, service: &str) {
        let Otlp {
            provider,
            exporting,
            counters,
            endpoint,
        } = self;
        // Spans that end from now on go nowhere (the global provider is a no-op again).
        opentelemetry::global::set_tracer_provider(
            opentelemetry::trace::noop::NoopTracerProvider::new(),
        );
        let flushed = exporting.shutdown(SHUTDOWN_TIMEOUT).await;
        let _ = provider.shutdown();
        let line = format!(
            "deadline service {service}: OTLP to {endpoint}: {} spans exported, {} dropped (queue full), {} failed{}",
            counters.exported.get(),
            counters.dropped.get(),
            counters.failed.get(),
            if flushed {
                ""
            } else {
                ", export still running at the shutdown timeout"
            }
        );
        tracing::info!("{line}");
        eprintln!("{line}");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::{Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::InMemorySpanExporter;
    use tokio::sync::Notify;

    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            endpoint("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert_eq!(
            endpoint("http://collector:4318/").unwrap(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            endpoint("http://collector:4318/custom/traces").unwrap(),
            "http://collector:4318/custom/traces"
        );
        for (bad, says) in [
            ("127.0.0.1:4318", "no scheme"),
            ("https://collector:4318", "https is not supported"),
            ("grpc://collector:4317", "is not http"),
            ("http://", "not a URL"),
            ("not a url", "not a URL"),
            ("http://c:4318/?x=1", "query"),
        ] {
            let error = format!("{:#}", endpoint(bad).unwrap_err());
            assert!(error.contains(says), "{bad:?}: {error}");
        }
    }

    /// An exporter that takes nothing until released, then hands on to memory.
    #[derive(Debug, Clone)]
    struct Stalled {
        release: Arc<Notify>,
        inner: InMemorySpanExporter,
        batches: Arc<Mutex<Vec<usize>>>,
    }

    impl SpanExporter for Stalled {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.batches.lock().unwrap().push(batch.len());
            self.release.notified().await;
            self.release.notify_one();
            self.inner.export(batch).await
        }
    }

    /// An exporter that fails every batch at once, counting its calls.
    #[derive(Debug, Clone, Default)]
    struct Failing {
        calls: Arc<Mutex<usize>>,
    }

    impl SpanExporter for Failing {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            *self.calls.lock().unwrap() += 1;
            Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "refused".into(),
            ))
        }
    }

    /// Finding: a collector that failed every request at once was called (and reconnected to)
    /// as fast as spans arrived: 12,582 times in 30 s. Now failures back off, doubling from
    /// 100 ms: in 1.5 s, calls at about 0, 0.1, 0.3, 0.7 and 1.5 s.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failing_collector_is_called_at_a_bounded_rate() {
        let exporter = Failing::default();
        let counters = SpanCounters::default();
        let (processor, exporting) = BoundedBatch::start(exporter.clone(), 64, 1, counters);
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        // A span every millisecond (or slower, on a busy machine) for 1.5 s.
        let start = tokio::time::Instant::now();
        let mut spans = 0;
        while tokio::time::Instant::now().saturating_duration_since(start)
            < Duration::from_millis(1_500)
        {
            tracer.in_span("work", |_| {});
            spans += 1;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let calls = *exporter.calls.lock().unwrap();
        assert!(spans > 100, "only {spans} spans");
        assert!(
            calls <= 8,
            "{calls} export calls for {spans} spans in 1.5 s"
        );
        assert!(exporting.shutdown(Duration::from_secs(10)).await);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_exporter_drops_and_counts_spans_without_blocking() {
        let release = Arc::new(Notify::new());
        let exporter = Stalled {
            release: release.clone(),
            inner: InMemorySpanExporter::default(),
            batches: Arc::default(),
        };
        let counters = SpanCounters::default();
        let (processor, exporting) = BoundedBatch::start(exporter.clone(), 4, 2, counters.clone());
        let provider = SdkTracerProvider::builder()
            .with_span_processor(processor)
            .build();
        let tracer = provider.tracer("test");
        // Let the task take its first batch and stall in export.
        tracer.in_span("first", |_| {});
        for _ in 0..100 {
            if !exporter.batches.lock().unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(
            *exporter.batches.lock().unwrap(),
            [1],
            "the first batch is stuck"
        );

        let start = tokio::time::Instant::now();
        for _ in 0..1_000 {
            tracer.in_span("work", |_| {});
        }
        let took = tokio::time::Instant::now().saturating_duration_since(start);
        assert!(
            took < Duration::from_secs(2),
            "ending spans waited: {took:?}"
        );
        // The queue holds 4; the other 996 are dropped and counted.
        assert_eq!(counters.dropped.get(), 996);

        release.notify_one();
        assert!(exporting.shutdown(Duration::from_secs(10)).await);
        let exported = exporter.inner.get_finished_spans().unwrap().len();
        assert_eq!(exported, 5, "the stuck one and the four queued");
        assert_eq!(counters.exported.get(), 5);
        assert_eq!(counters.failed.get(), 0);
    }
}

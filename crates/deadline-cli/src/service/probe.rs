//! The admin paths of `deadline service`: `GET /debug/runtime` (this process's runtime
//! figures, as JSON), `GET /metrics` (the Prometheus scrape) and `GET /deadline/limits` (its
//! own limits, for `deadline path`), answered before a request is
//! counted or reaches the enforce layer, on the public port and on `--admin-listen`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;

use crate::holds::{HoldLog, LogCounts};
use crate::reply::text;

/// The reserved admin path: `GET` answers this process's runtime figures as JSON. Every other
/// path is the service's work; later admin paths (such as `/metrics`) sit beside it the same way.
pub(crate) const RUNTIME_PATH: &str = "/debug/runtime";

/// The reserved scrape path: `GET` answers this service's Prometheus metrics (the deadline
/// metric set, `service` label = `--name`), in the OpenMetrics text format.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// The admin paths' answers: runtime figures and the metrics scrape.
#[derive(Clone)]
pub(super) struct Admin {
    probe: Arc<RuntimeProbe>,
    registry: Arc<deadline_http::metrics::Registry>,
    /// The body of `GET /deadline/limits`, made once at start.
    limits: Bytes,
}

impl Admin {
    /// The admin answers of a service with `in_flight` requests counted in, its hold log (if
    /// any) and its metrics `registry`.
    pub(super) fn new(
        in_flight: Arc<AtomicUsize>,
        log: Option<Arc<HoldLog>>,
        registry: Arc<deadline_http::metrics::Registry>,
        enforce: deadline_http::EnforceDeadlineLayer,
        limits: Bytes,
    ) -> Admin {
        Admin {
            probe: Arc::new(RuntimeProbe {
                in_flight,
                log,
                enforce,
            }),
            registry,
            limits,
        }
    }

    /// The answer to `req` if it is `GET` on an admin path.
    pub(super) fn answer<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        if req.method() != http::Method::GET {
            return None;
        }
        match req.uri().path() {
            RUNTIME_PATH => Some(self.probe.reply()),
            METRICS_PATH => Some(
                deadline_http::metrics::scrape(&self.registry)
                    .map(|text| Full::new(Bytes::from(text))),
            ),
            super::limits::LIMITS_PATH => Some(json(self.limits.clone())),
            _ => None,
        }
    }
}

/// A 200 answer with a JSON `body`.
fn json(body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// What `GET /debug/runtime` reads.
struct RuntimeProbe {
    in_flight: Arc<AtomicUsize>,
    log: Option<Arc<HoldLog>>,
    /// The service's enforce layer (a clone shares its counters).
    enforce: deadline_http::EnforceDeadlineLayer,
}

/// The body of `GET /debug/runtime`.
#[derive(Debug, serde::Serialize)]
struct RuntimeFigures {
    /// Tasks alive on this process's tokio runtime: one per open connection (this request's
    /// included), one per pooled downstream connection, and the pool's own timer.
    alive_tasks: usize,
    /// Open file descriptors (`/proc/self/fd`, the one reading it included); null off Linux.
    open_fds: Option<usize>,
    /// Requests counted in and not yet out (their holds not yet reported).
    in_flight: usize,
    /// The hold log's counts, if there is a log.
    log: Option<LogCounts>,
    /// `X-Request-Start` stamps ignored (malformed, in the future, or older than the maximum
    /// skew), with `--trust-request-start`.
    ignored_request_starts: u64,
}

impl RuntimeProbe {
    fn reply(&self) -> Response<Full<Bytes>> {
        let figures = RuntimeFigures {
            alive_tasks: tokio::runtime::Handle::current()
                .metrics()
                .num_alive_tasks(),
            open_fds: open_fds(),
            in_flight: self.in_flight.load(Ordering::Acquire),
            log: self.log.as_ref().map(|log| log.counts()),
            ignored_request_starts: self.enforce.ignored_request_starts(),
        };
        match serde_json::to_vec(&figures) {
            Ok(body) => json(Bytes::from(body)),
            Err(err) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
        }
    }
}

/// How many file descriptors this process has open, where `/proc` says.
fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

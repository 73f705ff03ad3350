//! `deadline service`: a service whose work is a configurable wait, built on the enforce layer
//! (server side) and the propagate client (outbound calls). The demo and the load command run
//! three of these as separate processes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use bytes::Bytes;
use clap::Args;
use deadline::{Budget, CallPolicy};
use deadline_http::enforce::{
    EnforceDeadlineLayer, Hold, QueueOrder, REQUEST_ID_HEADER, TraceExposure, is_usable_request_id,
};
use deadline_http::log_limit::LogLimit;
use deadline_http::metrics::DeadlineMetrics;
use deadline_http::propagate::{
    Callee504, DEFAULT_MAX_BODY, DeadlineClient, H2_KEEP_ALIVE_INTERVAL, H2_KEEP_ALIVE_TIMEOUT,
    RetryBudgetConfig,
};
use deadline_http::serve::ServeOptions;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tower::{ServiceBuilder, ServiceExt as _};

use crate::dialect_args::DialectArgs;
use crate::grpc::answers::{downstream_answer, into_grpc};
use crate::grpc::wire::{self, DownstreamProtocol};
use crate::holds::{HoldLine, HoldLog, LogCounts, epoch_ms_now};
use crate::outage::{BudgetArg, HedgeArg, Outage, PerAttempt, Window, do_not_retry};
use crate::reply::{body_failed, text};
use crate::shutdown::{shutdown_signal, stdin_closed};
use crate::slowness::is_slow;
use crate::stream::{self, StreamArg, StreamBody, StreamHop};

/// How long the last write of the log may take at exit before the service gives up on it.
const LOG_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);

/// Arguments of `deadline service`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServiceArgs {
    /// This hop's name, in traces, 504 bodies and the log.
    #[arg(long)]
    pub name: String,
    /// Address to listen on; port 0 picks a free one (the ready line says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Speak TLS on --listen with this PEM certificate chain (the server's certificate first),
    /// with --tls-key. ALPN chooses HTTP/2 (`h2`, what gRPC clients offer) or HTTP/1.1; the
    /// handshake must end within --header-timeout; plaintext sent to the port is closed. The
    /// ready line then says `https://`. The admin address stays cleartext.
    #[arg(long, value_name = "PEM")]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert, in PEM (PKCS #8, PKCS #1 or SEC1).
    #[arg(long, value_name = "PEM")]
    pub tls_key: Option<PathBuf>,
    /// How long a TLS handshake may take from the connection's acceptance, in ms, before the
    /// connection is closed (default: --header-timeout). Needs --tls-cert.
    #[arg(long, value_name = "MS", requires = "tls_cert")]
    pub tls_handshake_timeout: Option<u64>,
    /// Export OpenTelemetry spans (one per request, one per outbound attempt) over OTLP/HTTP
    /// protobuf to this receiver, `http://HOST:PORT` (spans are POSTed to `/v1/traces`; a URL
    /// with another path is used as given). Export never delays serving: spans beyond a
    /// bounded queue are dropped and counted (`deadline_otel_spans_dropped_total` on
    /// `/metrics`, and a line on stderr at shutdown); failed exports are not retried.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Also serve the admin paths (`/metrics`, `/debug/runtime`) on this address, apart from
    /// the public port (a second line, `admin on http://ADDR`, follows the ready line).
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// Do not answer the admin paths on the public port (they are then ordinary work paths):
    /// with --admin-listen, only the admin address shows metrics and runtime figures.
    #[arg(long, requires = "admin_listen")]
    pub no_public_admin: bool,
    /// Milliseconds of work per request.
    #[arg(long, default_value_t = 0)]
    pub work: u64,
    /// Worker slots: requests beyond this wait, but only as long as their budget allows.
    #[arg(long)]
    pub slots: Option<usize>,
    /// At most this many requests wait for a worker slot: beyond it a request is refused at
    /// once with 503 (gRPC UNAVAILABLE), with a budget or without. Needs `--slots`.
    #[arg(long)]
    pub max_queue: Option<usize>,
    /// Order of the worker-slot queue: `fifo` (arrival order) or `edf` (earliest deadline first,
    /// requests without a deadline last).
    #[arg(long, default_value_t = QueueOrder::Fifo)]
    pub queue: QueueOrder,
    /// Predictive admission: when every slot is busy, refuse at once (503, `Retry-After: 0`) a
    /// request whose expected wait for a slot would leave it less than
    /// `--admission-min-useful` before its cutoff. Needs `--slots`.
    #[arg(long)]
    pub admission: bool,
    /// With `--admission`: the least time in ms a request must have left for its work when it
    /// starts (default: `--work`, the time the work takes).
    #[arg(long)]
    pub admission_min_useful: Option<u64>,
    /// Refuse at once (503, `Retry-After: 0`) a request that arrives when every slot is busy
    /// and whose expected wait for a slot exceeds this many ms (checked on arrival only; an
    /// admitted request is never refused later). Needs `--slots`; works with or without
    /// `--admission`.
    #[arg(long, value_name = "MS")]
    pub max_queue_wait: Option<u64>,
    /// Milliseconds kept back from each budget to write the reply.
    #[arg(long, default_value_t = 10)]
    pub reserve: u64,
    /// Largest budget accepted, in ms; larger ones are clamped.
    #[arg(long, default_value_t = Budget::DEFAULT_MAX.as_millis())]
    pub max_budget: u64,
    /// Call this URL (the request's path is appended) after working: `http://`, or `https://`
    /// verified against --ca (default: the system's root certificates), ALPN choosing HTTP/2
    /// or HTTP/1.1 (`h2` alone with --downstream-protocol grpc or h2c). Over https the budget
    /// is stamped once the connection is made, so a slow handshake is taken off what the
    /// downstream is told.
    #[arg(long)]
    pub downstream: Option<Uri>,
    /// Trust the CA certificates of this PEM file for an https:// --downstream, instead of the
    /// system's roots.
    #[arg(long, value_name = "PEM", requires = "downstream")]
    pub ca: Option<PathBuf>,
    /// The downstream's name in this hop's trace (default: its host and port).
    #[arg(long)]
    pub downstream_name: Option<String>,
    /// How to call the downstream: HTTP/1.1, HTTP/2 with prior knowledge (h2c), or gRPC unary
    /// calls over h2c (the budget in `grpc-timeout` too, the reply's `grpc-status` judged).
    #[arg(long, value_enum, default_value_t = DownstreamProtocol::Http1)]
    pub downstream_protocol: DownstreamProtocol,
    /// Per-attempt timeout of the downstream call, in ms. It covers the whole attempt, the
    /// reply's body included.
    #[arg(long, default_value_t = 1_000)]
    pub timeout: u64,
    /// The largest downstream reply body this hop reads, in bytes. A larger one (or one that
    /// announces more) fails the call with 502 naming the limit, and its connection is closed.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_BODY)]
    pub max_body: u64,
    /// Attempts of the downstream call, the first included.
    #[arg(long, default_value_t = 1)]
    pub attempts: u32,
    /// Milliseconds kept back from the budget sent downstream for the reply's transit.
    #[arg(long, default_value_t = 50)]
    pub margin: u64,
    /// Smallest budget worth sending downstream, in ms.
    #[arg(long, default_value_t = 50)]
    pub min_useful: u64,
    /// Baseline: ignore budgets and hang-ups, run every piece of work to the end.
    #[arg(long)]
    pub no_enforce: bool,
    /// Baseline: send no budget downstream; every attempt gets its full timeout.
    #[arg(long)]
    pub no_propagate: bool,
    /// Send no `Server-Timing` header (queue, work and budget times) with the answers.
    #[arg(long)]
    pub no_server_timing: bool,
    /// Who gets this hop's `Deadline-Trace` and `Server-Timing` headers: `always`, `budgeted`
    /// (only callers that sent a budget) or `off`. An edge the public can reach limits them:
    /// they map the internal call graph and its timings.
    #[arg(long, default_value = "always")]
    pub trace: TraceExposure,
    /// Write one JSON line per worker hold to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// Share of requests (0 to 1, chosen by request id) whose work takes `--slow-work` instead.
    #[arg(long, default_value_t = 0.0)]
    pub slow_share: f64,
    /// Milliseconds of work for a slow request.
    #[arg(long, default_value_t = 1_500)]
    pub slow_work: u64,
    /// Seed of the slow-request choice; the same seed picks the same request ids.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// On shutdown, how long to wait for work still in flight (baseline work whose caller left
    /// included) before exiting anyway, with a warning, in seconds: connections still open
    /// then are dropped, and the whole shutdown takes at most about this long.
    #[arg(long, default_value_t = 30)]
    pub drain_timeout: u64,
    /// Close a connection with no request open for this long, in ms: HTTP/1.1 between requests,
    /// HTTP/2 with no stream open (one that sent only its preface included).
    #[arg(long, default_value_t = 60_000)]
    pub idle_timeout: u64,
    /// Send an HTTP/2 peer a PING after this long without a frame from it, in ms, and close its
    /// connection if it does not answer within --keep-alive-timeout; 0 sends no PINGs.
    #[arg(long, default_value_t = 20_000)]
    pub keep_alive_interval: u64,
    /// How long an HTTP/2 peer has to answer a keep-alive PING, in ms.
    #[arg(long, default_value_t = 20_000)]
    pub keep_alive_timeout: u64,
    /// Drop a connection whose socket refuses every write (the peer reads nothing) for this
    /// long, in ms.
    #[arg(long, default_value_t = 30_000)]
    pub send_timeout: u64,
    /// Connections open at once: beyond it the connection idle the longest is closed to make
    /// room, and when none is idle new connections are refused (default: no limit but file
    /// descriptors; running out of them drops the connection idle the longest).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// How long a client may take to send a request's headers before its connection is closed,
    /// in ms. A slow client holds only a connection (a file descriptor and a task), never a
    /// worker slot, until then.
    #[arg(long, default_value_t = 30_000)]
    pub header_timeout: u64,
    /// How long an idle pooled connection to the downstream is kept, in ms. Checked about that
    /// often, so an idle connection closes after one to two times this. Short, so a service
    /// that goes quiet gives its connections (and their tasks) back within seconds. For an
    /// http:// --downstream; an https:// one keeps an idle connection until the downstream
    /// closes it.
    #[arg(long, default_value_t = 2_000)]
    pub pool_idle_timeout: u64,
    /// Drain and exit when standard input closes, as well as on SIGINT or SIGTERM. The demo and
    /// the load command use it so their services never outlive them.
    #[arg(long)]
    pub exit_on_stdin_close: bool,
    #[command(flatten)]
    pub dialects: DialectArgs,
    /// Answer 503 at once to every request in this window: START:SECONDS, counted from the
    /// first request this service works on (10:5 is seconds 10 to 15 of the load).
    #[arg(long)]
    pub outage: Option<Window>,
    /// Choose slow requests afresh for every arrival (an attempt), not once per request id:
    /// a retry or a hedge of a slow attempt is then usually fast.
    #[arg(long)]
    pub slow_per_attempt: bool,
    /// Retry budget of the downstream calls over a 10 s window: RATIO,PER_WINDOW[,TOKENS]
    /// (default 0.2,10,5: a fifth of the requests plus 10 retries per window, and a bucket of 5
    /// tokens that failed retries empty and successes refill; without TOKENS, the ratio cap
    /// alone), or `finagle` (0.2,100: 20 % plus 10 a second, no bucket).
    #[arg(long, conflicts_with = "no_retry_budget")]
    pub retry_budget: Option<BudgetArg>,
    /// Downstream retries are not budgeted (each call still stops at --attempts).
    #[arg(long)]
    pub no_retry_budget: bool,
    /// Hedge the downstream calls: a delay in ms (150) or a percentile of the latencies this
    /// service observes (p95). Hedges are attempts: they need --attempts above 1.
    #[arg(long)]
    pub hedge: Option<HedgeArg>,
    /// Retry a downstream 504 only when the retry would get at least this share (0 to 1) of
    /// the budget that ran out; 0 retries it whenever there is time.
    #[arg(long, default_value_t = 0.5)]
    pub retry_504_share: f64,
    #[command(flatten)]
    pub postgres: crate::pg::PostgresArgs,
    /// Answer with a stream after the work: COUNT chunks, one every INTERVAL_MS (a gRPC caller
    /// gets a server stream of COUNT messages, on any path). With --downstream, the
    /// downstream's stream is relayed as it arrives instead.
    #[arg(long, value_name = "COUNT:INTERVAL_MS")]
    pub stream: Option<StreamArg>,
}

/// What the handler needs for every request of one service: its name, how long to work, the
/// slowness rule, and the downstream to call.
struct HandlerConfig {
    name: String,
    work: Duration,
    slow_work: Duration,
    slow_share: f64,
    seed: u64,
    downstream: Option<(String, DeadlineClient)>,
    /// Whether this hop retries its downstream (then its caller is told not to).
    retries_downstream: bool,
    outage: Option<Outage>,
    per_attempt: Option<PerAttempt>,
    /// Whether the downstream is called with gRPC.
    grpc_downstream: bool,
    /// With `--postgres`: the work is a statement on this database.
    database: Option<crate::pg::Database>,
    /// `--stream`: the answer is a stream.
    stream: Option<StreamArg>,
}

fn validate(args: &ServiceArgs) -> anyhow::Result<Option<CallPolicy>> {
    if !(0.0..=1.0).contains(&args.slow_share) {
        bail!(
            "--slow-share must be between 0 and 1, not {}",
            args.slow_share
        );
    }
    if args.slots == Some(0) {
        bail!("--slots must be at least 1");
    }
    if args.admission && args.slots.is_none() {
        bail!("--admission needs --slots: without a limit no request ever waits");
    }
    if args.max_queue_wait.is_some() && args.slots.is_none() {
        bail!("--max-queue-wait needs --slots: without a limit no request ever waits");
    }
    if args.max_queue_wait == Some(0) {
        bail!("--max-queue-wait must be at least 1 ms");
    }
    if args.max_queue.is_some() && args.slots.is_none() {
        bail!("--max-queue needs --slots: without a limit no request ever waits");
    }
    if args.admission_min_useful.is_some() && !args.admission {
        bail!("--admission-min-useful needs --admission");
    }
    if !(0.0..=1.0).contains(&args.retry_504_share) {
        bail!(
            "--retry-504-share must be between 0 and 1, not {}",
            args.retry_504_share
        );
    }
    if args.header_timeout == 0 {
        bail!("--header-timeout must be at least 1 ms");
    }
    if args.tls_handshake_timeout == Some(0) {
        bail!("--tls-handshake-timeout must be at least 1 ms");
    }
    match (&args.tls_cert, &args.tls_key) {
        (Some(_), None) => {
            bail!("--tls-cert needs --tls-key (give both, or neither to serve cleartext)")
        }
        (None, Some(_)) => {
            bail!("--tls-key needs --tls-cert (give both, or neither to serve cleartext)")
        }
        _ => {}
    }
    if args.idle_timeout == 0 {
        bail!("--idle-timeout must be at least 1 ms");
    }
    if args.send_timeout == 0 {
        bail!("--send-timeout must be at least 1 ms");
    }
    if args.keep_alive_interval > 0 && args.keep_alive_timeout == 0 {
        bail!(
            "--keep-alive-timeout must be at least 1 ms (--keep-alive-interval 0 turns PINGs off)"
        );
    }
    if args.max_connections == Some(0) {
        bail!("--max-connections must be at least 1");
    }
    if Budget::from_millis(args.max_budget).is_none() {
        bail!("--max-budget must be at least 1 ms");
    }
    args.dialects.validate(args.downstream.is_some())?;
    let Some(url) = &args.downstream else {
        return Ok(None);
    };
    let https = url.scheme_str() == Some("https");
    if !(https || url.scheme_str() == Some("http")) || url.authority().is_none() {
        bail!("--downstream must be an http:// or https:// URL with a host, not {url}");
    }
    if args.ca.is_some() && !https {
        bail!("--ca is for an https:// --downstream, not {url}");
    }
    let policy = CallPolicy::builder()
        .timeout(Duration::from_millis(args.timeout))
        .attempts(args.attempts)
        .margin(Duration::from_millis(args.margin))
        .min_useful(Duration::from_millis(args.min_useful))
        .propagate(!args.no_propagate)
        .share(args.dialects.share.unwrap_or_default())
        .build()
        .context("invalid downstream call policy")?;
    Ok(Some(policy))
}

/// Runs the service until SIGINT or SIGTERM, then drains: stops accepting, waits for every
/// request in flight (including baseline work whose caller left), flushes the log.
pub(crate) async fn run(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    let policy = validate(&args)?;
    #[cfg(unix)]
    match crate::fd_limit::raise_open_files() {
        Ok(Some((before, after))) => tracing::info!(
            before,
            after,
            "raised the open-file limit to the hard limit (every connection is a file)"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
    // Checked before binding, like the certificate below.
    let otlp_endpoint = args
        .otlp
        .as_deref()
        .map(crate::otlp::endpoint)
        .transpose()?;
    // Read before binding: a bad certificate or key is an error before anything is served.
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            deadline_http::tls::server_config_from_pem(cert, key)
                .context("--tls-cert and --tls-key")?,
        ),
        _ => None,
    };
    // The roots of an https:// downstream, read before binding too.
    let downstream_tls = match (&args.downstream, &args.ca) {
        (Some(url), ca) if url.scheme_str() == Some("https") => Some(match ca {
            Some(ca) => deadline_http::tls::client_config_from_pem(ca).context("--ca")?,
            None => deadline_http::tls::client_config_with_system_roots().context(
                "the system's root certificates, for an https:// --downstream (or give --ca)",
            )?,
        }),
        _ => None,
    };
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;
    let admin_listener = match args.admin_listen {
        Some(admin) => Some(
            tokio::net::TcpListener::bind(admin)
                .await
                .with_context(|| format!("binding --admin-listen {admin}"))?,
        ),
        None => None,
    };

    let log = args
        .log
        .as_deref()
        .map(HoldLog::create)
        .transpose()?
        .map(Arc::new);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let mut registry = deadline_http::metrics::Registry::default();
    let metrics = DeadlineMetrics::register(&mut registry).service(args.name.clone());
    let otlp = otlp_endpoint
        .map(|endpoint| crate::otlp::install(endpoint, &args.name, &mut registry))
        .transpose()?;
    let registry = Arc::new(registry);
    // Without --otlp the service does not trace at all: no spans, no `traceparent` read or
    // written (the global no-op provider would still cost every request a lookup and a span).
    let tracing = match otlp {
        Some(_) => deadline_http::otel::Tracing::global(),
        None => deadline_http::otel::Tracing::off(),
    };
    let database = crate::pg::Database::connect(
        &args.postgres,
        &args.name,
        args.slots,
        Duration::from_millis(args.margin),
        &metrics,
    )
    .await?;
    let downstream = match (&args.downstream, policy) {
        (Some(url), Some(policy)) => {
            let target = args
                .downstream_name
                .clone()
                .unwrap_or_else(|| url.authority().map(ToString::to_string).unwrap_or_default());
            let base = url.to_string().trim_end_matches('/').to_owned();
            let budget = match (args.no_retry_budget, args.retry_budget) {
                (true, _) => None,
                (false, Some(budget)) => Some(budget.config()),
                (false, None) => Some(RetryBudgetConfig::DEFAULT),
            };
            // Over https, the connect-first pool: the budget is stamped after the handshake
            // (its idle connections are closed by the downstream's idle timeout, not
            // --pool-idle-timeout).
            let client = match downstream_tls {
                Some(tls) if args.downstream_protocol.is_http2() => {
                    DeadlineClient::https_h2(policy, tls)
                }
                Some(tls) => DeadlineClient::https(policy, tls),
                None => {
                    let mut connector = HttpConnector::new();
                    connector.set_nodelay(true);
                    let pool = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
                        .pool_idle_timeout(Duration::from_millis(args.pool_idle_timeout))
                        .pool_timer(TokioTimer::new())
                        .http2_only(args.downstream_protocol.is_http2())
                        // A downstream h2 connection that stops answering PINGs is closed.
                        .timer(TokioTimer::new())
                        .http2_keep_alive_interval(H2_KEEP_ALIVE_INTERVAL)
                        .http2_keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
                        .build(connector);
                    DeadlineClient::from_client(pool, policy)
                }
            };
            Some((
                base,
                client
                    .tracing(tracing.clone())
                    .max_body(args.max_body)
                    .target(target)
                    .dialects(args.dialects.send.clone().unwrap_or_default())
                    .record_metrics(&metrics)
                    .retry_budget(budget)
                    .hedge(args.hedge.map(|h| h.0))
                    .callee_504(Callee504::new(
                        (args.retry_504_share * 1_000.0).round() as u32
                    )),
            ))
        }
        _ => None,
    };
    let config = Arc::new(HandlerConfig {
        name: args.name.clone(),
        work: Duration::from_millis(args.work),
        slow_work: Duration::from_millis(args.slow_work),
        slow_share: args.slow_share,
        seed: args.seed,
        downstream,
        retries_downstream: args.attempts > 1,
        outage: args.outage.map(Outage::new),
        per_attempt: args.slow_per_attempt.then(PerAttempt::default),
        grpc_downstream: args.downstream_protocol == DownstreamProtocol::Grpc,
        database,
        stream: args.stream,
    });
    let stream_name: Arc<str> = Arc::from(args.name.as_str());

    let mut enforce = EnforceDeadlineLayer::new(args.name.clone())
        .tracing(tracing)
        .reserve(Duration::from_millis(args.reserve))
        .max_budget(Budget::from_millis(args.max_budget).unwrap_or(Budget::DEFAULT_MAX))
        .enforce(!args.no_enforce)
        .accept(args.dialects.accept)
        .skew_guard(args.dialects.guard())
        .record_metrics(&metrics)
        .server_timing(!args.no_server_timing)
        .trace_exposure(args.trace.clone());
    enforce = enforce.queue(args.queue);
    if args.admission {
        let min_useful = args.admission_min_useful.unwrap_or(args.work);
        enforce = enforce.admission(Duration::from_millis(min_useful));
    }
    if let Some(max_wait) = args.max_queue_wait {
        enforce = enforce.max_queue_wait(Duration::from_millis(max_wait));
    }
    if let Some(max) = args.max_queue {
        enforce = enforce.max_queue(max);
    }
    if let Some(slots) = args.slots {
        enforce = enforce.slots(slots);
    }
    let hook_log = log.clone();
    let hook_in_flight = in_flight.clone();
    let enforce = enforce.on_hold(move |hold: &Hold| {
        if let Some(log) = &hook_log {
            log.write(hold_line(hold));
        }
        hook_in_flight.fetch_sub(1, Ordering::AcqRel);
    });

    let ids = Arc::new(IdMaker::new(&args.name));
    let replaced_ids = Arc::new(LogLimit::new(Duration::from_secs(1)));
    let service_name = args.name.clone();
    let counter = in_flight.clone();
    let work = ServiceBuilder::new()
        // Outside the enforce layer but before any waiting: stamp an id and count the request
        // in flight (the hold hook counts it out, exactly once).
        .map_request(move |mut req: Request<Incoming>| {
            counter.fetch_add(1, Ordering::AcqRel);
            // An id that is empty or not visible ASCII counts as absent: forwarding it would
            // give unrelated requests one shared id (and one shared slowness decision). One
            // longer than 128 characters is replaced too, not copied into every hop's headers
            // and logs; the replacement is logged, at most once a second.
            let sent = req.headers().get(REQUEST_ID_HEADER);
            if !sent.is_some_and(|id| is_usable_request_id(id.as_bytes())) {
                let id = ids.next();
                if let Some(sent) = sent
                    && let Some(replaced) = replaced_ids.hit()
                {
                    tracing::warn!(
                        service = %service_name,
                        sent_len = sent.len(),
                        new_id = %id,
                        replaced,
                        "x-request-id replaced: not 1 to 128 visible ASCII characters \
                         (replaced: how many since the last such line)"
                    );
                }
                if let Ok(id) = HeaderValue::from_str(&id) {
                    req.headers_mut().insert(REQUEST_ID_HEADER, id);
                }
            }
            req
        })
        .layer(enforce)
        .service_fn(move |req: Request<Incoming>| {
            // A gRPC caller gets the same answer in gRPC's terms.
            let grpc = deadline::grpc::is_grpc(req.headers());
            let (config, name) = (config.clone(), stream_name.clone());
            async move {
                if config.stream.is_some() {
                    let streamed = streamed(&config, &name, req, grpc).await;
                    return Ok::<_, Infallible>(streamed.map(Either::Right));
                }
                let response = handle(config.clone(), req).await?;
                Ok(if grpc {
                    into_grpc(response)
                        .await
                        .map(|body| Either::Left(Either::Right(body)))
                } else {
                    response.map(|body| Either::Left(Either::Left(body)))
                })
            }
        });
    let probe = Arc::new(RuntimeProbe {
        in_flight: in_flight.clone(),
        log: log.clone(),
    });
    // The admin paths are answered here, before the request is counted or reaches the enforce
    // layer: they never wait for a slot, are never logged and never reach the work.
    let admin = Admin { probe, registry };
    let public_admin = (!args.no_public_admin).then(|| admin.clone());
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let work = work.clone();
        let admin = public_admin.as_ref().and_then(|admin| admin.answer(&req));
        async move {
            if let Some(answer) = admin {
                return Ok(answer.map(Either::Right));
            }
            work.oneshot(req).await.map(|r| r.map(Either::Left))
        }
    });

    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(
            format!(
                "listening on {scheme}://{addr}\n",
                scheme = if tls.is_some() { "https" } else { "http" }
            )
            .as_bytes(),
        )
        .await?;
    // The admin address apart: its own serve loop, answering the admin paths and 404 to any
    // other, stopped with the public one.
    let (stop_admin, admin_stopped) = tokio::sync::watch::channel(false);
    let admin_task = match admin_listener {
        Some(listener) => {
            let admin_addr = listener.local_addr()?;
            stdout
                .write_all(format!("admin on http://{admin_addr}\n").as_bytes())
                .await?;
            let service = tower::service_fn(move |req: Request<Incoming>| {
                let answer = admin.answer(&req).unwrap_or_else(|| {
                    text(
                        StatusCode::NOT_FOUND,
                        format!("not an admin path: {}\n", req.uri().path()),
                    )
                });
                async move { Ok::<_, Infallible>(answer) }
            });
            let mut stopped = admin_stopped;
            let shutdown = async move {
                let _ = stopped.wait_for(|stop| *stop).await;
            };
            Some(tokio::spawn(deadline_http::serve::serve_with(
                listener,
                service,
                shutdown,
                serve_options(&args),
            )))
        }
        None => None,
    };
    stdout.flush().await?;

    let stop_on_stdin = args.exit_on_stdin_close;
    let stopping = Arc::new(std::sync::OnceLock::new());
    let stopped_at = stopping.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = stdin_closed(), if stop_on_stdin => {}
        }
        let _ = stopped_at.set(Instant::now());
    };
    let drain = Duration::from_secs(args.drain_timeout);
    match tls {
        Some(tls) => {
            deadline_http::serve::serve_tls(listener, tls, service, shutdown, serve_options(&args))
                .await
        }
        None => {
            deadline_http::serve::serve_with(listener, service, shutdown, serve_options(&args))
                .await
        }
    }
    .context("serving")?;
    let _ = stop_admin.send(true);
    if let Some(task) = admin_task {
        task.await
            .context("the admin server")?
            .context("serving the admin address")?;
    }

    // Work the baseline keeps running after its caller left is still in flight: wait for it so
    // the log holds every hold, but only for what is left of --drain-timeout.
    // A --drain-timeout too large for the clock means no limit, never a panic at exit.
    let drain_until = stopping
        .get()
        .copied()
        .unwrap_or_else(Instant::now)
        .checked_add(drain);
    while in_flight.load(Ordering::Acquire) > 0 && drain_until.is_none_or(|t| Instant::now() < t) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // After the drain: the spans of the requests it waited for are queued by now.
    if let Some(otlp) = otlp {
        otlp.shutdown(&args.name).await;
    }
    let left = in_flight.load(Ordering::Acquire);
    if left > 0 {
        tracing::warn!(
            service = %args.name,
            in_flight = left,
            "exiting with work still in flight after --drain-timeout; its holds are not logged"
        );
        eprintln!(
            "deadline service {}: exiting with {left} requests still in flight after {} s; their holds are missing from the log",
            args.name, args.drain_timeout
        );
    }
    if let Some(log) = log {
        let counts = tokio::task::spawn_blocking(move || log.flush(LOG_FLUSH_TIMEOUT))
            .await
            .context("flushing the log")??;
        if counts.lost() > 0 {
            bail!(
                "{} of {} holds are missing from the log ({} dropped while the writer was behind, {} lost to write errors)",
                counts.lost(),
                counts.lost() + counts.written,
                counts.dropped,
                counts.failed
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The connection limits of `serve`, from the flags.
fn serve_options(args: &ServiceArgs) -> ServeOptions {
    let options = serve_limits(args);
    match args.tls_handshake_timeout {
        Some(ms) => options.tls_handshake_timeout(Duration::from_millis(ms)),
        None => options,
    }
}

/// The limits of `serve` that do not depend on TLS.
fn serve_limits(args: &ServiceArgs) -> ServeOptions {
    let keep_alive = (args.keep_alive_interval > 0).then(|| {
        (
            Duration::from_millis(args.keep_alive_interval),
            Duration::from_millis(args.keep_alive_timeout),
        )
    });
    ServeOptions::default()
        .header_read_timeout(Duration::from_millis(args.header_timeout))
        .idle_timeout(Duration::from_millis(args.idle_timeout))
        .keep_alive(keep_alive)
        .send_timeout(Duration::from_millis(args.send_timeout))
        .max_connections(args.max_connections)
        .shutdown_grace(Duration::from_secs(args.drain_timeout))
}

/// The reserved admin path: `GET` answers this process's runtime figures as JSON. Every other
/// path is the service's work; later admin paths (such as `/metrics`) sit beside it the same way.
pub(crate) const RUNTIME_PATH: &str = "/debug/runtime";

/// The reserved scrape path: `GET` answers this service's Prometheus metrics (the deadline
/// metric set, `service` label = `--name`), in the OpenMetrics text format.
pub(crate) const METRICS_PATH: &str = "/metrics";

/// The admin paths' answers: runtime figures and the metrics scrape.
#[derive(Clone)]
struct Admin {
    probe: Arc<RuntimeProbe>,
    registry: Arc<deadline_http::metrics::Registry>,
}

impl Admin {
    /// The answer to `req` if it is `GET` on an admin path.
    fn answer<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        if req.method() != http::Method::GET {
            return None;
        }
        match req.uri().path() {
            RUNTIME_PATH => Some(self.probe.reply()),
            METRICS_PATH => Some(
                deadline_http::metrics::scrape(&self.registry)
                    .map(|text| Full::new(Bytes::from(text))),
            ),
            _ => None,
        }
    }
}

/// What `GET /debug/runtime` reads.
struct RuntimeProbe {
    in_flight: Arc<AtomicUsize>,
    log: Option<Arc<HoldLog>>,
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
        };
        let mut response = match serde_json::to_vec(&figures) {
            Ok(body) => Response::new(Full::new(Bytes::from(body))),
            Err(err) => return text(StatusCode::INTERNAL_SERVER_ERROR, format!("{err}\n")),
        };
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        response
    }
}

/// How many file descriptors this process has open, where `/proc` says.
fn open_fds() -> Option<usize> {
    std::fs::read_dir("/proc/self/fd").ok().map(Iterator::count)
}

/// Makes request ids at the edge: the service name, a per-process prefix and a counter.
struct IdMaker {
    prefix: String,
    next: AtomicU64,
}

impl IdMaker {
    fn new(name: &str) -> IdMaker {
        IdMaker {
            prefix: format!("{name}-{}", std::process::id()),
            next: AtomicU64::new(1),
        }
    }

    fn next(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

async fn handle(
    config: Arc<HandlerConfig>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if config
        .outage
        .as_ref()
        .is_some_and(|o| o.active(Instant::now()))
    {
        return Ok(Outage::answer(&config.name));
    }
    let slow = match &config.per_attempt {
        Some(per_attempt) => per_attempt.is_slow(&id, config.seed, config.slow_share),
        None => is_slow(&id, config.seed, config.slow_share),
    };
    let work = if slow { config.slow_work } else { config.work };
    let started = Instant::now();
    match &config.database {
        Some(database) => {
            if let Err(answer) = database.work(&config.name, &id, work).await {
                return Ok(answer);
            }
        }
        None => tokio::time::sleep(work).await,
    }

    let Some((base, client)) = &config.downstream else {
        return Ok(text(
            StatusCode::OK,
            format!(
                "{}: done in {} ms\n",
                config.name,
                Instant::now()
                    .saturating_duration_since(started)
                    .as_millis()
            ),
        ));
    };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let call = if config.grpc_downstream {
        wire::request(&format!("{base}{path}"), &id)
    } else {
        let mut call = Request::get(format!("{base}{path}"));
        if let Ok(value) = HeaderValue::from_str(&id) {
            call = call.header(REQUEST_ID_HEADER, value);
        }
        call.body(Full::new(Bytes::new()))
    };
    let call = match call {
        Ok(call) => call,
        Err(err) => {
            return Ok(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{}: bad downstream request: {err}\n", config.name),
            ));
        }
    };
    let answer = match client.send(call).await {
        Ok(response) if config.grpc_downstream => downstream_answer(&config.name, response).await,
        Ok(response) => {
            let status = response.status();
            // The body as it came, bytes not text: a reply that is not UTF-8 is passed on as
            // it is, not grown by replacement characters.
            match response.into_body().collect().await {
                Err(err) => body_failed(&config.name, &err),
                Ok(body) if status.is_success() => relay(StatusCode::OK, "", body.to_bytes()),
                Ok(body) if status == StatusCode::GATEWAY_TIMEOUT => relay(
                    StatusCode::GATEWAY_TIMEOUT,
                    &format!("{}: downstream answered 504: ", config.name),
                    body.to_bytes(),
                ),
                Ok(body) => relay(
                    StatusCode::BAD_GATEWAY,
                    &format!("{}: downstream answered {status}: ", config.name),
                    body.to_bytes(),
                ),
            }
        }
        Err(err) if err.is_deadline() => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline exceeded at {}: {err}\n", config.name),
        ),
        Err(err) => text(
            StatusCode::BAD_GATEWAY,
            format!(
                "{}: downstream failed: {err}{}\n",
                config.name,
                crate::reply::cause(&err)
            ),
        ),
    };
    // A downstream failure this hop already retried is not for its caller to retry again.
    if answer.status() == StatusCode::BAD_GATEWAY && config.retries_downstream {
        return Ok(do_not_retry(answer));
    }
    Ok(answer)
}

/// A downstream's reply passed on with `status`: `prefix`, then its body's bytes as they came.
fn relay(status: StatusCode, prefix: &str, body: Bytes) -> Response<Full<Bytes>> {
    let body = if prefix.is_empty() {
        body
    } else {
        let mut joined = Vec::with_capacity(prefix.len() + body.len());
        joined.extend_from_slice(prefix.as_bytes());
        joined.extend_from_slice(&body);
        Bytes::from(joined)
    };
    let mut response = text(status, String::new());
    *response.body_mut() = Full::new(body);
    response
}

/// `--stream`: the work, then a streamed answer (see [`crate::stream`]).
async fn streamed(
    config: &HandlerConfig,
    name: &Arc<str>,
    req: Request<Incoming>,
    grpc: bool,
) -> Response<StreamBody> {
    tokio::time::sleep(config.work).await;
    let hop = StreamHop {
        name,
        stream: config.stream.unwrap_or(StreamArg {
            count: 1,
            interval: Duration::ZERO,
        }),
        downstream: config.downstream.as_ref().map(|(b, c)| (b.as_str(), c)),
        grpc_downstream: config.grpc_downstream,
    };
    stream::answer(hop, &req, grpc).await
}

/// Turns a hold report into a log line, converting monotonic instants to wall time.
fn hold_line(hold: &Hold) -> HoldLine {
    let wall_now = epoch_ms_now();
    let mono_now = Instant::now();
    let epoch =
        |t: Instant| wall_now - mono_now.saturating_duration_since(t).as_secs_f64() * 1_000.0;
    HoldLine {
        service: hold.service.to_string(),
        request_id: hold.request_id.clone(),
        outcome: hold.outcome.as_str().to_owned(),
        status: hold.status.map(|s| s.as_u16()),
        budget_ms: hold.budget_ms,
        arrival_ms: epoch(hold.arrival),
        start_ms: hold.work_start.map(epoch),
        end_ms: hold.work_end.map(epoch),
        queued_ms: hold.queued.as_secs_f64() * 1_000.0,
        worked_ms: hold.worked.as_secs_f64() * 1_000.0,
        reply_written: hold.reply_written,
        streamed_ms: hold.streamed.as_secs_f64() * 1_000.0,
        exceeded: hold.exceeded.map(|phase| phase.as_str().to_owned()),
    }
}

//! The flags of `deadline service` and the checks that run before anything is bound: what
//! clap cannot say alone (ranges, flags that need one another), and the downstream call policy
//! the flags make.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use deadline::{Budget, CallPolicy};
use deadline_http::enforce::{QueueOrder, TraceExposure};
use deadline_http::propagate::DEFAULT_MAX_BODY;
use http::Uri;

use crate::dialect_args::DialectArgs;
use crate::grpc::wire::DownstreamProtocol;
use crate::outage::{BudgetArg, HedgeArg, Window};
use crate::stream::StreamArg;

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
    /// Also serve the admin paths (`/metrics`, `/debug/runtime`, `/deadline/limits`) on this
    /// address, apart from the public port (a second line, `admin on http://ADDR`, follows the
    /// ready line).
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
    /// once with 503 (gRPC UNAVAILABLE), with a budget or without. Needs `--slots` [default
    /// with --slots: 1024].
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
    /// Refuse at once (503, `Retry-After: 0`) every request that arrives while this service's
    /// runtime runs this many ms late or more (a timer it sets every 5 ms fires that late): its
    /// processor is then the bottleneck, and work started now would be taken from the requests
    /// already admitted. Needs `--slots` (a large count adds no limit of its own).
    #[arg(long, value_name = "MS")]
    pub max_lag: Option<u64>,
    /// Milliseconds kept back from each budget to write the reply.
    #[arg(long, default_value_t = 10)]
    pub reserve: u64,
    /// Whatever stands in front of this service (a proxy, a balancer) gives up after this many
    /// ms: each request's budget is at most this less `--front-margin`, and a request without
    /// a budget gets that, so the service answers with its own 504 and trace before the front's
    /// bodyless one.
    #[arg(long, value_name = "MS")]
    pub front_timeout: Option<u64>,
    /// Milliseconds kept from `--front-timeout` for the way back through the front.
    #[arg(
        long,
        value_name = "MS",
        default_value_t = 50,
        requires = "front_timeout"
    )]
    pub front_margin: u64,
    /// Take the time since the proxy's `X-Request-Start` stamp (nginx's `t=${msec}`, or
    /// milliseconds or microseconds since the epoch) from each budget. Only for a service that
    /// a proxy setting the header stands in front of: any caller can send it. A stamp in the
    /// future or over a minute old is ignored and counted (`/debug/runtime`).
    #[arg(long)]
    pub trust_request_start: bool,
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
    /// Whether every answer carries a `Server-Timing` header (queue, work and budget times):
    /// `on` or `off`. This demonstration service has it on; the library's default is off.
    #[arg(long, value_enum, default_value_t = Switch::On)]
    pub server_timing: Switch,
    /// The same as `--server-timing off` (the older spelling).
    #[arg(long, hide = true, conflicts_with = "server_timing")]
    pub no_server_timing: bool,
    /// Who gets this hop's `Deadline-Trace` header: `always`, `budgeted` (only callers that
    /// sent a budget, the library's default) or `off`. This demonstration service shows it to
    /// every caller; an edge the public can reach limits it: it maps the internal call graph
    /// and its timings.
    #[arg(long, default_value = "always")]
    pub trace: TraceExposure,
    /// Write one JSON line per worker hold to this file.
    #[arg(long)]
    pub log: Option<PathBuf>,
    /// How many requests refused at arrival (budget spent, malformed, queue full) the log
    /// writes in full each second; the rest of each second are folded into one line per
    /// outcome with a `count`, so a flood of them cannot fill the disk. `all` writes every one.
    #[arg(long, value_name = "N|all", default_value = "100")]
    pub log_refused: crate::holds::RefusedLines,
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
    /// room, or else the one whose answers have waited on the peer the longest with none taken
    /// is dropped; when every connection is making progress new connections are refused
    /// (default: 1,024, or the open-file limit less 64 where that is lower).
    #[arg(long)]
    pub max_connections: Option<usize>,
    /// HTTP/2 streams a client may have open at once on one connection; streams beyond it are
    /// refused (REFUSED_STREAM, safe to retry).
    #[arg(long, value_name = "N", default_value_t = deadline_http::serve::MAX_CONCURRENT_STREAMS)]
    pub max_streams: u32,
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

/// Checks the flags together, in the order their errors are reported, and makes the
/// downstream call policy (none without `--downstream`).
pub(super) fn validate(args: &ServiceArgs) -> anyhow::Result<Option<CallPolicy>> {
    check_work(args)?;
    check_connections(args)?;
    args.dialects.validate(args.downstream.is_some())?;
    downstream_policy(args)
}

/// The flags of the work and its queue: shares, slots and what needs them.
fn check_work(args: &ServiceArgs) -> anyhow::Result<()> {
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
    if args.max_lag.is_some() && args.slots.is_none() {
        bail!("--max-lag needs --slots (a large count adds no limit of its own)");
    }
    if args.max_lag == Some(0) {
        bail!("--max-lag must be at least 1 ms");
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
    Ok(())
}

/// The flags of the connections: timeouts, TLS, limits and the largest budget.
fn check_connections(args: &ServiceArgs) -> anyhow::Result<()> {
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
    if args.max_streams == 0 {
        bail!("--max-streams must be at least 1");
    }
    if Budget::from_millis(args.max_budget).is_none() {
        bail!("--max-budget must be at least 1 ms");
    }
    Ok(())
}

/// The downstream call policy of `--downstream`, after checking its URL and `--ca`.
fn downstream_policy(args: &ServiceArgs) -> anyhow::Result<Option<CallPolicy>> {
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

/// A feature turned `on` or `off` on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Switch {
    /// On.
    On,
    /// Off.
    Off,
}

impl ServiceArgs {
    /// Whether answers carry `Server-Timing`: `--server-timing on` and no `--no-server-timing`.
    pub(crate) fn server_timing(&self) -> bool {
        self.server_timing == Switch::On && !self.no_server_timing
    }
}

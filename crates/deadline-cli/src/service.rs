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
use deadline_http::enforce::{EnforceDeadlineLayer, Hold};
use deadline_http::propagate::DeadlineClient;
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::time::Instant;
use tower::ServiceBuilder;

use crate::holds::{HoldLine, HoldLog, epoch_ms_now};

/// The request id header, forwarded downstream and made at the edge when absent.
pub(crate) use deadline_http::enforce::REQUEST_ID_HEADER as REQUEST_ID;

/// Arguments of `deadline service`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ServiceArgs {
    /// This hop's name, in traces, 504 bodies and the log.
    #[arg(long)]
    pub name: String,
    /// Address to listen on; port 0 picks a free one (the ready line says which).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Milliseconds of work per request.
    #[arg(long, default_value_t = 0)]
    pub work: u64,
    /// Worker slots: requests beyond this wait, but only as long as their budget allows.
    #[arg(long)]
    pub slots: Option<usize>,
    /// Milliseconds kept back from each budget to write the reply.
    #[arg(long, default_value_t = 10)]
    pub reserve: u64,
    /// Largest budget accepted, in ms; larger ones are clamped.
    #[arg(long, default_value_t = Budget::DEFAULT_MAX.as_millis())]
    pub max_budget: u64,
    /// Call this URL (the request's path is appended) after working.
    #[arg(long)]
    pub downstream: Option<Uri>,
    /// The downstream's name in this hop's trace (default: its host and port).
    #[arg(long)]
    pub downstream_name: Option<String>,
    /// Per-attempt timeout of the downstream call, in ms.
    #[arg(long, default_value_t = 1_000)]
    pub timeout: u64,
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
    /// included) before exiting anyway, with a warning, in seconds.
    #[arg(long, default_value_t = 600)]
    pub drain_timeout: u64,
    /// Drain and exit when standard input closes, as well as on SIGINT or SIGTERM. The demo and
    /// the load command use it so their services never outlive them.
    #[arg(long)]
    pub exit_on_stdin_close: bool,
}

/// What every request of one service shares.
struct State {
    name: String,
    work: Duration,
    slow_work: Duration,
    slow_share: f64,
    seed: u64,
    downstream: Option<(String, DeadlineClient)>,
}

/// Whether request `id` is one of the slow ones: a hash of the id and seed, so the same requests
/// are slow in every run and at every hop, and every attempt of a slow request is slow.
pub(crate) fn is_slow(id: &str, seed: u64, share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    // FNV-1a, then a splitmix64 finaliser so nearby ids spread evenly.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^= h >> 31;
    ((h >> 11) as f64 / (1u64 << 53) as f64) < share
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
    if Budget::from_millis(args.max_budget).is_none() {
        bail!("--max-budget must be at least 1 ms");
    }
    let Some(url) = &args.downstream else {
        return Ok(None);
    };
    if url.scheme_str() != Some("http") || url.authority().is_none() {
        bail!("--downstream must be an http:// URL with a host, not {url}");
    }
    let policy = CallPolicy::builder()
        .timeout(Duration::from_millis(args.timeout))
        .attempts(args.attempts)
        .margin(Duration::from_millis(args.margin))
        .min_useful(Duration::from_millis(args.min_useful))
        .propagate(!args.no_propagate)
        .build()
        .context("invalid downstream call policy")?;
    Ok(Some(policy))
}

/// Runs the service until SIGINT or SIGTERM, then drains: stops accepting, waits for every
/// request in flight (including baseline work whose caller left), flushes the log.
pub(crate) async fn run(args: ServiceArgs) -> anyhow::Result<ExitCode> {
    let policy = validate(&args)?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let addr = listener.local_addr()?;

    let log = args
        .log
        .as_deref()
        .map(HoldLog::create)
        .transpose()?
        .map(Arc::new);
    let in_flight = Arc::new(AtomicUsize::new(0));
    let downstream = match (&args.downstream, policy) {
        (Some(url), Some(policy)) => {
            let target = args
                .downstream_name
                .clone()
                .unwrap_or_else(|| url.authority().map(ToString::to_string).unwrap_or_default());
            let base = url.to_string().trim_end_matches('/').to_owned();
            Some((base, DeadlineClient::new(policy).target(target)))
        }
        _ => None,
    };
    let state = Arc::new(State {
        name: args.name.clone(),
        work: Duration::from_millis(args.work),
        slow_work: Duration::from_millis(args.slow_work),
        slow_share: args.slow_share,
        seed: args.seed,
        downstream,
    });

    let mut enforce = EnforceDeadlineLayer::new(args.name.clone())
        .reserve(Duration::from_millis(args.reserve))
        .max_budget(Budget::from_millis(args.max_budget).unwrap_or(Budget::DEFAULT_MAX))
        .enforce(!args.no_enforce);
    if let Some(slots) = args.slots {
        enforce = enforce.slots(slots);
    }
    let hook_log = log.clone();
    let hook_in_flight = in_flight.clone();
    let enforce = enforce.on_hold(move |hold: &Hold| {
        if let Some(log) = &hook_log {
            log.write(&hold_line(hold));
        }
        hook_in_flight.fetch_sub(1, Ordering::AcqRel);
    });

    let ids = Arc::new(IdMaker::new(&args.name));
    let counter = in_flight.clone();
    let service = ServiceBuilder::new()
        // Outside the enforce layer but before any waiting: stamp an id and count the request
        // in flight (the hold hook counts it out, exactly once).
        .map_request(move |mut req: Request<Incoming>| {
            counter.fetch_add(1, Ordering::AcqRel);
            // An id that is empty or not visible ASCII counts as absent: forwarding it would
            // give unrelated requests one shared id (and one shared slowness decision).
            let usable = req
                .headers()
                .get(REQUEST_ID)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|id| !id.trim().is_empty());
            if !usable {
                if let Ok(id) = HeaderValue::from_str(&ids.next()) {
                    req.headers_mut().insert(REQUEST_ID, id);
                }
            }
            req
        })
        .layer(enforce)
        .service_fn(move |req| handle(state.clone(), req));

    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("listening on http://{addr}\n").as_bytes())
        .await?;
    stdout.flush().await?;

    let stop_on_stdin = args.exit_on_stdin_close;
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = stdin_closed(), if stop_on_stdin => {}
        }
    };
    deadline_http::serve::serve(listener, service, shutdown)
        .await
        .context("serving")?;

    // Work the baseline keeps running after its caller left is still in flight: wait for it so
    // the log holds every hold, but not forever.
    let drain_until = Instant::now() + Duration::from_secs(args.drain_timeout);
    while in_flight.load(Ordering::Acquire) > 0 && Instant::now() < drain_until {
        tokio::time::sleep(Duration::from_millis(5)).await;
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
    if let Some(log) = &log {
        log.flush().context("flushing the log")?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Resolves when standard input reaches its end (or fails).
///
/// The read runs on a plain OS thread of its own, not on tokio's blocking pool: a blocking read
/// cannot be cancelled, and a runtime waits for its blocking-pool threads when it shuts down, so
/// a service stopped by a signal while its stdin was still open would never exit. A detached
/// thread ends with the process instead.
pub(crate) async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 64];
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            let _ = tx.send(());
        });
    match spawned {
        // Resolves when the thread sends, or drops the sender.
        Ok(_) => {
            let _ = rx.await;
        }
        // No thread: never resolve, and rely on the signals.
        Err(_) => std::future::pending().await,
    }
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

fn text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let id = req
        .headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let slow = is_slow(&id, state.seed, state.slow_share);
    let work = if slow { state.slow_work } else { state.work };
    let started = Instant::now();
    tokio::time::sleep(work).await;

    let Some((base, client)) = &state.downstream else {
        return Ok(text(
            StatusCode::OK,
            format!(
                "{}: done in {} ms\n",
                state.name,
                Instant::now()
                    .saturating_duration_since(started)
                    .as_millis()
            ),
        ));
    };
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut call = Request::get(format!("{base}{path}"));
    if let Ok(value) = HeaderValue::from_str(&id) {
        call = call.header(REQUEST_ID, value);
    }
    let call = match call.body(Full::new(Bytes::new())) {
        Ok(call) => call,
        Err(err) => {
            return Ok(text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{}: bad downstream request: {err}\n", state.name),
            ));
        }
    };
    Ok(match client.send(call).await {
        Ok(response) => {
            let status = response.status();
            let body = match response.into_body().collect().await {
                Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
                Err(err) => format!("(reply body lost: {err})\n"),
            };
            if status.is_success() {
                text(StatusCode::OK, body)
            } else if status == StatusCode::GATEWAY_TIMEOUT {
                text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("{}: downstream answered 504: {body}", state.name),
                )
            } else {
                text(
                    StatusCode::BAD_GATEWAY,
                    format!("{}: downstream answered {status}: {body}", state.name),
                )
            }
        }
        Err(err) if err.is_deadline() => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline exceeded at {}: {err}\n", state.name),
        ),
        Err(err) => text(
            StatusCode::BAD_GATEWAY,
            format!("{}: downstream failed: {err}\n", state.name),
        ),
    })
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowness_is_a_property_of_the_request_id() {
        let slow: Vec<bool> = (0..10_000)
            .map(|i| is_slow(&format!("load-{i}"), 7, 0.05))
            .collect();
        let again: Vec<bool> = (0..10_000)
            .map(|i| is_slow(&format!("load-{i}"), 7, 0.05))
            .collect();
        assert_eq!(slow, again, "the same ids are slow every time");
        let share = slow.iter().filter(|s| **s).count() as f64 / 10_000.0;
        assert!(
            (0.04..0.06).contains(&share),
            "about 5 % are slow, got {share}"
        );
        let other_seed = (0..10_000)
            .filter(|i| is_slow(&format!("load-{i}"), 8, 0.05))
            .count();
        assert_ne!(other_seed, 0);
        assert!(!is_slow("x", 1, 0.0));
        assert!(is_slow("x", 1, 1.0));
    }
}

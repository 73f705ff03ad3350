//! `deadline bench`: what the layers cost over real loopback HTTP, side by side in one run.
//!
//! Four servers answer the same trivial handler (`200 ok`, three bytes):
//!
//! | variant | what |
//! |---|---|
//! | `bare` | the handler on plain hyper (this crate's `serve`: hyper's HTTP/1, `TCP_NODELAY`) |
//! | `enforce` | the same behind `EnforceDeadlineLayer` |
//! | `chain-bare` | an edge whose handler calls a second `bare` server with hyper-util's pooled client, two hops |
//! | `chain-deadline` | the edge behind the enforce layer calls through `DeadlineClient` (the propagate layer over the same pooled client) a second server behind the enforce layer |
//!
//! Every request carries `Deadline-Budget-Ms` (the bare servers ignore it), so the bytes on the
//! wire are the same for every variant. The generator holds `--connections` keep-alive HTTP/1.1
//! connections per variant, each sending its next request as soon as the last answer is in
//! (saturation: a closed loop per connection). Its client is a minimal HTTP/1.1 writer and
//! reader (no pool, no header map), so it costs the server's side of the machine as little as
//! possible. Rounds alternate the order of the variants (forwards, then backwards), so a drift
//! in the machine's load is shared out rather than charged to one variant.
//!
//! # Threads
//!
//! Servers and generator share this process but not their threads: every server runs on one
//! runtime on its own OS thread(s) (`--server-threads`, default 1: a current-thread runtime, so
//! a hop's cost is one core's worth of work), the generator on another current-thread runtime on
//! the calling thread. The CPU time of the server threads and of the generator thread is read
//! from `/proc/self/task/TID/schedstat` around each measured window (Linux; elsewhere the CPU
//! columns are empty), which says both what a request costs the server and whether the server
//! was the bottleneck (busy near 100 %) or the generator was.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use bytes::Bytes;
use clap::{Args, ValueEnum};
use deadline::CallPolicy;
use deadline_http::{DeadlineClient, EnforceDeadlineLayer};
use hdrhistogram::Histogram;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;
use tower::{Layer, service_fn};

/// Arguments of `deadline bench`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BenchArgs {
    /// Keep-alive connections driving each variant, each with one request in flight.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// Seconds measured per variant in each round.
    #[arg(long, default_value_t = 2.0)]
    seconds: f64,
    /// Rounds; each runs every variant once, alternating their order.
    #[arg(long, default_value_t = 2)]
    rounds: u32,
    /// Milliseconds of warm-up before each measured window (requests sent, not counted).
    #[arg(long, default_value_t = 300)]
    warmup_ms: u64,
    /// The variants to run, comma-separated (default: all four).
    #[arg(long, value_delimiter = ',')]
    variants: Option<Vec<Variant>>,
    /// The budget every request carries, in ms.
    #[arg(long, default_value_t = 1_950)]
    budget: u64,
    /// Worker threads of the servers' runtime; 1 is a current-thread runtime on one OS thread.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    json: bool,
    /// Serve only this variant on `--listen` until standard input closes or Ctrl-C (for an
    /// outside load generator such as wrk); measures nothing.
    #[arg(long, value_name = "VARIANT")]
    serve: Option<Variant>,
    /// The address `--serve` listens on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
}

/// One way of serving the trivial handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Variant {
    /// The handler on plain hyper.
    Bare,
    /// The handler behind the enforce layer.
    Enforce,
    /// Two bare hops: the edge calls the second with a plain pooled client.
    ChainBare,
    /// Two hops behind the enforce layer, the edge calling through the propagate layer.
    ChainDeadline,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::Bare,
        Variant::Enforce,
        Variant::ChainBare,
        Variant::ChainDeadline,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Enforce => "enforce",
            Variant::ChainBare => "chain-bare",
            Variant::ChainDeadline => "chain-deadline",
        }
    }

    /// The variant this one is compared with, if it is a layered one.
    fn baseline(self) -> Option<Variant> {
        match self {
            Variant::Enforce => Some(Variant::Bare),
            Variant::ChainDeadline => Some(Variant::ChainBare),
            Variant::Bare | Variant::ChainBare => None,
        }
    }
}

/// Latency histograms are in microseconds, up to a minute.
const HIST_MAX_US: u64 = 60_000_000;

/// The whole run's figures (`--json`).
#[derive(Debug, Serialize)]
struct Report {
    connections: usize,
    seconds_per_round: f64,
    rounds: u32,
    warmup_ms: u64,
    budget_ms: u64,
    server_threads: usize,
    /// `/proc/loadavg`'s three figures before and after the run (empty off Linux).
    load_average_before: Vec<f64>,
    load_average_after: Vec<f64>,
    cpus: usize,
    variants: Vec<VariantFigures>,
    ratios: Vec<Ratio>,
}

/// One variant's figures, every round merged.
#[derive(Debug, Serialize)]
struct VariantFigures {
    variant: Variant,
    requests: u64,
    /// Answers other than 200, and connections that failed.
    errors: u64,
    requests_per_second: f64,
    /// Each round's requests per second, in round order.
    rounds_requests_per_second: Vec<f64>,
    p50_us: u64,
    p99_us: u64,
    p999_us: u64,
    max_us: u64,
    mean_us: f64,
    /// CPU time of the server threads per request, in µs (both hops, for a chain).
    server_cpu_us_per_request: Option<f64>,
    /// Server threads' CPU time over the measured time, per server thread (1.0: saturated).
    server_busy: Option<f64>,
    /// The generator thread's CPU time over the measured time.
    client_busy: Option<f64>,
}

/// A layered variant against its bare twin.
#[derive(Debug, Serialize)]
struct Ratio {
    variant: Variant,
    baseline: Variant,
    /// Requests per second of the variant over the baseline's, every round pooled.
    throughput_ratio: f64,
    /// The median over rounds of the same ratio within each round (the two ran back to back),
    /// which a drift in the machine's load between rounds moves less.
    throughput_ratio_median_of_rounds: f64,
    p50_added_us: i64,
    p99_added_us: i64,
    p999_added_us: i64,
    server_cpu_added_us_per_request: Option<f64>,
}

/// What one variant's measured window gave.
struct Window {
    histogram: Histogram<u64>,
    requests: u64,
    errors: u64,
    elapsed: Duration,
    server_cpu: Option<Duration>,
    client_cpu: Option<Duration>,
}

pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(variant) = args.serve {
        return serve_only(args, variant);
    }
    if args.connections == 0 || args.connections > 10_000 {
        bail!(
            "--connections must be between 1 and 10000, not {}",
            args.connections
        );
    }
    if !(args.seconds > 0.0 && args.seconds.is_finite() && args.seconds <= 3_600.0) {
        bail!(
            "--seconds must be above 0 and at most 3600, not {}",
            args.seconds
        );
    }
    if args.rounds == 0 {
        bail!("--rounds must be at least 1");
    }
    if args.server_threads == 0 {
        bail!("--server-threads must be at least 1");
    }
    let variants = args
        .variants
        .clone()
        .unwrap_or_else(|| Variant::ALL.to_vec());
    let load_before = load_average();

    let servers = Servers::start(args.server_threads)?;
    let client = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let client_tid = current_tid();
    let mut windows: Vec<(Variant, Vec<Window>)> = variants.iter().map(|v| (*v, vec![])).collect();
    for round in 0..args.rounds {
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let variant = variants[i];
            eprintln!(
                "round {}/{}: {} ({} connections, {} s)",
                round + 1,
                args.rounds,
                variant.name(),
                args.connections,
                args.seconds
            );
            let addr = servers.addr(variant);
            let window = client.block_on(drive(
                addr,
                request_bytes(addr, args.budget),
                args.connections,
                Duration::from_millis(args.warmup_ms),
                Duration::from_secs_f64(args.seconds),
                &servers.tids,
                client_tid,
            ))?;
            windows[i].1.push(window);
        }
    }
    drop(client);
    servers.stop()?;

    let figures: Vec<VariantFigures> = windows
        .iter()
        .map(|(variant, windows)| merge(*variant, windows, args.server_threads))
        .collect::<anyhow::Result<_>>()?;
    let ratios = ratios(&figures);
    let report = Report {
        connections: args.connections,
        seconds_per_round: args.seconds,
        rounds: args.rounds,
        warmup_ms: args.warmup_ms,
        budget_ms: args.budget,
        server_threads: args.server_threads,
        load_average_before: load_before,
        load_average_after: load_average(),
        cpus: thread::available_parallelism().map_or(1, |n| n.get()),
        variants: figures,
        ratios,
    };
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", table(&report));
    }
    let errors: u64 = report.variants.iter().map(|v| v.errors).sum();
    Ok(if errors == 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("deadline bench: {errors} requests failed");
        ExitCode::FAILURE
    })
}

/// `--serve VARIANT`: serve one variant until stdin closes or Ctrl-C.
fn serve_only(args: &BenchArgs, variant: Variant) -> anyhow::Result<ExitCode> {
    let runtime = server_runtime(args.server_threads, Arc::default())?;
    runtime.block_on(async {
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(serve_variant(variant, listener, stop_rx));
        println!("listening on http://{addr}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = crate::service::stdin_closed() => {}
        }

        let _ = stop_tx.send(true);
        task.await.context("the server task failed")??;
        Ok(ExitCode::SUCCESS)
    })
}

/// The servers of every variant, on their own runtime and thread(s).
struct Servers {
    addrs: Vec<(Variant, SocketAddr)>,
    tids: Arc<Mutex<Vec<u32>>>,
    stop: watch::Sender<bool>,
    thread: thread::JoinHandle<anyhow::Result<()>>,
}

impl Servers {
    fn start(threads: usize) -> anyhow::Result<Servers> {
        let tids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (stop, stop_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_tids = tids.clone();
        let thread = thread::Builder::new().name("bench-servers".into()).spawn(
            move || -> anyhow::Result<()> {
                let runtime = server_runtime(threads, thread_tids.clone())?;
                if threads == 1 {
                    // A current-thread runtime runs its tasks on this thread.
                    if let Some(tid) = current_tid() {
                        lock(&thread_tids).push(tid);
                    }
                }
                runtime.block_on(async move {
                    let mut addrs = Vec::new();
                    let mut tasks = Vec::new();
                    for variant in Variant::ALL {
                        let listener = TcpListener::bind("127.0.0.1:0").await?;
                        addrs.push((variant, listener.local_addr()?));
                        tasks.push(tokio::spawn(serve_variant(
                            variant,
                            listener,
                            stop_rx.clone(),
                        )));
                    }
                    let _ = ready_tx.send(addrs);
                    for task in tasks {
                        task.await.context("a server task failed")??;
                    }
                    Ok(())
                })
            },
        )?;
        let addrs = ready_rx
            .recv()
            .map_err(|_| anyhow!("the servers did not start"))?;
        Ok(Servers {
            addrs,
            tids,
            stop,
            thread,
        })
    }

    fn addr(&self, variant: Variant) -> SocketAddr {
        self.addrs
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, a)| *a)
            .expect("every variant is served")
    }

    fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.thread
            .join()
            .map_err(|_| anyhow!("the server thread panicked"))?
    }
}

/// The servers' runtime: current-thread for one thread, else multi-thread with `threads`
/// workers; either way the threads' ids go to `tids` (for their CPU time).
fn server_runtime(
    threads: usize,
    tids: Arc<Mutex<Vec<u32>>>,
) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .on_thread_start(move || {
                if let Some(tid) = current_tid() {
                    lock(&tids).push(tid);
                }
            })
            .enable_all()
            .build()?
    })
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The trivial handler: `200 ok`.
async fn ok<B>(_request: Request<B>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}

/// The client both chain edges use: hyper-util's pooled HTTP/1 client, `TCP_NODELAY` on.
fn pooled_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// What a chain edge answers once its downstream has: the downstream's status and body.
async fn relay(result: Result<Response<Incoming>, String>) -> Response<Full<Bytes>> {
    let (status, body) = match result {
        Ok(response) => {
            let status = response.status();
            match response.into_body().collect().await {
                Ok(body) => (status, body.to_bytes()),
                Err(err) => (StatusCode::BAD_GATEWAY, Bytes::from(format!("{err}\n"))),
            }
        }
        Err(err) => (StatusCode::BAD_GATEWAY, Bytes::from(err + "\n")),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// Serves `variant` on `listener` (and, for a chain, its second hop on another loopback port)
/// until `stop` turns true.
async fn serve_variant(
    variant: Variant,
    listener: TcpListener,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let until = |mut stop: watch::Receiver<bool>| async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    match variant {
        Variant::Bare => {
            deadline_http::serve(listener, service_fn(ok), until(stop)).await?;
        }
        Variant::Enforce => {
            let service = EnforceDeadlineLayer::new("bench").layer(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::ChainBare | Variant::ChainDeadline => {
            let second = TcpListener::bind("127.0.0.1:0").await?;
            let uri: Uri = format!("http://{}/bench", second.local_addr()?).parse()?;
            let client = pooled_client();
            if variant == Variant::ChainBare {
                let edge = service_fn(move |_request: Request<Incoming>| {
                    let (client, uri) = (client.clone(), uri.clone());
                    async move {
                        let mut call = Request::new(Full::new(Bytes::new()));
                        *call.uri_mut() = uri;
                        let result = client.request(call).await.map_err(|e| e.to_string());
                        Ok::<_, std::convert::Infallible>(relay(result).await)
                    }
                });
                tokio::try_join!(
                    deadline_http::serve(second, service_fn(ok), until(stop.clone())),
                    deadline_http::serve(listener, edge, until(stop)),
                )?;
            } else {
                let policy = CallPolicy::new(Duration::from_secs(1), 3)?;
                let client = DeadlineClient::from_client(client, policy).target("second");
                let edge = service_fn(move |_request: Request<Incoming>| {
                    let (client, uri) = (client.clone(), uri.clone());
                    async move {
                        let mut call = Request::new(Full::new(Bytes::new()));
                        *call.uri_mut() = uri;
                        let result = client.send(call).await.map_err(|e| e.to_string());
                        Ok::<_, std::convert::Infallible>(relay(result).await)
                    }
                });
                let second_service = EnforceDeadlineLayer::new("second").layer(service_fn(ok));
                let edge = EnforceDeadlineLayer::new("edge").layer(edge);
                tokio::try_join!(
                    deadline_http::serve(second, second_service, until(stop.clone())),
                    deadline_http::serve(listener, edge, until(stop)),
                )?;
            }
        }
    }
    Ok(())
}

/// The one request every connection sends, again and again.
fn request_bytes(addr: SocketAddr, budget_ms: u64) -> Arc<[u8]> {
    format!(
        "GET /bench HTTP/1.1\r\nhost: {addr}\r\n{}: {budget_ms}\r\n\r\n",
        deadline::BUDGET_HEADER
    )
    .into_bytes()
    .into()
}

/// Drives `addr` with `connections` closed-loop connections: `warmup`, then `measure`.
async fn drive(
    addr: SocketAddr,
    request: Arc<[u8]>,
    connections: usize,
    warmup: Duration,
    measure: Duration,
    server_tids: &Mutex<Vec<u32>>,
    client_tid: Option<u32>,
) -> anyhow::Result<Window> {
    let start = Instant::now();
    let measure_from = start + warmup;
    let measure_until = measure_from + measure;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..connections {
        tasks.spawn(connection(
            addr,
            request.clone(),
            measure_from,
            measure_until,
        ));
    }
    tokio::time::sleep_until(measure_from).await;
    let server_before = threads_cpu(&lock(server_tids));
    let client_before = client_tid.and_then(thread_cpu);
    tokio::time::sleep_until(measure_until).await;
    let server_after = threads_cpu(&lock(server_tids));
    let client_after = client_tid.and_then(thread_cpu);
    let elapsed = measure_until - measure_from;

    let mut histogram = new_histogram()?;
    let (mut requests, mut errors) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        let conn = joined.context("a connection task failed")?;
        histogram.add(&conn.histogram)?;
        requests += conn.requests;
        errors += conn.errors;
    }
    Ok(Window {
        histogram,
        requests,
        errors,
        elapsed,
        server_cpu: server_after
            .zip(server_before)
            .map(|(a, b)| a.saturating_sub(b)),
        client_cpu: client_after
            .zip(client_before)
            .map(|(a, b)| a.saturating_sub(b)),
    })
}

fn new_histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, HIST_MAX_US, 3).context("histogram bounds")
}

/// One connection's share of a window.
struct ConnectionFigures {
    histogram: Histogram<u64>,
    requests: u64,
    errors: u64,
}

/// One keep-alive connection: sends, reads the whole answer, sends again, until `until`.
/// Requests sent from `from` on are counted (and their latency recorded) when they complete.
async fn connection(
    addr: SocketAddr,
    request: Arc<[u8]>,
    from: Instant,
    until: Instant,
) -> ConnectionFigures {
    let mut figures = ConnectionFigures {
        histogram: new_histogram().expect("valid bounds"),
        requests: 0,
        errors: 0,
    };
    let mut stream = match TcpStream::connect(addr).await {
        Ok(stream) => stream,
        Err(_) => {
            figures.errors += 1;
            return figures;
        }
    };
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::with_capacity(4096);
    loop {
        let sent = Instant::now();
        if sent >= until {
            break;
        }
        let status = match exchange(&mut stream, &request, &mut buf).await {
            Ok(status) => status,
            Err(_) => {
                figures.errors += 1;
                break;
            }
        };
        if sent >= from {
            let us = u64::try_from(Instant::now().saturating_duration_since(sent).as_micros())
                .unwrap_or(u64::MAX);
            let _ = figures.histogram.record(us.clamp(1, HIST_MAX_US));
            figures.requests += 1;
            if status != 200 {
                figures.errors += 1;
            }
        }
    }
    figures
}

/// Writes `request` and reads one whole answer (a `content-length` body), returning its status.
async fn exchange(
    stream: &mut TcpStream,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> anyhow::Result<u16> {
    stream.write_all(request).await?;
    buf.clear();
    let mut chunk = [0u8; 4096];
    let (head_end, status, length) = loop {
        if let Some(head) = parse_head(buf)? {
            break head;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection");
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            bail!("the server closed the connection mid-body");
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(status)
}

/// Parses a response head in `buf`: `None` until it is complete, then where the body starts,
/// the status and the body's length. Answers without `content-length` are not supported (the
/// servers here always send one).
fn parse_head(buf: &[u8]) -> anyhow::Result<Option<(usize, u16, usize)>> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Ok(None);
    };
    let head = std::str::from_utf8(&buf[..end]).context("a response head that is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| anyhow!("bad status line {status_line:?}"))?;
    let mut length = None;
    for line in lines {
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse::<usize>().ok();
            }
        }
    }
    let length = length.ok_or_else(|| anyhow!("an answer without content-length"))?;
    Ok(Some((end + 4, status, length)))
}

fn merge(
    variant: Variant,
    windows: &[Window],
    server_threads: usize,
) -> anyhow::Result<VariantFigures> {
    let mut histogram = new_histogram()?;
    let (mut requests, mut errors, mut elapsed) = (0u64, 0u64, Duration::ZERO);
    let mut server_cpu = Some(Duration::ZERO);
    let mut client_cpu = Some(Duration::ZERO);
    for w in windows {
        histogram.add(&w.histogram)?;
        requests += w.requests;
        errors += w.errors;
        elapsed += w.elapsed;
        server_cpu = server_cpu.zip(w.server_cpu).map(|(a, b)| a + b);
        client_cpu = client_cpu.zip(w.client_cpu).map(|(a, b)| a + b);
    }
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    Ok(VariantFigures {
        variant,
        requests,
        errors,
        requests_per_second: requests as f64 / secs,
        rounds_requests_per_second: windows
            .iter()
            .map(|w| w.requests as f64 / w.elapsed.as_secs_f64().max(f64::MIN_POSITIVE))
            .collect(),
        p50_us: histogram.value_at_quantile(0.50),
        p99_us: histogram.value_at_quantile(0.99),
        p999_us: histogram.value_at_quantile(0.999),
        max_us: histogram.max(),
        mean_us: histogram.mean(),
        server_cpu_us_per_request: server_cpu
            .filter(|_| requests > 0)
            .map(|cpu| cpu.as_secs_f64() * 1e6 / requests as f64),
        server_busy: server_cpu.map(|cpu| cpu.as_secs_f64() / secs / server_threads as f64),
        client_busy: client_cpu.map(|cpu| cpu.as_secs_f64() / secs),
    })
}

fn ratios(figures: &[VariantFigures]) -> Vec<Ratio> {
    let find = |v: Variant| figures.iter().find(|f| f.variant == v);
    figures
        .iter()
        .filter_map(|f| {
            let base = find(f.variant.baseline()?)?;
            let added = |a: u64, b: u64| a as i64 - b as i64;
            Some(Ratio {
                variant: f.variant,
                baseline: base.variant,
                throughput_ratio: f.requests_per_second
                    / base.requests_per_second.max(f64::MIN_POSITIVE),
                throughput_ratio_median_of_rounds: median(
                    f.rounds_requests_per_second
                        .iter()
                        .zip(&base.rounds_requests_per_second)
                        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
                        .collect(),
                ),
                p50_added_us: added(f.p50_us, base.p50_us),
                p99_added_us: added(f.p99_us, base.p99_us),
                p999_added_us: added(f.p999_us, base.p999_us),
                server_cpu_added_us_per_request: f
                    .server_cpu_us_per_request
                    .zip(base.server_cpu_us_per_request)
                    .map(|(a, b)| a - b),
            })
        })
        .collect()
}

/// The median of `values` (0 for none).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len() % 2 == 0 {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

fn table(report: &Report) -> String {
    let mut out = String::new();
    let load = |l: &[f64]| {
        if l.is_empty() {
            "unknown".to_owned()
        } else {
            l.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let _ = writeln!(
        out,
        "deadline bench: {} keep-alive connections per variant, {} round(s) of {} s each \
         (after {} ms warm-up), budget {} ms, {} server thread(s), {} CPUs",
        report.connections,
        report.rounds,
        report.seconds_per_round,
        report.warmup_ms,
        report.budget_ms,
        report.server_threads,
        report.cpus
    );
    let _ = writeln!(
        out,
        "load average before: {}; after: {}",
        load(&report.load_average_before),
        load(&report.load_average_after)
    );
    let _ = writeln!(
        out,
        "{:<15} {:>10} {:>8} {:>8} {:>8} {:>13} {:>7} {:>7} {:>7}  per round req/s",
        "variant",
        "req/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "srv CPU µs/req",
        "srv %",
        "gen %",
        "errors"
    );
    let opt = |x: Option<f64>, scale: f64, digits: usize| {
        x.map_or("-".to_owned(), |x| format!("{:.*}", digits, x * scale))
    };
    for v in &report.variants {
        let rounds: Vec<String> = v
            .rounds_requests_per_second
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<15} {:>10.0} {:>8} {:>8} {:>8} {:>13} {:>7} {:>7} {:>7}  {}",
            v.variant.name(),
            v.requests_per_second,
            v.p50_us,
            v.p99_us,
            v.p999_us,
            opt(v.server_cpu_us_per_request, 1.0, 2),
            opt(v.server_busy, 100.0, 0),
            opt(v.client_busy, 100.0, 0),
            v.errors,
            rounds.join(" ")
        );
    }
    for r in &report.ratios {
        let _ = writeln!(
            out,
            "{} / {}: throughput ratio {:.3} (median of rounds {:.3}); added latency p50 {:+} µs, \
             p99 {:+} µs, p99.9 {:+} µs; added server CPU {} µs/request",
            r.variant.name(),
            r.baseline.name(),
            r.throughput_ratio,
            r.throughput_ratio_median_of_rounds,
            r.p50_added_us,
            r.p99_added_us,
            r.p999_added_us,
            r.server_cpu_added_us_per_request
                .map_or("-".to_owned(), |x| format!("{x:+.2}"))
        );
    }
    out
}

/// `/proc/loadavg`'s three load averages (empty where there is no such file).
fn load_average() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| {
            s.split_whitespace()
                .take(3)
                .filter_map(|x| x.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The calling thread's kernel thread id (Linux), from `/proc/thread-self/stat`.
fn current_tid() -> Option<u32> {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// CPU time thread `tid` of this process has used (Linux): the first field of its
/// `schedstat`, in ns.
fn thread_cpu(tid: u32) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    let ns: u64 = text.split_whitespace().next()?.parse().ok()?;
    Some(Duration::from_nanos(ns))
}

/// The total CPU time of `tids`, or `None` if any cannot be read (or there are none).
fn threads_cpu(tids: &[u32]) -> Option<Duration> {
    if tids.is_empty() {
        return None;
    }
    tids.iter()
        .map(|tid| thread_cpu(*tid))
        .sum::<Option<Duration>>()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn response_heads_parse_only_when_complete() {
        let full = b"HTTP/1.1 504 Gateway Timeout\r\nContent-Length: 12\r\nx: y\r\n\r\nbody";
        assert_eq!(parse_head(&full[..20]).unwrap(), None);
        assert_eq!(parse_head(full).unwrap(), Some((58, 504, 12)));
        assert!(parse_head(b"HTTP/1.1 200 OK\r\n\r\n").is_err(), "no length");
        assert!(parse_head(b"garbage\r\n\r\n").is_err());
    }

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}

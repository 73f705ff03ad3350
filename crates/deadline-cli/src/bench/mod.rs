//! `deadline bench`: what the layers cost over real loopback HTTP, side by side in one run.
//!
//! Ten servers answer the same trivial handler (`200 ok`, three bytes):
//!
//! | variant | what |
//! |---|---|
//! | `bare` | the handler on plain hyper (this crate's `serve`: hyper's HTTP/1, `TCP_NODELAY`) |
//! | `enforce` | the same behind `EnforceDeadlineLayer` with the library's defaults (no slots; `Deadline-Trace` on answers to requests that carried a budget, no `Server-Timing`, no context for a request without a budget) |
//! | `enforce-all` | `enforce` writing both answer headers on every answer and making a context for every request (`TraceExposure::Always`, `server_timing(true)`, `context_without_budget(true)`): the defaults before they changed, and what `deadline service` writes |
//! | `enforce-metrics` | the same, recording into a Prometheus registry (`record_metrics`) |
//! | `enforce-quiet` | `enforce` with its trace shown to nobody (`TraceExposure::Off`; no `Server-Timing` and no context for a request without a budget, as by default), what a service that uses neither pays |
//! | `peer` | the same behind what a Rust service uses today instead: tower-http's `TimeoutLayer` (2 s, 504) over tower's `ConcurrencyLimitLayer` (1024, never full here) |
//! | `peer-headers` | `peer` answering with two fixed header lines named and sized like `enforce`'s `Deadline-Trace` and `Server-Timing` (tower-http's `SetResponseHeaderLayer`, static values): what two answer headers cost on that stack with no value made per request (the values carry the default budget of 1950 ms, so compare it with `enforce-all` under the default `--budget`) |
//! | `chain-bare` | an edge whose handler calls a second `bare` server with hyper-util's pooled client, two hops |
//! | `chain-deadline` | the edge behind the enforce layer calls through `DeadlineClient` (the propagate layer over the same pooled client) a second server behind the enforce layer |
//! | `chain-peer` | two `peer` hops, the edge calling the second with reqwest (pooled, HTTP/1) and a 1 s per-request timeout |
//!
//! Ratios compare each layered variant with what it adds to (its bare twin, `enforce` for
//! `enforce-all`, `enforce-metrics` and `enforce-quiet`, `peer` for `peer-headers`), and the
//! deadline layers with the peers (`enforce / peer`, `enforce-all / peer-headers`,
//! `enforce-quiet / peer`, `chain-deadline / chain-peer`).
//!
//! Every request carries `Deadline-Budget-Ms` (the bare servers ignore it), so the bytes on the
//! wire are the same for every variant; `--no-budget` leaves it out, for what a caller that
//! knows nothing of deadlines costs. The generator holds `--connections` keep-alive HTTP/1.1
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
//!
//! # Counting instructions
//!
//! Requests per second move with whatever else the machine runs; instructions do not.
//! `--serve VARIANT` serves one variant until standard input closes, and `--target ADDR
//! --requests N` is a fixed client for it: N requests, one at a time over one connection, the
//! same bytes every time. `scripts/callgrind.sh` runs the server under callgrind with two
//! request counts and divides the difference.

mod args;
mod generator;
mod machine;
mod report;
mod servers;

use std::process::ExitCode;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub(crate) use args::BenchArgs;
use args::Variant;
use generator::{Window, drive, request_bytes, send_sequentially};
use machine::{current_tid, load_average};
use report::{Report, VariantSummary, merge, ratios, table};
use servers::{Servers, serve_variant, server_runtime};

/// Runs `deadline bench`: every variant, every round, then the report.
pub(crate) fn run(args: &BenchArgs) -> anyhow::Result<ExitCode> {
    if let Some(variant) = args.serve {
        return serve_only(args, variant);
    }
    args.validate()?;
    if let (Some(target), Some(count)) = (args.target, args.requests) {
        let client = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        client.block_on(send_sequentially(
            target,
            &request_bytes(target, args.budget_ms()),
            count,
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    let variants = args
        .variants
        .clone()
        .unwrap_or_else(|| Variant::ALL.to_vec());
    let load_before = load_average();

    let servers = Servers::start(args.server_threads)?;
    let windows = rounds(args, &variants, &servers)?;
    servers.stop()?;

    let summaries: Vec<VariantSummary> = windows
        .iter()
        .map(|(variant, windows)| merge(*variant, windows, args.server_threads))
        .collect::<anyhow::Result<_>>()?;
    let ratios = ratios(&summaries);
    let report = Report {
        connections: args.connections,
        seconds_per_round: args.seconds,
        rounds: args.rounds,
        warmup_ms: args.warmup_ms,
        budget_ms: args.budget_ms(),
        server_threads: args.server_threads,
        load_average_before: load_before,
        load_average_after: load_average(),
        cpus: thread::available_parallelism().map_or(1, |n| n.get()),
        variants: summaries,
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

/// Every round of every variant on `servers` (every other round in reverse order), from a
/// client on this thread: each variant's measured windows.
fn rounds(
    args: &BenchArgs,
    variants: &[Variant],
    servers: &Servers,
) -> anyhow::Result<Vec<(Variant, Vec<Window>)>> {
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
                request_bytes(addr, args.budget_ms()),
                args.connections,
                Duration::from_millis(args.warmup_ms),
                Duration::from_secs_f64(args.seconds),
                &servers.tids,
                client_tid,
            ))?;
            windows[i].1.push(window);
        }
    }
    Ok(windows)
}

/// `--serve VARIANT`: serve one variant until stdin closes or Ctrl-C.
fn serve_only(args: &BenchArgs, variant: Variant) -> anyhow::Result<ExitCode> {
    let endpoint = args
        .otlp
        .as_deref()
        .map(crate::otlp::endpoint)
        .transpose()?;
    let runtime = server_runtime(args.server_threads, Arc::default())?;
    runtime.block_on(async {
        let mut registry = deadline_http::metrics::Registry::default();
        let otlp = endpoint
            .map(|endpoint| crate::otlp::install(endpoint, "bench", &mut registry))
            .transpose()?;
        let (stop_tx, stop_rx) = watch::channel(false);
        let listener = TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("binding {}", args.listen))?;
        let addr = listener.local_addr()?;
        // Spans only when they are exported: without --otlp the variants measure the layers as
        // a process that does not trace runs them.
        let tracing = match otlp {
            Some(_) => deadline_http::otel::Tracing::global(),
            None => deadline_http::otel::Tracing::off(),
        };
        let task = tokio::spawn(serve_variant(variant, listener, stop_rx, tracing));
        println!("listening on http://{addr}");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            () = crate::shutdown::stdin_closed() => {}
        }

        let _ = stop_tx.send(true);
        task.await.context("the server task failed")??;
        if let Some(otlp) = otlp {
            otlp.shutdown("bench").await;
        }
        Ok(ExitCode::SUCCESS)
    })
}

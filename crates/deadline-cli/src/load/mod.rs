//! `deadline load`: open-loop users through gateway, orders and inventory (separate processes),
//! run without deadlines and with them, and the dead work measured from the services' own logs.
//!
//! Arrivals are open-loop: user *i* is sent at `start + i / rate` whether or not earlier users
//! were answered, as real users arrive. A closed loop would slow down exactly when the system
//! struggles and hide the effect being measured. The generator reports its achieved rate and
//! worst send lateness so a run can show it kept up.

mod args;
mod fds;
mod figures;
mod metrics;
mod mix;
mod outage;
mod overload;
mod table;
mod users;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::Args;
use deadline_http::enforce::QueueOrder;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::time::Instant;

use args::{scenario, validate};
use figures::{check, schedule_warning, summarize};
use users::send_users;

use crate::grpc::users::{Protocol, Users};
use crate::harness::{Chain, ProcessUsage, reference, with_margin};
use crate::holds::epoch_ms_now;
use crate::hygiene::{self, ServiceHygiene};
use crate::outage::{BudgetArg, HedgeArg, Window};
use crate::placement::{Placement, PlacementArgs};
use crate::svg::chart::{ChartLine, load_chart};

/// Arguments of `deadline load`; the defaults are the reference scenario.
#[derive(Debug, Clone, Args)]
pub(crate) struct LoadArgs {
    /// New users per second.
    #[arg(long, default_value_t = 30.0)]
    rate: f64,
    /// Seconds of arrivals.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Exit non-zero unless deadlines answer >= 85 % in time, >= 30 points more than without,
    /// with < 1 % of worker time after users left, and the run without wasted most of its time.
    #[arg(long)]
    check: bool,
    /// Print one JSON document (`{"runs": [...], "check": {...}}`) on stdout instead of the table.
    #[arg(long)]
    json: bool,
    /// Draw the share answered in time, second by second, for both runs.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Run only one way: `with` or `without` deadlines (default both).
    #[arg(long, value_parser = ["with", "without"])]
    only: Option<String>,
    /// How long each user waits, in ms; they send this less `--margin` as their budget.
    #[arg(long, default_value_t = 2_000)]
    user_wait: u64,
    /// Users with different waits instead of one `--user-wait`: MS:SHARE,... (like
    /// 500:0.3,2000:0.7: 30 % wait 500 ms, 70 % 2 s; the shares add up to 1). Each sends its
    /// wait less `--margin` as its budget; the report adds the in-time share of each class.
    #[arg(long, value_name = "MS:SHARE,...")]
    budget_mix: Option<mix::BudgetMix>,
    /// The transit margin every caller keeps back, in ms: the user sends `--user-wait` less
    /// this as their budget, and each service forwards its remaining budget less this. Raise it
    /// when hops are far apart: it must cover a request's way in (on a new connection, the TCP
    /// handshake too: one and a half round trips) and its answer's way back.
    #[arg(long, default_value_t = 50)]
    margin: u64,
    /// Inventory's worker slots.
    #[arg(long, default_value_t = 8)]
    slots: usize,
    /// Inventory's work per call, in ms.
    #[arg(long, default_value_t = 100)]
    fast_work: u64,
    /// Inventory's work for a slow request, in ms.
    #[arg(long, default_value_t = 1_500)]
    slow_work: u64,
    /// Share of requests that are slow (the same request ids in both runs).
    #[arg(long, default_value_t = 0.05)]
    slow_share: f64,
    /// Orders' own work per request, in ms.
    #[arg(long, default_value_t = reference::ORDERS_WORK)]
    orders_work: u64,
    /// Gateway -> orders timeout per attempt, in ms.
    #[arg(long, default_value_t = reference::GATEWAY_TIMEOUT)]
    gateway_timeout: u64,
    /// Gateway -> orders attempts.
    #[arg(long, default_value_t = reference::GATEWAY_ATTEMPTS)]
    gateway_attempts: u32,
    /// Orders -> inventory timeout per attempt, in ms.
    #[arg(long, default_value_t = reference::ORDERS_TIMEOUT)]
    orders_timeout: u64,
    /// Orders -> inventory attempts.
    #[arg(long, default_value_t = reference::ORDERS_ATTEMPTS)]
    orders_attempts: u32,
    /// Seed of the slow-request choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Inventory's worker-slot queue in the run with deadlines: `fifo` or `edf` (earliest
    /// deadline first).
    #[arg(long, default_value_t = QueueOrder::Fifo)]
    queue: QueueOrder,
    /// In the run with deadlines, inventory refuses at once (503) a request its queue could not
    /// finish in time (predictive admission, for `--fast-work` of work).
    #[arg(long)]
    admission: bool,
    /// In the run with deadlines, inventory also refuses at once a request whose expected
    /// wait for a slot exceeds this many ms (`deadline service --max-queue-wait`).
    #[arg(long, value_name = "MS")]
    max_queue_wait: Option<u64>,
    /// Inventory answers 503 to every call from START for SECONDS (START:SECONDS, counted
    /// from the first user); the report adds the calls per user request on the inventory link.
    #[arg(long)]
    outage: Option<Window>,
    /// Gateway and orders do not budget their retries (each call still stops at its attempts).
    #[arg(long, conflicts_with = "retry_budget")]
    no_retry_budget: bool,
    /// Retry budget of gateway and orders over a 10 s window: RATIO,PER_WINDOW[,TOKENS]
    /// (default 0.2,10,5), or `finagle` (0.2,100, no bucket); see `deadline service
    /// --retry-budget`.
    #[arg(long)]
    retry_budget: Option<BudgetArg>,
    /// Inventory chooses slow requests afresh for every attempt rather than once per request.
    #[arg(long)]
    slow_per_attempt: bool,
    /// Orders hedges its inventory calls: a delay in ms, or pNN for a latency percentile it
    /// observes (see `deadline service --hedge`).
    #[arg(long)]
    hedge: Option<HedgeArg>,
    /// With deadlines, users also send the instant they give up as `X-Request-Deadline` (an
    /// absolute deadline, RFC 3339) beside their relative budget, and every service accepts it
    /// and passes it on: time a request spends in the kernel's queues before a hop reads its
    /// head (a saturated hop) then counts against it, which a relative budget, started when
    /// the head is read, cannot see.
    #[arg(long)]
    absolute_deadline: bool,
    /// Gateway and orders retry a callee's 504 only with at least this share of the budget that
    /// ran out (0: whenever there is time).
    #[arg(long)]
    retry_504_share: Option<f64>,
    /// How the users call the gateway, and so how each hop calls the next: HTTP/1.1 with
    /// `Deadline-Budget-Ms`, or gRPC over h2c with `grpc-timeout`.
    #[arg(long, value_enum, default_value_t = Protocol::Http1)]
    protocol: Protocol,
    /// Where the three services run.
    #[command(flatten)]
    placement: PlacementArgs,
    /// Inventory's work becomes `SELECT pg_sleep(S)` on this PostgreSQL database
    /// (postgres://USER@HOST:PORT/DATABASE), with the same slowness rules, and each run reports
    /// the database's own time after users left, sampled from `pg_stat_activity`.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Find the capacity first, then offer these multiples of it, both ways: M,M,... (like
    /// 1,1.5,2,3). The capacity is the highest rate at which a short run with deadlines passes
    /// `--check`'s conditions on that run (with inventory's slots at `--slots-per-rate` of the
    /// rate) and the generator kept its schedule; the search starts at `--rate` and doubles
    /// or halves, then bisects `--search-steps` times. Each multiple then runs `--seconds`
    /// with inventory's slots as at the capacity. `--check` then checks the multiples.
    #[arg(long, value_name = "M,...")]
    overload: Option<overload::Multiples>,
    /// With `--overload`: seconds of arrivals in each run of the capacity search.
    #[arg(long, default_value_t = 3.0, requires = "overload")]
    search_seconds: f64,
    /// With `--overload`: how many times the search halves the interval between the highest
    /// rate that passed and the lowest that failed.
    #[arg(long, default_value_t = 3, requires = "overload")]
    search_steps: u32,
    /// With `--overload`: inventory's slots per user a second of the capacity search's rate
    /// (at least 1), so the processors, not inventory's slots, set the capacity.
    #[arg(long, default_value_t = 0.26, requires = "overload")]
    slots_per_rate: f64,
    /// With `--overload`: gateway's and orders' slots (`--hop-slots`) per user a second of the
    /// search's rate, as inventory's: a limit on the requests each hop works on at once that
    /// follows the probed rate, and stays at the capacity's for the multiples.
    #[arg(
        long,
        value_name = "F",
        requires = "overload",
        conflicts_with = "hop_slots"
    )]
    hop_slots_per_rate: Option<f64>,
    /// In the run with deadlines, every hop refuses at once (503, `Retry-After: 0`) what arrives
    /// while its runtime runs this many ms late (`deadline service --max-lag`); gateway and
    /// orders get `--hop-slots` (or a count too large to limit anything).
    #[arg(long, value_name = "MS")]
    max_lag: Option<u64>,
    /// In the run with deadlines, gateway's and orders' worker slots (`deadline service
    /// --slots`): a fixed limit on the requests each works on at once.
    #[arg(long, value_name = "N")]
    hop_slots: Option<usize>,
    /// In the run with deadlines, gateway and orders refuse at once a request whose expected
    /// wait for one of their `--hop-slots` exceeds this many ms.
    #[arg(long, value_name = "MS")]
    hop_max_queue_wait: Option<u64>,
    /// Start every service under `nice -n N`, below the generator's priority: the generator
    /// stands for users on other machines, and on shared cores it must not fall behind its
    /// schedule because the services it measures took them. Default 10 with `--overload`, else 0.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u8).range(0..=19))]
    services_nice: Option<u8>,
}

/// The slots a hop without a limit of its own is given so that a rule weighed at its slots
/// (`--max-lag`) applies: more than any load here keeps in flight.
const UNLIMITED_SLOTS: usize = 1_000_000;

/// One run's figures. Field names are part of the `--json` interface: add fields, rename none.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LoadRun {
    pub(crate) deadlines: bool,
    requests: usize,
    slow_requests: usize,
    in_time: usize,
    pub(crate) in_time_share: f64,
    slow_missed: usize,
    fast_missed: usize,
    latency_p50_ms: u64,
    latency_p99_ms: u64,
    worker_ms: f64,
    worker_ms_after_users_left: f64,
    /// `worker_ms_after_users_left` by how each user's wait ended and by service.
    after_users_left: figures::AfterUsersLeft,
    /// Users whose call failed before their wait ran out, by kind (empty when none did).
    user_errors: std::collections::BTreeMap<&'static str, usize>,
    wasted_share: f64,
    drain_ms: f64,
    calls: usize,
    achieved_rate: f64,
    worst_send_lateness_ms: f64,
    /// The 99th percentile of how late the generator sent users, in ms.
    send_lateness_p99_ms: f64,
    /// What each service process used (CPU time, peak memory), edge first, read just before it
    /// was told to stop. Linux only: elsewhere the figures are null.
    services: Vec<ProcessUsage>,
    /// CPU time the generator (this process) used during the run, in ms (Linux only).
    generator_cpu_ms: Option<f64>,
    /// This process's peak resident memory so far, in KiB (Linux only).
    generator_peak_rss_kib: Option<u64>,
    /// Share answered in time among users sent in each second of the run.
    pub(crate) in_time_share_by_second: Vec<f64>,
    /// Each service's tasks, open descriptors and requests in flight, idle before the run and
    /// after it drained, edge first (see `deadline service`'s `GET /debug/runtime`).
    hygiene: Vec<ServiceHygiene>,
    /// What each service's own metrics (`GET /metrics`) said once the run drained, edge first:
    /// requests by outcome, 504s by phase, work after the caller left, headroom at reply.
    metrics: Vec<metrics::ServiceMetrics>,
    /// Inventory's queue order (`fifo` or `edf`); the run without deadlines always waits in
    /// arrival order.
    pub(crate) queue: String,
    /// Whether inventory ran with predictive admission (never in the run without deadlines).
    pub(crate) admission: bool,
    /// Inventory's cap on the expected queue wait, in ms (never in the run without deadlines).
    pub(crate) max_queue_wait_ms: Option<u64>,
    /// Users answered in time per second, over the arrivals' `--seconds` or, if longer, from the
    /// first user sent to the last answered in time (so a queue still draining after the last
    /// arrival does not count as extra capacity).
    goodput_per_s: f64,
    /// Inventory's nominal capacity: slots / fast work, per second.
    capacity_per_s: f64,
    /// The 50th and 99th percentile latency of the users answered in time, in ms.
    in_time_p50_ms: u64,
    in_time_p99_ms: u64,
    /// Users who heard a refusal (any answer but 200) before their wait ran out.
    refused: usize,
    /// How fast refused users heard back: 50th and 99th percentile, in ms.
    refused_p50_ms: u64,
    refused_p99_ms: u64,
    /// Requests inventory shed at admission (outcome `shed`).
    shed: usize,
    /// How long inventory took to refuse what it shed, from arrival to refusal: the 99th
    /// percentile, in ms (on arrival it is about 0; refused at the grant, the time queued).
    shed_p99_ms: f64,
    /// Inventory worker time spent on users who were not answered in time, in ms.
    inventory_worker_ms_on_missed: f64,
    /// Calls inventory received per user request sent during the outage (with `--outage`).
    pub(crate) calls_per_request_in_outage: Option<f64>,
    /// The outage in detail (with `--outage`).
    outage: Option<outage::OutageFigures>,
    /// How each class of `--budget-mix` fared (empty without it).
    budget_classes: Vec<mix::ClassFigures>,
    /// With `--postgres`: the database's own figures, from `pg_stat_activity`.
    #[serde(flatten)]
    database: Option<crate::pg::DbFigures>,
    /// The most file descriptors each service held at once during the run (sampled every
    /// 500 ms), edge first (Linux only).
    peak_fds: Vec<Option<usize>>,
    /// Lines each service logged about running out of file descriptors, edge first.
    out_of_fds_lines: Vec<usize>,
    /// Connections the users opened (HTTP/1.1 users; `None` for gRPC's one connection).
    user_connections: Option<u64>,
}

#[derive(Debug, Serialize)]
struct Check {
    passed: bool,
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct LoadReport<'a> {
    runs: &'a [LoadRun],
    check: Check,
}

/// The hops' `--max-connections` in a load run: more than any open-file limit here, so the
/// file table, not a connection count, bounds them (running out of descriptors drops the
/// connection idle the longest).
const LOAD_MAX_CONNECTIONS: usize = 1 << 20;

/// The chain's hops for one run: the scenario's, with the margin, inventory's database and queue
/// rules, and the absolute-deadline dialect when asked.
fn hops_for(args: &LoadArgs, deadlines: bool, tag: &str) -> Vec<crate::harness::Hop> {
    let mut hops = with_margin(scenario(args).hops(deadlines), args.margin);
    for hop in hops.iter_mut() {
        // Each user is a client of its own, on a connection of its own: the hops take as many
        // connections as their open-file limit allows, as before the service's default cap
        // (1,024, for a service facing clients it does not know) existed. Past capacity that
        // cap refused users' connections before any rule could refuse their requests cheaply.
        hop.args.extend([
            "--max-connections".to_owned(),
            LOAD_MAX_CONNECTIONS.to_string(),
        ]);
    }
    if let Some(url) = &args.postgres
        && let Some(inventory) = hops.iter_mut().find(|hop| hop.name == "inventory")
    {
        inventory.args.extend([
            "--postgres".to_owned(),
            url.clone(),
            "--postgres-tag".to_owned(),
            tag.to_owned(),
        ]);
    }
    if deadlines && let Some(inventory) = hops.iter_mut().find(|hop| hop.name == "inventory") {
        inventory
            .args
            .extend(["--queue".to_owned(), args.queue.to_string()]);
        if args.admission {
            inventory.args.push("--admission".to_owned());
        }
        if let Some(max_wait) = args.max_queue_wait {
            inventory
                .args
                .extend(["--max-queue-wait".to_owned(), max_wait.to_string()]);
        }
    }
    if deadlines && (args.max_lag.is_some() || args.hop_slots.is_some()) {
        for hop in hops.iter_mut() {
            if hop.name != "inventory" {
                let slots = args.hop_slots.unwrap_or(UNLIMITED_SLOTS);
                hop.args.extend(["--slots".to_owned(), slots.to_string()]);
                if let Some(wait) = args.hop_max_queue_wait {
                    hop.args
                        .extend(["--max-queue-wait".to_owned(), wait.to_string()]);
                }
            }
            if let Some(max_lag) = args.max_lag {
                hop.args
                    .extend(["--max-lag".to_owned(), max_lag.to_string()]);
            }
        }
    }
    if deadlines && args.absolute_deadline {
        let last = hops.len().saturating_sub(1);
        for (i, hop) in hops.iter_mut().enumerate() {
            hop.args.extend([
                "--accept".to_owned(),
                "deadline-budget-ms,x-request-deadline".to_owned(),
            ]);
            if i < last {
                hop.args
                    .extend(["--send".to_owned(), "x-request-deadline".to_owned()]);
            }
        }
    }
    hops
}

/// One run of the load through a fresh chain, with or without deadlines.
async fn run_once(
    args: &LoadArgs,
    placement: &Placement,
    deadlines: bool,
    progress: &ProgressBar,
) -> anyhow::Result<LoadRun> {
    let label = if deadlines {
        "load-with"
    } else {
        "load-without"
    };
    let tag = crate::pg::run_tag(label);
    let hops = hops_for(args, deadlines, &tag);
    let hops = outage::with_retry_flags(args.protocol.on(hops), args);
    let chain = Chain::start(label, &hops, placement).await?;
    let sampler = match &args.postgres {
        Some(url) => Some(crate::pg::Sampler::start(url, &tag).await?),
        None => None,
    };
    let (clients, opened) = match args.protocol {
        Protocol::Http1 => {
            let opened = Arc::new(std::sync::atomic::AtomicU64::new(0));
            let clients = users::source_addresses(chain.edge_url())
                .into_iter()
                .map(|local| Users::Http(crate::users::counted_user_client(local, opened.clone())))
                .collect();
            (clients, Some(opened))
        }
        Protocol::Grpc => (vec![Users::new(args.protocol)], None),
    };
    let url: Arc<str> = Arc::from(format!("{}/order", chain.edge_url()));
    let idle = hygiene::sample_all(&chain).await?;
    let out_of_fds = chain.out_of_fds_lines();
    let fd_peaks = fds::FdPeaks::start(chain.pids().into_iter().map(|(_, pid)| pid).collect());
    let generator_before = ProcessUsage::of("generator", None);
    let start_wall = epoch_ms_now();
    let outcomes = send_users(args, deadlines, &clients, url, progress).await?;
    // The users are gone: close their pooled connections, then wait for the services to give
    // back what the run used.
    drop(clients);
    let peak_fds = fd_peaks.stop().await;
    let hygiene = hygiene::settle(&chain, &idle, Instant::now()).await?;
    let service_metrics = metrics::read_all(&chain).await?;
    let (holds, services) = chain.stop_with_usage().await?;
    let generator = ProcessUsage::of("generator", None);
    // Each service has exited: give its last lines of standard error a moment to be read.
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let left: HashMap<String, f64> = outcomes
        .iter()
        .map(|o| (o.id.clone(), o.left_at_ms))
        .collect();
    let mut run = summarize(args, deadlines, outcomes, &holds, start_wall);
    if let Some(sampler) = sampler {
        let activity = sampler.stop().await?;
        run.database = Some(activity.figures(|id| left.get(id).copied()));
    }
    run.services = services;
    run.generator_cpu_ms = generator
        .cpu_ms
        .zip(generator_before.cpu_ms)
        .map(|(after, before)| after - before);
    run.generator_peak_rss_kib = generator.peak_rss_kib;
    run.hygiene = hygiene;
    run.metrics = service_metrics;
    run.peak_fds = peak_fds;
    run.out_of_fds_lines = out_of_fds
        .iter()
        .map(|(_, n)| n.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    run.user_connections = opened.map(|n| n.load(std::sync::atomic::Ordering::Relaxed));
    Ok(run)
}

pub(crate) async fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    validate(&args)?;
    let mut placement = args.placement.resolve()?;
    let nice = args
        .services_nice
        .unwrap_or(if args.overload.is_some() { 10 } else { 0 });
    if nice > 0 {
        placement = placement.niced(nice);
    }
    let progress = ProgressBar::new(0);
    progress.set_style(
        ProgressStyle::with_template("{msg:>18} [{bar:40}] {pos}/{len} users, {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    if let Some(multiples) = args.overload.clone() {
        return tokio::select! {
            code = overload::run(&args, &multiples, &placement, &progress) => code,
            _ = tokio::signal::ctrl_c() => bail!("interrupted; the services were stopped"),
        };
    }
    let modes: Vec<bool> = match args.only.as_deref() {
        Some("with") => vec![true],
        Some("without") => vec![false],
        _ => vec![false, true],
    };
    let mut runs = Vec::new();
    for deadlines in modes {
        let run = tokio::select! {
            run = run_once(&args, &placement, deadlines, &progress) => run?,
            _ = tokio::signal::ctrl_c() => bail!("interrupted; the services were stopped"),
        };
        runs.push(run);
    }
    progress.finish_and_clear();
    let check = check(&runs);
    if let Some(path) = &args.svg {
        let lines: Vec<ChartLine<'_>> = runs
            .iter()
            .map(|run| ChartLine {
                deadlines: run.deadlines,
                in_time_share: run.in_time_share,
                in_time_share_by_second: &run.in_time_share_by_second,
                db_seconds_after_users_left: run.database.map(|d| d.db_seconds_after_users_left),
            })
            .collect();
        let picture = load_chart(&lines, &args.describe());
        std::fs::write(path, picture).with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let passed = check.passed;
        println!(
            "{}",
            serde_json::to_string_pretty(&LoadReport { runs: &runs, check })?
        );
        return Ok(exit(args.check, passed));
    }
    table::print_table(&args, &placement, &runs);
    for run in &runs {
        if let Some(warning) = schedule_warning(args.rate, run) {
            println!("{warning}");
        }
    }
    Ok(conclude(&args, &check))
}

/// The lines after a table: where the chart went and the check's verdict; and the exit code.
fn conclude(args: &LoadArgs, check: &Check) -> ExitCode {
    if let Some(path) = &args.svg {
        println!("Chart written to {}.", path.display());
    }
    if args.check {
        if check.passed {
            println!("check: passed");
        } else {
            println!("check: FAILED");
            for failure in &check.failures {
                println!("  - {failure}");
            }
        }
    }
    exit(args.check, check.passed)
}

fn exit(checking: bool, passed: bool) -> ExitCode {
    if checking && !passed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

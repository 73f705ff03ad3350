//! `deadline load`: open-loop users through gateway, orders and inventory (separate processes),
//! run without deadlines and with them, and the dead work measured from the services' own logs.
//!
//! Arrivals are open-loop: user *i* is sent at `start + i / rate` whether or not earlier users
//! were answered, as real users arrive. A closed loop would slow down exactly when the system
//! struggles and hide the effect being measured. The generator reports its achieved rate and
//! worst send lateness so a run can show it kept up.

mod args;
mod figures;
mod metrics;
mod mix;
mod outage;
mod table;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;
use deadline::Budget;
use deadline::absolute::WallInstant;
use deadline::dialect::{AbsoluteFormat, Dialect};
use deadline_http::enforce::QueueOrder;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use tokio::time::Instant;

use args::{scenario, validate};
use figures::{check, schedule_warning, summarize};

use crate::grpc::users::{Protocol, Users};
use crate::harness::{Chain, ProcessUsage, reference, user_budget, with_margin};
use crate::holds::{epoch_ms_now, wall_now};
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
}

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

/// One user's fate.
#[derive(Debug, Clone)]
struct Outcome {
    id: String,
    sent_at: f64,
    lateness_ms: f64,
    in_time: bool,
    /// The status heard before the wait ran out, if any.
    status: Option<u16>,
    elapsed_ms: f64,
    /// When the user stopped waiting (epoch ms): answered or gave up.
    left_at_ms: f64,
    /// The user's class in `--budget-mix` (0 without one).
    class: usize,
    /// Why the call failed before the wait ran out, if it did.
    error: Option<&'static str>,
}

/// The `user_errors` kind of a user the generator reached only after its wait was over.
const NOT_SENT: &str = "not sent, too late";

/// One user of the load: arrives at `due` and waits `wait` from then.
struct LoadUser {
    id: String,
    due: Instant,
    wait: Duration,
    margin: u64,
    /// Whether it also sends the instant it gives up (`--absolute-deadline`).
    absolute: bool,
    class: usize,
}

impl LoadUser {
    /// Sends the user's request and waits for the answer at most until `due + wait`.
    async fn send(self, client: &Users, url: &str) -> anyhow::Result<Outcome> {
        // A generator running late (or a spawned task that starts late) has already spent part
        // of the user's wait, so the user sends what is left of it and gives up at `due +
        // wait`: a late generator must not hand out time the user no longer has. Lateness and
        // budget come from the same instant: the user is sent now, however late the loop or
        // this task started.
        let now = Instant::now();
        let lateness_ms = now.saturating_duration_since(self.due).as_secs_f64() * 1_000.0;
        let (budget, left) = budget_left(self.due, self.wait, self.margin, now);
        if left.is_zero() {
            // The generator reached this user after its wait was over: a real user would have
            // sent nothing, so nothing is sent (and no hop is handed a budget nobody has).
            let at = epoch_ms_now();
            return Ok(Outcome {
                in_time: false,
                status: None,
                id: self.id,
                sent_at: at,
                lateness_ms,
                elapsed_ms: lateness_ms,
                left_at_ms: at,
                class: self.class,
                error: Some(NOT_SENT),
            });
        }
        // The instant the user gives up, on the wall clock every hop on this machine reads.
        let gives_up = self
            .absolute
            .then(|| gives_up_header(left, wall_now()))
            .flatten();
        let user = client
            .one(url, &self.id, Some(budget), gives_up, left)
            .await?;
        Ok(Outcome {
            in_time: user.status == Some(200),
            status: user.status,
            id: self.id,
            sent_at: user.sent_ms,
            lateness_ms,
            elapsed_ms: user.elapsed.as_secs_f64() * 1_000.0,
            left_at_ms: user.left_ms,
            class: self.class,
            error: user.error,
        })
    }
}

/// The chain's hops for one run: the scenario's, with the margin, inventory's database and queue
/// rules, and the absolute-deadline dialect when asked.
fn hops_for(args: &LoadArgs, deadlines: bool, tag: &str) -> Vec<crate::harness::Hop> {
    let mut hops = with_margin(scenario(args).hops(deadlines), args.margin);
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
    let client = Users::new(args.protocol);
    let url: Arc<str> = Arc::from(format!("{}/order", chain.edge_url()));
    let idle = hygiene::sample_all(&chain).await?;
    let generator_before = ProcessUsage::of("generator", None);
    let start_wall = epoch_ms_now();
    let outcomes = send_users(args, deadlines, &client, url, progress).await?;
    // The users are gone: close their pooled connections, then wait for the services to give
    // back what the run used.
    drop(client);
    let hygiene = hygiene::settle(&chain, &idle, Instant::now()).await?;
    let service_metrics = metrics::read_all(&chain).await?;
    let (holds, services) = chain.stop_with_usage().await?;
    let generator = ProcessUsage::of("generator", None);
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
    Ok(run)
}

/// Sends the run's users on their open-loop schedule and waits for every one of them.
async fn send_users(
    args: &LoadArgs,
    deadlines: bool,
    client: &Users,
    url: Arc<str>,
    progress: &ProgressBar,
) -> anyhow::Result<Vec<Outcome>> {
    let total = (args.rate * args.seconds).round().max(1.0) as usize;
    let period = Duration::from_secs_f64(1.0 / args.rate);
    // Each user's class, wait and budget: one class of `--user-wait` without a mix.
    let waits: Vec<u64> = match &args.budget_mix {
        Some(mix) => mix.0.iter().map(|c| c.wait_ms).collect(),
        None => vec![args.user_wait],
    };
    progress.set_length(total as u64);
    progress.set_position(0);
    progress.set_message(if deadlines {
        "with deadlines"
    } else {
        "without deadlines"
    });
    let start = Instant::now();
    let mut users = tokio::task::JoinSet::new();
    for i in 0..total {
        let due = start + period.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let (client, url, progress) = (client.clone(), url.clone(), progress.clone());
        let id = format!("load-{}-{i}", args.seed);
        let class = args.budget_mix.as_ref().map_or(0, |mix| mix.class_of(i));
        let wait = Duration::from_millis(waits[class]);
        let user = LoadUser {
            id,
            due,
            wait,
            margin: args.margin,
            absolute: deadlines && args.absolute_deadline,
            class,
        };
        users.spawn(async move {
            let outcome = user.send(&client, &url).await;
            progress.inc(1);
            outcome
        });
    }
    let mut outcomes = Vec::with_capacity(total);
    while let Some(joined) = users.join_next().await {
        outcomes.push(joined.context("a user task failed")??);
    }
    Ok(outcomes)
}

pub(crate) async fn run(args: LoadArgs) -> anyhow::Result<ExitCode> {
    validate(&args)?;
    let placement = args.placement.resolve()?;
    let progress = ProgressBar::new(0);
    progress.set_style(
        ProgressStyle::with_template("{msg:>18} [{bar:40}] {pos}/{len} users, {elapsed}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
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
    Ok(exit(args.check, check.passed))
}

fn exit(checking: bool, passed: bool) -> ExitCode {
    if checking && !passed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The `X-Request-Deadline` of a user who still waits `left` at `now` on the wall clock (the
/// core's dialect writes it), or `None` once nothing is left.
fn gives_up_header(left: Duration, now: WallInstant) -> Option<http::HeaderValue> {
    let left = Budget::from_millis(u64::try_from(left.as_millis()).unwrap_or(u64::MAX))?;
    Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis).encode(left, now)
}

/// What a user who arrived at `due` and waits `wait` sends at `now`: the budget (what is left of
/// the wait, less `margin`; at least 1 ms) and how long it still waits.
fn budget_left(due: Instant, wait: Duration, margin: u64, now: Instant) -> (u64, Duration) {
    let left = (due + wait).saturating_duration_since(now);
    let left_ms = u64::try_from(left.as_millis()).unwrap_or(u64::MAX);
    (user_budget(left_ms, margin), left)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadline::absolute::WallInstant;
    use tokio::time::Instant;

    use super::{budget_left, gives_up_header};

    #[tokio::test]
    async fn a_user_reached_after_its_wait_is_not_sent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/order", listener.local_addr().unwrap());
        let client = crate::grpc::users::Users::new(crate::grpc::users::Protocol::Http1);
        let user = |due| super::LoadUser {
            id: "u-1".to_owned(),
            due,
            wait: Duration::from_millis(100),
            margin: 50,
            absolute: false,
            class: 0,
        };
        let gone = user(Instant::now() - Duration::from_millis(300));
        let outcome = gone.send(&client, &url).await.unwrap();
        assert_eq!(outcome.error, Some(super::NOT_SENT));
        assert!(outcome.lateness_ms >= 300.0 && !outcome.in_time);
        // Nothing reached the service: no connection is waiting to be accepted.
        let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
        assert!(
            accepted.is_err(),
            "the generator connected for a user already gone"
        );
        // A user on time is sent (and, with nobody answering, waits its wait out).
        let on_time = user(Instant::now());
        let (outcome, accepted) = tokio::join!(on_time.send(&client, &url), listener.accept());
        assert!(accepted.is_ok());
        assert_eq!(outcome.unwrap().error, None);
    }

    #[test]
    fn a_late_send_carries_only_what_is_left_of_the_users_wait() {
        let due = Instant::now();
        let wait = Duration::from_millis(2_000);
        // On time: the whole wait less the margin.
        assert_eq!(budget_left(due, wait, 50, due), (1_950, wait));
        // 190 ms late: 190 ms less of both.
        let late = due + Duration::from_millis(190);
        assert_eq!(
            budget_left(due, wait, 50, late),
            (1_760, Duration::from_millis(1_810))
        );
        // Later than the whole wait: nothing left to wait, the smallest budget.
        let gone = due + Duration::from_millis(2_500);
        assert_eq!(budget_left(due, wait, 50, gone), (1, Duration::ZERO));
    }

    #[test]
    fn a_users_give_up_instant_is_sent_as_the_services_read_it() {
        let now = WallInstant::from_system_time(
            std::time::UNIX_EPOCH + Duration::from_millis(1_796_367_398_003),
        );
        let at = now.after(Duration::from_millis(1_800));
        let value =
            gives_up_header(Duration::from_millis(1_800), now).expect("a spellable instant");
        assert_eq!(value, "2026-12-04T06:56:39.803Z");
        assert_eq!(WallInstant::parse(value.as_bytes()), Ok(at));
        assert_eq!(gives_up_header(Duration::ZERO, now), None);
    }
}

//! `deadline demo`: one slow request through gateway, orders and inventory, each a separate
//! process, played twice: without deadlines and with them. The two runs differ only in the
//! services' `--no-enforce --no-propagate` flags.
//!
//! `--peer grpc-js` plays the same request through other chains as well: see [`grpcjs`].

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use serde::Serialize;

mod grpcjs;
mod proxy;

use crate::demo_print::{check_exit, print_check, print_comparison, print_run};
use crate::demo_run::DemoRun;
use crate::grpc::users::{Protocol, Users};
use crate::harness::{Chain, Scenario, user_budget, with_margin};
use crate::holds::HoldLine;
use crate::peer::{self, Peer};
use crate::placement::{Placement, PlacementArgs};
use crate::svg::timeline::{TimelineRun, demo_timeline};
use crate::users::UserResult;

/// Arguments of `deadline demo`.
#[derive(Debug, Clone, Args)]
pub(crate) struct DemoArgs {
    /// Draw the timeline of every worker hold to this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Print one JSON document (`{"runs": [...]}`) on stdout instead of the summary.
    #[arg(long)]
    json: bool,
    /// How long the user waits, in ms; they send this less `--margin` as their budget.
    #[arg(long, default_value_t = 2_000)]
    user_wait: u64,
    /// How long inventory works on every call, in ms.
    #[arg(long, default_value_t = 1_500)]
    inventory_work: u64,
    /// The transit margin every caller keeps back, in ms: the user sends `--user-wait` less
    /// this as their budget, and each service forwards its remaining budget less this. Raise it
    /// when hops are far apart: it must cover a request's way in (on a new connection, the TCP
    /// handshake too: one and a half round trips) and its answer's way back.
    #[arg(long, default_value_t = 50)]
    margin: u64,
    /// How the user calls the gateway, and so how each hop calls the next: HTTP/1.1 with
    /// `Deadline-Budget-Ms`, or gRPC over h2c with `grpc-timeout`.
    #[arg(long, value_enum, default_value_t = Protocol::Http1)]
    protocol: Protocol,
    /// Where the three services run.
    #[command(flatten)]
    placement: PlacementArgs,
    /// Check the run with deadlines (see [`check`]) and exit non-zero when it fails: the user
    /// heard back before giving up, and no call and no worker time came after the user left.
    #[arg(long)]
    check: bool,
    /// Also run the request through a chain written with another library, in each way its
    /// users write it, and print both side by side (over gRPC, on loopback, `--runs` times).
    #[arg(long, value_enum)]
    peer: Option<Peer>,
    /// With `--peer`: how many times to run every chain (the table gives median and worst).
    #[arg(long, default_value_t = 5, requires = "peer")]
    runs: usize,
    /// With `--peer grpc-js`: the `node_modules` directory that holds `@grpc/grpc-js`.
    #[arg(long, default_value = peer::DEFAULT_NODE_MODULES, requires = "peer")]
    node_modules: PathBuf,
    /// With `--peer`: exit non-zero unless every run with deadlines made no call and did no
    /// work after the user left.
    #[arg(long, requires = "peer")]
    peer_check: bool,
    /// Inventory's work becomes `SELECT pg_sleep(S)` on this PostgreSQL database
    /// (postgres://USER@HOST:PORT/DATABASE), and each run reports the database's own time
    /// after the user left, sampled from `pg_stat_activity`.
    #[arg(long, value_name = "URL")]
    postgres: Option<String>,
    /// Put a real proxy in front of the gateway (user -> proxy -> gateway), whose timeout is
    /// shorter than the user's wait and unknown to the services, and play the request three
    /// ways: without deadlines, with them, and with the gateway told the proxy's timeout
    /// (`--front-timeout`). nginx and HAProxy come from Debian's packages
    /// (`scripts/install-proxies.sh`).
    #[arg(long, value_enum, conflicts_with_all = ["peer", "postgres"])]
    proxy: Option<crate::front_proxy::ProxyKind>,
    /// With `--proxy`: the proxy's timeout in ms (nginx's `proxy_read_timeout`, HAProxy's
    /// `timeout server`).
    #[arg(long, value_name = "MS", default_value_t = 1_000, requires = "proxy")]
    proxy_timeout: u64,
    /// With `--proxy`: keep the proxy's generated configuration in this directory
    /// (`nginx.conf` or `haproxy.conf`), to read its timeouts with `deadline path`.
    #[arg(long, value_name = "DIR", requires = "proxy")]
    keep_proxy_config: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct DemoReport<'a> {
    runs: &'a [DemoRun],
    /// Present with `--check`: what failed (empty when it passed).
    #[serde(skip_serializing_if = "Option::is_none")]
    check_failures: Option<&'a [String]>,
}

/// What the run with deadlines promises, whatever the machine's speed: the user hears an
/// answer before giving up, no call reaches a service after the user left, and no worker time
/// is spent after it. Returns what failed; empty when it holds.
fn check(runs: &[DemoRun]) -> Vec<String> {
    let Some(with) = runs.iter().find(|r| r.deadlines) else {
        return vec!["the check needs the run with deadlines".to_owned()];
    };
    let mut failures = Vec::new();
    if with.user_status.is_none() {
        failures.push("with deadlines the user gave up with no answer".to_owned());
    }
    if with.calls_after_user_left != 0 {
        failures.push(format!(
            "with deadlines {} calls came after the user left (needs 0)",
            with.calls_after_user_left
        ));
    }
    if with.worker_ms_after_user_left > 0.0 {
        failures.push(format!(
            "with deadlines {:.1} ms of worker time came after the user left (needs 0)",
            with.worker_ms_after_user_left
        ));
    }
    failures
}

/// The slow request once through a fresh chain, with or without deadlines.
async fn run_once(
    args: &DemoArgs,
    placement: &Placement,
    deadlines: bool,
) -> anyhow::Result<DemoRun> {
    let label = if deadlines {
        "demo-with"
    } else {
        "demo-without"
    };
    let mut inventory = vec!["--work".into(), args.inventory_work.to_string()];
    let tag = crate::pg::run_tag(label);
    if let Some(url) = &args.postgres {
        inventory.extend([
            "--postgres".into(),
            url.clone(),
            "--postgres-tag".into(),
            tag.clone(),
        ]);
    }
    let hops = args.protocol.on(with_margin(
        Scenario::reference(inventory).hops(deadlines),
        args.margin,
    ));
    let chain = Chain::start(label, &hops, placement).await?;
    let sampler = match &args.postgres {
        Some(url) => Some(crate::pg::Sampler::start(url, &tag).await?),
        None => None,
    };
    let client = Users::new(args.protocol);
    let url = format!("{}/order/42", chain.edge_url());
    let wait = Duration::from_millis(args.user_wait);
    let budget = user_budget(args.user_wait, args.margin);
    let user = client.one(&url, "demo-1", Some(budget), None, wait).await?;
    let holds = chain.stop().await?;
    let mut run = summarize(deadlines, &user, holds, user.sent_ms);
    if let Some(sampler) = sampler {
        let activity = sampler.stop().await?;
        run.database = Some(activity.figures(|_| Some(user.left_ms)));
        run.db_empty_ms_after_user_left = activity.empty_after(user.left_ms);
    }
    Ok(run)
}

/// The run's figures from what the user saw and every hold the services logged.
fn summarize(deadlines: bool, user: &UserResult, holds: Vec<HoldLine>, start_ms: f64) -> DemoRun {
    let elapsed_ms = user.elapsed.as_secs_f64() * 1_000.0;
    let left_at = user.left_ms;
    let calls: Vec<&HoldLine> = holds.iter().filter(|h| h.service != "gateway").collect();
    let last_end = holds
        .iter()
        .filter_map(|h| h.end_ms)
        .fold(start_ms, f64::max);
    DemoRun {
        chain: None,
        deadlines,
        user_status: user.status,
        user_grpc_status: user.grpc.map(|code| code.to_string()),
        user_heard_back_ms: user.status.map(|_| elapsed_ms),
        user_gave_up_ms: user.status.is_none().then_some(elapsed_ms),
        // Weighed by each line's count (the demo's services log every line, but a log written
        // with folding reads the same way).
        calls: calls.iter().map(|h| h.count as usize).sum(),
        calls_after_user_left: calls
            .iter()
            .filter(|h| h.arrival_ms > left_at)
            .map(|h| h.count as usize)
            .sum(),
        last_work_end_ms: last_end - start_ms,
        worker_ms: holds.iter().map(|h| h.worker_ms()).sum(),
        worker_ms_after_user_left: holds.iter().map(|h| h.worked_after(left_at)).sum(),
        user_trace: user.trace.clone(),
        user_body: user.body.clone(),
        database: None,
        db_empty_ms_after_user_left: None,
        holds,
        start_ms,
    }
}

pub(crate) async fn run(args: DemoArgs) -> anyhow::Result<ExitCode> {
    if args.user_wait < 100 {
        anyhow::bail!("--user-wait must be at least 100 ms");
    }
    if args.margin >= args.user_wait {
        anyhow::bail!("--margin must be below --user-wait, or the user sends no budget");
    }
    if let Some(peer) = args.peer {
        return grpcjs::compare(args, peer).await;
    }
    if let Some(kind) = args.proxy {
        if args.protocol != Protocol::Http1 {
            anyhow::bail!("--proxy puts an HTTP/1.1 proxy in front: it needs --protocol http1");
        }
        return proxy::run(args, kind).await;
    }
    let placement = args.placement.resolve()?;
    if !args.json {
        println!("deadline demo: user -> gateway -> orders -> inventory, each a separate process.");
        let budget = user_budget(args.user_wait, args.margin);
        let sends = match args.protocol {
            Protocol::Http1 => format!("Deadline-Budget-Ms: {budget}"),
            Protocol::Grpc => format!(
                "a gRPC call with grpc-timeout: {}",
                deadline::Budget::from_millis(budget).map_or_else(String::new, |b| {
                    String::from_utf8_lossy(deadline::dialect::grpc_timeout(b).as_bytes())
                        .into_owned()
                })
            ),
        };
        println!(
            "The user waits {:.1} s and sends {sends}. Inventory takes {:.1} s.",
            args.user_wait as f64 / 1_000.0,
            args.inventory_work as f64 / 1_000.0
        );
        for line in placement.describe() {
            println!("  {line}");
        }
    }
    let mut runs = Vec::with_capacity(2);
    for deadlines in [false, true] {
        let run = tokio::select! {
            run = run_once(&args, &placement, deadlines) => run?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the services were stopped"),
        };
        if !args.json {
            print_run(&run);
        }
        runs.push(run);
    }
    if let Some(path) = &args.svg {
        let timeline: Vec<TimelineRun<'_>> = runs.iter().map(DemoRun::timeline).collect();
        let picture = demo_timeline(&timeline, args.user_wait as f64);
        std::fs::write(path, picture).with_context(|| format!("writing {}", path.display()))?;
    }
    let failures = check(&runs);
    if args.json {
        let report = DemoReport {
            runs: &runs,
            check_failures: args.check.then_some(&failures),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_comparison(&runs);
        if let Some(path) = &args.svg {
            println!("Timeline written to {}.", path.display());
        }
        if args.check {
            print_check(&failures);
        }
    }
    Ok(check_exit(args.check, &failures))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::demo_print::innermost;

    #[test]
    fn innermost_names_the_last_hop() {
        let trace = deadline::Trace::decode(
            b"gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,...orders@1-1822=504,....call:inventory@21-1821=504,.....attempt@21-962=504,......inventory@0-940=504,.......work@0-940=deadline",
        );
        assert_eq!(
            innermost(&trace).unwrap(),
            "inventory answered 504 after 940 ms, worked 940 ms (deadline)"
        );
    }

    fn run(deadlines: bool, status: Option<u16>, calls_after: usize, ms_after: f64) -> DemoRun {
        DemoRun {
            chain: None,
            deadlines,
            user_status: status,
            user_grpc_status: None,
            user_heard_back_ms: status.map(|_| 1_873.0),
            user_gave_up_ms: status.is_none().then_some(2_000.0),
            calls: 12,
            calls_after_user_left: calls_after,
            last_work_end_ms: 1_870.0,
            worker_ms: 5_000.0,
            worker_ms_after_user_left: ms_after,
            user_trace: None,
            user_body: None,
            database: None,
            db_empty_ms_after_user_left: None,
            holds: Vec::new(),
            start_ms: 0.0,
        }
    }

    /// The check reads the run with deadlines only, and fails on each broken promise.
    #[test]
    fn the_check_fails_on_work_or_calls_after_the_user_left() {
        let without = run(false, None, 9, 7_600.0);
        assert!(check(&[without.clone(), run(true, Some(504), 0, 0.0)]).is_empty());
        let failures = check(&[without.clone(), run(true, Some(504), 1, 0.0)]);
        assert_eq!(
            failures,
            ["with deadlines 1 calls came after the user left (needs 0)"]
        );
        let failures = check(&[without.clone(), run(true, Some(504), 0, 7.0)]);
        assert_eq!(
            failures,
            ["with deadlines 7.0 ms of worker time came after the user left (needs 0)"]
        );
        assert_eq!(check(&[without.clone(), run(true, None, 0, 0.0)]).len(), 1);
        assert_eq!(
            check(&[without]),
            ["the check needs the run with deadlines"]
        );
    }
}

//! `deadline demo --proxy nginx|haproxy`: the reference request with a real proxy in front of
//! the gateway (user -> proxy -> gateway -> orders -> inventory), whose timeout
//! (`--proxy-timeout`, 1 s by default) is shorter than the user's 2 s wait and unknown to the
//! services: the misaligned path where the shortest timeout, in another team's file, decides.
//!
//! Played three ways, each on a fresh chain and a fresh proxy:
//! - **without deadlines**: the proxy answers its own 504 at its timeout and closes the
//!   upstream connection; the services, which neither read budgets nor stop on a hang-up,
//!   work on for seconds for nobody.
//! - **with deadlines**: the budget passes through the proxy unchanged, but it is longer than
//!   the proxy's timeout; the proxy's 504 still answers the user, and its hang-up stops the
//!   services (each hop sees its caller leave and stops its work and its calls).
//! - **with deadlines, the gateway told the proxy's timeout** (`--front-timeout`, and
//!   `--trust-request-start` for the proxy's stamp): the gateway's budget is the proxy's
//!   timeout less the margin, so the gateway answers its own 504 with the trace before the
//!   proxy's timer fires, and nothing works after the user heard it.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use super::{DemoArgs, summarize};
use crate::demo_print::{check_exit, print_check, print_run};
use crate::demo_run::DemoRun;
use crate::front_proxy::{FrontProxy, ProxyKind};
use crate::grpc::users::{Protocol, Users};
use crate::harness::{Chain, Scenario, user_budget, with_margin};
use crate::svg::timeline::{TimelineRun, demo_timeline};

/// The three ways the request is played.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    Without,
    With,
    Told,
}

impl Way {
    const ALL: [Way; 3] = [Way::Without, Way::With, Way::Told];

    fn deadlines(self) -> bool {
        self != Way::Without
    }

    /// The run's label (`chain` in `--json`).
    fn label(self, kind: ProxyKind) -> &'static str {
        match (kind, self) {
            (ProxyKind::Nginx, Way::Without) => "nginx in front, without deadlines",
            (ProxyKind::Nginx, Way::With) => "nginx in front, with deadlines",
            (ProxyKind::Nginx, Way::Told) => {
                "nginx in front, with deadlines, the gateway told its timeout"
            }
            (ProxyKind::Haproxy, Way::Without) => "haproxy in front, without deadlines",
            (ProxyKind::Haproxy, Way::With) => "haproxy in front, with deadlines",
            (ProxyKind::Haproxy, Way::Told) => {
                "haproxy in front, with deadlines, the gateway told its timeout"
            }
        }
    }
}

/// One way's figures: the run's, and who answered the user.
#[derive(Debug, Serialize)]
struct ProxyRun {
    #[serde(flatten)]
    run: DemoRun,
    /// `proxy` for the proxy's own 504 (no `Deadline-Trace`), else the service whose trace the
    /// answer carried (`gateway`).
    answered_by: String,
}

#[derive(Debug, Serialize)]
struct ProxyReport<'a> {
    proxy: ProxyKind,
    proxy_timeout_ms: u64,
    runs: &'a [ProxyRun],
    #[serde(skip_serializing_if = "Option::is_none")]
    check_failures: Option<&'a [String]>,
}

/// The slow request once, `way`, through a fresh chain behind a fresh proxy.
async fn run_once(args: &DemoArgs, kind: ProxyKind, way: Way) -> anyhow::Result<ProxyRun> {
    let placement = args.placement.resolve()?;
    let inventory = vec!["--work".into(), args.inventory_work.to_string()];
    let mut hops = with_margin(
        Scenario::reference(inventory).hops(way.deadlines()),
        args.margin,
    );
    if way == Way::Told {
        hops[0].args.extend([
            "--front-timeout".to_owned(),
            args.proxy_timeout.to_string(),
            "--trust-request-start".to_owned(),
        ]);
    }
    let chain = Chain::start(way.label(kind), &hops, &placement).await?;
    let upstream = chain
        .edge_url()
        .strip_prefix("http://")
        .context("the gateway's URL is not http://")?
        .to_owned();
    let proxy = FrontProxy::start(kind, &upstream, Duration::from_millis(args.proxy_timeout))
        .await
        .with_context(|| format!("putting {} in front of the gateway", kind.name()))?;
    if let (Some(dir), Way::Without) = (&args.keep_proxy_config, way) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let kept = dir.join(format!("{}.conf", kind.name()));
        std::fs::copy(proxy.config(), &kept)
            .with_context(|| format!("keeping the proxy's configuration as {}", kept.display()))?;
    }
    let client = Users::new(Protocol::Http1);
    let url = format!("{}/order/42", proxy.url());
    let wait = Duration::from_millis(args.user_wait);
    let budget = user_budget(args.user_wait, args.margin);
    let user = client.one(&url, "demo-1", Some(budget), None, wait).await;
    proxy.stop().await;
    let user = user?;
    let holds = chain.stop().await?;
    let mut run = summarize(way.deadlines(), &user, holds, user.sent_ms);
    run.chain = Some(way.label(kind));
    let answered_by = match &user.trace {
        Some(trace) => deadline::Trace::decode(trace.as_bytes())
            .spans
            .first()
            .map_or_else(|| "a service".to_owned(), |root| root.name.clone()),
        None if user.status.is_some() => "proxy".to_owned(),
        None => "nobody".to_owned(),
    };
    Ok(ProxyRun { run, answered_by })
}

/// What the proxy demo promises (`--check`), with generous bounds in real time: without
/// deadlines the proxy's 504 answers near its timeout and the services work on for at least
/// half a second after it; with deadlines the proxy's hang-up stops them within 50 ms; told the
/// proxy's timeout, the gateway answers its own 504 with its trace before the proxy's timer and
/// nothing works or is called after.
fn check(runs: &[ProxyRun], timeout_ms: u64) -> Vec<String> {
    let timeout = timeout_ms as f64;
    let mut failures = Vec::new();
    for way in Way::ALL {
        let Some(run) = runs.get(way as usize) else {
            failures.push(format!("the run {way:?} is missing"));
            continue;
        };
        let heard = run.run.user_heard_back_ms;
        let name = run.run.chain.unwrap_or("?");
        match way {
            Way::Without | Way::With => {
                if run.answered_by != "proxy" || run.run.user_status != Some(504) {
                    failures.push(format!(
                        "{name}: the user heard {:?} from {}, not the proxy's 504",
                        run.run.user_status, run.answered_by
                    ));
                }
                if !heard.is_some_and(|ms| ms >= timeout * 0.9 && ms < timeout + 500.0) {
                    failures.push(format!(
                        "{name}: the proxy's 504 came at {heard:?} ms, not near its {timeout_ms} ms"
                    ));
                }
            }
            Way::Told => {
                if run.answered_by != "gateway" || run.run.user_status != Some(504) {
                    failures.push(format!(
                        "{name}: the user heard {:?} from {}, not the gateway's 504 with its trace",
                        run.run.user_status, run.answered_by
                    ));
                }
                if !heard.is_some_and(|ms| ms < timeout) {
                    failures.push(format!(
                        "{name}: the gateway's 504 came at {heard:?} ms, not before the proxy's {timeout_ms} ms"
                    ));
                }
            }
        }
        let after = run.run.worker_ms_after_user_left;
        match way {
            Way::Without if after < 500.0 => failures.push(format!(
                "{name}: only {after:.0} ms of work after the user left; the services should work on"
            )),
            Way::With if after > 50.0 => failures.push(format!(
                "{name}: {after:.0} ms of work after the proxy's 504 (at most 50)"
            )),
            Way::Told if after > 0.0 || run.run.calls_after_user_left > 0 => {
                failures.push(format!(
                    "{name}: {after:.1} ms of work and {} calls after the gateway's 504 (needs none)",
                    run.run.calls_after_user_left
                ))
            }
            _ => {}
        }
    }
    failures
}

pub(super) async fn run(args: DemoArgs, kind: ProxyKind) -> anyhow::Result<ExitCode> {
    if args.proxy_timeout == 0 {
        anyhow::bail!("--proxy-timeout must be at least 1 ms");
    }
    if !args.json {
        println!(
            "deadline demo --proxy {}: user -> {} -> gateway -> orders -> inventory, each a \
             separate process.",
            kind.name(),
            kind.name()
        );
        println!(
            "The user waits {:.1} s and sends Deadline-Budget-Ms: {}. {} in front gives up after \
             {:.1} s ({}). Inventory takes {:.1} s.",
            args.user_wait as f64 / 1_000.0,
            user_budget(args.user_wait, args.margin),
            kind.name(),
            args.proxy_timeout as f64 / 1_000.0,
            kind.timeout_setting(),
            args.inventory_work as f64 / 1_000.0
        );
    }
    let mut runs = Vec::with_capacity(3);
    for way in Way::ALL {
        let run = tokio::select! {
            run = run_once(&args, kind, way) => run?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the services were stopped"),
        };
        if !args.json {
            print_run(&run.run);
            println!("  answered   by {}", run.answered_by);
        }
        runs.push(run);
    }
    if let Some(path) = &args.svg {
        let timeline: Vec<TimelineRun<'_>> = runs.iter().map(|r| r.run.timeline()).collect();
        let picture = demo_timeline(&timeline, args.user_wait as f64);
        std::fs::write(path, picture).with_context(|| format!("writing {}", path.display()))?;
    }
    let failures = check(&runs, args.proxy_timeout);
    if args.json {
        let report = ProxyReport {
            proxy: kind,
            proxy_timeout_ms: args.proxy_timeout,
            runs: &runs,
            check_failures: args.check.then_some(&failures),
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!();
        println!(
            "{:<64} {:>9} {:>8} {:>13} {:>16}",
            "way", "heard", "from", "calls after", "work after (ms)"
        );
        for run in &runs {
            println!(
                "{:<64} {:>9} {:>8} {:>13} {:>16.0}",
                run.run.chain.unwrap_or("?"),
                run.run.user_heard_back_ms.map_or_else(
                    || "gave up".to_owned(),
                    |ms| format!(
                        "{} {:.2}s",
                        run.run.heard().unwrap_or_default(),
                        ms / 1_000.0
                    )
                ),
                run.answered_by,
                run.run.calls_after_user_left,
                run.run.worker_ms_after_user_left
            );
        }
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

    fn way(way: Way, status: u16, heard_ms: f64, by: &str, after_ms: f64) -> ProxyRun {
        ProxyRun {
            run: DemoRun {
                chain: Some(way.label(ProxyKind::Nginx)),
                deadlines: way.deadlines(),
                user_status: Some(status),
                user_grpc_status: None,
                user_heard_back_ms: Some(heard_ms),
                user_gave_up_ms: None,
                calls: 3,
                calls_after_user_left: 0,
                last_work_end_ms: heard_ms,
                worker_ms: 3_000.0,
                worker_ms_after_user_left: after_ms,
                user_trace: None,
                user_body: None,
                database: None,
                db_empty_ms_after_user_left: None,
                holds: Vec::new(),
                start_ms: 0.0,
            },
            answered_by: by.to_owned(),
        }
    }

    fn good() -> Vec<ProxyRun> {
        vec![
            way(Way::Without, 504, 1_003.0, "proxy", 28_700.0),
            way(Way::With, 504, 1_002.0, "proxy", 2.0),
            way(Way::Told, 504, 850.0, "gateway", 0.0),
        ]
    }

    #[test]
    fn the_check_holds_the_three_ways_to_their_promises() {
        assert!(check(&good(), 1_000).is_empty());
        // With deadlines, the proxy's hang-up not stopping the chain.
        let mut runs = good();
        runs[1].run.worker_ms_after_user_left = 900.0;
        assert_eq!(
            check(&runs, 1_000),
            ["nginx in front, with deadlines: 900 ms of work after the proxy's 504 (at most 50)"]
        );
        // Told the timeout, but the proxy answered first (the gateway never knew).
        let mut runs = good();
        runs[2] = way(Way::Told, 504, 1_001.0, "proxy", 0.0);
        assert_eq!(check(&runs, 1_000).len(), 2, "{:?}", check(&runs, 1_000));
        // Without deadlines, the services stopping anyway: not the failure the demo shows.
        let mut runs = good();
        runs[0].run.worker_ms_after_user_left = 0.0;
        assert_eq!(check(&runs, 1_000).len(), 1);
        assert_eq!(check(&good()[..2], 1_000), ["the run Told is missing"]);
    }
}

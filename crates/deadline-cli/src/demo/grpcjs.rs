//! `deadline demo --peer`: the demo's slow request over gRPC through a chain written with
//! @grpc/grpc-js, in each of its ways, and through deadline services without and with
//! deadlines, every chain `--runs` times; then the table (or the JSON), the timeline of each
//! chain's first run, and with `--peer-check` the verdict on the runs with deadlines.

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use serde::Serialize;

use super::{DemoArgs, run_once, summarize};
use crate::demo_run::DemoRun;
use crate::grpc::users::{Protocol, Users};
use crate::harness::{Chain, Scenario, TempDir, user_budget};
use crate::peer::{self, ChainRuns, Node, Peer, Way};
use crate::placement::Placement;
use crate::svg::timeline::{TimelineRun, demo_timeline};

/// One run of the slow request through the grpc-js chain, in one way.
async fn peer_once(
    args: &DemoArgs,
    placement: &Placement,
    node: &Node,
    way: Way,
) -> anyhow::Result<DemoRun> {
    let mut hops =
        Scenario::reference(vec!["--work".into(), args.inventory_work.to_string()]).hops(true);
    for hop in &mut hops {
        hop.args.extend(way.args());
        hop.args.push("--modules".into());
        hop.args.push(node.modules().display().to_string());
    }
    let chain = Chain::start_program("demo-grpcjs", &hops, placement, node.program()).await?;
    let client = Users::new(Protocol::Grpc);
    let url = format!("{}/order/42", chain.edge_url());
    let wait = Duration::from_millis(args.user_wait);
    let budget = user_budget(args.user_wait, args.margin);
    let user = client.one(&url, "demo-1", Some(budget), None, wait).await?;
    let holds = chain.stop().await?;
    let mut run = summarize(false, &user, holds, user.sent_ms);
    run.chain = Some(way.label());
    Ok(run)
}

/// `deadline demo --peer`: every chain `--runs` times, then the table (or the JSON).
pub(super) async fn compare(args: DemoArgs, peer: Peer) -> anyhow::Result<ExitCode> {
    let Peer::GrpcJs = peer;
    if args.runs == 0 {
        anyhow::bail!("--runs must be at least 1");
    }
    let placement = args.placement.resolve()?;
    if !placement.describe().is_empty() {
        anyhow::bail!(
            "--peer runs every hop on 127.0.0.1: leave out --netns, --hop-prefix and --hop-listen"
        );
    }
    let dir = TempDir::new("demo-peer")?;
    let node = Node::prepare(dir.path(), &args.node_modules)?;
    if !args.json {
        print_peer_intro(&args);
    }
    let mut chains = empty_chains();
    for round in 1..=args.runs {
        play_round(&args, &placement, &node, &mut chains).await?;
        eprintln!("round {round} of {} done", args.runs);
    }
    if let Some(path) = &args.svg {
        let timeline: Vec<TimelineRun<'_>> = chains
            .iter()
            .filter_map(|c| c.runs.first())
            .map(DemoRun::timeline)
            .collect();
        let picture = demo_timeline(&timeline, args.user_wait as f64);
        std::fs::write(path, picture).with_context(|| format!("writing {}", path.display()))?;
    }
    print_peer_report(&args, &chains)?;
    Ok(peer_verdict(&args, &chains))
}

/// What `--peer` is about to play.
fn print_peer_intro(args: &DemoArgs) {
    let budget = user_budget(args.user_wait, args.margin);
    println!(
        "deadline demo --peer grpc-js: the demo's slow request, over gRPC, through a chain \
         written with @grpc/grpc-js and through deadline services."
    );
    println!(
        "The user waits {:.1} s and sends grpc-timeout {budget}m. Inventory takes {:.1} s. \
         {} runs of each chain.",
        args.user_wait as f64 / 1_000.0,
        args.inventory_work as f64 / 1_000.0,
        args.runs
    );
}

/// One list of runs per chain: each grpc-js way, then deadline without and with deadlines.
fn empty_chains() -> Vec<ChainRuns> {
    Way::ALL
        .iter()
        .map(|way| way.label())
        .chain([
            "deadline, without deadlines (timeouts only)",
            "deadline, with deadlines",
        ])
        .map(|chain| ChainRuns {
            chain,
            runs: Vec::new(),
        })
        .collect()
}

/// One run of every chain, added to `chains` (as [`empty_chains`] orders them).
async fn play_round(
    args: &DemoArgs,
    placement: &Placement,
    node: &Node,
    chains: &mut [ChainRuns],
) -> anyhow::Result<()> {
    let mut ours = args.clone();
    ours.protocol = Protocol::Grpc;
    for (slot, way) in Way::ALL.iter().enumerate() {
        let run = tokio::select! {
            run = peer_once(args, placement, node, *way) => run?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the services were stopped"),
        };
        chains[slot].runs.push(run);
    }
    for deadlines in [false, true] {
        let run = tokio::select! {
            run = run_once(&ours, placement, deadlines) => run?,
            _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted; the services were stopped"),
        };
        chains[Way::ALL.len() + usize::from(deadlines)]
            .runs
            .push(run);
    }
    Ok(())
}

/// The table, or the JSON with `--json`.
fn print_peer_report(args: &DemoArgs, chains: &[ChainRuns]) -> anyhow::Result<()> {
    if args.json {
        #[derive(Serialize)]
        struct PeerReport<'a> {
            peer: &'static str,
            chains: &'a [ChainRuns],
        }
        println!(
            "{}",
            serde_json::to_string_pretty(&PeerReport {
                peer: "grpc-js",
                chains
            })?
        );
    } else {
        println!();
        print!("{}", peer::table(chains));
        if let Some(path) = &args.svg {
            println!(
                "Timeline of each chain's first run written to {}.",
                path.display()
            );
        }
    }
    Ok(())
}

/// The calls the reference cascade makes when nothing stops it: the gateway's 3 attempts at
/// orders, each making 3 attempts at inventory.
const CASCADE_CALLS: usize = 3 + 3 * 3;

/// Fewer calls than this and the chain did not run: orders and inventory are each reached at
/// least once in every way (3 calls is the least measured).
const CHAIN_CALLS: usize = 2;

/// The demo's defaults, the scenario the peer chains' figures are known for.
const REFERENCE_USER_WAIT: u64 = 2_000;
const REFERENCE_INVENTORY_WORK: u64 = 1_500;

/// With `--peer-check`: fails when any run with deadlines made a call or worked after the user
/// left, or when the grpc-js chains do not show what they are there to show (so a broken peer
/// cannot pass as a comparison): the timeouts-only chain makes the whole cascade and works on
/// after the user left in every run, and the chains with `parent` propagation stop it, making
/// fewer calls than the cascade (median of their runs).
fn peer_verdict(args: &DemoArgs, chains: &[ChainRuns]) -> ExitCode {
    if !args.peer_check {
        return ExitCode::SUCCESS;
    }
    let mut failures = Vec::new();
    if args.user_wait == REFERENCE_USER_WAIT && args.inventory_work == REFERENCE_INVENTORY_WORK {
        for (way, chain) in Way::ALL.iter().zip(chains) {
            failures.extend(peer_chain_failures(*way, chain));
        }
    } else {
        eprintln!(
            "the grpc-js chains are not checked: what they must show holds for the reference \
             scenario (--user-wait {REFERENCE_USER_WAIT}, --inventory-work \
             {REFERENCE_INVENTORY_WORK})"
        );
    }
    let with = &chains[Way::ALL.len() + 1];
    for run in with
        .runs
        .iter()
        .filter(|r| r.calls_after_user_left > 0 || r.waste_ms() > 0.0)
    {
        failures.push(format!(
            "with deadlines, {} calls and {:.0} ms of work after the user left",
            run.calls_after_user_left,
            run.waste_ms()
        ));
    }
    for failure in &failures {
        eprintln!("CHECK FAILED: {failure}");
    }
    if !failures.is_empty() {
        return ExitCode::FAILURE;
    }
    eprintln!(
        "check passed: {} runs with deadlines, no call and no work after the user left; the \
         grpc-js chains made the cascade's {CASCADE_CALLS} calls with timeouts only and fewer \
         with propagation",
        with.runs.len()
    );
    ExitCode::SUCCESS
}

/// What is wrong with one grpc-js chain's runs, if anything.
fn peer_chain_failures(way: Way, chain: &ChainRuns) -> Vec<String> {
    let label = way.label();
    if chain.runs.is_empty() {
        return vec![format!("{label}: no run")];
    }
    match way {
        Way::Timeouts => chain
            .runs
            .iter()
            .filter(|r| r.calls != CASCADE_CALLS || r.waste_ms() <= 0.0)
            .map(|r| {
                format!(
                    "{label}: {} calls and {:.0} ms of work after the user left, where the \
                     cascade makes {CASCADE_CALLS} calls and works on: the peer chain did not run \
                     as the reference",
                    r.calls,
                    r.waste_ms()
                )
            })
            .collect(),
        Way::Propagate | Way::Cancel => {
            let mut calls: Vec<usize> = chain.runs.iter().map(|r| r.calls).collect();
            calls.sort_unstable();
            let median = calls[(calls.len() - 1) / 2];
            if median >= CASCADE_CALLS {
                vec![format!(
                    "{label}: {median} calls (median of {} runs), the whole cascade: the \
                     propagated deadline cancelled nothing",
                    calls.len()
                )]
            } else if median < CHAIN_CALLS {
                vec![format!(
                    "{label}: {median} calls (median of {} runs), fewer than the {CHAIN_CALLS} \
                     a chain makes when it runs: the peer chain did not run",
                    calls.len()
                )]
            } else {
                Vec::new()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(calls: usize, after_ms: f64) -> DemoRun {
        DemoRun {
            chain: None,
            deadlines: false,
            user_status: Some(504),
            user_grpc_status: Some("DEADLINE_EXCEEDED".into()),
            user_heard_back_ms: Some(2_000.0),
            user_gave_up_ms: None,
            calls,
            calls_after_user_left: 0,
            last_work_end_ms: 0.0,
            worker_ms: after_ms,
            worker_ms_after_user_left: after_ms,
            user_trace: None,
            user_body: None,
            database: None,
            db_empty_ms_after_user_left: None,
            holds: Vec::new(),
            start_ms: 0.0,
        }
    }

    fn chain(runs: Vec<DemoRun>) -> ChainRuns {
        ChainRuns { chain: "c", runs }
    }

    #[test]
    fn a_peer_chain_that_does_not_behave_as_the_reference_fails_the_check() {
        // As measured: the cascade with timeouts only, fewer calls with propagation.
        assert!(peer_chain_failures(Way::Timeouts, &chain(vec![run(12, 25_000.0)])).is_empty());
        assert!(peer_chain_failures(Way::Propagate, &chain(vec![run(4, 2_100.0)])).is_empty());
        assert!(
            peer_chain_failures(Way::Cancel, &chain(vec![run(3, 0.0), run(11, 6_000.0)]))
                .is_empty(),
            "the median of two runs is the lower one"
        );
        // A peer that made no calls, or stopped without propagation, is not the reference.
        assert_eq!(
            peer_chain_failures(Way::Timeouts, &chain(vec![run(0, 0.0)])).len(),
            1
        );
        assert_eq!(
            peer_chain_failures(Way::Timeouts, &chain(vec![run(12, 0.0)])).len(),
            1
        );
        // Propagation that cancels nothing: the whole cascade.
        let failures = peer_chain_failures(Way::Propagate, &chain(vec![run(12, 25_000.0)]));
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("cancelled nothing"), "{failures:?}");
        assert_eq!(peer_chain_failures(Way::Cancel, &chain(vec![])).len(), 1);
        // A propagating chain that never ran (no calls) is not a pass either.
        let failures = peer_chain_failures(Way::Cancel, &chain(vec![run(0, 0.0)]));
        assert_eq!(failures.len(), 1);
        assert!(failures[0].contains("did not run"), "{failures:?}");
    }
}

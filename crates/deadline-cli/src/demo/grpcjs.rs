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
    Ok(peer_verdict(&args, &chains[Way::ALL.len() + 1]))
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

/// With `--peer-check`: fails when any run with deadlines made a call or worked after the user
/// left.
fn peer_verdict(args: &DemoArgs, with: &ChainRuns) -> ExitCode {
    if !args.peer_check {
        return ExitCode::SUCCESS;
    }
    let late: Vec<&DemoRun> = with
        .runs
        .iter()
        .filter(|r| r.calls_after_user_left > 0 || r.waste_ms() > 0.0)
        .collect();
    for run in &late {
        eprintln!(
            "CHECK FAILED: with deadlines, {} calls and {:.0} ms of work after the user left",
            run.calls_after_user_left,
            run.waste_ms()
        );
    }
    if !late.is_empty() {
        return ExitCode::FAILURE;
    }
    eprintln!(
        "check passed: {} runs with deadlines, no call and no work after the user left",
        with.runs.len()
    );
    ExitCode::SUCCESS
}

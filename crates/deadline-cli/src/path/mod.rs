//! `deadline path`: the timeouts along a request's path, read from each hop's configuration and
//! printed side by side, with the rules they break. The reading (files, includes, HTTP, SQL) is
//! here; the parsers and the rules are the core's pure `deadline::path`, so the fuzz targets
//! reach them.
//!
//! The inputs are hops in path order, from the user inward, as given on the command line in any
//! mix: clap keeps each flag's values apart, so the order is recovered from their positions
//! among the arguments ([`inputs`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{ArgMatches, Args};
use deadline::path::{Hop, check};

mod print;
mod read;

/// Arguments of `deadline path`.
#[derive(Debug, Clone, Args)]
pub(crate) struct PathArgs {
    /// What the user waits, in ms: a hop whose total is this.
    #[arg(long, value_name = "MS")]
    pub budget: Vec<u64>,
    /// A cloud balancer in front, known by its idle timeout in ms (it cannot be read from
    /// here): it closes a connection with no data for that long, either way.
    #[arg(long, value_name = "MS")]
    pub balancer_idle: Vec<u64>,
    /// An nginx configuration, or the output of `nginx -T`; `include` is followed, relative
    /// to the including file (a `*` or `?` in the file name part is expanded).
    #[arg(long, value_name = "FILE")]
    pub nginx: Vec<PathBuf>,
    /// An HAProxy configuration.
    #[arg(long, value_name = "FILE")]
    pub haproxy: Vec<PathBuf>,
    /// A deadline service's admin base URL (`http://HOST:PORT`): its limits are read from
    /// `GET URL/deadline/limits`.
    #[arg(long, value_name = "URL")]
    pub service: Vec<String>,
    /// A PostgreSQL database (`postgres://USER@HOST:PORT/DATABASE`): its timeout settings and
    /// every per-role and per-database override.
    #[arg(long, value_name = "URL")]
    pub postgres: Vec<String>,
    /// What each inner hop must leave the hop in front of it, in ms, for the answer's way back.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub margin: u64,
    /// Print one JSON document (hops, violations, effective limit) instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// Exit with status 1 when any rule is broken (for a deployment's CI).
    #[arg(long)]
    pub check: bool,
}

/// One input, in path order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Input {
    Budget(u64),
    Balancer(u64),
    Nginx(PathBuf),
    Haproxy(PathBuf),
    Service(String),
    Postgres(String),
}

/// The inputs of `args` in the order they were given, read from the positions clap recorded in
/// `matches` (the subcommand's).
pub(crate) fn inputs(args: &PathArgs, matches: &ArgMatches) -> Vec<Input> {
    let mut found: Vec<(usize, Input)> = Vec::new();
    let mut add = |id: &str, values: Vec<Input>| {
        let at = matches.indices_of(id).into_iter().flatten();
        found.extend(at.zip(values));
    };
    add(
        "budget",
        args.budget.iter().copied().map(Input::Budget).collect(),
    );
    add(
        "balancer_idle",
        args.balancer_idle
            .iter()
            .copied()
            .map(Input::Balancer)
            .collect(),
    );
    add(
        "nginx",
        args.nginx.iter().cloned().map(Input::Nginx).collect(),
    );
    add(
        "haproxy",
        args.haproxy.iter().cloned().map(Input::Haproxy).collect(),
    );
    add(
        "service",
        args.service.iter().cloned().map(Input::Service).collect(),
    );
    add(
        "postgres",
        args.postgres.iter().cloned().map(Input::Postgres).collect(),
    );
    found.sort_by_key(|(at, _)| *at);
    found.into_iter().map(|(_, input)| input).collect()
}

/// Reads every hop, checks them and prints the result.
pub(crate) async fn run(args: PathArgs, inputs: Vec<Input>) -> anyhow::Result<ExitCode> {
    if inputs.is_empty() {
        anyhow::bail!(
            "give the path's hops in order: --budget, --balancer-idle, --nginx, --haproxy, --service, --postgres"
        );
    }
    let mut hops: Vec<Hop> = Vec::with_capacity(inputs.len());
    for input in &inputs {
        hops.push(read::hop(input).await?);
    }
    let margin = Duration::from_millis(args.margin);
    let report = check(&hops, margin);
    if args.json {
        let doc = serde_json::json!({
            "margin_ms": args.margin,
            "hops": hops,
            "effective": report.effective,
            "violations": report.violations,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", print::text(&hops, &report, margin));
    }
    Ok(if args.check && !report.violations.is_empty() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

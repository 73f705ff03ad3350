//! `deadline`: a deadline-aware test service, the three-process demo, the load comparison, a
//! trace decoder and a one-request client that shows where a budget went. Argument parsing and
//! glue only: everything a library user would want lives in the `deadline` and `deadline-http`
//! crates.

mod bench;
mod call;
mod demo;
mod demo_print;
mod demo_run;
mod dialect_args;
#[cfg(unix)]
mod fd_limit;
mod front_proxy;
mod grpc;
mod harness;
mod holds;
mod hygiene;
mod jobs;
mod load;
mod otlp;
mod outage;
mod path;
mod peer;
mod pg;
mod placement;
mod redact;
mod reply;
mod service;
mod shutdown;
mod slowness;
mod stream;
mod stream_read;
mod svg;
mod trace_cmd;
mod users;

use std::process::ExitCode;

use clap::{CommandFactory as _, FromArgMatches as _, Parser, Subcommand};

/// Carries a request's time budget from service to service over HTTP.
#[derive(Debug, Parser)]
#[command(name = "deadline", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per process: the size does not matter
enum Command {
    /// Serve any GET path: wait for a worker slot, work, then call a downstream if one is set.
    // Boxed: its many flags make it several times larger than the other commands' arguments.
    Service(Box<service::args::ServiceArgs>),
    /// One slow request through gateway, orders and inventory, without deadlines and with them.
    Demo(demo::DemoArgs),
    /// Open-loop load through the three services, both ways, with dead work measured.
    Load(load::LoadArgs),
    /// Decode a Deadline-Trace header into a readable tree (or JSON).
    Trace(trace_cmd::TraceArgs),
    /// What the layers cost over loopback HTTP: bare, layered and peer servers side by side.
    Bench(bench::BenchArgs),
    /// Send one request with a budget and show, hop by hop, where its time went.
    Call(call::CallArgs),
    /// Queued work on RabbitMQ with slow consumers, without message expiry and with it.
    Jobs(jobs::JobsArgs),
    /// Read the timeouts along a path (nginx, HAProxy, services, PostgreSQL) side by side and
    /// name the ones that disagree.
    Path(path::PathArgs),
}

fn main() -> ExitCode {
    let matches = Cli::command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    init_logging();
    let result = match cli.command {
        Command::Trace(args) => trace_cmd::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Service(args) => runtime().and_then(|rt| rt.block_on(service::run(*args))),
        Command::Demo(args) => runtime().and_then(|rt| rt.block_on(demo::run(args))),
        Command::Load(args) => runtime().and_then(|rt| rt.block_on(load::run(args))),
        Command::Call(args) => runtime().and_then(|rt| rt.block_on(call::run(args))),
        Command::Jobs(args) => runtime().and_then(|rt| rt.block_on(jobs::run(args))),
        Command::Path(args) => {
            // The hops' order is the order of their flags, which only the matches keep.
            let inputs = matches
                .subcommand_matches("path")
                .map(|m| path::inputs(&args, m))
                .unwrap_or_default();
            runtime().and_then(|rt| rt.block_on(path::run(args, inputs)))
        }
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("deadline: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?)
}

/// Logs go to stderr (stdout carries the ready line and `--json` documents); `RUST_LOG` filters.
/// By default h2's own warnings are left out: it writes one per connection a peer makes it close
/// (5,489 lines in 10 s of rapid resets), and `serve` says the same at most once a second.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,h2=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

//! `deadline jobs`: a producer and slow consumers on a real RabbitMQ, without expiry and with.
//!
//! The producer publishes `--rate` messages a second for `--seconds`; `--consumers` consumers
//! each work `--work` ms per message, one at a time, so they can handle `consumers × 1000 /
//! work` a second. At a rate above that the queue grows, and every message waits longer than
//! the one before. Each message's requester waits `--expiry` ms for it.
//!
//! - **Without expiry** (the queue as it is used today), every message is worked on in turn, so
//!   once the backlog is older than the expiry the consumers spend their time on results
//!   nobody will read.
//! - **With expiry** (the deadline-lapin producer and consumer), every message carries its
//!   expiry: the broker drops expired messages at the head of the queue, the consumers discard
//!   those that expire in their prefetch window, and the handler runs with the message's
//!   deadline (work still running at it is stopped).
//!
//! Both runs publish the same schedule to a queue of their own (a unique name, dead-lettering
//! to a second queue that counts what the broker drops, both deleted at the end), and run until
//! every produced message is accounted for: worked, discarded by a consumer, or dropped by the
//! broker. Ages are measured on this host's wall clock, from the `deadline-produced-at` header
//! to the moment the work began; "work on expired messages" is the time workers spent on
//! messages whose age at that moment was already past the expiry, in either run (the run
//! without expiry stamps none, but its messages had the same requesters).
//!
//! Each run has a broker connection of its own (`deadline_lapin::Broker`) that is dialled
//! again when it drops: publishes are confirmed by the broker (and sent again when the
//! confirmation was lost), consumers acknowledge only after the work and subscribe again, and
//! the backlog sampler skips its samples while the broker is down. So a broker restart in the
//! middle of a run loses no live message; the run reports it (`reconnects`, `republished`,
//! `resubscribed`, `redelivered`, and `duplicates`: copies of a message already accounted for,
//! since delivery is then at least once, each message being accounted for once by its id).
//!
//! `--check` fails unless, with expiry, no work went to expired messages, every worked message
//! began within its expiry, and every message was accounted for; and unless, without expiry,
//! work did go to expired messages (otherwise the consumers kept up, and the comparison shows
//! nothing: raise the rate).

mod chart;
mod report;
mod run;
mod tally;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::Args;

/// Arguments of `deadline jobs`.
#[derive(Debug, Args)]
pub(crate) struct JobsArgs {
    /// The RabbitMQ broker (AMQP URL).
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672/%2f")]
    broker: String,
    /// Messages produced per second.
    #[arg(long, default_value_t = 40.0)]
    rate: f64,
    /// How long the producer runs, in seconds.
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Work per message, in ms (each consumer works on one message at a time).
    #[arg(long, default_value_t = 100)]
    work: u64,
    /// Consumers working in parallel.
    #[arg(long, default_value_t = 2)]
    consumers: u16,
    /// How long a message's requester waits for it, in ms: its expiry in the second run.
    #[arg(long, default_value_t = 1_000)]
    expiry: u64,
    /// Messages each consumer takes ahead of its work (the AMQP prefetch).
    #[arg(long, default_value_t = 10)]
    prefetch: u16,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Draw both runs (backlog and age over time) into this SVG file.
    #[arg(long)]
    svg: Option<PathBuf>,
    /// Exit non-zero unless expiry kept all work on live messages (see the module docs).
    #[arg(long)]
    check: bool,
}

/// The settings both runs share.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) broker: String,
    pub(crate) rate: f64,
    pub(crate) seconds: f64,
    pub(crate) work: Duration,
    pub(crate) consumers: u16,
    pub(crate) expiry: Duration,
    pub(crate) prefetch: u16,
}

impl Settings {
    fn from_args(args: &JobsArgs) -> anyhow::Result<Settings> {
        if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= 10_000.0) {
            bail!(
                "--rate must be above 0 and at most 10000 messages a second, not {}",
                args.rate
            );
        }
        if !(args.seconds.is_finite() && args.seconds > 0.0 && args.seconds <= 3_600.0) {
            bail!(
                "--seconds must be above 0 and at most 3600, not {}",
                args.seconds
            );
        }
        if args.work == 0 || args.work > 60_000 {
            bail!("--work must be 1 to 60000 ms, not {}", args.work);
        }
        if args.consumers == 0 || args.consumers > 256 {
            bail!("--consumers must be 1 to 256, not {}", args.consumers);
        }
        if args.expiry == 0 || args.expiry > 3_600_000 {
            bail!("--expiry must be 1 to 3600000 ms, not {}", args.expiry);
        }
        if args.prefetch == 0 {
            bail!("--prefetch must be at least 1");
        }
        Ok(Settings {
            broker: args.broker.clone(),
            rate: args.rate,
            seconds: args.seconds,
            work: Duration::from_millis(args.work),
            consumers: args.consumers,
            expiry: Duration::from_millis(args.expiry),
            prefetch: args.prefetch,
        })
    }

    /// Messages a second the consumers can work on.
    pub(crate) fn capacity(&self) -> f64 {
        f64::from(self.consumers) / self.work.as_secs_f64()
    }
}

/// Runs `deadline jobs`.
pub(crate) async fn run(args: JobsArgs) -> anyhow::Result<ExitCode> {
    let settings = Settings::from_args(&args)?;
    run::probe(&settings.broker).await?;
    if !args.json {
        println!(
            "{} messages/s for {} s to {} consumer(s) of {} ms each (capacity {:.1}/s, {:.1}x), \
             expiry {} ms, broker {}",
            settings.rate,
            settings.seconds,
            settings.consumers,
            settings.work.as_millis(),
            settings.capacity(),
            settings.rate / settings.capacity(),
            settings.expiry.as_millis(),
            crate::redact::redacted(&settings.broker)
        );
    }
    let mut runs = Vec::new();
    for expiry in [false, true] {
        let outcome = run::one(&settings, expiry)
            .await
            .with_context(|| format!("the run {}", report::run_name(expiry)))?;
        if !args.json {
            println!("{}", outcome.line());
        }
        runs.push(outcome);
    }

    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&settings, &runs))?
        );
    }
    if let Some(path) = &args.svg {
        std::fs::write(path, chart::draw(&settings, &runs))
            .with_context(|| format!("writing {}", path.display()))?;
        if !args.json {
            println!("chart: {}", path.display());
        }
    }
    if args.check {
        let failures = report::check(&settings, &runs);
        if !failures.is_empty() {
            for failure in &failures {
                eprintln!("deadline jobs --check: {failure}");
            }
            return Ok(ExitCode::FAILURE);
        }
        if !args.json {
            println!(
                "check passed: with expiry, no work on expired messages and every worked message began within its expiry"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

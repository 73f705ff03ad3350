//! The arguments of `deadline bench` and the variants it compares.

use std::net::SocketAddr;

use anyhow::bail;
use clap::{Args, ValueEnum};
use serde::Serialize;

/// Arguments of `deadline bench`.
#[derive(Debug, Clone, Args)]
pub(crate) struct BenchArgs {
    /// Keep-alive connections driving each variant, each with one request in flight.
    #[arg(long, default_value_t = 32)]
    pub(crate) connections: usize,
    /// Seconds measured per variant in each round.
    #[arg(long, default_value_t = 2.0)]
    pub(crate) seconds: f64,
    /// Rounds; each runs every variant once, alternating their order.
    #[arg(long, default_value_t = 2)]
    pub(crate) rounds: u32,
    /// Milliseconds of warm-up before each measured window (requests sent, not counted).
    #[arg(long, default_value_t = 300)]
    pub(crate) warmup_ms: u64,
    /// The variants to run, comma-separated (default: all nine).
    #[arg(long, value_delimiter = ',')]
    pub(crate) variants: Option<Vec<Variant>>,
    /// The budget every request carries, in ms.
    #[arg(long, default_value_t = 1_950)]
    pub(crate) budget: u64,
    /// Send every request without a budget header, as a caller that knows nothing of deadlines
    /// does (`--budget` is then ignored).
    #[arg(long)]
    pub(crate) no_budget: bool,
    /// Worker threads of the servers' runtime; 1 is a current-thread runtime on one OS thread.
    #[arg(long, default_value_t = 1)]
    pub(crate) server_threads: usize,
    /// Print one JSON document instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Serve only this variant on `--listen` until standard input closes or Ctrl-C (for an
    /// outside load generator such as wrk); measures nothing.
    #[arg(long, value_name = "VARIANT")]
    pub(crate) serve: Option<Variant>,
    /// The address `--serve` listens on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub(crate) listen: SocketAddr,
    /// With `--serve`: export the variant's OpenTelemetry spans over OTLP/HTTP to this
    /// receiver, as `deadline service --otlp` does (to measure what exporting costs).
    #[arg(long, value_name = "URL", requires = "serve")]
    pub(crate) otlp: Option<String>,
    /// Send exactly `--requests` requests to a `--serve` server at this address, one at a time
    /// over one keep-alive connection, then exit (failing on any answer but 200). The fixed
    /// client for counting a server's instructions per request; measures nothing itself.
    #[arg(
        long,
        value_name = "ADDR",
        requires = "requests",
        conflicts_with = "serve"
    )]
    pub(crate) target: Option<SocketAddr>,
    /// How many requests `--target` sends.
    #[arg(long, requires = "target")]
    pub(crate) requests: Option<u64>,
}

impl BenchArgs {
    /// Rejects arguments a run cannot use, naming the flag.
    pub(crate) fn validate(&self) -> anyhow::Result<()> {
        if self.connections == 0 || self.connections > 10_000 {
            bail!(
                "--connections must be between 1 and 10000, not {}",
                self.connections
            );
        }
        if !(self.seconds > 0.0 && self.seconds.is_finite() && self.seconds <= 3_600.0) {
            bail!(
                "--seconds must be above 0 and at most 3600, not {}",
                self.seconds
            );
        }
        if self.rounds == 0 {
            bail!("--rounds must be at least 1");
        }
        if self.requests == Some(0) {
            bail!("--requests must be at least 1");
        }
        if self.server_threads == 0 {
            bail!("--server-threads must be at least 1");
        }
        Ok(())
    }

    /// The budget header's value every request carries, if any.
    pub(crate) fn budget_ms(&self) -> Option<u64> {
        (!self.no_budget).then_some(self.budget)
    }
}

/// One way of serving the trivial handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Variant {
    /// The handler on plain hyper.
    Bare,
    /// The handler behind the enforce layer with the library's defaults: `Deadline-Trace` on
    /// answers to requests that carried a budget, no `Server-Timing`, no context for a request
    /// without a budget.
    Enforce,
    /// The enforce layer writing both answer headers on every answer and making a context for
    /// every request (the defaults before they changed; what `deadline service` does).
    EnforceAll,
    /// The same, recording Prometheus metrics.
    EnforceMetrics,
    /// The enforce layer with its trace shown to nobody (and no `Server-Timing`, no context for
    /// a request without a budget, as by default): what a service that uses none of them pays.
    EnforceQuiet,
    /// The handler behind what a Rust service uses today instead: tower-http's timeout over
    /// tower's concurrency limit.
    Peer,
    /// The peer stack answering with two fixed header lines shaped like the enforce layer's
    /// `Deadline-Trace` and `Server-Timing` (tower-http's `SetResponseHeaderLayer`, static
    /// values): what two answer headers cost on that stack with no value made per request.
    /// The values carry the default budget (1950 ms), whatever the requests carry.
    PeerHeaders,
    /// Two bare hops: the edge calls the second with a plain pooled client.
    ChainBare,
    /// Two hops behind the enforce layer, the edge calling through the propagate layer.
    ChainDeadline,
    /// Two `peer` hops, the edge calling the second with reqwest and a per-request timeout.
    ChainPeer,
}

impl Variant {
    pub(crate) const ALL: [Variant; 10] = [
        Variant::Bare,
        Variant::Enforce,
        Variant::EnforceAll,
        Variant::EnforceMetrics,
        Variant::EnforceQuiet,
        Variant::Peer,
        Variant::PeerHeaders,
        Variant::ChainBare,
        Variant::ChainDeadline,
        Variant::ChainPeer,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Variant::Bare => "bare",
            Variant::Enforce => "enforce",
            Variant::EnforceAll => "enforce-all",
            Variant::EnforceMetrics => "enforce-metrics",
            Variant::EnforceQuiet => "enforce-quiet",
            Variant::ChainBare => "chain-bare",
            Variant::Peer => "peer",
            Variant::PeerHeaders => "peer-headers",
            Variant::ChainDeadline => "chain-deadline",
            Variant::ChainPeer => "chain-peer",
        }
    }

    /// The variants this one is compared with: a layered variant with its bare twin, and the
    /// deadline layers with the peer stack as well.
    pub(crate) fn baselines(self) -> &'static [Variant] {
        match self {
            Variant::Enforce => &[Variant::Bare, Variant::Peer],
            Variant::EnforceAll => &[Variant::Enforce, Variant::PeerHeaders],
            Variant::EnforceMetrics => &[Variant::Enforce, Variant::Bare],
            Variant::EnforceQuiet => &[Variant::Enforce, Variant::Peer],
            Variant::Peer => &[Variant::Bare],
            Variant::PeerHeaders => &[Variant::Peer],
            Variant::ChainDeadline => &[Variant::ChainBare, Variant::ChainPeer],
            Variant::ChainPeer => &[Variant::ChainBare],
            Variant::Bare | Variant::ChainBare => &[],
        }
    }
}

//! `deadline demo --peer grpc-js`: the demo's slow request through a chain written with Node's
//! `@grpc/grpc-js` alone, in the three ways gRPC users write it, side by side with this
//! project's two runs over gRPC.
//!
//! The grpc-js hop ([`SERVICE_JS`]) takes the flags `deadline service` takes in the demo, prints
//! the same ready line and writes the same hold log, so the chain is started by the same
//! [`Chain`] and every figure comes from the same [`summarize`](crate::demo) as the demo's own
//! runs: nothing is computed differently for the peer. The user is the demo's gRPC user in
//! every run: it sends `grpc-timeout` with the user's budget and gives up at the user's wait.
//!
//! The script is carried inside the binary and written to a temporary directory at run time;
//! `@grpc/grpc-js` itself comes from npm (`--node-modules`, by default the directory
//! `scripts/grpc-js.sh` installs it into), so the comparison needs Node and npm but nothing
//! of this project's source tree.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use clap::ValueEnum;
use serde::Serialize;

use crate::demo_run::DemoRun;

/// The grpc-js hop: one service of the chain, written with `@grpc/grpc-js` alone.
pub(crate) const SERVICE_JS: &str = include_str!("peer/grpcjs_service.js");

/// Where `--node-modules` points when not given: what `scripts/grpc-js.sh` installs.
pub(crate) const DEFAULT_NODE_MODULES: &str = "target/grpc-js/node_modules";

/// Another library's chain to compare with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Peer {
    /// Node's `@grpc/grpc-js`: timeouts only, documented propagation, and propagation with
    /// handlers that stop on cancellation.
    #[value(name = "grpc-js")]
    GrpcJs,
}

/// How much of grpc-js's own deadline machinery a chain uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Way {
    /// Each attempt has its own timeout; nothing is propagated; handlers run to their end.
    Timeouts,
    /// Attempts made with the incoming call as `parent`, deadline and cancellation propagated.
    Propagate,
    /// As `Propagate`, and handlers stop when their call is cancelled.
    Cancel,
}

impl Way {
    /// Every way, in the order the comparison prints them.
    pub(crate) const ALL: [Way; 3] = [Way::Timeouts, Way::Propagate, Way::Cancel];

    /// The script's `--way` value.
    fn flag(self) -> &'static str {
        match self {
            Way::Timeouts => "timeouts",
            Way::Propagate => "propagate",
            Way::Cancel => "cancel",
        }
    }

    /// The row's name in the comparison.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Way::Timeouts => "grpc-js, timeouts only",
            Way::Propagate => "grpc-js, parent call (deadline + cancellation propagated)",
            Way::Cancel => "grpc-js, + handlers that stop on cancelled",
        }
    }

    /// The extra flags every hop gets.
    pub(crate) fn args(self) -> Vec<String> {
        vec!["--way".into(), self.flag().into()]
    }
}

/// The grpc-js program: `node` with the script written into `dir`, and where it finds
/// `@grpc/grpc-js`.
#[derive(Debug)]
pub(crate) struct Node {
    program: Vec<OsString>,
    modules: PathBuf,
}

impl Node {
    /// Writes the script into `dir` and checks that `node` runs and `modules` holds grpc-js.
    pub(crate) fn prepare(dir: &Path, modules: &Path) -> anyhow::Result<Node> {
        if !modules.join("@grpc").join("grpc-js").is_dir() {
            bail!(
                "@grpc/grpc-js is not installed in {}: run scripts/grpc-js.sh (it installs Node's \
                 grpc-js there with npm), or give --node-modules DIR where \
                 `npm install @grpc/grpc-js` put it",
                modules.display()
            );
        }
        let modules = modules
            .canonicalize()
            .with_context(|| format!("resolving {}", modules.display()))?;
        let version = std::process::Command::new("node")
            .arg("--version")
            .output()
            .context("running `node --version`: is Node.js installed (apt-get install nodejs)?")?;
        if !version.status.success() {
            bail!("`node --version` failed: {}", version.status);
        }
        let script = dir.join("grpcjs_service.js");
        std::fs::write(&script, SERVICE_JS)
            .with_context(|| format!("writing {}", script.display()))?;
        Ok(Node {
            program: vec!["node".into(), script.into()],
            modules,
        })
    }

    /// The command every hop runs, its flags appended.
    pub(crate) fn program(&self) -> &[OsString] {
        &self.program
    }

    /// Where Node looks for `@grpc/grpc-js` (`NODE_PATH`).
    pub(crate) fn modules(&self) -> &Path {
        &self.modules
    }
}

/// One chain's runs, and the figures the comparison prints of them.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ChainRuns {
    /// The row's name.
    pub(crate) chain: &'static str,
    /// Every run, in order.
    pub(crate) runs: Vec<DemoRun>,
}

/// The median and the worst (largest) of some figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) worst: f64,
}

impl Spread {
    /// The median (the lower middle one for an even count) and the largest; `None` if empty.
    pub(crate) fn of(mut values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        Some(Spread {
            median: values[(values.len() - 1) / 2],
            worst: values[values.len() - 1],
        })
    }
}

impl ChainRuns {
    /// Calls between services, median and worst.
    pub(crate) fn calls(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().map(|r| r.calls as f64).collect())
    }

    /// Calls after the user left, median and worst.
    pub(crate) fn calls_after(&self) -> Option<Spread> {
        Spread::of(
            self.runs
                .iter()
                .map(|r| r.calls_after_user_left as f64)
                .collect(),
        )
    }

    /// Worker time after the user left in ms, median and worst.
    pub(crate) fn waste_ms(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().map(DemoRun::waste_ms).collect())
    }

    /// When the user heard back or gave up in ms, median and worst.
    pub(crate) fn user_ms(&self) -> Option<Spread> {
        Spread::of(self.runs.iter().map(DemoRun::user_left_ms).collect())
    }

    /// What the user heard in most runs, e.g. `DEADLINE_EXCEEDED` or `nothing`.
    pub(crate) fn heard(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for run in &self.runs {
            let heard = run.heard().unwrap_or_else(|| "nothing".into());
            match counts.iter_mut().find(|(h, _)| *h == heard) {
                Some((_, n)) => *n += 1,
                None => counts.push((heard, 1)),
            }
        }
        counts
            .into_iter()
            .max_by_key(|(_, n)| *n)
            .map_or_else(String::new, |(h, _)| h)
    }
}

/// The comparison's table, one row per chain.
pub(crate) fn table(chains: &[ChainRuns]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let count = |s: Option<Spread>| s.map_or_else(|| "-".into(), |s| format!("{:.0}", s.median));
    let worst = |s: Option<Spread>| s.map_or_else(|| "-".into(), |s| format!("{:.0}", s.worst));
    let secs = |ms: f64| format!("{:.2} s", ms / 1_000.0);
    let width = chains.iter().map(|c| c.chain.len()).max().unwrap_or(5);
    let _ = writeln!(
        out,
        "{:<width$}  {:<28}  {:>16}  {:>16}  {:>21}",
        "chain", "user (median)", "calls (after)", "worst calls", "worker s after left"
    );
    let _ = writeln!(
        out,
        "{:<width$}  {:<28}  {:>16}  {:>16}  {:>10} {:>10}",
        "", "", "median", "(after)", "median", "worst"
    );
    for chain in chains {
        let at = chain
            .user_ms()
            .map_or_else(|| "-".into(), |s| secs(s.median));
        let heard = match chain.heard().as_str() {
            "nothing" => format!("nothing, gave up at {at}"),
            heard => format!("{heard} at {at}"),
        };
        let calls = format!("{} ({})", count(chain.calls()), count(chain.calls_after()));
        let worst_calls = format!("{} ({})", worst(chain.calls()), worst(chain.calls_after()));
        let waste = chain.waste_ms();
        let _ = writeln!(
            out,
            "{:<width$}  {:<28}  {:>16}  {:>16}  {:>10} {:>10}",
            chain.chain,
            heard,
            calls,
            worst_calls,
            waste.map_or_else(|| "-".into(), |s| format!("{:.3}", s.median / 1_000.0)),
            waste.map_or_else(|| "-".into(), |s| format!("{:.3}", s.worst / 1_000.0)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_the_lower_median_and_the_largest() {
        assert_eq!(Spread::of(vec![]), None);
        assert_eq!(
            Spread::of(vec![3.0, 1.0, 2.0]),
            Some(Spread {
                median: 2.0,
                worst: 3.0
            })
        );
        assert_eq!(
            Spread::of(vec![4.0, 1.0, 3.0, 2.0]),
            Some(Spread {
                median: 2.0,
                worst: 4.0
            })
        );
    }

    #[test]
    fn a_missing_grpc_js_is_a_clear_error() {
        let dir = std::env::temp_dir();
        let err = Node::prepare(&dir, Path::new("no/such/node_modules")).unwrap_err();
        let text = format!("{err:#}");
        assert!(text.contains("@grpc/grpc-js is not installed"), "{text}");
        assert!(text.contains("scripts/grpc-js.sh"), "{text}");
    }

    #[test]
    fn the_script_takes_the_demo_flags() {
        for flag in [
            "--name",
            "--log",
            "--downstream",
            "--timeout",
            "--attempts",
            "--work",
        ] {
            assert!(
                SERVICE_JS.contains(&format!("opts.{}", &flag[2..])),
                "{flag}"
            );
        }
        assert!(SERVICE_JS.contains("listening on http://127.0.0.1:"));
    }
}

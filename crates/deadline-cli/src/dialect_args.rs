//! `deadline service`'s dialect flags: which headers a budget is read from (`--accept`), which
//! it is sent on in (`--send`), the share of what is left one downstream call may take
//! (`--share`), and the skew guard of an absolute deadline. Bad values are errors before the
//! service starts.

use std::time::Duration;

use clap::Args;
use deadline::absolute::SkewGuard;
use deadline::inbound::SourceSet;
use deadline::plan::Share;
use deadline_http::propagate::DialectSet;

/// The dialect flags, flattened into `deadline service`'s arguments.
#[derive(Debug, Clone, Args)]
pub(crate) struct DialectArgs {
    /// Headers a budget is read from, comma-separated: deadline-budget-ms, grpc-timeout,
    /// connect-timeout-ms, x-envoy-expected-rq-timeout-ms, x-request-deadline. The tightest
    /// wins; a malformed value in any of them is a 400.
    #[arg(long, value_name = "LIST", default_value_t = SourceSet::DEFAULT)]
    pub accept: SourceSet,
    /// Headers the downstream is also told its budget in (Deadline-Budget-Ms always is),
    /// comma-separated: grpc-timeout, connect-timeout-ms, x-envoy-upstream-rq-timeout-ms,
    /// x-request-deadline (RFC 3339) or x-request-deadline:us (epoch microseconds).
    #[arg(long, value_name = "LIST")]
    pub send: Option<DialectSet>,
    /// The most of what is left one downstream call may take, above 0 and at most 1: the
    /// callee's deadline is at most now + share × remaining.
    #[arg(long, value_name = "F", value_parser = parse_share)]
    pub share: Option<Share>,
    /// Milliseconds kept back from every absolute deadline for clock skew.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub assumed_skew: u64,
    /// Milliseconds an absolute deadline may disagree with a relative budget before its clock
    /// is taken as broken and it is ignored.
    #[arg(long, value_name = "MS", default_value_t = 60_000)]
    pub max_skew: u64,
}

fn parse_share(text: &str) -> Result<Share, String> {
    let share: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number"))?;
    Share::new(share).map_err(|e| e.to_string())
}

impl DialectArgs {
    /// The skew guard the flags describe.
    pub(crate) fn guard(&self) -> SkewGuard {
        SkewGuard::new(
            Duration::from_millis(self.assumed_skew),
            Duration::from_millis(self.max_skew),
        )
    }

    /// Refuses outbound flags without a downstream, and a maximum skew below the assumed one.
    pub(crate) fn validate(&self, has_downstream: bool) -> anyhow::Result<()> {
        if !has_downstream {
            if self.send.is_some() {
                anyhow::bail!(
                    "--send names headers for the downstream call: it needs --downstream"
                );
            }
            if self.share.is_some() {
                anyhow::bail!("--share caps the downstream call: it needs --downstream");
            }
        }
        if self.max_skew < self.assumed_skew {
            anyhow::bail!(
                "--max-skew ({} ms) must be at least --assumed-skew ({} ms)",
                self.max_skew,
                self.assumed_skew
            );
        }
        Ok(())
    }
}

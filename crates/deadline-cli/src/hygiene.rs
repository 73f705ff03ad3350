//! Resource hygiene of a load run: each service's tokio tasks, open file descriptors and
//! requests in flight, read from its `GET /debug/runtime` when idle before the run and again
//! once the run has drained, so a leak (a task, a socket or a request that never ends) shows.
//!
//! **What "back to idle" allows.** Before the run a service has no connections but the probe's
//! own (one task, one descriptor; the after sample has it too). After the run the generator drops
//! its users' client, closing their connections, and the services' pooled connections to their
//! downstreams close once idle for `deadline service --pool-idle-timeout` (2 s, checked every
//! 2 s). The sampler waits for in-flight work to end (the baseline keeps working after its users
//! left), then up to [`SETTLE_TIMEOUT`] for the figures to come back. What may legitimately stay
//! is [`TASK_SLACK`] tasks and [`FD_SLACK`] descriptors per service: the connection pool's
//! eviction timer (a task that lives as long as the pool), and a closing connection caught in the
//! middle of its last step. Anything more is reported, and fails `deadline load --check`.

use std::time::Duration;

use anyhow::{Context as _, anyhow};
use http_body_util::BodyExt as _;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

use crate::harness::Chain;
use crate::service::probe::RUNTIME_PATH;
use crate::users::user_client;

/// Tasks a service may keep beyond its idle count after a run: the pool's eviction timer.
pub(crate) const TASK_SLACK: usize = 1;
/// Descriptors a service may keep beyond its idle count after a run.
pub(crate) const FD_SLACK: usize = 2;
/// How long in-flight work may take to end after the last user left before the sampler stops
/// waiting for it: as long as a service itself waits for it when told to stop.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(600);
/// How long, once nothing is in flight, the figures may take to come back to idle: twice the
/// pool's idle timeout and eviction period, with room to spare.
pub(crate) const SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the sampler reads while waiting.
const POLL: Duration = Duration::from_millis(100);

/// One reading of a service's `GET /debug/runtime`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RuntimeSample {
    /// Tasks alive on its tokio runtime.
    pub alive_tasks: usize,
    /// Open file descriptors (null off Linux).
    pub open_fds: Option<usize>,
    /// Requests in flight.
    pub in_flight: usize,
}

/// One service's figures around a run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ServiceHygiene {
    /// The service's name.
    pub name: String,
    /// Read before the first user was sent.
    pub idle: RuntimeSample,
    /// Read after the run drained: the first reading back within the slack, or the last one.
    pub after: RuntimeSample,
    /// How long after the last user left the figures were back (or the sampler gave up), ms.
    pub settled_ms: f64,
    /// Whether they came back within the slack ([`TASK_SLACK`], [`FD_SLACK`]).
    pub returned: bool,
}

impl ServiceHygiene {
    /// `1/14 -> 1/14`: tasks and descriptors, idle and after.
    pub(crate) fn cell(&self) -> String {
        let fds = |s: &RuntimeSample| s.open_fds.map_or("-".to_owned(), |n| n.to_string());
        format!(
            "{}/{} -> {}/{}{}",
            self.idle.alive_tasks,
            fds(&self.idle),
            self.after.alive_tasks,
            fds(&self.after),
            if self.returned { "" } else { " !" }
        )
    }

    /// What is wrong, if the service did not come back.
    pub(crate) fn failure(&self, mode: &str) -> Option<String> {
        let fds = |s: &RuntimeSample| s.open_fds.map_or("-".to_owned(), |n| n.to_string());
        (!self.returned).then(|| {
            format!(
                "{mode}: {} did not return to idle {:.1} s after the run: tasks {} -> {}, open fds \
                 {} -> {}, in flight {} (slack {TASK_SLACK} task, {FD_SLACK} fds)",
                self.name,
                self.settled_ms / 1_000.0,
                self.idle.alive_tasks,
                self.after.alive_tasks,
                fds(&self.idle),
                fds(&self.after),
                self.after.in_flight
            )
        })
    }
}

/// Whether `after` is back to `idle`, within the slack.
fn back(idle: &RuntimeSample, after: &RuntimeSample) -> bool {
    after.in_flight == 0
        && after.alive_tasks <= idle.alive_tasks + TASK_SLACK
        && match (idle.open_fds, after.open_fds) {
            (Some(idle), Some(after)) => after <= idle + FD_SLACK,
            _ => true,
        }
}

/// Reads one service's `GET /debug/runtime` over a connection of its own, closed after.
pub(crate) async fn sample(base: &str) -> anyhow::Result<RuntimeSample> {
    let body = admin_get(base, RUNTIME_PATH).await?;
    serde_json::from_slice(&body).with_context(|| format!("reading {base}{RUNTIME_PATH}"))
}

/// `GET base + path` of one of a service's own pages (answered before its enforce layer), over
/// a connection of its own, closed after: the body of a success within 5 s, or why not.
pub(crate) async fn admin_get(base: &str, path: &str) -> anyhow::Result<bytes::Bytes> {
    let client = user_client();
    let request = http::Request::get(format!("{base}{path}"))
        .header(http::header::CONNECTION, "close")
        .body(http_body_util::Empty::new())
        .with_context(|| format!("building the request for {path}"))?;
    let (status, body) = tokio::time::timeout(Duration::from_secs(5), async {
        let response = client.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        Ok::<_, anyhow::Error>((status, body))
    })
    .await
    .map_err(|_| anyhow!("{base}{path} did not answer within 5 s"))??;
    if !status.is_success() {
        return Err(anyhow!("{base}{path} answered {status}"));
    }
    Ok(body)
}

/// Reads every service of `chain`, edge first.
pub(crate) async fn sample_all(chain: &Chain) -> anyhow::Result<Vec<(String, RuntimeSample)>> {
    let mut samples = Vec::new();
    for (name, url) in chain.services() {
        samples.push((name.to_owned(), sample(&url).await?));
    }
    Ok(samples)
}

/// Waits for every service of `chain` to come back to its `idle` figures (see the module docs)
/// and says how each did. `since` is when the last user left.
pub(crate) async fn settle(
    chain: &Chain,
    idle: &[(String, RuntimeSample)],
    since: Instant,
) -> anyhow::Result<Vec<ServiceHygiene>> {
    let services = chain.services();
    // First the work: nothing in flight anywhere (the baseline runs on after its users left).
    let drain_until = Instant::now() + DRAIN_TIMEOUT;
    loop {
        let mut busy = false;
        for (_, url) in &services {
            // A service still swamped (past capacity, without deadlines) may not answer its
            // own page within the sample's 5 s: that is still draining, until the drain's end.
            busy |= match sample(url).await {
                Ok(sample) => sample.in_flight > 0,
                Err(_) if Instant::now() <= drain_until => true,
                Err(err) => return Err(err),
            };
        }
        if !busy || Instant::now() > drain_until {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
    // Then the connections and tasks.
    let settle_until = Instant::now() + SETTLE_TIMEOUT;
    let mut result = Vec::new();
    for ((name, url), (_, idle)) in services.iter().zip(idle) {
        let (after, returned) = loop {
            let after = sample(url).await?;
            if back(idle, &after) {
                break (after, true);
            }
            if Instant::now() > settle_until {
                break (after, false);
            }
            tokio::time::sleep(POLL).await;
        };
        result.push(ServiceHygiene {
            name: (*name).to_owned(),
            idle: *idle,
            after,
            settled_ms: Instant::now()
                .saturating_duration_since(since)
                .as_secs_f64()
                * 1_000.0,
            returned,
        });
    }
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(tasks: usize, fds: Option<usize>, in_flight: usize) -> RuntimeSample {
        RuntimeSample {
            alive_tasks: tasks,
            open_fds: fds,
            in_flight,
        }
    }

    #[test]
    fn back_to_idle_allows_the_slack_and_no_more() {
        let idle = s(1, Some(14), 0);
        assert!(back(&idle, &idle));
        assert!(back(&idle, &s(1 + TASK_SLACK, Some(14 + FD_SLACK), 0)));
        assert!(!back(&idle, &s(2 + TASK_SLACK, Some(14), 0)));
        assert!(!back(&idle, &s(1, Some(15 + FD_SLACK), 0)));
        assert!(!back(&idle, &s(1, Some(14), 1)), "work still in flight");
        assert!(back(&s(1, None, 0), &s(1, None, 0)), "no /proc: tasks only");
    }
}

//! What each service's own Prometheus metrics (`GET /metrics`) say at the end of a load run:
//! read once the run has drained, just before the services stop.
//!
//! The headline is the headroom at reply: how much of its budget each request had left when
//! the hop wrote its answer, a histogram whose buckets say how close each hop cut it. Beside it,
//! the requests by outcome, the 504s by the phase that ran out, and the seconds of work done
//! after the caller had left, as the services counted them.

use std::collections::BTreeMap;

use anyhow::Context as _;
use serde::Serialize;

use crate::harness::Chain;
use crate::service::probe::METRICS_PATH;

/// One service's metrics at the end of a run.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct ServiceMetrics {
    /// The service's name (its `service` label).
    pub name: String,
    /// `deadline_requests_total` by outcome.
    pub requests: BTreeMap<String, u64>,
    /// `deadline_exceeded_total` by phase.
    pub exceeded: BTreeMap<String, u64>,
    /// `deadline_worker_seconds_after_caller_left_total`.
    pub worker_seconds_after_caller_left: f64,
    /// `deadline_headroom_seconds`: the budget left when each reply was written.
    pub headroom: Headroom,
}

/// A histogram's figures, in ms.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Headroom {
    /// Replies observed.
    pub count: u64,
    /// Their mean headroom.
    pub mean_ms: f64,
    /// The bucket bounds the median, 90th and 99th percentile fall under (`null` without
    /// observations; a value above the last finite bound reads as infinity, `null` in JSON).
    pub p50_le_ms: Option<f64>,
    pub p90_le_ms: Option<f64>,
    pub p99_le_ms: Option<f64>,
    /// Cumulative counts: `(upper bound in ms, replies with at most that much left)`.
    pub buckets: Vec<(f64, u64)>,
}

/// Reads every service of `chain`, edge first.
pub(crate) async fn read_all(chain: &Chain) -> anyhow::Result<Vec<ServiceMetrics>> {
    let mut all = Vec::new();
    for (name, url) in chain.services() {
        let text = fetch(&url).await?;
        all.push(parse(name, &text));
    }
    Ok(all)
}

/// `GET /metrics` of the service at `base`, over a connection of its own, closed after.
async fn fetch(base: &str) -> anyhow::Result<String> {
    let body = crate::hygiene::admin_get(base, METRICS_PATH).await?;
    String::from_utf8(body.to_vec()).with_context(|| format!("reading {base}{METRICS_PATH}"))
}

/// `seconds` in ms, rounded to the µs (so a bound of 0.05 s reads 50, not 50.000000000000007).
fn ms(seconds: f64) -> f64 {
    (seconds * 1_000_000.0).round() / 1_000.0
}

/// A sample's labels, as `(name, value)` pairs.
type Labels<'a> = Vec<(&'a str, &'a str)>;

/// One sample line: its metric name, its labels, its value.
fn sample(line: &str) -> Option<(&str, Labels<'_>, f64)> {
    if line.starts_with('#') {
        return None;
    }
    let (series, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match series.split_once('{') {
        Some((name, rest)) => (name, rest.strip_suffix('}')?),
        None => (series, ""),
    };
    // Label values here are service names and fixed tokens: no commas or quotes inside.
    let labels = labels
        .split(',')
        .filter_map(|pair| {
            let (key, value) = pair.split_once('=')?;
            Some((key, value.trim_matches('"')))
        })
        .collect();
    Some((name, labels, value))
}

/// The figures of the service `name` in a scrape's `text`.
pub(crate) fn parse(name: &str, text: &str) -> ServiceMetrics {
    let mut metrics = ServiceMetrics {
        name: name.to_owned(),
        ..ServiceMetrics::default()
    };
    let mut sum = 0.0;
    for (metric, labels, value) in text.lines().filter_map(sample) {
        let label = |key: &str| labels.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
        if label("service") != Some(name) {
            continue;
        }
        match metric {
            "deadline_requests_total" => {
                if let Some(outcome) = label("outcome") {
                    metrics.requests.insert(outcome.to_owned(), value as u64);
                }
            }
            "deadline_exceeded_total" => {
                if let Some(phase) = label("phase") {
                    metrics.exceeded.insert(phase.to_owned(), value as u64);
                }
            }
            "deadline_worker_seconds_after_caller_left_total" => {
                metrics.worker_seconds_after_caller_left = value;
            }
            "deadline_headroom_seconds_bucket" => {
                if let Some(le) = label("le").and_then(|le| le.parse::<f64>().ok()) {
                    metrics.headroom.buckets.push((ms(le), value as u64));
                }
            }
            "deadline_headroom_seconds_count" => metrics.headroom.count = value as u64,
            "deadline_headroom_seconds_sum" => sum = value,
            _ => {}
        }
    }
    let headroom = &mut metrics.headroom;
    headroom.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    if headroom.count > 0 {
        headroom.mean_ms = sum * 1_000.0 / headroom.count as f64;
        let quantile = |q: f64| {
            let rank = (q * headroom.count as f64).ceil() as u64;
            headroom
                .buckets
                .iter()
                .find(|(_, n)| *n >= rank)
                .map(|(le, _)| *le)
        };
        headroom.p50_le_ms = quantile(0.50);
        headroom.p90_le_ms = quantile(0.90);
        headroom.p99_le_ms = quantile(0.99);
    }
    metrics
}

/// The rows the load table adds, one per service and figure: `(label, one cell per run)`.
pub(crate) fn rows(runs: &[&[ServiceMetrics]]) -> Vec<(String, Vec<String>)> {
    let names: Vec<String> = runs
        .first()
        .map(|services| services.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    let le = |ms: Option<f64>| match ms {
        Some(ms) if ms.is_finite() => format!("<={ms}"),
        Some(_) => ">1h".to_owned(),
        None => "-".to_owned(),
    };
    let mut rows = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let cells = |cell: &dyn Fn(&ServiceMetrics) -> String| {
            runs.iter()
                .map(|services| services.get(i).map_or("-".to_owned(), cell))
                .collect()
        };
        rows.push((
            format!("{name} headroom p50/p99 ms"),
            cells(&|m| format!("{}/{}", le(m.headroom.p50_le_ms), le(m.headroom.p99_le_ms))),
        ));
        rows.push((
            format!("{name} 504s queue/work/call"),
            cells(&|m| {
                let n = |phase: &str| m.exceeded.get(phase).copied().unwrap_or(0);
                format!("{}/{}/{}", n("queue"), n("work"), n("calling"))
            }),
        ));
        rows.push((
            format!("{name} work after caller left"),
            cells(&|m| format!("{:.1} s", m.worker_seconds_after_caller_left)),
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCRAPE: &str = r#"# HELP deadline_requests Requests by how they ended at this hop.
# TYPE deadline_requests counter
deadline_requests_total{service="orders",outcome="ok"} 7
deadline_requests_total{service="orders",outcome="deadline"} 3
deadline_requests_total{service="other",outcome="ok"} 100
deadline_exceeded_total{service="orders",phase="calling"} 2
deadline_worker_seconds_after_caller_left_total{service="orders"} 1.5
deadline_headroom_seconds_sum{service="orders"} 0.5
deadline_headroom_seconds_count{service="orders"} 10
deadline_headroom_seconds_bucket{le="0.01",service="orders"} 3
deadline_headroom_seconds_bucket{le="0.1",service="orders"} 9
deadline_headroom_seconds_bucket{le="1.0",service="orders"} 10
deadline_headroom_seconds_bucket{le="+Inf",service="orders"} 10
# EOF
"#;

    #[test]
    fn a_scrape_reads_back_into_one_services_figures() {
        let m = parse("orders", SCRAPE);
        assert_eq!(m.requests["ok"], 7);
        assert_eq!(m.requests["deadline"], 3);
        assert_eq!(m.exceeded["calling"], 2);
        assert_eq!(m.worker_seconds_after_caller_left, 1.5);
        assert_eq!(m.headroom.count, 10);
        assert_eq!(m.headroom.mean_ms, 50.0);
        assert_eq!(m.headroom.p50_le_ms, Some(100.0));
        assert_eq!(m.headroom.p90_le_ms, Some(100.0));
        assert_eq!(m.headroom.p99_le_ms, Some(1_000.0));
        assert_eq!(m.headroom.buckets.first(), Some(&(10.0, 3)));
        assert_eq!(m.headroom.buckets.last(), Some(&(f64::INFINITY, 10)));
    }

    #[test]
    fn no_replies_no_quantiles() {
        let m = parse("nobody", SCRAPE);
        assert_eq!(m.headroom.count, 0);
        assert_eq!(m.headroom.p50_le_ms, None);
        assert!(m.requests.is_empty());
    }
}

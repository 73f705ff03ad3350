//! What a run reports: each variant's figures with every round merged, the ratios of the
//! layered variants to their twins, and the table.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;

use super::args::Variant;
use super::generator::{Window, new_histogram};

/// The whole run's figures (`--json`).
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) connections: usize,
    pub(crate) seconds_per_round: f64,
    pub(crate) rounds: u32,
    pub(crate) warmup_ms: u64,
    /// The budget header's value on every request; `null` with `--no-budget`.
    pub(crate) budget_ms: Option<u64>,
    pub(crate) server_threads: usize,
    /// `/proc/loadavg`'s three figures before and after the run (empty off Linux).
    pub(crate) load_average_before: Vec<f64>,
    pub(crate) load_average_after: Vec<f64>,
    pub(crate) cpus: usize,
    pub(crate) variants: Vec<VariantSummary>,
    pub(crate) ratios: Vec<Ratio>,
}

/// One variant's figures, every round merged.
#[derive(Debug, Serialize)]
pub(crate) struct VariantSummary {
    pub(crate) variant: Variant,
    pub(crate) requests: u64,
    /// Answers other than 200, and connections that failed.
    pub(crate) errors: u64,
    pub(crate) requests_per_second: f64,
    /// Each round's requests per second, in round order.
    pub(crate) rounds_requests_per_second: Vec<f64>,
    pub(crate) p50_us: u64,
    pub(crate) p99_us: u64,
    pub(crate) p999_us: u64,
    pub(crate) max_us: u64,
    pub(crate) mean_us: f64,
    /// CPU time of the server threads per request, in µs (both hops, for a chain).
    pub(crate) server_cpu_us_per_request: Option<f64>,
    /// Server threads' CPU time over the measured time, per server thread (1.0: saturated).
    pub(crate) server_busy: Option<f64>,
    /// The generator thread's CPU time over the measured time.
    pub(crate) client_busy: Option<f64>,
}

/// A variant against one of its baselines: a layered variant against its bare twin, or the
/// deadline layers against the peer stack.
#[derive(Debug, Serialize)]
pub(crate) struct Ratio {
    variant: Variant,
    baseline: Variant,
    /// Requests per second of the variant over the baseline's, every round pooled.
    throughput_ratio: f64,
    /// The median over rounds of the same ratio within each round (the two ran back to back),
    /// which a drift in the machine's load between rounds moves less.
    throughput_ratio_median_of_rounds: f64,
    p50_added_us: i64,
    p99_added_us: i64,
    p999_added_us: i64,
    server_cpu_added_us_per_request: Option<f64>,
}

/// One variant's figures from its windows, every round merged.
pub(crate) fn merge(
    variant: Variant,
    windows: &[Window],
    server_threads: usize,
) -> anyhow::Result<VariantSummary> {
    let mut histogram = new_histogram()?;
    let (mut requests, mut errors, mut elapsed) = (0u64, 0u64, Duration::ZERO);
    let mut server_cpu = Some(Duration::ZERO);
    let mut client_cpu = Some(Duration::ZERO);
    for w in windows {
        histogram.add(&w.histogram)?;
        requests += w.requests;
        errors += w.errors;
        elapsed += w.elapsed;
        server_cpu = server_cpu.zip(w.server_cpu).map(|(a, b)| a + b);
        client_cpu = client_cpu.zip(w.client_cpu).map(|(a, b)| a + b);
    }
    let secs = elapsed.as_secs_f64().max(f64::MIN_POSITIVE);
    Ok(VariantSummary {
        variant,
        requests,
        errors,
        requests_per_second: requests as f64 / secs,
        rounds_requests_per_second: windows
            .iter()
            .map(|w| w.requests as f64 / w.elapsed.as_secs_f64().max(f64::MIN_POSITIVE))
            .collect(),
        p50_us: histogram.value_at_quantile(0.50),
        p99_us: histogram.value_at_quantile(0.99),
        p999_us: histogram.value_at_quantile(0.999),
        max_us: histogram.max(),
        mean_us: histogram.mean(),
        server_cpu_us_per_request: server_cpu
            .filter(|_| requests > 0)
            .map(|cpu| cpu.as_secs_f64() * 1e6 / requests as f64),
        server_busy: server_cpu.map(|cpu| cpu.as_secs_f64() / secs / server_threads as f64),
        client_busy: client_cpu.map(|cpu| cpu.as_secs_f64() / secs),
    })
}

/// Each variant against each of its baselines that ran.
pub(crate) fn ratios(summaries: &[VariantSummary]) -> Vec<Ratio> {
    let find = |v: Variant| summaries.iter().find(|f| f.variant == v);
    summaries
        .iter()
        .flat_map(|f| {
            f.variant
                .baselines()
                .iter()
                .filter_map(move |b| find(*b).map(|base| (f, base)))
        })
        .map(|(f, base)| {
            let added = |a: u64, b: u64| a as i64 - b as i64;
            Ratio {
                variant: f.variant,
                baseline: base.variant,
                throughput_ratio: f.requests_per_second
                    / base.requests_per_second.max(f64::MIN_POSITIVE),
                throughput_ratio_median_of_rounds: median(
                    f.rounds_requests_per_second
                        .iter()
                        .zip(&base.rounds_requests_per_second)
                        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
                        .collect(),
                ),
                p50_added_us: added(f.p50_us, base.p50_us),
                p99_added_us: added(f.p99_us, base.p99_us),
                p999_added_us: added(f.p999_us, base.p999_us),
                server_cpu_added_us_per_request: f
                    .server_cpu_us_per_request
                    .zip(base.server_cpu_us_per_request)
                    .map(|(a, b)| a - b),
            }
        })
        .collect()
}

/// The median of `values` (0 for none).
fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    }
}

/// The human-readable report.
pub(crate) fn table(report: &Report) -> String {
    let mut out = String::new();
    let load = |l: &[f64]| {
        if l.is_empty() {
            "unknown".to_owned()
        } else {
            l.iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(" ")
        }
    };
    let _ = writeln!(
        out,
        "deadline bench: {} keep-alive connections per variant, {} round(s) of {} s each \
         (after {} ms warm-up), {}, {} server thread(s), {} CPUs",
        report.connections,
        report.rounds,
        report.seconds_per_round,
        report.warmup_ms,
        report.budget_ms.map_or_else(
            || "no budget header".to_owned(),
            |ms| format!("budget {ms} ms")
        ),
        report.server_threads,
        report.cpus
    );
    let _ = writeln!(
        out,
        "load average before: {}; after: {}",
        load(&report.load_average_before),
        load(&report.load_average_after)
    );
    let _ = writeln!(
        out,
        "{:<15} {:>10} {:>8} {:>8} {:>8} {:>13} {:>7} {:>7} {:>7}  per round req/s",
        "variant",
        "req/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "srv CPU µs/req",
        "srv %",
        "gen %",
        "errors"
    );
    variant_rows(report, &mut out);
    for r in &report.ratios {
        let _ = writeln!(
            out,
            "{} / {}: throughput ratio {:.3} (median of rounds {:.3}); added latency p50 {:+} µs, \
             p99 {:+} µs, p99.9 {:+} µs; added server CPU {} µs/request",
            r.variant.name(),
            r.baseline.name(),
            r.throughput_ratio,
            r.throughput_ratio_median_of_rounds,
            r.p50_added_us,
            r.p99_added_us,
            r.p999_added_us,
            r.server_cpu_added_us_per_request
                .map_or("-".to_owned(), |x| format!("{x:+.2}"))
        );
    }
    out
}

/// One line per variant of the table: its throughput, latencies, CPU and errors, and each
/// round's throughput.
fn variant_rows(report: &Report, out: &mut String) {
    let opt = |x: Option<f64>, scale: f64, digits: usize| {
        x.map_or("-".to_owned(), |x| format!("{:.*}", digits, x * scale))
    };
    for v in &report.variants {
        let rounds: Vec<String> = v
            .rounds_requests_per_second
            .iter()
            .map(|r| format!("{r:.0}"))
            .collect();
        let _ = writeln!(
            out,
            "{:<15} {:>10.0} {:>8} {:>8} {:>8} {:>13} {:>7} {:>7} {:>7}  {}",
            v.variant.name(),
            v.requests_per_second,
            v.p50_us,
            v.p99_us,
            v.p999_us,
            opt(v.server_cpu_us_per_request, 1.0, 2),
            opt(v.server_busy, 100.0, 0),
            opt(v.client_busy, 100.0, 0),
            v.errors,
            rounds.join(" ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![]), 0.0);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}

//! The table `deadline load` prints: both runs side by side, one figure a row.

use super::{LoadArgs, LoadRun};
use crate::harness::ProcessUsage;
use crate::hygiene::ServiceHygiene;
use crate::placement::Placement;

pub(super) fn print_table(args: &LoadArgs, placement: &Placement, runs: &[LoadRun]) {
    println!("deadline load: {}", args.describe());
    for line in placement.describe() {
        println!("  {line}");
    }
    let header: Vec<String> = runs
        .iter()
        .map(|r| {
            if r.deadlines {
                format!(
                    "with, {}{}{}",
                    r.queue,
                    if r.admission { "+adm" } else { "" },
                    if r.max_queue_wait_ms.is_some() {
                        "+cap"
                    } else {
                        ""
                    }
                )
            } else {
                "without".to_owned()
            }
        })
        .collect();
    let row = |label: &str, cells: Vec<String>| {
        let mut line = format!("{label:<30}");
        for cell in cells {
            // At least one space between cells, however wide a cell is.
            line.push_str(&format!(" {cell:>15}"));
        }
        println!("{}", line.trim_end());
    };
    row("deadlines", header);
    row(
        "requests (slow)",
        runs.iter()
            .map(|r| format!("{} ({})", r.requests, r.slow_requests))
            .collect(),
    );
    row(
        "answered in time",
        runs.iter()
            .map(|r| format!("{} {:.1} %", r.in_time, r.in_time_share * 100.0))
            .collect(),
    );
    row(
        "missed: slow / fast",
        runs.iter()
            .map(|r| format!("{} / {}", r.slow_missed, r.fast_missed))
            .collect(),
    );
    row(
        "user latency p50 / p99",
        runs.iter()
            .map(|r| format!("{} / {} ms", r.latency_p50_ms, r.latency_p99_ms))
            .collect(),
    );
    let classes = runs
        .iter()
        .map(|r| r.budget_classes.len())
        .max()
        .unwrap_or(0);
    for class in 0..classes {
        let Some(wait) = runs
            .iter()
            .find_map(|r| r.budget_classes.get(class).map(|c| c.wait_ms))
        else {
            continue;
        };
        row(
            &format!("  {wait} ms users in time"),
            runs.iter()
                .map(|r| {
                    r.budget_classes.get(class).map_or_else(String::new, |c| {
                        format!("{} {:.1} %", c.in_time, c.in_time_share * 100.0)
                    })
                })
                .collect(),
        );
    }
    if runs.iter().any(|r| r.outage.is_some()) {
        row(
            "calls per request in outage",
            runs.iter()
                .map(|r| {
                    r.calls_per_request_in_outage
                        .map_or("-".to_owned(), |c| format!("{c:.2}"))
                })
                .collect(),
        );
        row(
            "  in time during / before",
            runs.iter()
                .map(|r| {
                    r.outage.as_ref().map_or("-".to_owned(), |o| {
                        format!(
                            "{:.0} / {:.0} %",
                            o.in_time_share * 100.0,
                            o.before_share * 100.0
                        )
                    })
                })
                .collect(),
        );
        row(
            "  back in time after",
            runs.iter()
                .map(|r| {
                    r.outage.as_ref().map_or("-".to_owned(), |o| {
                        o.recovery_s
                            .map_or("never".to_owned(), |s| format!("{s:.1} s"))
                    })
                })
                .collect(),
        );
    }
    row(
        "goodput / capacity",
        runs.iter()
            .map(|r| format!("{:.1} / {:.0}/s", r.goodput_per_s, r.capacity_per_s))
            .collect(),
    );
    row(
        "in-time latency p50 / p99",
        runs.iter()
            .map(|r| format!("{} / {} ms", r.in_time_p50_ms, r.in_time_p99_ms))
            .collect(),
    );
    row(
        "refused: n, p50 / p99",
        runs.iter()
            .map(|r| {
                format!(
                    "{}, {} / {} ms",
                    r.refused, r.refused_p50_ms, r.refused_p99_ms
                )
            })
            .collect(),
    );
    row(
        "shed by inventory, p99 wait",
        runs.iter()
            .map(|r| format!("{}, {:.1} ms", r.shed, r.shed_p99_ms))
            .collect(),
    );
    row(
        "inventory work, missed users",
        runs.iter()
            .map(|r| format!("{:.1} s", r.inventory_worker_ms_on_missed / 1_000.0))
            .collect(),
    );
    row(
        "calls between services",
        runs.iter().map(|r| r.calls.to_string()).collect(),
    );
    row(
        "worker time",
        runs.iter()
            .map(|r| format!("{:.1} s", r.worker_ms / 1_000.0))
            .collect(),
    );
    row(
        "  after users left",
        runs.iter()
            .map(|r| format!("{:.1} s", r.worker_ms_after_users_left / 1_000.0))
            .collect(),
    );
    row(
        "  wasted share",
        runs.iter()
            .map(|r| format!("{:.1} %", r.wasted_share * 100.0))
            .collect(),
    );
    row(
        "drain after last user",
        runs.iter()
            .map(|r| format!("{:.2} s", r.drain_ms / 1_000.0))
            .collect(),
    );
    if runs.iter().any(|r| r.database.is_some()) {
        row(
            "database time (pg_stat_act.)",
            runs.iter()
                .map(|r| {
                    r.database
                        .map_or("-".to_owned(), |d| format!("{:.1} s", d.db_seconds))
                })
                .collect(),
        );
        row(
            "  after users left",
            runs.iter()
                .map(|r| {
                    r.database.map_or("-".to_owned(), |d| {
                        format!("{:.1} s", d.db_seconds_after_users_left)
                    })
                })
                .collect(),
        );
    }
    row(
        "sent rate, worst lateness",
        runs.iter()
            .map(|r| {
                format!(
                    "{:.1}/s {:.1} ms",
                    r.achieved_rate, r.worst_send_lateness_ms
                )
            })
            .collect(),
    );
    row(
        "send lateness p99",
        runs.iter()
            .map(|r| format!("{:.1} ms", r.send_lateness_p99_ms))
            .collect(),
    );
    let names: Vec<String> = runs
        .first()
        .map(|r| r.services.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    for (i, name) in names.iter().enumerate() {
        row(
            &format!("{name} CPU, peak RSS"),
            runs.iter()
                .map(|r| r.services.get(i).map_or("-".to_owned(), usage_cell))
                .collect(),
        );
    }
    for (i, name) in names.iter().enumerate() {
        row(
            &format!("{name} tasks/fds"),
            runs.iter()
                .map(|r| {
                    r.hygiene
                        .get(i)
                        .map_or("-".to_owned(), ServiceHygiene::cell)
                })
                .collect(),
        );
    }
    let metrics: Vec<&[super::metrics::ServiceMetrics]> =
        runs.iter().map(|r| r.metrics.as_slice()).collect();
    for (label, cells) in super::metrics::rows(&metrics) {
        row(&label, cells);
    }
    row(
        "generator CPU",
        runs.iter()
            .map(|r| {
                r.generator_cpu_ms
                    .map_or("-".to_owned(), |ms| format!("{:.1} s", ms / 1_000.0))
            })
            .collect(),
    );
}

/// `1.2 s, 25 MiB`: CPU time and peak memory, or `-` where unknown.
fn usage_cell(usage: &ProcessUsage) -> String {
    let cpu = usage
        .cpu_ms
        .map_or("-".to_owned(), |ms| format!("{:.1} s", ms / 1_000.0));
    let rss = usage.peak_rss_kib.map_or("-".to_owned(), |kib| {
        format!("{:.0} MiB", kib as f64 / 1_024.0)
    });
    format!("{cpu}, {rss}")
}

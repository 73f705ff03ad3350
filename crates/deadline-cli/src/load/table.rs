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
    let table = Table { runs };
    table.row("deadlines", runs.iter().map(run_label).collect());
    table.users();
    table.outage();
    table.service_figures();
    table.work();
    table.processes();
}

/// A run's column heading: with or without deadlines, and inventory's queue rules.
fn run_label(r: &LoadRun) -> String {
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
}

/// The runs side by side, one figure a row.
struct Table<'a> {
    runs: &'a [LoadRun],
}

impl Table<'_> {
    fn row(&self, label: &str, cells: Vec<String>) {
        let mut line = format!("{label:<30}");
        for cell in cells {
            // At least one space between cells, however wide a cell is.
            line.push_str(&format!(" {cell:>15}"));
        }
        println!("{}", line.trim_end());
    }

    /// One row of `cell` over every run.
    fn each(&self, label: &str, cell: impl Fn(&LoadRun) -> String) {
        self.row(label, self.runs.iter().map(cell).collect());
    }

    /// What the users heard.
    fn users(&self) {
        self.each("requests (slow)", |r| {
            format!("{} ({})", r.requests, r.slow_requests)
        });
        self.each("answered in time", |r| {
            format!("{} {:.1} %", r.in_time, r.in_time_share * 100.0)
        });
        self.each("missed: slow / fast", |r| {
            format!("{} / {}", r.slow_missed, r.fast_missed)
        });
        self.each("user latency p50 / p99", |r| {
            format!("{} / {} ms", r.latency_p50_ms, r.latency_p99_ms)
        });
        let kinds: std::collections::BTreeSet<&str> = self
            .runs
            .iter()
            .flat_map(|r| r.user_errors.keys().copied())
            .collect();
        for kind in kinds {
            self.each(&format!("  failed: {kind}"), |r| {
                r.user_errors.get(kind).copied().unwrap_or(0).to_string()
            });
        }
        self.budget_classes();
    }

    /// How each class of `--budget-mix` fared.
    fn budget_classes(&self) {
        let classes = self
            .runs
            .iter()
            .map(|r| r.budget_classes.len())
            .max()
            .unwrap_or(0);
        for class in 0..classes {
            let Some(wait) = self
                .runs
                .iter()
                .find_map(|r| r.budget_classes.get(class).map(|c| c.wait_ms))
            else {
                continue;
            };
            self.each(&format!("  {wait} ms users in time"), |r| {
                r.budget_classes.get(class).map_or_else(String::new, |c| {
                    format!("{} {:.1} %", c.in_time, c.in_time_share * 100.0)
                })
            });
        }
    }

    /// The outage's figures (with `--outage`).
    fn outage(&self) {
        if self.runs.iter().all(|r| r.outage.is_none()) {
            return;
        }
        self.each("calls per request in outage", |r| {
            r.calls_per_request_in_outage
                .map_or("-".to_owned(), |c| format!("{c:.2}"))
        });
        self.each("  in time during / before", |r| {
            r.outage.as_ref().map_or("-".to_owned(), |o| {
                format!(
                    "{:.0} / {:.0} %",
                    o.in_time_share * 100.0,
                    o.before_share * 100.0
                )
            })
        });
        self.each("  back in time after", |r| {
            r.outage.as_ref().map_or("-".to_owned(), |o| {
                o.recovery_s
                    .map_or("never".to_owned(), |s| format!("{s:.1} s"))
            })
        });
    }

    /// Goodput, refusals and shedding.
    fn service_figures(&self) {
        self.each("goodput / capacity", |r| {
            format!("{:.1} / {:.0}/s", r.goodput_per_s, r.capacity_per_s)
        });
        self.each("in-time latency p50 / p99", |r| {
            format!("{} / {} ms", r.in_time_p50_ms, r.in_time_p99_ms)
        });
        self.each("refused: n, p50 / p99", |r| {
            format!(
                "{}, {} / {} ms",
                r.refused, r.refused_p50_ms, r.refused_p99_ms
            )
        });
        self.each("shed by inventory, p99 wait", |r| {
            format!("{}, {:.1} ms", r.shed, r.shed_p99_ms)
        });
        self.each("inventory work, missed users", |r| {
            format!("{:.1} s", r.inventory_worker_ms_on_missed / 1_000.0)
        });
        self.each("calls between services", |r| r.calls.to_string());
    }

    /// Worker time, and the part of it after users left.
    fn work(&self) {
        let seconds = |ms: f64| format!("{:.1} s", ms / 1_000.0);
        self.each("worker time", |r| seconds(r.worker_ms));
        self.each("  after users left", |r| {
            seconds(r.worker_ms_after_users_left)
        });
        if self.runs.iter().any(|r| r.after_users_left.failed_ms > 0.0) {
            self.each("    of users answered", |r| {
                seconds(r.after_users_left.answered_ms)
            });
            self.each("    of users who gave up", |r| {
                seconds(r.after_users_left.gave_up_ms)
            });
            self.each("    of users whose call failed", |r| {
                seconds(r.after_users_left.failed_ms)
            });
        }
        if self.runs.iter().any(|r| r.deadlines) {
            self.each("    before / past hop deadline", |r| {
                let a = &r.after_users_left;
                format!(
                    "{:.1} / {:.1} s",
                    a.before_hop_deadline_ms / 1_000.0,
                    a.past_hop_deadline_ms / 1_000.0
                )
            });
        }
        self.each("  wasted share", |r| {
            format!("{:.1} %", r.wasted_share * 100.0)
        });
        self.each("drain after last user", |r| {
            format!("{:.2} s", r.drain_ms / 1_000.0)
        });
        if self.runs.iter().any(|r| r.database.is_some()) {
            self.each("database time (pg_stat_act.)", |r| {
                r.database
                    .map_or("-".to_owned(), |d| format!("{:.1} s", d.db_seconds))
            });
            self.each("  after users left", |r| {
                r.database.map_or("-".to_owned(), |d| {
                    format!("{:.1} s", d.db_seconds_after_users_left)
                })
            });
        }
    }

    /// The generator's schedule and every process's resources.
    fn processes(&self) {
        self.each("sent rate, worst lateness", |r| {
            format!(
                "{:.1}/s {:.1} ms",
                r.achieved_rate, r.worst_send_lateness_ms
            )
        });
        self.each("send lateness p99", |r| {
            format!("{:.1} ms", r.send_lateness_p99_ms)
        });
        let names: Vec<String> = self
            .runs
            .first()
            .map(|r| r.services.iter().map(|s| s.name.clone()).collect())
            .unwrap_or_default();
        for (i, name) in names.iter().enumerate() {
            self.each(&format!("{name} CPU, peak RSS"), |r| {
                r.services.get(i).map_or("-".to_owned(), usage_cell)
            });
        }
        for (i, name) in names.iter().enumerate() {
            self.each(&format!("{name} tasks/fds"), |r| {
                r.hygiene
                    .get(i)
                    .map_or("-".to_owned(), ServiceHygiene::cell)
            });
        }
        let metrics: Vec<&[super::metrics::ServiceMetrics]> =
            self.runs.iter().map(|r| r.metrics.as_slice()).collect();
        for (label, cells) in super::metrics::rows(&metrics) {
            self.row(&label, cells);
        }
        self.each("generator CPU", |r| {
            r.generator_cpu_ms
                .map_or("-".to_owned(), |ms| format!("{:.1} s", ms / 1_000.0))
        });
    }
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

//! The figures of one run, from every user's outcome and every hold the services logged, and
//! the `--check` verdict over both runs.

use std::collections::{BTreeMap, HashMap};

use deadline_http::enforce::QueueOrder;
use hdrhistogram::Histogram;
use serde::Serialize;

use super::users::Outcome;
use super::{Check, LoadArgs, LoadRun, mix, outage};
use crate::holds::HoldLine;
use crate::slowness::is_slow;

/// The run's figures from every user's outcome and every hold the services logged.
pub(super) fn summarize(
    args: &LoadArgs,
    deadlines: bool,
    mut outcomes: Vec<Outcome>,
    holds: &[HoldLine],
    start_wall: f64,
) -> LoadRun {
    outcomes.sort_by(|a, b| a.sent_at.total_cmp(&b.sent_at));
    let requests = outcomes.len();
    let misses = misses(args, &outcomes);
    let latencies = latencies(&outcomes);
    let (inventory_worker_ms_on_missed, refusals) = inventory_figures(&outcomes, holds);
    let worker_ms: f64 = holds.iter().map(HoldLine::worker_ms).sum();
    let after_by = after_users_left(&outcomes, holds);
    let after = after_by.answered_ms + after_by.gave_up_ms + after_by.failed_ms;
    let achieved_rate = achieved_rate(&outcomes, args.rate, start_wall);
    let by_second = in_time_by_second(&outcomes, args.seconds, start_wall);
    let outage = outage::figures(args, &outcomes, holds, start_wall, &by_second);
    LoadRun {
        deadlines,
        requests,
        slow_requests: misses.slow_requests,
        in_time: misses.in_time,
        in_time_share: share(misses.in_time as f64, requests as f64),
        slow_missed: misses.slow_missed,
        fast_missed: misses.fast_missed,
        latency_p50_ms: latencies.latency.value_at_quantile(0.50),
        latency_p99_ms: latencies.latency.value_at_quantile(0.99),
        worker_ms,
        worker_ms_after_users_left: after,
        after_users_left: after_by,
        user_errors: user_errors(&outcomes),
        wasted_share: share(after, worker_ms),
        drain_ms: drain_ms(&outcomes, holds, start_wall),
        calls: holds
            .iter()
            .filter(|h| h.service != "gateway")
            .map(|h| h.count as usize)
            .sum(),
        achieved_rate,
        worst_send_lateness_ms: outcomes.iter().map(|o| o.lateness_ms).fold(0.0, f64::max),
        send_lateness_p99_ms: percentile(outcomes.iter().map(|o| o.lateness_ms).collect(), 0.99),
        services: Vec::new(),
        generator_cpu_ms: None,
        generator_peak_rss_kib: None,
        in_time_share_by_second: by_second,
        hygiene: Vec::new(),
        metrics: Vec::new(),
        queue: if deadlines {
            args.queue.to_string()
        } else {
            QueueOrder::Fifo.to_string()
        },
        admission: deadlines && args.admission,
        max_queue_wait_ms: args.max_queue_wait.filter(|_| deadlines),
        goodput_per_s: goodput(&outcomes, args.seconds),
        capacity_per_s: args.slots as f64 * 1_000.0 / args.fast_work.max(1) as f64,
        in_time_p50_ms: latencies.in_time.value_at_quantile(0.50),
        in_time_p99_ms: latencies.in_time.value_at_quantile(0.99),
        refused: latencies.refused_count,
        refused_p50_ms: latencies.refused.value_at_quantile(0.50),
        refused_p99_ms: latencies.refused.value_at_quantile(0.99),
        shed: refusals.len(),
        shed_p99_ms: percentile(refusals, 0.99),
        inventory_worker_ms_on_missed,
        database: None,
        peak_fds: Vec::new(),
        out_of_fds_lines: Vec::new(),
        user_connections: None,
        calls_per_request_in_outage: outage
            .as_ref()
            .map(|o| o.inventory_calls as f64 / o.users as f64),
        outage,
        budget_classes: args
            .budget_mix
            .as_ref()
            .map(|mix| by_class(mix, &outcomes))
            .unwrap_or_default(),
    }
}

/// How many users were slow, answered in time, and missed among the slow and the fast.
struct Misses {
    slow_requests: usize,
    in_time: usize,
    slow_missed: usize,
    fast_missed: usize,
}

/// The users' misses: slow ones chosen by id, as the services chose them.
fn misses(args: &LoadArgs, outcomes: &[Outcome]) -> Misses {
    let slow: Vec<bool> = outcomes
        .iter()
        .map(|o| is_slow(&o.id, args.seed, args.slow_share))
        .collect();
    let missed = |slow_ones: bool| {
        outcomes
            .iter()
            .zip(&slow)
            .filter(|(o, s)| **s == slow_ones && !o.in_time)
            .count()
    };
    Misses {
        slow_requests: slow.iter().filter(|s| **s).count(),
        in_time: outcomes.iter().filter(|o| o.in_time).count(),
        slow_missed: missed(true),
        fast_missed: missed(false),
    }
}

/// `part / whole`, or 0 when `whole` is not positive.
fn share(part: f64, whole: f64) -> f64 {
    if whole > 0.0 { part / whole } else { 0.0 }
}

/// How long the services worked after the last user left, in ms: from the last user leaving
/// to the last hold's end (0 if none ended later).
fn drain_ms(outcomes: &[Outcome], holds: &[HoldLine], start_wall: f64) -> f64 {
    let last_left = outcomes
        .iter()
        .map(|o| o.left_at_ms)
        .fold(start_wall, f64::max);
    let last_end = holds
        .iter()
        .filter_map(|h| h.end_ms)
        .fold(start_wall, f64::max);
    (last_end - last_left).max(0.0)
}

/// Latency histograms (ms, at least 1) of every user, of those answered in time and of those
/// refused, and how many were refused.
struct Latencies {
    latency: Histogram<u64>,
    in_time: Histogram<u64>,
    refused: Histogram<u64>,
    refused_count: usize,
}

fn latencies(outcomes: &[Outcome]) -> Latencies {
    let histogram =
        || Histogram::<u64>::new_with_bounds(1, 3_600_000, 3).expect("valid histogram bounds");
    let mut figures = Latencies {
        latency: histogram(),
        in_time: histogram(),
        refused: histogram(),
        refused_count: 0,
    };
    for o in outcomes {
        let ms = (o.elapsed_ms.round() as u64).max(1);
        let _ = figures.latency.record(ms);
        if o.in_time {
            let _ = figures.in_time.record(ms);
        } else if o.status.is_some() {
            figures.refused_count += 1;
            let _ = figures.refused.record(ms);
        }
    }
    figures
}

/// Inventory's worker time on users not answered in time, and how long each request it shed
/// waited before it was refused.
fn inventory_figures(outcomes: &[Outcome], holds: &[HoldLine]) -> (f64, Vec<f64>) {
    let missed: std::collections::HashSet<&str> = outcomes
        .iter()
        .filter(|o| !o.in_time)
        .map(|o| o.id.as_str())
        .collect();
    let inventory = || holds.iter().filter(|h| h.service == "inventory");
    // `+ 0.0`: an empty sum of floats is -0.0.
    let on_missed: f64 = inventory()
        .filter(|h| {
            h.request_id
                .as_deref()
                .is_some_and(|id| missed.contains(id))
        })
        .map(HoldLine::worker_ms)
        .sum::<f64>()
        + 0.0;
    // A folded line stands for `count` refusals at arrival, each of which waited 0 ms.
    let refusals: Vec<f64> = inventory()
        .filter(|h| h.outcome == "shed")
        .flat_map(|h| std::iter::repeat_n(h.queued_ms, h.count as usize))
        .collect();
    (on_missed, refusals)
}

/// The rate users were actually sent at (users sorted by send time), or `offered` with fewer
/// than two.
fn achieved_rate(outcomes: &[Outcome], offered: f64, start_wall: f64) -> f64 {
    let first_send = outcomes.first().map_or(start_wall, |o| o.sent_at);
    let last_send = outcomes.last().map_or(start_wall, |o| o.sent_at);
    if outcomes.len() > 1 && last_send > first_send {
        (outcomes.len() - 1) as f64 / ((last_send - first_send) / 1_000.0)
    } else {
        offered
    }
}

/// The share answered in time among users sent in each second of the run.
fn in_time_by_second(outcomes: &[Outcome], seconds: f64, start_wall: f64) -> Vec<f64> {
    let mut by_second = vec![(0usize, 0usize); (seconds.ceil() as usize).max(1)];
    for o in outcomes {
        let s = (((o.sent_at - start_wall) / 1_000.0).floor().max(0.0) as usize)
            .min(by_second.len() - 1);
        by_second[s].0 += usize::from(o.in_time);
        by_second[s].1 += 1;
    }
    by_second
        .iter()
        .map(|(ok, n)| if *n == 0 { 0.0 } else { *ok as f64 / *n as f64 })
        .collect()
}

/// Worker time after users left, split by how each user's wait ended and by service.
fn after_users_left(outcomes: &[Outcome], holds: &[HoldLine]) -> AfterUsersLeft {
    let users: HashMap<&str, &Outcome> = outcomes.iter().map(|o| (o.id.as_str(), o)).collect();
    let mut split = AfterUsersLeft::default();
    for h in holds {
        let Some(user) = h.request_id.as_deref().and_then(|id| users.get(id)) else {
            continue;
        };
        let ms = h.worked_after(user.left_at_ms);
        if ms <= 0.0 {
            continue;
        }
        *match (user.status, user.error) {
            (Some(_), _) => &mut split.answered_ms,
            (None, Some(_)) => &mut split.failed_ms,
            (None, None) => &mut split.gave_up_ms,
        } += ms;
        *split.by_service.entry(h.service.clone()).or_default() += ms;
        // Against the hop's own deadline (arrival + the budget it read): before it, the hop
        // could not know the user had left; past it, the hop stopped late.
        match (h.budget_ms, h.start_ms, h.end_ms) {
            (Some(budget), Some(start), Some(end)) => {
                let own = h.arrival_ms + budget as f64;
                let from = start.max(user.left_at_ms);
                split.before_hop_deadline_ms += (end.min(own) - from).max(0.0);
                split.past_hop_deadline_ms += (end - from.max(own)).max(0.0);
            }
            _ => split.without_budget_ms += ms,
        }
    }
    split
}

/// How many users' calls failed before their wait ran out, by kind.
fn user_errors(outcomes: &[Outcome]) -> BTreeMap<&'static str, usize> {
    let mut errors = BTreeMap::new();
    for kind in outcomes.iter().filter_map(|o| o.error) {
        *errors.entry(kind).or_default() += 1;
    }
    errors
}

/// Worker time after users left (`worker_ms_after_users_left`), by how the user's wait ended
/// and by service: work for users whose call failed early (the generator out of descriptors,
/// say) is the generator's doing, not a hop's.
#[derive(Debug, Clone, Default, Serialize)]
pub(crate) struct AfterUsersLeft {
    /// For users who heard an answer before it (work that went on after the answer).
    pub(crate) answered_ms: f64,
    /// For users who waited their whole wait and gave up.
    pub(crate) gave_up_ms: f64,
    /// For users whose call failed before their wait ran out (see `user_errors`).
    pub(crate) failed_ms: f64,
    /// The same time, by the service that worked it.
    pub(crate) by_service: BTreeMap<String, f64>,
    /// The part before the working hop's own deadline (its arrival plus the budget it read):
    /// time the user's wait had already used before the hop read the request (the generator
    /// sending late, kernel queues, an earlier hop) that a relative budget cannot see.
    pub(crate) before_hop_deadline_ms: f64,
    /// The part after the hop's own deadline: the hop stopped late (a saturated process whose
    /// timers and tasks run late).
    pub(crate) past_hop_deadline_ms: f64,
    /// The part worked by hops that read no budget (every hop, in the run without deadlines).
    pub(crate) without_budget_ms: f64,
}

/// How each class of `mix` fared.
fn by_class(mix: &mix::BudgetMix, outcomes: &[Outcome]) -> Vec<mix::ClassFigures> {
    mix.0
        .iter()
        .enumerate()
        .map(|(class, c)| {
            let mut latency =
                Histogram::<u64>::new_with_bounds(1, 3_600_000, 3).expect("valid histogram bounds");
            let users: Vec<&Outcome> = outcomes.iter().filter(|o| o.class == class).collect();
            let in_time = users.iter().filter(|o| o.in_time).count();
            for o in users.iter().filter(|o| o.in_time) {
                let _ = latency.record((o.elapsed_ms.round() as u64).max(1));
            }
            mix::ClassFigures {
                wait_ms: c.wait_ms,
                users: users.len(),
                in_time,
                in_time_share: if users.is_empty() {
                    0.0
                } else {
                    in_time as f64 / users.len() as f64
                },
                in_time_p50_ms: latency.value_at_quantile(0.50),
                in_time_p99_ms: latency.value_at_quantile(0.99),
            }
        })
        .collect()
}

/// Users answered in time per second, over `seconds` of arrivals or, if longer, from the first
/// send to the last in-time answer.
fn goodput(outcomes: &[Outcome], seconds: f64) -> f64 {
    let first_send = outcomes
        .iter()
        .map(|o| o.sent_at)
        .fold(f64::INFINITY, f64::min);
    let last_answer = outcomes
        .iter()
        .filter(|o| o.in_time)
        .map(|o| o.left_at_ms)
        .fold(f64::NEG_INFINITY, f64::max);
    let in_time = outcomes.iter().filter(|o| o.in_time).count();
    if in_time == 0 {
        return 0.0;
    }
    in_time as f64 / ((last_answer - first_send) / 1_000.0).max(seconds)
}

/// The `q` quantile (0 to 1) of `values`, nearest rank; 0 for none.
fn percentile(mut values: Vec<f64>, q: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
    values[rank - 1]
}

pub(super) fn check(runs: &[LoadRun]) -> Check {
    let mut failures = Vec::new();
    let with = runs.iter().find(|r| r.deadlines);
    let without = runs.iter().find(|r| !r.deadlines);
    match (with, without) {
        (Some(with), Some(without)) => {
            if with.in_time_share < 0.85 {
                failures.push(format!(
                    "with deadlines only {:.1} % answered in time (needs >= 85 %)",
                    with.in_time_share * 100.0
                ));
            }
            let gain = (with.in_time_share - without.in_time_share) * 100.0;
            if gain < 30.0 {
                failures.push(format!(
                    "deadlines gained only {gain:.1} points in time (needs >= 30)"
                ));
            }
            if with.wasted_share >= 0.01 {
                failures.push(format!(
                    "with deadlines {:.2} % of worker time was after users left (needs < 1 %)",
                    with.wasted_share * 100.0
                ));
            }
            if let (Some(w), Some(wo)) = (with.database, without.database) {
                if w.db_seconds <= 0.0 || wo.db_seconds <= 0.0 {
                    failures.push(
                        "pg_stat_activity showed no inventory statement in a run (the sampler saw nothing)"
                            .to_owned(),
                    );
                }
                if w.db_seconds_after_users_left >= 0.01 * w.db_seconds {
                    failures.push(format!(
                        "with deadlines the database worked {:.2} s after users left, {:.2} % of its {:.1} s (needs < 1 %)",
                        w.db_seconds_after_users_left,
                        w.db_seconds_after_users_left / w.db_seconds.max(f64::MIN_POSITIVE) * 100.0,
                        w.db_seconds
                    ));
                }
                if wo.db_seconds_after_users_left <= w.db_seconds_after_users_left {
                    failures.push(format!(
                        "without deadlines the database worked only {:.2} s after users left, not more than with them",
                        wo.db_seconds_after_users_left
                    ));
                }
            }
            if without.wasted_share <= 0.5 {
                failures.push(format!(
                    "without deadlines only {:.1} % of worker time was wasted (the scenario needs > 50 % to make its point)",
                    without.wasted_share * 100.0
                ));
            }
        }
        _ => failures.push("the check needs both runs (drop --only)".to_owned()),
    }
    for run in runs {
        let mode = if run.deadlines { "with" } else { "without" };
        failures.extend(run.hygiene.iter().filter_map(|h| h.failure(mode)));
    }
    Check {
        passed: failures.is_empty(),
        failures,
    }
}

/// The send lateness (p99) beyond which a run says the generator could not keep its schedule.
const LATE_P99_MS: f64 = 10.0;

/// A warning when `run`'s generator fell behind the schedule of `rate` users a second: its
/// users were sent late (their budgets already cut by the time lost) or fewer than offered, so
/// the run measured a lighter load than the one asked for.
pub(super) fn schedule_warning(rate: f64, run: &LoadRun) -> Option<String> {
    let behind = run.send_lateness_p99_ms > LATE_P99_MS || run.achieved_rate < rate * 0.97;
    behind.then(|| {
        format!(
            "warning: the generator could not keep its schedule {} deadlines: {:.1}/s sent of \
             {rate}/s offered, send lateness p99 {:.1} ms, worst {:.1} ms (each late user sent \
             only what was left of its wait)",
            if run.deadlines { "with" } else { "without" },
            run.achieved_rate,
            run.send_lateness_p99_ms,
            run.worst_send_lateness_ms
        )
    })
}

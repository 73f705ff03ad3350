//! `deadline load --overload M,...`: the capacity found in the run, then multiples of it, both
//! ways.
//!
//! How fast this machine serves the chain changes from one day to the next (the same binary has
//! read 2.5 times apart), so an absolute rate says nothing across runs. The capacity is therefore
//! found in the same run, by short runs with deadlines: the highest rate at which one passes
//! `--check`'s conditions on the run with deadlines (at least 85 % in time, under 1 % of worker
//! time after users left) while the generator kept its schedule. Inventory's slots follow the
//! probed rate (`--slots-per-rate`), so what gives out is the processors, not the slots. The
//! multiples then run with the slots found at the capacity: a service's settings do not change
//! with the load it is offered.
//!
//! # A row the generator could not keep is no measure of the services
//!
//! The generator shares the machine with the services. A row whose users were sent more than
//! [`LATE_P99_MS`] late at the 99th percentile measured a lighter load than the one asked for
//! (and each late user sent less of its wait): it is marked invalid and shown, and never counts
//! as the services' result. An invalid row with deadlines fails the check. An invalid row
//! without deadlines (there, users give up and reconnect by the thousand a second, which costs
//! the generator most) fails nothing by itself, but its work after users left is then no figure
//! to compare the run with deadlines against, and the check says so.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::str::FromStr;

use anyhow::{Context as _, bail};
use indicatif::ProgressBar;
use serde::Serialize;

use super::{LoadArgs, LoadRun, run_once};
use crate::placement::Placement;
use crate::svg::draw::{AFTER, BEFORE, LEFT, RIGHT, WIDTH, escape, grid_line, open};

/// The generator's lateness (p99) beyond which a row is invalid.
pub(super) const LATE_P99_MS: f64 = 50.0;
/// How many times the search may double or halve the rate before it has both a rate that
/// passed and one that failed.
const MAX_DOUBLINGS: u32 = 8;

/// The multiples of the capacity to offer: `1,1.5,2,3`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Multiples(pub(super) Vec<f64>);

impl FromStr for Multiples {
    type Err = String;

    fn from_str(s: &str) -> Result<Multiples, String> {
        let mut multiples = Vec::new();
        for part in s.split(',') {
            let part = part.trim();
            let m: f64 = part
                .parse()
                .map_err(|_| format!("{part:?} is not a number (expected M,M,... like 1,2,3)"))?;
            if !(m.is_finite() && m > 0.0 && m <= 20.0) {
                return Err(format!(
                    "a multiple must be above 0 and at most 20, not {part}"
                ));
            }
            if multiples.contains(&m) {
                return Err(format!("the multiple {part} is given twice"));
            }
            multiples.push(m);
        }
        multiples.sort_by(f64::total_cmp);
        Ok(Multiples(multiples))
    }
}

/// One run of the capacity search.
#[derive(Debug, Clone, Serialize)]
struct Probe {
    rate: f64,
    slots: usize,
    passed: bool,
    in_time_share: f64,
    goodput_per_s: f64,
    wasted_share: f64,
    send_lateness_p99_ms: f64,
    achieved_rate: f64,
    /// Why it failed (empty when it passed).
    failures: Vec<String>,
}

/// What the search found.
#[derive(Debug, Clone, Serialize)]
struct Capacity {
    /// The highest rate that passed, users a second.
    rate: f64,
    /// Inventory's slots at that rate, kept for the multiples.
    slots: usize,
    /// Gateway's and orders' slots at that rate (with `--hop-slots-per-rate` or `--hop-slots`).
    hop_slots: Option<usize>,
    /// The lowest rate that failed, if one did.
    lowest_failed: Option<f64>,
    /// Every probe, in the order run.
    probes: Vec<Probe>,
}

/// One service in one row.
#[derive(Debug, Clone, Serialize)]
struct ServiceRow {
    name: String,
    cpu_s: Option<f64>,
    peak_rss_mib: Option<f64>,
    peak_fds: Option<usize>,
    out_of_fds_lines: usize,
    /// Requests it refused at once (outcome `shed` in its metrics).
    shed: u64,
}

/// One multiple, one way.
#[derive(Debug, Clone, Serialize)]
struct Row {
    multiple: f64,
    offered_per_s: f64,
    deadlines: bool,
    sent_per_s: f64,
    in_time_share: f64,
    goodput_per_s: f64,
    /// Users who heard a refusal (any answer but 200) before their wait ran out.
    refused: usize,
    /// Users who heard nothing in time (gave up, or their call failed).
    unanswered: usize,
    work_after_users_left_s: f64,
    services: Vec<ServiceRow>,
    generator_cpu_s: Option<f64>,
    send_lateness_p99_ms: f64,
    /// Connections the users opened per user sent (HTTP/1.1 users).
    connections_per_user: Option<f64>,
    /// Whether the generator kept its schedule (send lateness p99 at most 50 ms).
    valid: bool,
    /// The run's every figure, as `deadline load --json` gives them.
    run: LoadRun,
}

#[derive(Debug, Serialize)]
struct Report<'a> {
    capacity: &'a Capacity,
    rows: &'a [Row],
    check: super::Check,
}

/// Runs the search, then the multiples, and prints (or writes) what they found.
pub(super) async fn run(
    args: &LoadArgs,
    multiples: &Multiples,
    placement: &Placement,
    progress: &ProgressBar,
) -> anyhow::Result<ExitCode> {
    let capacity = search(args, placement, progress).await?;
    let modes: Vec<bool> = match args.only.as_deref() {
        Some("with") => vec![true],
        Some("without") => vec![false],
        _ => vec![false, true],
    };
    let mut rows = Vec::new();
    for &multiple in &multiples.0 {
        let mut at = args.clone();
        at.rate = (capacity.rate * multiple).round().max(1.0);
        at.slots = capacity.slots;
        at.hop_slots = hop_slots_for(args, capacity.rate).or(args.hop_slots);
        for &deadlines in &modes {
            let run = run_once(&at, placement, deadlines, progress).await?;
            rows.push(row(multiple, at.rate, run));
        }
    }
    progress.finish_and_clear();
    let check = check(&capacity, &rows);
    // The settings as the 1x row ran them: the capacity's rate and slots, not the search's start.
    let mut at_capacity = args.clone();
    at_capacity.rate = capacity.rate;
    at_capacity.slots = capacity.slots;
    at_capacity.hop_slots = capacity.hop_slots;
    let settings = at_capacity.describe();
    if let Some(path) = &args.svg {
        std::fs::write(path, chart(&capacity, &rows, &settings))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        let passed = check.passed;
        let report = Report {
            capacity: &capacity,
            rows: &rows,
            check,
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(super::exit(args.check, passed));
    }
    print(args, &settings, &capacity, &rows);
    Ok(super::conclude(args, &check))
}

/// Inventory's slots for `rate` users a second.
fn slots_for(args: &LoadArgs, rate: f64) -> usize {
    ((rate * args.slots_per_rate).ceil() as usize).max(1)
}

/// Gateway's and orders' slots for `rate` users a second, with `--hop-slots-per-rate`.
fn hop_slots_for(args: &LoadArgs, rate: f64) -> Option<usize> {
    args.hop_slots_per_rate
        .map(|f| ((rate * f).ceil() as usize).max(1))
}

/// One short run with deadlines at `rate`, judged.
async fn probe(
    args: &LoadArgs,
    placement: &Placement,
    progress: &ProgressBar,
    rate: f64,
) -> anyhow::Result<Probe> {
    let mut at = args.clone();
    at.rate = rate;
    at.seconds = args.search_seconds;
    at.slots = slots_for(args, rate);
    at.hop_slots = hop_slots_for(args, rate).or(args.hop_slots);
    let run = run_once(&at, placement, true, progress).await?;
    let failures = probe_failures(&run, rate);
    Ok(Probe {
        rate,
        slots: at.slots,
        passed: failures.is_empty(),
        in_time_share: run.in_time_share,
        goodput_per_s: run.goodput_per_s,
        wasted_share: run.wasted_share,
        send_lateness_p99_ms: run.send_lateness_p99_ms,
        achieved_rate: run.achieved_rate,
        failures,
    })
}

/// Why a probe at `rate` fails: `--check`'s conditions on the run with deadlines, and the
/// generator's schedule.
fn probe_failures(run: &LoadRun, rate: f64) -> Vec<String> {
    let mut failures = Vec::new();
    if run.in_time_share < 0.85 {
        failures.push(format!(
            "{:.1} % in time (needs >= 85 %)",
            run.in_time_share * 100.0
        ));
    }
    if run.wasted_share >= 0.01 {
        failures.push(format!(
            "{:.2} % of worker time after users left (needs < 1 %)",
            run.wasted_share * 100.0
        ));
    }
    if run.send_lateness_p99_ms > LATE_P99_MS || run.achieved_rate < rate * 0.97 {
        failures.push(format!(
            "the generator fell behind: {:.0}/s sent, lateness p99 {:.1} ms",
            run.achieved_rate, run.send_lateness_p99_ms
        ));
    }
    failures
}

/// The capacity search: from `--rate`, double while passing (or halve while failing) until one
/// rate passed and one failed, then bisect between them `--search-steps` times.
async fn search(
    args: &LoadArgs,
    placement: &Placement,
    progress: &ProgressBar,
) -> anyhow::Result<Capacity> {
    let mut probes: Vec<Probe> = Vec::new();
    let mut passed: Option<f64> = None;
    let mut failed: Option<f64> = None;
    let mut rate = args.rate.round().max(1.0);
    for _ in 0..MAX_DOUBLINGS {
        let p = probe(args, placement, progress, rate).await?;
        let ok = p.passed;
        probes.push(p);
        if ok {
            passed = Some(rate);
            if failed.is_some() {
                break;
            }
            rate = (rate * 2.0).min(100_000.0);
        } else {
            failed = Some(rate);
            if passed.is_some() {
                break;
            }
            rate = (rate / 2.0).round();
            if rate < 1.0 {
                break;
            }
        }
    }
    let Some(mut low) = passed else {
        bail!(
            "the capacity search found no rate that passes (lowest tried {:.0}/s)",
            probes.last().map_or(rate, |p| p.rate)
        );
    };
    if let Some(mut high) = failed {
        for _ in 0..args.search_steps {
            let mid = ((low + high) / 2.0).round();
            if mid <= low || mid >= high {
                break;
            }
            let p = probe(args, placement, progress, mid).await?;
            if p.passed {
                low = mid;
            } else {
                high = mid;
            }
            probes.push(p);
        }
        failed = Some(high);
    }
    Ok(Capacity {
        rate: low,
        slots: slots_for(args, low),
        hop_slots: hop_slots_for(args, low).or(args.hop_slots),
        lowest_failed: failed,
        probes,
    })
}

/// A row from one run.
fn row(multiple: f64, offered: f64, run: LoadRun) -> Row {
    let shed_of = |name: &str| {
        run.metrics
            .iter()
            .find(|m| m.name == name)
            .and_then(|m| m.requests.get("shed").copied())
            .unwrap_or(0)
    };
    let services = run
        .services
        .iter()
        .enumerate()
        .map(|(i, usage)| ServiceRow {
            name: usage.name.clone(),
            cpu_s: usage.cpu_ms.map(|ms| ms / 1_000.0),
            peak_rss_mib: usage.peak_rss_kib.map(|kib| kib as f64 / 1_024.0),
            peak_fds: run.peak_fds.get(i).copied().flatten(),
            out_of_fds_lines: run.out_of_fds_lines.get(i).copied().unwrap_or(0),
            shed: shed_of(&usage.name),
        })
        .collect();
    let answered = run.in_time + run.refused;
    Row {
        multiple,
        offered_per_s: offered,
        deadlines: run.deadlines,
        sent_per_s: run.achieved_rate,
        in_time_share: run.in_time_share,
        goodput_per_s: run.goodput_per_s,
        refused: run.refused,
        unanswered: run.requests.saturating_sub(answered),
        work_after_users_left_s: run.worker_ms_after_users_left / 1_000.0,
        services,
        generator_cpu_s: run.generator_cpu_ms.map(|ms| ms / 1_000.0),
        send_lateness_p99_ms: run.send_lateness_p99_ms,
        connections_per_user: run
            .user_connections
            .map(|n| n as f64 / run.requests.max(1) as f64),
        valid: run.send_lateness_p99_ms <= LATE_P99_MS,
        run,
    }
}

/// The least goodput, as a share of the goodput at 1x, that a run with deadlines must keep at
/// `multiple`: 90 % from 2x, 80 % at 3x, the bounds the project states; none below 2x or past 3x
/// (those rows are shown, not judged).
fn goodput_floor(multiple: f64) -> Option<f64> {
    if (2.0..3.0).contains(&multiple) {
        Some(0.9)
    } else if multiple == 3.0 {
        Some(0.8)
    } else {
        None
    }
}

/// The checks past capacity: goodput held with deadlines, no work after users left beside the
/// run without, no service out of descriptors, memory bounded, every row valid.
fn check(capacity: &Capacity, rows: &[Row]) -> super::Check {
    let mut failures = Vec::new();
    let with: Vec<&Row> = rows.iter().filter(|r| r.deadlines).collect();
    let at_one = with.iter().find(|r| r.multiple == 1.0);
    // Goodput at 1x: its row, or else the search's run at the capacity.
    let reference = at_one.map(|r| r.goodput_per_s).or_else(|| {
        capacity
            .probes
            .iter()
            .find(|p| p.rate == capacity.rate && p.passed)
            .map(|p| p.goodput_per_s)
    });
    // A row without deadlines only shows what happens without: a late generator there (its
    // users giving up and reconnecting by the thousand) is marked, and fails nothing but the
    // comparison of work after users left, which then has no valid figure to compare with.
    for row in rows.iter().filter(|r| !r.valid && r.deadlines) {
        failures.push(format!(
            "at {}x {} deadlines the generator fell behind (send lateness p99 {:.1} ms, over {LATE_P99_MS} ms): the row does not measure the services",
            row.multiple,
            if row.deadlines { "with" } else { "without" },
            row.send_lateness_p99_ms
        ));
    }
    for row in &with {
        if let (Some(floor), Some(reference)) = (goodput_floor(row.multiple), reference)
            && row.goodput_per_s < floor * reference
        {
            failures.push(format!(
                "at {}x with deadlines goodput {:.1}/s is {:.1} % of the {:.1}/s at 1x (needs >= {:.0} %)",
                row.multiple,
                row.goodput_per_s,
                row.goodput_per_s / reference.max(f64::MIN_POSITIVE) * 100.0,
                reference,
                floor * 100.0
            ));
        }
        if rows
            .iter()
            .any(|r| !r.deadlines && r.multiple == row.multiple && !r.valid)
        {
            failures.push(format!(
                "at {}x the run without deadlines is invalid (its generator fell behind): no figure to compare the work after users left with",
                row.multiple
            ));
        }
        if let Some(without) = rows
            .iter()
            .find(|r| !r.deadlines && r.multiple == row.multiple && r.valid)
            && row.work_after_users_left_s > 0.001 * without.work_after_users_left_s
        {
            failures.push(format!(
                "at {}x with deadlines {:.1} s of work after users left, over 0.1 % of the {:.1} s without",
                row.multiple, row.work_after_users_left_s, without.work_after_users_left_s
            ));
        }
        for service in row.services.iter().filter(|s| s.out_of_fds_lines > 0) {
            failures.push(format!(
                "at {}x with deadlines {} logged running out of file descriptors {} times",
                row.multiple, service.name, service.out_of_fds_lines
            ));
        }
        if let Some(one) = at_one {
            for (service, base) in row.services.iter().zip(&one.services) {
                if let (Some(peak), Some(base)) = (service.peak_rss_mib, base.peak_rss_mib)
                    && peak > 2.0 * base
                {
                    failures.push(format!(
                        "at {}x with deadlines {}'s peak memory {peak:.0} MiB is over twice its {base:.0} MiB at 1x",
                        row.multiple, service.name
                    ));
                }
            }
        }
    }
    if reference.is_none() && with.iter().any(|r| goodput_floor(r.multiple).is_some()) {
        failures.push("no goodput at 1x to compare with (run 1 among the multiples)".to_owned());
    }
    super::Check {
        passed: failures.is_empty(),
        failures,
    }
}

/// The search, then one line per row.
fn print(args: &LoadArgs, settings: &str, capacity: &Capacity, rows: &[Row]) {
    println!("deadline load --overload: at 1x {settings}");
    let probes: Vec<String> = capacity
        .probes
        .iter()
        .map(|p| {
            format!(
                "{:.0}/s {}",
                p.rate,
                if p.passed { "passed" } else { "failed" }
            )
        })
        .collect();
    println!(
        "capacity: {:.0} users/s (inventory {} slots{}); search of {} s runs with deadlines: {}",
        capacity.rate,
        capacity.slots,
        capacity
            .hop_slots
            .map_or(String::new(), |n| format!(", gateway and orders {n}")),
        args.search_seconds,
        probes.join(", ")
    );
    for p in capacity.probes.iter().filter(|p| !p.passed) {
        println!("  {:.0}/s failed: {}", p.rate, p.failures.join("; "));
    }
    let names: Vec<String> = rows
        .first()
        .map(|r| r.services.iter().map(|s| s.name.clone()).collect())
        .unwrap_or_default();
    let mut head = format!(
        "{:>5} {:>8} {:>8} {:>8} {:>7} {:>9} {:>6} {:>8} {:>8} {:>10}",
        "x",
        "offered",
        "way",
        "sent",
        "in time",
        "goodput",
        "of 1x",
        "refused",
        "no answer",
        "after left"
    );
    for name in &names {
        let _ = write!(head, " {:>24}", format!("{name} CPU/RSS/fds/shed"));
    }
    let _ = write!(
        head,
        " {:>7} {:>8} {:>9}  valid",
        "gen CPU", "late p99", "conn/user"
    );
    println!("{head}");
    for row in rows {
        let one = rows
            .iter()
            .find(|r| r.deadlines == row.deadlines && r.multiple == 1.0)
            .map(|r| r.goodput_per_s);
        let of_one = one.map_or("-".to_owned(), |g| {
            format!(
                "{:.0} %",
                row.goodput_per_s / g.max(f64::MIN_POSITIVE) * 100.0
            )
        });
        let mut line = format!(
            "{:>5} {:>8.0} {:>8} {:>8.0} {:>6.1}% {:>9.1} {:>6} {:>8} {:>9} {:>9.1}s",
            format!("{}x", row.multiple),
            row.offered_per_s,
            if row.deadlines { "with" } else { "without" },
            row.sent_per_s,
            row.in_time_share * 100.0,
            row.goodput_per_s,
            of_one,
            row.refused,
            row.unanswered,
            row.work_after_users_left_s
        );
        for s in &row.services {
            let cell = format!(
                "{}/{}/{}/{}",
                s.cpu_s.map_or("-".to_owned(), |c| format!("{c:.1}s")),
                s.peak_rss_mib
                    .map_or("-".to_owned(), |m| format!("{m:.0}M")),
                s.peak_fds.map_or("-".to_owned(), |n| n.to_string()),
                s.shed
            );
            let _ = write!(line, " {cell:>24}");
        }
        let _ = write!(
            line,
            " {:>7} {:>7.1}ms {:>9}  {}",
            row.generator_cpu_s
                .map_or("-".to_owned(), |c| format!("{c:.1}s")),
            row.send_lateness_p99_ms,
            row.connections_per_user
                .map_or("-".to_owned(), |c| format!("{c:.2}")),
            if row.valid {
                "yes"
            } else {
                "NO: generator late"
            }
        );
        println!("{line}");
    }
    let emfile: BTreeMap<String, usize> = rows
        .iter()
        .flat_map(|r| {
            r.services.iter().map(move |s| {
                (
                    format!(
                        "{}x {} {}",
                        r.multiple,
                        if r.deadlines { "with" } else { "without" },
                        s.name
                    ),
                    s.out_of_fds_lines,
                )
            })
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    for (which, n) in emfile {
        println!("  {which}: {n} lines about running out of file descriptors");
    }
}

/// Goodput against the offered multiple, one line each way, the capacity in the subtitle.
fn chart(capacity: &Capacity, rows: &[Row], settings: &str) -> String {
    let height = 440.0;
    let (top, bottom) = (80.0, height - 90.0);
    let max_x = rows.iter().map(|r| r.multiple).fold(1.0, f64::max);
    let max_y = rows
        .iter()
        .map(|r| r.offered_per_s.max(r.goodput_per_s))
        .fold(capacity.rate, f64::max)
        * 1.05;
    let x = |m: f64| LEFT + m / max_x * (WIDTH - LEFT - RIGHT);
    let y = |g: f64| bottom - (g / max_y).clamp(0.0, 1.0) * (bottom - top);
    let mut out = String::new();
    open(
        &mut out,
        height,
        "Goodput past capacity: users answered in time a second",
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="50" font-size="12" fill="#444444">capacity found in the run: {:.0} users/s; {}</text>"##,
        capacity.rate,
        escape(settings)
    );
    for i in 0..=4 {
        let g = max_y * f64::from(i) / 4.0;
        grid_line(&mut out, LEFT, y(g), &format!("{g:.0}/s"));
    }
    let mut ticks: Vec<f64> = rows.iter().map(|r| r.multiple).collect();
    ticks.dedup();
    for m in ticks {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="11">{m}x</text>"#,
            x(m),
            bottom + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">offered load, multiple of the capacity (grey: offered)</text>"#,
        LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
        bottom + 38.0
    );
    let offered: Vec<String> = rows
        .iter()
        .filter(|r| r.deadlines == rows.first().is_some_and(|f| f.deadlines))
        .map(|r| format!("{:.1},{:.1}", x(r.multiple), y(r.offered_per_s)))
        .collect();
    let _ = writeln!(
        out,
        r##"<polyline points="{}" fill="none" stroke="#bbbbbb" stroke-width="1.5"/>"##,
        offered.join(" ")
    );
    let mut legend_x = LEFT;
    for deadlines in [true, false] {
        let line: Vec<&Row> = rows.iter().filter(|r| r.deadlines == deadlines).collect();
        if line.is_empty() {
            continue;
        }
        let (colour, dash) = if deadlines {
            (BEFORE, "")
        } else {
            (AFTER, r#" stroke-dasharray="7 4""#)
        };
        let points: Vec<String> = line
            .iter()
            .map(|r| format!("{:.1},{:.1}", x(r.multiple), y(r.goodput_per_s)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>"#,
            points.join(" ")
        );
        for r in &line {
            let mark = if r.valid { colour } else { "#999999" };
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="4" fill="{mark}"/>"#,
                x(r.multiple),
                y(r.goodput_per_s)
            );
        }
        let label = if deadlines {
            "with deadlines"
        } else {
            "without deadlines"
        };
        let ly = height - 18.0;
        let _ = writeln!(
            out,
            r#"<line x1="{legend_x:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2.5"{dash}/>"#,
            ly - 4.0,
            legend_x + 30.0,
            ly - 4.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{ly:.1}" font-size="12">{label}</text>"#,
            legend_x + 36.0
        );
        legend_x += 200.0;
    }
    let _ = writeln!(
        out,
        r#"<text x="{legend_x:.1}" y="{:.1}" font-size="12">grey dot: the generator fell behind (row invalid)</text>"#,
        height - 18.0
    );
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiples_parse_sorted_and_bad_ones_are_refused() {
        assert_eq!(
            "2, 1,1.5,3".parse::<Multiples>(),
            Ok(Multiples(vec![1.0, 1.5, 2.0, 3.0]))
        );
        for bad in ["", "1,,2", "x", "0", "-1", "21", "1,1", "nan", "inf"] {
            assert!(bad.parse::<Multiples>().is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn the_goodput_floor_follows_the_multiple() {
        assert_eq!(goodput_floor(1.0), None);
        assert_eq!(goodput_floor(1.5), None);
        assert_eq!(goodput_floor(2.0), Some(0.9));
        assert_eq!(goodput_floor(2.5), Some(0.9));
        assert_eq!(goodput_floor(3.0), Some(0.8));
        assert_eq!(goodput_floor(4.0), None);
    }
}

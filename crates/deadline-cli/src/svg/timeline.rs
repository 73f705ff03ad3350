//! The demo's timeline: for each run, one row per service and one bar per worker hold (holds
//! that overlap in lanes of their own), split at the moment the user stopped waiting.

use std::fmt::Write as _;

use super::draw::{AFTER, BEFORE, LEFT, RIGHT, WIDTH, escape, open};
use crate::holds::HoldLine;

/// The height of one lane of bars.
const LANE: f64 = 16.0;

/// One demo run as the timeline draws it: plain data, so this module depends on no command.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TimelineRun<'a> {
    /// The run's name, when not just with or without deadlines (another library's chain).
    pub(crate) label: Option<&'a str>,
    /// Whether the services ran with deadlines.
    pub(crate) deadlines: bool,
    /// Every worker hold the services logged.
    pub(crate) holds: &'a [HoldLine],
    /// When the user sent the request (epoch ms): the timeline's zero.
    pub(crate) start_ms: f64,
    /// The status the user heard, if they heard one.
    pub(crate) user_status: Option<u16>,
    /// When the user heard back, in ms from the start.
    pub(crate) user_heard_back_ms: Option<f64>,
    /// When the user stopped waiting, in ms from the start.
    pub(crate) user_left_ms: f64,
    /// Calls between services.
    pub(crate) calls: usize,
    /// Calls that arrived after the user left.
    pub(crate) calls_after_user_left: usize,
    /// When the last piece of work ended, in ms from the start.
    pub(crate) last_work_end_ms: f64,
    /// With `--postgres`: the database's time after the user left, in seconds.
    pub(crate) db_seconds_after_user_left: Option<f64>,
}

/// The demo's timeline: for each run, one row per service and one bar per worker hold, split at
/// the moment the user stopped waiting.
pub(crate) fn demo_timeline(runs: &[TimelineRun<'_>], user_wait_ms: f64) -> String {
    let horizon_ms = runs
        .iter()
        .map(|r| {
            r.holds
                .iter()
                .filter_map(|h| h.end_ms)
                .map(|e| e - r.start_ms)
                .fold(0.0, f64::max)
        })
        .fold(user_wait_ms, f64::max);
    let scale = Scale {
        seconds: (horizon_ms / 1_000.0).ceil().max(1.0),
    };
    // Lay out first so the height is known.
    let panels: Vec<(&TimelineRun<'_>, Vec<Row<'_>>)> =
        runs.iter().map(|run| (run, rows(run))).collect();
    let panel_heights: Vec<f64> = panels
        .iter()
        .map(|(_, rows)| 60.0 + rows.iter().map(|r| r.height).sum::<f64>())
        .collect();
    let height = 50.0 + panel_heights.iter().sum::<f64>() + 70.0;

    let mut out = String::new();
    open(
        &mut out,
        height,
        "Every time a service held a worker for one slow request",
    );
    let mut y = 50.0;
    for ((run, rows), panel_height) in panels.iter().zip(&panel_heights) {
        panel(&mut out, &scale, run, rows, y);
        y += panel_height;
    }
    time_axis(&mut out, &scale, y + 5.0);
    legend(&mut out, y + 5.0 + 38.0);
    out.push_str("</svg>\n");
    out
}

/// The timeline's horizontal scale: whole seconds across the plot.
struct Scale {
    seconds: f64,
}

impl Scale {
    /// The x coordinate of `ms` from the run's start.
    fn x(&self, ms: f64) -> f64 {
        LEFT + (ms / (self.seconds * 1_000.0)).clamp(0.0, 1.0) * (WIDTH - LEFT - RIGHT)
    }
}

/// One service's row in a run's panel: its holds by start, each in a lane where it overlaps
/// nothing.
struct Row<'a> {
    service: &'a str,
    holds: Vec<&'a HoldLine>,
    lanes: Vec<usize>,
    height: f64,
}

/// The rows of one run: gateway, orders, inventory.
fn rows<'a>(run: &TimelineRun<'a>) -> Vec<Row<'a>> {
    ["gateway", "orders", "inventory"]
        .into_iter()
        .map(|service| {
            let mut holds: Vec<&HoldLine> = run
                .holds
                .iter()
                .filter(|h| h.service == service && h.start_ms.is_some())
                .collect();
            holds.sort_by(|a, b| {
                a.start_ms
                    .partial_cmp(&b.start_ms)
                    .unwrap_or(std::cmp::Ordering::Equal)
            });
            let lanes = lanes(&holds);
            let n = lanes.iter().max().map_or(1, |m| m + 1);
            Row {
                service,
                holds,
                lanes,
                height: n as f64 * LANE + 10.0,
            }
        })
        .collect()
}

/// The title line of one run's panel: what the user heard and how much work there was.
fn panel_title(run: &TimelineRun<'_>) -> String {
    let heard = match run.user_heard_back_ms {
        Some(at) => format!(
            "user heard {} at {:.2} s",
            run.user_status.unwrap_or(0),
            at / 1_000.0
        ),
        None => format!("user gave up at {:.2} s", run.user_left_ms / 1_000.0),
    };
    let title = format!(
        "{}: {heard}; {} calls, {} after the user left; work until {:.2} s",
        match (run.label, run.deadlines) {
            (Some(label), _) => label,
            (None, true) => "With deadlines",
            (None, false) => "Without deadlines",
        },
        run.calls,
        run.calls_after_user_left,
        run.last_work_end_ms / 1_000.0
    );
    match run.db_seconds_after_user_left {
        Some(s) => format!("{title}; database {s:.2} s after the user left"),
        None => title,
    }
}

/// One run's panel, from `y` down: its title, a row per service, and the user's give-up line.
fn panel(out: &mut String, scale: &Scale, run: &TimelineRun<'_>, rows: &[Row<'_>], y: f64) {
    let left = run.user_left_ms;
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"#,
        y + 18.0,
        escape(&panel_title(run))
    );
    let top = y + 30.0;
    let mut row_y = top;
    for row in rows {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            LEFT - 10.0,
            row_y + 5.0 + LANE * 0.75,
            row.service
        );
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#dddddd"/>"##,
            row_y + row.height,
            WIDTH - RIGHT,
            row_y + row.height
        );
        bars(out, scale, run, row, row_y);
        row_y += row.height;
    }
    // The user's give-up line, labelled below the rows so it never covers a bar.
    let _ = writeln!(
        out,
        r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222222" stroke-dasharray="4 3"/>"##,
        scale.x(left),
        top - 4.0,
        scale.x(left),
        row_y + 4.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
        scale.x(left),
        row_y + 17.0,
        if run.user_heard_back_ms.is_some() {
            format!(
                "user heard back and stopped waiting ({:.2} s)",
                left / 1_000.0
            )
        } else {
            format!("user stops waiting ({:.2} s)", left / 1_000.0)
        }
    );
}

/// One bar per hold in `row`, blue while the user waited and red after.
fn bars(out: &mut String, scale: &Scale, run: &TimelineRun<'_>, row: &Row<'_>, row_y: f64) {
    for (hold, lane) in row.holds.iter().zip(&row.lanes) {
        let (Some(start), Some(end)) = (hold.start_ms, hold.end_ms) else {
            continue;
        };
        let (start, end) = (start - run.start_ms, end - run.start_ms);
        let bar_y = row_y + 5.0 + *lane as f64 * LANE;
        let split = run.user_left_ms.clamp(start, end);
        for (from, to, colour) in [(start, split, BEFORE), (split, end, AFTER)] {
            if to > from {
                let _ = writeln!(
                    out,
                    r#"<rect x="{:.1}" y="{bar_y:.1}" width="{:.1}" height="{:.1}" fill="{colour}" stroke="white" stroke-width="1"><title>{} {} {:.0}-{:.0} ms ({})</title></rect>"#,
                    scale.x(from),
                    (scale.x(to) - scale.x(from)).max(1.0),
                    LANE - 4.0,
                    row.service,
                    escape(hold.request_id.as_deref().unwrap_or("")),
                    from,
                    to,
                    escape(&hold.outcome)
                );
            }
        }
    }
}

/// The time axis at `axis_y`, a tick per second.
fn time_axis(out: &mut String, scale: &Scale, axis_y: f64) {
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#222222"/>"##,
        WIDTH - RIGHT
    );
    for s in 0..=(scale.seconds as u64) {
        let tx = scale.x(s as f64 * 1_000.0);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{axis_y:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#222222"/>"##,
            axis_y + 5.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{s} s</text>"#,
            axis_y + 18.0
        );
    }
}

/// What the two colours mean, at `ly`.
fn legend(out: &mut String, ly: f64) {
    let _ = writeln!(
        out,
        r#"<rect x="{LEFT}" y="{:.1}" width="14" height="12" fill="{BEFORE}"/>"#,
        ly - 10.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{ly:.1}">working while the user waits</text>"#,
        LEFT + 20.0
    );
    let _ = writeln!(
        out,
        r#"<rect x="{:.1}" y="{:.1}" width="14" height="12" fill="{AFTER}"/>"#,
        LEFT + 240.0,
        ly - 10.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{ly:.1}">working after the user stopped waiting</text>"#,
        LEFT + 260.0
    );
}

/// Puts each hold of one service in the first lane where it overlaps nothing.
fn lanes(holds: &[&HoldLine]) -> Vec<usize> {
    let mut ends: Vec<f64> = Vec::new();
    holds
        .iter()
        .map(|h| {
            let (start, end) = (
                h.start_ms.unwrap_or(h.arrival_ms),
                h.end_ms.unwrap_or(h.arrival_ms),
            );
            match ends.iter().position(|e| *e <= start) {
                Some(lane) => {
                    ends[lane] = end;
                    lane
                }
                None => {
                    ends.push(end);
                    ends.len() - 1
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(service: &str, id: &str, start: f64, end: f64) -> HoldLine {
        HoldLine {
            service: service.into(),
            request_id: Some(id.into()),
            outcome: "ok".into(),
            status: Some(200),
            budget_ms: None,
            arrival_ms: start,
            start_ms: Some(start),
            end_ms: Some(end),
            queued_ms: 0.0,
            worked_ms: end - start,
            reply_written: true,
            streamed_ms: 0.0,
            exceeded: None,
            count: 1,
            last_arrival_ms: None,
        }
    }

    fn run(holds: &[HoldLine], deadlines: bool) -> TimelineRun<'_> {
        TimelineRun {
            label: None,
            deadlines,
            holds,
            start_ms: 10_000.0,
            user_status: deadlines.then_some(504),
            user_heard_back_ms: deadlines.then_some(1_000.0),
            user_left_ms: 1_000.0,
            calls: 2,
            calls_after_user_left: 0,
            last_work_end_ms: 2_500.0,
            db_seconds_after_user_left: (!deadlines).then_some(1.5),
        }
    }

    /// Counts the bars of `colour` whose tooltip is `tooltip`.
    fn count_bars(svg: &str, colour: &str, tooltip: &str) -> usize {
        svg.lines()
            .filter(|l| l.contains(&format!(r#"fill="{colour}""#)))
            .filter(|l| l.contains(&format!("<title>{tooltip}</title>")))
            .count()
    }

    #[test]
    fn the_timeline_splits_each_hold_where_the_user_stopped_waiting() {
        let without = [
            hold("gateway", "u", 10_000.0, 12_500.0),
            hold("orders", "u", 10_100.0, 10_900.0),
            // Overlaps the first orders hold: drawn in a second lane.
            hold("orders", "v", 10_200.0, 11_400.0),
        ];
        let with = [hold("gateway", "u", 10_000.0, 11_000.0)];
        let svg = demo_timeline(&[run(&without, false), run(&with, true)], 2_000.0);
        assert!(
            svg.starts_with("<svg ") && svg.ends_with("</svg>\n"),
            "{svg}"
        );
        assert_eq!(
            count_bars(&svg, BEFORE, "gateway u 0-1000 ms (ok)"),
            2,
            "{svg}"
        );
        assert_eq!(
            count_bars(&svg, AFTER, "gateway u 1000-2500 ms (ok)"),
            1,
            "{svg}"
        );
        assert_eq!(
            count_bars(&svg, BEFORE, "orders u 100-900 ms (ok)"),
            1,
            "{svg}"
        );
        assert_eq!(
            count_bars(&svg, BEFORE, "orders v 200-1000 ms (ok)"),
            1,
            "{svg}"
        );
        assert_eq!(
            count_bars(&svg, AFTER, "orders v 1000-1400 ms (ok)"),
            1,
            "{svg}"
        );
        // The overlapping hold sits one lane (16 px) below the first.
        let y_of = |tooltip: &str| -> f64 {
            let line = svg.lines().find(|l| l.contains(tooltip)).unwrap();
            let y = line.split(r#" y=""#).nth(1).unwrap();
            y[..y.find('"').unwrap()].parse().unwrap()
        };
        assert_eq!(y_of("orders v 200-1000") - y_of("orders u 100-900"), LANE);
        assert!(svg.contains("Without deadlines: user gave up at 1.00 s; 2 calls, 0 after the user left; work until 2.50 s; database 1.50 s after the user left"), "{svg}");
        assert!(
            svg.contains("With deadlines: user heard 504 at 1.00 s"),
            "{svg}"
        );
        assert!(
            svg.contains("user heard back and stopped waiting (1.00 s)"),
            "{svg}"
        );
        // Three seconds on the axis: 0 to 3 s.
        assert!(
            svg.contains(">3 s</text>") && !svg.contains(">4 s</text>"),
            "{svg}"
        );
    }
}

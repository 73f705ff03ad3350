//! Hand-written SVG for the demo's timeline and the load command's chart: no dependency, and
//! every number in the picture comes from the services' own logs.

use std::fmt::Write as _;

use crate::holds::HoldLine;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 110.0;
const RIGHT: f64 = 30.0;
const LANE: f64 = 16.0;
const BEFORE: &str = "#4c78a8";
const AFTER: &str = "#e45756";

/// Escapes text for SVG content and attributes.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn open(out: &mut String, height: f64, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="28" font-size="17" font-weight="bold">{}</text>"#,
        escape(title)
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

/// One load run as the chart draws it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ChartLine<'a> {
    /// Whether the services ran with deadlines.
    pub(crate) deadlines: bool,
    /// Share of all users answered in time.
    pub(crate) in_time_share: f64,
    /// Share answered in time among users sent in each second of the run.
    pub(crate) in_time_share_by_second: &'a [f64],
    /// With `--postgres`: the database's time after users left, in seconds.
    pub(crate) db_seconds_after_users_left: Option<f64>,
}

/// The demo's timeline: for each run, one row per service and one bar per worker hold, split at
/// the moment the user stopped waiting.
pub(crate) fn demo_timeline(runs: &[TimelineRun<'_>], user_wait_ms: f64) -> String {
    let services = ["gateway", "orders", "inventory"];
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
    let seconds = (horizon_ms / 1_000.0).ceil().max(1.0);
    let plot = WIDTH - LEFT - RIGHT;
    let x = |ms: f64| LEFT + (ms / (seconds * 1_000.0)).clamp(0.0, 1.0) * plot;

    // Lay out first so the height is known.
    struct Row<'a> {
        service: &'a str,
        holds: Vec<&'a HoldLine>,
        lanes: Vec<usize>,
        height: f64,
    }
    let mut panels = Vec::new();
    for run in runs {
        let rows: Vec<Row<'_>> = services
            .iter()
            .map(|service| {
                let mut holds: Vec<&HoldLine> = run
                    .holds
                    .iter()
                    .filter(|h| h.service == *service && h.start_ms.is_some())
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
            .collect();
        panels.push((run, rows));
    }
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
        let left = run.user_left_ms;
        let heard = match run.user_heard_back_ms {
            Some(at) => format!(
                "user heard {} at {:.2} s",
                run.user_status.unwrap_or(0),
                at / 1_000.0
            ),
            None => format!("user gave up at {:.2} s", left / 1_000.0),
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
        let title = match run.db_seconds_after_user_left {
            Some(s) => format!("{title}; database {s:.2} s after the user left"),
            None => title,
        };
        let _ = writeln!(
            out,
            r#"<text x="{LEFT}" y="{:.1}" font-weight="bold">{}</text>"#,
            y + 18.0,
            escape(&title)
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
            for (hold, lane) in row.holds.iter().zip(&row.lanes) {
                let (Some(start), Some(end)) = (hold.start_ms, hold.end_ms) else {
                    continue;
                };
                let (start, end) = (start - run.start_ms, end - run.start_ms);
                let bar_y = row_y + 5.0 + *lane as f64 * LANE;
                let split = left.clamp(start, end);
                for (from, to, colour) in [(start, split, BEFORE), (split, end, AFTER)] {
                    if to > from {
                        let _ = writeln!(
                            out,
                            r#"<rect x="{:.1}" y="{bar_y:.1}" width="{:.1}" height="{:.1}" fill="{colour}" stroke="white" stroke-width="1"><title>{} {} {:.0}-{:.0} ms ({})</title></rect>"#,
                            x(from),
                            (x(to) - x(from)).max(1.0),
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
            row_y += row.height;
        }
        // The user's give-up line, labelled below the rows so it never covers a bar.
        let _ = writeln!(
            out,
            r##"<line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#222222" stroke-dasharray="4 3"/>"##,
            x(left),
            top - 4.0,
            x(left),
            row_y + 4.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" font-size="11" text-anchor="middle">{}</text>"#,
            x(left),
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
        y += panel_height;
    }
    // Time axis.
    let axis_y = y + 5.0;
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{axis_y:.1}" x2="{:.1}" y2="{axis_y:.1}" stroke="#222222"/>"##,
        WIDTH - RIGHT
    );
    for s in 0..=(seconds as u64) {
        let tx = x(s as f64 * 1_000.0);
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
    // Legend.
    let ly = axis_y + 38.0;
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
    out.push_str("</svg>\n");
    out
}

/// The load command's chart: the share of users answered in time, by the second they were sent,
/// one line per run.
pub(crate) fn load_chart(runs: &[ChartLine<'_>], subtitle: &str) -> String {
    let height = 420.0;
    let (top, bottom) = (70.0, height - 80.0);
    let plot = WIDTH - LEFT - RIGHT;
    let seconds = runs
        .iter()
        .map(|r| r.in_time_share_by_second.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let x = |s: f64| LEFT + s / seconds as f64 * plot;
    let y = |share: f64| bottom - share.clamp(0.0, 1.0) * (bottom - top);

    let mut out = String::new();
    open(
        &mut out,
        height,
        "Users answered in time, by the second they arrived",
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="48" font-size="12" fill="#444444">{}</text>"##,
        escape(subtitle)
    );
    for pct in [0u32, 25, 50, 75, 100] {
        let ty = y(f64::from(pct) / 100.0);
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e5e5e5"/>"##,
            WIDTH - RIGHT
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{pct} %</text>"#,
            LEFT - 8.0,
            ty + 4.0
        );
    }
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#222222"/>"##,
        WIDTH - RIGHT
    );
    let step = if seconds > 30 { 5 } else { 1 };
    for s in (0..=seconds).step_by(step) {
        let tx = x(s as f64);
        let _ = writeln!(
            out,
            r##"<line x1="{tx:.1}" y1="{bottom:.1}" x2="{tx:.1}" y2="{:.1}" stroke="#222222"/>"##,
            bottom + 5.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{s}</text>"#,
            bottom + 18.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">second of the run in which the user arrived</text>"#,
        LEFT + plot / 2.0,
        bottom + 36.0
    );
    let mut legend_x = LEFT;
    // "With" first, so the dashed "without" line stays visible where the two coincide.
    let mut ordered: Vec<&ChartLine<'_>> = runs.iter().collect();
    ordered.sort_by_key(|r| !r.deadlines);
    for run in ordered {
        let colour = if run.deadlines { BEFORE } else { AFTER };
        let dash = if run.deadlines {
            ""
        } else {
            r#" stroke-dasharray="7 4""#
        };
        let points: Vec<String> = run
            .in_time_share_by_second
            .iter()
            .enumerate()
            .map(|(s, share)| format!("{:.1},{:.1}", x(s as f64 + 0.5), y(*share)))
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2.5"{dash}/>"#,
            points.join(" ")
        );
        let label = format!(
            "{}: {:.1} % in time overall",
            if run.deadlines {
                "with deadlines"
            } else {
                "without deadlines"
            },
            run.in_time_share * 100.0
        );
        let label = match run.db_seconds_after_users_left {
            Some(s) => format!("{label}, database {s:.1} s after users left"),
            None => label,
        };
        let ly = height - 18.0;
        let _ = writeln!(
            out,
            r#"<rect x="{legend_x:.1}" y="{:.1}" width="14" height="4" fill="{colour}"/>"#,
            ly - 6.0
        );
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{ly:.1}">{}</text>"#,
            legend_x + 20.0,
            escape(&label)
        );
        legend_x += if run.db_seconds_after_users_left.is_some() {
            460.0
        } else {
            300.0
        };
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_markup() {
        assert_eq!(
            escape(r#"<a href="x">&'"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;"
        );
    }
}

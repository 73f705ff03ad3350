//! The load command's chart: the share of users answered in time, by the second they were
//! sent, one line per run (with deadlines solid, without dashed), each with its legend.

use std::fmt::Write as _;

use super::draw::{AFTER, BEFORE, LEFT, RIGHT, WIDTH, escape, grid_line, open};

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

/// The load command's chart: the share of users answered in time, by the second they were sent,
/// one line per run.
pub(crate) fn load_chart(runs: &[ChartLine<'_>], subtitle: &str) -> String {
    let height = 420.0;
    let frame = ChartFrame {
        seconds: runs
            .iter()
            .map(|r| r.in_time_share_by_second.len())
            .max()
            .unwrap_or(1)
            .max(1),
        top: 70.0,
        bottom: height - 80.0,
    };
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
    frame.share_grid(&mut out);
    frame.seconds_axis(&mut out);
    let mut legend_x = LEFT;
    // "With" first, so the dashed "without" line stays visible where the two coincide.
    let mut ordered: Vec<&ChartLine<'_>> = runs.iter().collect();
    ordered.sort_by_key(|r| !r.deadlines);
    for run in ordered {
        legend_x = frame.line(&mut out, run, height - 18.0, legend_x);
    }
    out.push_str("</svg>\n");
    out
}

/// The load chart's axes: the run's seconds across, the share in time up.
struct ChartFrame {
    seconds: usize,
    top: f64,
    bottom: f64,
}

impl ChartFrame {
    fn x(&self, s: f64) -> f64 {
        LEFT + s / self.seconds as f64 * (WIDTH - LEFT - RIGHT)
    }

    fn y(&self, share: f64) -> f64 {
        self.bottom - share.clamp(0.0, 1.0) * (self.bottom - self.top)
    }

    /// A grid line and label every 25 %.
    fn share_grid(&self, out: &mut String) {
        for pct in [0u32, 25, 50, 75, 100] {
            grid_line(
                out,
                LEFT,
                self.y(f64::from(pct) / 100.0),
                &format!("{pct} %"),
            );
        }
    }

    /// The seconds axis, a tick per second (every fifth past 30 s), and its caption.
    fn seconds_axis(&self, out: &mut String) {
        let bottom = self.bottom;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#222222"/>"##,
            WIDTH - RIGHT
        );
        let step = if self.seconds > 30 { 5 } else { 1 };
        for s in (0..=self.seconds).step_by(step) {
            let tx = self.x(s as f64);
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
            LEFT + (WIDTH - LEFT - RIGHT) / 2.0,
            bottom + 36.0
        );
    }

    /// One run's line and its legend entry at (`legend_x`, `ly`); returns where the next
    /// entry starts.
    fn line(&self, out: &mut String, run: &ChartLine<'_>, ly: f64, legend_x: f64) -> f64 {
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
            .map(|(s, share)| format!("{:.1},{:.1}", self.x(s as f64 + 0.5), self.y(*share)))
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
        legend_x
            + if run.db_seconds_after_users_left.is_some() {
                460.0
            } else {
                300.0
            }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_load_chart_draws_a_line_per_run_with_its_legend() {
        let (with, without) = ([1.0, 0.95, 0.9], [0.5, 0.25, 0.0]);
        let svg = load_chart(
            &[
                ChartLine {
                    deadlines: false,
                    in_time_share: 0.25,
                    in_time_share_by_second: &without,
                    db_seconds_after_users_left: Some(12.5),
                },
                ChartLine {
                    deadlines: true,
                    in_time_share: 0.95,
                    in_time_share_by_second: &with,
                    db_seconds_after_users_left: None,
                },
            ],
            "30 users/s <10 s>",
        );
        // The subtitle is escaped; "with" is drawn first so the dashed "without" stays on top.
        assert!(svg.contains("30 users/s &lt;10 s&gt;"), "{svg}");
        let lines: Vec<&str> = svg.lines().filter(|l| l.starts_with("<polyline")).collect();
        assert_eq!(lines.len(), 2, "{svg}");
        assert!(
            lines[0].contains(BEFORE) && !lines[0].contains("dasharray"),
            "{svg}"
        );
        assert!(
            lines[1].contains(AFTER) && lines[1].contains("dasharray"),
            "{svg}"
        );
        // A point per second, mid-second, 100 % at the top (y 70) and 0 % at the bottom (y 340).
        let plot = WIDTH - LEFT - RIGHT;
        assert!(
            lines[0].contains(&format!("{:.1},70.0", LEFT + plot / 6.0)),
            "{svg}"
        );
        assert!(
            lines[1].contains(&format!("{:.1},340.0", LEFT + plot * 5.0 / 6.0)),
            "{svg}"
        );
        assert!(
            svg.contains(">with deadlines: 95.0 % in time overall<"),
            "{svg}"
        );
        assert!(
            svg.contains(
                ">without deadlines: 25.0 % in time overall, database 12.5 s after users left<"
            ),
            "{svg}"
        );
    }
}

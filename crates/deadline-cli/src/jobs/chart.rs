//! The `--svg` chart of `deadline jobs`: the broker's backlog and the age of messages when
//! their work began, over time, both runs on the same axes.

use std::fmt::Write as _;

use super::Settings;
use super::report::{RunReport, run_name};
use crate::svg::draw::{escape, grid_line, open_at};

const WIDTH: f64 = 960.0;
const LEFT: f64 = 90.0;
const RIGHT: f64 = 30.0;
const WITH: &str = "#4c78a8";
const WITHOUT: &str = "#e45756";
/// Ages are averaged over windows this long.
const AGE_WINDOW_MS: f64 = 500.0;

/// A panel's vertical extent and value range.
struct Panel {
    top: f64,
    bottom: f64,
    max: f64,
}

impl Panel {
    fn y(&self, value: f64) -> f64 {
        self.bottom - (value / self.max).clamp(0.0, 1.0) * (self.bottom - self.top)
    }
}

/// A round axis maximum at or above `value`.
fn nice_max(value: f64) -> f64 {
    let value = value.max(1.0);
    let magnitude = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|m| *m >= value)
        .unwrap_or(10.0 * magnitude)
}

fn axes(out: &mut String, panel: &Panel, x_max_s: f64, x: &dyn Fn(f64) -> f64, unit: &str) {
    for i in 0..=4 {
        let value = panel.max * f64::from(i) / 4.0;
        grid_line(out, LEFT, panel.y(value), &format!("{value:.0}{unit}"));
    }
    let bottom = panel.bottom;
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{bottom:.1}" x2="{:.1}" y2="{bottom:.1}" stroke="#222222"/>"##,
        WIDTH - RIGHT
    );
    let step = (x_max_s / 10.0).ceil().max(1.0);
    let mut s = 0.0;
    while s <= x_max_s {
        let tx = x(s);
        let _ = writeln!(
            out,
            r#"<text x="{tx:.1}" y="{:.1}" text-anchor="middle" font-size="11">{s:.0}</text>"#,
            bottom + 16.0
        );
        s += step;
    }
}

fn polyline(out: &mut String, points: &[(f64, f64)], colour: &str, dashed: bool) {
    if points.is_empty() {
        return;
    }
    let text: Vec<String> = points
        .iter()
        .map(|(x, y)| format!("{x:.1},{y:.1}"))
        .collect();
    let dash = if dashed {
        r#" stroke-dasharray="7 4""#
    } else {
        ""
    };
    let _ = writeln!(
        out,
        r#"<polyline points="{}" fill="none" stroke="{colour}" stroke-width="2"{dash}/>"#,
        text.join(" ")
    );
}

/// The mean age of the messages whose work began in each window: (window middle ms, age ms).
fn ages_by_window(run: &RunReport) -> Vec<(f64, f64)> {
    let windows = run
        .records
        .iter()
        .map(|r| (r.began_ms / AGE_WINDOW_MS) as usize)
        .max()
        .map_or(0, |m| m + 1);
    let mut sums = vec![(0.0, 0u32); windows];
    for record in &run.records {
        let slot = &mut sums[(record.began_ms / AGE_WINDOW_MS) as usize];
        slot.0 += record.age_ms;
        slot.1 += 1;
    }
    sums.iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0)
        .map(|(i, (sum, n))| ((i as f64 + 0.5) * AGE_WINDOW_MS, sum / f64::from(*n)))
        .collect()
}

/// The chart: backlog on top, age below, both runs in each.
pub(crate) fn draw(settings: &Settings, runs: &[RunReport]) -> String {
    let height = 700.0;
    let plot = WIDTH - LEFT - RIGHT;
    let x_max_s = runs
        .iter()
        .map(|r| r.took.as_secs_f64())
        .fold(1.0, f64::max)
        .ceil();
    let x = |s: f64| LEFT + s / x_max_s * plot;
    let backlog = Panel {
        top: 90.0,
        bottom: 330.0,
        max: nice_max(
            runs.iter()
                .flat_map(|r| r.samples.iter().map(|s| s.backlog as f64))
                .fold(1.0, f64::max),
        ),
    };
    let expiry_ms = settings.expiry.as_secs_f64() * 1e3;
    let age = Panel {
        top: 400.0,
        bottom: 620.0,
        max: nice_max(
            runs.iter()
                .map(|r| r.age_max_ms)
                .fold(expiry_ms * 1.2, f64::max),
        ),
    };

    let mut out = String::new();
    heading(&mut out, settings, height);
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="80" font-size="13" font-weight="bold">Messages waiting on the queue (the broker's count)</text>"#
    );
    axes(&mut out, &backlog, x_max_s, &x, "");
    let _ = writeln!(
        out,
        r#"<text x="{LEFT}" y="390" font-size="13" font-weight="bold">Age of a message when its work began (mean over {AGE_WINDOW_MS:.0} ms)</text>"#
    );
    axes(&mut out, &age, x_max_s, &x, " ms");
    let ey = age.y(expiry_ms);
    let _ = writeln!(
        out,
        r##"<line x1="{LEFT}" y1="{ey:.1}" x2="{:.1}" y2="{ey:.1}" stroke="#222222" stroke-dasharray="2 3"/>"##,
        WIDTH - RIGHT
    );
    let _ = writeln!(
        out,
        r##"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">expiry</text>"##,
        WIDTH - RIGHT - 4.0,
        ey - 4.0
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">seconds from the start of the run</text>"#,
        LEFT + plot / 2.0,
        age.bottom + 34.0
    );

    run_lines(&mut out, runs, &x, (&backlog, &age), height);
    out.push_str("</svg>\n");
    out
}

/// The chart's opening: the `<svg>` element, its background, the title and the settings.
fn heading(out: &mut String, settings: &Settings, height: f64) {
    open_at(
        out,
        height,
        LEFT,
        "Queued work with slow consumers, without expiry and with it",
    );
    let subtitle = format!(
        "{} messages/s for {} s; {} consumer(s) of {} ms each (capacity {:.1}/s); expiry {} ms",
        settings.rate,
        settings.seconds,
        settings.consumers,
        settings.work.as_millis(),
        settings.capacity(),
        settings.expiry.as_millis()
    );
    let _ = writeln!(
        out,
        r##"<text x="{LEFT}" y="50" font-size="12" fill="#444444">{}</text>"##,
        escape(&subtitle)
    );
}

/// Each run's backlog and age lines (solid with expiry, dashed without) and its legend entry.
fn run_lines(
    out: &mut String,
    runs: &[RunReport],
    x: &dyn Fn(f64) -> f64,
    (backlog, age): (&Panel, &Panel),
    height: f64,
) {
    let mut legend_x = LEFT;
    for run in runs {
        let colour = if run.expiry { WITH } else { WITHOUT };
        let dashed = !run.expiry;
        let points: Vec<(f64, f64)> = run
            .samples
            .iter()
            .map(|s| (x(s.at_ms / 1e3), backlog.y(s.backlog as f64)))
            .collect();
        polyline(out, &points, colour, dashed);
        let points: Vec<(f64, f64)> = ages_by_window(run)
            .into_iter()
            .map(|(at, a)| (x(at / 1e3), age.y(a)))
            .collect();
        polyline(out, &points, colour, dashed);
        let label = format!(
            "{}: {:.0} ms of work on expired messages, age p99 {:.0} ms",
            run_name(run.expiry),
            run.work_on_expired_ms,
            run.age_p99_ms
        );
        let ly = height - 16.0;
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
        legend_x += 420.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_maxima_are_round() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(7.0), 10.0);
        assert_eq!(nice_max(180.0), 200.0);
        assert_eq!(nice_max(1_200.0), 2_000.0);
        assert_eq!(nice_max(2_400.0), 2_500.0);
    }
}

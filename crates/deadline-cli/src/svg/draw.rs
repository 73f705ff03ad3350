//! What every SVG picture of the `deadline` command shares: the canvas's width, margins and
//! colours, its opening (the `<svg>` element, a white background, the title), escaping text,
//! and a labelled grid line.

use std::fmt::Write as _;

/// The width of every picture, in pixels.
pub(crate) const WIDTH: f64 = 960.0;
/// Where the plot starts, leaving room for the labels on its left.
pub(crate) const LEFT: f64 = 110.0;
/// The margin right of the plot.
pub(crate) const RIGHT: f64 = 30.0;
/// The colour of work before the user stopped waiting, and of the run with deadlines.
pub(crate) const BEFORE: &str = "#4c78a8";
/// The colour of work after the user stopped waiting, and of the run without deadlines.
pub(crate) const AFTER: &str = "#e45756";

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

/// A light horizontal grid line at `y` across a plot that starts at `left`, with `label` to
/// its left: the value axes of the load chart and of `deadline jobs`' chart.
pub(crate) fn grid_line(out: &mut String, left: f64, y: f64, label: &str) {
    let _ = writeln!(
        out,
        r##"<line x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/>"##,
        WIDTH - RIGHT
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="end" font-size="11">{label}</text>"#,
        left - 8.0,
        y + 4.0
    );
}

/// Opens a picture `height` pixels high: the `<svg>` element, a white background, `title`.
pub(crate) fn open(out: &mut String, height: f64, title: &str) {
    open_at(out, height, LEFT, title);
}

/// As [`open`], the title starting at `left` (a picture whose plot has margins of its own).
pub(crate) fn open_at(out: &mut String, height: f64, left: f64, title: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="Helvetica, Arial, sans-serif" font-size="13">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{left}" y="28" font-size="17" font-weight="bold">{}</text>"#,
        escape(title)
    );
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

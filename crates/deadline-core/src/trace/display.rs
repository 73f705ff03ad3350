//! [`Trace`]'s readable tree, for terminals and logs.

use std::fmt;

use super::{Span, Trace};

/// A readable tree, one line per span: `name  start–end ms (duration ms)  outcome`, then
/// `budget N ms` on a hop's root span that carries its budget at arrival; children
/// indented under their parent with `├─ `, `└─ ` and `│  `, then `… and N more spans` when spans
/// were dropped. An empty trace is `(empty trace)`. Every line ends with a newline.
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.spans.is_empty() && self.dropped == 0 {
            return writeln!(f, "(empty trace)");
        }
        struct Line<'a> {
            span: &'a Span,
            /// Drawn before the connector: one `│  ` or three spaces per ancestor level.
            indent: String,
            /// `None` for a root, else whether this is its parent's last child.
            last: Option<bool>,
        }
        let mut stack: Vec<Line<'_>> = self
            .spans
            .iter()
            .rev()
            .map(|span| Line {
                span,
                indent: String::new(),
                last: None,
            })
            .collect();
        while let Some(Line { span, indent, last }) = stack.pop() {
            let connector = match last {
                None => "",
                Some(true) => "└─ ",
                Some(false) => "├─ ",
            };
            write!(
                f,
                "{indent}{connector}{}  {}–{} ms ({} ms)",
                span.name,
                span.start_ms,
                span.end_ms,
                span.end_ms.saturating_sub(span.start_ms)
            )?;
            if let Some(outcome) = &span.outcome {
                write!(f, "  {outcome}")?;
            }
            match span.budget_ms {
                Some(ms) => writeln!(f, "  budget {ms} ms")?,
                None => writeln!(f)?,
            }
            let child_indent = match last {
                None => String::new(),
                Some(true) => format!("{indent}   "),
                Some(false) => format!("{indent}│  "),
            };
            let n = span.children.len();
            stack.extend(
                span.children
                    .iter()
                    .enumerate()
                    .rev()
                    .map(|(i, child)| Line {
                        span: child,
                        indent: child_indent.clone(),
                        last: Some(i + 1 == n),
                    }),
            );
        }
        match self.dropped {
            0 => Ok(()),
            1 => writeln!(f, "… and 1 more span"),
            n => writeln!(f, "… and {n} more spans"),
        }
    }
}

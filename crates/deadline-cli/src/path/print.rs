//! The text output of `deadline path`: each hop's timers in a table (kind, name, value, where
//! read, scope), its retries on timeout, the effective limit, then every violation with both
//! ends and its fix.

use std::fmt::Write as _;
use std::time::Duration;

use deadline::path::{Hop, Report};

/// The whole report as text.
pub(super) fn text(hops: &[Hop], report: &Report, margin: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "path: {} hop{}, user first; margin {} ms",
        hops.len(),
        if hops.len() == 1 { "" } else { "s" },
        margin.as_millis()
    );
    for (i, hop) in hops.iter().enumerate() {
        let _ = writeln!(out, "\n{}. {}", i + 1, hop.name);
        for t in &hop.timers {
            let _ = write!(
                out,
                "   {:<11} {:<7} {:<40} {:>10}  {}",
                t.kind.to_string(),
                role(t.role),
                t.name,
                t.limit.to_string(),
                t.origin
            );
            if !t.scope.is_empty() {
                let _ = write!(out, "  [{}]", t.scope);
            }
            out.push('\n');
        }
        for r in &hop.retries {
            let _ = writeln!(
                out,
                "   retries on timeout: {} (total cap: {})  {}  [{}]",
                r.directive, r.cap, r.origin, r.scope
            );
        }
        if hop.sends_budget {
            let _ = writeln!(out, "   sends its budget to the next hop");
        }
    }
    match &report.effective {
        Some(end) => {
            let _ = writeln!(out, "\neffective limit: {} ({})", end.limit, end);
        }
        None => {
            let _ = writeln!(out, "\neffective limit: none: no hop limits the path");
        }
    }
    if report.violations.is_empty() {
        let _ = writeln!(out, "no violations");
        return out;
    }
    let _ = writeln!(
        out,
        "\n{} violation{}:",
        report.violations.len(),
        if report.violations.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    for v in &report.violations {
        let _ = writeln!(out, "\n[{}] {}", v.rule, v.problem);
        if let Some(outer) = &v.outer {
            let _ = writeln!(out, "   outer: {outer}");
        }
        let _ = writeln!(out, "   inner: {}", v.inner);
        let _ = writeln!(out, "   fix:   {}", v.fix);
    }
    out
}

/// A role's short name in the table.
fn role(role: deadline::path::Role) -> &'static str {
    use deadline::path::Role;
    match role {
        Role::Own => "own",
        Role::Waits => "waits",
        Role::Caller => "caller",
        Role::Callee => "callee",
    }
}

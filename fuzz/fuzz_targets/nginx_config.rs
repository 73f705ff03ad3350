//! The nginx configuration reader (`deadline::path::nginx`), from raw text: no panic on any
//! input, and beyond that: reading is deterministic; every timer, retry and error names a line
//! of the input (from 1 to its line count); every timer's value is a time nginx's grammar can
//! write; and the rules run over the hop without panicking, each violation naming a timer or
//! retry the hop holds.

#![no_main]

use std::time::Duration;

use deadline::path::{Limit, Origin, check, nginx};
use libfuzzer_sys::fuzz_target;

fn no_includes(pattern: &str, _from: &str) -> Result<nginx::Loaded, String> {
    Err(format!("no include {pattern} here"))
}

fn line_of(origin: &Origin) -> Option<u32> {
    match origin {
        Origin::Line { line, .. } | Origin::Default { line, .. } => Some(*line),
        Origin::Key { .. } => None,
    }
}

fuzz_target!(|raw: &[u8]| {
    let Ok(text) = std::str::from_utf8(raw) else {
        return;
    };
    let lines = u32::try_from(text.split('\n').count()).unwrap_or(u32::MAX);
    let first = nginx::parse("fuzz.conf", text, &mut no_includes);
    let again = nginx::parse("fuzz.conf", text, &mut no_includes);
    assert_eq!(first, again, "reading is deterministic");
    let hop = match first {
        Ok(hop) => hop,
        Err(err) => {
            assert!((1..=lines).contains(&err.line), "error line {} of {lines}: {err}", err.line);
            assert_eq!(err.file, "fuzz.conf");
            return;
        }
    };
    for timer in &hop.timers {
        let line = line_of(&timer.origin).expect("a file's timers come from its lines");
        assert!((1..=lines).contains(&line), "{timer:?} outside {lines} lines");
        if let Limit::After(d) = timer.limit {
            // u32::MAX weeks is the most the grammar can say in one part; far less in practice.
            assert!(d <= Duration::from_secs(604_800).saturating_mul(u32::MAX).saturating_mul(16));
        }
    }
    for retry in &hop.retries {
        let line = line_of(&retry.origin).expect("a file's retries come from its lines");
        assert!((1..=lines).contains(&line), "{retry:?} outside {lines} lines");
    }
    let report = check(std::slice::from_ref(&hop), Duration::from_millis(50));
    for v in &report.violations {
        let held = hop.timers.iter().any(|t| t.origin == v.inner.origin)
            || hop.retries.iter().any(|r| r.origin == v.inner.origin);
        assert!(held, "{v:?} names nothing the hop holds");
    }
});

//! The HAProxy configuration reader (`deadline::path::haproxy`), from raw text: no panic on any
//! input, and beyond that: reading is deterministic; every timer, retry and error names a line
//! of the input (from 1 to its line count); a `timeout server` is on every backend (set, or
//! unset and then unlimited); and the rules run over the hop, each violation naming a timer or
//! retry the hop holds.

#![no_main]

use std::time::Duration;

use deadline::path::{Origin, check, haproxy};
use libfuzzer_sys::fuzz_target;

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
    let lines = u32::try_from(text.lines().count().max(1)).unwrap_or(u32::MAX);
    let first = haproxy::parse("fuzz.cfg", text);
    assert_eq!(first, haproxy::parse("fuzz.cfg", text), "reading is deterministic");
    let hop = match first {
        Ok(hop) => hop,
        Err(err) => {
            assert!((1..=lines).contains(&err.line), "error line {} of {lines}: {err}", err.line);
            return;
        }
    };
    for timer in &hop.timers {
        let line = line_of(&timer.origin).expect("a file's timers come from its lines");
        assert!((1..=lines).contains(&line), "{timer:?} outside {lines} lines");
    }
    for retry in &hop.retries {
        let line = line_of(&retry.origin).expect("a file's retries come from its lines");
        assert!((1..=lines).contains(&line), "{retry:?} outside {lines} lines");
    }
    // Every backend (or listen) section has exactly one `timeout server`, and one `timeout
    // connect`: set or unlimited, never missing.
    let servers = hop.timers.iter().filter(|t| t.name == "timeout server").count();
    let connects = hop.timers.iter().filter(|t| t.name == "timeout connect").count();
    assert_eq!(servers, connects);
    let report = check(std::slice::from_ref(&hop), Duration::from_millis(50));
    for v in &report.violations {
        let held = hop.timers.iter().any(|t| t.origin == v.inner.origin)
            || hop.retries.iter().any(|r| r.origin == v.inner.origin);
        assert!(held, "{v:?} names nothing the hop holds");
    }
});

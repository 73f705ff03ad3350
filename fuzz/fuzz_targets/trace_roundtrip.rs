//! `Trace` encode then decode, on traces built from structured input: any shape (any number of
//! roots and spans, nesting deeper than the cap), names and outcomes that are valid tokens or
//! arbitrary text, times anywhere in `u64`, spans made by the constructors or with their fields
//! set directly, an optional `shift`, and any dropped count.
//!
//! The decoded trace must equal what the documented rules make of the original, computed here by
//! a model that does not share the encoder's algorithm:
//! - spans are kept in breadth-first order (level by level, left to right, across all roots),
//!   skipping anything 16 or more levels deep, up to 64 spans; the rest are added to the dropped
//!   count, which saturates at `MAX_MS`;
//! - names and outcomes become `tchar` tokens (every other character becomes `_`, cut to 24 and
//!   16 characters, never empty); times saturate at `MAX_MS`, and an end before its start is
//!   written as the start;
//! - a kept span keeps its budget at arrival (saturating at `MAX_MS`), which `shift` leaves as
//!   it is; a dropped span's budget goes with it.
//!
//! A trace already within every cap comes back exactly. The encoding is at most
//! `MAX_ENCODED_LEN` bytes, is a valid header value, and re-encoding the decoded trace gives the
//! same bytes.

#![no_main]

use std::collections::HashSet;

use arbitrary::Arbitrary;
use deadline::trace::{
    MAX_DEPTH, MAX_ENCODED_LEN, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN, MAX_SPANS, Span, Trace,
};
use http::HeaderValue;
use libfuzzer_sys::fuzz_target;

const TCHARS: &[u8; 65] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:";

/// A name or outcome: a valid token (each byte picks a `tchar`) or any text at all.
#[derive(Debug, Arbitrary)]
enum Text {
    Token(Vec<u8>),
    Raw(String),
}

impl Text {
    fn text(&self) -> String {
        match self {
            Text::Token(picks) => picks
                .iter()
                .map(|&b| char::from(TCHARS[usize::from(b) % TCHARS.len()]))
                .collect(),
            Text::Raw(text) => text.clone(),
        }
    }
}

/// Mostly small times, sometimes anything.
#[derive(Debug, Arbitrary)]
enum Time {
    Small(u16),
    Any(u64),
}

impl Time {
    fn ms(&self) -> u64 {
        match *self {
            Time::Small(ms) => u64::from(ms),
            Time::Any(ms) => ms,
        }
    }
}

/// One span in pre-order, with the nesting level it asks for (clamped to at most one deeper
/// than the span before it).
#[derive(Debug, Arbitrary)]
struct Node {
    depth: u8,
    name: Text,
    start: Time,
    end: Time,
    outcome: Option<Text>,
    /// The hop's budget at arrival.
    budget: Option<Time>,
    /// Built with `Span::new` and `with_outcome` rather than by setting the fields.
    constructed: bool,
}

#[derive(Debug, Arbitrary)]
struct Input {
    dropped: Time,
    shift: Option<Time>,
    nodes: Vec<Node>,
}

fn span(node: &Node) -> Span {
    let (name, start, end) = (node.name.text(), node.start.ms(), node.end.ms());
    let outcome = node.outcome.as_ref().map(Text::text);
    let budget_ms = node.budget.as_ref().map(Time::ms);
    if node.constructed {
        let span = Span::new(&name, start, end);
        let span = match outcome {
            Some(outcome) => span.with_outcome(&outcome),
            None => span,
        };
        match budget_ms {
            Some(ms) => span.with_budget_ms(ms),
            None => span,
        }
    } else {
        Span {
            name,
            start_ms: start,
            end_ms: end,
            outcome,
            budget_ms,
            children: Vec::new(),
        }
    }
}

/// Roots from spans in pre-order: the open path is a stack, closed as the depth goes back up.
fn forest(nodes: &[Node]) -> Vec<Span> {
    fn close(roots: &mut Vec<Span>, open: &mut Vec<Span>) {
        if let Some(span) = open.pop() {
            match open.last_mut() {
                Some(parent) => parent.children.push(span),
                None => roots.push(span),
            }
        }
    }
    let mut roots = Vec::new();
    let mut open: Vec<Span> = Vec::new();
    for node in nodes {
        let depth = usize::from(node.depth).min(open.len());
        while open.len() > depth {
            close(&mut roots, &mut open);
        }
        open.push(span(node));
    }
    while !open.is_empty() {
        close(&mut roots, &mut open);
    }
    roots
}

/// The sanitising rule, written out: one `_` per character outside `tchar`, cut to `max_len`
/// characters, `_` if nothing is left.
fn token(raw: &str, max_len: usize) -> String {
    let out: String = raw
        .chars()
        .take(max_len)
        .map(|c| match u8::try_from(c) {
            Ok(b) if TCHARS.contains(&b) => c,
            _ => '_',
        })
        .collect();
    if out.is_empty() { "_".to_owned() } else { out }
}

/// The spans the caps keep, by address: breadth-first across all roots, below `MAX_DEPTH`, the
/// first `MAX_SPANS`. Also returns how many spans the trace holds in all.
fn kept(roots: &[Span]) -> (HashSet<*const Span>, usize) {
    let mut keep = HashSet::new();
    let mut total = 0;
    let mut level: Vec<&Span> = roots.iter().collect();
    let mut depth = 0;
    while !level.is_empty() {
        let mut next = Vec::new();
        for span in level {
            total += 1;
            if depth < MAX_DEPTH && keep.len() < MAX_SPANS {
                keep.insert(std::ptr::from_ref(span));
            }
            next.extend(span.children.iter());
        }
        level = next;
        depth += 1;
    }
    (keep, total)
}

/// What the kept part of `span` must decode to, with times moved by `shift`.
fn expected(span: &Span, keep: &HashSet<*const Span>, shift: u64, reached: &mut usize) -> Span {
    *reached += 1;
    let start = span.start_ms.saturating_add(shift);
    let end = span.end_ms.saturating_add(shift).max(start);
    Span {
        name: token(&span.name, MAX_NAME_LEN),
        start_ms: start.min(MAX_MS),
        end_ms: end.min(MAX_MS),
        outcome: span.outcome.as_deref().map(|o| token(o, MAX_OUTCOME_LEN)),
        budget_ms: span.budget_ms.map(|ms| ms.min(MAX_MS)),
        children: span
            .children
            .iter()
            .filter(|c| keep.contains(&std::ptr::from_ref(*c)))
            .map(|c| expected(c, keep, shift, reached))
            .collect(),
    }
}

/// Whether the trace is already within every cap, so it must come back unchanged.
fn within_caps(trace: &Trace) -> bool {
    let mut count = 0;
    let mut stack: Vec<(&Span, usize)> = trace.spans.iter().map(|s| (s, 0)).collect();
    while let Some((span, depth)) = stack.pop() {
        count += 1;
        let ok = depth < MAX_DEPTH
            && token(&span.name, MAX_NAME_LEN) == span.name
            && span
                .outcome
                .as_ref()
                .is_none_or(|o| token(o, MAX_OUTCOME_LEN) == *o)
            && span.start_ms <= span.end_ms
            && span.end_ms <= MAX_MS
            && span.budget_ms.is_none_or(|ms| ms <= MAX_MS);
        if !ok {
            return false;
        }
        stack.extend(span.children.iter().map(|c| (c, depth + 1)));
    }
    count <= MAX_SPANS && trace.dropped <= MAX_MS
}

fuzz_target!(|input: Input| {
    let original = Trace {
        spans: forest(&input.nodes),
        dropped: input.dropped.ms(),
    };
    let shift = input.shift.as_ref().map_or(0, Time::ms);
    let mut trace = original.clone();
    if input.shift.is_some() {
        trace.shift(shift);
    }

    let encoded = trace.encode();
    assert!(encoded.len() <= MAX_ENCODED_LEN, "{} bytes", encoded.len());
    assert!(HeaderValue::from_str(&encoded).is_ok(), "{encoded}");
    assert_eq!(trace.to_header_value(), encoded.as_str());
    let decoded = Trace::decode(encoded.as_bytes());

    let (keep, total) = kept(&original.spans);
    let mut reached = 0;
    let want = Trace {
        spans: original
            .spans
            .iter()
            .filter(|s| keep.contains(&std::ptr::from_ref(*s)))
            .map(|s| expected(s, &keep, shift, &mut reached))
            .collect(),
        dropped: u64::try_from(total - keep.len())
            .expect("fits")
            .saturating_add(original.dropped)
            .min(MAX_MS),
    };
    assert_eq!(reached, keep.len(), "a kept span lost its parent");
    assert_eq!(decoded, want, "{encoded}");
    assert_eq!(decoded.encode(), encoded);
    if within_caps(&trace) {
        assert_eq!(decoded, trace);
    }
});

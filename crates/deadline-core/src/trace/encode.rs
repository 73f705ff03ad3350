//! The encoder: a [`Trace`] to its `Deadline-Trace` text, with the caps applied.
//!
//! Everything that writes the grammar goes through [`write_element`], whether into a growing
//! `Vec<u8>` ([`Trace::encode`]) or into a fixed buffer on the stack (the hop's own spans, see
//! [`HopTrace`](super::HopTrace)).

use std::borrow::Cow;

use http::HeaderValue;

use super::decode::Budgets;
use super::name::ATTEMPT;
use super::token::{is_token, sanitize_name};
use super::{CallSpan, Recorded, Span, Trace};
use super::{MAX_DEPTH, MAX_ENCODED_LEN, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN, MAX_SPANS};
use crate::decimal::StackBuf;

impl Trace {
    /// Encodes the trace in the [`Deadline-Trace` grammar](super#grammar), applying the caps.
    ///
    /// If the trace holds more than [`MAX_SPANS`] spans or spans deeper than [`MAX_DEPTH`]
    /// levels, the first `MAX_SPANS` spans in breadth-first order (skipping anything too deep)
    /// are kept and the rest are added to `dropped`. Times and the dropped count saturate at
    /// [`MAX_MS`]; an `end_ms` before `start_ms` is written as `start_ms`; names and outcomes that
    /// were set directly are sanitised on the way out. The result is at most
    /// [`MAX_ENCODED_LEN`] bytes and is always a valid header value.
    ///
    /// ```
    /// # use deadline_core::trace::{Span, Trace};
    /// let root = (0..100).fold(Span::new("gateway", 0, 900), |root, i| {
    ///     root.with_child(Span::new("step", i, i + 1))
    /// });
    /// let encoded = Trace::from_span(root).encode();
    /// assert!(encoded.starts_with("gateway@0-900,.step@0-1,.step@1-2,"));
    /// assert!(encoded.ends_with(",.step@62-63,+37"));
    /// ```
    pub fn encode(&self) -> String {
        // `encode_bytes` writes only ASCII, so this never takes the lossy branch.
        String::from_utf8(self.encode_bytes())
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
    }

    /// The encoder proper, writing bytes: pushing `char`s one at a time into a `String` made
    /// encoding about twice as slow, and a header value wants bytes anyway.
    fn encode_bytes(&self) -> Vec<u8> {
        let walk = |visit: &mut dyn Visit| {
            for span in &self.spans {
                walk_span(span, 0, visit);
            }
        };
        let caps = Caps::count(&walk, self.dropped);
        let mut out = Vec::with_capacity((caps.kept * 40 + 12).min(MAX_ENCODED_LEN));
        caps.write(&mut out, &walk);
        out
    }

    /// [`encode`](Trace::encode)d as a header value for [`TRACE_HEADER`](super::TRACE_HEADER). An empty trace gives
    /// an empty value, which is still a valid header.
    pub fn to_header_value(&self) -> HeaderValue {
        // The encoder writes only tchar and `.@-=,+`, all visible ASCII, so this cannot fail; an
        // empty value is a harmless fallback rather than a panic in a response path.
        HeaderValue::try_from(self.encode_bytes()).unwrap_or_else(|_| HeaderValue::from_static(""))
    }
}

/// Receives a trace's elements in pre-order (a parent before its children), at any depth.
pub(crate) trait Visit {
    /// One span at nesting level `depth`.
    fn element(&mut self, depth: usize, element: Fields<'_>);
    /// Spans counted as dropped by a part of the trace (a callee's `+N`).
    fn dropped(&mut self, dropped: u64);
}

/// The fields of one span element, as [`write_element`] writes them.
#[derive(Clone, Copy)]
pub(crate) struct Fields<'a> {
    pub(crate) name: &'a str,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) outcome: Option<&'a str>,
    /// The hop's budget at arrival, written after every span as a `budget` element.
    pub(crate) budget_ms: Option<u64>,
}

/// Where the caps cut a trace: found by counting its elements per level, then applied while
/// writing them. The two passes walk the same elements in the same order, whatever the trace is
/// made of.
pub(crate) struct Caps {
    /// Levels `0..full_levels` are kept whole.
    full_levels: usize,
    /// Of level `full_levels`, the first `partial` spans (left to right) are kept.
    partial: usize,
    /// Spans kept.
    pub(crate) kept: usize,
    /// The `+N` to write: spans not kept, plus those already counted as dropped.
    dropped: u64,
}

impl Caps {
    /// Pass 1: spans per level, to find where breadth-first order reaches `MAX_SPANS`.
    pub(crate) fn count(walk: &dyn Fn(&mut dyn Visit), dropped: u64) -> Caps {
        struct Count {
            per_level: [usize; MAX_DEPTH],
            total: usize,
            dropped: u64,
        }
        impl Visit for Count {
            fn element(&mut self, depth: usize, _: Fields<'_>) {
                self.total += 1;
                // Deeper spans are never kept, but they still count as dropped.
                if let Some(n) = self.per_level.get_mut(depth) {
                    *n += 1;
                }
            }
            fn dropped(&mut self, dropped: u64) {
                self.dropped = self.dropped.saturating_add(dropped);
            }
        }
        let mut count = Count {
            per_level: [0; MAX_DEPTH],
            total: 0,
            dropped,
        };
        walk(&mut count);
        let mut full_levels = MAX_DEPTH;
        let mut partial = 0;
        let mut kept = 0;
        for (level, &n) in count.per_level.iter().enumerate() {
            if kept + n > MAX_SPANS {
                full_levels = level;
                partial = MAX_SPANS - kept;
                kept = MAX_SPANS;
                break;
            }
            kept += n;
        }
        let dropped = u64::try_from(count.total - kept)
            .unwrap_or(u64::MAX)
            .saturating_add(count.dropped)
            .min(MAX_MS);
        Caps {
            full_levels,
            partial,
            kept,
            dropped,
        }
    }

    /// Pass 2: writes the kept spans in pre-order, then the budgets of those that have one (by
    /// their index among the kept spans), then the `+N`. Pre-order meets the spans of one level
    /// in the same left-to-right order as breadth-first does, so the first `partial` spans met
    /// at level `full_levels` are exactly the ones breadth-first kept; and every ancestor of a
    /// kept span is at a lower level, so kept too. A dropped span's budget goes with it.
    pub(crate) fn write<S: Sink>(&self, out: &mut S, walk: &dyn Fn(&mut dyn Visit)) {
        struct Write<'a, S> {
            out: &'a mut S,
            full_levels: usize,
            partial: usize,
            partial_seen: usize,
            /// Spans written so far: the index of the next one.
            written: usize,
            budgets: Budgets,
        }
        impl<S: Sink> Visit for Write<'_, S> {
            fn element(&mut self, depth: usize, f: Fields<'_>) {
                let keep = depth < self.full_levels
                    || (depth == self.full_levels && self.partial_seen < self.partial);
                if keep {
                    if depth == self.full_levels {
                        self.partial_seen += 1;
                    }
                    write_element(self.out, depth, f.name, f.start_ms, f.end_ms, f.outcome);
                    if let Some(ms) = f.budget_ms {
                        self.budgets.set(self.written, ms);
                    }
                    self.written += 1;
                }
            }
            fn dropped(&mut self, _: u64) {}
        }
        let mut write = Write {
            out,
            full_levels: self.full_levels,
            partial: self.partial,
            partial_seen: 0,
            written: 0,
            budgets: Budgets::default(),
        };
        walk(&mut write);
        for (index, ms) in write.budgets.iter() {
            write_budget(write.out, index, ms);
        }
        if self.dropped > 0 {
            write_dropped(write.out, self.dropped);
        }
    }
}

/// Visits `span` (at level `depth`) and its descendants in pre-order.
pub(crate) fn walk_span(span: &Span, depth: usize, visit: &mut dyn Visit) {
    visit.element(depth, span_fields(span));
    if depth < MAX_DEPTH {
        for child in &span.children {
            walk_span(child, depth + 1, visit);
        }
        return;
    }
    // Below the deepest kept level spans are only counted, and a tree built by hand may be
    // arbitrarily deep: an explicit stack rather than more recursion.
    let mut stack: Vec<(&Span, usize)> =
        span.children.iter().rev().map(|c| (c, depth + 1)).collect();
    while let Some((span, depth)) = stack.pop() {
        visit.element(depth, span_fields(span));
        let child_depth = depth.saturating_add(1);
        stack.extend(span.children.iter().rev().map(|c| (c, child_depth)));
    }
}

fn span_fields(span: &Span) -> Fields<'_> {
    Fields {
        name: &span.name,
        start_ms: span.start_ms,
        end_ms: span.end_ms,
        outcome: span.outcome.as_deref(),
        budget_ms: span.budget_ms,
    }
}

/// Visits an outbound call (at level `depth`), its attempts and, under each, the callee's
/// elements straight from their text: one level deeper per nesting, shifted by the attempt's
/// start, exactly as if they had been decoded, shifted and nested.
pub(crate) fn walk_call(call: &CallSpan, depth: usize, visit: &mut dyn Visit) {
    visit.element(
        depth,
        Fields {
            name: &call.name,
            start_ms: call.start_ms,
            end_ms: call.end_ms,
            outcome: Some(call.outcome.as_str()),
            budget_ms: None,
        },
    );
    for attempt in call.attempts.iter() {
        // As `Span::new` makes it, whose start the callee is shifted by and whose end the
        // callee's times are held at (`Trace::nest_within`).
        let start_ms = attempt.start_ms;
        let end_ms = attempt.end_ms.max(start_ms);
        visit.element(
            depth + 1,
            Fields {
                name: ATTEMPT,
                start_ms,
                end_ms,
                outcome: Some(attempt.outcome.as_str()),
                budget_ms: None,
            },
        );
        let Some(callee) = &attempt.callee else {
            continue;
        };
        // Each element with its budget: a budget is a budget, not a time, so it is neither
        // shifted nor held inside the attempt.
        for (element, budget_ms) in callee.elements() {
            visit.element(
                depth + 2 + element.depth,
                Fields {
                    name: element.name,
                    start_ms: element.start_ms.saturating_add(start_ms).min(end_ms),
                    end_ms: element.end_ms.saturating_add(start_ms).min(end_ms),
                    outcome: element.outcome,
                    budget_ms,
                },
            );
        }
        visit.dropped(callee.dropped());
    }
}

/// Visits one entry of a hop's recording at level `depth`.
pub(crate) fn walk_recorded(recorded: &Recorded, depth: usize, visit: &mut dyn Visit) {
    match recorded {
        Recorded::Span(span) => walk_span(span, depth, visit),
        Recorded::Call(call) => walk_call(call, depth, visit),
    }
}

/// Where the encoder writes.
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
    /// Appends one byte.
    fn push(&mut self, byte: u8) {
        self.put(&[byte]);
    }
    /// Appends the decimal digits of `n`.
    fn put_decimal(&mut self, n: u64) {
        self.put(crate::decimal::Decimal::new(n).as_bytes());
    }
    /// Whether nothing has been written yet (the first element has no comma before it).
    fn is_empty(&self) -> bool;
}

impl Sink for Vec<u8> {
    fn put(&mut self, bytes: &[u8]) {
        self.extend_from_slice(bytes);
    }

    fn is_empty(&self) -> bool {
        Vec::is_empty(self)
    }
}

impl<const N: usize> Sink for StackBuf<N> {
    fn put(&mut self, bytes: &[u8]) {
        StackBuf::put(self, bytes);
    }

    fn push(&mut self, byte: u8) {
        StackBuf::push(self, byte);
    }

    fn put_decimal(&mut self, n: u64) {
        StackBuf::put_decimal(self, n);
    }

    fn is_empty(&self) -> bool {
        StackBuf::is_empty(self)
    }
}

/// `token` as a `tchar` token of at most `max_len` bytes: itself when it already is one.
pub(crate) fn token(token: &str, max_len: usize) -> Cow<'_, str> {
    if is_token(token, max_len) {
        Cow::Borrowed(token)
    } else {
        Cow::Owned(sanitize_name(token, max_len))
    }
}

/// One `span` element of the grammar, with the comma before it unless it is the first: the
/// only place the element's shape is written. Depth is capped at `MAX_DEPTH - 1` dots, times
/// saturate at [`MAX_MS`] (an `end_ms` before `start_ms` is written as `start_ms`), and the
/// name and outcome are sanitised if they are not tokens already.
pub(crate) fn write_element(
    out: &mut impl Sink,
    depth: usize,
    name: &str,
    start_ms: u64,
    end_ms: u64,
    outcome: Option<&str>,
) {
    if !out.is_empty() {
        out.push(b',');
    }
    for _ in 0..depth.min(MAX_DEPTH - 1) {
        out.push(b'.');
    }
    out.put(token(name, MAX_NAME_LEN).as_bytes());
    out.push(b'@');
    write_number(out, start_ms.min(MAX_MS));
    out.push(b'-');
    write_number(out, end_ms.max(start_ms).min(MAX_MS));
    if let Some(outcome) = outcome {
        out.push(b'=');
        out.put(token(outcome, MAX_OUTCOME_LEN).as_bytes());
    }
}

/// One `budget` element, `^index=ms`, with the comma before it: the span written `index`th
/// (from 0) had `ms` at arrival (saturating at [`MAX_MS`]).
pub(crate) fn write_budget(out: &mut impl Sink, index: usize, ms: u64) {
    if !out.is_empty() {
        out.push(b',');
    }
    out.push(b'^');
    write_number(out, u64::try_from(index).unwrap_or(u64::MAX));
    out.push(b'=');
    write_number(out, ms.min(MAX_MS));
}

/// Decimal digits of `n`, without going through `fmt` (encoding is on every response).
fn write_number(out: &mut impl Sink, n: u64) {
    out.put_decimal(n);
}

/// The `+N` element.
pub(crate) fn write_dropped(out: &mut impl Sink, dropped: u64) {
    if !out.is_empty() {
        out.put(b",");
    }
    out.put(b"+");
    write_number(out, dropped);
}

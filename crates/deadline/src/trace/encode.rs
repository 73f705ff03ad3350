//! The encoder: a [`Trace`] to its `Deadline-Trace` text, with the caps applied.
//!
//! Everything that writes the grammar goes through [`write_element`], whether into a growing
//! `Vec<u8>` ([`Trace::encode`]) or into a fixed buffer on the stack (the hop's own spans, see
//! [`HopTrace`](super::HopTrace)).

use std::borrow::Cow;

use http::HeaderValue;

use super::token::{is_token, sanitize_name};
use super::{MAX_DEPTH, MAX_ENCODED_LEN, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN, MAX_SPANS};
use super::{Span, Trace};

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
    /// # use deadline::trace::{Span, Trace};
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
        // Pass 1: spans per level, to find where breadth-first order reaches MAX_SPANS.
        let mut per_level = [0usize; MAX_DEPTH];
        let mut total = 0usize;
        let mut stack: Vec<(&Span, usize)> = Vec::with_capacity(MAX_DEPTH * 4);
        stack.extend(self.spans.iter().rev().map(|s| (s, 0)));
        while let Some((span, depth)) = stack.pop() {
            total += 1;
            if let Some(n) = per_level.get_mut(depth) {
                *n += 1;
            }
            // Deeper spans are never kept, but they still count as dropped.
            let child_depth = depth.saturating_add(1);
            stack.extend(span.children.iter().map(|c| (c, child_depth)));
        }
        // Levels `0..full_levels` are kept whole; of level `full_levels`, the first
        // `partial` spans (left to right) are kept.
        let mut full_levels = MAX_DEPTH;
        let mut partial = 0;
        let mut kept = 0;
        for (level, &n) in per_level.iter().enumerate() {
            if kept + n > MAX_SPANS {
                full_levels = level;
                partial = MAX_SPANS - kept;
                kept = MAX_SPANS;
                break;
            }
            kept += n;
        }
        let dropped = u64::try_from(total - kept)
            .unwrap_or(u64::MAX)
            .saturating_add(self.dropped)
            .min(MAX_MS);

        // Pass 2: write the kept spans in pre-order. Pre-order meets the spans of one level in
        // the same left-to-right order as breadth-first does, so the first `partial` spans met
        // at level `full_levels` are exactly the ones breadth-first kept.
        let mut out = Vec::with_capacity((kept * 40 + 12).min(MAX_ENCODED_LEN));
        stack.extend(self.spans.iter().rev().map(|s| (s, 0)));
        let mut partial_seen = 0;
        while let Some((span, depth)) = stack.pop() {
            if depth < full_levels {
                write_span(&mut out, span, depth);
                stack.extend(span.children.iter().rev().map(|c| (c, depth + 1)));
            } else if depth == full_levels && partial_seen < partial {
                partial_seen += 1;
                write_span(&mut out, span, depth);
            }
        }
        if dropped > 0 {
            write_dropped(&mut out, dropped);
        }
        debug_assert!(out.len() <= MAX_ENCODED_LEN);
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

/// Where the encoder writes.
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn put(&mut self, bytes: &[u8]);
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

/// A fixed buffer on the stack: writing past its end marks it overflowed instead of growing.
pub(crate) struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> StackBuf<N> {
    pub(crate) fn new() -> StackBuf<N> {
        StackBuf {
            buf: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    /// What was written, or `None` if it did not fit.
    pub(crate) fn as_bytes(&self) -> Option<&[u8]> {
        (!self.overflowed)
            .then(|| self.buf.get(..self.len))
            .flatten()
    }
}

impl<const N: usize> Sink for StackBuf<N> {
    fn put(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        match self.buf.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            None => self.overflowed = true,
        }
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// `token` as a `tchar` token of at most `max_len` bytes: itself when it already is one.
fn token(token: &str, max_len: usize) -> Cow<'_, str> {
    if is_token(token, max_len) {
        Cow::Borrowed(token)
    } else {
        Cow::Owned(sanitize_name(token, max_len))
    }
}

fn write_span(out: &mut impl Sink, span: &Span, depth: usize) {
    write_element(
        out,
        depth,
        &span.name,
        span.start_ms,
        span.end_ms,
        span.outcome.as_deref(),
    );
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
    const DOTS: &[u8; MAX_DEPTH] = &[b'.'; MAX_DEPTH];
    if !out.is_empty() {
        out.put(b",");
    }
    out.put(&DOTS[..depth.min(MAX_DEPTH - 1)]);
    out.put(token(name, MAX_NAME_LEN).as_bytes());
    out.put(b"@");
    write_number(out, start_ms.min(MAX_MS));
    out.put(b"-");
    write_number(out, end_ms.max(start_ms).min(MAX_MS));
    if let Some(outcome) = outcome {
        out.put(b"=");
        out.put(token(outcome, MAX_OUTCOME_LEN).as_bytes());
    }
}

/// Decimal digits of `n`, without going through `fmt` (encoding is on every response).
fn write_number(out: &mut impl Sink, n: u64) {
    out.put(crate::decimal::Decimal::new(n).as_bytes());
}

/// The `+N` element.
pub(crate) fn write_dropped(out: &mut impl Sink, dropped: u64) {
    if !out.is_empty() {
        out.put(b",");
    }
    out.put(b"+");
    write_number(out, dropped);
}

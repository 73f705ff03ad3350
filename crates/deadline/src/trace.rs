//! The `Deadline-Trace` response header: what each hop did with its budget.
//!
//! Every hop answers with a [`Trace`] of its own spans in the [`TRACE_HEADER`] response header,
//! with times in whole milliseconds relative to the moment *that hop* received the request. A
//! caller that gets a callee's trace back shifts it by the time it sent that attempt
//! ([`Trace::shift`]) and nests it under the attempt's span, so the edge ends up with the whole
//! tree without any clock synchronisation between hosts. A 504 carries the trace too, which is how
//! the edge learns which hop ran out of time and what it was doing.
//!
//! This module holds the value types and the codec only: it does no I/O and reads no clock.
//!
//! # Grammar
//!
//! ```abnf
//! trace    = element *( "," element )
//! element  = span / dropped        ; `dropped` may only be the last element
//! span     = depth name "@" start "-" end [ "=" outcome ]
//! depth    = *15"."                ; nesting level; 0 for a root;
//!                                  ; at most one deeper than the previous span
//! name     = 1*24tchar
//! outcome  = 1*16tchar
//! tchar    = ALPHA / DIGIT / "_" / "-" / ":"
//! start    = 1*10DIGIT             ; ms since this hop received the request
//! end      = 1*10DIGIT             ; end >= start
//! dropped  = "+" 1*10DIGIT         ; spans not kept
//! ```
//!
//! The first span is a root (no dots). Spans are written in pre-order (a parent before its
//! children), and a span's dot count is its nesting level, so the span's parent is the nearest
//! earlier span one level up. An empty trace is the empty string; a trace whose spans were all
//! dropped is just `+N`.
//!
//! ## Worked example
//!
//! ```text
//! gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,...orders@1-1822=504,....work@1-21,.queue@0-0,+3
//! ```
//!
//! reads as: a root span `gateway` from 0 to 1873 ms that ended in a 504; under it a
//! `call:orders` span (level 1) holding one `attempt` (level 2), which holds the callee's own root
//! span `orders` (level 3, already shifted onto the gateway's clock) with its `work` (level 4);
//! then, back at level 1, a `queue` span that took no time; and three more spans that did not fit.
//! [`Trace`]'s [`Display`](std::fmt::Display) renders it as:
//!
//! ```
//! # use deadline::trace::Trace;
//! let header = "gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,\
//!               ...orders@1-1822=504,....work@1-21,.queue@0-0,+3";
//! let trace = Trace::decode(header.as_bytes());
//! assert_eq!(trace.span_count(), 6);
//! assert_eq!(trace.dropped, 3);
//! assert_eq!(trace.encode(), header);
//! assert_eq!(
//!     trace.to_string(),
//!     "\
//! gateway  0–1873 ms (1873 ms)  504
//! ├─ call:orders  0–1872 ms (1872 ms)  504
//! │  └─ attempt  0–1823 ms (1823 ms)  504
//! │     └─ orders  1–1822 ms (1821 ms)  504
//! │        └─ work  1–21 ms (20 ms)
//! └─ queue  0–0 ms (0 ms)
//! … and 3 more spans
//! "
//! );
//! ```
//!
//! ## A three-hop chain
//!
//! The gateway calls orders, which calls inventory. Inventory runs out of budget and answers 504
//! with its own trace, on its own clock:
//!
//! ```
//! use deadline::trace::{Span, Trace};
//!
//! let inventory = Trace::from_span(
//!     Span::new("inventory", 0, 941)
//!         .with_outcome("504")
//!         .with_child(Span::new("work", 0, 940).with_outcome("deadline")),
//! );
//! let header = inventory.to_header_value();
//! assert_eq!(header, "inventory@0-941=504,.work@0-940=deadline");
//!
//! // Orders worked 20 ms, sent its only attempt at 21 ms on its clock and got the 504 at
//! // 963 ms. It moves inventory's spans onto its own clock and nests them under the attempt;
//! // spans inventory could not report stay counted.
//! fn nest(attempt: &mut Span, sent_at_ms: u64, mut callee: Trace, dropped: &mut u64) {
//!     callee.shift(sent_at_ms);
//!     for span in callee.spans {
//!         attempt.push(span);
//!     }
//!     *dropped = dropped.saturating_add(callee.dropped);
//! }
//! let mut attempt = Span::new("attempt", 21, 963).with_outcome("504");
//! let mut orders = Trace::new();
//! nest(&mut attempt, 21, Trace::from_header_value(&header), &mut orders.dropped);
//! orders.spans.push(
//!     Span::new("orders", 0, 964)
//!         .with_outcome("504")
//!         .with_child(Span::new("work", 0, 20).with_outcome("ok"))
//!         .with_child(Span::new("call:inventory", 21, 963).with_outcome("504").with_child(attempt)),
//! );
//! let header = orders.to_header_value();
//! assert_eq!(
//!     header,
//!     "orders@0-964=504,.work@0-20=ok,.call:inventory@21-963=504,..attempt@21-963=504,\
//!      ...inventory@21-962=504,....work@21-961=deadline"
//! );
//!
//! // The gateway sent its attempt to orders 1 ms after it received the user's request.
//! let mut attempt = Span::new("attempt", 1, 966).with_outcome("504");
//! let mut gateway = Trace::new();
//! nest(&mut attempt, 1, Trace::from_header_value(&header), &mut gateway.dropped);
//! gateway.spans.push(
//!     Span::new("gateway", 0, 967)
//!         .with_outcome("504")
//!         .with_child(Span::new("call:orders", 1, 966).with_outcome("504").with_child(attempt)),
//! );
//! assert_eq!(
//!     gateway.encode(),
//!     "gateway@0-967=504,.call:orders@1-966=504,..attempt@1-966=504,...orders@1-965=504,\
//!      ....work@1-21=ok,....call:inventory@22-964=504,.....attempt@22-964=504,\
//!      ......inventory@22-963=504,.......work@22-962=deadline"
//! );
//! ```
//!
//! # Why the grammar is shaped this way
//!
//! - **Pre-order with depth dots, not brackets.** The encoder writes each span as it walks the
//!   tree and the decoder attaches each span as it reads it (its parent is the last span one level
//!   up), so neither needs to look ahead or keep more than the current path. There are no brackets
//!   to balance, so there is no way to be "unclosed".
//! - **Every valid prefix is still a tree.** A span can only be one level deeper than the one
//!   before it, so cutting the list after any element leaves every kept span with its parent.
//!   The decoder relies on this: at the first malformed element it stops and returns what it has
//!   (see [`Trace::decode`]), which is a well-formed trace rather than an error.
//! - **Tokens only.** Names and outcomes are restricted to `tchar` (letters, digits, `_`, `-`,
//!   `:`), and the separators `.` `@` `-` `=` `,` `+` are all plain ASCII, so the encoded form is
//!   always a valid header value, needs no quoting or escaping, and is safe to print in a terminal
//!   or a log line. Arbitrary text is made to fit by [`sanitize_name`].
//! - **Whole milliseconds, relative to the hop.** Relative times need no clock agreement between
//!   hosts and shifting a subtree is one addition; at most ten digits each keeps every number in a
//!   `u64` with no overflow checks (times saturate at [`MAX_MS`], about 115 days).
//! - **A comma-separated list.** If an intermediary folds two `Deadline-Trace` fields into one
//!   (`a, b`), the space after the comma makes the second element malformed, so the result is the
//!   first field's trace, not a mixture.
//!
//! # Bounds
//!
//! [`Trace::encode`] keeps at most [`MAX_SPANS`] spans, at most [`MAX_DEPTH`] levels deep. When a
//! trace is larger it keeps the first `MAX_SPANS` spans in breadth-first order (level by level,
//! left to right, across all roots) and adds the rest to the `+N` count. Breadth-first keeps what
//! matters most when the tree is pruned: the roots, which hop answered and with what outcome,
//! and the attempts, rather than the leaves of the first subtree; and a span is only ever kept
//! together with all of its ancestors.
//!
//! The encoded value is never longer than [`MAX_ENCODED_LEN`] (4,947) bytes:
//!
//! | part | bytes |
//! |---|---|
//! | one span without its dots: name 24 + `@` + start 10 + `-` + end 10 + `=` + outcome 16 | 63 |
//! | 64 spans | 64 × 63 = 4,032 |
//! | dots: at most 0, 1, …, 15 for the first 16 spans (one deeper each time), then 15 each for the other 48 | 120 + 720 = 840 |
//! | commas between the 64 spans | 63 |
//! | `,+` and a 10-digit dropped count | 12 |
//! | **total** | **4,947** |
//!
//! The bound is reached (a chain 16 deep with 48 more spans at the deepest level, all names and
//! outcomes at full length, all times at `MAX_MS`, and a dropped count of at least `MAX_MS`), so
//! it cannot be lowered without lowering a cap. Real traces are far smaller: the three-hop chain
//! above is 206 bytes, and a 64-span trace of a gateway trying orders three times, each trying
//! inventory three times, is about 1.5 KiB. Proxies that cap response headers at one memory page
//! (4 KiB, e.g. nginx's default `proxy_buffer_size` on some platforms) can still reject the worst
//! case, so keep span names short.
//!
//! [`Trace::decode`] never reads more than 64 KiB of its input, stores at most `MAX_SPANS` spans
//! (later valid spans are only counted), and never panics: hostile input decodes to an empty trace
//! or to its valid prefix.

use std::fmt;

use http::{HeaderName, HeaderValue};

use crate::header::trim;

/// The `Deadline-Trace` response header name.
pub const TRACE_HEADER: HeaderName = HeaderName::from_static("deadline-trace");

/// Spans kept in an encoded trace; the rest are counted in [`Trace::dropped`].
pub const MAX_SPANS: usize = 64;

/// Nesting levels kept in an encoded trace (roots are level 0, the deepest kept level is
/// `MAX_DEPTH - 1`); deeper spans are dropped and counted.
pub const MAX_DEPTH: usize = 16;

/// Bytes of a span name after sanitising.
pub const MAX_NAME_LEN: usize = 24;

/// Bytes of a span outcome after sanitising.
pub const MAX_OUTCOME_LEN: usize = 16;

/// Times (and the dropped count) saturate at this value when encoded: the largest ten-digit
/// number, a little over 115 days in milliseconds.
pub const MAX_MS: u64 = 9_999_999_999;

/// Digits in [`MAX_MS`], the most a number on the wire may have.
const MAX_DIGITS: usize = 10;

/// The longest possible output of [`Trace::encode`], in bytes (4,947).
///
/// Computed as `MAX_SPANS` spans of at most 63 bytes each without their depth dots
/// (`MAX_NAME_LEN` + `@` + 10 digits + `-` + 10 digits + `=` + `MAX_OUTCOME_LEN`), plus the most
/// dots a pre-order sequence can hold (0, 1, …, `MAX_DEPTH - 1` for the first `MAX_DEPTH` spans,
/// then `MAX_DEPTH - 1` for every other span), plus `MAX_SPANS - 1` commas, plus `,+` and a
/// ten-digit dropped count. See the [module docs](self#bounds) for the table.
pub const MAX_ENCODED_LEN: usize = {
    let span = MAX_NAME_LEN + 1 + MAX_DIGITS + 1 + MAX_DIGITS + 1 + MAX_OUTCOME_LEN;
    let chain = if MAX_SPANS < MAX_DEPTH {
        MAX_SPANS
    } else {
        MAX_DEPTH
    };
    let dots = chain * (chain - 1) / 2 + (MAX_SPANS - chain) * (chain - 1);
    let commas = MAX_SPANS - 1;
    let dropped = 2 + MAX_DIGITS;
    MAX_SPANS * span + dots + commas + dropped
};

/// Input beyond this many bytes is ignored by [`Trace::decode`]. A well-formed trace is at most
/// [`MAX_ENCODED_LEN`] bytes, so anything longer is hostile or broken; reading it to the end
/// would only cost time.
const MAX_DECODE_LEN: usize = 64 * 1024;

/// One timed piece of work at a hop, with the spans nested inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Span {
    /// What the work was, e.g. `gateway`, `queue`, `call:orders`, `attempt`. Kept sanitised to
    /// `tchar` (see [`sanitize_name`]) by every constructor; [`Trace::encode`] sanitises again in
    /// case the field was set directly.
    pub name: String,
    /// Start, in ms since this hop received the request.
    pub start_ms: u64,
    /// End, in ms since this hop received the request; never before `start_ms`.
    pub end_ms: u64,
    /// How it ended, sanitised like `name`, e.g. `ok`, `504`, `deadline`, `skipped`, `hung-up`.
    #[cfg_attr(
        feature = "serde",
        serde(default, skip_serializing_if = "Option::is_none")
    )]
    pub outcome: Option<String>,
    /// Spans nested inside this one, in order.
    #[cfg_attr(feature = "serde", serde(default))]
    pub children: Vec<Span>,
}

impl Span {
    /// A span called `name` (sanitised to [`MAX_NAME_LEN`] bytes) from `start_ms` to `end_ms`.
    /// An `end_ms` before `start_ms` is taken as `start_ms`.
    ///
    /// ```
    /// # use deadline::trace::Span;
    /// let span = Span::new("call orders", 30, 10);
    /// assert_eq!((span.name.as_str(), span.start_ms, span.end_ms), ("call_orders", 30, 30));
    /// ```
    pub fn new(name: &str, start_ms: u64, end_ms: u64) -> Span {
        Span {
            name: sanitize_name(name, MAX_NAME_LEN),
            start_ms,
            end_ms: end_ms.max(start_ms),
            outcome: None,
            children: Vec::new(),
        }
    }

    /// Sets the outcome, sanitised to [`MAX_OUTCOME_LEN`] bytes.
    pub fn with_outcome(mut self, outcome: &str) -> Span {
        self.outcome = Some(sanitize_name(outcome, MAX_OUTCOME_LEN));
        self
    }

    /// Appends `child` to this span's children.
    pub fn with_child(mut self, child: Span) -> Span {
        self.children.push(child);
        self
    }

    /// Appends `child` to this span's children, in place (for building a span in a loop, or
    /// nesting a callee's shifted spans under an attempt).
    pub fn push(&mut self, child: Span) {
        self.children.push(child);
    }

    /// Adds `offset_ms` to the start and end of this span and all its descendants, saturating at
    /// `u64::MAX` (encoding then saturates at [`MAX_MS`]). This is how a caller moves a callee's
    /// spans onto its own clock: the offset is when it sent the attempt.
    pub fn shift(&mut self, offset_ms: u64) {
        // An explicit stack, not recursion: a tree built by hand may be arbitrarily deep.
        let mut stack = vec![self];
        while let Some(span) = stack.pop() {
            span.start_ms = span.start_ms.saturating_add(offset_ms);
            span.end_ms = span.end_ms.saturating_add(offset_ms);
            stack.extend(span.children.iter_mut());
        }
    }

    /// The number of spans in this subtree: this span and all its descendants.
    pub fn count(&self) -> usize {
        let mut count = 0;
        let mut stack = vec![self];
        while let Some(span) = stack.pop() {
            count += 1;
            stack.extend(span.children.iter());
        }
        count
    }
}

/// A hop's spans: a forest of root spans, plus how many spans were not kept.
///
/// See the [module docs](self) for the wire format.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(feature = "serde", serde(default))]
pub struct Trace {
    /// The root spans, in order.
    pub spans: Vec<Span>,
    /// Spans that were not kept (beyond [`MAX_SPANS`] or [`MAX_DEPTH`]), shown as "… and N more
    /// spans". Additions should saturate.
    pub dropped: u64,
}

impl Trace {
    /// An empty trace: no spans, nothing dropped. Encodes as the empty string.
    pub fn new() -> Trace {
        Trace::default()
    }

    /// A trace with the single root `root`.
    pub fn from_span(root: Span) -> Trace {
        Trace {
            spans: vec![root],
            dropped: 0,
        }
    }

    /// The number of spans held (roots and all their descendants), not counting `dropped`.
    pub fn span_count(&self) -> usize {
        self.spans.iter().map(Span::count).sum()
    }

    /// Adds `offset_ms` to every span, as [`Span::shift`] does.
    pub fn shift(&mut self, offset_ms: u64) {
        for span in &mut self.spans {
            span.shift(offset_ms);
        }
    }

    /// Encodes the trace in the [`Deadline-Trace` grammar](self#grammar), applying the caps.
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
            if !out.is_empty() {
                out.push(b',');
            }
            out.push(b'+');
            write_number(&mut out, dropped);
        }
        debug_assert!(out.len() <= MAX_ENCODED_LEN);
        out
    }

    /// [`encode`](Trace::encode)d as a header value for [`TRACE_HEADER`]. An empty trace gives
    /// an empty value, which is still a valid header.
    pub fn to_header_value(&self) -> HeaderValue {
        // The encoder writes only tchar and `.@-=,+`, all visible ASCII, so this cannot fail; an
        // empty value is a harmless fallback rather than a panic in a response path.
        HeaderValue::try_from(self.encode_bytes()).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    /// Decodes a `Deadline-Trace` value. Never fails and never panics: the result is the valid
    /// prefix of the input.
    ///
    /// Spaces and tabs around the whole value are ignored. Elements are read in order; at the
    /// first malformed one (a character outside the grammar, a name or outcome too long, more
    /// than ten digits, `end < start`, a root that is not at depth 0, a span more than one level
    /// deeper than the one before it, an empty element, `+N` anywhere but last) decoding stops
    /// and the spans read so far are returned. `dropped` is the `+N` if one was read, plus any
    /// valid spans beyond [`MAX_SPANS`] (these are counted, not stored), saturating at
    /// [`MAX_MS`]. Only the first 64 KiB of the input are looked at (cut back to the last comma
    /// in them, so no element is read half).
    ///
    /// ```
    /// # use deadline::trace::{Span, Trace};
    /// let trace = Trace::decode(b"orders@0-30=ok,.work@2-29,.b@d-0,.more@3-4");
    /// assert_eq!(
    ///     trace,
    ///     Trace::from_span(Span::new("orders", 0, 30).with_outcome("ok").with_child(Span::new("work", 2, 29)))
    /// );
    /// assert_eq!(Trace::decode(b"\xff@@@,,,"), Trace::new());
    /// ```
    pub fn decode(input: &[u8]) -> Trace {
        let mut input = input;
        if input.len() > MAX_DECODE_LEN {
            let head = input.get(..MAX_DECODE_LEN).unwrap_or_default();
            let cut = head.iter().rposition(|&b| b == b',').unwrap_or(0);
            input = head.get(..cut).unwrap_or_default();
        }
        let input = trim(input);

        let mut trace = Trace::new();
        if input.is_empty() {
            return trace;
        }
        let mut stored = 0usize;
        let mut extra = 0u64;
        let mut plus = 0u64;
        let mut previous_depth: Option<usize> = None;
        let mut elements = input.split(|&b| b == b',').peekable();
        while let Some(element) = elements.next() {
            if let Some(digits) = element.strip_prefix(b"+") {
                // `+N` must be the last element.
                if elements.peek().is_none() {
                    plus = parse_number(digits).unwrap_or(0);
                }
                break;
            }
            let Some((depth, span)) = parse_span(element) else {
                break;
            };
            let fits = match previous_depth {
                None => depth == 0,
                Some(previous) => depth <= previous + 1,
            };
            if !fits {
                break;
            }
            previous_depth = Some(depth);
            if stored < MAX_SPANS {
                if !attach(&mut trace.spans, depth, span) {
                    break;
                }
                stored += 1;
            } else {
                extra = extra.saturating_add(1);
            }
        }
        trace.dropped = extra.saturating_add(plus).min(MAX_MS);
        trace
    }

    /// [`decode`](Trace::decode)s a header value.
    pub fn from_header_value(value: &HeaderValue) -> Trace {
        Trace::decode(value.as_bytes())
    }
}

/// A readable tree, one line per span: `name  start–end ms (duration ms)  outcome`, children
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
            match &span.outcome {
                Some(outcome) => writeln!(f, "  {outcome}")?,
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

/// Makes `raw` a `tchar` token (letters, digits, `_`, `-`, `:`) of at most `max_len` bytes:
/// every other character becomes `_`, the result is cut to `max_len`, and an empty result becomes
/// `_` (so a `max_len` of 0 still gives `_`: the grammar has no empty tokens).
///
/// ```
/// # use deadline::trace::sanitize_name;
/// assert_eq!(sanitize_name("call orders.v2", 24), "call_orders_v2");
/// assert_eq!(sanitize_name("crème", 24), "cr_me");
/// assert_eq!(sanitize_name("", 24), "_");
/// assert_eq!(sanitize_name("inventory-service", 9), "inventory");
/// ```
pub fn sanitize_name(raw: &str, max_len: usize) -> String {
    // One `_` per character, not per byte: "crème" reads better as "cr_me" than "cr__me". The
    // output is ASCII, so cutting at `max_len` characters is cutting at `max_len` bytes.
    let mut out: String = raw
        .chars()
        .take(max_len)
        .map(|c| {
            if c.is_ascii() && is_tchar(c as u8) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// `tchar` as a table: one load per byte where decoding spends most of its time.
const TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b':';
        b += 1;
    }
    table
};

/// Whether `token` is already what [`sanitize_name`] would make of it.
fn is_token(token: &str, max_len: usize) -> bool {
    (1..=max_len).contains(&token.len()) && token.bytes().all(is_tchar)
}

fn write_token(out: &mut Vec<u8>, token: &str, max_len: usize) {
    if is_token(token, max_len) {
        out.extend_from_slice(token.as_bytes());
    } else {
        out.extend_from_slice(sanitize_name(token, max_len).as_bytes());
    }
}

fn write_span(out: &mut Vec<u8>, span: &Span, depth: usize) {
    const DOTS: &[u8; MAX_DEPTH] = &[b'.'; MAX_DEPTH];
    if !out.is_empty() {
        out.push(b',');
    }
    out.extend_from_slice(&DOTS[..depth.min(MAX_DEPTH - 1)]);
    write_token(out, &span.name, MAX_NAME_LEN);
    out.push(b'@');
    write_number(out, span.start_ms.min(MAX_MS));
    out.push(b'-');
    write_number(out, span.end_ms.max(span.start_ms).min(MAX_MS));
    if let Some(outcome) = &span.outcome {
        out.push(b'=');
        write_token(out, outcome, MAX_OUTCOME_LEN);
    }
}

/// Decimal digits of `n`, without going through `fmt` (encoding is on every response).
fn write_number(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(crate::decimal::Decimal::new(n).as_bytes());
}

/// Splits `bytes` after its longest prefix of bytes that satisfy `pred`.
fn split_run(bytes: &[u8], pred: impl Fn(u8) -> bool) -> (&[u8], &[u8]) {
    let n = bytes.iter().position(|&b| !pred(b)).unwrap_or(bytes.len());
    bytes.split_at(n)
}

/// `1*10DIGIT`, so the value always fits (it is at most [`MAX_MS`]).
fn parse_number(digits: &[u8]) -> Option<u64> {
    if !(1..=MAX_DIGITS).contains(&digits.len()) {
        return None;
    }
    digits.iter().try_fold(0u64, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u64::from(b - b'0'))
    })
}

/// `1*max_len tchar`, given a run of tchar.
fn token_len_ok(token: &[u8], max_len: usize) -> bool {
    (1..=max_len).contains(&token.len())
}

/// A run of tchar as a `String`. It is ASCII, so the conversion never fails; it copies in one
/// go rather than char by char.
fn owned(token: &[u8]) -> Option<String> {
    std::str::from_utf8(token).ok().map(str::to_owned)
}

/// One `span` element: its depth and the span (with no children yet). Each part is taken as the
/// longest run of the bytes it may hold, so an element is read in one pass, and nothing is
/// allocated until the whole element has proved valid.
fn parse_span(element: &[u8]) -> Option<(usize, Span)> {
    let (dots, rest) = split_run(element, |b| b == b'.');
    let depth = dots.len();
    if depth >= MAX_DEPTH {
        return None;
    }
    let (name, rest) = split_run(rest, is_tchar);
    let rest = rest.strip_prefix(b"@")?;
    let (start, rest) = split_run(rest, |b| b.is_ascii_digit());
    let rest = rest.strip_prefix(b"-")?;
    let (end, rest) = split_run(rest, |b| b.is_ascii_digit());
    let outcome = match rest {
        [] => None,
        [b'=', outcome @ ..] => Some(outcome),
        _ => return None,
    };
    let (start_ms, end_ms) = (parse_number(start)?, parse_number(end)?);
    if end_ms < start_ms || !token_len_ok(name, MAX_NAME_LEN) {
        return None;
    }
    if let Some(outcome) = outcome {
        if !token_len_ok(outcome, MAX_OUTCOME_LEN) || !outcome.iter().all(|&b| is_tchar(b)) {
            return None;
        }
    }
    let span = Span {
        name: owned(name)?,
        start_ms,
        end_ms,
        outcome: match outcome {
            Some(outcome) => Some(owned(outcome)?),
            None => None,
        },
        children: Vec::new(),
    };
    Some((depth, span))
}

/// Attaches `span` as the last child of the last span one level up (a root at depth 0). Returns
/// false if there is no such parent, which the depth checks in `decode` already rule out.
fn attach(roots: &mut Vec<Span>, depth: usize, span: Span) -> bool {
    if depth == 0 {
        roots.push(span);
        return true;
    }
    let Some(mut parent) = roots.last_mut() else {
        return false;
    };
    for _ in 1..depth {
        let Some(child) = parent.children.last_mut() else {
            return false;
        };
        parent = child;
    }
    parent.children.push(span);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use proptest::sample::select;

    fn s(name: &str, start: u64, end: u64) -> Span {
        Span::new(name, start, end)
    }

    fn tr(spans: Vec<Span>, dropped: u64) -> Trace {
        Trace { spans, dropped }
    }

    /// A chain `levels` deep: `l0` > `l1` > ... .
    fn chain(levels: usize) -> Span {
        (0..levels)
            .rev()
            .map(|i| s(&format!("l{i}"), 0, 1))
            .reduce(|child, parent| parent.with_child(child))
            .unwrap_or_else(|| s("empty", 0, 0))
    }

    #[test]
    fn header_name() {
        assert_eq!(TRACE_HEADER.as_str(), "deadline-trace");
    }

    #[test]
    fn encode_and_decode_table() {
        let cases: Vec<(&str, Trace, &str)> = vec![
            ("empty", Trace::new(), ""),
            (
                "single span",
                Trace::from_span(s("gateway", 0, 12)),
                "gateway@0-12",
            ),
            (
                "outcome",
                Trace::from_span(s("gateway", 3, 1873).with_outcome("504")),
                "gateway@3-1873=504",
            ),
            (
                "nested",
                Trace::from_span(
                    s("a", 0, 10)
                        .with_child(s("b", 1, 5).with_child(s("c", 2, 3)))
                        .with_child(s("d", 6, 9)),
                ),
                "a@0-10,.b@1-5,..c@2-3,.d@6-9",
            ),
            (
                "several roots",
                tr(vec![s("a", 0, 1), s("b", 1, 2).with_child(s("c", 1, 1))], 0),
                "a@0-1,b@1-2,.c@1-1",
            ),
            ("dropped", tr(vec![s("a", 0, 1)], 3), "a@0-1,+3"),
            ("only dropped", tr(vec![], 7), "+7"),
            (
                "the example",
                tr(
                    vec![
                        s("gateway", 0, 1873)
                            .with_outcome("504")
                            .with_child(
                                s("call:orders", 0, 1872).with_outcome("504").with_child(
                                    s("attempt", 0, 1823).with_outcome("504").with_child(
                                        s("orders", 1, 1822)
                                            .with_outcome("504")
                                            .with_child(s("work", 1, 21)),
                                    ),
                                ),
                            )
                            .with_child(s("queue", 0, 0)),
                    ],
                    3,
                ),
                "gateway@0-1873=504,.call:orders@0-1872=504,..attempt@0-1823=504,\
                 ...orders@1-1822=504,....work@1-21,.queue@0-0,+3",
            ),
        ];
        for (what, trace, encoded) in cases {
            assert_eq!(trace.encode(), encoded, "encode: {what}");
            assert_eq!(Trace::decode(encoded.as_bytes()), trace, "decode: {what}");
            assert_eq!(trace.to_header_value(), encoded, "header: {what}");
        }
    }

    #[test]
    fn sanitize_table() {
        let long = "a".repeat(30);
        let cases: &[(&str, usize, &str)] = &[
            ("ok", 16, "ok"),
            ("call:orders", 24, "call:orders"),
            ("hung-up", 16, "hung-up"),
            ("a_B-9:z", 24, "a_B-9:z"),
            ("call.orders", 24, "call_orders"),
            ("a b\tc\r\nd", 24, "a_b_c__d"),
            ("x,y@z=w+v", 24, "x_y_z_w_v"),
            ("crème brûlée", 24, "cr_me_br_l_e"),
            ("🦀", 24, "_"),
            ("", 24, "_"),
            ("", 0, "_"),
            ("abc", 0, "_"),
            (&long, 24, "aaaaaaaaaaaaaaaaaaaaaaaa"),
            ("0123456789abcdefXYZ", 16, "0123456789abcdef"),
        ];
        for &(raw, max, want) in cases {
            assert_eq!(sanitize_name(raw, max), want, "{raw:?} to {max}");
        }
    }

    #[test]
    fn constructors_sanitise_and_order_times() {
        let span = Span::new("my service", 50, 20).with_outcome("gave up");
        assert_eq!(span.name, "my_service");
        assert_eq!((span.start_ms, span.end_ms), (50, 50));
        assert_eq!(span.outcome.as_deref(), Some("gave_up"));
        assert_eq!(
            Span::new("", 0, 0).with_outcome("").encode_alone(),
            "_@0-0=_"
        );
    }

    impl Span {
        fn encode_alone(&self) -> String {
            Trace::from_span(self.clone()).encode()
        }
    }

    #[test]
    fn encode_repairs_fields_set_directly() {
        let span = Span {
            name: "bad name,with@=".into(),
            start_ms: 9,
            end_ms: 2,
            outcome: Some(String::new()),
            children: vec![Span {
                name: String::new(),
                start_ms: 0,
                end_ms: 0,
                outcome: Some("x".repeat(40)),
                children: vec![],
            }],
        };
        assert_eq!(
            span.encode_alone(),
            "bad_name_with__@9-9=_,._@0-0=xxxxxxxxxxxxxxxx"
        );
    }

    #[test]
    fn cap_keeps_root_and_first_children_breadth_first() {
        let root = (0..99).fold(s("root", 0, 100), |r, i| r.with_child(s("c", i, i + 1)));
        let trace = Trace::from_span(root);
        assert_eq!(trace.span_count(), 100);
        let decoded = Trace::decode(trace.encode().as_bytes());
        assert_eq!(decoded.span_count(), 64);
        assert_eq!(decoded.dropped, 36);
        assert_eq!(decoded.spans[0].name, "root");
        assert_eq!(decoded.spans[0].children.len(), 63);
        assert_eq!(decoded.spans[0].children[62].start_ms, 62);

        // Three calls with 40 attempts each: breadth-first keeps the root and all three calls
        // (the shape of the request), then attempts left to right.
        let root = (0..3).fold(s("root", 0, 100), |r, c| {
            r.with_child((0..40).fold(s(&format!("call{c}"), 0, 100), |call, a| {
                call.with_child(s("attempt", a, a + 1))
            }))
        });
        let trace = tr(vec![root], 5);
        assert_eq!(trace.span_count(), 124);
        let decoded = Trace::decode(trace.encode().as_bytes());
        assert_eq!(decoded.span_count(), 64);
        assert_eq!(
            decoded.dropped,
            60 + 5,
            "dropped adds to the existing count"
        );
        let calls = &decoded.spans[0].children;
        let attempts: Vec<usize> = calls.iter().map(|c| c.children.len()).collect();
        assert_eq!(attempts, [40, 20, 0]);
        assert_eq!(calls[2].name, "call2");
    }

    #[test]
    fn cap_spans_across_roots() {
        let roots: Vec<Span> = (0..70)
            .map(|i| s("r", i, i).with_child(s("c", i, i)))
            .collect();
        let decoded = Trace::decode(tr(roots, 0).encode().as_bytes());
        assert_eq!(decoded.spans.len(), 64);
        assert!(decoded.spans.iter().all(|r| r.children.is_empty()));
        assert_eq!(decoded.dropped, 76);
    }

    #[test]
    fn depth_cap() {
        let trace = Trace::from_span(chain(20));
        let encoded = trace.encode();
        assert!(encoded.ends_with(",...............l15@0-1,+4"), "{encoded}");
        let decoded = Trace::decode(encoded.as_bytes());
        assert_eq!(decoded.span_count(), MAX_DEPTH);
        assert_eq!(decoded.dropped, 4);
        assert_eq!(decoded, tr(vec![chain(16)], 4));
        // Exactly MAX_DEPTH levels round-trip whole.
        let trace = Trace::from_span(chain(16));
        assert_eq!(Trace::decode(trace.encode().as_bytes()), trace);
    }

    #[test]
    fn times_and_dropped_saturate() {
        let trace = tr(
            vec![s("a", u64::MAX - 1, u64::MAX), s("b", 5, MAX_MS + 1)],
            u64::MAX,
        );
        assert_eq!(
            trace.encode(),
            "a@9999999999-9999999999,b@5-9999999999,+9999999999"
        );
        let decoded = Trace::decode(trace.encode().as_bytes());
        assert_eq!(decoded.spans[0].start_ms, MAX_MS);
        assert_eq!(decoded.dropped, MAX_MS);
    }

    #[test]
    fn shift_moves_the_whole_tree() {
        let mut trace =
            Trace::from_span(s("a", 0, 10).with_child(s("b", 2, 3).with_child(s("c", 2, 2))));
        trace.shift(100);
        assert_eq!(trace.encode(), "a@100-110,.b@102-103,..c@102-102");
        trace.shift(u64::MAX);
        assert_eq!(trace.spans[0].start_ms, u64::MAX);
        assert_eq!(trace.spans[0].children[0].children[0].end_ms, u64::MAX);
        let mut empty = Trace::new();
        empty.shift(5);
        assert_eq!(empty, Trace::new());
    }

    #[test]
    fn decode_returns_the_valid_prefix() {
        let a = || s("a", 0, 1);
        let ab = || a().with_child(s("b", 0, 1));
        let cases: Vec<(&[u8], Trace)> = vec![
            (b"", Trace::new()),
            (b" \t ", Trace::new()),
            (b" \ta@0-1\t ", Trace::from_span(a())),
            (b"a@0-1,.b@0-1,.c@x-1,.d@0-1", Trace::from_span(ab())),
            (b"a@0-1,.b@0-1,", Trace::from_span(ab())),
            (b"a@0-1,,.b@0-1", Trace::from_span(a())),
            (b"a@0-1,..b@0-1", Trace::from_span(a())),
            (b"a@0-1,.b@0-1,...c@0-1", Trace::from_span(ab())),
            (b".a@0-1", Trace::new()),
            (b"a@0-1,+3,b@0-1", Trace::from_span(a())),
            (b"a@0-1,+3,+4", Trace::from_span(a())),
            (b"a@0-1,++3", Trace::from_span(a())),
            (b"a@0-1,+", Trace::from_span(a())),
            (b"a@0-1,+x", Trace::from_span(a())),
            (b"a@0-1,+12345678901", Trace::from_span(a())),
            (b"a@0-1,+0", Trace::from_span(a())),
            (b"+5", tr(vec![], 5)),
            (b"a@0-1, b@0-1", Trace::from_span(a())),
            (b"a@0-1,b@2-1", Trace::from_span(a())),
            (b"a@0-1,@0-1", Trace::from_span(a())),
            (b"a@0-1,b@-1", Trace::from_span(a())),
            (b"a@0-1,b@0-", Trace::from_span(a())),
            (b"a@0-1,b@0", Trace::from_span(a())),
            (b"a@0-1,b0-1", Trace::from_span(a())),
            (b"a@0-1,b@0-1=", Trace::from_span(a())),
            (b"a@0-1,b@0-1=ok=no", Trace::from_span(a())),
            (b"a@0-1,b@0-1=o k", Trace::from_span(a())),
            (b"a@0-1,b@0-1x", Trace::from_span(a())),
            (b"a@0-1,b@+1-2", Trace::from_span(a())),
            (b"a@0-1,b@0-1-2", Trace::from_span(a())),
            (b"a@0-1,b.c@0-1", Trace::from_span(a())),
            (
                b"a@0-1,aaaaaaaaaaaaaaaaaaaaaaaaa@0-1",
                Trace::from_span(a()),
            ),
            (b"a@0-1,b@0-1=aaaaaaaaaaaaaaaaa", Trace::from_span(a())),
            (b"a@0-1,b@12345678901-12345678902", Trace::from_span(a())),
            (b"a@0-1,b@0-1\xff", Trace::from_span(a())),
            (b"a@0-1,\xc3\xa9@0-1", Trace::from_span(a())),
            (b"a@0-1,\n", Trace::from_span(a())),
        ];
        for (input, want) in cases {
            assert_eq!(Trace::decode(input), want, "{}", input.escape_ascii());
        }
        // Longest tokens and numbers are accepted.
        let full = format!("{}@0-9999999999={}", "n".repeat(24), "o".repeat(16));
        assert_eq!(Trace::decode(full.as_bytes()).span_count(), 1);
    }

    #[test]
    fn hostile_inputs() {
        let empty: &[&[u8]] = &[
            b"@@@",
            b",,,",
            b"+",
            b"-",
            b"=",
            b"a",
            b"a@",
            b"99999999999999999999999999",
            b"a@99999999999999999999999-99999999999999999999999999",
            b"\xff\xfe\x00",
            b"\0",
        ];
        for input in empty {
            assert_eq!(
                Trace::decode(input),
                Trace::new(),
                "{}",
                input.escape_ascii()
            );
        }
        let dots = vec![b'.'; 1 << 20];
        assert_eq!(Trace::decode(&dots), Trace::new());
        let mut dots = b"a@0-1,".to_vec();
        dots.extend(std::iter::repeat_n(b'.', 1 << 20));
        assert_eq!(Trace::decode(&dots), Trace::from_span(s("a", 0, 1)));
        let commas = vec![b','; 1 << 20];
        assert_eq!(Trace::decode(&commas), Trace::new());

        // 1 MiB of valid spans: only the first 64 KiB are read, the first 64 spans stored and
        // the rest counted. 64 KiB holds 10,922 whole "a@0-1," elements.
        let many = "a@0-1,".repeat((1 << 20) / 6);
        let decoded = Trace::decode(many.as_bytes());
        assert_eq!(decoded.spans.len(), MAX_SPANS);
        assert_eq!(decoded.dropped, 10_922 - 64);

        // The 64 KiB cut is moved back to a comma, so no element is read half: here the
        // limit falls after "a@0-123456" of the last element, which would parse.
        let mut long = "a@0-1,".repeat(10_921);
        long.push_str("a@0-1234567890,a@0-1");
        let decoded = Trace::decode(long.as_bytes());
        assert_eq!(decoded.dropped, 10_921 - 64);
    }

    #[test]
    fn header_values() {
        assert_eq!(Trace::new().to_header_value(), "");
        let value = HeaderValue::from_static("  a@0-1,+2 ");
        assert_eq!(Trace::from_header_value(&value), tr(vec![s("a", 0, 1)], 2));
    }

    #[test]
    fn encoded_length_bound_is_exact() {
        assert_eq!(MAX_ENCODED_LEN, 4_947);
        let name = "n".repeat(MAX_NAME_LEN);
        let outcome = "o".repeat(MAX_OUTCOME_LEN);
        let big = |_: usize| Span::new(&name, MAX_MS, MAX_MS).with_outcome(&outcome);
        // A chain 16 deep whose deepest parent also holds 48 more spans, plus a span too deep
        // to keep (so the dropped count is written too).
        let mut deepest_parent = big(0);
        deepest_parent.push(big(0).with_child(big(0)));
        for i in 0..48 {
            deepest_parent.push(big(i));
        }
        let mut root = deepest_parent;
        for i in 0..MAX_DEPTH - 2 {
            root = big(i).with_child(root);
        }
        let mut trace = Trace::from_span(root);
        assert_eq!(trace.span_count(), MAX_SPANS + 1);
        trace.dropped = u64::MAX;
        let encoded = trace.encode();
        assert_eq!(encoded.len(), MAX_ENCODED_LEN);
        assert!(HeaderValue::from_str(&encoded).is_ok());
    }

    #[test]
    fn display() {
        assert_eq!(Trace::new().to_string(), "(empty trace)\n");
        assert_eq!(tr(vec![], 1).to_string(), "… and 1 more span\n");
        let trace = tr(
            vec![
                s("a", 0, 10)
                    .with_outcome("ok")
                    .with_child(
                        s("b", 1, 4)
                            .with_child(s("c", 1, 2))
                            .with_child(s("d", 2, 3)),
                    )
                    .with_child(s("e", 5, 9).with_child(s("f", 5, 6))),
                s("g", 20, 20),
            ],
            2,
        );
        assert_eq!(
            trace.to_string(),
            "\
a  0–10 ms (10 ms)  ok
├─ b  1–4 ms (3 ms)
│  ├─ c  1–2 ms (1 ms)
│  └─ d  2–3 ms (1 ms)
└─ e  5–9 ms (4 ms)
   └─ f  5–6 ms (1 ms)
g  20–20 ms (0 ms)
… and 2 more spans
"
        );
    }

    // ---- property tests ----

    const TCHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:";

    fn config(cases: u32) -> ProptestConfig {
        ProptestConfig {
            cases,
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// Expands one generated word into everything a span needs (splitmix64). Giving every
    /// field its own proptest strategy made these tests several times slower (the strategy code
    /// is compiled unoptimised here) without finding anything more; shrinking still works on the
    /// number of spans and on which words they come from.
    struct Words(u64);

    impl Words {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }

        fn pick<T: Copy>(&mut self, items: &[T]) -> T {
            items[self.below(items.len())]
        }

        /// Mostly small times, sometimes anywhere up to `MAX_MS`.
        fn time(&mut self) -> u64 {
            match self.below(3) {
                0 => self.next() % (MAX_MS + 1),
                _ => self.next() % 2_000,
            }
        }

        /// A sanitised token: usually straight from tchar, sometimes text run through the
        /// sanitiser.
        fn token(&mut self, max_len: usize) -> String {
            if self.below(4) == 0 {
                let text = self.text(max_len + 4);
                sanitize_name(&text, max_len)
            } else {
                let len = 1 + self.below(max_len);
                (0..len).map(|_| char::from(self.pick(TCHARS))).collect()
            }
        }

        /// Text of up to `max_len` characters, many of them outside tchar.
        fn text(&mut self, max_len: usize) -> String {
            const ODD: &[char] = &[
                ' ', '\t', '\n', ',', '@', '=', '+', '.', '-', '"', '\0', '\u{7f}', 'é', '☃', '🦀',
            ];
            let len = self.below(max_len + 1);
            (0..len)
                .map(|_| match self.below(3) {
                    0 => self.pick(ODD),
                    _ => char::from(self.pick(TCHARS)),
                })
                .collect()
        }
    }

    /// A childless span that satisfies every invariant, and its wanted depth.
    fn valid_node(seed: u64) -> (usize, Span) {
        let mut w = Words(seed);
        let depth = w.below(MAX_DEPTH + 2);
        let (a, b) = (w.time(), w.time());
        let name = w.token(MAX_NAME_LEN);
        let outcome = (w.below(2) == 0).then(|| w.token(MAX_OUTCOME_LEN));
        let span = Span {
            name,
            start_ms: a.min(b),
            end_ms: a.max(b),
            outcome,
            children: vec![],
        };
        (depth, span)
    }

    /// A childless span, half the time with arbitrary field values as a caller could set them
    /// directly, and its wanted depth.
    fn raw_node(seed: u64) -> (usize, Span) {
        let mut w = Words(seed);
        let depth = w.below(40);
        if w.below(2) == 0 {
            return (depth, valid_node(w.next()).1);
        }
        let span = Span {
            name: w.text(40),
            start_ms: w.next(),
            end_ms: w.next(),
            outcome: (w.below(2) == 0).then(|| w.text(40)),
            children: vec![],
        };
        (depth, span)
    }

    /// Builds a forest from spans in pre-order with wanted depths, each clamped to at most one
    /// deeper than the previous span and below `max_depth`. Deliberately not the decoder's
    /// algorithm: it keeps the open path on a stack and closes spans as it goes back up.
    fn forest(nodes: Vec<(usize, Span)>, max_depth: usize) -> Vec<Span> {
        let mut roots = Vec::new();
        let mut open: Vec<Span> = Vec::new();
        fn close(roots: &mut Vec<Span>, open: &mut Vec<Span>) {
            if let Some(span) = open.pop() {
                match open.last_mut() {
                    Some(parent) => parent.children.push(span),
                    None => roots.push(span),
                }
            }
        }
        for (want, span) in nodes {
            let depth = want.min(open.len()).min(max_depth - 1);
            while open.len() > depth {
                close(&mut roots, &mut open);
            }
            open.push(span);
        }
        while !open.is_empty() {
            close(&mut roots, &mut open);
        }
        roots
    }

    /// Traces within the caps, with sanitised names: these must round-trip exactly.
    fn valid_trace() -> impl Strategy<Value = Trace> {
        (
            vec(any::<u64>(), 0..=MAX_SPANS),
            prop_oneof![Just(0u64), 0..=MAX_MS],
        )
            .prop_map(|(seeds, dropped)| Trace {
                spans: forest(seeds.into_iter().map(valid_node).collect(), MAX_DEPTH),
                dropped,
            })
    }

    /// Traces of any size and depth with any field values.
    fn any_trace() -> impl Strategy<Value = Trace> {
        (
            vec(any::<u64>(), 0..160),
            prop_oneof![0..1_000u64, any::<u64>()],
        )
            .prop_map(|(seeds, dropped)| Trace {
                spans: forest(seeds.into_iter().map(raw_node).collect(), usize::MAX),
                dropped,
            })
    }

    /// Byte strings made of grammar pieces, so that many of them are valid or nearly valid.
    fn grammar_soup() -> impl Strategy<Value = Vec<u8>> {
        let pieces: &[&[u8]] = &[
            b"a",
            b"ok",
            b"call:x",
            b"@",
            b"-",
            b"=",
            b"0",
            b"17",
            b"9999999999",
            b".",
            b"..",
            b",",
            b"+",
            b" ",
            b"\t",
            b"\xff",
            b"a@0-1",
            b",.b@1-2",
            b"=504",
        ];
        vec(select(pieces.to_vec()), 0..40).prop_map(|pieces| pieces.concat())
    }

    /// Valid encodings with one byte overwritten and possibly cut short.
    fn mutated_encoding() -> impl Strategy<Value = Vec<u8>> {
        (
            valid_trace(),
            any::<prop::sample::Index>(),
            any::<u8>(),
            any::<prop::sample::Index>(),
        )
            .prop_map(|(trace, at, byte, cut)| {
                let mut bytes = trace.encode().into_bytes();
                if !bytes.is_empty() {
                    let at = at.index(bytes.len());
                    bytes[at] = byte;
                    bytes.truncate(cut.index(bytes.len() + 1));
                }
                bytes
            })
    }

    fn assert_decode_is_stable(input: &[u8]) -> Result<(), TestCaseError> {
        let decoded = Trace::decode(input);
        let encoded = decoded.encode();
        prop_assert!(encoded.len() <= MAX_ENCODED_LEN);
        prop_assert_eq!(Trace::decode(encoded.as_bytes()), decoded);
        Ok(())
    }

    proptest! {
        #![proptest_config(config(2_000))]

        #[test]
        fn decode_arbitrary_bytes_is_stable(input in vec(any::<u8>(), 0..300)) {
            assert_decode_is_stable(&input)?;
        }

        #[test]
        fn decode_grammar_soup_is_stable(input in grammar_soup()) {
            assert_decode_is_stable(&input)?;
        }

        #[test]
        fn decode_mutated_encoding_is_stable(input in mutated_encoding()) {
            assert_decode_is_stable(&input)?;
        }
    }

    proptest! {
        #![proptest_config(config(3_000))]

        #[test]
        fn valid_traces_round_trip(trace in valid_trace()) {
            let encoded = trace.encode();
            prop_assert_eq!(Trace::decode(encoded.as_bytes()), trace);
        }
    }

    proptest! {
        // Fewer cases: each trace holds up to 160 spans, so one case costs several of the others.
        #![proptest_config(config(2_000))]

        #[test]
        fn any_trace_encodes_within_the_bound(trace in any_trace()) {
            let encoded = trace.encode();
            prop_assert!(encoded.len() <= MAX_ENCODED_LEN, "{} bytes", encoded.len());
            prop_assert!(HeaderValue::from_str(&encoded).is_ok(), "{encoded}");
            let decoded = Trace::decode(encoded.as_bytes());
            // Every span is either kept or counted.
            let within_depth = trace_spans_within(&trace, MAX_DEPTH);
            prop_assert_eq!(decoded.span_count(), within_depth.min(MAX_SPANS));
            let not_kept = (trace.span_count() - decoded.span_count()) as u64;
            prop_assert_eq!(decoded.dropped, not_kept.saturating_add(trace.dropped).min(MAX_MS));
            prop_assert_eq!(decoded.encode(), encoded);
        }
    }

    /// Spans of `trace` less than `max_depth` levels deep.
    fn trace_spans_within(trace: &Trace, max_depth: usize) -> usize {
        fn walk(span: &Span, depth: usize, max_depth: usize) -> usize {
            if depth >= max_depth {
                return 0;
            }
            1 + span
                .children
                .iter()
                .map(|c| walk(c, depth + 1, max_depth))
                .sum::<usize>()
        }
        trace.spans.iter().map(|s| walk(s, 0, max_depth)).sum()
    }
}

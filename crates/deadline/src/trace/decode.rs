//! The decoder: `Deadline-Trace` text to a [`Trace`], keeping the valid prefix.

use http::HeaderValue;

use super::token::is_tchar;
use super::{MAX_DECODE_LEN, MAX_DEPTH, MAX_DIGITS, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN};
use super::{MAX_SPANS, Span, Trace};
use crate::header::trim;

impl Trace {
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

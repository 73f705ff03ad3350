//! The decoder as it was before budgets joined the grammar (`^INDEX=MS` elements), kept word
//! for word (only its paths adjusted, and `Span::budget_ms` left `None`), so tests can show
//! what a reader of that version makes of what this one writes. Do not change it to follow the
//! grammar: it stands for readers already deployed.
#![allow(dead_code, unreachable_pub)]

use super::super::token::is_tchar;
use super::super::{MAX_DEPTH, MAX_DIGITS, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN};
use super::super::{MAX_SPANS, Span, Trace};
use crate::header::trim;

/// `MAX_DECODE_LEN` as the previous decoder had it.
const MAX_DECODE_LEN: usize = 64 * 1024;

/// The previous `Trace::decode`, word for word.
pub(super) fn decode(input: &[u8]) -> Trace {
    let mut trace = Trace::new();
    let mut scan = Scan::new(input);
    let mut stored = 0usize;
    let mut extra = 0u64;
    for element in &mut scan {
        if stored < MAX_SPANS {
            if !attach(&mut trace.spans, element.depth, element.to_span()) {
                break;
            }
            stored += 1;
        } else {
            extra = extra.saturating_add(1);
        }
    }
    trace.dropped = extra.saturating_add(scan.plus()).min(MAX_MS);
    trace
}

/// Splits `bytes` after its longest prefix of bytes that satisfy `pred`.
fn split_run(text: &str, pred: impl Fn(u8) -> bool) -> Option<(&str, &str)> {
    let n = text.bytes().position(|b| !pred(b)).unwrap_or(text.len());
    // Every predicate here accepts ASCII bytes only, so `n` is a character boundary and both
    // halves exist; `split_at_checked` says so without a panic path.
    text.split_at_checked(n)
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

/// The comma-separated elements of a value.
type Elements<'a> = std::str::Split<'a, char>;

/// One valid `span` element, borrowed from the text it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Element<'a> {
    /// Its nesting level (its dots).
    depth: usize,
    name: &'a str,
    start_ms: u64,
    end_ms: u64,
    outcome: Option<&'a str>,
}

impl Element<'_> {
    /// The element as a [`Span`] with no children: the one place decoding allocates.
    fn to_span(self) -> Span {
        Span {
            name: self.name.to_owned(),
            start_ms: self.start_ms,
            end_ms: self.end_ms,
            outcome: self.outcome.map(str::to_owned),
            budget_ms: None,
            children: Vec::new(),
        }
    }
}

/// The valid elements of a `Deadline-Trace` value, in order, without allocating: the reading
/// rules of [`Trace::decode`] in one place, for the decoder and for splicing a callee's trace
/// as text.
///
/// It stops at the first malformed element; a `+N` read as the last element is kept for
/// [`plus`](Scan::plus).
struct Scan<'a> {
    elements: std::iter::Peekable<Elements<'a>>,
    previous_depth: Option<usize>,
    plus: u64,
    done: bool,
    /// The text was cut before an element that is not UTF-8: its last element is then not the
    /// value's last, so a `+N` there is not read.
    cut: bool,
}

impl<'a> Scan<'a> {
    /// Scans `input`: its first 64 KiB (cut back to the last comma in them, so no element is
    /// read half), without the spaces and tabs around it.
    fn new(input: &'a [u8]) -> Scan<'a> {
        let mut input = input;
        if input.len() > MAX_DECODE_LEN {
            let head = input.get(..MAX_DECODE_LEN).unwrap_or_default();
            let cut = head.iter().rposition(|&b| b == b',').unwrap_or(0);
            input = head.get(..cut).unwrap_or_default();
        }
        let (text, cut) = whole_elements(trim(input));
        Scan {
            elements: text.split(',').peekable(),
            previous_depth: None,
            plus: 0,
            done: text.is_empty(),
            cut,
        }
    }

    /// The `+N` the value ended with (0 without one), once the scan is over.
    fn plus(&self) -> u64 {
        self.plus
    }
}

/// `input` as text, checked once: all of it when it is UTF-8, else the elements before the one
/// holding the first byte that is not (which is malformed, as no byte outside ASCII is valid in
/// an element, so the scan would stop there anyway), and whether it was cut. Checking the whole
/// value once lets every name and outcome be a slice of it, not a string checked again.
fn whole_elements(input: &[u8]) -> (&str, bool) {
    match std::str::from_utf8(input) {
        Ok(text) => (text, false),
        Err(error) => {
            let valid = input.get(..error.valid_up_to()).unwrap_or_default();
            let end = valid.iter().rposition(|&b| b == b',').unwrap_or(0);
            let text = valid
                .get(..end)
                .and_then(|head| std::str::from_utf8(head).ok())
                .unwrap_or_default();
            (text, true)
        }
    }
}

impl<'a> Iterator for Scan<'a> {
    type Item = Element<'a>;

    fn next(&mut self) -> Option<Element<'a>> {
        if self.done {
            return None;
        }
        let element = self.next_element();
        self.done = element.is_none();
        element
    }
}

impl<'a> Scan<'a> {
    fn next_element(&mut self) -> Option<Element<'a>> {
        let element = self.elements.next()?;
        if let Some(digits) = element.strip_prefix('+') {
            // `+N` must be the last element.
            if self.elements.peek().is_none() && !self.cut {
                self.plus = parse_number(digits.as_bytes()).unwrap_or(0);
            }
            return None;
        }
        let element = parse_span(element)?;
        let fits = match self.previous_depth {
            None => element.depth == 0,
            Some(previous) => element.depth <= previous + 1,
        };
        if !fits {
            return None;
        }
        self.previous_depth = Some(element.depth);
        Some(element)
    }
}

/// One `span` element. Each part is taken as the longest run of the bytes it may hold, so an
/// element is read in one pass.
fn parse_span(element: &str) -> Option<Element<'_>> {
    let (dots, rest) = split_run(element, |b| b == b'.')?;
    let depth = dots.len();
    if depth >= MAX_DEPTH {
        return None;
    }
    let (name, rest) = split_run(rest, is_tchar)?;
    let rest = rest.strip_prefix('@')?;
    let (start, rest) = split_run(rest, |b| b.is_ascii_digit())?;
    let rest = rest.strip_prefix('-')?;
    let (end, rest) = split_run(rest, |b| b.is_ascii_digit())?;
    let outcome = match rest {
        "" => None,
        _ => Some(rest.strip_prefix('=')?),
    };
    let (start_ms, end_ms) = (
        parse_number(start.as_bytes())?,
        parse_number(end.as_bytes())?,
    );
    if end_ms < start_ms || !token_len_ok(name.as_bytes(), MAX_NAME_LEN) {
        return None;
    }
    if let Some(outcome) = outcome {
        let bytes = outcome.as_bytes();
        if !token_len_ok(bytes, MAX_OUTCOME_LEN) || !bytes.iter().all(|&b| is_tchar(b)) {
            return None;
        }
    }
    Some(Element {
        depth,
        name,
        start_ms,
        end_ms,
        outcome,
    })
}

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

//! The decoder: `Deadline-Trace` text to a [`Trace`], keeping the valid prefix.

use http::HeaderValue;

use super::MAX_OUTCOME_LEN;
use super::token::is_tchar;
use super::{MAX_DECODE_LEN, MAX_DEPTH, MAX_DIGITS, MAX_INDEX_DIGITS, MAX_MS, MAX_NAME_LEN};
use super::{MAX_SPANS, Span, Trace};
use crate::header::trim;

impl Trace {
    /// Decodes a `Deadline-Trace` value. Never fails and never panics: the result is the valid
    /// prefix of the input.
    ///
    /// Spaces and tabs around the whole value are ignored. Elements are read in order; at the
    /// first malformed one (a character outside the grammar, a name or outcome too long, more
    /// than ten digits, `end < start`, a root that is not at depth 0, a span more than one level
    /// deeper than the one before it, an empty element, `+N` anywhere but last, a span after a
    /// budget, a budget whose index is not that of a stored span or not above the previous
    /// budget's) decoding stops and the spans read so far are returned, with the budgets read
    /// so far given to them ([`Span::budget_ms`]). `dropped` is the `+N` if one was read, plus any
    /// valid spans beyond [`MAX_SPANS`] (these are counted, not stored), saturating at
    /// [`MAX_MS`]. Only the first 64 KiB of the input are looked at (cut back to the last comma
    /// in them, so no element is read half).
    ///
    /// ```
    /// # use deadline_core::trace::{Span, Trace};
    /// let trace = Trace::decode(b"orders@0-30=ok,.work@2-29,.b@d-0,.more@3-4");
    /// assert_eq!(
    ///     trace,
    ///     Trace::from_span(Span::new("orders", 0, 30).with_outcome("ok").with_child(Span::new("work", 2, 29)))
    /// );
    /// assert_eq!(Trace::decode(b"\xff@@@,,,"), Trace::new());
    ///
    /// let trace = Trace::decode(b"orders@0-30=200,.work@2-29=ok,^0=950");
    /// assert_eq!(trace.spans[0].budget_ms, Some(950));
    /// ```
    pub fn decode(input: &[u8]) -> Trace {
        let mut trace = Trace::new();
        let mut scan = Scan::new(input);
        let mut stored = 0usize;
        let mut extra = 0u64;
        // Budgets come after every span, so they are kept by the span's index (in the order
        // the spans were read) and given to the spans once the tree is whole.
        let mut budgets = Budgets::default();
        for item in &mut scan {
            match item {
                Item::Span(element) if stored < MAX_SPANS => {
                    if !attach(&mut trace.spans, element.depth, element.to_span()) {
                        break;
                    }
                    stored += 1;
                }
                Item::Span(_) => extra = extra.saturating_add(1),
                Item::Budget { index, ms } => budgets.set(index, ms),
            }
        }
        if !budgets.is_empty() {
            let mut index = 0;
            for root in &mut trace.spans {
                budgets.give(root, &mut index);
            }
        }
        trace.dropped = extra.saturating_add(scan.plus()).min(MAX_MS);
        trace
    }

    /// [`decode`](Trace::decode)s a header value.
    pub fn from_header_value(value: &HeaderValue) -> Trace {
        Trace::decode(value.as_bytes())
    }
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

/// One valid `span` element, borrowed from the text it was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Element<'a> {
    /// Its nesting level (its dots).
    pub(crate) depth: usize,
    pub(crate) name: &'a str,
    pub(crate) start_ms: u64,
    pub(crate) end_ms: u64,
    pub(crate) outcome: Option<&'a str>,
}

impl Element<'_> {
    /// The element as a [`Span`] with no children and no budget: the one place decoding
    /// allocates.
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

/// One valid element of a value, as [`Scan`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Item<'a> {
    /// A `span` element.
    Span(Element<'a>),
    /// A `budget` element: the span at `index` (from 0, in the order the spans were read) had
    /// `ms` at arrival. Only ever after every span, for a stored span, indices rising.
    Budget { index: usize, ms: u64 },
}

// One bit per stored span.
const _: () = assert!(MAX_SPANS <= 64);

/// The budgets of a decoded trace's spans, by index, until they are given to the spans.
pub(crate) struct Budgets {
    /// Bit `i` set: `ms[i]` is span `i`'s budget.
    set: u64,
    ms: [u64; MAX_SPANS],
}

impl Default for Budgets {
    fn default() -> Budgets {
        Budgets {
            set: 0,
            ms: [0; MAX_SPANS],
        }
    }
}

impl Budgets {
    /// Span `index` had `ms` at arrival (an index beyond [`MAX_SPANS`] is never given: the
    /// reader only yields budgets of stored spans).
    pub(crate) fn set(&mut self, index: usize, ms: u64) {
        if let Some(slot) = self.ms.get_mut(index) {
            *slot = ms;
            self.set |= 1 << index;
        }
    }

    /// Span `index`'s budget, if it had one.
    pub(crate) fn get(&self, index: usize) -> Option<u64> {
        let bit = 1u64.checked_shl(u32::try_from(index).ok()?)?;
        (self.set & bit != 0)
            .then(|| self.ms.get(index).copied())
            .flatten()
    }

    /// Whether no span has a budget.
    pub(crate) fn is_empty(&self) -> bool {
        self.set == 0
    }

    /// The indices and budgets, indices rising.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        let mut set = self.set;
        std::iter::from_fn(move || {
            let index = usize::try_from(set.trailing_zeros()).ok()?;
            let ms = self.ms.get(index).copied()?;
            set &= set.checked_sub(1)?;
            Some((index, ms))
        })
    }

    /// Gives `span` and its descendants (in pre-order, the first being number `index`) their
    /// budgets, and moves `index` past them. As deep as the decoder makes trees (at most
    /// [`MAX_DEPTH`] levels).
    fn give(&self, span: &mut Span, index: &mut usize) {
        span.budget_ms = self.get(*index);
        *index += 1;
        for child in &mut span.children {
            self.give(child, index);
        }
    }
}

/// Where a [`Scan`] is in a value: spans come first, then budgets, then at most a `+N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Part {
    Spans,
    Budgets,
    Done,
}

/// The valid elements of a `Deadline-Trace` value, in order, without allocating: the reading
/// rules of [`Trace::decode`] in one place, for the decoder and for splicing a callee's trace
/// as text.
///
/// It stops at the first malformed element; a `+N` read as the last element is kept for
/// [`plus`](Scan::plus).
pub(crate) struct Scan<'a> {
    /// The elements not read yet (`None` once the last one was taken).
    rest: Option<&'a str>,
    part: Part,
    previous_depth: Option<usize>,
    /// Valid spans read so far (stored or not).
    spans: usize,
    /// The next budget's index must be at least this.
    next_budget: usize,
    plus: u64,
    /// The text was cut before an element that is not UTF-8: its last element is then not the
    /// value's last, so a `+N` there is not read.
    cut: bool,
}

impl<'a> Scan<'a> {
    /// Scans `input`: its first 64 KiB (cut back to the last comma in them, so no element is
    /// read half), without the spaces and tabs around it.
    pub(crate) fn new(input: &'a [u8]) -> Scan<'a> {
        let (text, cut) = scanned_text(input);
        Scan {
            rest: (!text.is_empty()).then_some(text),
            part: Part::Spans,
            previous_depth: None,
            spans: 0,
            next_budget: 0,
            plus: 0,
            cut,
        }
    }

    /// The `+N` the value ended with (0 without one), once the scan is over.
    pub(crate) fn plus(&self) -> u64 {
        self.plus
    }

    /// Valid spans read so far (stored or not).
    pub(crate) fn spans(&self) -> usize {
        self.spans
    }
}

/// The text [`Scan`] reads of `input`, and whether it was cut before an element that is not
/// UTF-8.
fn scanned_text(input: &[u8]) -> (&str, bool) {
    let mut input = input;
    if input.len() > MAX_DECODE_LEN {
        let head = input.get(..MAX_DECODE_LEN).unwrap_or_default();
        let cut = head.iter().rposition(|&b| b == b',').unwrap_or(0);
        input = head.get(..cut).unwrap_or_default();
    }
    whole_elements(trim(input))
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
    type Item = Item<'a>;

    fn next(&mut self) -> Option<Item<'a>> {
        if self.part == Part::Done {
            return None;
        }
        let item = self.next_item();
        if item.is_none() {
            self.part = Part::Done;
        }
        item
    }
}

impl<'a> Scan<'a> {
    /// The next element's text, and whether it is the value's last.
    fn take_element(&mut self) -> Option<(&'a str, bool)> {
        let rest = self.rest?;
        match rest.split_once(',') {
            Some((element, rest)) => {
                self.rest = Some(rest);
                Some((element, false))
            }
            None => {
                self.rest = None;
                Some((rest, true))
            }
        }
    }

    fn next_item(&mut self) -> Option<Item<'a>> {
        let (element, last) = self.take_element()?;
        if let Some(digits) = element.strip_prefix('+') {
            // `+N` must be the last element.
            if last && !self.cut {
                self.plus = parse_number(digits.as_bytes()).unwrap_or(0);
            }
            return None;
        }
        if let Some(budget) = element.strip_prefix('^') {
            // A budget for a stored span, after every span, indices rising.
            let (index, ms) = parse_budget(budget)?;
            if index < self.next_budget || index >= self.spans.min(MAX_SPANS) {
                return None;
            }
            if self.part == Part::Spans {
                self.part = Part::Budgets;
            }
            self.next_budget = index + 1;
            return Some(Item::Budget { index, ms });
        }
        if self.part != Part::Spans {
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
        self.spans += 1;
        Some(Item::Span(element))
    }
}

/// The part of a `budget` element after its `^`: `index "=" ms`.
fn parse_budget(budget: &str) -> Option<(usize, u64)> {
    let (index, ms) = budget.split_once('=')?;
    if !(1..=MAX_INDEX_DIGITS).contains(&index.len()) {
        return None;
    }
    let index = usize::try_from(parse_number(index.as_bytes())?).ok()?;
    Some((index, parse_number(ms.as_bytes())?))
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

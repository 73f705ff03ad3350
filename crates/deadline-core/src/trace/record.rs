//! What a hop records for its trace while it works: spans built by hand, and outbound calls
//! whose callees' traces stay encoded until the hop's own trace is written.
//!
//! # Why a callee's trace is kept as text
//!
//! A hop that calls another gets the callee's trace back in every answer, and sends it on, nested
//! under the attempt, in its own trace. Decoding it into a [`Span`] tree only to encode it again
//! costs a string per name and outcome and a vector per level, on every outbound call. An
//! [`EncodedTrace`] instead keeps the header value (a reference count, for hyper's buffers),
//! checked once with the decoder's own reading rules (keeping where each element's fields are in
//! it), and the encoder writes its elements straight from the text, one level deeper per nesting
//! and shifted onto the caller's clock. The result is the same text as decoding, shifting and
//! encoding it (a property test holds the two together); only [`CallSpan::to_span`] still
//! decodes, for callers who want the tree.

use std::sync::Arc;

use http::{HeaderValue, StatusCode};

use super::decode::{Element, Item, Scan};
use super::name::ATTEMPT;
use super::{MAX_SPANS, Span, Trace};

/// A callee's `Deadline-Trace`, kept as the text it came in, checked once.
///
/// Holds what [`Trace::decode`] would keep: the valid prefix, at most [`MAX_SPANS`] spans, and
/// the count of the spans it would drop (a `+N`, and valid spans beyond the cap).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncodedTrace {
    value: HeaderValue,
    /// Spans stored, as [`Trace::decode`] would store them: the first ones, up to `MAX_SPANS`.
    spans: usize,
    /// Spans [`Trace::decode`] would count as dropped.
    dropped: u64,
    /// The kept elements, read once when the value was checked: the encoder writes each of them
    /// twice (once to size the trace, once to write it), and reading the text again each time
    /// cost more than keeping where each field is.
    kept: Vec<Kept>,
}

/// One kept span element of an [`EncodedTrace`]: its fields, with its name and outcome as byte
/// ranges of the value, and its budget at arrival if the value gave one.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Kept {
    depth: usize,
    name: std::ops::Range<usize>,
    start_ms: u64,
    end_ms: u64,
    outcome: Option<std::ops::Range<usize>>,
    budget_ms: Option<u64>,
}

impl EncodedTrace {
    /// Checks `value` as [`Trace::decode`] reads it, keeping where each span's fields are (one
    /// allocation for a value with spans; no string is copied).
    ///
    /// ```
    /// use deadline_core::trace::EncodedTrace;
    /// use http::HeaderValue;
    ///
    /// let callee = EncodedTrace::new(HeaderValue::from_static("inventory@0-12=200,.work@0-12=ok,+2"));
    /// assert_eq!((callee.span_count(), callee.dropped()), (2, 2));
    /// assert_eq!(callee.decode().encode(), "inventory@0-12=200,.work@0-12=ok,+2");
    /// ```
    pub fn new(value: HeaderValue) -> EncodedTrace {
        let bytes = value.as_bytes();
        // Every name and outcome the scan yields is a slice of `bytes`: where it starts there.
        let base = bytes.as_ptr() as usize;
        let range = |text: &str| {
            let start = (text.as_ptr() as usize).saturating_sub(base);
            start..start + text.len()
        };
        let mut kept: Vec<Kept> = Vec::new();
        let mut scan = Scan::new(bytes);
        for item in scan.by_ref() {
            match item {
                Item::Span(element) if kept.len() < MAX_SPANS => kept.push(Kept {
                    depth: element.depth,
                    name: range(element.name),
                    start_ms: element.start_ms,
                    end_ms: element.end_ms,
                    outcome: element.outcome.map(range),
                    budget_ms: None,
                }),
                Item::Span(_) => {}
                // The scan yields budgets only for stored spans, after every span.
                Item::Budget { index, ms } => {
                    if let Some(span) = kept.get_mut(index) {
                        span.budget_ms = Some(ms);
                    }
                }
            }
        }
        let valid = scan.spans();
        let spans = valid.min(MAX_SPANS);
        let extra = u64::try_from(valid - spans).unwrap_or(u64::MAX);
        let dropped = extra.saturating_add(scan.plus()).min(super::MAX_MS);
        EncodedTrace {
            value,
            spans,
            dropped,
            kept,
        }
    }

    /// The spans kept (at most [`MAX_SPANS`]).
    pub fn span_count(&self) -> usize {
        self.spans
    }

    /// The spans the callee dropped or that are beyond the cap.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The trace as values: what [`Trace::decode`] makes of the text.
    pub fn decode(&self) -> Trace {
        Trace::from_header_value(&self.value)
    }

    /// The kept elements, in order, each with its budget at arrival if it had one: what
    /// [`Trace::decode`] gives the spans.
    pub(crate) fn elements(&self) -> impl Iterator<Item = (Element<'_>, Option<u64>)> {
        let bytes = self.value.as_bytes();
        // Ranges of text the scan read: ASCII, so every one is a `str`.
        let text = move |range: &std::ops::Range<usize>| {
            bytes
                .get(range.clone())
                .and_then(|b| std::str::from_utf8(b).ok())
                .unwrap_or_default()
        };
        self.kept.iter().map(move |span| {
            (
                Element {
                    depth: span.depth,
                    name: text(&span.name),
                    start_ms: span.start_ms,
                    end_ms: span.end_ms,
                    outcome: span.outcome.as_ref().map(text),
                },
                span.budget_ms,
            )
        })
    }
}

/// How a recorded call or attempt ended: one of the [`outcome`](super::outcome) words or a
/// response's status code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A word such as [`outcome::TIMEOUT`](super::outcome::TIMEOUT).
    Word(&'static str),
    /// A response's status code, written as its three digits.
    Status(StatusCode),
}

impl Outcome {
    /// The outcome as it is written in the trace.
    pub fn as_str(&self) -> &str {
        match self {
            Outcome::Word(word) => word,
            Outcome::Status(status) => status.as_str(),
        }
    }
}

/// One attempt of an outbound call, with the callee's trace from its answer, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptSpan {
    /// When it was sent, in ms since the hop received its request; the callee's spans are
    /// shifted by this much (and held inside the attempt: see [`Trace::nest_within`]).
    pub start_ms: u64,
    /// When it ended, in ms since the hop received its request.
    pub end_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// The callee's trace, nested under the attempt.
    pub callee: Option<EncodedTrace>,
}

/// One outbound call: its span (`call:<target>`) and its attempts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CallSpan {
    /// The span's name, usually made once per client with [`name::call`](super::name::call).
    pub name: Arc<str>,
    /// When the call started, in ms since the hop received its request.
    pub start_ms: u64,
    /// When it ended, in ms since the hop received its request.
    pub end_ms: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Its attempts, in order.
    pub attempts: Attempts,
}

/// A call's attempts, in order: the first kept inline (most calls send one, so recording it
/// allocates nothing), the others in a vector.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts {
    first: Option<AttemptSpan>,
    more: Vec<AttemptSpan>,
}

impl Attempts {
    /// No attempts.
    pub fn new() -> Attempts {
        Attempts::default()
    }

    /// Appends `attempt`.
    pub fn push(&mut self, attempt: AttemptSpan) {
        match self.first {
            None => self.first = Some(attempt),
            Some(_) => self.more.push(attempt),
        }
    }

    /// The attempts, in order.
    pub fn iter(&self) -> impl Iterator<Item = &AttemptSpan> {
        self.first.iter().chain(&self.more)
    }

    /// The attempt at `index` (from 0), to correct its outcome (a response body that failed
    /// after the head).
    pub fn get_mut(&mut self, index: usize) -> Option<&mut AttemptSpan> {
        match index {
            0 => self.first.as_mut(),
            _ => self.more.get_mut(index - 1),
        }
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

impl FromIterator<AttemptSpan> for Attempts {
    fn from_iter<I: IntoIterator<Item = AttemptSpan>>(iter: I) -> Attempts {
        let mut attempts = Attempts::new();
        for attempt in iter {
            attempts.push(attempt);
        }
        attempts
    }
}

impl CallSpan {
    /// The call as a [`Span`] tree, the callees' traces decoded and shifted under their
    /// attempts, and the number of spans the callees dropped.
    pub fn to_span(&self) -> (Span, u64) {
        let mut dropped = 0u64;
        let mut call =
            Span::new(&*self.name, self.start_ms, self.end_ms).with_outcome(self.outcome.as_str());
        for attempt in self.attempts.iter() {
            let mut span = Span::new(ATTEMPT, attempt.start_ms, attempt.end_ms)
                .with_outcome(attempt.outcome.as_str());
            if let Some(callee) = &attempt.callee {
                let mut trace = callee.decode();
                trace.nest_within(span.start_ms, span.end_ms);
                span.children = trace.spans;
                dropped = dropped.saturating_add(trace.dropped);
            }
            call.push(span);
        }
        (call, dropped)
    }
}

/// One entry of a hop's recording: a span built by hand, or an outbound call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// A span built by hand ([`Span`]).
    Span(Span),
    /// An outbound call, its callees' traces still encoded.
    Call(CallSpan),
}

impl Recorded {
    /// The entry as a [`Span`] tree, and the number of spans its callees dropped.
    pub fn to_span(&self) -> (Span, u64) {
        match self {
            Recorded::Span(span) => (span.clone(), 0),
            Recorded::Call(call) => call.to_span(),
        }
    }

    /// As [`to_span`](Self::to_span), without copying a span built by hand.
    pub fn into_span(self) -> (Span, u64) {
        match self {
            Recorded::Span(span) => (span, 0),
            Recorded::Call(call) => call.to_span(),
        }
    }
}

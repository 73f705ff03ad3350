//! Property tests of the codec: decoding is stable, valid traces round-trip, every trace
//! encodes within the bound.

use http::HeaderValue;
use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::select;

use super::*;

const TCHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:";

pub(super) fn config(cases: u32) -> ProptestConfig {
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
    let budget_ms = (w.below(3) == 0).then(|| w.time());
    let span = Span {
        name,
        start_ms: a.min(b),
        end_ms: a.max(b),
        outcome,
        budget_ms,
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
        budget_ms: (w.below(2) == 0).then(|| w.next()),
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
pub(super) fn valid_trace() -> impl Strategy<Value = Trace> {
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
pub(super) fn grammar_soup() -> impl Strategy<Value = Vec<u8>> {
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
        b"^",
        b",^0=",
        b",^1=950",
    ];
    vec(select(pieces.to_vec()), 0..40).prop_map(|pieces| pieces.concat())
}

/// Valid encodings with one byte overwritten and possibly cut short.
pub(super) fn mutated_encoding() -> impl Strategy<Value = Vec<u8>> {
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

/// The same call encoded two ways: its callees' traces spliced from their text, and decoded,
/// shifted and nested as spans; both under `depth` levels of wrapping spans.
fn spliced_and_decoded(call: &CallSpan, depth: usize) -> (String, String) {
    use super::encode::{Caps, Fields, Visit, walk_call};
    let walk = |visit: &mut dyn Visit| {
        for level in 0..depth {
            let wrap = Fields {
                name: "w",
                start_ms: 0,
                end_ms: 1,
                outcome: None,
                budget_ms: None,
            };
            visit.element(level, wrap);
        }
        walk_call(call, depth, visit);
    };
    let mut spliced = Vec::new();
    Caps::count(&walk, 0).write(&mut spliced, &walk);

    let (mut span, dropped) = call.to_span();
    for _ in 0..depth {
        span = Span::new("w", 0, 1).with_child(span);
    }
    let decoded = Trace {
        spans: vec![span],
        dropped,
    };
    (String::from_utf8(spliced).unwrap(), decoded.encode())
}

fn callee_text() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        grammar_soup(),
        mutated_encoding(),
        valid_trace().prop_map(|trace| trace.encode().into_bytes()),
    ]
}

proptest! {
    #![proptest_config(config(2_000))]

    #[test]
    fn splicing_a_callee_is_decoding_shifting_and_encoding_it(
        first in callee_text(),
        second in callee_text(),
        sent in prop_oneof![0..2_000u64, Just(MAX_MS), Just(u64::MAX - 3)],
        depth in 0..MAX_DEPTH + 2,
    ) {
        let (Ok(first), Ok(second)) = (HeaderValue::from_bytes(&first), HeaderValue::from_bytes(&second)) else {
            return Ok(());
        };
        let attempt = |start_ms: u64, callee: HeaderValue| AttemptSpan {
            start_ms,
            end_ms: start_ms.saturating_add(3),
            outcome: Outcome::Status(http::StatusCode::BAD_GATEWAY),
            callee: Some(EncodedTrace::new(callee)),
        };
        let call = CallSpan {
            name: "call:inventory".into(),
            start_ms: 1,
            end_ms: 2,
            outcome: Outcome::Word(outcome::TIMEOUT),
            attempts: [
                attempt(sent, first.clone()),
                attempt(sent / 2, second),
                AttemptSpan { start_ms: 9, end_ms: 4, outcome: Outcome::Word(outcome::SKIPPED), callee: None },
            ]
            .into_iter()
            .collect(),
        };
        let (spliced, decoded) = spliced_and_decoded(&call, depth);
        prop_assert_eq!(spliced, decoded);
        let callee = EncodedTrace::new(first);
        let trace = callee.decode();
        prop_assert_eq!(callee.span_count(), trace.span_count());
        prop_assert_eq!(callee.dropped(), trace.dropped);
    }
}

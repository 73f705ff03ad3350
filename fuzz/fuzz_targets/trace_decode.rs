//! `Trace::decode` on arbitrary bytes.
//!
//! Properties asserted on every input:
//! - no panic (any panic is a crash) and no hang (libFuzzer's `-timeout` turns one into a crash);
//! - bounded memory: decoding allocates at most `DECODE_ALLOC_BOUND` bytes at any moment, a
//!   bound set by the span cap and the token lengths, not by the input's length;
//! - the result is a well-formed trace: at most 64 spans, nesting under 16 levels, names and
//!   outcomes non-empty `tchar` tokens of at most 24 and 16 bytes, `start <= end <= MAX_MS`,
//!   budgets of at most `MAX_MS`, and a dropped count of at most `MAX_MS`;
//! - decoding is stable: the result encodes within `MAX_ENCODED_LEN` bytes to a valid header
//!   value, that encoding decodes to the same trace, and encodes again to the same bytes;
//! - reading a header value gives the same trace as decoding its bytes, and the text rendering
//!   has one line per span plus one for the dropped count.

#![no_main]

use deadline::trace::{
    MAX_DEPTH, MAX_ENCODED_LEN, MAX_MS, MAX_NAME_LEN, MAX_OUTCOME_LEN, MAX_SPANS, Span, Trace,
};
use deadline_fuzz::peak_bytes;
use http::HeaderValue;
use libfuzzer_sys::fuzz_target;

/// Most bytes a decode may hold at once: each stored span, its name and outcome, and the spare
/// room of the `Vec`s that hold the spans. A non-empty `Vec` of spans has room for at least four
/// (the standard library's smallest allocation for elements of this size), so a span that is
/// its parent's only child can take four spans' room: at most 4 per span over all the `Vec`s
/// (a `Vec` of `n` spans has room for `max(4, 2n)` at most). One more per span covers a `Vec`
/// mid-way through doubling, its old buffer still live beside the new one.
const DECODE_ALLOC_BOUND: usize =
    MAX_SPANS * (5 * size_of::<Span>() + MAX_NAME_LEN + MAX_OUTCOME_LEN + 2 * 16);

fn is_token(token: &str, max_len: usize) -> bool {
    (1..=max_len).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b':'))
}

/// Checks every span and returns how many there are.
fn check_spans(trace: &Trace) -> usize {
    let mut count = 0;
    let mut stack: Vec<(&Span, usize)> = trace.spans.iter().map(|s| (s, 0)).collect();
    while let Some((span, depth)) = stack.pop() {
        count += 1;
        assert!(depth < MAX_DEPTH, "span at depth {depth}");
        assert!(is_token(&span.name, MAX_NAME_LEN), "name {:?}", span.name);
        if let Some(outcome) = &span.outcome {
            assert!(is_token(outcome, MAX_OUTCOME_LEN), "outcome {outcome:?}");
        }
        assert!(
            span.start_ms <= span.end_ms && span.end_ms <= MAX_MS,
            "{span:?}"
        );
        assert!(span.budget_ms.is_none_or(|ms| ms <= MAX_MS), "{span:?}");
        stack.extend(span.children.iter().map(|c| (c, depth + 1)));
    }
    count
}

fuzz_target!(|data: &[u8]| {
    let (trace, bytes) = peak_bytes(|| Trace::decode(data));
    assert!(
        bytes <= DECODE_ALLOC_BOUND,
        "decoding {} input bytes held {bytes} bytes",
        data.len()
    );

    let spans = check_spans(&trace);
    assert!(spans <= MAX_SPANS, "{spans} spans stored");
    assert_eq!(spans, trace.span_count());
    assert!(trace.dropped <= MAX_MS);

    let encoded = trace.encode();
    assert!(encoded.len() <= MAX_ENCODED_LEN, "{} bytes", encoded.len());
    assert!(HeaderValue::from_str(&encoded).is_ok(), "{encoded}");
    assert_eq!(trace.to_header_value(), encoded.as_str());
    let again = Trace::decode(encoded.as_bytes());
    assert_eq!(again, trace, "{encoded}");
    assert_eq!(again.encode(), encoded);

    if let Ok(value) = HeaderValue::from_bytes(data) {
        assert_eq!(Trace::from_header_value(&value), trace);
    }

    let lines = trace.to_string().lines().count();
    let want = if spans == 0 && trace.dropped == 0 {
        1
    } else {
        spans + usize::from(trace.dropped > 0)
    };
    assert_eq!(lines, want);
});

//! What a reader from before budgets joined the grammar makes of what this version writes, and
//! the other way round. [`old_decode`] is that reader, kept word for word.
//!
//! The rule these tests hold: budgets go after every span, so a previous reader, which stops at
//! the first element it does not know and keeps what it read, reads every span (names, times,
//! outcomes, nesting) as this version does. It misses the budgets, and, when the trace also
//! ends with `+N`, that count (it never reaches it). And a trace without budgets is read by this
//! version exactly as the previous one read it.

use proptest::collection::vec;
use proptest::prelude::*;

use super::props::{config, grammar_soup, mutated_encoding, valid_trace};
use super::*;

mod old_decode;

/// `trace` without its budgets: what a previous reader can know of it.
fn without_budgets(trace: &Trace) -> Trace {
    fn strip(span: &Span) -> Span {
        Span {
            budget_ms: None,
            children: span.children.iter().map(strip).collect(),
            ..span.clone()
        }
    }
    Trace {
        spans: trace.spans.iter().map(strip).collect(),
        dropped: trace.dropped,
    }
}

/// Whether an encoded trace holds a budget element.
fn has_budgets(encoded: &str) -> bool {
    encoded.starts_with('^') || encoded.contains(",^")
}

/// The three-hop chain of the module docs, every hop with its budget at arrival.
const CHAIN: &str = "gateway@0-967=504,.call:orders@1-966=504,..attempt@1-966=504,\
                     ...orders@1-965=504,....work@1-21=ok,....call:inventory@22-964=504,\
                     .....attempt@22-964=504,......inventory@22-963=504,\
                     .......work@22-962=deadline,^0=1000,^3=999,^7=945";

#[test]
fn a_previous_reader_reads_every_span_of_a_trace_with_budgets() {
    let new = Trace::decode(CHAIN.as_bytes());
    let budgets: Vec<_> = super::hops::hops(&new, None)
        .iter()
        .map(|hop| (hop.name.clone(), hop.budget.map(super::hops::Budget::ms)))
        .collect();
    assert_eq!(
        budgets,
        [
            ("gateway".to_owned(), Some(1000)),
            ("orders".to_owned(), Some(999)),
            ("inventory".to_owned(), Some(945)),
        ]
    );
    let old = old_decode::decode(CHAIN.as_bytes());
    assert_eq!(old.span_count(), 9);
    assert_eq!(old, without_budgets(&new));
    // The text without its budgets is exactly what the previous version wrote.
    let (spans, _) = CHAIN.split_once(",^").unwrap();
    assert_eq!(old.encode(), spans);
    assert_eq!(Trace::decode(spans.as_bytes()), old);
}

#[test]
fn a_previous_reader_misses_the_dropped_count_after_budgets_and_nothing_else() {
    let encoded = "orders@0-40=200,.work@1-39=ok,^0=45,+3";
    let new = Trace::decode(encoded.as_bytes());
    assert_eq!((new.spans[0].budget_ms, new.dropped), (Some(45), 3));
    let old = old_decode::decode(encoded.as_bytes());
    assert_eq!(old.spans, without_budgets(&new).spans);
    assert_eq!(old.dropped, 0);
    // Without budgets, the count reaches it as it always did.
    assert_eq!(
        old_decode::decode(b"orders@0-40=200,.work@1-39=ok,+3"),
        without_budgets(&new)
    );
}

proptest! {
    #![proptest_config(config(2_000))]

    /// Whatever this version writes, a previous reader gets every span of it.
    #[test]
    fn a_previous_reader_gets_the_spans_of_any_encoding(trace in valid_trace()) {
        let encoded = trace.encode();
        let new = Trace::decode(encoded.as_bytes());
        let old = old_decode::decode(encoded.as_bytes());
        prop_assert_eq!(&old.spans, &without_budgets(&new).spans);
        let dropped = if has_budgets(&encoded) { 0 } else { new.dropped };
        prop_assert_eq!(old.dropped, dropped);
    }

    /// On any input without a budget element, this version reads what the previous one read.
    #[test]
    fn without_budgets_both_readers_agree(
        input in prop_oneof![vec(any::<u8>(), 0..300), grammar_soup(), mutated_encoding()],
    ) {
        let input: Vec<u8> = input.into_iter().filter(|&b| b != b'^').collect();
        prop_assert_eq!(Trace::decode(&input), old_decode::decode(&input));
    }
}

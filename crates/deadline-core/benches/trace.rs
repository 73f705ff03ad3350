//! Cost of the `Deadline-Trace` codec on a full-size trace: every response encodes one, and every
//! caller decodes its callee's.
//!
//! The trace is shaped like the demo's worst case: a gateway that tried orders three times, each
//! orders attempt trying inventory three times, 64 spans in all (exactly `MAX_SPANS`, so nothing
//! is dropped and the whole tree is written).

use deadline_core::trace::{MAX_SPANS, Span, Trace};
use divan::{Bencher, black_box};

fn main() {
    divan::main();
}

/// One inventory attempt's own report: 4 spans.
fn inventory(at: u64) -> Span {
    Span::new("inventory", at, at + 301)
        .with_outcome("ok")
        .with_child(Span::new("queue", at, at + 2))
        .with_child(Span::new("work", at + 2, at + 300).with_outcome("ok"))
        .with_child(Span::new("db:read", at + 10, at + 290).with_outcome("ok"))
}

/// Orders with three attempts at inventory: 19 spans.
fn orders(at: u64) -> Span {
    let mut call = Span::new("call:inventory", at + 21, at + 990).with_outcome("504");
    for i in 0..3 {
        let sent = at + 21 + i * 320;
        call.push(
            Span::new("attempt", sent, sent + 310)
                .with_outcome("504")
                .with_child(inventory(sent + 1)),
        );
    }
    Span::new("orders", at, at + 1000)
        .with_outcome("504")
        .with_child(Span::new("queue", at, at + 1))
        .with_child(Span::new("work", at + 1, at + 20).with_outcome("ok"))
        .with_child(call)
}

/// The gateway with three attempts at orders: 64 spans.
fn three_hops() -> Trace {
    let mut call = Span::new("call:orders", 3, 3_050).with_outcome("504");
    for i in 0..3 {
        let sent = 3 + i * 1_015;
        call.push(
            Span::new("attempt", sent, sent + 1_010)
                .with_outcome("504")
                .with_child(orders(sent + 1)),
        );
    }
    let trace = Trace::from_span(
        Span::new("gateway", 0, 3_052)
            .with_outcome("504")
            .with_child(Span::new("queue", 0, 1))
            .with_child(Span::new("work", 1, 3).with_outcome("ok"))
            .with_child(call),
    );
    assert_eq!(trace.span_count(), MAX_SPANS);
    trace
}

#[divan::bench]
fn encode(bencher: Bencher<'_, '_>) {
    let trace = three_hops();
    bencher.bench(|| black_box(&trace).encode());
}

#[divan::bench]
fn to_header_value(bencher: Bencher<'_, '_>) {
    let trace = three_hops();
    bencher.bench(|| black_box(&trace).to_header_value());
}

#[divan::bench]
fn decode(bencher: Bencher<'_, '_>) {
    let header = three_hops().to_header_value();
    assert_eq!(Trace::from_header_value(&header), three_hops());
    bencher.bench(|| Trace::from_header_value(black_box(&header)));
}

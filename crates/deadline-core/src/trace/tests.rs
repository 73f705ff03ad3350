//! Table tests of the codec, the caps and the display.

use http::HeaderValue;

use super::*;

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
        budget_ms: None,
        children: vec![Span {
            name: String::new(),
            start_ms: 0,
            end_ms: 0,
            outcome: Some("x".repeat(40)),
            budget_ms: Some(u64::MAX),
            children: vec![],
        }],
    };
    assert_eq!(
        span.encode_alone(),
        "bad_name_with__@9-9=_,._@0-0=xxxxxxxxxxxxxxxx,^1=9999999999"
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
    assert_eq!(MAX_ENCODED_LEN, 5_897);
    let name = "n".repeat(MAX_NAME_LEN);
    let outcome = "o".repeat(MAX_OUTCOME_LEN);
    let big = |_: usize| {
        Span::new(&name, MAX_MS, MAX_MS)
            .with_outcome(&outcome)
            .with_budget_ms(u64::MAX)
    };
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

/// Names and outcomes are moved in when they are tokens already, and must come out as the
/// sanitiser makes them either way; the call span's name likewise.
#[test]
fn owned_tokens_match_what_the_sanitiser_makes() {
    for target in [
        "inventory",
        "127.0.0.1:8081",
        "crème brûlée",
        "",
        "a-target-name-longer-than-the-cap",
    ] {
        let expected = sanitize_name(&format!("call:{target}"), MAX_NAME_LEN);
        assert_eq!(name::call(target), expected, "{target:?}");
        assert_eq!(Span::new(format!("call:{target}"), 0, 0).name, expected);
        assert!(name::is_call(&name::call(target)));
    }
    for outcome in [
        "200",
        "deadline",
        "",
        "cancelled",
        "an outcome far too long",
        "é",
    ] {
        let expected = Some(sanitize_name(outcome, MAX_OUTCOME_LEN));
        let owned = Span::new(name::ATTEMPT, 0, 0).with_outcome(outcome.to_owned());
        let borrowed = Span::new(name::ATTEMPT, 0, 0).with_outcome(outcome);
        assert_eq!(owned.outcome, expected, "{outcome:?}");
        assert_eq!(borrowed.outcome, expected, "{outcome:?}");
    }
    let built = Span::new(String::from("attempt"), 9, 3).with_outcome(String::from("x y"));
    assert_eq!(built, Span::new("attempt", 9, 3).with_outcome("x y"));
}

#[test]
fn shift_moves_every_level_of_a_decoded_trace() {
    let mut trace = Trace::decode(b"a@0-5=ok,.b@1-4,..c@2-3,d@0-0");
    trace.shift(10);
    assert_eq!(trace.encode(), "a@10-15=ok,.b@11-14,..c@12-13,d@10-10");
    trace.shift(u64::MAX);
    assert!(trace.spans.iter().all(|s| s.end_ms == u64::MAX));
}

/// Deeper than a decoded trace can be: the shift goes on past `MAX_DEPTH` levels.
#[test]
fn shift_reaches_the_bottom_of_a_deep_tree() {
    let mut trace = Trace::from_span(chain(3 * MAX_DEPTH));
    trace.shift(7);
    let mut span = &trace.spans[0];
    let mut levels = 1;
    while let Some(child) = span.children.first() {
        assert_eq!((child.start_ms, child.end_ms), (7, 8));
        span = child;
        levels += 1;
    }
    assert_eq!(levels, 3 * MAX_DEPTH);
}

/// A callee writes its own trace, so it could claim spans outside the attempt that carried it
/// (before the caller sent it, or long after the answer came): on the caller's side every one
/// of its times is held inside the attempt, in the encoder's splicing path and in the decoded
/// one alike.
#[test]
fn a_callees_spans_stay_inside_the_attempt_that_carried_them() {
    use super::{AttemptSpan, CallSpan, EncodedTrace, HopTrace, HopWork, Outcome, Recorded};

    let forged = http::HeaderValue::from_static("inventory@0-99999=200,.work@0-5=ok,.fake@70-80");
    let call = CallSpan {
        name: "call:inventory".into(),
        start_ms: 10,
        end_ms: 50,
        outcome: Outcome::Status(http::StatusCode::OK),
        attempts: vec![AttemptSpan {
            start_ms: 10,
            end_ms: 50,
            outcome: Outcome::Status(http::StatusCode::OK),
            callee: Some(EncodedTrace::new(forged)),
        }]
        .into_iter()
        .collect(),
    };
    let hop = HopTrace {
        name: "orders",
        end_ms: 60,
        status: "200",
        budget_ms: None,
        work: HopWork::None,
    };
    let spliced = hop.to_header_value(&[Recorded::Call(call.clone())], 0);
    let expected = "orders@0-60=200,.call:inventory@10-50=200,..attempt@10-50=200,\
                    ...inventory@10-50=200,....work@10-15=ok,....fake@50-50";
    assert_eq!(spliced.to_str().unwrap(), expected);
    let (span, dropped) = call.to_span();
    let mut root = super::Span::new("orders", 0, 60).with_outcome("200");
    root.push(span);
    let decoded = Trace {
        spans: vec![root],
        dropped,
    };
    assert_eq!(decoded.encode(), expected);
}

/// A byte that is not UTF-8 makes its element malformed, so decoding keeps the elements before
/// it and nothing after, and a `+N` before it is not the value's last element.
#[test]
fn a_byte_that_is_not_utf8_ends_the_trace_at_its_element() {
    let decoded = |bytes: &[u8]| {
        let trace = Trace::decode(bytes);
        (trace.encode(), trace.dropped)
    };
    assert_eq!(decoded(b"a@0-1,b\xff@0-1,c@0-1"), ("a@0-1".to_owned(), 0));
    assert_eq!(decoded(b"a@0-1=ok\xff"), (String::new(), 0));
    assert_eq!(decoded(b"a@0-1,.b@0-1=\xc3\xa9"), ("a@0-1".to_owned(), 0));
    assert_eq!(decoded(b"a@0-1,+5,\xff"), ("a@0-1".to_owned(), 0));
    assert_eq!(decoded(b"a@0-1,+5"), ("a@0-1,+5".to_owned(), 5));
}

#[test]
fn budgets_round_trip_after_every_span() {
    let cases: Vec<(&str, Trace, &str)> = vec![
        (
            "a root's budget",
            Trace::from_span(
                s("inventory", 0, 12)
                    .with_outcome("200")
                    .with_budget_ms(950),
            ),
            "inventory@0-12=200,^0=950",
        ),
        (
            "a budget already spent",
            Trace::from_span(s("inventory", 0, 0).with_outcome("504").with_budget_ms(0)),
            "inventory@0-0=504,^0=0",
        ),
        (
            "nested hops, indices in pre-order, then the dropped count",
            tr(
                vec![
                    s("gateway", 0, 40)
                        .with_budget_ms(1000)
                        .with_child(s("queue", 0, 0))
                        .with_child(s("call:orders", 1, 39).with_child(
                            s("attempt", 1, 39).with_child(s("orders", 1, 38).with_budget_ms(990)),
                        )),
                ],
                2,
            ),
            "gateway@0-40,.queue@0-0,.call:orders@1-39,..attempt@1-39,...orders@1-38,\
             ^0=1000,^4=990,+2",
        ),
        (
            "a budget that saturates",
            Trace::from_span(s("a", 0, 1).with_budget_ms(u64::MAX)),
            "a@0-1,^0=9999999999",
        ),
    ];
    for (what, trace, encoded) in cases {
        assert_eq!(trace.encode(), encoded, "encode: {what}");
        assert_eq!(trace.to_header_value(), encoded, "header: {what}");
        let decoded = Trace::decode(encoded.as_bytes());
        if trace.spans.iter().all(|s| s.budget_ms != Some(u64::MAX)) {
            assert_eq!(decoded, trace, "decode: {what}");
        }
        assert_eq!(decoded.encode(), encoded, "again: {what}");
    }
}

#[test]
fn a_dropped_spans_budget_goes_with_it_and_indices_follow_the_kept_spans() {
    // 70 children, each with a budget: the root and the first 63 children are kept, and the
    // budgets are those of the kept spans, by their index among them.
    let root = (0..70u64).fold(s("gateway", 0, 900).with_budget_ms(5), |root, i| {
        root.with_child(s("hop", i, i + 1).with_budget_ms(100 + i))
    });
    let encoded = Trace::from_span(root).encode();
    assert!(
        encoded.contains(",.hop@62-63,^0=5,^1=100,^2=101,"),
        "{encoded}"
    );
    assert!(encoded.ends_with(",^63=162,+7"), "{encoded}");
    let decoded = Trace::decode(encoded.as_bytes());
    assert_eq!(decoded.dropped, 7);
    assert_eq!(decoded.spans[0].budget_ms, Some(5));
    assert_eq!(decoded.spans[0].children[62].budget_ms, Some(162));
}

#[test]
fn malformed_budgets_end_the_trace_there() {
    let decoded = |text: &str| {
        let trace = Trace::decode(text.as_bytes());
        (trace.encode(), trace.dropped)
    };
    let kept = |text: &str| (text.to_owned(), 0);
    // Budgets before any span, for a span not read, out of order, or twice.
    assert_eq!(decoded("^0=5,a@0-1"), kept(""));
    assert_eq!(decoded("a@0-1,^1=5"), kept("a@0-1"));
    assert_eq!(decoded("a@0-1,.b@0-1,^1=5,^0=6"), kept("a@0-1,.b@0-1,^1=5"));
    assert_eq!(
        decoded("a@0-1,.b@0-1,^0=5,^0=6,+2"),
        kept("a@0-1,.b@0-1,^0=5")
    );
    // A span after a budget, a budget with a bad shape.
    assert_eq!(decoded("a@0-1,^0=5,b@0-1"), kept("a@0-1,^0=5"));
    for bad in [
        "^0",
        "^=5",
        "^0=",
        "^000=5",
        "^0=12345678901",
        "^0=5x",
        "^-0=5",
        "^0=-5",
    ] {
        assert_eq!(decoded(&format!("a@0-1,{bad},+4")), kept("a@0-1"), "{bad}");
    }
    // The dropped count after budgets is read.
    assert_eq!(decoded("a@0-1,^00=5,+4"), ("a@0-1,^0=5,+4".to_owned(), 4));
    // A budget for a span counted beyond the cap (never written so) is malformed, so the
    // `+N` after it is not read either.
    let mut many = "a@0-1,".repeat(MAX_SPANS + 1);
    many.push_str("^64=5,+1");
    let trace = Trace::decode(many.as_bytes());
    assert_eq!((trace.span_count(), trace.dropped), (MAX_SPANS, 1));
    assert!(trace.spans.iter().all(|s| s.budget_ms.is_none()));
}

#[test]
fn shifting_and_nesting_keep_budgets() {
    let mut trace = Trace::from_span(
        s("orders", 0, 30)
            .with_budget_ms(950)
            .with_child(s("work", 0, 29)),
    );
    trace.shift(100);
    assert_eq!(trace.spans[0].budget_ms, Some(950));
    assert_eq!((trace.spans[0].start_ms, trace.spans[0].end_ms), (100, 130));
    trace.nest_within(5, 20);
    assert_eq!(trace.spans[0].budget_ms, Some(950));
    assert_eq!((trace.spans[0].start_ms, trace.spans[0].end_ms), (20, 20));
}

/// A caller writes its callee's budgets into its own trace, re-indexed among its own spans, in
/// the text path (splicing the callee's header) and the decoded one alike.
#[test]
fn a_callees_budgets_are_kept_when_its_trace_is_nested() {
    use super::{AttemptSpan, CallSpan, EncodedTrace, HopTrace, HopWork, Outcome, Recorded};

    let callee = http::HeaderValue::from_static("inventory@0-30=200,.work@0-29=ok,^0=940,+1");
    let callee = EncodedTrace::new(callee);
    assert_eq!((callee.span_count(), callee.dropped()), (2, 1));
    let call = CallSpan {
        name: "call:inventory".into(),
        start_ms: 10,
        end_ms: 50,
        outcome: Outcome::Status(http::StatusCode::OK),
        attempts: vec![AttemptSpan {
            start_ms: 10,
            end_ms: 45,
            outcome: Outcome::Status(http::StatusCode::OK),
            callee: Some(callee),
        }]
        .into_iter()
        .collect(),
    };
    let hop = HopTrace {
        name: "orders",
        end_ms: 60,
        status: "200",
        budget_ms: Some(1000),
        work: HopWork::Worked {
            start_ms: 0,
            end_ms: 59,
            outcome: "ok",
        },
    };
    let recorded = [Recorded::Call(call)];
    let spliced = hop.to_header_value(&recorded, 0);
    let expected = "orders@0-60=200,.queue@0-0,.work@0-59=ok,.call:inventory@10-50=200,\
                    ..attempt@10-45=200,...inventory@10-40=200,....work@10-39=ok,\
                    ^0=1000,^5=940,+1";
    assert_eq!(spliced.to_str().unwrap(), expected);
    assert_eq!(hop.to_trace(recorded.to_vec(), 0).encode(), expected);
    let orders = Trace::decode(expected.as_bytes());
    let inventory = &orders.spans[0].children[2].children[0].children[0];
    assert_eq!(
        (inventory.name.as_str(), inventory.budget_ms),
        ("inventory", Some(940))
    );
}

#[test]
fn display_shows_budgets() {
    let trace = Trace::decode(b"orders@0-30=200,.work@0-29=ok,^0=950");
    assert_eq!(
        trace.to_string(),
        "orders  0–30 ms (30 ms)  200  budget 950 ms\n└─ work  0–29 ms (29 ms)  ok\n"
    );
    let no_outcome = Trace::from_span(s("a", 0, 1).with_budget_ms(7));
    assert_eq!(no_outcome.to_string(), "a  0–1 ms (1 ms)  budget 7 ms\n");
}

/// A callee's budgets are found where its scan found them, whatever surrounds the value.
#[test]
fn a_callees_budgets_are_read_around_spaces_and_cuts() {
    use super::{AttemptSpan, CallSpan, EncodedTrace, Outcome};

    for (value, budgets) in [
        (
            " \t inventory@0-30=200,.work@0-29=ok,^0=940,^1=7 \t",
            vec![940, 7],
        ),
        ("inventory@0-30=200,^0=940,+2", vec![940]),
        ("inventory@0-30=200,^0=940,^0=941", vec![940]),
        ("inventory@0-30=200,.work@0-29,^1=5,\u{e9}", vec![5]),
        ("inventory@0-30=200", vec![]),
    ] {
        let callee = EncodedTrace::new(http::HeaderValue::from_str(value).unwrap());
        let call = CallSpan {
            name: "call:inventory".into(),
            start_ms: 0,
            end_ms: 40,
            outcome: Outcome::Status(http::StatusCode::OK),
            attempts: vec![AttemptSpan {
                start_ms: 1,
                end_ms: 40,
                outcome: Outcome::Status(http::StatusCode::OK),
                callee: Some(callee),
            }]
            .into_iter()
            .collect(),
        };
        let (span, _) = call.to_span();
        let spliced = Trace::decode(
            super::HopTrace {
                name: "orders",
                end_ms: 50,
                status: "200",
                budget_ms: None,
                work: super::HopWork::None,
            }
            .to_header_value(&[super::Recorded::Call(call)], 0)
            .as_bytes(),
        );
        let mut found = Vec::new();
        let mut stack = vec![&spliced.spans[0]];
        while let Some(span) = stack.pop() {
            found.extend(span.budget_ms);
            stack.extend(span.children.iter().rev());
        }
        assert_eq!(found, budgets, "{value}");
        let decoded: Vec<u64> = span.children[0]
            .children
            .iter()
            .flat_map(|root| std::iter::once(root).chain(&root.children))
            .filter_map(|s| s.budget_ms)
            .collect();
        assert_eq!(decoded, budgets, "{value}");
    }
}

use std::time::Duration;

use http::{HeaderName, HeaderValue};
use proptest::prelude::*;

use super::*;
use crate::header::MalformedReason;
use BudgetValue::{Expired, Remaining};

const MAX: Budget = Budget::DEFAULT_MAX;
const MS: i128 = 1_000_000;
/// 2026-01-15T10:30:45.123Z.
const NOW_MS: i128 = 1_768_473_045_123;

fn ms(n: u64) -> BudgetValue {
    Remaining(Budget::from_millis(n).unwrap())
}

fn at_ms(ms: i128) -> WallInstant {
    WallInstant::from_unix_nanos(ms * MS)
}

fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
    let mut map = HeaderMap::new();
    for (name, value) in pairs {
        map.append((*name).clone(), HeaderValue::from_str(value).unwrap());
    }
    map
}

fn all() -> SourceSet {
    Source::ALL.into_iter().collect()
}

fn read(set: SourceSet, pairs: &[(&HeaderName, &str)]) -> Result<Inbound, MalformedBudget> {
    read_inbound(
        set,
        &headers(pairs),
        MAX,
        &SkewGuard::DEFAULT,
        Some(at_ms(NOW_MS)),
    )
}

fn value(set: SourceSet, pairs: &[(&HeaderName, &str)]) -> Option<BudgetValue> {
    read(set, pairs).unwrap().value
}

#[test]
fn sets_parse_from_header_names_and_print_back() {
    let set: SourceSet = "Deadline-Budget-Ms, connect-timeout-ms,x-request-deadline"
        .parse()
        .unwrap();
    assert!(set.contains(Source::DeadlineBudgetMs));
    assert!(set.contains(Source::ConnectTimeoutMs));
    assert!(set.contains(Source::RequestDeadline));
    assert!(!set.contains(Source::GrpcTimeout));
    assert_eq!(
        set.to_string(),
        "deadline-budget-ms,connect-timeout-ms,x-request-deadline"
    );
    assert_eq!(set.to_string().parse::<SourceSet>(), Ok(set));
    assert_eq!(all().to_string().parse::<SourceSet>(), Ok(all()));
    for bad in ["", "deadline-budget-ms,", "x-timeout", "a,,b"] {
        let err = bad.parse::<SourceSet>().expect_err(bad);
        assert!(
            err.to_string().starts_with("unknown deadline header"),
            "{err}"
        );
    }
    assert_eq!(SourceSet::default(), SourceSet::DEFAULT);
    assert!(SourceSet::NONE.is_empty());
    assert_eq!(
        SourceSet::DEFAULT.without(Source::DeadlineBudgetMs),
        SourceSet::NONE
    );
    assert_eq!(format!("{:?}", SourceSet::DEFAULT), "{DeadlineBudgetMs}");
}

/// The defaults: `Deadline-Budget-Ms` on, every other dialect off (not read, not even checked).
#[test]
fn by_default_only_deadline_budget_ms_is_read() {
    let set = SourceSet::DEFAULT;
    assert_eq!(value(set, &[(&BUDGET_HEADER, "900")]), Some(ms(900)));
    for (name, v) in [
        (&GRPC_TIMEOUT_HEADER, "1m"),
        (&CONNECT_TIMEOUT_HEADER, "1"),
        (&ENVOY_EXPECTED_TIMEOUT_HEADER, "1"),
        (&REQUEST_DEADLINE_HEADER, "1970-01-01T00:00:00Z"),
        (&GRPC_TIMEOUT_HEADER, "soon"),
        (&CONNECT_TIMEOUT_HEADER, "soon"),
        (&ENVOY_EXPECTED_TIMEOUT_HEADER, "soon"),
        (&REQUEST_DEADLINE_HEADER, "soon"),
    ] {
        assert_eq!(value(set, &[(name, v)]), None, "{name}: {v}");
        assert_eq!(
            value(set, &[(name, v), (&BUDGET_HEADER, "900")]),
            Some(ms(900))
        );
    }
}

/// Each row of the table: its syntax, its expired spelling, its malformed values naming it.
#[test]
fn every_source_reads_its_own_syntax() {
    let set = all();
    let rows: [(&HeaderName, &str, BudgetValue); 10] = [
        (&BUDGET_HEADER, "700", ms(700)),
        (&BUDGET_HEADER, "-20", Expired),
        (&GRPC_TIMEOUT_HEADER, "700m", ms(700)),
        (&GRPC_TIMEOUT_HEADER, "5u", Expired),
        (&CONNECT_TIMEOUT_HEADER, "700", ms(700)),
        (&CONNECT_TIMEOUT_HEADER, "0", Expired),
        (&ENVOY_EXPECTED_TIMEOUT_HEADER, "700", ms(700)),
        (
            &REQUEST_DEADLINE_HEADER,
            "2026-01-15T10:30:45.873Z",
            ms(700),
        ),
        (&REQUEST_DEADLINE_HEADER, "1768473045873000", ms(700)),
        (
            &REQUEST_DEADLINE_HEADER,
            "2026-01-15T10:30:45.100Z",
            Expired,
        ),
    ];
    for (name, v, expected) in rows {
        assert_eq!(value(set, &[(name, v)]), Some(expected), "{name}: {v}");
    }
    assert_eq!(
        value(set, &[(&ENVOY_EXPECTED_TIMEOUT_HEADER, "0")]),
        None,
        "Envoy's 0 is no timeout"
    );
    for (name, bad, reason) in [
        (&BUDGET_HEADER, "1.5", MalformedReason::NotAnInteger),
        (&GRPC_TIMEOUT_HEADER, "5s", MalformedReason::BadGrpcTimeout),
        (
            &CONNECT_TIMEOUT_HEADER,
            "12345678901",
            MalformedReason::TooManyDigits,
        ),
        (
            &ENVOY_EXPECTED_TIMEOUT_HEADER,
            "+5",
            MalformedReason::PlusSign,
        ),
        (
            &REQUEST_DEADLINE_HEADER,
            "2026-01-15 10:30:45Z",
            MalformedReason::BadAbsoluteDeadline,
        ),
    ] {
        // Malformed even beside a valid budget in another header: the request is refused.
        let err = read(set, &[(&BUDGET_HEADER, "900"), (name, bad)]).unwrap_err();
        assert_eq!(err.header(), name);
        assert_eq!(err.reason(), reason, "{name}: {bad}");
    }
}

#[test]
fn the_tightest_valid_source_wins() {
    let set = all();
    let inbound = read(
        set,
        &[
            (&BUDGET_HEADER, "900"),
            (&GRPC_TIMEOUT_HEADER, "1S"),
            (&CONNECT_TIMEOUT_HEADER, "800"),
            (&ENVOY_EXPECTED_TIMEOUT_HEADER, "600"),
            (&REQUEST_DEADLINE_HEADER, "2026-01-15T10:30:46.123Z"),
        ],
    )
    .unwrap();
    assert_eq!(inbound.value, Some(ms(600)));
    assert_eq!(inbound.absolute, Some(AbsoluteUse::Looser));
    let inbound = read(
        set,
        &[
            (&BUDGET_HEADER, "900"),
            (&REQUEST_DEADLINE_HEADER, "2026-01-15T10:30:45.623Z"),
        ],
    )
    .unwrap();
    assert_eq!(inbound.value, Some(ms(450)), "500 ms less the 50 ms skew");
    assert_eq!(inbound.absolute, Some(AbsoluteUse::Used));
    // Several absolute values: the earliest.
    assert_eq!(
        value(
            set,
            &[(
                &REQUEST_DEADLINE_HEADER,
                "2026-01-15T10:30:47.123Z, 1768473045623000"
            )]
        ),
        Some(ms(450))
    );
}

#[test]
fn a_broken_clock_is_reported_and_ignored() {
    let inbound = read(
        all(),
        &[
            (&BUDGET_HEADER, "5000"),
            // Two minutes before this hop's clock: a caller whose clock is far behind.
            (&REQUEST_DEADLINE_HEADER, "2026-01-15T10:28:50.123Z"),
        ],
    )
    .unwrap();
    assert_eq!(inbound.value, Some(ms(5_000)));
    assert_eq!(
        inbound.absolute,
        Some(AbsoluteUse::Ignored {
            disagreement_ms: -120_000
        })
    );
}

#[test]
fn without_a_wall_clock_reading_the_absolute_source_is_not_read() {
    let map = headers(&[(&REQUEST_DEADLINE_HEADER, "soon")]);
    let inbound = read_inbound(all(), &map, MAX, &SkewGuard::DEFAULT, None).unwrap();
    assert_eq!(
        inbound,
        Inbound {
            value: None,
            absolute: None
        }
    );
}

/// The header as a caller writes it: RFC 3339 with ms (truncated) or epoch µs.
fn spell(at: WallInstant, micros: bool) -> String {
    if micros {
        at.to_epoch_micros().unwrap().to_string()
    } else {
        at.to_rfc3339_millis().unwrap()
    }
}

// The same two properties over 200,000 cases each are in `absolute::tests`, on the guard
// itself; here they run through the header text and the whole read, whose header maps and
// formatting cost about 30 µs a case in a debug build, so over fewer cases.
proptest! {
    #![proptest_config(ProptestConfig { cases: 25_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Through the headers, as the layer reads them: with this hop's clock off by no more than
    /// the assumed skew, the budget never runs past the caller's true deadline, whichever
    /// spelling the caller used and whatever relative budget came with it.
    #[test]
    fn within_the_assumed_skew_no_hop_works_past_the_true_deadline(
        true_now_ms in 0i128..=4_000_000_000_000,
        left_us in -10_000_000i128..=7_200_000_000,
        assumed_ms in 0u64..=1_000,
        error_share in -1_000i128..=1_000,
        micros in any::<bool>(),
        relative_ms in proptest::option::of(0u64..=8_000_000),
    ) {
        let guard = SkewGuard::new(Duration::from_millis(assumed_ms), Duration::from_secs(60));
        let true_now = at_ms(true_now_ms);
        let true_deadline = WallInstant::from_unix_nanos(true_now.unix_nanos() + left_us * 1_000);
        let error = i128::from(assumed_ms) * MS * error_share / 1_000;
        let read_now = WallInstant::from_unix_nanos(true_now.unix_nanos() + error);
        let mut map = headers(&[(&REQUEST_DEADLINE_HEADER, &spell(true_deadline, micros))]);
        if let Some(relative_ms) = relative_ms {
            map.insert(BUDGET_HEADER, HeaderValue::from(relative_ms));
        }
        let inbound = read_inbound(all(), &map, MAX, &guard, Some(read_now)).unwrap();
        prop_assert!(inbound.absolute.is_some());
        if let Some(Remaining(budget)) = inbound.value {
            // An honest relative budget is sent for the same deadline; an arbitrary one may
            // be looser, and then the absolute deadline must have set the budget.
            let honest = relative_ms.is_none_or(|r| i128::from(r) * 1_000 <= left_us);
            if honest || inbound.absolute == Some(AbsoluteUse::Used) {
                prop_assert!(true_now.after(budget.as_duration()) <= true_deadline,
                    "worked past the true deadline");
            }
        }
    }

    /// A clock wrong by more than the maximum skew never expires or extends work when an honest
    /// relative budget came too: the request runs with exactly that budget, and the absolute
    /// deadline is reported ignored.
    #[test]
    fn a_clock_wrong_beyond_the_maximum_skew_changes_nothing(
        true_now_ms in 0i128..=4_000_000_000_000,
        left_ms in 1i128..=3_600_000,
        max_skew_ms in 50u64..=600_000,
        beyond_ms in 2i128..=100_000_000,
        ahead in any::<bool>(),
        micros in any::<bool>(),
    ) {
        let guard = SkewGuard::new(Duration::from_millis(50), Duration::from_millis(max_skew_ms));
        let true_deadline = at_ms(true_now_ms + left_ms);
        let error_ms = (i128::from(max_skew_ms) + beyond_ms) * if ahead { 1 } else { -1 };
        let read_now = at_ms(true_now_ms + error_ms);
        let relative = u64::try_from(left_ms).unwrap();
        let map = headers(&[
            (&REQUEST_DEADLINE_HEADER, &spell(true_deadline, micros)),
            (&CONNECT_TIMEOUT_HEADER, &relative.to_string()),
        ]);
        let inbound = read_inbound(all(), &map, MAX, &guard, Some(read_now)).unwrap();
        let ignored = matches!(inbound.absolute, Some(AbsoluteUse::Ignored { .. }));
        if left_ms - error_ms <= i128::from(MAX.as_millis()) {
            prop_assert_eq!(inbound.value, Some(ms(relative)));
            prop_assert!(ignored);
        } else {
            // The absolute reading is beyond the maximum, clamped to it like the relative one
            // could be: never expired, never more than the relative budget.
            prop_assert_eq!(inbound.value.map(|v| v.min(ms(relative))), Some(inbound.value.unwrap()));
            prop_assert_ne!(inbound.value, Some(Expired));
        }
    }
}

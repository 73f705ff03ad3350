use super::*;
use BudgetValue::{Expired, Remaining};
use proptest::prelude::*;

const MAX: Budget = Budget::DEFAULT_MAX;
const MS: i128 = 1_000_000;

fn at_ms(ms: i128) -> WallInstant {
    WallInstant::from_unix_nanos(ms * MS)
}

fn parse(text: &str) -> Result<WallInstant, MalformedBudget> {
    WallInstant::parse(text.as_bytes())
}

fn remaining(ms: u64) -> BudgetValue {
    Remaining(Budget::from_millis(ms).unwrap())
}

/// The instant of the header examples: 2026-01-15T10:30:45.123Z.
const EXAMPLE_MS: i128 = 1_768_473_045_123;

#[test]
fn both_spellings_name_the_same_instant() {
    let example = at_ms(EXAMPLE_MS);
    for text in [
        "2026-01-15T10:30:45.123Z",
        "2026-01-15t10:30:45.123z",
        "2026-01-15T11:30:45.123+01:00",
        "2026-01-15T05:00:45.123-05:30",
        " 2026-01-15T10:30:45.123Z\t",
        "1768473045123000",
    ] {
        assert_eq!(parse(text), Ok(example), "{text}");
    }
    assert_eq!(parse("1970-01-01T00:00:00Z"), Ok(at_ms(0)));
    assert_eq!(parse("0"), Ok(at_ms(0)));
    assert_eq!(parse("1969-12-31T23:59:59Z"), Ok(at_ms(-1_000)));
    assert_eq!(
        parse("0001-01-01T00:00:00Z"),
        Ok(at_ms(-62_135_596_800_000))
    );
    assert_eq!(
        parse("9999-12-31T23:59:59.999Z"),
        Ok(at_ms(253_402_300_799_999))
    );
}

#[test]
fn fractions_are_read_to_the_nanosecond_and_truncated_beyond() {
    let base = EXAMPLE_MS * MS - 123 * MS;
    let nanos = |text: &str| parse(text).unwrap().unix_nanos() - base;
    assert_eq!(nanos("2026-01-15T10:30:45Z"), 0);
    assert_eq!(nanos("2026-01-15T10:30:45.5Z"), 500_000_000);
    assert_eq!(nanos("2026-01-15T10:30:45.123456789Z"), 123_456_789);
    assert_eq!(nanos("2026-01-15T10:30:45.123456789999Z"), 123_456_789);
    // A leap second reads as the first second of the next minute.
    assert_eq!(nanos("2026-01-15T10:30:60Z"), 15 * 1_000_000_000);
}

#[test]
fn calendar_rules_are_checked() {
    assert!(parse("2024-02-29T00:00:00Z").is_ok());
    assert!(parse("2000-02-29T00:00:00Z").is_ok());
    for bad in [
        "2026-02-29T00:00:00Z",
        "2100-02-29T00:00:00Z",
        "2026-04-31T00:00:00Z",
        "2026-13-01T00:00:00Z",
        "2026-00-01T00:00:00Z",
        "2026-01-00T00:00:00Z",
        "2026-01-15T24:00:00Z",
        "2026-01-15T10:60:00Z",
        "2026-01-15T10:30:61Z",
        "2026-01-15T10:30:45+24:00",
        "2026-01-15T10:30:45+01:60",
    ] {
        assert!(parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn everything_else_is_malformed_naming_the_header() {
    for bad in [
        "",
        "   ",
        "2026-01-15",
        "2026-01-15T10:30:45",
        "2026-01-15T10:30:45.Z",
        "2026-01-15T10:30:45+0100",
        "2026-01-15T10:30:45 Z",
        "2026-01-15 10:30:45Z",
        "2026-1-15T10:30:45Z",
        "+1768473045123000",
        "-5",
        "1.5",
        "17684730451230001234",
        "٣",
        "2026-01-15T10:30:45.1234567890123456789Z",
    ] {
        let err = parse(bad).expect_err(bad);
        assert_eq!(err.header(), &REQUEST_DEADLINE_HEADER);
        assert_eq!(err.reason(), MalformedReason::BadAbsoluteDeadline);
    }
    let err = WallInstant::parse(b"\xff2026").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid x-request-deadline value \"\\xff2026\": the value is neither an RFC 3339 \
         date-time with an offset nor whole microseconds since the Unix epoch"
    );
}

#[test]
fn formatting_writes_utc_with_milliseconds() {
    let example = at_ms(EXAMPLE_MS).after(Duration::from_nanos(999_999));
    assert_eq!(
        example.to_rfc3339_millis().as_deref(),
        Some("2026-01-15T10:30:45.123Z")
    );
    assert_eq!(example.to_epoch_micros(), Some(1_768_473_045_123_999));
    assert_eq!(example.to_string(), "2026-01-15T10:30:45.123Z");
    assert_eq!(
        at_ms(-1).to_rfc3339_millis().as_deref(),
        Some("1969-12-31T23:59:59.999Z")
    );
    assert_eq!(at_ms(-1).to_epoch_micros(), None);
    let far = WallInstant::from_unix_nanos(i128::MAX);
    assert_eq!(far.to_rfc3339_millis(), None);
    assert!(far.to_string().ends_with("ns since the Unix epoch"));
    assert_eq!(
        WallInstant::from_system_time(UNIX_EPOCH + Duration::from_millis(5)),
        at_ms(5)
    );
    assert_eq!(
        WallInstant::from_system_time(UNIX_EPOCH - Duration::from_millis(5)),
        at_ms(-5)
    );
}

#[test]
fn the_guard_subtracts_the_assumed_skew() {
    let guard = SkewGuard::DEFAULT;
    let now = at_ms(EXAMPLE_MS);
    assert_eq!(
        guard.remaining(at_ms(EXAMPLE_MS + 1_000), now, MAX),
        remaining(950)
    );
    assert_eq!(
        guard.remaining(at_ms(EXAMPLE_MS + 51), now, MAX),
        remaining(1)
    );
    assert_eq!(guard.remaining(at_ms(EXAMPLE_MS + 50), now, MAX), Expired);
    assert_eq!(
        guard.remaining(at_ms(EXAMPLE_MS - 5_000), now, MAX),
        Expired
    );
    assert_eq!(
        guard.remaining(at_ms(EXAMPLE_MS + 86_400_000), now, MAX),
        Remaining(MAX)
    );
    let strict = SkewGuard::new(Duration::ZERO, Duration::ZERO);
    assert_eq!(
        strict.remaining(at_ms(EXAMPLE_MS + 7), now, MAX),
        remaining(7)
    );
    assert_eq!(SkewGuard::new(ms(100), ms(10)).max_skew(), ms(100));
    assert_eq!(SkewGuard::default(), SkewGuard::DEFAULT);
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn reconcile_takes_the_tighter_unless_the_clocks_disagree() {
    let guard = SkewGuard::DEFAULT;
    let now = at_ms(EXAMPLE_MS);
    let deadline = at_ms(EXAMPLE_MS + 1_000);
    // Alone, the absolute deadline sets the budget.
    assert_eq!(
        guard.reconcile(deadline, now, None, MAX),
        Reconciled {
            value: remaining(950),
            absolute: AbsoluteUse::Used
        }
    );
    // Agreeing, the tighter wins.
    assert_eq!(
        guard.reconcile(deadline, now, Some(remaining(2_000)), MAX),
        Reconciled {
            value: remaining(950),
            absolute: AbsoluteUse::Used
        }
    );
    assert_eq!(
        guard.reconcile(deadline, now, Some(remaining(400)), MAX),
        Reconciled {
            value: remaining(400),
            absolute: AbsoluteUse::Looser
        }
    );
    // A clock two minutes ahead would expire a request with 5 s left: ignored instead.
    let ahead = at_ms(EXAMPLE_MS + 120_000);
    let five_s = at_ms(EXAMPLE_MS + 5_000);
    assert_eq!(
        guard.reconcile(five_s, ahead, Some(remaining(5_000)), MAX),
        Reconciled {
            value: remaining(5_000),
            absolute: AbsoluteUse::Ignored {
                disagreement_ms: -120_000
            }
        }
    );
    // A clock two minutes behind would extend it: ignored too.
    let behind = at_ms(EXAMPLE_MS - 120_000);
    assert_eq!(
        guard
            .reconcile(five_s, behind, Some(remaining(5_000)), MAX)
            .value,
        remaining(5_000)
    );
    // Budgets beyond the maximum are clamped on both sides before they are compared: two
    // hours either way agree (the relative one read as the one-hour maximum).
    let two_hours = at_ms(EXAMPLE_MS + 7_200_000);
    assert_eq!(
        guard.reconcile(two_hours, now, Some(Remaining(MAX)), MAX),
        Reconciled {
            value: Remaining(MAX),
            absolute: AbsoluteUse::Used
        }
    );
    // An expired relative budget is never revived by an absolute one.
    assert_eq!(
        guard.reconcile(five_s, now, Some(Expired), MAX).value,
        Expired
    );
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// With the hop's clock off by no more than the assumed skew, the budget it derives never
    /// runs past the caller's true deadline.
    #[test]
    fn within_the_assumed_skew_a_hop_never_works_past_the_true_deadline(
        true_now_ms in 0i128..=4_000_000_000_000,
        left_us in -10_000_000i128..=7_200_000_000,
        assumed_us in 0u64..=1_000_000,
        error_share in -1_000i128..=1_000,
    ) {
        let guard = SkewGuard::new(Duration::from_micros(assumed_us), Duration::from_secs(60));
        let true_now = at_ms(true_now_ms);
        let true_deadline = WallInstant::from_unix_nanos(true_now.unix_nanos() + left_us * 1_000);
        let error = i128::from(assumed_us) * 1_000 * error_share / 1_000;
        let read_now = WallInstant::from_unix_nanos(true_now.unix_nanos() + error);
        match guard.remaining(true_deadline, read_now, MAX) {
            Expired => {}
            Remaining(budget) => {
                let end = true_now.after(budget.as_duration());
                prop_assert!(end <= true_deadline, "worked past the true deadline");
            }
        }
    }

    /// A clock wrong by more than the maximum skew never expires or extends work when a relative
    /// budget came too, and no reading ever extends the relative budget.
    #[test]
    fn a_broken_clock_never_expires_or_extends_work(
        true_now_ms in 0i128..=4_000_000_000_000,
        left_ms in -10_000i128..=7_200_000,
        max_skew_ms in 50u64..=600_000,
        error_ms in -100_000_000i128..=100_000_000,
    ) {
        let guard = SkewGuard::new(Duration::from_millis(50), Duration::from_millis(max_skew_ms));
        let true_deadline = at_ms(true_now_ms + left_ms);
        // What an honest caller sends as a relative budget for the same deadline.
        let relative = match Budget::from_millis(u64::try_from(left_ms.max(0)).unwrap()) {
            None => Expired,
            Some(budget) => Remaining(budget.min(MAX)),
        };
        let read_now = at_ms(true_now_ms + error_ms);
        let reconciled = guard.reconcile(true_deadline, read_now, Some(relative), MAX);
        prop_assert_eq!(reconciled.value.min(relative), reconciled.value, "never looser than the relative budget");
        let ignored = matches!(reconciled.absolute, AbsoluteUse::Ignored { .. });
        if error_ms.unsigned_abs() > u128::from(max_skew_ms) + 1 {
            let max_ms = i128::from(MAX.as_millis());
            if left_ms <= max_ms && left_ms - error_ms <= max_ms {
                // Inside the maximum budget both readings are exact: the disagreement is the
                // clock's error, and the absolute deadline is ignored.
                prop_assert_eq!(reconciled.value, relative);
                prop_assert!(ignored);
            } else if relative != Expired {
                // Beyond the maximum both are clamped to it and may agree again; the request
                // still has (nearly) the maximum, never nothing.
                prop_assert_ne!(reconciled.value, Expired);
            }
        }
        // A clock within the maximum skew is never counted as broken, where the relative budget
        // tells the time left. A spent one says "expired", not how long ago: a deadline already
        // past by more than the maximum skew less the clock's error then looks like a broken
        // clock, and either way the request is expired.
        if error_ms.unsigned_abs() < u128::from(max_skew_ms) {
            if left_ms > 0 {
                prop_assert!(!ignored, "a skew within the maximum is not a broken clock");
            } else {
                prop_assert_eq!(reconciled.value, Expired);
            }
        }
    }

    /// Formatting then parsing gives the instant back, to the millisecond, in both spellings.
    #[test]
    fn formats_parse_back(ms in -62_135_596_800_000i128..=253_402_300_799_999) {
        let instant = at_ms(ms);
        let text = instant.to_rfc3339_millis().unwrap();
        prop_assert_eq!(parse(&text), Ok(instant), "{}", text);
        if let Some(micros) = instant.to_epoch_micros() {
            prop_assert_eq!(parse(&micros.to_string()), Ok(instant));
        }
    }
}

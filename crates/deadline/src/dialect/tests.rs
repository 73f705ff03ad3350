use super::*;
use crate::absolute::SkewGuard;
use crate::header::{DeadlineBudgetMs, GrpcTimeout, read_tightest};
use BudgetValue::{Expired, Remaining};
use proptest::prelude::*;

const MAX: Budget = Budget::DEFAULT_MAX;

fn ms(n: u64) -> BudgetValue {
    Remaining(Budget::from_millis(n).unwrap())
}

fn reason(err: MalformedBudget) -> MalformedReason {
    err.reason()
}

#[test]
fn connect_timeout_ms_rows() {
    let connect = ConnectTimeoutMs::default();
    assert_eq!(connect.parse(b"1500"), Ok(ms(1_500)));
    assert_eq!(connect.parse(b" 1500\t"), Ok(ms(1_500)));
    assert_eq!(connect.parse(b"0"), Ok(Expired));
    assert_eq!(connect.parse(b"9999999999"), Ok(Remaining(MAX)));
    for (bad, why) in [
        (&b""[..], MalformedReason::Empty),
        (b"12345678901", MalformedReason::TooManyDigits),
        (b"+5", MalformedReason::PlusSign),
        (b"-5", MalformedReason::NotAnInteger),
        (b"1.5", MalformedReason::NotAnInteger),
        (b"12ms", MalformedReason::NotAnInteger),
        ("٣".as_bytes(), MalformedReason::NotAscii),
    ] {
        let err = connect.parse(bad).expect_err("malformed");
        assert_eq!(err.header(), &CONNECT_TIMEOUT_HEADER);
        assert_eq!(reason(err), why, "{bad:?}");
    }
}

#[test]
fn envoy_expected_timeout_rows() {
    let envoy = EnvoyExpectedTimeoutMs::default();
    assert_eq!(envoy.parse(b"250"), Ok(Some(ms(250))));
    assert_eq!(envoy.parse(b"0"), Ok(None), "0 is Envoy's 'no timeout'");
    assert_eq!(
        envoy.parse(b"99999999999999999999999"),
        Ok(Some(Remaining(MAX)))
    );
    assert_eq!(
        reason(envoy.parse(b"-1").unwrap_err()),
        MalformedReason::NotAnInteger
    );
    let mut headers = HeaderMap::new();
    headers.append(
        &ENVOY_EXPECTED_TIMEOUT_HEADER,
        HeaderValue::from_static("0"),
    );
    assert_eq!(envoy.read(&headers), Ok(None));
    headers.append(
        &ENVOY_EXPECTED_TIMEOUT_HEADER,
        HeaderValue::from_static("900"),
    );
    headers.append(
        &ENVOY_EXPECTED_TIMEOUT_HEADER,
        HeaderValue::from_static("700"),
    );
    assert_eq!(envoy.read(&headers), Ok(Some(ms(700))));
    headers.append(
        &ENVOY_EXPECTED_TIMEOUT_HEADER,
        HeaderValue::from_static("x"),
    );
    assert!(envoy.read(&headers).is_err(), "one bad line spoils the lot");
}

#[test]
fn the_tightest_dialect_wins_and_any_malformed_one_is_an_error() {
    let mut headers = HeaderMap::new();
    headers.insert(BUDGET_HEADER, HeaderValue::from_static("2000"));
    headers.insert(CONNECT_TIMEOUT_HEADER, HeaderValue::from_static("800"));
    let ours = DeadlineBudgetMs::default();
    let connect = ConnectTimeoutMs::default();
    let envoy = EnvoyExpectedTimeoutMs::default();
    let sources: [&dyn BudgetSource; 3] = [&ours, &connect, &envoy];
    assert_eq!(read_tightest(&sources, &headers), Ok(Some(ms(800))));
    headers.insert(
        ENVOY_EXPECTED_TIMEOUT_HEADER,
        HeaderValue::from_static("1.5"),
    );
    let err = read_tightest(&sources, &headers).unwrap_err();
    assert_eq!(err.header(), &ENVOY_EXPECTED_TIMEOUT_HEADER);
    // A dialect that is not enabled is not read at all.
    assert_eq!(read_tightest(&[&ours], &headers), Ok(Some(ms(2_000))));
}

#[test]
fn grpc_timeout_takes_the_finest_unit_that_fits() {
    for (budget, text) in [
        (1, "1000000n"),
        (99, "99000000n"),
        (100, "100000u"),
        (99_999, "99999000u"),
        (100_000, "100000m"),
        (3_600_000, "3600000m"),
        (99_999_999, "99999999m"),
        (100_000_000, "100000S"),
        (100_000_999, "100000S"),
        (99_999_999_999, "99999999S"),
        (100_000_000_000, "1666666M"),
        (u64::MAX, "99999999H"),
    ] {
        let value = grpc_timeout(Budget::from_millis(budget).unwrap());
        assert_eq!(value, text, "{budget} ms");
    }
}

#[test]
fn dialects_are_named_by_their_header() {
    for name in [
        "deadline-budget-ms",
        "grpc-timeout",
        "connect-timeout-ms",
        "x-envoy-upstream-rq-timeout-ms",
        "x-request-deadline",
        "x-request-deadline:us",
    ] {
        let dialect: Dialect = name.parse().unwrap();
        assert_eq!(dialect.to_string(), name);
        assert_eq!(dialect.header_name().as_str(), name.trim_end_matches(":us"));
    }
    assert_eq!(
        " Grpc-Timeout ".parse::<Dialect>(),
        Ok(Dialect::GrpcTimeout)
    );
    let err = "x-timeout".parse::<Dialect>().unwrap_err();
    assert!(
        err.to_string()
            .starts_with("unknown deadline header \"x-timeout\"")
    );
}

#[test]
fn the_absolute_dialect_is_wall_now_plus_the_budget() {
    let now = WallInstant::from_unix_nanos(1_768_473_045_123_000_000);
    let budget = Budget::from_millis(1_877).unwrap();
    let rfc = Dialect::RequestDeadline(AbsoluteFormat::Rfc3339Millis);
    assert_eq!(rfc.encode(budget, now).unwrap(), "2026-01-15T10:30:47.000Z");
    let micros = Dialect::RequestDeadline(AbsoluteFormat::EpochMicros);
    assert_eq!(micros.encode(budget, now).unwrap(), "1768473047000000");
    let never = WallInstant::from_unix_nanos(i128::MAX / 2);
    assert_eq!(rfc.encode(budget, never), None);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 50_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every dialect written from one budget reads back as that budget, less at most its own
    /// truncation, and never more.
    #[test]
    fn every_dialect_reads_back_within_its_truncation(
        budget_ms in 1u64..=10_000_000_000,
        now_ns in 0i128..=4_000_000_000_000_000_000,
    ) {
        let budget = Budget::from_millis(budget_ms).unwrap();
        let wide = Budget::from_millis(u64::MAX).unwrap();
        let now = WallInstant::from_unix_nanos(now_ns);
        let exact = ms(budget_ms);
        let read = |dialect: Dialect| {
            let value = dialect.encode(budget, now).unwrap();
            let raw = value.as_bytes();
            match dialect {
                Dialect::DeadlineBudgetMs => DeadlineBudgetMs { max: wide }.read(&{
                    let mut h = HeaderMap::new();
                    h.insert(BUDGET_HEADER, value.clone());
                    h
                }).unwrap().unwrap(),
                Dialect::GrpcTimeout => GrpcTimeout { max: wide }.parse(raw).unwrap(),
                Dialect::ConnectTimeoutMs | Dialect::EnvoyUpstreamTimeoutMs => {
                    EnvoyExpectedTimeoutMs { max: wide }.parse(raw).unwrap().unwrap()
                }
                Dialect::RequestDeadline(_) => {
                    let at = WallInstant::parse(raw).unwrap();
                    SkewGuard::new(std::time::Duration::ZERO, std::time::Duration::ZERO)
                        .remaining(at, now, wide)
                }
            }
        };
        prop_assert_eq!(read(Dialect::DeadlineBudgetMs), exact);
        prop_assert_eq!(read(Dialect::EnvoyUpstreamTimeoutMs), exact);
        // Connect's ten digits cap the budget; within them it is exact.
        prop_assert_eq!(read(Dialect::ConnectTimeoutMs), ms(budget_ms.min(9_999_999_999)));
        prop_assert!(
            ConnectTimeoutMs { max: wide }.parse(Dialect::ConnectTimeoutMs.encode(budget, now).unwrap().as_bytes()).is_ok(),
            "what is written, Connect reads"
        );
        prop_assert_eq!(read(Dialect::GrpcTimeout), ms(grpc_model(budget_ms)));
        for format in [AbsoluteFormat::Rfc3339Millis, AbsoluteFormat::EpochMicros] {
            let absolute = read(Dialect::RequestDeadline(format));
            prop_assert!(absolute.min(exact) == absolute);
            // Truncating the instant to ms (or µs) costs at most one ms of budget.
            prop_assert!(absolute == exact || budget_ms == 1 || absolute == ms(budget_ms - 1));
        }
    }
}

/// What `grpc-timeout` reads back for a budget of `budget_ms`, from gRPC's rule alone: at most
/// 8 digits, in the finest unit that fits, truncated. Budgets under 100,000,000 ms fit as
/// nanoseconds, microseconds or milliseconds, exactly; above, whole seconds, then whole minutes,
/// then whole hours (8 digits of hours, 99,999,999 H, cap every larger budget).
fn grpc_model(budget_ms: u64) -> u64 {
    const DIGITS8: u64 = 99_999_999;
    if budget_ms <= DIGITS8 {
        return budget_ms; // as n, u or m: exact
    }
    for unit in [1_000, 60_000, 3_600_000] {
        if budget_ms / unit <= DIGITS8 {
            return budget_ms / unit * unit;
        }
    }
    DIGITS8 * 3_600_000
}

#[test]
fn the_grpc_model_rows() {
    for (budget, read) in [
        (1, 1),
        (99_999_999, 99_999_999),
        (100_000_999, 100_000_000),
        (99_999_999_999, 99_999_999_000),
        (100_000_000_000, 99_999_960_000),
        (u64::MAX, 99_999_999 * 3_600_000),
    ] {
        assert_eq!(grpc_model(budget), read, "{budget} ms");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 50_000, failure_persistence: None, ..ProptestConfig::default() })]

    /// `grpc-timeout` over every magnitude of budget reads back as gRPC's rule truncates it:
    /// exact below 100,000,000 ms, then less than one of the unit it had to use (a second, a
    /// minute, an hour), and never more than the budget.
    #[test]
    fn grpc_timeout_reads_back_truncated_to_its_unit(
        digits in 1u32..=20,
        mantissa in any::<u64>(),
    ) {
        let budget_ms = (mantissa % 10u64.saturating_pow(digits)).max(1);
        let budget = Budget::from_millis(budget_ms).unwrap();
        let wide = Budget::from_millis(u64::MAX).unwrap();
        let value = grpc_timeout(budget);
        prop_assert!(value.len() <= 9, "8 digits and a unit: {:?}", value);
        let read = GrpcTimeout { max: wide }.parse(value.as_bytes()).unwrap();
        prop_assert_eq!(read, ms(grpc_model(budget_ms)), "{} ms written {:?}", budget_ms, value);
    }
}

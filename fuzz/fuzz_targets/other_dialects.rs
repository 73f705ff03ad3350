//! The parsers added for other dialects, from raw bytes: absolute deadlines (`X-Request-Deadline`,
//! RFC 3339 or epoch microseconds), Connect's `connect-timeout-ms`, Envoy's
//! `x-envoy-expected-rq-timeout-ms`, gRPC's `grpc-status` and percent-encoded `grpc-message`,
//! and a proxy's `X-Request-Start` stamp.
//!
//! Checked on every input, beyond "no panic": an absolute deadline that parses formats back (to
//! the millisecond) and parses again to the same millisecond; the skew guard never gives more
//! than the instant leaves; Connect and Envoy values are either errors naming their header or
//! budgets within the maximum, and agree with each other where both grammars accept the value;
//! a status code re-encodes to itself; a decoded message re-encodes and decodes to itself; a
//! request start that parses is within the epoch's first 10^11 seconds, and the time in front it
//! gives never exceeds the skew guard's maximum nor takes a budget above what it was.

#![no_main]


use deadline::Budget;
use deadline::absolute::{REQUEST_DEADLINE_HEADER, SkewGuard, WallInstant};
use deadline::dialect::{
    CONNECT_TIMEOUT_HEADER, ConnectTimeoutMs, ENVOY_EXPECTED_TIMEOUT_HEADER,
    EnvoyExpectedTimeoutMs,
};
use deadline::grpc::{GrpcCode, decode_message, encode_message};
use deadline::header::BudgetValue;
use deadline_fuzz::check_error;
use libfuzzer_sys::fuzz_target;

const MAX: Budget = Budget::DEFAULT_MAX;

fuzz_target!(|raw: &[u8]| {
    match WallInstant::parse(raw) {
        Ok(instant) => {
            if let Some(text) = instant.to_rfc3339_millis() {
                let again = WallInstant::parse(text.as_bytes()).expect("its own format parses");
                assert_eq!(
                    again.unix_nanos(),
                    instant.unix_nanos().div_euclid(1_000_000) * 1_000_000,
                    "{text}"
                );
            }
            let now = WallInstant::from_unix_nanos(1_768_473_045_123_000_000);
            if let BudgetValue::Remaining(budget) = SkewGuard::DEFAULT.remaining(instant, now, MAX)
            {
                assert!(now.after(budget.as_duration()) <= instant);
                assert!(budget <= MAX);
            }
        }
        Err(err) => check_error(&err, &REQUEST_DEADLINE_HEADER, raw),
    }

    let connect = ConnectTimeoutMs::default().parse(raw);
    let envoy = EnvoyExpectedTimeoutMs::default().parse(raw);
    match &connect {
        Ok(BudgetValue::Remaining(budget)) => assert!(*budget <= MAX),
        Ok(BudgetValue::Expired) => {}
        Err(err) => check_error(err, &CONNECT_TIMEOUT_HEADER, raw),
    }
    match &envoy {
        Ok(Some(BudgetValue::Remaining(budget))) => assert!(*budget <= MAX),
        Ok(Some(BudgetValue::Expired)) => panic!("Envoy's 0 is no deadline, never expired"),
        Ok(None) => {}
        Err(err) => check_error(err, &ENVOY_EXPECTED_TIMEOUT_HEADER, raw),
    }
    // Where both accept the digits, they read the same budget (Envoy's 0 is "none", Connect's
    // expired).
    if let (Ok(c), Ok(e)) = (&connect, &envoy) {
        match (c, e) {
            (BudgetValue::Expired, None) => {}
            (c, Some(e)) => assert_eq!(c, e),
            other => panic!("Connect and Envoy disagree: {other:?}"),
        }
    }

    if let Some(start) = deadline::front::parse_request_start(raw) {
        assert!((0..100_000_000_000 * 1_000_000_000).contains(&start.unix_nanos()));
        let now = WallInstant::from_unix_nanos(1_768_473_045_123_000_000);
        if let Ok(spent) = deadline::front::time_in_front(start, now, &SkewGuard::DEFAULT) {
            assert!(spent <= SkewGuard::DEFAULT.max_skew());
            let budget = BudgetValue::Remaining(MAX);
            let left = deadline::front::less_time_in_front(budget, spent);
            assert_eq!(left.min(budget), left);
        }
    }

    if let Some(code) = GrpcCode::parse(raw) {
        assert_eq!(GrpcCode::from_code(code.code()), code);
        assert_eq!(code.to_header_value().as_bytes(), code.code().to_string().as_bytes());
    }
    let text = decode_message(raw);
    assert_eq!(decode_message(encode_message(&text).as_bytes()), text);

});

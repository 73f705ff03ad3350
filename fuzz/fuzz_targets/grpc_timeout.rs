//! gRPC's `grpc-timeout` from raw bytes: one value, the same bytes split at `\n` into repeated
//! header lines, and those lines next to a `Deadline-Budget-Ms` where the tightest wins.
//!
//! The model, written from the gRPC grammar rather than from the parser: spaces and tabs around
//! the value are ignored; then 1 to 8 ASCII digits and one unit (`H` hours, `M` minutes, `S`
//! seconds, `m` ms, `u` µs, `n` ns); the time is truncated to whole milliseconds, under 1 ms is
//! expired, and more than the maximum clamps to it. Anything else is an error that quotes the
//! value safely.

#![no_main]

use deadline::Budget;
use deadline::header::{
    BUDGET_HEADER, BudgetSource, BudgetValue, DeadlineBudgetMs, GRPC_TIMEOUT_HEADER, GrpcTimeout,
    MalformedReason, read_tightest,
};
use deadline_fuzz::{QUOTED_BYTES, check_error, peak_bytes, trim_ows};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// Most bytes parsing one value may allocate (only an error allocates, for its quote).
const PARSE_ALLOC_BOUND: usize = 2 * (4 * QUOTED_BYTES + 3) + 256;

/// The model: `Ok(None)` when the value is not one the grammar allows.
fn model(raw: &[u8], max: Budget) -> Option<BudgetValue> {
    let value = trim_ows(raw);
    let (&unit, digits) = value.split_last()?;
    if !(1..=8).contains(&digits.len()) || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let nanos_per_unit: u128 = match unit {
        b'H' => 3_600_000_000_000,
        b'M' => 60_000_000_000,
        b'S' => 1_000_000_000,
        b'm' => 1_000_000,
        b'u' => 1_000,
        b'n' => 1,
        _ => return None,
    };
    let n: u128 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    let ms = n * nanos_per_unit / 1_000_000;
    Some(if ms == 0 {
        BudgetValue::Expired
    } else {
        let ms = u64::try_from(ms.min(u128::from(max.as_millis()))).expect("at most max");
        BudgetValue::Remaining(Budget::from_millis(ms).expect("non-zero"))
    })
}

fuzz_target!(|data: &[u8]| {
    for max in [Budget::DEFAULT_MAX, Budget::ONE_MS] {
        let grpc = GrpcTimeout { max };

        // One value.
        let (got, bytes) = peak_bytes(|| grpc.parse(data));
        assert!(bytes <= PARSE_ALLOC_BOUND, "{bytes} bytes allocated");
        match (&got, model(data, max)) {
            (Ok(value), Some(want)) => assert_eq!(*value, want),
            (Err(err), None) => {
                assert_eq!(err.reason(), MalformedReason::BadGrpcTimeout);
                check_error(err, &GRPC_TIMEOUT_HEADER, data);
            }
            (got, want) => panic!("parsed {got:?}, the grammar says {want:?}"),
        }

        // Repeated lines: every line that is a valid header value becomes one field; all must be
        // valid and the smallest wins.
        let mut headers = HeaderMap::new();
        let mut want: Option<Option<BudgetValue>> = Some(None);
        for line in data.split(|&b| b == b'\n') {
            let Ok(value) = HeaderValue::from_bytes(line) else {
                continue;
            };
            headers.append(GRPC_TIMEOUT_HEADER, value);
            if let Some(so_far) = want {
                want = model(line, max).map(|v| Some(so_far.map_or(v, |s| s.min(v))));
            }
        }
        let got = grpc.read(&headers);
        assert_eq!(got.as_ref().ok(), want.as_ref(), "{got:?}");

        // Next to a `Deadline-Budget-Ms` of 1 s: the tighter one wins, and a bad grpc-timeout
        // is an error even though the other header is fine.
        let ours = DeadlineBudgetMs { max };
        headers.insert(BUDGET_HEADER, HeaderValue::from_static("1000"));
        let one_s = BudgetValue::Remaining(Budget::from_millis(1_000).expect("non-zero").min(max));
        let tightest = read_tightest(&[&ours, &grpc], &headers);
        let want = want.map(|v| Some(v.map_or(one_s, |v| v.min(one_s))));
        assert_eq!(tightest.as_ref().ok(), want.as_ref(), "{tightest:?}");
        if let Err(err) = tightest {
            assert_eq!(err.header(), GRPC_TIMEOUT_HEADER);
        }
    }
});

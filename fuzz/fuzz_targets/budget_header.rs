//! `Deadline-Budget-Ms` from raw bytes: one header line (which may be a comma-separated list),
//! and the same bytes split at `\n` into repeated header lines.
//!
//! Every result is compared with a model written here from the documented rules, not from the
//! parser: spaces and tabs around each element are ignored; an element is an optional `-` and
//! ASCII digits; any minus sign, and zero, is expired; larger values clamp to the maximum; every
//! element and line must be valid and the smallest wins; the first bad element decides the
//! reason (empty, a leading `+`, non-ASCII bytes, or not an integer). Errors must quote the value
//! safely, parsing allocates a bounded amount whatever the input, and every budget read formats
//! back to a value that parses to itself.

#![no_main]

use deadline::Budget;
use deadline::header::{
    BUDGET_HEADER, BudgetSource, BudgetValue, DeadlineBudgetMs, MalformedReason, parse_budget,
    read_budget,
};
use deadline_fuzz::{QUOTED_BYTES, check_error, peak_bytes, trim_ows};
use http::{HeaderMap, HeaderValue};
use libfuzzer_sys::fuzz_target;

/// Most bytes parsing one value may allocate: only an error allocates, for its quote of at most
/// `QUOTED_BYTES` input bytes at up to 4 output bytes each, plus slack for growth and formatting.
const PARSE_ALLOC_BOUND: usize = 2 * (4 * QUOTED_BYTES + 3) + 256;

/// The maxima every input is read with: the default, the smallest, and one in between.
fn maxima() -> [Budget; 3] {
    [
        Budget::DEFAULT_MAX,
        Budget::ONE_MS,
        Budget::from_millis(5_000).expect("non-zero"),
    ]
}

/// The model of one element: `Ok(None)` for expired, `Ok(Some(ms))` for a budget already clamped.
fn model_element(raw: &[u8], max: Budget) -> Result<Option<u64>, MalformedReason> {
    let value = trim_ows(raw);
    let (negative, digits) = match value.first() {
        None => return Err(MalformedReason::Empty),
        Some(b'+') => return Err(MalformedReason::PlusSign),
        Some(b'-') => (true, &value[1..]),
        Some(_) => (false, value),
    };
    if digits.is_empty() || digits.iter().any(|b| !b.is_ascii_digit()) {
        return Err(if value.is_ascii() {
            MalformedReason::NotAnInteger
        } else {
            MalformedReason::NotAscii
        });
    }
    if negative {
        return Ok(None);
    }
    let significant = &digits[digits.iter().take_while(|&&d| d == b'0').count()..];
    if significant.is_empty() {
        return Ok(None);
    }
    // Nineteen digits always fit a u64; more are certainly above any maximum.
    if significant.len() > 19 {
        return Ok(Some(max.as_millis()));
    }
    let ms: u64 = std::str::from_utf8(significant)
        .expect("ASCII digits")
        .parse()
        .expect("at most 19 digits");
    Ok(Some(ms.min(max.as_millis())))
}

/// The model of one header line: every element valid, the smallest wins.
fn model_line(raw: &[u8], max: Budget) -> Result<BudgetValue, MalformedReason> {
    let mut smallest: Option<Option<u64>> = None;
    for element in raw.split(|&b| b == b',') {
        let value = model_element(element, max)?;
        smallest = Some(match (smallest, value) {
            (None, v) => v,
            (Some(None), _) | (Some(_), None) => None,
            (Some(Some(a)), Some(b)) => Some(a.min(b)),
        });
    }
    // `split` yields at least one element, so `smallest` is set.
    Ok(match smallest.flatten() {
        None => BudgetValue::Expired,
        Some(ms) => BudgetValue::Remaining(Budget::from_millis(ms).expect("zero is expired")),
    })
}

fuzz_target!(|data: &[u8]| {
    // Repeated lines: every line that is a valid header value becomes one field.
    let lines: Vec<&[u8]> = data
        .split(|&b| b == b'\n')
        .filter(|line| HeaderValue::from_bytes(line).is_ok())
        .collect();
    let mut headers = HeaderMap::new();
    for line in &lines {
        headers.append(
            BUDGET_HEADER,
            HeaderValue::from_bytes(line).expect("checked"),
        );
    }

    for max in maxima() {
        // One line.
        let (got, bytes) = peak_bytes(|| parse_budget(data, max));
        assert!(bytes <= PARSE_ALLOC_BOUND, "{bytes} bytes allocated");
        assert_eq!(
            got.as_ref().copied().map_err(|e| e.reason()),
            model_line(data, max)
        );
        match got {
            Err(err) => check_error(&err, &BUDGET_HEADER, data),
            Ok(BudgetValue::Remaining(budget)) => {
                assert!(budget <= max);
                // What a caller would send on parses back to the same budget.
                let sent = budget.to_header_value();
                assert_eq!(
                    parse_budget(sent.as_bytes(), Budget::DEFAULT_MAX),
                    Ok(BudgetValue::Remaining(budget))
                );
            }
            Ok(BudgetValue::Expired) => {}
        }

        // All lines must be valid and the smallest wins; the error names the first bad line.
        let mut want: Result<Option<BudgetValue>, (MalformedReason, &[u8])> = Ok(None);
        for line in &lines {
            if let Ok(so_far) = want {
                want = model_line(line, max)
                    .map(|v| Some(so_far.map_or(v, |s| s.min(v))))
                    .map_err(|reason| (reason, *line));
            }
        }
        let got = read_budget(&headers, max);
        assert_eq!(
            got.as_ref().copied().map_err(|e| e.reason()),
            want.map_err(|(reason, _)| reason)
        );
        if let (Err(err), Err((_, line))) = (&got, want) {
            check_error(err, &BUDGET_HEADER, line);
        }
        let source = DeadlineBudgetMs { max };
        assert_eq!(source.read(&headers), got);
    }
});

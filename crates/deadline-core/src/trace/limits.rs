//! The format's header name and bounds: how many spans, how deep, how long a name, an outcome
//! and a number may be, and the longest encoding they allow.

use http::HeaderName;

/// The `Deadline-Trace` response header name.
pub const TRACE_HEADER: HeaderName = HeaderName::from_static("deadline-trace");

/// Spans kept in an encoded trace; the rest are counted in [`Trace::dropped`](super::Trace::dropped).
pub const MAX_SPANS: usize = 64;

/// Nesting levels kept in an encoded trace (roots are level 0, the deepest kept level is
/// `MAX_DEPTH - 1`); deeper spans are dropped and counted.
pub const MAX_DEPTH: usize = 16;

/// Bytes of a span name after sanitising.
pub const MAX_NAME_LEN: usize = 24;

/// Bytes of a span outcome after sanitising.
pub const MAX_OUTCOME_LEN: usize = 16;

/// Times (and the dropped count) saturate at this value when encoded: the largest ten-digit
/// number, a little over 115 days in milliseconds.
pub const MAX_MS: u64 = 9_999_999_999;

/// Digits in [`MAX_MS`], the most a number on the wire may have.
pub(crate) const MAX_DIGITS: usize = 10;

/// Digits of a budget's span index: indices run from 0 to `MAX_SPANS - 1` (63).
pub(crate) const MAX_INDEX_DIGITS: usize = 2;

/// The longest possible output of [`Trace::encode`](super::Trace::encode), in bytes (5,897).
///
/// Computed as `MAX_SPANS` spans of at most 63 bytes each without their depth dots
/// (`MAX_NAME_LEN` + `@` + 10 digits + `-` + 10 digits + `=` + `MAX_OUTCOME_LEN`), plus the most
/// dots a pre-order sequence can hold (0, 1, …, `MAX_DEPTH - 1` for the first `MAX_DEPTH` spans,
/// then `MAX_DEPTH - 1` for every other span), plus `MAX_SPANS - 1` commas, plus a budget for
/// every span (`,^` + the index + `=` + 10 digits: 14 bytes for indices 0 to 9, 15 from 10 on),
/// plus `,+` and a ten-digit dropped count. See the [module docs](super#bounds) for the table.
pub const MAX_ENCODED_LEN: usize = {
    let span = MAX_NAME_LEN + 1 + MAX_DIGITS + 1 + MAX_DIGITS + 1 + MAX_OUTCOME_LEN;
    let one_digit = if MAX_SPANS < 10 { MAX_SPANS } else { 10 };
    let budgets = MAX_SPANS * (2 + 1 + MAX_DIGITS) + one_digit + (MAX_SPANS - one_digit) * 2;
    let chain = if MAX_SPANS < MAX_DEPTH {
        MAX_SPANS
    } else {
        MAX_DEPTH
    };
    let dots = chain * (chain - 1) / 2 + (MAX_SPANS - chain) * (chain - 1);
    let commas = MAX_SPANS - 1;
    let dropped = 2 + MAX_DIGITS;
    MAX_SPANS * span + dots + commas + budgets + dropped
};

/// Input beyond this many bytes is ignored by [`Trace::decode`]. A well-formed trace is at most
/// [`MAX_ENCODED_LEN`] bytes, so anything longer is hostile or broken; reading it to the end
/// would only cost time.
pub(crate) const MAX_DECODE_LEN: usize = 64 * 1024;

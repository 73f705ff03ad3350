//! The token alphabet (`tchar`) of span names and outcomes, and the sanitiser that makes any
//! text fit it.

/// Makes `raw` a `tchar` token (letters, digits, `_`, `-`, `:`) of at most `max_len` bytes:
/// every other character becomes `_`, the result is cut to `max_len`, and an empty result becomes
/// `_` (so a `max_len` of 0 still gives `_`: the grammar has no empty tokens).
///
/// ```
/// # use deadline_core::trace::sanitize_name;
/// assert_eq!(sanitize_name("call orders.v2", 24), "call_orders_v2");
/// assert_eq!(sanitize_name("crème", 24), "cr_me");
/// assert_eq!(sanitize_name("", 24), "_");
/// assert_eq!(sanitize_name("inventory-service", 9), "inventory");
/// ```
pub fn sanitize_name(raw: &str, max_len: usize) -> String {
    // One `_` per character, not per byte: "crème" reads better as "cr_me" than "cr__me". The
    // output is ASCII, so cutting at `max_len` characters is cutting at `max_len` bytes.
    let mut out: String = raw
        .chars()
        .take(max_len)
        .map(|c| {
            if c.is_ascii() && is_tchar(c as u8) {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() {
        out.push('_');
    }
    out
}

/// Whether `b` is a `tchar`: a letter, a digit, `_`, `-` or `:`.
pub(crate) fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// `tchar` as a table: one load per byte where decoding spends most of its time.
const TCHAR: [bool; 256] = {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        table[b] = c.is_ascii_alphanumeric() || c == b'_' || c == b'-' || c == b':';
        b += 1;
    }
    table
};

/// Whether `token` is already what [`sanitize_name`] would make of it.
pub(crate) fn is_token(token: &str, max_len: usize) -> bool {
    (1..=max_len).contains(&token.len()) && token.bytes().all(is_tchar)
}

/// `text` as [`sanitize_name`] makes it, without copying it when it is already a token (the
/// names and outcomes the layers record nearly always are).
pub(crate) fn into_token(text: String, max_len: usize) -> String {
    if is_token(&text, max_len) {
        text
    } else {
        sanitize_name(&text, max_len)
    }
}

//! Whole numbers in ASCII decimal without `fmt` or an allocation: the one digit writer behind
//! every number this project puts on the wire (budgets, trace times), which runs on every
//! request.

use std::fmt;

/// A `u64` written in ASCII decimal on the stack.
///
/// ```
/// use deadline_core::decimal::Decimal;
/// assert_eq!(Decimal::new(1950).as_str(), "1950");
/// assert_eq!(Decimal::new(0).as_bytes(), b"0");
/// ```
#[derive(Clone, Copy)]
pub struct Decimal {
    digits: [u8; 20],
    start: usize,
}

impl Decimal {
    /// The digits of `n` (20 at most, for `u64::MAX`).
    pub fn new(mut n: u64) -> Decimal {
        let mut digits = [0u8; 20];
        let mut start = digits.len();
        loop {
            start -= 1;
            // `n % 10` is below 10, so the cast keeps it whole.
            digits[start] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        Decimal { digits, start }
    }

    /// The digits as bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.digits[self.start..]
    }

    /// The digits as text.
    pub fn as_str(&self) -> &str {
        // Only ASCII digits are ever written; the fallback is never taken.
        std::str::from_utf8(self.as_bytes()).unwrap_or("0")
    }
}

impl fmt::Debug for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A fixed buffer on the stack for a header value or a trace: writing past its end marks it
/// overflowed instead of growing, so a value is built with no allocation and copied once.
///
/// ```
/// use deadline_core::decimal::{Decimal, StackBuf};
/// let mut out = StackBuf::<8>::new();
/// out.put(b"dur=");
/// out.put(Decimal::new(42).as_bytes());
/// assert_eq!(out.as_bytes(), Some(&b"dur=42"[..]));
/// out.put(b"...");
/// assert_eq!(out.as_bytes(), None);
/// ```
pub struct StackBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    overflowed: bool,
}

impl<const N: usize> StackBuf<N> {
    /// An empty buffer.
    pub fn new() -> StackBuf<N> {
        StackBuf {
            buf: [0; N],
            len: 0,
            overflowed: false,
        }
    }

    /// Appends `bytes`, or marks the buffer overflowed when they do not fit.
    pub fn put(&mut self, bytes: &[u8]) {
        let end = self.len.saturating_add(bytes.len());
        match self.buf.get_mut(self.len..end) {
            Some(room) => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            None => self.overflowed = true,
        }
    }

    /// Appends one byte, or marks the buffer overflowed when it does not fit. (A slice of one
    /// byte through [`put`](Self::put) costs a call to `memcpy`; this is a store.)
    pub fn push(&mut self, byte: u8) {
        match self.buf.get_mut(self.len) {
            Some(room) => {
                *room = byte;
                self.len += 1;
            }
            None => self.overflowed = true,
        }
    }

    /// Appends the decimal digits of `n`, written in place (no [`Decimal`] in between, no
    /// copy), or marks the buffer overflowed when they do not fit.
    pub fn put_decimal(&mut self, n: u64) {
        let mut len = 1;
        let mut rest = n / 10;
        while rest != 0 {
            len += 1;
            rest /= 10;
        }
        let end = self.len.saturating_add(len);
        let Some(room) = self.buf.get_mut(self.len..end) else {
            self.overflowed = true;
            return;
        };
        let mut n = n;
        for digit in room.iter_mut().rev() {
            // `n % 10` is below 10, so the cast keeps it whole.
            *digit = b'0' + (n % 10) as u8;
            n /= 10;
        }
        self.len = end;
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// How many bytes were written (those that fit, if it overflowed).
    pub fn len(&self) -> usize {
        self.len
    }

    /// What was written, or `None` if it did not fit.
    pub fn as_bytes(&self) -> Option<&[u8]> {
        (!self.overflowed)
            .then(|| self.buf.get(..self.len))
            .flatten()
    }
}

impl<const N: usize> Default for StackBuf<N> {
    fn default() -> StackBuf<N> {
        StackBuf::new()
    }
}

impl<const N: usize> fmt::Debug for StackBuf<N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StackBuf")
            .field("written", &String::from_utf8_lossy(&self.buf[..self.len]))
            .field("overflowed", &self.overflowed)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::{Decimal, StackBuf};

    #[test]
    fn matches_the_standard_formatter() {
        for n in [
            0,
            1,
            9,
            10,
            99,
            100,
            590,
            1950,
            3_600_000,
            9_999_999_999,
            u64::MAX,
        ] {
            assert_eq!(Decimal::new(n).as_str(), n.to_string());
        }
    }

    #[test]
    fn digits_written_in_place_match_the_standard_formatter() {
        for n in [0, 7, 10, 99, 100, 1950, 9_999_999_999, u64::MAX] {
            let mut out = StackBuf::<24>::new();
            out.push(b'=');
            out.put_decimal(n);
            assert_eq!(out.as_bytes(), Some(format!("={n}").as_bytes()));
        }
        // Too long for the room left: marked overflowed, never cut short.
        let mut out = StackBuf::<4>::new();
        out.put_decimal(12_345);
        assert_eq!(out.as_bytes(), None);
    }
}

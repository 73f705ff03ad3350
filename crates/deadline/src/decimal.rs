//! Whole numbers in ASCII decimal without `fmt` or an allocation: the one digit writer behind
//! every number this project puts on the wire (budgets, trace times), which runs on every
//! request.

use std::fmt;

/// A `u64` written in ASCII decimal on the stack.
///
/// ```
/// use deadline::decimal::Decimal;
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

#[cfg(test)]
mod tests {
    use super::Decimal;

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
}

//! The two headers a message carries: when it expires, and when it was produced.
//!
//! Both are text in the core's absolute-instant form (RFC 3339 in UTC with milliseconds, the
//! `X-Request-Deadline` spelling, written and read by [`WallInstant`]), in AMQP long strings
//! of the message's `headers` table:
//!
//! | header | written | read |
//! |---|---|---|
//! | `deadline-expires-at` ([`EXPIRES_AT`]) | when the message has an expiry | before any work: absent, an instant, or malformed |
//! | `deadline-produced-at` ([`PRODUCED_AT_HEADER`]) | always | for the age at consumption (metrics); unreadable: no age |
//!
//! Reading has three outcomes, as every budget source in the project does: absent (no expiry),
//! an instant (which may be past: expired is a value, not an error), or malformed. Either
//! spelling [`WallInstant::parse`] accepts is read (RFC 3339 or microseconds since the epoch),
//! as a long or a short string; any other AMQP type (a number, a timestamp, a table) is
//! malformed, never guessed at.

use std::fmt;

use deadline::absolute::WallInstant;
use deadline::expiry::MessageExpiry;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};

/// `deadline-produced-at`: when the producer published the message (RFC 3339 with
/// milliseconds), from which the consumer measures its age.
pub const PRODUCED_AT_HEADER: &str = "deadline-produced-at";

/// `deadline-expires-at`: the core's
/// [`EXPIRES_AT_HEADER`](deadline::expiry::EXPIRES_AT_HEADER) as an AMQP headers-table key (a
/// test holds the two equal).
pub const EXPIRES_AT: &str = "deadline-expires-at";

/// What a consumed message's expiry header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExpiryStamp {
    /// No expiry header: the message has no expiry.
    Absent,
    /// The message expires at this instant (which may be past).
    At(MessageExpiry),
    /// The header is there but does not hold an instant.
    Malformed(MalformedExpiry),
}

/// An expiry header that does not hold an instant: what was found, escaped and truncated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MalformedExpiry {
    found: String,
}

impl MalformedExpiry {
    fn new(found: impl fmt::Display) -> MalformedExpiry {
        MalformedExpiry {
            found: found.to_string(),
        }
    }

    /// What the header held, escaped and truncated for a log line.
    pub fn found(&self) -> &str {
        &self.found
    }
}

impl fmt::Display for MalformedExpiry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the {} header does not hold an instant: {}",
            EXPIRES_AT, self.found
        )
    }
}

impl std::error::Error for MalformedExpiry {}

/// At most this many bytes of a malformed value are kept for the error.
const SHOWN_BYTES: usize = 64;

/// A header value's bytes, escaped (non-printable and non-ASCII bytes as `\xNN`) and truncated.
fn escaped(bytes: &[u8]) -> String {
    let mut text = String::from("\"");
    for &b in bytes.iter().take(SHOWN_BYTES) {
        text.extend(std::ascii::escape_default(b).map(char::from));
    }
    text.push('"');
    if bytes.len() > SHOWN_BYTES {
        text.push_str(&format!(" (and {} more bytes)", bytes.len() - SHOWN_BYTES));
    }
    text
}

/// The text of a string-typed header value; `None` for any other AMQP type.
fn text_of(value: &AMQPValue) -> Option<&[u8]> {
    match value {
        AMQPValue::LongString(s) => Some(s.as_bytes()),
        AMQPValue::ShortString(s) => Some(s.as_str().as_bytes()),
        _ => None,
    }
}

/// Reads the expiry header of a message's headers table.
pub fn read_expiry(headers: Option<&FieldTable>) -> ExpiryStamp {
    let Some(value) = headers.and_then(|h| h.inner().get(EXPIRES_AT)) else {
        return ExpiryStamp::Absent;
    };
    let Some(text) = text_of(value) else {
        return ExpiryStamp::Malformed(MalformedExpiry::new(format_args!(
            "a value of AMQP type {}, not a string",
            value.get_type()
        )));
    };
    match MessageExpiry::decode(text) {
        Ok(expiry) => ExpiryStamp::At(expiry),
        Err(_) => ExpiryStamp::Malformed(MalformedExpiry::new(escaped(text))),
    }
}

/// Reads the produced-at header; `None` when absent or unreadable (it only feeds the age).
pub fn read_produced_at(headers: Option<&FieldTable>) -> Option<WallInstant> {
    let value = headers?.inner().get(PRODUCED_AT_HEADER)?;
    WallInstant::parse(text_of(value)?).ok()
}

/// Writes `instant` under `name` as a long string. `None` when the instant cannot be spelled
/// in RFC 3339 (a year outside 0000–9999).
pub(crate) fn write(headers: &mut FieldTable, name: &str, instant: WallInstant) -> Option<()> {
    let text = instant.to_rfc3339_millis()?;
    headers.insert(
        ShortString::from(name),
        AMQPValue::LongString(LongString::from(text)),
    );
    Some(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use deadline::expiry::EXPIRES_AT_HEADER;

    use super::*;

    fn table(name: &str, value: AMQPValue) -> FieldTable {
        let mut headers = FieldTable::default();
        headers.insert(ShortString::from(name), value);
        headers
    }

    #[test]
    fn the_expiry_header_is_the_cores() {
        assert_eq!(EXPIRES_AT, EXPIRES_AT_HEADER.as_str());
    }

    #[test]
    fn written_instants_read_back_truncated_to_the_millisecond() {
        let at = WallInstant::from_unix_nanos(1_768_473_045_123_999_999);
        let mut headers = FieldTable::default();
        write(&mut headers, EXPIRES_AT, at).unwrap();
        write(&mut headers, PRODUCED_AT_HEADER, at).unwrap();
        let millis = WallInstant::from_unix_nanos(1_768_473_045_123_000_000);
        assert_eq!(
            read_expiry(Some(&headers)),
            ExpiryStamp::At(MessageExpiry::at(millis))
        );
        assert_eq!(read_produced_at(Some(&headers)), Some(millis));
        assert_eq!(
            headers.inner()[EXPIRES_AT],
            AMQPValue::LongString("2026-01-15T10:30:45.123Z".into())
        );
    }

    #[test]
    fn absent_is_no_expiry_and_a_past_instant_is_a_value() {
        assert_eq!(read_expiry(None), ExpiryStamp::Absent);
        assert_eq!(
            read_expiry(Some(&FieldTable::default())),
            ExpiryStamp::Absent
        );
        let past = table(
            EXPIRES_AT,
            AMQPValue::LongString("1970-01-01T00:00:00.001Z".into()),
        );
        assert_eq!(
            read_expiry(Some(&past)),
            ExpiryStamp::At(MessageExpiry::at(
                WallInstant::from_unix_nanos(0).after(Duration::from_millis(1))
            ))
        );
        let micros = table(
            EXPIRES_AT,
            AMQPValue::ShortString("1768473045123000".into()),
        );
        assert!(matches!(read_expiry(Some(&micros)), ExpiryStamp::At(_)));
    }

    #[test]
    fn anything_else_is_malformed_and_shown_escaped() {
        let cases = [
            (AMQPValue::LongString("soon".into()), "\"soon\""),
            (
                AMQPValue::LongString(b"\xff\n".to_vec().into()),
                "\"\\xff\\n\"",
            ),
            (AMQPValue::LongString("".into()), "\"\""),
            (AMQPValue::LongLongInt(5), "AMQP type LongLongInt"),
            (AMQPValue::Timestamp(5), "AMQP type Timestamp"),
        ];
        for (value, shown) in cases {
            let stamp = read_expiry(Some(&table(EXPIRES_AT, value.clone())));
            let ExpiryStamp::Malformed(err) = stamp else {
                panic!("{value:?} read as {stamp:?}");
            };
            assert!(err.to_string().contains(shown), "{err} lacks {shown}");
        }
        let long = "9".repeat(1_000) + "x";
        let stamp = read_expiry(Some(&table(EXPIRES_AT, AMQPValue::LongString(long.into()))));
        let ExpiryStamp::Malformed(err) = stamp else {
            panic!("a long value read as {stamp:?}");
        };
        assert!(err.found().ends_with("(and 937 more bytes)"), "{err}");
    }
}

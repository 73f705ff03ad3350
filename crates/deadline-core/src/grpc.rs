//! The few gRPC rules the layers need: which requests are gRPC, the status codes a deadline
//! produces, and `grpc-message`'s percent-encoding.
//!
//! gRPC clients must not be answered with a bare HTTP 504 or 400: they read a bare 504 as
//! UNAVAILABLE, which tells them to retry. A gRPC request that runs out of time is answered
//! "trailers-only": HTTP 200 whose headers end the stream and carry `grpc-status` and
//! `grpc-message`. This module holds the codes and the text encoding; building the response is
//! the server layer's job.

use std::fmt;

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue};

/// `grpc-status`: the call's status code.
pub const GRPC_STATUS_HEADER: HeaderName = HeaderName::from_static("grpc-status");
/// `grpc-message`: the status text, percent-encoded.
pub const GRPC_MESSAGE_HEADER: HeaderName = HeaderName::from_static("grpc-message");
/// `grpc-retry-pushback-ms`: how long the server asks a client to wait before retrying.
pub const GRPC_RETRY_PUSHBACK_HEADER: HeaderName =
    HeaderName::from_static("grpc-retry-pushback-ms");

/// The gRPC status codes the deadline layers produce or act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GrpcCode {
    /// 0: success.
    Ok,
    /// 1: the client cancelled.
    Cancelled,
    /// 3: the request was malformed (a bad deadline header).
    InvalidArgument,
    /// 4: the deadline passed before the call completed.
    DeadlineExceeded,
    /// 8: a resource ran out (for example a retry budget).
    ResourceExhausted,
    /// 14: the service cannot take the call now; safe to retry.
    Unavailable,
    /// Any other code, kept as received.
    Other(u32),
}

impl GrpcCode {
    /// The numeric code.
    pub fn code(self) -> u32 {
        match self {
            GrpcCode::Ok => 0,
            GrpcCode::Cancelled => 1,
            GrpcCode::InvalidArgument => 3,
            GrpcCode::DeadlineExceeded => 4,
            GrpcCode::ResourceExhausted => 8,
            GrpcCode::Unavailable => 14,
            GrpcCode::Other(code) => code,
        }
    }

    /// The code for a number.
    pub fn from_code(code: u32) -> GrpcCode {
        match code {
            0 => GrpcCode::Ok,
            1 => GrpcCode::Cancelled,
            3 => GrpcCode::InvalidArgument,
            4 => GrpcCode::DeadlineExceeded,
            8 => GrpcCode::ResourceExhausted,
            14 => GrpcCode::Unavailable,
            other => GrpcCode::Other(other),
        }
    }

    /// Reads a `grpc-status` value: 1 to 10 ASCII digits, nothing else.
    pub fn parse(raw: &[u8]) -> Option<GrpcCode> {
        if raw.is_empty() || raw.len() > 10 || !raw.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let code = raw.iter().try_fold(0u32, |acc, d| {
            acc.checked_mul(10)?.checked_add(u32::from(d - b'0'))
        })?;
        Some(GrpcCode::from_code(code))
    }

    /// The readable `grpc-status` in `headers`, if there is one.
    pub fn of_headers(headers: &HeaderMap) -> Option<GrpcCode> {
        headers
            .get(GRPC_STATUS_HEADER)
            .and_then(|v| GrpcCode::parse(v.as_bytes()))
    }

    /// The `grpc-status` value.
    pub fn to_header_value(self) -> HeaderValue {
        HeaderValue::from(self.code())
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Cancelled => "CANCELLED",
            GrpcCode::InvalidArgument => "INVALID_ARGUMENT",
            GrpcCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            GrpcCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            GrpcCode::Unavailable => "UNAVAILABLE",
            GrpcCode::Other(code) => return write!(f, "status {code}"),
        };
        f.write_str(name)
    }
}

/// Whether a `content-type` is gRPC's: `application/grpc`, alone or followed by `+…` or `;…`,
/// in any case.
pub fn is_grpc_content_type(content_type: &[u8]) -> bool {
    const PREFIX: &[u8] = b"application/grpc";
    content_type.len() >= PREFIX.len()
        && content_type[..PREFIX.len()].eq_ignore_ascii_case(PREFIX)
        && matches!(content_type.get(PREFIX.len()), None | Some(b'+' | b';'))
}

/// Whether a request or answer with these headers is gRPC, by its `content-type`.
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|ct| is_grpc_content_type(ct.as_bytes()))
}

/// `text` as a `grpc-message` value: every byte outside printable ASCII, and `%` itself,
/// written as `%XX`.
pub fn encode_message(text: &str) -> HeaderValue {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let mut out = Vec::with_capacity(text.len());
    for &b in text.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', HEX[usize::from(b >> 4)], HEX[usize::from(b & 0xf)]]);
        }
    }
    // Printable ASCII only: always a valid header value.
    HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// A `grpc-message` value back as text. A `%` not followed by two hex digits is kept as it is
/// (the gRPC rule for a receiver: never fail on a bad encoding); bytes that are not UTF-8 are
/// replaced.
pub fn decode_message(raw: &[u8]) -> String {
    let hex = |b: u8| char::from(b).to_digit(16);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            if let (Some(hi), Some(lo)) = (
                raw.get(i + 1).copied().and_then(hex),
                raw.get(i + 2).copied().and_then(hex),
            ) {
                // Two hex digits: at most 0xff.
                out.push(u8::try_from(hi * 16 + lo).unwrap_or(b'?'));
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn grpc_content_types() {
        for yes in [
            &b"application/grpc"[..],
            b"application/grpc+proto",
            b"application/grpc+json",
            b"application/grpc;charset=utf-8",
            b"Application/GRPC",
        ] {
            assert!(is_grpc_content_type(yes), "{yes:?}");
        }
        for no in [
            &b""[..],
            b"application/grpc-web",
            b"application/grpcx",
            b"application/json",
            b"text/plain",
            b"application/grp",
        ] {
            assert!(!is_grpc_content_type(no), "{no:?}");
        }
    }

    #[test]
    fn status_codes_read_and_write() {
        assert_eq!(GrpcCode::parse(b"4"), Some(GrpcCode::DeadlineExceeded));
        assert_eq!(GrpcCode::parse(b"14"), Some(GrpcCode::Unavailable));
        assert_eq!(GrpcCode::parse(b"0"), Some(GrpcCode::Ok));
        assert_eq!(GrpcCode::parse(b"2"), Some(GrpcCode::Other(2)));
        for bad in [
            &b""[..],
            b"-1",
            b" 4",
            b"4 ",
            b"99999999999",
            b"4294967296",
            b"x",
        ] {
            assert_eq!(GrpcCode::parse(bad), None, "{bad:?}");
        }
        assert_eq!(
            GrpcCode::parse(b"4294967295"),
            Some(GrpcCode::Other(u32::MAX))
        );
        for code in [0, 1, 3, 4, 8, 14, 2, 16] {
            assert_eq!(GrpcCode::from_code(code).code(), code);
        }
        assert_eq!(GrpcCode::DeadlineExceeded.to_header_value(), "4");
        assert_eq!(GrpcCode::DeadlineExceeded.to_string(), "DEADLINE_EXCEEDED");
        assert_eq!(GrpcCode::Other(2).to_string(), "status 2");
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(
            encode_message("deadline exceeded at inventory: 100% of 600 ms"),
            "deadline exceeded at inventory: 100%25 of 600 ms"
        );
        assert_eq!(encode_message("naïve\n"), "na%C3%AFve%0A");
        assert_eq!(decode_message(b"na%C3%AFve%0A"), "naïve\n");
        // A broken escape is kept, not an error.
        assert_eq!(decode_message(b"50%"), "50%");
        assert_eq!(decode_message(b"%zz%4"), "%zz%4");
        assert_eq!(decode_message(b"%ff"), "\u{fffd}");
    }

    proptest! {
        #[test]
        fn any_text_round_trips(text in ".*") {
            prop_assert_eq!(decode_message(encode_message(&text).as_bytes()), text);
        }

        #[test]
        fn decoding_any_bytes_never_panics(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_message(&raw);
        }
    }
}

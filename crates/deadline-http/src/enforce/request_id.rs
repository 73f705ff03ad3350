//! The request id a hop reads into its hold reports, and which ids are worth keeping.

use http::HeaderName;

/// `X-Request-Id`: read into each [`Hold`](crate::hold::Hold) report, so reports from different hops can be joined.
pub const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id kept, in characters.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// Whether `id` is a request id worth keeping and forwarding: 1 to [`MAX_REQUEST_ID_LEN`]
/// visible ASCII characters (no spaces). Anything else (a 200 KB value a caller sends to be
/// copied into every hop's headers and logs, or bytes a log cannot show) is not: a [`Hold`](crate::hold::Hold)
/// report leaves it out, and a hop should replace it with one of its own.
pub fn is_usable_request_id(id: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_LEN).contains(&id.len()) && id.iter().all(u8::is_ascii_graphic)
}

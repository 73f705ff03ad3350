//! [`Caller`]: which terms a request's caller reads an error in, told from its headers.
//!
//! A leaf of its own: the layer's answers ([`answer`](super::answer)), its response body and its
//! stream cut all need it, and none of them should need another for it.

use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue};

/// `connect-protocol-version`: sent by Connect clients on every request.
pub const CONNECT_PROTOCOL_VERSION: HeaderName =
    HeaderName::from_static("connect-protocol-version");

/// How a caller reads an error: which terms the layer's own answers are given in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Caller {
    /// Plain HTTP: the status and a `text/plain` body.
    #[default]
    Http,
    /// gRPC: trailers-only, `grpc-status` and `grpc-message`.
    Grpc,
    /// Connect unary: the status and a JSON error body.
    Connect,
}

impl Caller {
    /// The kind of caller that sent a request with these headers: gRPC by its content type,
    /// Connect by its `connect-protocol-version` header (a Connect unary POST always has a
    /// content type too, so a request without one costs a single lookup), plain HTTP otherwise.
    pub fn of(headers: &HeaderMap) -> Caller {
        Caller::from_parts(headers.get(CONTENT_TYPE), || {
            headers.contains_key(CONNECT_PROTOCOL_VERSION)
        })
    }

    /// The caller told by a request's first content type and whether it has a
    /// `connect-protocol-version` header (asked only when it matters).
    pub(crate) fn from_parts(
        content_type: Option<&HeaderValue>,
        connect: impl FnOnce() -> bool,
    ) -> Caller {
        match content_type {
            None => Caller::Http,
            Some(ct) if deadline::grpc::is_grpc_content_type(ct.as_bytes()) => Caller::Grpc,
            Some(_) if connect() => Caller::Connect,
            Some(_) => Caller::Http,
        }
    }

    /// Whether the caller speaks gRPC.
    pub fn is_grpc(self) -> bool {
        self == Caller::Grpc
    }
}

//! The gRPC wire format of a unary call, as the `deadline` command speaks it: a message's
//! 5-byte prefix, the reply body (one message, then trailers; or trailers-only), the request a
//! hop sends downstream, and a reply read back by a client (`grpc-status` from the headers or
//! the trailers). Also how a hop calls its downstream (HTTP/1.1, h2c or gRPC).

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use anyhow::Context as _;
use bytes::{BufMut, Bytes, BytesMut};
use clap::ValueEnum;
use deadline::TRACE_HEADER;
use deadline::grpc::{GRPC_MESSAGE_HEADER, GRPC_STATUS_HEADER, GrpcCode, decode_message};
use deadline_http::enforce::REQUEST_ID_HEADER;
use deadline_http::enforce::answer::grpc_code;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};

/// The content type of gRPC requests and replies.
pub(crate) const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const TE: HeaderName = HeaderName::from_static("te");
const TRAILERS: HeaderValue = HeaderValue::from_static("trailers");

/// How `deadline service` calls its downstream, and `deadline call` its URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum DownstreamProtocol {
    /// HTTP/1.1.
    #[default]
    Http1,
    /// HTTP/2 without TLS, by prior knowledge: one connection, a stream per call.
    H2c,
    /// gRPC unary calls over h2c: the budget goes in `grpc-timeout` too, and the reply's
    /// `grpc-status` decides.
    Grpc,
}

impl DownstreamProtocol {
    /// Whether the calls go over HTTP/2.
    pub(crate) fn is_http2(self) -> bool {
        self != DownstreamProtocol::Http1
    }

    /// The name on the command line (and in JSON).
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DownstreamProtocol::Http1 => "http1",
            DownstreamProtocol::H2c => "h2c",
            DownstreamProtocol::Grpc => "grpc",
        }
    }
}

/// One gRPC message: the uncompressed flag, the big-endian length, the bytes.
pub(crate) fn frame(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(u32::try_from(message.len()).unwrap_or(u32::MAX));
    out.put_slice(message);
    out.freeze()
}

/// A unary gRPC reply body: one message, then trailers; or nothing (trailers-only).
#[derive(Debug, Default)]
pub(crate) struct GrpcBody {
    message: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(message) = self.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && self.trailers.is_none()
    }
}

impl GrpcBody {
    /// A body of one message (`message`, already framed), then `trailers`.
    pub(crate) fn unary(message: Bytes, trailers: HeaderMap) -> GrpcBody {
        GrpcBody {
            message: Some(message),
            trailers: Some(trailers),
        }
    }
}

/// A downstream gRPC call to `url` (any path), carrying request id `id`. The call is a read,
/// so it carries the id as its `Idempotency-Key` too: it may be retried as the HTTP GET is.
pub(crate) fn request(url: &str, id: &str) -> Result<Request<Full<Bytes>>, http::Error> {
    let mut builder = Request::post(url)
        .header(CONTENT_TYPE, APPLICATION_GRPC)
        .header(TE, TRAILERS);
    if let Ok(value) = HeaderValue::from_str(id) {
        builder = builder
            .header(REQUEST_ID_HEADER, value.clone())
            .header(deadline_http::IDEMPOTENCY_KEY, value);
    }
    builder.body(Full::new(frame(b"")))
}

/// The call a hop makes to its downstream at `url` for request id `id`: a gRPC unary call
/// ([`request`]) when `grpc`, else an HTTP GET carrying the id.
pub(crate) fn downstream_request(
    url: String,
    id: &str,
    grpc: bool,
) -> Result<Request<Full<Bytes>>, http::Error> {
    if grpc {
        return request(&url, id);
    }
    let mut call = Request::get(url);
    if let Ok(value) = HeaderValue::from_str(id) {
        call = call.header(REQUEST_ID_HEADER, value);
    }
    call.body(Full::new(Bytes::new()))
}

/// A gRPC reply as read by a client.
#[derive(Debug)]
pub(crate) struct GrpcReply {
    pub code: GrpcCode,
    /// `grpc-message`, decoded.
    pub message: String,
    /// The reply message's bytes as text (empty without a message).
    pub payload: String,
    /// The reply message's bytes as they came.
    pub payload_bytes: Bytes,
    pub trace: Option<String>,
}

/// Reads a gRPC response: the status from the headers (trailers-only) or from the trailers
/// after the body; a response with neither is UNKNOWN, as gRPC clients read it.
pub(crate) async fn read_reply<B>(response: Response<B>) -> anyhow::Result<GrpcReply>
where
    B: Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let (parts, body) = response.into_parts();
    if parts.headers.contains_key(GRPC_STATUS_HEADER) {
        return Ok(reply(parts.status, &parts.headers, None, &[]));
    }
    let collected = body.collect().await.context("reading the gRPC reply")?;
    let trailers = collected.trailers().cloned();
    let data = collected.to_bytes();
    Ok(reply(
        parts.status,
        &parts.headers,
        trailers.as_ref(),
        &data,
    ))
}

/// A gRPC reply from a response's parts, read: `grpc-status` and `grpc-message` from the
/// headers when they carry it (trailers-only), else from the trailers; a response with neither
/// is UNKNOWN and a non-200 one is mapped by gRPC's HTTP rules (a proxy's error page). The
/// trace is taken from the headers, else from the trailers. `data` is the body as received: the
/// payload is its first message without the 5-byte prefix.
pub(crate) fn reply(
    status: StatusCode,
    headers: &HeaderMap,
    trailers: Option<&HeaderMap>,
    data: &[u8],
) -> GrpcReply {
    let status_map = match trailers {
        Some(trailers) if !headers.contains_key(GRPC_STATUS_HEADER) => trailers,
        _ => headers,
    };
    let trace = headers
        .get(TRACE_HEADER)
        .or_else(|| trailers.and_then(|t| t.get(TRACE_HEADER)))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let code = if status == StatusCode::OK {
        GrpcCode::of_headers(status_map).unwrap_or(GrpcCode::Other(2))
    } else {
        // Not a gRPC answer at all (a proxy's error page): gRPC's HTTP mapping.
        grpc_code(status)
    };
    let message = status_map
        .get(GRPC_MESSAGE_HEADER)
        .map(|m| decode_message(m.as_bytes()))
        .unwrap_or_default();
    let payload_bytes = data
        .get(5..)
        .map(|m| {
            let len = u32::from_be_bytes([data[1], data[2], data[3], data[4]]);
            let len = usize::try_from(len).unwrap_or(usize::MAX).min(m.len());
            Bytes::copy_from_slice(&m[..len])
        })
        .unwrap_or_default();
    GrpcReply {
        code,
        message,
        payload: String::from_utf8_lossy(&payload_bytes).into_owned(),
        payload_bytes,
        trace,
    }
}

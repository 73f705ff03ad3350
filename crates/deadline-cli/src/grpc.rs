//! gRPC for the `deadline` command: the wire format a unary call needs (length-prefixed
//! messages, `grpc-status` in trailers or trailers-only headers), the service's gRPC answers
//! and downstream calls, and the gRPC user of `demo --protocol grpc` and `load --protocol grpc`.
//!
//! The service's work has no schema: a gRPC request on any path is a unary call whose message
//! bytes are ignored, and the reply is one message holding the same text an HTTP caller gets
//! in its body. The enforce layer gives its own answers (DEADLINE_EXCEEDED, INVALID_ARGUMENT)
//! in gRPC's terms already; this module does the same for the handler's answers.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::{BufMut, Bytes, BytesMut};
use clap::ValueEnum;
use deadline::grpc::{GRPC_MESSAGE_HEADER, GRPC_STATUS_HEADER, GrpcCode, decode_message};
use deadline::{Budget, TRACE_HEADER};
use deadline_http::enforce::REQUEST_ID_HEADER;
use deadline_http::enforce::answer::{grpc_code, grpc_trailers_only, http_status};
use deadline_http::propagate::{BodyError, CallBody};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;

use crate::harness::Hop;
use crate::reply::text;
use crate::users::{Heard, UserClient, UserResult, hear, one_user, user_client};

const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const TE: HeaderName = HeaderName::from_static("te");
const TRAILERS: HeaderValue = HeaderValue::from_static("trailers");

/// How the demo's and the load's users call the edge (and so how every hop calls the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub(crate) enum Protocol {
    /// HTTP/1.1 GETs with `Deadline-Budget-Ms`.
    #[default]
    Http1,
    /// gRPC unary calls over h2c with `grpc-timeout`, as a gRPC client sends them.
    Grpc,
}

impl Protocol {
    /// `hops`, each told to call the next one this way.
    pub(crate) fn on(self, mut hops: Vec<Hop>) -> Vec<Hop> {
        for hop in &mut hops {
            hop.args.extend(self.hop_args());
        }
        hops
    }

    /// The `deadline service` flags that make each hop call the next one this way.
    fn hop_args(self) -> Vec<String> {
        match self {
            Protocol::Http1 => Vec::new(),
            Protocol::Grpc => vec!["--downstream-protocol".to_owned(), "grpc".to_owned()],
        }
    }
}

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

/// The handler's plain answer in gRPC's terms: a 200 becomes one message with its text and
/// `grpc-status: 0`; anything else a trailers-only status (504 DEADLINE_EXCEEDED, and so on)
/// whose message is the text. Headers (the trace among them) are kept.
pub(crate) async fn into_grpc(response: Response<Full<Bytes>>) -> Response<GrpcBody> {
    let (parts, body) = response.into_parts();
    let text = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(never) => match never {},
    };
    let mut response = if parts.status == StatusCode::OK {
        let mut trailers = HeaderMap::new();
        trailers.insert(GRPC_STATUS_HEADER, GrpcCode::Ok.to_header_value());
        let mut response = Response::new(GrpcBody {
            message: Some(frame(&text)),
            trailers: Some(trailers),
        });
        response
            .headers_mut()
            .insert(CONTENT_TYPE, APPLICATION_GRPC);
        response
    } else {
        grpc_trailers_only(grpc_code(parts.status), &String::from_utf8_lossy(&text))
    };
    for (name, value) in &parts.headers {
        if name != CONTENT_TYPE && name != http::header::CONTENT_LENGTH {
            response.headers_mut().insert(name, value.clone());
        }
    }
    response
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

/// The service's answer once its downstream gRPC call got `response`, as the HTTP path words
/// it: the reply's text on OK, `NAME: downstream answered DEADLINE_EXCEEDED: …` as a 504, any
/// other status as a 502.
pub(crate) async fn downstream_answer(
    name: &str,
    response: Response<CallBody<Incoming>>,
) -> Response<Full<Bytes>> {
    let reply = match read_reply(response).await {
        Ok(reply) => reply,
        Err(err) => {
            if let Some(error) = err.downcast_ref::<BodyError>() {
                return crate::reply::body_failed(name, error);
            }
            return text(
                StatusCode::BAD_GATEWAY,
                format!("{name}: downstream reply lost: {err:#}\n"),
            );
        }
    };
    match reply.code {
        GrpcCode::Ok => {
            // The message's bytes as they came, not grown by replacement characters.
            let mut ok = text(StatusCode::OK, String::new());
            *ok.body_mut() = Full::new(reply.payload_bytes);
            ok
        }
        GrpcCode::DeadlineExceeded => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "{name}: downstream answered {}: {}\n",
                reply.code, reply.message
            ),
        ),
        code => text(
            StatusCode::BAD_GATEWAY,
            format!("{name}: downstream answered {code}: {}\n", reply.message),
        ),
    }
}

/// The users of the demo and the load: HTTP/1.1 or gRPC over one h2c connection.
#[derive(Debug, Clone)]
pub(crate) enum Users {
    Http(UserClient),
    Grpc(Client<HttpConnector, Full<Bytes>>),
}

impl Users {
    pub(crate) fn new(protocol: Protocol) -> Users {
        match protocol {
            Protocol::Http1 => Users::Http(user_client()),
            Protocol::Grpc => {
                let mut connector = HttpConnector::new();
                connector.set_nodelay(true);
                Users::Grpc(
                    Client::builder(hyper_util::rt::TokioExecutor::new())
                        .http2_only(true)
                        .build(connector),
                )
            }
        }
    }

    /// One user, as [`one_user`]: sends with `budget_ms` (in `grpc-timeout` for gRPC, as a gRPC
    /// client with that timeout does) and `gives_up` (in `X-Request-Deadline`), waits at most
    /// `wait`, then gives up (dropping the call, which resets its stream or closes its
    /// connection).
    pub(crate) async fn one(
        &self,
        url: &str,
        id: &str,
        budget_ms: Option<u64>,
        gives_up: Option<HeaderValue>,
        wait: Duration,
    ) -> anyhow::Result<UserResult> {
        let client = match self {
            Users::Http(client) => {
                return one_user(client, url, id, budget_ms, gives_up, wait).await;
            }
            Users::Grpc(client) => client,
        };
        let mut call = request(url, id).context("building the user's call")?;
        call.headers_mut().remove(deadline_http::IDEMPOTENCY_KEY);
        if let Some(value) = gives_up {
            call.headers_mut()
                .insert(deadline::absolute::REQUEST_DEADLINE_HEADER, value);
        }
        if let Some(budget) = budget_ms.and_then(Budget::from_millis) {
            call.headers_mut().insert(
                deadline::header::GRPC_TIMEOUT_HEADER,
                deadline::dialect::grpc_timeout(budget),
            );
        }
        let attempt = async {
            let reply = read_reply(client.request(call).await?).await?;
            Ok(Heard {
                status: http_status(reply.code).as_u16(),
                trace: reply.trace,
                body: if reply.code == GrpcCode::Ok {
                    reply.payload
                } else {
                    format!("{}: {}", reply.code, reply.message)
                },
                grpc: Some(reply.code),
            })
        };
        Ok(hear(wait, attempt).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn plain_answers_become_grpc_answers() {
        let ok = into_grpc(text(StatusCode::OK, "inventory: done in 5 ms\n".into())).await;
        assert_eq!(ok.status(), StatusCode::OK);
        assert_eq!(ok.headers()["content-type"], "application/grpc");
        let collected = ok.into_body().collect().await.unwrap();
        assert_eq!(collected.trailers().unwrap()["grpc-status"], "0");
        assert_eq!(
            collected.to_bytes(),
            frame(b"inventory: done in 5 ms\n").as_ref()
        );

        let late = into_grpc(text(
            StatusCode::GATEWAY_TIMEOUT,
            "orders: downstream answered DEADLINE_EXCEEDED: 100% late\n".into(),
        ))
        .await;
        assert_eq!(late.status(), StatusCode::OK);
        assert_eq!(late.headers()["grpc-status"], "4");
        assert_eq!(
            late.headers()["grpc-message"],
            "orders: downstream answered DEADLINE_EXCEEDED: 100%25 late"
        );
        assert_eq!(late.headers()["content-type"], "application/grpc");
        assert!(late.body().is_end_stream());
    }
}

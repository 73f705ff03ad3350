//! The layer's own answers in the caller's terms: plain HTTP, gRPC or Connect.
//!
//! The layer answers some requests itself: 504 when the deadline ran out (on arrival, in the
//! queue, or cut at the cutoff), 400 for a malformed budget header, and whatever status a
//! policy that refuses work uses (503 to shed load). A plain HTTP caller gets that status and
//! the text as a `text/plain` body. Two kinds of callers read such an answer wrongly:
//!
//! - **gRPC** (`content-type: application/grpc` or `application/grpc+…`): gRPC clients map a
//!   bare HTTP 504 to UNAVAILABLE, which means "retry me", the opposite of what a spent deadline
//!   calls for. They are answered *trailers-only*: HTTP 200 whose headers end the stream and
//!   carry `grpc-status` and `grpc-message` (the same text, percent-encoded, without its final
//!   newline). 504 becomes DEADLINE_EXCEEDED (4), 400 INVALID_ARGUMENT (3), 503 and 502
//!   UNAVAILABLE (14), 429 RESOURCE_EXHAUSTED (8), anything else INTERNAL (13).
//! - **Connect** unary (a `connect-protocol-version` header): the Connect protocol keeps the
//!   HTTP status but wants a JSON body `{"code":"deadline_exceeded","message":"…"}`
//!   (`invalid_argument` for 400, `unavailable` for 503 and 502, `resource_exhausted` for 429, else
//!   `internal`).
//!
//! The `Deadline-Trace` header goes on every one of these answers, as on plain HTTP ones. A
//! response the inner service wrote (a success, or a gRPC status of its own) passes through
//! untouched: only the layer's own answers are translated. The hop's trace and hold report
//! record a handler's trailers-only gRPC status as the HTTP status it stands for
//! ([`status_of`]), so a gRPC hop that ran out of time reads `504` there, as an HTTP one does.

use bytes::Bytes;
use deadline::grpc::{GRPC_MESSAGE_HEADER, GRPC_STATUS_HEADER, GrpcCode, encode_message};
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};

use super::body::EnforceBody;
use super::recorder::Recorder;

pub use super::caller::{CONNECT_PROTOCOL_VERSION, Caller};

const APPLICATION_GRPC: HeaderValue = HeaderValue::from_static("application/grpc");
const APPLICATION_JSON: HeaderValue = HeaderValue::from_static("application/json");

/// The gRPC status for what plain HTTP would get as `status`: 504 is DEADLINE_EXCEEDED, 400
/// INVALID_ARGUMENT, 503 UNAVAILABLE (shed: safe to retry) and 502 too (as gRPC's own mapping
/// of HTTP statuses has it), 429 RESOURCE_EXHAUSTED, 499 CANCELLED, anything else INTERNAL.
pub fn grpc_code(status: StatusCode) -> GrpcCode {
    match status {
        StatusCode::GATEWAY_TIMEOUT => GrpcCode::DeadlineExceeded,
        StatusCode::BAD_REQUEST => GrpcCode::InvalidArgument,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::BAD_GATEWAY => GrpcCode::Unavailable,
        StatusCode::TOO_MANY_REQUESTS => GrpcCode::ResourceExhausted,
        StatusCode::OK => GrpcCode::Ok,
        status if status == CLIENT_CLOSED => GrpcCode::Cancelled,
        _ => GrpcCode::Other(13),
    }
}

/// The HTTP status a gRPC status stands for, the reverse of [`grpc_code`]: OK is 200,
/// DEADLINE_EXCEEDED 504, INVALID_ARGUMENT 400, UNAVAILABLE 503, RESOURCE_EXHAUSTED 429,
/// CANCELLED 499 (nginx's "client closed request"), anything else 500.
pub fn http_status(code: GrpcCode) -> StatusCode {
    match code {
        GrpcCode::Ok => StatusCode::OK,
        GrpcCode::DeadlineExceeded => StatusCode::GATEWAY_TIMEOUT,
        GrpcCode::InvalidArgument => StatusCode::BAD_REQUEST,
        GrpcCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        GrpcCode::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        GrpcCode::Cancelled => CLIENT_CLOSED,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

const CLIENT_CLOSED: StatusCode = match StatusCode::from_u16(499) {
    Ok(status) => status,
    Err(_) => StatusCode::BAD_REQUEST,
};

/// The status the handler's `response` to `caller` stands for, as the hop's trace and hold
/// record it: for a gRPC caller, [`status_of`]; for any other, its HTTP status.
pub(crate) fn delivered_status<B>(caller: Caller, response: &Response<B>) -> StatusCode {
    match caller {
        Caller::Grpc => status_of(response),
        Caller::Http | Caller::Connect => response.status(),
    }
}

/// The status `response` stands for: its HTTP status, unless its headers carry a readable,
/// non-zero `grpc-status` (a trailers-only gRPC answer), which reads as [`http_status`] says.
pub fn status_of<B>(response: &Response<B>) -> StatusCode {
    match GrpcCode::of_headers(response.headers()) {
        None | Some(GrpcCode::Ok) => response.status(),
        Some(code) => http_status(code),
    }
}

/// The Connect error code for `status` (see [`grpc_code`] for the mapping).
pub fn connect_code(status: StatusCode) -> &'static str {
    match grpc_code(status) {
        GrpcCode::DeadlineExceeded => "deadline_exceeded",
        GrpcCode::InvalidArgument => "invalid_argument",
        GrpcCode::Unavailable => "unavailable",
        GrpcCode::ResourceExhausted => "resource_exhausted",
        _ => "internal",
    }
}

/// A trailers-only gRPC answer: HTTP 200, `content-type: application/grpc`, `grpc-status` and
/// `grpc-message` (`message`, without a final newline, percent-encoded), and an empty body, so
/// the headers end the stream.
pub fn grpc_trailers_only<B>(code: GrpcCode, message: &str) -> Response<B>
where
    B: Default,
{
    let mut response = Response::new(B::default());
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, APPLICATION_GRPC);
    headers.insert(GRPC_STATUS_HEADER, code.to_header_value());
    headers.insert(
        GRPC_MESSAGE_HEADER,
        encode_message(message.trim_end_matches('\n')),
    );
    response
}

/// The Connect unary error body for `status` and `message`:
/// `{"code":"deadline_exceeded","message":"…"}`.
pub fn connect_error_body(status: StatusCode, message: &str) -> String {
    let mut body = String::with_capacity(message.len() + 48);
    body.push_str("{\"code\":\"");
    body.push_str(connect_code(status));
    body.push_str("\",\"message\":");
    json_string(&mut body, message.trim_end_matches('\n'));
    body.push('}');
    body
}

/// Appends `text` as a JSON string literal.
fn json_string(out: &mut String, text: &str) {
    use std::fmt::Write as _;
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

const TEXT_PLAIN: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");

/// A plain-text answer with `status`.
pub(crate) fn text_response<B>(
    status: StatusCode,
    body: EnforceBody<B>,
) -> Response<EnforceBody<B>> {
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, TEXT_PLAIN);
    response
}

/// The layer's own answer with `status` and `message`, in `caller`'s terms; its body reports
/// the hold (through `recorder`) when written. The trace header is the caller's to add.
pub(crate) fn own<B>(
    caller: Caller,
    status: StatusCode,
    message: String,
    recorder: Recorder,
) -> Response<EnforceBody<B>> {
    match caller {
        Caller::Http => text_response(status, EnforceBody::text(message, Some(recorder))),
        Caller::Grpc => {
            let (parts, ()) = grpc_trailers_only::<()>(grpc_code(status), &message).into_parts();
            Response::from_parts(parts, EnforceBody::empty(recorder))
        }
        Caller::Connect => {
            let body = Bytes::from(connect_error_body(status, &message));
            let mut response = Response::new(EnforceBody::bytes(body, recorder));
            *response.status_mut() = status;
            response
                .headers_mut()
                .insert(CONTENT_TYPE, APPLICATION_JSON);
            response
        }
    }
}

#[cfg(test)]
mod tests {
    use http::{HeaderMap, HeaderName};

    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn callers_are_told_apart_by_their_headers() {
        assert_eq!(Caller::of(&headers(&[])), Caller::Http);
        for grpc in [
            "application/grpc",
            "application/grpc+proto",
            "application/grpc;x=y",
        ] {
            assert_eq!(
                Caller::of(&headers(&[("content-type", grpc)])),
                Caller::Grpc
            );
        }
        assert_eq!(
            Caller::of(&headers(&[("content-type", "application/grpc-web")])),
            Caller::Http
        );
        assert_eq!(
            Caller::of(&headers(&[
                ("content-type", "application/json"),
                ("connect-protocol-version", "1")
            ])),
            Caller::Connect
        );
    }

    #[test]
    fn statuses_map_to_grpc_and_connect_codes() {
        let cases = [
            (504, 4, "deadline_exceeded"),
            (400, 3, "invalid_argument"),
            (503, 14, "unavailable"),
            (502, 14, "unavailable"),
            (429, 8, "resource_exhausted"),
            (500, 13, "internal"),
        ];
        for (status, code, connect) in cases {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(grpc_code(status).code(), code, "{status}");
            assert_eq!(connect_code(status), connect, "{status}");
        }
    }

    #[test]
    fn grpc_answers_read_as_the_status_they_stand_for() {
        for status in [200, 504, 400, 503, 429, 500, 499] {
            let status = StatusCode::from_u16(status).unwrap();
            assert_eq!(http_status(grpc_code(status)), status, "{status}");
        }
        let late: Response<()> = grpc_trailers_only(GrpcCode::DeadlineExceeded, "late");
        assert_eq!(status_of(&late), StatusCode::GATEWAY_TIMEOUT);
        let fine = Response::new(());
        assert_eq!(status_of(&fine), StatusCode::OK);
    }

    #[test]
    fn trailers_only_carries_the_text_percent_encoded() {
        let response: Response<()> = grpc_trailers_only(
            GrpcCode::DeadlineExceeded,
            "deadline exceeded at inventory: 100% spent\n",
        );
        assert_eq!(response.status(), StatusCode::OK);
        let h = response.headers();
        assert_eq!(h["content-type"], "application/grpc");
        assert_eq!(h["grpc-status"], "4");
        assert_eq!(
            h["grpc-message"],
            "deadline exceeded at inventory: 100%25 spent"
        );
    }

    #[test]
    fn connect_bodies_are_json() {
        let body = connect_error_body(
            StatusCode::GATEWAY_TIMEOUT,
            "deadline \"exceeded\" at a\\b\u{1}\n",
        );
        assert_eq!(
            body,
            r#"{"code":"deadline_exceeded","message":"deadline \"exceeded\" at a\\b\u0001"}"#
        );
    }
}

//! gRPC calls: the budget in gRPC's own header, and a gRPC status read as the HTTP status it
//! stands for.
//!
//! A gRPC request (`content-type: application/grpc…`) carries its budget in `grpc-timeout` as
//! well as in `Deadline-Budget-Ms`: a gRPC server that knows nothing of this library still
//! learns its deadline. The value is the same callee budget, in the finest unit whose count
//! fits gRPC's 8 digits, truncated (never rounded up, so the callee is never told more).
//!
//! A gRPC server answers HTTP 200 whatever happened and puts the outcome in `grpc-status`. When
//! the status is in the response headers (a *trailers-only* answer, which is how gRPC servers,
//! this crate's enforce layer and tonic alike answer a call that failed before any reply), the
//! call judges it as the HTTP status it stands for: UNAVAILABLE (14) as a 503, retried;
//! DEADLINE_EXCEEDED (4) as a 504, retried as a 504 is; any other non-zero status is final, as
//! a 4xx is. The call's trace records that status. A status that comes in the body's trailers,
//! after a reply message, is not read here: the body is the caller's to read, and a call that
//! got that far is returned as it is.

use deadline::Budget;
use deadline::grpc::{GRPC_STATUS_HEADER, GrpcCode, is_grpc_content_type};
use deadline::header::GRPC_TIMEOUT_HEADER;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Request, Response, StatusCode};

use crate::enforce::answer;

/// Whether a request with these headers is a gRPC call.
fn is_grpc(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .is_some_and(|ct| is_grpc_content_type(ct.as_bytes()))
}

/// For a gRPC request, sets `grpc-timeout` to `budget` (replacing any value), or removes it when
/// there is no budget to send. Other requests are left alone.
pub(super) fn set_timeout<B>(request: &mut Request<B>, budget: Option<Budget>) {
    let headers = request.headers_mut();
    if !is_grpc(headers) {
        return;
    }
    match budget {
        Some(budget) => {
            headers.insert(GRPC_TIMEOUT_HEADER, deadline::dialect::grpc_timeout(budget));
        }
        None => {
            headers.remove(GRPC_TIMEOUT_HEADER);
        }
    }
}

/// The status `response` stands for, as the call's trace records it: its HTTP status, unless
/// its headers carry a non-zero gRPC status (trailers-only): UNAVAILABLE reads as 503,
/// DEADLINE_EXCEEDED as 504, and so on (see [`answer::http_status`]). Whether it is retried is
/// [`is_retryable`]'s to say.
pub(super) fn status_of<RB>(response: &Response<RB>) -> StatusCode {
    answer::status_of(response)
}

/// Whether an attempt that got `response` failed in a way another attempt may fix: a 5xx, or a
/// gRPC UNAVAILABLE or DEADLINE_EXCEEDED; never any other gRPC status.
pub(super) fn is_retryable<RB>(response: &Response<RB>) -> bool {
    match grpc_status(response.headers()) {
        Some(GrpcCode::Unavailable | GrpcCode::DeadlineExceeded) => true,
        Some(GrpcCode::Ok) | None => response.status().is_server_error(),
        Some(_) => false,
    }
}

/// The gRPC status in `headers`, if there is a readable one.
fn grpc_status(headers: &HeaderMap) -> Option<GrpcCode> {
    headers
        .get(GRPC_STATUS_HEADER)
        .and_then(|v| GrpcCode::parse(v.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grpc_request() -> Request<()> {
        Request::builder()
            .header("content-type", "application/grpc")
            .header("grpc-timeout", "99S")
            .body(())
            .unwrap()
    }

    #[test]
    fn grpc_requests_carry_the_budget_in_grpc_timeout() {
        let mut request = grpc_request();
        set_timeout(&mut request, Budget::from_millis(550));
        assert_eq!(request.headers()["grpc-timeout"], "550000u");
        let all: Vec<_> = request.headers().get_all("grpc-timeout").iter().collect();
        assert_eq!(all.len(), 1);
        set_timeout(&mut request, Budget::from_millis(123_456_789));
        assert_eq!(request.headers()["grpc-timeout"], "123456S");
        set_timeout(&mut request, None);
        assert!(!request.headers().contains_key("grpc-timeout"));

        let mut plain = Request::new(());
        set_timeout(&mut plain, Budget::from_millis(550));
        assert!(!plain.headers().contains_key("grpc-timeout"));
    }

    fn answer(status: u16, grpc: Option<&'static str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(grpc) = grpc {
            builder = builder.header("grpc-status", grpc);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn grpc_statuses_read_as_http_statuses() {
        let cases = [
            (200, None, 200, false),
            (200, Some("0"), 200, false),
            (200, Some("14"), 503, true),
            (200, Some("4"), 504, true),
            (200, Some("3"), 400, false),
            (200, Some("8"), 429, false),
            (200, Some("2"), 500, false),
            (200, Some("1"), 499, false),
            (200, Some("junk"), 200, false),
            (503, None, 503, true),
        ];
        for (http, grpc, expected, retry) in cases {
            let response = answer(http, grpc);
            assert_eq!(status_of(&response).as_u16(), expected, "{http} {grpc:?}");
            assert_eq!(is_retryable(&response), retry, "{http} {grpc:?}");
        }
    }
}

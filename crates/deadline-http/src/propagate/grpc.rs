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
use deadline::grpc::{GrpcCode, is_grpc};
use deadline::header::GRPC_TIMEOUT_HEADER;
use http::{Request, Response, StatusCode};

use crate::enforce::answer;

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

/// How a call reads `response`, its `grpc-status` parsed once: the status it stands for, as the
/// call's trace records it (its HTTP status, unless its headers carry a non-zero gRPC status:
/// UNAVAILABLE reads as 503, DEADLINE_EXCEEDED as 504, and so on; see
/// [`answer::http_status`]), and whether it failed in a way another attempt may fix: a 5xx, or
/// a gRPC UNAVAILABLE or DEADLINE_EXCEEDED, never any other gRPC status; or a 429 (or gRPC's
/// RESOURCE_EXHAUSTED, which stands for one) that says when to come back.
pub(super) fn verdict<RB>(response: &Response<RB>) -> (StatusCode, bool) {
    let code = GrpcCode::of_headers(response.headers());
    let (status, retryable) = match code {
        Some(GrpcCode::Ok) | None => (response.status(), response.status().is_server_error()),
        Some(code) => (
            answer::http_status(code),
            matches!(code, GrpcCode::Unavailable | GrpcCode::DeadlineExceeded),
        ),
    };
    let retryable = retryable || deadline::plan::retry::retryable_4xx(status, response.headers());
    (status, retryable)
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
            let (status, retryable) = verdict(&answer(http, grpc));
            assert_eq!(status.as_u16(), expected, "{http} {grpc:?}");
            assert_eq!(retryable, retry, "{http} {grpc:?}");
        }
    }

    /// gRPC's RESOURCE_EXHAUSTED stands for 429: with a pushback it is retried like one, though
    /// its HTTP status is 200.
    #[test]
    fn a_grpc_resource_exhausted_with_pushback_is_retryable_like_a_429() {
        let response = |pushback: Option<&str>| {
            let mut builder = http::Response::builder()
                .status(StatusCode::OK)
                .header("content-type", "application/grpc")
                .header("grpc-status", "8");
            if let Some(ms) = pushback {
                builder = builder.header("grpc-retry-pushback-ms", ms);
            }
            builder.body(()).unwrap()
        };
        assert!(verdict(&response(Some("10"))).1);
        assert!(!verdict(&response(None)).1);
    }
}

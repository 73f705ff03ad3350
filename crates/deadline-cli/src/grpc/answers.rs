//! The gRPC answers of `deadline service`: the handler's plain answer put in gRPC's terms for
//! a gRPC caller, and a downstream's gRPC reply worded as the HTTP path words it.

use bytes::Bytes;
use deadline::grpc::{GRPC_STATUS_HEADER, GrpcCode};
use deadline_http::enforce::answer::{grpc_code, grpc_trailers_only};
use deadline_http::propagate::{BodyError, CallBody};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::wire::{APPLICATION_GRPC, GrpcBody, frame, read_reply};
use crate::reply::text;

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
        let mut response = Response::new(GrpcBody::unary(frame(&text), trailers));
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

#[cfg(test)]
mod tests {
    use http_body::Body as _;

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

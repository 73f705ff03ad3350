//! `deadline service --stream COUNT:INTERVAL_MS`: a hop whose answer is a stream.
//!
//! After its work, the hop answers 200 at once and then sends COUNT chunks, one every
//! INTERVAL_MS (`inventory: chunk 3 of 20\n`): as a chunked HTTP/1.1 body or HTTP/2 data
//! frames, or, to a gRPC caller on any path, a server stream of COUNT messages (one message per
//! data frame) closed by trailers `grpc-status: 0`. The deadline covers the whole stream: the
//! enforce layer ends it at the cutoff (see `deadline_http::enforce::stream`), and with
//! `--no-enforce` it runs to its end.
//!
//! A hop with `--downstream` streams its downstream's answer through instead of making chunks of
//! its own: after its work it calls the downstream and relays the body frame by frame as it
//! arrives (gRPC messages and their trailers included), so COUNT and INTERVAL_MS matter on the
//! last hop only. When this hop's cutoff comes first, its enforce layer ends the relayed stream
//! and drops the downstream call, which closes (HTTP/1.1) or resets (HTTP/2) it, so the
//! downstream sees its caller hang up.

use std::convert::Infallible;
use std::fmt;
use std::pin::Pin;
use std::str::FromStr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use deadline::grpc::{GRPC_MESSAGE_HEADER, GRPC_STATUS_HEADER, GrpcCode};
use deadline_http::enforce::REQUEST_ID_HEADER;
use deadline_http::propagate::{BodyError, CallBody, DeadlineClient};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use tokio::time::Sleep;

use crate::grpc::wire;

/// The most chunks a stream may have.
const MAX_COUNT: u32 = 1_000_000;
/// The longest interval between chunks, in ms (an hour).
const MAX_INTERVAL_MS: u64 = 3_600_000;

/// `--stream COUNT:INTERVAL_MS`: how many chunks, and how far apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StreamArg {
    pub count: u32,
    pub interval: Duration,
}

impl FromStr for StreamArg {
    type Err = String;

    fn from_str(s: &str) -> Result<StreamArg, String> {
        let (count, interval) = s
            .split_once(':')
            .ok_or_else(|| format!("{s:?}: expected COUNT:INTERVAL_MS, as in 20:100"))?;
        let count = digits(count, u64::from(MAX_COUNT), "COUNT")?;
        let interval = digits(interval, MAX_INTERVAL_MS, "INTERVAL_MS")?;
        if count == 0 {
            return Err(format!("{s:?}: COUNT must be at least 1"));
        }
        Ok(StreamArg {
            // `digits` bounded it by MAX_COUNT.
            count: u32::try_from(count).unwrap_or(MAX_COUNT),
            interval: Duration::from_millis(interval),
        })
    }
}

/// A decimal number of at most `max`, digits only (no sign, no spaces).
fn digits(text: &str, max: u64, what: &str) -> Result<u64, String> {
    if text.is_empty() || text.len() > 12 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{what} {text:?}: expected whole digits"));
    }
    match text.parse::<u64>() {
        Ok(n) if n <= max => Ok(n),
        _ => Err(format!("{what} {text}: at most {max}")),
    }
}

impl fmt::Display for StreamArg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.count, self.interval.as_millis())
    }
}

/// The streamed answer's body: chunks made here, or a downstream's body relayed.
#[derive(Debug)]
pub(crate) enum StreamBody {
    Chunks(Chunks),
    Relay(CallBody<Incoming>),
    Done(Option<Bytes>),
}

impl Body for StreamBody {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        match self.get_mut() {
            StreamBody::Chunks(chunks) => Pin::new(chunks).poll_frame(cx).map_err(|n| match n {}),
            StreamBody::Relay(body) => Pin::new(body).poll_frame(cx),
            StreamBody::Done(text) => Poll::Ready(text.take().map(|t| Ok(Frame::data(t)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            StreamBody::Chunks(chunks) => chunks.is_end_stream(),
            StreamBody::Relay(body) => body.is_end_stream(),
            StreamBody::Done(text) => text.is_none(),
        }
    }
}

/// COUNT chunks, one every INTERVAL: chunk N leaves N intervals after the head.
pub(crate) struct Chunks {
    name: Arc<str>,
    sleep: Pin<Box<Sleep>>,
    interval: Duration,
    sent: u32,
    count: u32,
    /// gRPC: one length-prefixed message per chunk, then `grpc-status: 0`.
    grpc: bool,
    ended: bool,
}

impl fmt::Debug for Chunks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Chunks")
            .field("sent", &self.sent)
            .field("count", &self.count)
            .field("grpc", &self.grpc)
            .finish_non_exhaustive()
    }
}

impl Chunks {
    pub(crate) fn new(name: Arc<str>, stream: StreamArg, grpc: bool) -> Chunks {
        Chunks {
            name,
            sleep: Box::pin(tokio::time::sleep(stream.interval)),
            interval: stream.interval,
            sent: 0,
            count: stream.count,
            grpc,
            ended: false,
        }
    }
}

impl Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.sent == self.count {
            if self.grpc && !self.ended {
                self.ended = true;
                let mut trailers = HeaderMap::new();
                trailers.insert(GRPC_STATUS_HEADER, GrpcCode::Ok.to_header_value());
                return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
            }
            self.ended = true;
            return Poll::Ready(None);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.sleep.deadline() + self.interval;
        self.sleep.as_mut().reset(next);
        self.sent += 1;
        let text = format!("{}: chunk {} of {}", self.name, self.sent, self.count);
        let data = if self.grpc {
            wire::frame(text.as_bytes())
        } else {
            Bytes::from(text + "\n")
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

/// What a streaming hop needs besides its request.
pub(crate) struct StreamHop<'a> {
    pub name: &'a Arc<str>,
    pub stream: StreamArg,
    /// The downstream to stream through: its base URL and client, and whether it is called
    /// over gRPC.
    pub downstream: Option<(&'a str, &'a DeadlineClient)>,
    pub grpc_downstream: bool,
}

/// The streamed answer to `req` (its work already done): chunks of this hop's own, or its
/// downstream's stream relayed. `grpc`: the caller speaks gRPC.
pub(crate) async fn answer(
    hop: StreamHop<'_>,
    req: &Request<Incoming>,
    grpc: bool,
) -> Response<StreamBody> {
    let Some((base, client)) = hop.downstream else {
        let body = StreamBody::Chunks(Chunks::new(hop.name.clone(), hop.stream, grpc));
        return with_type(Response::new(body), grpc);
    };
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let call = match wire::downstream_request(format!("{base}{path}"), id, hop.grpc_downstream) {
        Ok(call) => call,
        Err(err) => {
            let text = format!("{}: bad downstream request: {err}", hop.name);
            return failure(StatusCode::INTERNAL_SERVER_ERROR, text, grpc);
        }
    };
    match client.send(call).await {
        Ok(response) => relay(hop.name, response, grpc).await,
        Err(err) if err.is_deadline() => {
            let text = format!("deadline exceeded at {}: {err}", hop.name);
            failure(StatusCode::GATEWAY_TIMEOUT, text, grpc)
        }
        Err(err) => {
            let text = format!(
                "{}: downstream failed: {err}{}",
                hop.name,
                crate::reply::cause(&err)
            );
            failure(StatusCode::BAD_GATEWAY, text, grpc)
        }
    }
}

/// The downstream's `response`, relayed: a success's body frame by frame as it arrives; an
/// answer that failed before its stream began becomes this hop's own failure with its text.
async fn relay(
    name: &str,
    response: Response<CallBody<Incoming>>,
    grpc: bool,
) -> Response<StreamBody> {
    let status = response.status();
    let trailers_only = response.headers().get(GRPC_STATUS_HEADER).cloned();
    if status.is_success() && trailers_only.is_none() {
        let body = StreamBody::Relay(response.into_body());
        return with_type(Response::new(body), grpc);
    }
    if let Some(code) = trailers_only {
        // A gRPC failure before any message: passed on in the same terms.
        let mut answer = with_type(Response::new(StreamBody::Done(None)), true);
        answer.headers_mut().insert(GRPC_STATUS_HEADER, code);
        if let Some(message) = response.headers().get(GRPC_MESSAGE_HEADER) {
            answer
                .headers_mut()
                .insert(GRPC_MESSAGE_HEADER, message.clone());
        }
        return answer;
    }
    let body = match response.into_body().collect().await {
        Ok(body) => String::from_utf8_lossy(&body.to_bytes()).into_owned(),
        Err(err) => format!("(reply body lost: {err})"),
    };
    let status = if status == StatusCode::GATEWAY_TIMEOUT {
        status
    } else {
        StatusCode::BAD_GATEWAY
    };
    let text = format!(
        "{name}: downstream answered {}: {}",
        status.as_u16(),
        body.trim_end()
    );
    failure(status, text, grpc)
}

/// This hop's own failure with `status` and `text`, in the caller's terms.
fn failure(status: StatusCode, text: String, grpc: bool) -> Response<StreamBody> {
    if grpc {
        let code = deadline_http::enforce::answer::grpc_code(status);
        let answer: Response<()> = deadline_http::enforce::answer::grpc_trailers_only(code, &text);
        let (parts, ()) = answer.into_parts();
        return Response::from_parts(parts, StreamBody::Done(None));
    }
    let mut answer = Response::new(StreamBody::Done(Some(Bytes::from(text + "\n"))));
    *answer.status_mut() = status;
    answer.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    answer
}

/// `response` with the content type of a stream: `application/grpc` or plain text.
fn with_type(mut response: Response<StreamBody>, grpc: bool) -> Response<StreamBody> {
    let value = if grpc {
        HeaderValue::from_static("application/grpc")
    } else {
        HeaderValue::from_static("text/plain; charset=utf-8")
    };
    response.headers_mut().insert(CONTENT_TYPE, value);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_arguments_parse_or_say_what_is_wrong() {
        let arg: StreamArg = "20:100".parse().unwrap();
        assert_eq!(arg.count, 20);
        assert_eq!(arg.interval, Duration::from_millis(100));
        assert_eq!(arg.to_string(), "20:100");
        for bad in [
            "",
            "20",
            "20:",
            ":100",
            "0:100",
            "+5:100",
            "5:-1",
            "5:1.5",
            "5: 10",
            "٣:10",
            "1000001:1",
            "5:3600001",
            "99999999999999999999:1",
        ] {
            assert!(bad.parse::<StreamArg>().is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn chunks_leave_one_interval_apart_and_grpc_ends_with_status_ok() {
        let arg = StreamArg {
            count: 3,
            interval: Duration::from_millis(5),
        };
        let t0 = tokio::time::Instant::now();
        let mut http = Chunks::new(Arc::from("inventory"), arg, false);
        let mut seen = Vec::new();
        while let Some(frame) = http.frame().await {
            seen.push(frame.unwrap().into_data().unwrap());
            // Chunk N leaves no earlier than N intervals after the start.
            let elapsed = tokio::time::Instant::now().saturating_duration_since(t0);
            assert!(elapsed >= arg.interval * seen.len() as u32);
        }
        assert_eq!(
            seen,
            [
                Bytes::from("inventory: chunk 1 of 3\n"),
                Bytes::from("inventory: chunk 2 of 3\n"),
                Bytes::from("inventory: chunk 3 of 3\n"),
            ]
        );
        let mut grpc = Chunks::new(Arc::from("inventory"), arg, true);
        let mut messages = 0;
        let mut trailers = None;
        while let Some(frame) = grpc.frame().await {
            match frame.unwrap().into_data() {
                Ok(data) => {
                    assert_eq!(data[0], 0);
                    messages += 1;
                }
                Err(frame) => trailers = frame.into_trailers().ok(),
            }
        }
        assert_eq!(messages, 3);
        assert_eq!(trailers.unwrap()["grpc-status"], "0");
        assert!(grpc.is_end_stream());
    }
}

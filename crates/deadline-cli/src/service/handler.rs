//! The work of `deadline service`, behind the enforce layer: the outage window, the slowness
//! rule, the wait (or the database statement), then the downstream call and its answer in this
//! hop's words; with `--stream`, a streamed answer instead. A gRPC caller gets the same answer
//! in gRPC's terms.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use deadline_http::enforce::REQUEST_ID_HEADER;
use deadline_http::propagate::{BodyError, CallBody, DeadlineClient};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Either, Full};
use hyper::body::Incoming;
use tokio::time::Instant;

use super::args::ServiceArgs;
use crate::grpc::answers::{downstream_answer, into_grpc};
use crate::grpc::wire::{self, DownstreamProtocol, GrpcBody};
use crate::outage::{Outage, PerAttempt, do_not_retry};
use crate::reply::{body_failed, text};
use crate::slowness::is_slow;
use crate::stream::{self, StreamArg, StreamBody, StreamHop};

/// What the handler needs for every request of one service: its name, how long to work, the
/// slowness rule, and the downstream to call.
pub(super) struct HandlerConfig {
    name: String,
    work: Duration,
    slow_work: Duration,
    slow_share: f64,
    seed: u64,
    downstream: Option<(String, DeadlineClient)>,
    /// Whether this hop retries its downstream (then its caller is told not to).
    retries_downstream: bool,
    outage: Option<Outage>,
    per_attempt: Option<PerAttempt>,
    /// Whether the downstream is called with gRPC.
    grpc_downstream: bool,
    /// With `--postgres`: the work is a statement on this database.
    database: Option<crate::pg::Database>,
    /// `--stream`: the answer is a stream.
    stream: Option<StreamArg>,
}

impl HandlerConfig {
    /// The handler's settings from the flags, with the downstream (its base URL and client)
    /// and the database already made.
    pub(super) fn new(
        args: &ServiceArgs,
        downstream: Option<(String, DeadlineClient)>,
        database: Option<crate::pg::Database>,
    ) -> HandlerConfig {
        HandlerConfig {
            name: args.name.clone(),
            work: Duration::from_millis(args.work),
            slow_work: Duration::from_millis(args.slow_work),
            slow_share: args.slow_share,
            seed: args.seed,
            downstream,
            retries_downstream: args.attempts > 1,
            outage: args.outage.map(Outage::new),
            per_attempt: args.slow_per_attempt.then(PerAttempt::default),
            grpc_downstream: args.downstream_protocol == DownstreamProtocol::Grpc,
            database,
            stream: args.stream,
        }
    }
}

/// The body of the work's answers: plain, the same in gRPC's terms, or a stream.
pub(super) type WorkBody = Either<Either<Full<Bytes>, GrpcBody>, StreamBody>;

/// One request's answer: streamed with `--stream`, else the handler's answer, in gRPC's terms
/// for a gRPC caller.
pub(super) async fn answer(
    config: Arc<HandlerConfig>,
    name: Arc<str>,
    req: Request<Incoming>,
) -> Result<Response<WorkBody>, Infallible> {
    // A gRPC caller gets the same answer in gRPC's terms.
    let grpc = deadline::grpc::is_grpc(req.headers());
    if config.stream.is_some() {
        let streamed = streamed(&config, &name, req, grpc).await;
        return Ok::<_, Infallible>(streamed.map(Either::Right));
    }
    let response = handle(config, req).await?;
    Ok(if grpc {
        into_grpc(response)
            .await
            .map(|body| Either::Left(Either::Right(body)))
    } else {
        response.map(|body| Either::Left(Either::Left(body)))
    })
}

/// The plain answer: the work, then the downstream call if there is one.
async fn handle(
    config: Arc<HandlerConfig>,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let id = req
        .headers()
        .get(REQUEST_ID_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if config
        .outage
        .as_ref()
        .is_some_and(|o| o.active(Instant::now()))
    {
        return Ok(Outage::answer(&config.name));
    }
    let slow = match &config.per_attempt {
        Some(per_attempt) => per_attempt.is_slow(&id, config.seed, config.slow_share),
        None => is_slow(&id, config.seed, config.slow_share),
    };
    let work = if slow { config.slow_work } else { config.work };
    let started = Instant::now();
    match &config.database {
        Some(database) => {
            if let Err(answer) = database.work(&config.name, &id, work).await {
                return Ok(answer);
            }
        }
        None => tokio::time::sleep(work).await,
    }

    let Some((base, client)) = &config.downstream else {
        return Ok(text(
            StatusCode::OK,
            format!(
                "{}: done in {} ms\n",
                config.name,
                Instant::now()
                    .saturating_duration_since(started)
                    .as_millis()
            ),
        ));
    };
    let answer = call_downstream(&config, base, client, &req, &id).await;
    // A downstream failure this hop already retried is not for its caller to retry again.
    if answer.status() == StatusCode::BAD_GATEWAY && config.retries_downstream {
        return Ok(do_not_retry(answer));
    }
    Ok(answer)
}

/// The downstream call for `req` (its path appended to `base`), carrying request id `id`, and
/// its outcome as this hop's answer.
async fn call_downstream(
    config: &HandlerConfig,
    base: &str,
    client: &DeadlineClient,
    req: &Request<Incoming>,
    id: &str,
) -> Response<Full<Bytes>> {
    let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let call = match wire::downstream_request(format!("{base}{path}"), id, config.grpc_downstream) {
        Ok(call) => call,
        Err(err) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("{}: bad downstream request: {err}\n", config.name),
            );
        }
    };
    match client.send(call).await {
        Ok(response) if config.grpc_downstream => downstream_answer(&config.name, response).await,
        Ok(response) => http_answer(&config.name, response).await,
        Err(err) if err.is_deadline() => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("deadline exceeded at {}: {err}\n", config.name),
        ),
        Err(err) => text(
            StatusCode::BAD_GATEWAY,
            format!(
                "{}: downstream failed: {err}{}\n",
                config.name,
                crate::reply::cause(&err)
            ),
        ),
    }
}

/// A downstream's HTTP reply as this hop's answer: its body on success, a 504 passed on as a
/// 504, anything else as a 502, each naming this hop.
async fn http_answer(name: &str, response: Response<CallBody<Incoming>>) -> Response<Full<Bytes>> {
    let status = response.status();
    // The body as it came, bytes not text: a reply that is not UTF-8 is passed on as it is, not
    // grown by replacement characters.
    match read_body(response.into_body()).await {
        Err(err) => body_failed(name, &err),
        Ok(body) if status.is_success() => relay(StatusCode::OK, "", body),
        Ok(body) if status == StatusCode::GATEWAY_TIMEOUT => relay(
            StatusCode::GATEWAY_TIMEOUT,
            &format!("{name}: downstream answered 504: "),
            body,
        ),
        Ok(body) => relay(
            StatusCode::BAD_GATEWAY,
            &format!("{name}: downstream answered {status}: "),
            body,
        ),
    }
}

/// A downstream's body read whole, each frame's bytes copied into one buffer as it arrives.
///
/// Not `collect`: that keeps every frame as it came, and a frame of a chunked HTTP/1.1 body is a
/// slice of the connection's read buffer, which it keeps alive. A body of 1-byte chunks held a
/// list entry and a share of a read buffer per byte: 1.6 MB of them grew the hop by 60 MB, and
/// `--max-body 65536` (which counts bytes) tripped only after 5 MB. Copied, a body holds its own
/// length (at most twice, while the buffer grows), whatever shape it came in.
async fn read_body(body: CallBody<Incoming>) -> Result<Bytes, BodyError> {
    let mut body = std::pin::pin!(body);
    let mut joined = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            joined.extend_from_slice(&data);
        }
    }
    Ok(joined.freeze())
}

/// A downstream's reply passed on with `status`: `prefix`, then its body's bytes as they came.
fn relay(status: StatusCode, prefix: &str, body: Bytes) -> Response<Full<Bytes>> {
    let body = if prefix.is_empty() {
        body
    } else {
        let mut joined = Vec::with_capacity(prefix.len() + body.len());
        joined.extend_from_slice(prefix.as_bytes());
        joined.extend_from_slice(&body);
        Bytes::from(joined)
    };
    let mut response = text(status, String::new());
    *response.body_mut() = Full::new(body);
    response
}

/// `--stream`: the work, then a streamed answer (see [`crate::stream`]).
async fn streamed(
    config: &HandlerConfig,
    name: &Arc<str>,
    req: Request<Incoming>,
    grpc: bool,
) -> Response<StreamBody> {
    tokio::time::sleep(config.work).await;
    let hop = StreamHop {
        name,
        stream: config.stream.unwrap_or(StreamArg {
            count: 1,
            interval: Duration::ZERO,
        }),
        downstream: config.downstream.as_ref().map(|(b, c)| (b.as_str(), c)),
        grpc_downstream: config.grpc_downstream,
    };
    stream::answer(hop, &req, grpc).await
}

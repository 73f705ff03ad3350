//! A three-service tonic chain (gateway → orders → inventory) with the deadline layers and no
//! deadline code in the handlers: the example `tonic_chain` runs it, and its test runs in the
//! workspace suite.
//!
//! # The server side
//!
//! Each hop is a plain tonic server with [`EnforceDeadlineLayer`] added by
//! `Server::builder().layer(..)`. A user layer sits inside tonic's own `GrpcTimeout` (and its
//! concurrency limit, if one is set), so:
//!
//! - leave tonic's `concurrency_limit_per_connection` off and give the enforce layer the worker
//!   slots, or time spent waiting for tonic's permit would not count against the budget;
//! - the enforce layer answers DEADLINE_EXCEEDED at the deadline less its reply reserve, before
//!   tonic's own timer would answer CANCELLED at the deadline itself.
//!
//! # The client side
//!
//! A `tonic::transport::Channel` is a buffer served by a worker task, so a task-local deadline is
//! invisible inside it: the propagate layer wraps the channel **from outside**
//! ([`DeadlineChannel`]). tonic's request body is a stream, which cannot be sent twice; unary
//! requests are small, so [`DeadlineChannel`] holds the body in memory first, which lets the
//! planner re-send it on a retry.
//!
//! The channel has a timer of its own: tonic's client stops waiting when the request's
//! `grpc-timeout` (which the propagate layer sets to the callee's budget) runs out, and reports
//! that as CANCELLED "Timeout expired". The callee's enforce layer normally answers first (at its
//! deadline less its reply reserve), but on a busy machine its answer can arrive after the
//! channel gave up. [`DeadlineChannel`] reports that, and every other way the deadline ended the
//! call, as DEADLINE_EXCEEDED naming the callee, so the handler passes on the right status.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use deadline::CallPolicy;
use deadline_http::{CallError, EnforceDeadlineLayer, PropagateDeadline};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Response, Status};
use tower::Service;
use tower::util::MapRequest;

/// The generated protobuf and gRPC code of `proto/chain.proto`.
#[allow(missing_docs, unreachable_pub, missing_debug_implementations)]
pub mod pb {
    tonic::include_proto!("chain");
}

use pb::hop_client::HopClient;
use pb::hop_server::{Hop, HopServer};
use pb::{HopReply, HopRequest, WatchRequest};

/// A boxed error, as tower and tonic erase them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

type ToTonic = fn(http::Request<Full<Bytes>>) -> http::Request<tonic::body::Body>;

/// A `tonic::transport::Channel` wrapped from outside by the propagate layer: every call made
/// through it carries what is left of the current request's deadline, in `grpc-timeout` and
/// `Deadline-Budget-Ms`, and is planned and retried by the call planner.
#[derive(Clone, Debug)]
pub struct DeadlineChannel {
    inner: PropagateDeadline<MapRequest<Channel, ToTonic>>,
    target: Arc<str>,
}

impl DeadlineChannel {
    /// `channel` with calls made under `policy`, named `target` in the hop's trace.
    pub fn new(channel: Channel, policy: CallPolicy, target: &str) -> DeadlineChannel {
        let to_tonic: ToTonic = |request| request.map(tonic::body::Body::new);
        DeadlineChannel {
            inner: PropagateDeadline::new(MapRequest::new(channel, to_tonic), policy)
                .target(target),
            target: Arc::from(target),
        }
    }
}

impl Service<http::Request<tonic::body::Body>> for DeadlineChannel {
    type Response = http::Response<tonic::body::Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // The propagate layer awaits the channel's readiness inside each attempt's wait.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let mut inner = self.inner.clone();
        let target = self.target.clone();
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            // A unary request: one small message, held so an attempt can be sent again.
            let body = body.collect().await?.to_bytes();
            let request = http::Request::from_parts(parts, Full::new(body));
            // Called here, on the handler's task, so the propagate layer sees its deadline.
            let response = inner
                .call(request)
                .await
                .map_err(|e| deadline_status(&target, e))?;
            // The reply's body is bounded by the attempt's wait: one still arriving when the
            // deadline passes ends as DEADLINE_EXCEEDED, as the call itself would.
            Ok(response.map(|body| {
                tonic::body::Body::new(body.map_err(move |e| -> BoxError {
                    if e.is_deadline() {
                        Box::new(Status::deadline_exceeded(e.to_string()))
                    } else {
                        Box::new(e)
                    }
                }))
            }))
        })
    }
}

/// The call's error as tonic's client should report it: DEADLINE_EXCEEDED when the deadline
/// ended the call (the planner's verdict, or the channel's own `grpc-timeout` timer), else the
/// error as it is.
fn deadline_status(target: &str, error: CallError) -> BoxError {
    let timed_out = {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&error);
        std::iter::from_fn(|| {
            let current = source?;
            source = current.source();
            Some(current)
        })
        .any(|e| e.is::<tonic::TimeoutExpired>())
    };
    if error.is_deadline() || timed_out {
        Box::new(Status::deadline_exceeded(format!(
            "deadline exceeded while calling {target}: {error}"
        )))
    } else {
        Box::new(error)
    }
}

/// One hop of the chain: works `work`, then (orders, gateway) calls the next hop and passes
/// its reply or its status on, adding a line that says what budget it was given.
#[derive(Clone, Debug)]
pub struct HopService {
    name: &'static str,
    work: Duration,
    next: Option<HopClient<DeadlineChannel>>,
}

#[tonic::async_trait]
impl Hop for HopService {
    async fn handle(&self, request: Request<HopRequest>) -> Result<Response<HopReply>, Status> {
        let seen = |name: &str| {
            request
                .metadata()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none")
                .to_owned()
        };
        let line = format!(
            "{}: grpc-timeout {}, deadline-budget-ms {}",
            self.name,
            seen("grpc-timeout"),
            seen("deadline-budget-ms")
        );
        let message = request.into_inner();
        let work = match &self.next {
            Some(_) => self.work,
            None => Duration::from_millis(u64::from(message.inventory_work_ms)),
        };
        tokio::time::sleep(work).await;
        let mut hops = match &self.next {
            // The call carries this hop's deadline: no code here says so.
            Some(next) => next.clone().handle(message).await?.into_inner().hops,
            None => Vec::new(),
        };
        hops.push(line);
        Ok(Response::new(HopReply { hops }))
    }

    type WatchStream = Replies;

    async fn watch(&self, request: Request<WatchRequest>) -> Result<Response<Replies>, Status> {
        let WatchRequest { count, interval_ms } = request.into_inner();
        let interval = Duration::from_millis(u64::from(interval_ms));
        Ok(Response::new(Replies {
            name: self.name,
            sleep: Box::pin(tokio::time::sleep(interval)),
            interval,
            sent: 0,
            count,
        }))
    }
}

/// The replies of [`Hop::watch`]: `count` of them, one every `interval`, each one line
/// (`gateway: reply 3 of 20`). Dropped (as the enforce layer does at the cutoff), it stops.
#[derive(Debug)]
pub struct Replies {
    name: &'static str,
    sleep: Pin<Box<tokio::time::Sleep>>,
    interval: Duration,
    sent: u32,
    count: u32,
}

impl tonic::codegen::tokio_stream::Stream for Replies {
    type Item = Result<HopReply, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.sent == self.count {
            return Poll::Ready(None);
        }
        if self.sleep.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        let next = self.sleep.deadline() + self.interval;
        self.sleep.as_mut().reset(next);
        self.sent += 1;
        let line = format!("{}: reply {} of {}", self.name, self.sent, self.count);
        Poll::Ready(Some(Ok(HopReply { hops: vec![line] })))
    }
}

/// The three running servers; dropped or [`stop`](Chain::stop)ped, they shut down.
#[derive(Debug)]
pub struct Chain {
    /// Where the gateway listens.
    pub gateway: SocketAddr,
    stops: Vec<oneshot::Sender<()>>,
    tasks: Vec<JoinHandle<Result<(), tonic::transport::Error>>>,
}

impl Chain {
    /// Starts inventory, orders and gateway on `127.0.0.1`, free ports, each hop working
    /// `hop_work` before its call (inventory works what each request asks).
    pub async fn start(hop_work: Duration) -> Result<Chain, BoxError> {
        let mut chain = Chain {
            gateway: SocketAddr::from(([127, 0, 0, 1], 0)),
            stops: Vec::new(),
            tasks: Vec::new(),
        };
        let inventory = chain.hop("inventory", hop_work, None).await?;
        let orders = chain.hop("orders", hop_work, Some(inventory)).await?;
        chain.gateway = chain.hop("gateway", hop_work, Some(orders)).await?.0;
        Ok(chain)
    }

    async fn hop(
        &mut self,
        name: &'static str,
        work: Duration,
        next: Option<(SocketAddr, &'static str)>,
    ) -> Result<(SocketAddr, &'static str), BoxError> {
        let next = match next {
            Some((addr, target)) => {
                let channel = Endpoint::from_shared(format!("http://{addr}"))?
                    .tcp_nodelay(true)
                    .connect_lazy();
                // One attempt of at most 5 s; the deadline shortens it.
                let policy = CallPolicy::new(Duration::from_secs(5), 1)?;
                Some(HopClient::new(DeadlineChannel::new(
                    channel, policy, target,
                )))
            }
            None => None,
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = oneshot::channel::<()>();
        let service = HopService { name, work, next };
        let server = Server::builder()
            .layer(EnforceDeadlineLayer::new(name).slots(16))
            .add_service(HopServer::new(service))
            .serve_with_incoming_shutdown(
                TcpIncoming::from(listener).with_nodelay(Some(true)),
                async {
                    let _ = stopped.await;
                },
            );
        self.stops.push(stop);
        self.tasks.push(tokio::spawn(server));
        Ok((addr, name))
    }

    /// Stops the three servers and waits for them.
    pub async fn stop(mut self) -> Result<(), BoxError> {
        for stop in self.stops.drain(..) {
            let _ = stop.send(());
        }
        for task in self.tasks.drain(..) {
            task.await??;
        }
        Ok(())
    }
}

/// What the user got from one call: the hops' lines, or the status.
#[derive(Debug)]
pub struct UserCall {
    /// How long the user waited.
    pub took: Duration,
    /// The reply's lines (inventory's first), or the status the call failed with.
    pub result: Result<Vec<String>, Status>,
}

/// Calls the gateway as a user with its own `timeout` (tonic's `grpc-timeout`), asking
/// inventory to work `inventory_work`.
pub async fn call_as_user(
    gateway: SocketAddr,
    timeout: Duration,
    inventory_work: Duration,
) -> Result<UserCall, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{gateway}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client = HopClient::new(channel);
    let mut request = Request::new(HopRequest {
        item: "book".to_owned(),
        inventory_work_ms: u32::try_from(inventory_work.as_millis()).unwrap_or(u32::MAX),
    });
    request.set_timeout(timeout);
    let start = tokio::time::Instant::now();
    let result = client.handle(request).await.map(|r| r.into_inner().hops);
    Ok(UserCall {
        took: tokio::time::Instant::now().saturating_duration_since(start),
        result,
    })
}

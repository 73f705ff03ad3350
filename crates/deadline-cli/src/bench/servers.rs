//! The servers of every variant: one runtime on its own OS thread(s), and how each variant
//! serves the trivial handler.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::thread;
use std::time::Duration;

use anyhow::{Context as _, anyhow};
use bytes::Bytes;
use deadline::CallPolicy;
use deadline_http::enforce::{SERVER_TIMING_HEADER, TraceExposure};
use deadline_http::otel::Tracing;
use deadline_http::{DeadlineClient, EnforceDeadlineLayer};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tower::limit::ConcurrencyLimitLayer;
use tower::{Layer, ServiceBuilder, service_fn};
use tower_http::set_header::{SetResponseHeader, SetResponseHeaderLayer};
use tower_http::timeout::TimeoutLayer;

use super::args::Variant;
use super::machine::current_tid;

/// The servers of every variant, on their own runtime and thread(s).
pub(crate) struct Servers {
    addrs: Vec<(Variant, SocketAddr)>,
    pub(crate) tids: Arc<Mutex<Vec<u32>>>,
    stop: watch::Sender<bool>,
    thread: thread::JoinHandle<anyhow::Result<()>>,
}

impl Servers {
    pub(crate) fn start(threads: usize) -> anyhow::Result<Servers> {
        let tids: Arc<Mutex<Vec<u32>>> = Arc::default();
        let (stop, stop_rx) = watch::channel(false);
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread_tids = tids.clone();
        let thread = thread::Builder::new().name("bench-servers".into()).spawn(
            move || -> anyhow::Result<()> {
                let runtime = server_runtime(threads, thread_tids.clone())?;
                if threads == 1 {
                    // A current-thread runtime runs its tasks on this thread.
                    if let Some(tid) = current_tid() {
                        lock(&thread_tids).push(tid);
                    }
                }
                runtime.block_on(async move {
                    let mut addrs = Vec::new();
                    let mut tasks = Vec::new();
                    for variant in Variant::ALL {
                        let listener = TcpListener::bind("127.0.0.1:0").await?;
                        addrs.push((variant, listener.local_addr()?));
                        tasks.push(tokio::spawn(serve_variant(
                            variant,
                            listener,
                            stop_rx.clone(),
                            Tracing::off(),
                        )));
                    }
                    let _ = ready_tx.send(addrs);
                    for task in tasks {
                        task.await.context("a server task failed")??;
                    }
                    Ok(())
                })
            },
        )?;
        let addrs = ready_rx
            .recv()
            .map_err(|_| anyhow!("the servers did not start"))?;
        Ok(Servers {
            addrs,
            tids,
            stop,
            thread,
        })
    }

    pub(crate) fn addr(&self, variant: Variant) -> SocketAddr {
        self.addrs
            .iter()
            .find(|(v, _)| *v == variant)
            .map(|(_, a)| *a)
            .expect("every variant is served")
    }

    pub(crate) fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        self.thread
            .join()
            .map_err(|_| anyhow!("the server thread panicked"))?
    }
}

/// The servers' runtime: current-thread for one thread, else multi-thread with `threads`
/// workers; either way the threads' ids go to `tids` (for their CPU time).
pub(crate) fn server_runtime(
    threads: usize,
    tids: Arc<Mutex<Vec<u32>>>,
) -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(if threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .on_thread_start(move || {
                if let Some(tid) = current_tid() {
                    lock(&tids).push(tid);
                }
            })
            .enable_all()
            .build()?
    })
}

/// Locks `mutex`, whether or not a panicking holder poisoned it (the data is thread ids).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The trivial handler: `200 ok`.
async fn ok<B>(_request: Request<B>) -> Result<Response<Full<Bytes>>, std::convert::Infallible> {
    Ok(Response::new(Full::new(Bytes::from_static(b"ok\n"))))
}

/// The peer stack's whole-request timeout: about the budget every request carries.
const PEER_TIMEOUT: Duration = Duration::from_secs(2);

/// The peer stack's concurrency limit: far above the generator's connections, so requests never
/// wait for it, as the enforce variant (which has no slots) never waits either. The peer still
/// pays for taking and giving back a permit on every request.
const PEER_CONCURRENCY: usize = 1_024;

/// The chain edges' per-call timeout (the peer's reqwest timeout, the propagate layer's
/// per-attempt timeout).
const CALL_TIMEOUT: Duration = Duration::from_secs(1);

/// The peer stack's type: tower-http's timeout over tower's concurrency limit.
type PeerStack<S> = tower_http::timeout::Timeout<tower::limit::ConcurrencyLimit<S>>;

/// What a Rust service uses today where this library's enforce layer would go: tower-http's
/// `TimeoutLayer` (a 504 when the whole request runs past [`PEER_TIMEOUT`]) over tower's
/// `ConcurrencyLimitLayer`.
fn peer_stack<S>(inner: S) -> PeerStack<S> {
    ServiceBuilder::new()
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            PEER_TIMEOUT,
        ))
        .layer(ConcurrencyLimitLayer::new(PEER_CONCURRENCY))
        .service(inner)
}

/// The `peer-headers` variant's `Deadline-Trace`: what the enforce layer (`enforce-all`) writes for a bench
/// request that waited for nothing and worked under a millisecond, with the budget every
/// request carries by default (1950 ms). With another `--budget`, or none, `enforce` writes a
/// different budget or none while this and [`PEER_TIMING`] stay.
const PEER_TRACE: &str = "bench@0-0=200,.queue@0-0,.work@0-0=ok,^0=1950";
/// The `peer-headers` variant's `Server-Timing`, for the same request.
const PEER_TIMING: &str = "queue;dur=0.004, work;dur=0.011, budget;dur=1950";

/// The `peer-headers` stack's type: two of tower-http's `SetResponseHeader` over [`peer_stack`].
type PeerHeaders<S> = SetResponseHeader<SetResponseHeader<PeerStack<S>, HeaderValue>, HeaderValue>;

/// The peer stack with two more answer headers, as a tower-http user adds them:
/// `SetResponseHeaderLayer` twice over [`peer_stack`], inserting the trace and appending
/// `Server-Timing` as the enforce layer does (it keeps a `Server-Timing` the handler wrote). A
/// static `HeaderValue` is cloned without allocating or checking its bytes, so what this adds
/// to `peer` is what two header lines cost whatever makes their values (the response's header
/// map allocated, the two names hashed and added, hyper writing the lines, the map dropped),
/// plus the two layers' own futures.
fn peer_headers_stack<S>(inner: S) -> PeerHeaders<S> {
    // The inner layer inserts first: the trace, then `Server-Timing`, as the enforce layer does.
    ServiceBuilder::new()
        .layer(SetResponseHeaderLayer::appending(
            SERVER_TIMING_HEADER,
            HeaderValue::from_static(PEER_TIMING),
        ))
        .layer(SetResponseHeaderLayer::overriding(
            deadline::TRACE_HEADER,
            HeaderValue::from_static(PEER_TRACE),
        ))
        .service(peer_stack(inner))
}

/// The peer chain's client: reqwest (HTTP/1 only, no TLS, no proxy lookup), `TCP_NODELAY` on.
fn reqwest_client() -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .build()
        .context("building the reqwest client")
}

/// What a peer chain edge answers once its downstream has: the downstream's status and body.
async fn relay_reqwest(result: reqwest::Result<reqwest::Response>) -> Response<Full<Bytes>> {
    let failed = |err: reqwest::Error| {
        let status = if err.is_timeout() {
            StatusCode::GATEWAY_TIMEOUT
        } else {
            StatusCode::BAD_GATEWAY
        };
        (status, Bytes::from(format!("{err}\n")))
    };
    let (status, body) = match result {
        Ok(response) => {
            let status = response.status();
            match response.bytes().await {
                Ok(body) => (status, body),
                Err(err) => failed(err),
            }
        }
        Err(err) => failed(err),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// The client both chain edges use: hyper-util's pooled HTTP/1 client, `TCP_NODELAY` on.
fn pooled_client() -> Client<HttpConnector, Full<Bytes>> {
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    Client::builder(TokioExecutor::new()).build(connector)
}

/// What a chain edge answers once its downstream has: the downstream's status and body.
async fn relay<B>(result: Result<Response<B>, String>) -> Response<Full<Bytes>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: std::fmt::Display,
{
    let (status, body) = match result {
        Ok(response) => {
            let status = response.status();
            match response.into_body().collect().await {
                Ok(body) => (status, body.to_bytes()),
                Err(err) => (StatusCode::BAD_GATEWAY, Bytes::from(format!("{err}\n"))),
            }
        }
        Err(err) => (StatusCode::BAD_GATEWAY, Bytes::from(err + "\n")),
    };
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// Serves `variant` on `listener` (and, for a chain, its second hop on another loopback port)
/// until `stop` turns true, its layers' OpenTelemetry spans going to `tracing`.
pub(crate) async fn serve_variant(
    variant: Variant,
    listener: TcpListener,
    stop: watch::Receiver<bool>,
    tracing: Tracing,
) -> anyhow::Result<()> {
    match variant {
        Variant::Bare => {
            deadline_http::serve(listener, service_fn(ok), until(stop)).await?;
        }
        Variant::Enforce => {
            let service = EnforceDeadlineLayer::new("bench")
                .tracing(tracing)
                .layer(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::EnforceAll => {
            let service = EnforceDeadlineLayer::new("bench")
                .tracing(tracing)
                .trace_exposure(TraceExposure::Always)
                .server_timing(true)
                .context_without_budget(true)
                .layer(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::EnforceMetrics => {
            let mut registry = deadline_http::metrics::Registry::default();
            let metrics = deadline_http::metrics::DeadlineMetrics::register(&mut registry);
            let service = EnforceDeadlineLayer::new("bench")
                .tracing(tracing)
                .record_metrics(&metrics.service("bench"))
                .layer(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::EnforceQuiet => {
            let service = EnforceDeadlineLayer::new("bench")
                .tracing(tracing)
                .trace_exposure(TraceExposure::Off)
                .layer(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::Peer => {
            deadline_http::serve(listener, peer_stack(service_fn(ok)), until(stop)).await?;
        }
        Variant::PeerHeaders => {
            let service = peer_headers_stack(service_fn(ok));
            deadline_http::serve(listener, service, until(stop)).await?;
        }
        Variant::ChainPeer => serve_chain_peer(listener, stop).await?,
        Variant::ChainBare | Variant::ChainDeadline => {
            serve_chain(variant, listener, stop, tracing).await?;
        }
    }
    Ok(())
}

/// Waits until `stop` turns true.
async fn until(mut stop: watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// The chain of peer stacks: an edge calling a second hop through reqwest.
async fn serve_chain_peer(
    listener: TcpListener,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let second = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/bench", second.local_addr()?);
    let client = reqwest_client()?;
    let edge = service_fn(move |_request: Request<Incoming>| {
        let call = client.get(&url).timeout(CALL_TIMEOUT);
        async move { Ok::<_, std::convert::Infallible>(relay_reqwest(call.send().await).await) }
    });
    tokio::try_join!(
        deadline_http::serve(second, peer_stack(service_fn(ok)), until(stop.clone())),
        deadline_http::serve(listener, peer_stack(edge), until(stop)),
    )?;
    Ok(())
}

/// The two-hop chains over a pooled hyper client: bare, or with the deadline layers on both
/// hops and the propagate client between them.
async fn serve_chain(
    variant: Variant,
    listener: TcpListener,
    stop: watch::Receiver<bool>,
    tracing: Tracing,
) -> anyhow::Result<()> {
    let second = TcpListener::bind("127.0.0.1:0").await?;
    let uri: Uri = format!("http://{}/bench", second.local_addr()?).parse()?;
    let client = pooled_client();
    if variant == Variant::ChainBare {
        let edge = service_fn(move |_request: Request<Incoming>| {
            let (client, uri) = (client.clone(), uri.clone());
            async move {
                let mut call = Request::new(Full::new(Bytes::new()));
                *call.uri_mut() = uri;
                let result = client.request(call).await.map_err(|e| e.to_string());
                Ok::<_, std::convert::Infallible>(relay(result).await)
            }
        });
        tokio::try_join!(
            deadline_http::serve(second, service_fn(ok), until(stop.clone())),
            deadline_http::serve(listener, edge, until(stop)),
        )?;
    } else {
        let policy = CallPolicy::new(CALL_TIMEOUT, 3)?;
        let client = DeadlineClient::from_client(client, policy)
            .target("second")
            .tracing(tracing.clone());
        let edge = service_fn(move |_request: Request<Incoming>| {
            let (client, uri) = (client.clone(), uri.clone());
            async move {
                let mut call = Request::new(Full::new(Bytes::new()));
                *call.uri_mut() = uri;
                let result = client.send(call).await.map_err(|e| e.to_string());
                Ok::<_, std::convert::Infallible>(relay(result).await)
            }
        });
        let second_service = EnforceDeadlineLayer::new("second")
            .tracing(tracing.clone())
            .layer(service_fn(ok));
        let edge = EnforceDeadlineLayer::new("edge")
            .tracing(tracing)
            .layer(edge);
        tokio::try_join!(
            deadline_http::serve(second, second_service, until(stop.clone())),
            deadline_http::serve(listener, edge, until(stop)),
        )?;
    }
    Ok(())
}

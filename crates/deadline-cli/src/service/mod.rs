//! `deadline service`: a service whose work is a configurable wait, built on the enforce layer
//! (server side) and the propagate client (outbound calls). The demo and the load command run
//! three of these as separate processes.
//!
//! [`run`] puts the pieces together in the order they must happen: the flags checked
//! ([`args`]), what can fail read before binding, the listeners bound ([`serve`]), the log,
//! metrics and spans ([`observe`]), the database, the downstream client ([`downstream`]), the
//! enforce layer and its hold hook ([`stack`]), request ids ([`ids`]), the work ([`handler`]),
//! the admin paths ([`probe`], [`limits`]); then serving, and the drain at the end ([`drain`]).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use anyhow::Context as _;
use http::Request;
use http_body_util::Either;
use hyper::body::Incoming;
use tower::{ServiceBuilder, ServiceExt as _};

pub(crate) mod args;
mod downstream;
mod drain;
mod handler;
mod ids;
mod limits;
mod observe;
pub(crate) mod probe;
mod serve;
mod stack;

/// Runs the service until SIGINT or SIGTERM, then drains: stops accepting, waits for every
/// request in flight (including baseline work whose caller left), flushes the log.
pub(crate) async fn run(args: args::ServiceArgs) -> anyhow::Result<ExitCode> {
    let policy = args::validate(&args)?;
    #[cfg(unix)]
    raise_open_files();
    // Checked before binding, like the certificates below.
    let otlp_endpoint = args
        .otlp
        .as_deref()
        .map(crate::otlp::endpoint)
        .transpose()?;
    let tls = serve::server_tls(&args)?;
    let downstream_tls = downstream::tls_roots(&args)?;
    let limits = limits::body(&limits::limits(&args, serve::max_connections(&args)))?;
    let (listener, admin_listener) = serve::bind(&args).await?;

    let observers = observe::Observers::new(&args, otlp_endpoint)?;
    let in_flight = Arc::new(AtomicUsize::new(0));
    let database = crate::pg::Database::connect(
        &args.postgres,
        &args.name,
        args.slots,
        Duration::from_millis(args.margin),
        &observers.metrics,
    )
    .await?;
    let downstream = downstream::client(&args, policy, downstream_tls, &observers);
    let config = Arc::new(handler::HandlerConfig::new(&args, downstream, database));
    let name: Arc<str> = Arc::from(args.name.as_str());
    let log = observers.log.clone();
    let enforce = stack::enforce_layer(&args, &observers, in_flight.clone());
    let work = ServiceBuilder::new()
        // Outside the enforce layer but before any waiting: stamp an id and count the request
        // in flight (the hold hook counts it out, exactly once).
        .map_request(ids::stamp(&args.name, in_flight.clone()))
        .layer(enforce.clone())
        .service_fn(move |req| handler::answer(config.clone(), name.clone(), req));
    // The admin paths are answered here, before the request is counted or reaches the enforce
    // layer: they never wait for a slot, are never logged and never reach the work.
    let admin = probe::Admin::new(
        in_flight.clone(),
        log.clone(),
        observers.registry.clone(),
        enforce.clone(),
        limits,
    );
    let public_admin = (!args.no_public_admin).then(|| admin.clone());
    // Boxed: an HTTP/2 stream's task is as large as the future it runs, and keeps that size
    // while its answer waits on the peer, long after the work has ended. Unboxed, this future
    // (the enforce layer's, the work's, the downstream call's) made every open stream cost
    // about 17 KB more; boxed, the memory goes back when the answer is ready.
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let work = work.clone();
        let admin = public_admin.as_ref().and_then(|admin| admin.answer(&req));
        Box::pin(async move {
            if let Some(answer) = admin {
                return Ok(answer.map(Either::Right));
            }
            work.oneshot(req).await.map(|r| r.map(Either::Left))
        })
    });

    let admin_server =
        serve::announce(&args, &listener, admin_listener, tls.is_some(), admin).await?;
    let (shutdown, stopping) = serve::shutdown(&args);
    let options = serve::serve_options(&args);
    match tls {
        Some(tls) => {
            deadline_http::serve::serve_tls(listener, tls, service, shutdown, options).await
        }
        None => deadline_http::serve::serve_with(listener, service, shutdown, options).await,
    }
    .context("serving")?;
    admin_server.stop().await?;
    drain::drain(
        &args,
        stopping.get().copied(),
        &in_flight,
        observers.otlp,
        log,
    )
    .await
}

/// Raises this process's open-file limit to the hard limit: every connection is a file.
#[cfg(unix)]
fn raise_open_files() {
    match crate::fd_limit::raise_open_files() {
        Ok(Some((before, after))) => tracing::info!(
            before,
            after,
            "raised the open-file limit to the hard limit (every connection is a file)"
        ),
        Ok(None) => {}
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
}

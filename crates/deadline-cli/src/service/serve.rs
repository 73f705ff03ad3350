//! How `deadline service` listens and serves: the certificate and the listeners, made before
//! anything else can fail late; the ready lines on standard output; the public port and the
//! admin address apart, each with the connection limits of the flags, until a signal (or
//! standard input closing, when asked) stops both.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use deadline_http::serve::ServeOptions;
use deadline_http::tls::rustls::ServerConfig;
use http::{Request, Response, StatusCode};
use http_body::Body;
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tower::Service;

use super::args::ServiceArgs;
use super::probe::Admin;
use crate::reply::text;
use crate::shutdown::{shutdown_signal, stdin_closed};

/// The errors a served service and its bodies may fail with.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The server configuration of `--tls-cert` and `--tls-key`, read before binding: a bad
/// certificate or key is an error before anything is served.
pub(super) fn server_tls(args: &ServiceArgs) -> anyhow::Result<Option<Arc<ServerConfig>>> {
    Ok(match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(
            deadline_http::tls::server_config_from_pem(cert, key)
                .context("--tls-cert and --tls-key")?,
        ),
        _ => None,
    })
}

/// The listeners of `--listen` and `--admin-listen`.
pub(super) async fn bind(args: &ServiceArgs) -> anyhow::Result<(TcpListener, Option<TcpListener>)> {
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    let admin_listener = match args.admin_listen {
        Some(admin) => Some(
            TcpListener::bind(admin)
                .await
                .with_context(|| format!("binding --admin-listen {admin}"))?,
        ),
        None => None,
    };
    Ok((listener, admin_listener))
}

/// Says where the service listens, serves `service` on `listener` (over `tls` if given) and the
/// admin paths on `admin_listener` until the service is told to stop, and returns when it was
/// told (none if it never was).
pub(super) async fn serve<S, B>(
    args: &ServiceArgs,
    (listener, admin_listener): (TcpListener, Option<TcpListener>),
    tls: Option<Arc<ServerConfig>>,
    service: S,
    admin: Admin,
) -> anyhow::Result<Option<Instant>>
where
    S: Service<Request<Incoming>, Response = Response<B>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let addr = listener.local_addr()?;
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(
            format!(
                "listening on {scheme}://{addr}\n",
                scheme = if tls.is_some() { "https" } else { "http" }
            )
            .as_bytes(),
        )
        .await?;
    let (stop_admin, admin_stopped) = tokio::sync::watch::channel(false);
    let admin_task = match admin_listener {
        Some(listener) => {
            let admin_addr = listener.local_addr()?;
            stdout
                .write_all(format!("admin on http://{admin_addr}\n").as_bytes())
                .await?;
            Some(serve_admin(args, listener, admin, admin_stopped))
        }
        None => None,
    };
    stdout.flush().await?;

    let stop_on_stdin = args.exit_on_stdin_close;
    let stopping = Arc::new(OnceLock::new());
    let stopped_at = stopping.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown_signal() => {}
            () = stdin_closed(), if stop_on_stdin => {}
        }
        let _ = stopped_at.set(Instant::now());
    };
    match tls {
        Some(tls) => {
            deadline_http::serve::serve_tls(listener, tls, service, shutdown, serve_options(args))
                .await
        }
        None => {
            deadline_http::serve::serve_with(listener, service, shutdown, serve_options(args)).await
        }
    }
    .context("serving")?;
    let _ = stop_admin.send(true);
    if let Some(task) = admin_task {
        task.await
            .context("the admin server")?
            .context("serving the admin address")?;
    }
    Ok(stopping.get().copied())
}

/// The admin address apart: its own serve loop, answering the admin paths and 404 to any
/// other, stopped with the public one (when `stopped` turns true).
fn serve_admin(
    args: &ServiceArgs,
    listener: TcpListener,
    admin: Admin,
    mut stopped: tokio::sync::watch::Receiver<bool>,
) -> JoinHandle<std::io::Result<()>> {
    let service = tower::service_fn(move |req: Request<Incoming>| {
        let answer = admin.answer(&req).unwrap_or_else(|| {
            text(
                StatusCode::NOT_FOUND,
                format!("not an admin path: {}\n", req.uri().path()),
            )
        });
        async move { Ok::<_, Infallible>(answer) }
    });
    let shutdown = async move {
        let _ = stopped.wait_for(|stop| *stop).await;
    };
    tokio::spawn(deadline_http::serve::serve_with(
        listener,
        service,
        shutdown,
        serve_options(args),
    ))
}

/// The connection limits of `serve`, from the flags.
fn serve_options(args: &ServiceArgs) -> ServeOptions {
    let options = serve_limits(args);
    match args.tls_handshake_timeout {
        Some(ms) => options.tls_handshake_timeout(Duration::from_millis(ms)),
        None => options,
    }
}

/// The limits of `serve` that do not depend on TLS.
fn serve_limits(args: &ServiceArgs) -> ServeOptions {
    let keep_alive = (args.keep_alive_interval > 0).then(|| {
        (
            Duration::from_millis(args.keep_alive_interval),
            Duration::from_millis(args.keep_alive_timeout),
        )
    });
    ServeOptions::default()
        .header_read_timeout(Duration::from_millis(args.header_timeout))
        .idle_timeout(Duration::from_millis(args.idle_timeout))
        .keep_alive(keep_alive)
        .send_timeout(Duration::from_millis(args.send_timeout))
        .max_connections(args.max_connections)
        .shutdown_grace(Duration::from_secs(args.drain_timeout))
}

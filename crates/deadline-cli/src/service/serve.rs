//! How `deadline service` listens: the certificate and the listeners, made before anything
//! else can fail late; the ready lines on standard output; the admin address's own loop; what
//! tells the service to stop (a signal, or standard input closing when asked); and the
//! connection limits of the flags, for the public port and the admin address alike.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::Context as _;
use deadline_http::serve::ServeOptions;
use deadline_http::tls::rustls::ServerConfig;
use http::{Request, StatusCode};
use hyper::body::Incoming;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::args::ServiceArgs;
use super::probe::Admin;
use crate::reply::text;
use crate::shutdown::{shutdown_signal, stdin_closed};

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

/// The admin address's serve loop, if there is one, and how to stop it.
pub(super) struct AdminServer {
    stop: tokio::sync::watch::Sender<bool>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl AdminServer {
    /// Stops the admin address (with the public port) and waits for its loop to end.
    pub(super) async fn stop(self) -> anyhow::Result<()> {
        let _ = self.stop.send(true);
        if let Some(task) = self.task {
            task.await
                .context("the admin server")?
                .context("serving the admin address")?;
        }
        Ok(())
    }
}

/// Says where the service listens (`https://` with `tls`), then starts the admin address's
/// loop on `admin_listener`, if there is one, and says where that listens too.
pub(super) async fn announce(
    args: &ServiceArgs,
    listener: &TcpListener,
    admin_listener: Option<TcpListener>,
    tls: bool,
    admin: Admin,
) -> anyhow::Result<AdminServer> {
    let addr = listener.local_addr()?;
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(
            format!(
                "listening on {scheme}://{addr}\n",
                scheme = if tls { "https" } else { "http" }
            )
            .as_bytes(),
        )
        .await?;
    let (stop, admin_stopped) = tokio::sync::watch::channel(false);
    let task = match admin_listener {
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
    Ok(AdminServer { stop, task })
}

/// What tells the service to stop: SIGINT or SIGTERM, or standard input closing with
/// `--exit-on-stdin-close`; and where the moment it was told is kept.
pub(super) fn shutdown(
    args: &ServiceArgs,
) -> (impl Future<Output = ()> + use<>, Arc<OnceLock<Instant>>) {
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
    (shutdown, stopping)
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
    // A budget of its own: a flood of the admin address cannot take the public port's files.
    let options = serve_options(args).max_connections(Some(ADMIN_MAX_CONNECTIONS));
    tokio::spawn(deadline_http::serve::serve_with(
        listener, service, shutdown, options,
    ))
}

/// Connections the admin address (`--admin-listen`) may have open at once: enough for a
/// scraper and an operator; beyond it the one that has given nothing for the longest makes
/// room, as on the public port.
const ADMIN_MAX_CONNECTIONS: usize = 16;

/// The connection limits of `serve`, from the flags.
pub(super) fn serve_options(args: &ServiceArgs) -> ServeOptions {
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
        .max_connections(Some(max_connections(args)))
        .max_concurrent_streams(args.max_streams)
        .shutdown_grace(Duration::from_secs(args.drain_timeout))
}

/// The public port's connection limit: `--max-connections`, or its default.
pub(super) fn max_connections(args: &ServiceArgs) -> usize {
    args.max_connections
        .unwrap_or_else(|| default_max_connections(open_file_limit()))
}

/// Files the service keeps for itself beyond its public connections: its listeners, log,
/// downstream connections, the admin address's connections ([`ADMIN_MAX_CONNECTIONS`]) and
/// the database's.
const FILES_KEPT: u64 = 64;

/// The connection limit without `--max-connections`: the library's default (1,024), or less
/// where the open-file limit is lower, so that the limit, not the file table, decides who is
/// refused (the admin address and the downstream keep some files of their own).
fn default_max_connections(file_limit: Option<u64>) -> usize {
    let default = deadline_http::serve::MAX_CONNECTIONS;
    match file_limit {
        Some(limit) => usize::try_from(limit.saturating_sub(FILES_KEPT))
            .unwrap_or(default)
            .clamp(1, default),
        None => default,
    }
}

#[cfg(unix)]
fn open_file_limit() -> Option<u64> {
    crate::fd_limit::soft_limit()
}

#[cfg(not(unix))]
fn open_file_limit() -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::default_max_connections;

    #[test]
    fn the_default_connection_limit_stays_under_the_file_limit() {
        assert_eq!(default_max_connections(None), 1024);
        assert_eq!(default_max_connections(Some(20_000)), 1024);
        assert_eq!(default_max_connections(Some(512)), 448);
        assert_eq!(default_max_connections(Some(10)), 1);
    }
}

//! How the CLI's long-running commands learn to stop: a signal, or standard input closing (the
//! demo and the load command hold their services' stdin, so the services never outlive them).

/// Resolves on SIGINT or SIGTERM (Ctrl-C alone where there is no SIGTERM).
pub(crate) async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Resolves when standard input reaches its end (or fails).
///
/// The read runs on a plain OS thread of its own, not on tokio's blocking pool: a blocking read
/// cannot be cancelled, and a runtime waits for its blocking-pool threads when it shuts down, so
/// a service stopped by a signal while its stdin was still open would never exit. A detached
/// thread ends with the process instead.
pub(crate) async fn stdin_closed() {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            use std::io::Read as _;
            let mut stdin = std::io::stdin();
            let mut buf = [0u8; 64];
            while let Ok(n) = stdin.read(&mut buf) {
                if n == 0 {
                    break;
                }
            }
            let _ = tx.send(());
        });
    match spawned {
        // Resolves when the thread sends, or drops the sender.
        Ok(_) => {
            let _ = rx.await;
        }
        // No thread: never resolve, and rely on the signals.
        Err(_) => std::future::pending().await,
    }
}

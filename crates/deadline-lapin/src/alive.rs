//! Waiting on lapin without trusting it to answer once its connection is gone.
//!
//! lapin ends the operations in flight when a connection fails, but not all of them: an
//! operation handed to its internal queue just after the connection's I/O loop stopped (an
//! acknowledgement, a channel opening) stays queued behind the stop, its answer neither given
//! nor refused, for as long as anything of that connection is held (its channels, their
//! deliveries' ackers; a channel opening is never answered at all). Awaited plainly, such an
//! operation hangs its caller for good: a consumer that acknowledged its last message at the
//! moment the broker went down would never subscribe again. So every channel opening, and
//! every operation on the paths that go on across a broker restart ([`Broker`](crate::Broker)
//! and a [`Consumer`](crate::Consumer)'s subscription and settlements), is awaited in slices of
//! [`LIVENESS`] and given up with an error once, between two slices, its connection or channel
//! no longer reads as up. This module never cuts short an operation on a live connection,
//! however long the broker takes (a connection blocked by a broker alarm still reads as up);
//! a publish has bounds of its own on top, its message's expiry and the broker's give-up time
//! (the [`produce`](crate::produce) module).

use std::future::Future;
use std::time::Duration;

use lapin::{ChannelState, ConnectionState};

/// How long an operation may wait before its connection or channel is looked at: one that died
/// without ending the operation is noticed this late at most.
pub(crate) const LIVENESS: Duration = Duration::from_secs(1);

/// What an operation depends on, looked at between the slices of its wait.
pub(crate) enum Over<'a> {
    /// A connection (opening a channel on it).
    Connection(&'a lapin::Connection),
    /// A channel (its methods, and the settlement of its deliveries).
    Channel(&'a lapin::Channel),
}

impl Over<'_> {
    fn up(&self) -> bool {
        match self {
            Over::Connection(connection) => connection.status().connected(),
            Over::Channel(channel) => channel.status().connected(),
        }
    }

    /// The error of an operation given up, or declined by lapin without being tried (an
    /// acker's `Ok(false)`: its channel had closed or failed). The state it names is the
    /// nearest lapin lets a caller read: a channel that is not closing reads as `Error`, even
    /// one that closed cleanly.
    pub(crate) fn gone(&self, operation: &'static str) -> lapin::Error {
        let kind = match self {
            Over::Connection(connection) if connection.status().closed() => {
                lapin::ErrorKind::InvalidConnectionState(ConnectionState::Closed)
            }
            Over::Connection(_) => lapin::ErrorKind::InvalidConnectionState(ConnectionState::Error),
            Over::Channel(channel) if channel.status().closing() => {
                lapin::ErrorKind::InvalidChannelState(ChannelState::Closing, operation)
            }
            Over::Channel(_) => {
                lapin::ErrorKind::InvalidChannelState(ChannelState::Error, operation)
            }
        };
        lapin::Error::from(kind)
    }
}

/// Waits for `operation` (named `name` in its error) as long as `over` is up: its own answer,
/// or an error once `over` reads as down between two slices of [`LIVENESS`].
pub(crate) async fn while_up<T>(
    over: &Over<'_>,
    name: &'static str,
    operation: impl Future<Output = Result<T, lapin::Error>>,
) -> Result<T, lapin::Error> {
    wait_while(|| over.up(), operation)
        .await
        .unwrap_or_else(|| {
            tracing::warn!(
                operation = name,
                "no answer on a connection or channel that is down; given up"
            );
            Err(over.gone(name))
        })
}

/// The wait itself, over any test of being up: `None` once `up` says no after a slice.
async fn wait_while<O>(up: impl Fn() -> bool, operation: impl Future<Output = O>) -> Option<O> {
    tokio::pin!(operation);
    loop {
        match tokio::time::timeout(LIVENESS, &mut operation).await {
            Ok(output) => return Some(output),
            Err(_) if up() => {}
            Err(_) => return None,
        }
    }
}

/// A new channel on `connection`, its opening given up once the connection is down.
pub(crate) async fn open_channel(
    connection: &lapin::Connection,
) -> Result<lapin::Channel, lapin::Error> {
    while_up(
        &Over::Connection(connection),
        "channel.open",
        connection.create_channel(),
    )
    .await
}

/// The error for an operation given up on a connection that dropped (as the broker's publish
/// loop reports it).
pub(crate) fn connection_closed() -> lapin::Error {
    lapin::Error::from(lapin::ErrorKind::InvalidConnectionState(
        ConnectionState::Closed,
    ))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// An operation lapin never answers is given up within one slice of its connection going
    /// down, and not before: a slow answer on a live connection is waited for.
    #[tokio::test(start_paused = true)]
    async fn an_unanswered_operation_ends_once_its_connection_is_down() {
        let up = Arc::new(AtomicBool::new(true));
        let started = tokio::time::Instant::now();
        let wait = tokio::spawn({
            let up = up.clone();
            async move {
                wait_while(
                    move || up.load(Ordering::SeqCst),
                    std::future::pending::<()>(),
                )
                .await
            }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!wait.is_finished(), "waited while the connection is up");
        up.store(false, Ordering::SeqCst);
        let given_up = tokio::time::timeout(LIVENESS * 2, wait)
            .await
            .expect("given up once the connection is down, not waited for forever");
        assert_eq!(given_up.unwrap(), None);
        let took = tokio::time::Instant::now().saturating_duration_since(started);
        assert!(
            took <= Duration::from_secs(30) + LIVENESS,
            "given up within a slice of going down ({took:?})"
        );
    }

    /// An answer is passed on as it comes, even one that takes many slices.
    #[tokio::test(start_paused = true)]
    async fn a_slow_answer_on_a_live_connection_is_passed_on() {
        let answer = async {
            tokio::time::sleep(LIVENESS * 7 + Duration::from_millis(300)).await;
            17
        };
        assert_eq!(wait_while(|| true, answer).await, Some(17));
        // Ready at once: never looked at the connection.
        assert_eq!(wait_while(|| false, async { 3 }).await, Some(3));
    }
}

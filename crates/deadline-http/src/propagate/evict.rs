//! The pooled client of [`DeadlineClient`](super::DeadlineClient), with a connection an attempt
//! timed out on taken out of the pool.
//!
//! Over HTTP/2 every call to a host shares one connection. When that connection wedges (the
//! peer stops reading it, a middlebox drops its packets) every call on it times out while a new
//! connection would work: the pool keeps handing out the wedged one, because nothing tells it
//! the connection is bad. Two things do here:
//!
//! - **An attempt that runs to the end of its wait** poisons the connection it was sent on
//!   (hyper-util's `Connected::poison`): the pool never hands it out again and the next call
//!   dials. The streams still open on it go on until they end; only reuse stops. An attempt
//!   dropped before its wait ended (a hedge that lost, a caller that hung up) says nothing
//!   about the connection and leaves it alone.
//! - **HTTP/2 keep-alive PINGs** ([`H2_KEEP_ALIVE_INTERVAL`], [`H2_KEEP_ALIVE_TIMEOUT`]): a
//!   connection whose peer does not answer a PING in time is closed, and a closed connection
//!   leaves the pool. This also catches a connection that wedged while idle.
//!
//! Over HTTP/1.1 a timed-out attempt closes its connection anyway (an attempt future dropped
//! mid-request cannot leave its connection reusable); poisoning it too changes nothing.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::{CaptureConnection, HttpConnector, capture_connection};
use hyper_util::client::legacy::{Client, ResponseFuture};
use tokio::time::Instant;
use tower_service::Service;

use super::body::AttemptEnd;

/// How often an HTTP/2 connection of [`DeadlineClient::h2c`](super::DeadlineClient::h2c) is
/// PINGed while calls are open on it: every 10 s.
pub const H2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// How long a PING may go unanswered before the connection is closed: 5 s.
pub const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The pooled HTTP client [`DeadlineClient`](super::DeadlineClient) wraps.
pub(super) type HttpClient = Client<HttpConnector, Full<Bytes>>;

/// `client`, its connections poisoned when an attempt on them times out.
#[derive(Clone, Debug)]
pub(super) struct Evicting {
    pub(super) client: HttpClient,
}

impl Service<Request<Full<Bytes>>> for Evicting {
    type Response = Response<Incoming>;
    type Error = hyper_util::client::legacy::Error;
    type Future = EvictingFuture;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // hyper-util's client is always ready.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: Request<Full<Bytes>>) -> EvictingFuture {
        // Set by the call loop on every attempt: when the attempt's wait ends.
        let until = request.extensions().get::<AttemptEnd>().map(|end| end.at);
        let connection = until.map(|_| capture_connection(&mut request));
        EvictingFuture {
            inner: self.client.request(request),
            watch: connection.zip(until),
        }
    }
}

/// One attempt's request on the pool: when dropped unfinished at or after the end of its wait
/// (its attempt timed out), the connection it went out on is poisoned.
pub(super) struct EvictingFuture {
    inner: ResponseFuture,
    /// The connection the request went out on, and the end of the attempt's wait; `None` once
    /// the request has an answer.
    watch: Option<(CaptureConnection, Instant)>,
}

impl Future for EvictingFuture {
    type Output = Result<Response<Incoming>, hyper_util::client::legacy::Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let output = std::task::ready!(Pin::new(&mut self.inner).poll(cx));
        self.watch = None;
        Poll::Ready(output)
    }
}

impl Drop for EvictingFuture {
    fn drop(&mut self) {
        let Some((connection, until)) = self.watch.take() else {
            return;
        };
        if Instant::now() < until {
            return;
        }
        if let Some(connected) = connection.connection_metadata().as_ref() {
            connected.poison();
        }
    }
}

impl std::fmt::Debug for EvictingFuture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EvictingFuture").finish_non_exhaustive()
    }
}

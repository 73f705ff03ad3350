//! The adapter between reqwest and the layer's call loop: a reqwest request as the
//! `http::Request` the loop plans and stamps, and the rest of the middleware chain as the
//! loop's [`SendAttempt`].
//!
//! The loop needs an `http::Request<B>` with `B: Clone`, and reqwest's body cannot be cloned
//! from outside reqwest (only a whole [`Request::try_clone`] can). So the loop's request carries
//! the method, a URI, the headers and the explicit deadline, and its "body" is the reqwest
//! request itself, shared ([`Original`]): each attempt's headers, stamped by the loop, go onto a
//! copy of it, and the last attempt takes the original (the only one, for a streaming body,
//! which is why such a call gets one attempt: [`SendAttempt::repeatable`]).
//!
//! The URI the loop sees is the URL without its `user:password@`: the loop names the target
//! (trace, metrics, retry budget) after the URI's authority, and a password must not become a
//! label. What is sent is reqwest's URL, untouched.

use std::future::Future;
use std::sync::Arc;

use deadline::Deadline;
use deadline_http::CallError;
use deadline_http::propagate::{CallBody, SendAttempt};
use http::{Extensions, HeaderMap, Uri};
use reqwest::{Request, Response, ResponseBuilderExt as _};
use reqwest_middleware::Next;

/// The call's reqwest request, without its headers (the loop's request holds them): shared by
/// the loop's copies of its request, taken by the last attempt.
#[derive(Clone)]
pub(crate) struct Original(Arc<Request>);

impl Original {
    /// The reqwest request of one attempt, with the headers the loop stamped: the original
    /// itself when no other copy is left, else a copy of it.
    fn attempt(self, headers: HeaderMap) -> reqwest_middleware::Result<Request> {
        let mut request = match Arc::try_unwrap(self.0) {
            Ok(request) => request,
            // Ruled out by `repeatable` (a body that cannot be copied gets one attempt).
            Err(shared) => shared
                .try_clone()
                .ok_or_else(|| reqwest_middleware::Error::middleware(NotRepeatable))?,
        };
        *request.headers_mut() = headers;
        Ok(request)
    }
}

/// A second attempt of a request whose body cannot be copied (never made: see
/// [`Original::attempt`]).
#[derive(Debug)]
struct NotRepeatable;

impl std::fmt::Display for NotRepeatable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the request's body is a stream and cannot be sent twice")
    }
}

impl std::error::Error for NotRepeatable {}

/// The rest of the middleware chain, as the loop's sender: each attempt runs it with its own
/// copy of the call's extensions.
#[derive(Clone)]
pub(crate) struct Chain<'a> {
    next: Next<'a>,
    extensions: Extensions,
}

impl SendAttempt<Original> for Chain<'_> {
    type Body = reqwest::Body;
    type Error = reqwest_middleware::Error;

    /// The chain takes an attempt at once (a pooled reqwest client has no readiness to wait
    /// for).
    fn ready(&mut self) -> impl Future<Output = reqwest_middleware::Result<()>> + Send {
        std::future::ready(Ok(()))
    }

    fn send(
        &mut self,
        request: http::Request<Original>,
    ) -> impl Future<Output = reqwest_middleware::Result<http::Response<reqwest::Body>>> + Send
    {
        let (parts, original) = request.into_parts();
        let attempt = original.attempt(parts.headers);
        let mut extensions = self.extensions.clone();
        let next = self.next.clone();
        async move {
            let response = next.run(attempt?, &mut extensions).await?;
            Ok(into_http(response))
        }
    }

    fn repeatable(&self, request: &http::Request<Original>) -> bool {
        let body = request.body().0.body();
        body.is_none_or(|body| body.as_bytes().is_some())
    }
}

/// `request` as the loop's request (carrying the `explicit` deadline), and the chain after
/// this middleware as its sender.
pub(crate) fn split<'a>(
    mut request: Request,
    explicit: Option<Deadline>,
    extensions: &Extensions,
    next: Next<'a>,
) -> (http::Request<Original>, Chain<'a>) {
    let headers = std::mem::take(request.headers_mut());
    let mut planned = http::Request::new(());
    *planned.method_mut() = request.method().clone();
    *planned.uri_mut() = uri_of(request.url());
    *planned.version_mut() = request.version();
    *planned.headers_mut() = headers;
    if let Some(deadline) = explicit {
        planned.extensions_mut().insert(deadline);
    }
    let chain = Chain {
        next,
        extensions: extensions.clone(),
    };
    (planned.map(|()| Original(Arc::new(request))), chain)
}

/// The URI the loop plans with: the URL's scheme, host, port, path and query, without its
/// userinfo (see the [module docs](self)). A URL `http::Uri` does not accept keeps only what
/// does parse (the loop reads the authority alone).
fn uri_of(url: &reqwest::Url) -> Uri {
    let host = url.host_str().unwrap_or_default();
    let authority = match url.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    };
    let path_and_query = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let build = |path_and_query: &str| {
        Uri::builder()
            .scheme(url.scheme())
            .authority(authority.as_str())
            .path_and_query(path_and_query)
            .build()
    };
    build(&path_and_query)
        .or_else(|_| build("/"))
        .unwrap_or_default()
}

/// A reqwest response as the `http::Response` the loop judges, keeping its URL (reqwest reads
/// it back from an extension only its response builder sets).
fn into_http(response: Response) -> http::Response<reqwest::Body> {
    let url = response.url().clone();
    let mut response: http::Response<reqwest::Body> = response.into();
    if let Ok(carrier) = http::Response::builder().url(url).body(()) {
        response
            .extensions_mut()
            .extend(carrier.into_parts().0.extensions);
    }
    response
}

/// The call's result as the middleware returns it: the response, with its body bounded by the
/// loop; reqwest's own error when the chain's last attempt failed with one; the loop's
/// [`CallError`] otherwise.
pub(crate) fn answer(
    result: Result<http::Response<CallBody<reqwest::Body>>, CallError>,
) -> reqwest_middleware::Result<Response> {
    match result {
        Ok(response) => Ok(Response::from(response.map(reqwest::Body::wrap))),
        // The chain's errors are reqwest-middleware's, boxed by the loop: unboxed here.
        Err(CallError::Inner { source, .. }) => match source.downcast() {
            Ok(error) => Err(*error),
            Err(other) => Err(reqwest_middleware::Error::Middleware(anyhow::Error::msg(
                other,
            ))),
        },
        Err(error) => Err(reqwest_middleware::Error::middleware(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The target is named after the host and port, never the credentials in the URL.
    #[test]
    fn the_uri_has_no_userinfo() {
        for (url, expected) in [
            (
                "http://user:secret@inventory:8080/items?id=7",
                "http://inventory:8080/items?id=7",
            ),
            ("http://inventory/items", "http://inventory/items"),
            ("https://user@[::1]:8443/", "https://[::1]:8443/"),
        ] {
            let uri = uri_of(&reqwest::Url::parse(url).unwrap());
            assert_eq!(uri.to_string(), expected, "{url}");
        }
    }
}

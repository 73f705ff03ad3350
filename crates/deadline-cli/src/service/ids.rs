//! Request ids at the edge of `deadline service`: every request is counted in flight and, when
//! it came without a usable `x-request-id`, given one (the service name, a per-process prefix
//! and a counter) before the enforce layer sees it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use deadline_http::enforce::{REQUEST_ID_HEADER, is_usable_request_id};
use deadline_http::log_limit::LogLimit;
use http::{HeaderValue, Request};
use hyper::body::Incoming;

/// What the service does to a request before the enforce layer: count it in `in_flight` (the
/// hold hook counts it out, exactly once) and stamp an id on it if it has no usable one.
pub(super) fn stamp(
    name: &str,
    in_flight: Arc<AtomicUsize>,
) -> impl Fn(Request<Incoming>) -> Request<Incoming> + Clone + Send + Sync + 'static {
    let ids = Arc::new(IdMaker::new(name));
    let replaced_ids = Arc::new(LogLimit::new(Duration::from_secs(1)));
    let service_name = name.to_owned();
    move |mut req: Request<Incoming>| {
        in_flight.fetch_add(1, Ordering::AcqRel);
        // An id that is empty or not visible ASCII counts as absent: forwarding it would give
        // unrelated requests one shared id (and one shared slowness decision). One longer than
        // 128 characters is replaced too, not copied into every hop's headers and logs; the
        // replacement is logged, at most once a second.
        let sent = req.headers().get(REQUEST_ID_HEADER);
        if !sent.is_some_and(|id| is_usable_request_id(id.as_bytes())) {
            let id = ids.next();
            if let Some(sent) = sent
                && let Some(replaced) = replaced_ids.hit()
            {
                // Logged under the command's target, as every line of `deadline service` is.
                tracing::warn!(
                    target: "deadline::service",
                    service = %service_name,
                    sent_len = sent.len(),
                    new_id = %id,
                    replaced,
                    "x-request-id replaced: not 1 to 128 visible ASCII characters \
                     (replaced: how many since the last such line)"
                );
            }
            if let Ok(id) = HeaderValue::from_str(&id) {
                req.headers_mut().insert(REQUEST_ID_HEADER, id);
            }
        }
        req
    }
}

/// Makes request ids at the edge: the service name, a per-process prefix and a counter.
struct IdMaker {
    prefix: String,
    next: AtomicU64,
}

impl IdMaker {
    fn new(name: &str) -> IdMaker {
        IdMaker {
            prefix: format!("{name}-{}", std::process::id()),
            next: AtomicU64::new(1),
        }
    }

    fn next(&self) -> String {
        format!(
            "{}-{}",
            self.prefix,
            self.next.fetch_add(1, Ordering::Relaxed)
        )
    }
}

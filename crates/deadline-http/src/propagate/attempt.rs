//! The attempt rebuilding: the request each attempt sends, made from the call's original.

use bytes::Bytes;
use deadline::decimal::Decimal;
use deadline::plan::retry::is_idempotent;
use deadline::{BUDGET_HEADER, Budget, Deadline};
use http::{HeaderName, HeaderValue, Request};
use tokio::time::Instant;

use super::dialects::DialectSet;
use super::target::UNNAMED_TARGET;

/// The `Idempotency-Key` request header: a request that carries one may be retried even when
/// its method is not idempotent.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The call's original request and what each attempt may do with it: copied for every attempt
/// that another may follow, moved into the last one allowed.
pub(super) struct AttemptRequests<B> {
    /// Gone once the last allowed attempt was sent.
    original: Option<Request<B>>,
    /// Attempts this request may have: one for a request that must not be sent twice.
    allowed: u32,
    /// A deadline set on the request itself, carried by every attempt.
    explicit: Option<Deadline>,
    /// The headers besides `Deadline-Budget-Ms` each attempt tells its budget in.
    dialects: DialectSet,
}

impl<B: Clone> AttemptRequests<B> {
    /// The attempts of `request` under a policy allowing `attempts`: one for a request that
    /// must not be sent twice.
    pub(super) fn new(request: Request<B>, attempts: u32, explicit: Option<Deadline>) -> Self {
        let allowed = if may_retry(&request) { attempts } else { 1 };
        AttemptRequests {
            original: Some(request),
            allowed,
            explicit,
            dialects: DialectSet::none(),
        }
    }

    /// Every attempt also writes its budget in `dialects`.
    pub(super) fn dialects(mut self, dialects: DialectSet) -> Self {
        self.dialects = dialects;
        self
    }

    /// Attempts this request may have.
    pub(super) fn allowed(&self) -> u32 {
        self.allowed
    }

    /// The headers besides `Deadline-Budget-Ms` each attempt tells its budget in.
    pub(super) fn dialect_set(&self) -> &DialectSet {
        &self.dialects
    }

    /// Whether the attempt that is the `sent`-th is the last one allowed.
    pub(super) fn is_last(&self, sent: u32) -> bool {
        sent >= self.allowed
    }

    /// The original request, until the last allowed attempt takes it.
    pub(super) fn original(&self) -> Option<&Request<B>> {
        self.original.as_ref()
    }

    /// The request of the `sent`-th attempt, with `budget`: a copy, or the original itself for
    /// the last attempt allowed (a request sent once, such as a `POST`, is never copied).
    /// `None` once the original is gone, which [`plan`](Self::plan) already rules out.
    ///
    /// When the original's header map has room for one more header, `Deadline-Budget-Ms` is
    /// written into it before it is copied, not into the copy: a copied header map has room for
    /// exactly the headers it copied, so adding one to it would allocate again (the next
    /// attempt overwrites the original's anyway). The value is made to be shared (see
    /// [`budget_value`]). A map with no room (a request with no headers at all has no map yet)
    /// is copied first and the copy gets the header: writing into the original would allocate
    /// it, and its copy too. The headers only some calls write (`grpc-timeout`, the dialects)
    /// go into the attempt's own request: their values would each cost an allocation when
    /// copied.
    pub(super) fn next(&mut self, sent: u32, budget: Option<Budget>) -> Option<Request<B>> {
        let mut original = self.original.take()?;
        let before_copy = original.headers().capacity() > original.headers().len();
        if before_copy {
            set_budget_header(&mut original, budget.map(budget_value));
        }
        let mut attempt = if self.is_last(sent) {
            into_attempt(original, self.explicit)
        } else {
            let copy = rebuild(&original, self.explicit);
            self.original = Some(original);
            copy
        };
        if !before_copy {
            set_budget_header(&mut attempt, budget.map(Budget::to_header_value));
        }
        super::grpc::set_timeout(&mut attempt, budget);
        self.dialects.write(attempt.headers_mut(), budget);
        Some(attempt)
    }
}

/// An attempt's budget as planned, carried in its request's extensions to a client that
/// connects before it writes (`connect_first`, under the `tls` feature): once the connection
/// is ready, the budget headers are written again with what is left of it, so the time spent
/// connecting (a TCP connect, a TLS handshake) is not taken from the callee's budget unseen.
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
pub(super) struct LateStamp {
    /// When the budget was planned (the attempt's start).
    planned_at: Instant,
    /// The budget planned for the attempt.
    budget: Budget,
    /// The headers besides `Deadline-Budget-Ms` it is written in.
    dialects: DialectSet,
}

#[cfg_attr(not(feature = "tls"), allow(dead_code))]
impl LateStamp {
    /// The stamp of an attempt planned at `planned_at` with `budget`, written in `dialects`
    /// too.
    pub(super) fn new(planned_at: Instant, budget: Budget, dialects: DialectSet) -> LateStamp {
        LateStamp {
            planned_at,
            budget,
            dialects,
        }
    }

    /// The budget left at `now`: the planned one less the time since it was planned (whole
    /// milliseconds), never below 1 ms (a budget header removed would say "no deadline").
    pub(super) fn budget_at(&self, now: Instant) -> Budget {
        let spent = now.saturating_duration_since(self.planned_at).as_millis();
        let spent = u64::try_from(spent).unwrap_or(u64::MAX);
        Budget::from_millis(self.budget.as_millis().saturating_sub(spent)).unwrap_or(Budget::ONE_MS)
    }

    /// Writes the attempt's budget headers again in `request` (as its attempt was first
    /// stamped), with the budget left at `now`.
    pub(super) fn restamp<B>(&self, request: &mut Request<B>, now: Instant) {
        let budget = Some(self.budget_at(now));
        set_budget(request, budget);
        self.dialects.write(request.headers_mut(), budget);
    }
}

/// Whether a failed attempt of `request` may be sent again: its method is idempotent, or it
/// carries an [`IDEMPOTENCY_KEY`].
fn may_retry<B>(request: &Request<B>) -> bool {
    is_idempotent(request.method()) || request.headers().contains_key(IDEMPOTENCY_KEY)
}

/// The request for one attempt: the original's method, URI, version, headers and a clone of
/// its body. Extensions are not copied, except an explicit
/// deadline.
fn rebuild<B: Clone>(original: &Request<B>, explicit: Option<Deadline>) -> Request<B> {
    let mut request = Request::new(original.body().clone());
    *request.method_mut() = original.method().clone();
    *request.uri_mut() = original.uri().clone();
    *request.version_mut() = original.version();
    *request.headers_mut() = original.headers().clone();
    if let Some(deadline) = explicit {
        request.extensions_mut().insert(deadline);
    }
    request
}

/// The original request made the attempt's, as [`rebuild`] would copy it: the same parts, its
/// extensions cleared except an explicit deadline.
fn into_attempt<B>(mut request: Request<B>, explicit: Option<Deadline>) -> Request<B> {
    let extensions = request.extensions_mut();
    extensions.clear();
    if let Some(deadline) = explicit {
        extensions.insert(deadline);
    }
    request
}

/// Sets the attempt's `Deadline-Budget-Ms` to `budget`, or removes it without one, and for a
/// gRPC request `grpc-timeout` the same way.
fn set_budget<B>(request: &mut Request<B>, budget: Option<Budget>) {
    super::grpc::set_timeout(request, budget);
    deadline::header::set_budget(request.headers_mut(), budget);
}

/// Sets `Deadline-Budget-Ms` to `value` (a budget's), or removes it without one, as
/// [`deadline::header::set_budget`] does: every value the request came with replaced by one
/// line.
fn set_budget_header<B>(request: &mut Request<B>, value: Option<HeaderValue>) {
    let headers = request.headers_mut();
    match value {
        Some(value) => {
            headers.insert(BUDGET_HEADER, value);
        }
        None => {
            headers.remove(BUDGET_HEADER);
        }
    }
}

/// `budget` as a `Deadline-Budget-Ms` value that is copied with the request for free.
///
/// When the budget is written into the call's original request, each attempt copies it. A value
/// made the usual way ([`Budget::to_header_value`]) holds its bytes in a plain vector, and the
/// first copy of it moves them into a shared allocation: a second allocation for one header.
/// This one is made shared from the start (one allocation, holding the digits), so copies only
/// count references. A value that is not copied is made the usual way, which costs a little
/// less.
fn budget_value(budget: Budget) -> HeaderValue {
    let digits = Bytes::from_owner(Digits(Decimal::new(budget.as_millis())));
    // ASCII digits only: always a valid value, so the fallback is never taken.
    HeaderValue::from_maybe_shared(digits).unwrap_or_else(|_| budget.to_header_value())
}

/// A budget's digits, owned by the `Bytes` of its header value.
struct Digits(Decimal);

impl AsRef<[u8]> for Digits {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// The downstream's name when none was configured: the request URI's host and port, without
/// any `user:password@` (the name goes in traces, metrics labels and logs).
pub(super) fn authority_name<B>(request: &Request<B>) -> &str {
    request.uri().authority().map_or(UNNAMED_TARGET, |a| {
        let text = a.as_str();
        text.rsplit_once('@').map_or(text, |(_, host)| host)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::Method;

    fn request(method: Method) -> Request<()> {
        Request::builder().method(method).body(()).unwrap()
    }

    #[test]
    fn idempotent_methods_may_be_retried_others_only_with_a_key() {
        for method in [
            Method::GET,
            Method::HEAD,
            Method::OPTIONS,
            Method::TRACE,
            Method::PUT,
            Method::DELETE,
        ] {
            assert!(may_retry(&request(method.clone())), "{method}");
        }
        let unknown = Method::from_bytes(b"PURGE").unwrap();
        for method in [Method::POST, Method::PATCH, Method::CONNECT, unknown] {
            assert!(!may_retry(&request(method.clone())), "{method}");
            let mut keyed = request(method.clone());
            keyed
                .headers_mut()
                .insert(IDEMPOTENCY_KEY, "k1".parse().unwrap());
            assert!(may_retry(&keyed), "{method} with a key");
        }
    }

    /// A request with two stale budget headers and an extension, as a caller might hand it
    /// over.
    fn original(method: Method) -> Request<String> {
        let mut original = Request::builder()
            .method(method)
            .uri("http://inventory:8080/items?id=7")
            .version(http::Version::HTTP_10)
            .header("x-request-id", "r1")
            .header(BUDGET_HEADER, "99999")
            .header(BUDGET_HEADER, "88888")
            .body("body".to_owned())
            .unwrap();
        original.extensions_mut().insert(7u8);
        original
    }

    #[test]
    fn each_attempt_copies_the_request_but_not_its_extensions() {
        let mut requests = AttemptRequests::new(original(Method::PUT), 3, None);
        let copy = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(copy.method(), Method::PUT);
        assert_eq!(copy.uri(), "http://inventory:8080/items?id=7");
        assert_eq!(copy.version(), http::Version::HTTP_10);
        assert_eq!(copy.body(), "body");
        assert_eq!(copy.headers()["x-request-id"], "r1");
        let budgets: Vec<_> = copy.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["950"]);
        assert_eq!(copy.extensions().get::<u8>(), None);
        assert!(requests.original().is_some());

        let copy = requests.next(2, None).unwrap();
        assert!(!copy.headers().contains_key(BUDGET_HEADER));
        let last = requests.next(3, Budget::from_millis(20)).unwrap();
        let budgets: Vec<_> = last.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["20"]);
        assert!(requests.original().is_none());
        assert!(requests.next(4, None).is_none());
    }

    /// A request with no headers (no header map yet) gets its budget in each attempt's copy
    /// and, for the last, in itself, once.
    #[test]
    fn a_request_without_headers_gets_its_budget_all_the_same() {
        let mut requests = AttemptRequests::new(Request::new(String::new()), 2, None);
        let copy = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(copy.headers()[BUDGET_HEADER], "950");
        assert!(requests.original().unwrap().headers().is_empty());
        let last = requests.next(2, Budget::from_millis(20)).unwrap();
        let budgets: Vec<_> = last.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["20"]);
    }

    /// The last attempt moves the original instead of copying it: it must leave as a copy
    /// would have.
    #[test]
    fn the_moved_original_is_the_copy_it_replaces() {
        let explicit = Deadline::after_duration(
            tokio::time::Instant::now().into_std(),
            std::time::Duration::from_secs(1),
        );
        for budget in [Budget::from_millis(950), None] {
            let mut requests = AttemptRequests::new(original(Method::PUT), 2, Some(explicit));
            let copy = requests.next(1, budget).unwrap();
            let moved = requests.next(2, budget).unwrap();
            assert_eq!(moved.method(), copy.method());
            assert_eq!(moved.uri(), copy.uri());
            assert_eq!(moved.version(), copy.version());
            assert_eq!(moved.headers(), copy.headers());
            assert_eq!(moved.body(), copy.body());
            assert_eq!(moved.extensions().get::<u8>(), None);
            assert_eq!(copy.extensions().get::<Deadline>(), Some(&explicit));
            assert_eq!(moved.extensions().get::<Deadline>(), Some(&explicit));
        }
        // A POST is sent once: its one attempt is the original itself.
        let mut requests = AttemptRequests::new(original(Method::POST), 3, None);
        assert_eq!(requests.allowed(), 1);
        let only = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(only.headers().get_all(BUDGET_HEADER).iter().count(), 1);
        assert_eq!(only.extensions().get::<u8>(), None);
        assert!(requests.original().is_none());
    }

    /// A gRPC call's attempts carry `grpc-timeout` beside `Deadline-Budget-Ms`, each its own
    /// attempt's budget, and lose both when the planner gives an attempt no budget.
    #[test]
    fn a_grpc_attempt_tells_its_budget_in_both_headers() {
        let grpc = Request::builder()
            .method(Method::POST)
            .uri("http://inventory:8080/stock.Stock/Get")
            .header("content-type", "application/grpc")
            .header(IDEMPOTENCY_KEY, "k1")
            .header("grpc-timeout", "99S")
            .body(String::new())
            .unwrap();
        let mut requests = AttemptRequests::new(grpc, 3, None);
        let first = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(first.headers()[BUDGET_HEADER], "950");
        assert_eq!(first.headers()["grpc-timeout"], "950000u");
        let second = requests.next(2, None).unwrap();
        assert!(!second.headers().contains_key(BUDGET_HEADER));
        assert!(!second.headers().contains_key("grpc-timeout"));
        let last = requests.next(3, Budget::from_millis(20)).unwrap();
        assert_eq!(last.headers()[BUDGET_HEADER], "20");
        assert_eq!(last.headers()["grpc-timeout"], "20000000n");
        assert_eq!(last.headers().get_all("grpc-timeout").iter().count(), 1);
    }

    /// The shared value says what the core's value says, for any budget.
    #[test]
    fn the_shared_budget_value_is_the_budget() {
        for ms in [1, 9, 10, 950, 86_400_000, u64::MAX] {
            let budget = Budget::from_millis(ms).unwrap();
            let value = budget_value(budget);
            assert_eq!(value, budget.to_header_value(), "{ms}");
            assert_eq!(value.to_str().unwrap(), ms.to_string());
        }
    }

    /// A late stamp takes the time since planning off the budget, in whole milliseconds, and
    /// never writes less than 1 ms (no header would mean no deadline).
    #[test]
    fn a_late_stamp_writes_what_is_left() {
        let planned = Instant::now();
        let stamp = LateStamp::new(
            planned,
            Budget::from_millis(950).unwrap(),
            DialectSet::none(),
        );
        let at = |ms| planned + std::time::Duration::from_micros(ms);
        assert_eq!(stamp.budget_at(at(0)).as_millis(), 950);
        assert_eq!(stamp.budget_at(at(300_900)).as_millis(), 650);
        assert_eq!(stamp.budget_at(at(949_999)).as_millis(), 1);
        assert_eq!(stamp.budget_at(at(5_000_000)).as_millis(), 1);
        let mut request = Request::builder()
            .header("content-type", "application/grpc")
            .header(BUDGET_HEADER, "950")
            .body(())
            .unwrap();
        stamp.restamp(&mut request, at(300_000));
        assert_eq!(request.headers()[BUDGET_HEADER], "650");
        assert_eq!(request.headers()["grpc-timeout"], "650000u");
        let budgets: Vec<_> = request.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets.len(), 1);
    }

    #[test]
    fn a_target_named_by_its_uri_leaves_the_credentials_out() {
        let request = Request::builder()
            .uri("http://user:secret@inventory:8080/stock")
            .body(())
            .unwrap();
        assert_eq!(authority_name(&request), "inventory:8080");
        let request = Request::builder()
            .uri("http://inventory/stock")
            .body(())
            .unwrap();
        assert_eq!(authority_name(&request), "inventory");
        let request = Request::builder().uri("/stock").body(()).unwrap();
        assert_eq!(authority_name(&request), UNNAMED_TARGET);
    }
}

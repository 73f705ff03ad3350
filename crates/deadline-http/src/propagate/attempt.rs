//! The request each attempt sends: the caller's own for the first, made again from a packed
//! recipe of it for each retry.

use deadline::decimal::StackBuf;
use deadline::plan::retry::is_idempotent;
use deadline::{Budget, Deadline};
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Uri, Version};
use tokio::time::Instant;

use super::dialects::DialectSet;
use super::target::UNNAMED_TARGET;

/// The `Idempotency-Key` request header: a request that carries one may be retried even when
/// its method is not idempotent.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// The call's original request and what each attempt may do with it: the first attempt takes
/// the request itself, and when another attempt may follow it, what that one needs is kept back
/// first (see [`Recipe`]).
pub(super) struct AttemptRequests<B> {
    /// The request, then what later attempts are made from, then nothing.
    kept: Kept<B>,
    /// Attempts this request may have: one for a request that must not be sent twice.
    allowed: u32,
    /// A deadline set on the request itself, carried by every attempt.
    explicit: Option<Deadline>,
    /// The headers besides `Deadline-Budget-Ms` each attempt tells its budget in.
    dialects: DialectSet,
}

/// What a call holds of its request between attempts.
enum Kept<B> {
    /// Before the first attempt: the request as the caller made it.
    Request(Request<B>),
    /// After an attempt that another may follow: what the next is made from.
    Recipe(Recipe<B>),
    /// Taken by the last attempt allowed.
    Gone,
}

impl<B: Clone> AttemptRequests<B> {
    /// The attempts of `request` under a policy allowing `attempts`: one for a request that
    /// must not be sent twice.
    pub(super) fn new(request: Request<B>, attempts: u32, explicit: Option<Deadline>) -> Self {
        let allowed = if may_retry(&request) { attempts } else { 1 };
        AttemptRequests {
            kept: Kept::Request(request),
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

    /// The request's URI, until the last allowed attempt takes it.
    pub(super) fn uri(&self) -> Option<&Uri> {
        match &self.kept {
            Kept::Request(request) => Some(request.uri()),
            Kept::Recipe(recipe) => Some(&recipe.uri),
            Kept::Gone => None,
        }
    }

    /// Whether no attempt can be made any more: the last allowed one took the request.
    pub(super) fn is_spent(&self) -> bool {
        matches!(self.kept, Kept::Gone)
    }

    /// The request of the `sent`-th attempt, with `budget`.
    ///
    /// The first attempt is the caller's request itself, its extensions cleared (except an
    /// explicit deadline); when another attempt may follow, a [`Recipe`] of it is kept first.
    /// Each later attempt is made from the recipe, the last allowed one taking it. `None` once
    /// the request is gone, which [`plan`](super::retry::Retries::plan) already rules out, and
    /// for a header value the recipe cannot make again (see [`PackedHeaders::unpack`]); either
    /// way no attempt follows.
    pub(super) fn next(&mut self, sent: u32, budget: Option<Budget>) -> Option<Request<B>> {
        let last = self.is_last(sent);
        let attempt = if let Kept::Recipe(recipe) = &self.kept {
            let attempt = recipe.request(self.explicit, self.dialects.iter().count() + 2);
            if last || attempt.is_none() {
                self.kept = Kept::Gone;
            }
            attempt
        } else {
            // The recipe is made from the request before the request is moved out.
            let kept = match &self.kept {
                Kept::Request(request) if !last => Kept::Recipe(Recipe::of(request)),
                _ => Kept::Gone,
            };
            match std::mem::replace(&mut self.kept, kept) {
                Kept::Request(request) => Some(into_attempt(request, self.explicit)),
                _ => None,
            }
        };
        let mut attempt = attempt?;
        set_budget(&mut attempt, budget);
        self.dialects.write(attempt.headers_mut(), budget);
        Some(attempt)
    }
}

/// What an attempt after the first is made from: the request's method, URI, version, a clone
/// of its body and its header lines packed in one buffer.
///
/// # Why the headers are packed, not cloned
///
/// Nearly every call ends with its first attempt, yet a call that may be retried has to keep
/// what a retry would send before the first attempt takes the request (the inner service owns
/// what it is given). Cloning the `HeaderMap` costs its two allocations (its entries and its
/// index), and cloning a value or custom name made from a non-static string costs one more each
/// the first time: its bytes move from their plain buffer into a shared one. Copying the
/// lines' bytes into one buffer ([`PackedHeaders`]) costs nothing for the lines of most
/// requests, kept in place in the call's future, and one allocation for longer ones; the map is
/// made again only for an attempt that is actually sent.
struct Recipe<B> {
    method: Method,
    uri: Uri,
    version: Version,
    body: B,
    headers: PackedHeaders,
}

impl<B: Clone> Recipe<B> {
    /// The recipe of `request`'s later attempts.
    fn of(request: &Request<B>) -> Recipe<B> {
        Recipe {
            method: request.method().clone(),
            uri: request.uri().clone(),
            version: request.version(),
            body: request.body().clone(),
            headers: PackedHeaders::pack(request.headers()),
        }
    }

    /// An attempt's request, its map with room for `extra` more headers, carrying an explicit
    /// deadline if there is one. `None` when a value cannot be made again.
    fn request(&self, explicit: Option<Deadline>, extra: usize) -> Option<Request<B>> {
        let mut request = Request::new(self.body.clone());
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.uri.clone();
        *request.version_mut() = self.version;
        *request.headers_mut() = self.headers.unpack(extra)?;
        Some(into_attempt(request, explicit))
    }
}

/// Header lines packed one after another, each as its name's length and its value's length
/// (LEB128, one byte each below 128), a byte saying whether the value is sensitive, the name
/// and the value. Up to [`INLINE_LINES`] bytes are kept in place, in the call's future, which is
/// allocated anyway; more go in one allocation sized to fit.
struct PackedHeaders {
    storage: Storage,
    /// Names packed (a name's further values are not counted): the entries a map of them holds.
    names: usize,
}

/// Room for the packed lines of most outbound requests (`x-request-id` with a UUID, `accept`,
/// `traceparent` and `content-type` take about 180 bytes) without an allocation of their own.
const INLINE_LINES: usize = 256;

/// Where packed lines are kept.
// In place on purpose: the point is that the lines need no allocation of their own.
#[allow(clippy::large_enum_variant)]
enum Storage {
    /// In place.
    Inline(StackBuf<INLINE_LINES>),
    /// Lines too long to keep in place.
    Heap(Vec<u8>),
}

impl PackedHeaders {
    /// The lines of `headers`, in the order the map gives them: written in place, and only
    /// when they do not fit there, sized and written again on the heap.
    fn pack(headers: &HeaderMap) -> PackedHeaders {
        let mut inline = StackBuf::new();
        pack_lines(headers, &mut |part| inline.put(part));
        let storage = if inline.as_bytes().is_some() {
            Storage::Inline(inline)
        } else {
            let size: usize = headers
                .iter()
                .map(|(name, value)| {
                    let name = name.as_str().len();
                    leb128_len(name) + leb128_len(value.len()) + 1 + name + value.len()
                })
                .sum();
            let mut bytes = Vec::with_capacity(size);
            pack_lines(headers, &mut |part| bytes.extend_from_slice(part));
            Storage::Heap(bytes)
        };
        PackedHeaders {
            storage,
            names: headers.keys_len(),
        }
    }

    /// The packed bytes.
    fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Inline(bytes) => bytes.as_bytes().unwrap_or_default(),
            Storage::Heap(bytes) => bytes,
        }
    }

    /// The map again, with room for `extra` more headers (when the map's limit allows it).
    /// `None` if a name or value is not one `http` accepts: it accepted each of them once, when
    /// it was made, and makes the same check again here (only a value built with its `unsafe`
    /// unchecked constructor can fail it).
    fn unpack(&self, extra: usize) -> Option<HeaderMap> {
        let mut headers = HeaderMap::try_with_capacity(self.names.saturating_add(extra))
            .or_else(|_| HeaderMap::try_with_capacity(self.names))
            .unwrap_or_default();
        let mut rest = self.bytes();
        while !rest.is_empty() {
            let (name_len, tail) = take_leb128(rest)?;
            let (value_len, tail) = take_leb128(tail)?;
            let (&sensitive, tail) = tail.split_first()?;
            let (name, tail) = tail.split_at_checked(name_len)?;
            let (value, tail) = tail.split_at_checked(value_len)?;
            let name = HeaderName::from_bytes(name).ok()?;
            let mut value = HeaderValue::from_bytes(value).ok()?;
            value.set_sensitive(sensitive != 0);
            headers.append(name, value);
            rest = tail;
        }
        Some(headers)
    }
}

/// Writes each line of `headers` through `put`, in parts.
fn pack_lines(headers: &HeaderMap, put: &mut impl FnMut(&[u8])) {
    for (name, value) in headers {
        let name = name.as_str().as_bytes();
        let (head, len) = leb128(name.len());
        put(head.get(..len).unwrap_or_default());
        let (head, len) = leb128(value.len());
        put(head.get(..len).unwrap_or_default());
        put(&[u8::from(value.is_sensitive())]);
        put(name);
        put(value.as_bytes());
    }
}

/// The most bytes a `usize` takes in LEB128.
const LEB128_MAX: usize = (usize::BITS as usize).div_ceil(7);

/// `n` in LEB128: seven bits a byte, lowest first, the top bit set on every byte but the last.
fn leb128(mut n: usize) -> ([u8; LEB128_MAX], usize) {
    let mut out = [0; LEB128_MAX];
    let mut len = 0;
    for slot in &mut out {
        let low = (n & 0x7f) as u8;
        n >>= 7;
        len += 1;
        if n == 0 {
            *slot = low;
            break;
        }
        *slot = low | 0x80;
    }
    (out, len)
}

/// How many bytes `n` takes in LEB128.
fn leb128_len(n: usize) -> usize {
    leb128(n).1
}

/// A LEB128 number from the front of `bytes`, and what follows it; `None` for one cut short or
/// too large for a `usize`.
fn take_leb128(bytes: &[u8]) -> Option<(usize, &[u8])> {
    let mut n: usize = 0;
    for (i, &byte) in bytes.iter().enumerate().take(LEB128_MAX) {
        let bits = usize::from(byte & 0x7f);
        let shift = u32::try_from(7 * i).ok()?;
        let shifted = bits.checked_shl(shift)?;
        // Bits shifted past the top: the number does not fit.
        if shifted >> shift != bits {
            return None;
        }
        n |= shifted;
        if byte & 0x80 == 0 {
            return Some((n, bytes.get(i + 1..)?));
        }
    }
    None
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

/// `request` made an attempt's (the caller's for the first, a [`Recipe`]'s for a retry): its
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

/// The downstream's name when none was configured: the request URI's host and port, without
/// any `user:password@` (the name goes in traces, metrics labels and logs).
pub(super) fn authority_name(uri: &Uri) -> &str {
    uri.authority().map_or(UNNAMED_TARGET, |a| {
        let text = a.as_str();
        text.rsplit_once('@').map_or(text, |(_, host)| host)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use deadline::BUDGET_HEADER;

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
    fn each_attempt_is_the_request_but_not_its_extensions() {
        let mut requests = AttemptRequests::new(original(Method::PUT), 3, None);
        let first = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(first.method(), Method::PUT);
        assert_eq!(first.uri(), "http://inventory:8080/items?id=7");
        assert_eq!(first.version(), http::Version::HTTP_10);
        assert_eq!(first.body(), "body");
        assert_eq!(first.headers()["x-request-id"], "r1");
        let budgets: Vec<_> = first.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["950"]);
        assert_eq!(first.extensions().get::<u8>(), None);
        assert!(!requests.is_spent());
        assert_eq!(requests.uri().unwrap(), "http://inventory:8080/items?id=7");

        let second = requests.next(2, None).unwrap();
        assert!(!second.headers().contains_key(BUDGET_HEADER));
        assert_eq!(second.headers()["x-request-id"], "r1");
        let last = requests.next(3, Budget::from_millis(20)).unwrap();
        let budgets: Vec<_> = last.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["20"]);
        assert!(requests.is_spent());
        assert!(requests.uri().is_none());
        assert!(requests.next(4, None).is_none());
    }

    /// A request with no headers (no header map yet) gets its budget in each attempt, once.
    #[test]
    fn a_request_without_headers_gets_its_budget_all_the_same() {
        let mut requests = AttemptRequests::new(Request::new(String::new()), 2, None);
        let first = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(first.headers()[BUDGET_HEADER], "950");
        assert_eq!(first.headers().len(), 1);
        let last = requests.next(2, Budget::from_millis(20)).unwrap();
        let budgets: Vec<_> = last.headers().get_all(BUDGET_HEADER).iter().collect();
        assert_eq!(budgets, ["20"]);
        assert_eq!(last.headers().len(), 1);
    }

    /// The first attempt is the caller's request itself; every later one, made from the
    /// recipe, must leave as the first did: the same parts, every header line in the same
    /// order (several values of one name, sensitive values, names `http` knows and others),
    /// and only an explicit deadline among the extensions.
    #[test]
    fn a_retry_leaves_as_the_first_attempt_did() {
        let explicit = Deadline::after_duration(
            tokio::time::Instant::now().into_std(),
            std::time::Duration::from_secs(1),
        );
        let mut secret = HeaderValue::from_static("Bearer t0k3n");
        secret.set_sensitive(true);
        let mut request = original(Method::PUT);
        let headers = request.headers_mut();
        headers.append("accept", HeaderValue::from_static("text/plain"));
        headers.append("accept", HeaderValue::from_static("application/json"));
        headers.insert(http::header::AUTHORIZATION, secret);
        headers.append("x-empty", HeaderValue::from_static(""));
        headers.append("x-obs-text", HeaderValue::from_bytes(b"caf\xe9").unwrap());
        for budget in [Budget::from_millis(950), None] {
            let mut requests = AttemptRequests::new(request.clone(), 3, Some(explicit));
            let first = requests.next(1, budget).unwrap();
            let second = requests.next(2, budget).unwrap();
            let last = requests.next(3, budget).unwrap();
            for retry in [&second, &last] {
                assert_eq!(retry.method(), first.method());
                assert_eq!(retry.uri(), first.uri());
                assert_eq!(retry.version(), first.version());
                assert_eq!(retry.body(), first.body());
                assert_eq!(lines(retry.headers()), lines(first.headers()));
                assert_eq!(retry.extensions().get::<u8>(), None);
                assert_eq!(retry.extensions().get::<Deadline>(), Some(&explicit));
            }
            assert!(first.headers()[http::header::AUTHORIZATION].is_sensitive());
            assert_eq!(first.extensions().get::<Deadline>(), Some(&explicit));
            assert_eq!(first.extensions().get::<u8>(), None);
        }
        // A POST is sent once: its one attempt is the request itself, and nothing is kept.
        let mut requests = AttemptRequests::new(original(Method::POST), 3, None);
        assert_eq!(requests.allowed(), 1);
        let only = requests.next(1, Budget::from_millis(950)).unwrap();
        assert_eq!(only.headers().get_all(BUDGET_HEADER).iter().count(), 1);
        assert_eq!(only.extensions().get::<u8>(), None);
        assert!(requests.is_spent());
    }

    /// A map's lines as the map gives them, with each value's sensitive flag (a map's own
    /// `==` looks at neither order nor flags).
    fn lines(headers: &HeaderMap) -> Vec<(HeaderName, HeaderValue, bool)> {
        headers
            .iter()
            .map(|(n, v)| (n.clone(), v.clone(), v.is_sensitive()))
            .collect()
    }

    /// Packing and unpacking keep every line in order with its flag, kept in place up to the
    /// room there and on the heap past it, and the map has room for the headers an attempt
    /// adds.
    #[test]
    fn packed_headers_come_back_whole() {
        let mut headers = HeaderMap::new();
        let empty = PackedHeaders::pack(&headers);
        assert!(empty.bytes().is_empty());
        assert_eq!(lines(&empty.unpack(0).unwrap()), lines(&headers));
        let mut secret = HeaderValue::from_static("s3cr3t");
        secret.set_sensitive(true);
        headers.append("x-a", HeaderValue::from_static("1"));
        headers.append(http::header::HOST, HeaderValue::from_static("inventory"));
        headers.append("x-a", secret);
        // A value of 128 bytes or more: its length takes two bytes.
        headers.append("x-b", HeaderValue::from_str(&"b".repeat(200)).unwrap());
        let packed = PackedHeaders::pack(&headers);
        assert!(matches!(packed.storage, Storage::Inline(_)));
        let unpacked = packed.unpack(2).unwrap();
        assert_eq!(lines(&unpacked), lines(&headers));
        assert!(unpacked.capacity() >= headers.keys_len() + 2);

        // Exactly the room in place, then one byte more.
        let used = packed.bytes().len();
        // Two one-byte lengths (the value is under 128 bytes), the flag and the name.
        let head = 1 + 1 + 1 + "x-fill".len();
        let fill = "f".repeat(INLINE_LINES - used - head);
        assert!(fill.len() < 128);
        headers.append("x-fill", HeaderValue::from_str(&fill).unwrap());
        let full = PackedHeaders::pack(&headers);
        assert!(matches!(&full.storage, Storage::Inline(bytes) if bytes.len() == INLINE_LINES));
        assert_eq!(lines(&full.unpack(0).unwrap()), lines(&headers));
        headers.append("x-c", HeaderValue::from_static(""));
        let over = PackedHeaders::pack(&headers);
        let Storage::Heap(bytes) = &over.storage else {
            panic!("lines longer than the room in place are kept on the heap");
        };
        assert_eq!(bytes.len(), INLINE_LINES + 1 + 1 + 1 + "x-c".len());
        assert_eq!(bytes.len(), bytes.capacity());
        assert_eq!(lines(&over.unpack(0).unwrap()), lines(&headers));
        // A buffer cut short is refused, not read past its end.
        let cut = PackedHeaders {
            storage: Storage::Heap(bytes[..bytes.len() - 1].to_vec()),
            names: over.names,
        };
        assert!(cut.unpack(0).is_none());
    }

    /// A map with more values than a map can have names (values of one name do not count
    /// against that limit) is made again without asking for room it cannot have.
    #[test]
    fn a_map_with_many_values_of_one_name_comes_back() {
        let mut headers = HeaderMap::new();
        for i in 0..30_000 {
            headers.append("x-many", HeaderValue::from(i));
        }
        let packed = PackedHeaders::pack(&headers);
        assert_eq!(lines(&packed.unpack(2).unwrap()), lines(&headers));
    }

    /// The first attempt sends the caller's request itself, not a copy of it; only the recipe
    /// kept for a retry clones the body.
    #[test]
    fn the_first_attempt_is_the_request_itself() {
        /// A body that counts how many clones away from the caller's it is.
        #[derive(Debug, PartialEq)]
        struct Generation(u32);
        impl Clone for Generation {
            fn clone(&self) -> Self {
                Generation(self.0 + 1)
            }
        }
        let request = Request::get("http://inventory/stock")
            .body(Generation(0))
            .unwrap();
        let mut requests = AttemptRequests::new(request, 3, None);
        assert_eq!(requests.next(1, None).unwrap().body(), &Generation(0));
        assert_eq!(requests.next(2, None).unwrap().body(), &Generation(2));
        assert_eq!(requests.next(3, None).unwrap().body(), &Generation(2));
    }

    proptest::proptest! {
        /// Any map comes back from its packed lines with the same lines in the same order, each
        /// with its flag, whether the lines fit in place or not.
        #[test]
        fn any_map_comes_back_from_its_packed_lines(
            input in proptest::collection::vec(
                (
                    0..6usize,
                    proptest::collection::vec(
                        proptest::prop_oneof![proptest::strategy::Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff],
                        0..300,
                    ),
                    proptest::bool::ANY,
                ),
                0..12,
            ),
        ) {
            const NAMES: [&str; 6] =
                ["accept", "x-request-id", "cookie", "x-a", "authorization", "x-long-name-here"];
            let mut headers = HeaderMap::new();
            for (name, value, sensitive) in &input {
                let mut value = HeaderValue::from_bytes(value).unwrap();
                value.set_sensitive(*sensitive);
                headers.append(NAMES[*name], value);
            }
            let packed = PackedHeaders::pack(&headers);
            proptest::prop_assert_eq!(packed.names, headers.keys_len());
            proptest::prop_assert_eq!(lines(&packed.unpack(2).unwrap()), lines(&headers));
        }
    }

    /// LEB128 lengths come back as they went in, and one cut short is refused.
    #[test]
    fn lengths_come_back_as_written() {
        for n in [
            0,
            1,
            127,
            128,
            300,
            16_383,
            16_384,
            u32::MAX as usize,
            usize::MAX,
        ] {
            let (bytes, len) = leb128(n);
            assert_eq!(leb128_len(n), len);
            let mut written = bytes[..len].to_vec();
            written.push(0xAB);
            assert_eq!(take_leb128(&written), Some((n, &[0xAB][..])), "{n}");
            assert_eq!(take_leb128(&bytes[..len - 1]), None, "{n} cut short");
        }
        assert_eq!(leb128(127).1, 1);
        assert_eq!(leb128(128).1, 2);
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
        assert_eq!(authority_name(request.uri()), "inventory:8080");
        let request = Request::builder()
            .uri("http://inventory/stock")
            .body(())
            .unwrap();
        assert_eq!(authority_name(request.uri()), "inventory");
        let request = Request::builder().uri("/stock").body(()).unwrap();
        assert_eq!(authority_name(request.uri()), UNNAMED_TARGET);
    }
}

//! The names of the spans the layers record, defined once here and used by every crate that
//! writes or reads them.

/// Time a request waited for a worker slot at a hop.
pub const QUEUE: &str = "queue";
/// The hop's own work (its handler).
pub const WORK: &str = "work";
/// One attempt of an outbound call.
pub const ATTEMPT: &str = "attempt";
/// What an outbound call's span name starts with; the downstream's name follows
/// (`call:orders`). See [`call`].
pub const CALL_PREFIX: &str = "call:";
/// One database statement run for the request (the `deadline-postgres` crate).
pub const QUERY: &str = "query";
/// Time a request waited for a pooled database connection.
pub const POOL: &str = "pool";

/// The span name of a call to `target`: `call:<target>` as a token of at most
/// [`MAX_NAME_LEN`](super::MAX_NAME_LEN) bytes, as [`Span::new`](super::Span::new) would make
/// it.
///
/// ```
/// assert_eq!(deadline_core::trace::name::call("orders"), "call:orders");
/// assert_eq!(deadline_core::trace::name::call("crème"), "call:cr_me");
/// ```
pub fn call(target: &str) -> String {
    let mut name = String::with_capacity(CALL_PREFIX.len() + target.len());
    name.push_str(CALL_PREFIX);
    name.push_str(target);
    super::token::into_token(name, super::limits::MAX_NAME_LEN)
}

/// Whether `name` is the span of an outbound call (`call:<target>`).
pub fn is_call(name: &str) -> bool {
    name.starts_with(CALL_PREFIX)
}

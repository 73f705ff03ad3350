//! The outcomes the layers give their spans (besides status codes such as `200` or `504`),
//! defined once here and used by every crate that writes or reads them.

/// The work finished (any status but a 5xx).
pub const OK: &str = "ok";
/// Time ran out: the work was cut at the cutoff, a queue wait gave up, or a call ran out of
/// its caller's deadline.
pub const DEADLINE: &str = "deadline";
/// The planner refused an attempt (or a whole call) for lack of time.
pub const SKIPPED: &str = "skipped";
/// An attempt (or a call) used its full per-attempt timeout.
pub const TIMEOUT: &str = "timeout";
/// The inner service failed, or the work answered with a 5xx other than 504.
pub const ERROR: &str = "error";
/// The call's future was dropped while the attempt was in flight.
pub const CANCELLED: &str = "cancelled";
/// The request could not be built; nothing was sent.
pub const INVALID: &str = "invalid";
/// The caller went away before the answer was ready.
pub const HUNG_UP: &str = "hung-up";
/// Refused by admission control: the request could not have finished in time.
pub const SHED: &str = "shed";
/// A retry was not sent: the retry budget shared by calls to the target refused it.
pub const THROTTLED: &str = "throttled";
/// A retry was not sent: too little time once its backoff delay is slept.
pub const SKIPPED_BACKOFF: &str = "skipped-backoff";
/// A retry was not sent: the callee's pushback asked for a longer wait than was left.
pub const SKIPPED_PUSHBACK: &str = "skipped-pushback";
/// A retry was not sent: the callee answered 504 and the retry would get much less time.
pub const SKIPPED_504: &str = "skipped-504";
/// A retry was not sent: the callee said not to retry.
pub const NO_RETRY: &str = "no-retry";
/// A hedged attempt lost the race: another attempt answered first, so it was cancelled.
pub const LOST: &str = "lost";
/// A database statement was not sent: too little time was left for it to be useful.
pub const NOT_SENT: &str = "not-sent";

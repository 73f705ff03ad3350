//! The one place where tokio's clock meets the core's `std::time::Instant`.
//!
//! The core never reads a clock: it takes `now` as a `std::time::Instant`. Everything in this
//! crate reads `tokio::time::Instant::now()`, so `#[tokio::test(start_paused = true)]` moves
//! it, and crosses over to the core's type only through these functions. A deadline made from a
//! tokio instant converts back to the same tokio instant, so timers set from the core's
//! deadlines fire at the instant the core computed, on paused time too.

use deadline::Deadline;
use tokio::time::{Instant, Sleep};

/// Tokio's `now`, as the core takes it.
pub(crate) fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// `at` as the core takes it.
pub(crate) fn to_std(at: Instant) -> std::time::Instant {
    at.into_std()
}

/// `deadline`'s instant on tokio's clock.
pub(crate) fn to_tokio(deadline: Deadline) -> Instant {
    Instant::from_std(deadline.instant())
}

/// A timer that fires at `deadline`.
pub(crate) fn sleep_until(deadline: Deadline) -> Sleep {
    tokio::time::sleep_until(to_tokio(deadline))
}

/// The wall clock, read once at a request's arrival for an absolute deadline (the one wall
/// clock read a deadline decision makes; everything after it runs on the monotonic clock).
pub(crate) fn wall_now() -> deadline::absolute::WallInstant {
    #[allow(clippy::disallowed_methods)] // an absolute deadline is a wall-clock instant
    let now = std::time::SystemTime::now();
    deadline::absolute::WallInstant::from_system_time(now)
}

//! Which expiry a message gets: a policy the producer states, never an accident of context.
//!
//! A job produced while a request is being served could take its expiry from that request
//! implicitly, and that is right only sometimes. A thumbnail the user is waiting for is useless
//! once the user's request has given up: it should expire with the request. A nightly export
//! that a request merely triggered must not inherit a 500 ms budget, nor a report that must be
//! mailed by tomorrow. Neither choice is a safe default, so there is none: every publish names
//! its [`Expiry`], and the request's deadline is used only when asked for
//! ([`Expiry::OfRequest`]).

use std::fmt;
use std::time::Duration;

use deadline::absolute::WallInstant;
use deadline_http::DeadlineContext;
use tokio::time::Instant;

/// When a published message stops being worth working on. Required by every publish.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Expiry {
    /// The deadline of the request being served (the deadline-http context of the task that
    /// publishes): the user is waiting for the result, and once they have given up it is
    /// useless. Publishing with no current deadline is an error
    /// ([`PublishError::NoRequestDeadline`](crate::PublishError::NoRequestDeadline)), not a
    /// message that silently never expires.
    OfRequest,
    /// A lifetime of its own, counted from the publish, whatever request (if any) is being
    /// served: a background job keeps its own time.
    Lifetime(Duration),
    /// An instant on the wall clock, chosen by the producer.
    At(WallInstant),
    /// No expiry: worked on whenever it is consumed.
    Never,
}

/// A publish asked for the request's deadline where there was none.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoRequestDeadline;

impl fmt::Display for NoRequestDeadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "the message's expiry is the request's deadline, but no request deadline is current \
             (publish from inside the request's work, or choose a lifetime)",
        )
    }
}

impl std::error::Error for NoRequestDeadline {}

impl Expiry {
    /// The instant the message expires, for a publish at `wall_now` / `now` (the same moment
    /// on the wall and monotonic clocks) with `context` current. `Ok(None)`: no expiry.
    ///
    /// The request's deadline lives on the monotonic clock; it is carried over to the wall
    /// clock as `wall_now + (deadline − now)`, read at the publish.
    pub fn resolve(
        self,
        context: Option<&DeadlineContext>,
        wall_now: WallInstant,
        now: Instant,
    ) -> Result<Option<WallInstant>, NoRequestDeadline> {
        match self {
            Expiry::OfRequest => {
                let deadline = context
                    .and_then(DeadlineContext::deadline)
                    .ok_or(NoRequestDeadline)?;
                Ok(Some(wall_now.after(deadline.remaining(now.into_std()))))
            }
            Expiry::Lifetime(lifetime) => Ok(Some(wall_now.after(lifetime))),
            Expiry::At(at) => Ok(Some(at)),
            Expiry::Never => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use deadline::Deadline;

    use super::*;

    const WALL: WallInstant = WallInstant::from_unix_nanos(1_768_473_045_000_000_000);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn only_of_request_takes_the_request_deadline() {
        let now = Instant::now();
        let deadline = Deadline::after_duration(now.into_std(), ms(500));
        let request = DeadlineContext::new(Some(deadline), ms(10), now);
        let ctx = Some(&request);
        assert_eq!(
            Expiry::OfRequest.resolve(ctx, WALL, now),
            Ok(Some(WALL.after(ms(500))))
        );
        // A lifetime of its own is not shortened by the request being served...
        assert_eq!(
            Expiry::Lifetime(ms(86_400_000)).resolve(ctx, WALL, now),
            Ok(Some(WALL.after(ms(86_400_000))))
        );
        // ... nor is "never" given the request's deadline.
        assert_eq!(Expiry::Never.resolve(ctx, WALL, now), Ok(None));
        assert_eq!(
            Expiry::At(WALL.after(ms(3))).resolve(ctx, WALL, now),
            Ok(Some(WALL.after(ms(3))))
        );
    }

    #[test]
    fn of_request_without_a_request_deadline_is_an_error() {
        let now = Instant::now();
        assert_eq!(
            Expiry::OfRequest.resolve(None, WALL, now),
            Err(NoRequestDeadline)
        );
        let no_deadline = DeadlineContext::new(None, ms(10), now);
        assert_eq!(
            Expiry::OfRequest.resolve(Some(&no_deadline), WALL, now),
            Err(NoRequestDeadline)
        );
    }
}

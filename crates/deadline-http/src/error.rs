//! Errors a caller can match on (downcast from a `BoxError` where a tower stack erases them).

use std::fmt;
use std::time::Duration;

use deadline::Stop;

use crate::context::Activity;

/// The request's deadline (less its reply reserve) passed: the work was, or must be, stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadlineExceeded {
    activity: Activity,
}

impl DeadlineExceeded {
    /// The deadline passed while the hop was doing `activity`.
    pub fn new(activity: Activity) -> DeadlineExceeded {
        DeadlineExceeded { activity }
    }

    /// What the hop was doing when time ran out.
    pub fn activity(&self) -> &Activity {
        &self.activity
    }
}

impl fmt::Display for DeadlineExceeded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "deadline exceeded while {}", self.activity)
    }
}

impl std::error::Error for DeadlineExceeded {}

/// An outbound attempt was not sent because it could not have finished (or every attempt was
/// used), with the planner's figures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttemptSkipped {
    /// Attempts sent before this one.
    pub sent: u32,
    /// Why the planner stopped.
    pub stop: Stop,
    /// Time left before the caller's deadline when the attempt was considered.
    pub remaining: Option<Duration>,
}

impl fmt::Display for AttemptSkipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "after {} attempt(s) sent: {}", self.sent, self.stop)
    }
}

impl std::error::Error for AttemptSkipped {}

//! [`Phase`]: where a request was when the layer answered 504 (or cut its stream) because its
//! time ran out.

use std::fmt;

use crate::context::Activity;

/// Where a request was when this hop's time ran out and the layer answered 504 itself: see
/// [`Hold::exceeded`](super::Hold::exceeded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Waiting for a worker slot (or a slot came free too late to start).
    Queue,
    /// Running the handler's own work.
    Work,
    /// Waiting for a downstream call.
    Calling,
    /// Streaming the response body, after the head was sent (the body was cut at the cutoff).
    Stream,
}

impl Phase {
    /// A short lowercase token: `queue`, `work`, `calling` or `stream`.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Queue => "queue",
            Phase::Work => "work",
            Phase::Calling => "calling",
            Phase::Stream => "stream",
        }
    }

    /// The phase of a request that was doing `activity`.
    pub(crate) fn of(activity: &Activity) -> Phase {
        match activity {
            Activity::Queued => Phase::Queue,
            Activity::Working => Phase::Work,
            Activity::Calling { .. } => Phase::Calling,
        }
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

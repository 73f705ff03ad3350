//! [`Activity`]: what a hop is doing for a request, told in its 504s and deadline errors.
//!
//! A module of its own so that both the context (which tracks it) and the errors (which carry
//! it) depend on it, rather than on each other.

use std::fmt;

/// What the hop was doing for a request: said in a 504's body, so the edge learns where the
/// time went.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Activity {
    /// Waiting for a worker slot.
    Queued,
    /// Running the handler.
    Working,
    /// Waiting for a downstream call.
    Calling {
        /// The downstream, as `host:port` or a name.
        target: String,
    },
}

impl fmt::Display for Activity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Activity::Queued => f.write_str("queued for a worker"),
            Activity::Working => f.write_str("working"),
            Activity::Calling { target } => write!(f, "calling {target}"),
        }
    }
}

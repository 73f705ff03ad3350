//! The wall clock: the one clock a message's expiry can be read on across hosts.

use deadline::absolute::WallInstant;

/// The wall clock now. Read once per publish and once per delivery; everything measured within
/// one process (the handler's deadline) runs on tokio's monotonic clock from there on.
pub(crate) fn wall_now() -> WallInstant {
    #[allow(clippy::disallowed_methods)] // a message's expiry is a wall-clock instant
    let now = std::time::SystemTime::now();
    WallInstant::from_system_time(now)
}

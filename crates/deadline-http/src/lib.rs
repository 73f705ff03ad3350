//! Tower layers that make HTTP services deadline-aware.

pub mod context;
pub mod error;

pub use context::{Activity, DeadlineContext, check, current_deadline, detach, with_deadline};
pub use error::{AttemptSkipped, DeadlineExceeded};

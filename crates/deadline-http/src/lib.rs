//! Tower layers that make HTTP services deadline-aware.

pub mod context;
pub mod error;
pub mod propagate;

pub use context::{Activity, DeadlineContext, check, current_deadline, detach, with_deadline};
pub use error::CallError;
pub use error::{AttemptSkipped, DeadlineExceeded};
pub use propagate::{DeadlineClient, IDEMPOTENCY_KEY, PropagateDeadline, PropagateDeadlineLayer};

//! Tower layers that make HTTP services deadline-aware.

pub mod context;
pub mod enforce;
pub mod error;
#[cfg(feature = "axum")]
pub mod extract;
pub mod propagate;
pub mod serve;
pub mod spawn;

pub use context::{Activity, DeadlineContext, check, current_deadline, detach, with_deadline};
pub use enforce::{
    EnforceBody, EnforceDeadline, EnforceDeadlineLayer, Hold, HoldMetrics, HoldOutcome,
    HoldSnapshot,
};
pub use error::CallError;
pub use error::{AttemptSkipped, DeadlineExceeded};
#[cfg(feature = "axum")]
pub use extract::RequestDeadline;
pub use propagate::{DeadlineClient, IDEMPOTENCY_KEY, PropagateDeadline, PropagateDeadlineLayer};
pub use serve::{serve, serve_connection};
pub use spawn::{BlockingCheck, RequestTask, TaskError, run_blocking, spawn};

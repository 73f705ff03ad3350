//! Tower layers that make HTTP services deadline-aware.

pub mod context;
pub mod error;
pub mod spawn;

pub use context::{Activity, DeadlineContext, check, current_deadline, detach, with_deadline};
pub use error::{AttemptSkipped, DeadlineExceeded};
pub use spawn::{BlockingCheck, RequestTask, TaskError, run_blocking, spawn};

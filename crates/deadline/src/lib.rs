//! Pure core of deadline propagation.

pub mod budget;
pub mod header;
pub mod plan;
pub mod trace;

pub use budget::{Budget, Deadline};
pub use header::{BUDGET_HEADER, BudgetValue, MalformedBudget};
pub use plan::{Attempt, CallPolicy, Decision, Plan, PolicyError, Stop};

//! The pure core of `deadline`: carry a request's time budget from service to service.
//!
//! Timeouts are usually set one hop at a time, and each looks sensible alone. The user's app
//! gives up after 2 s; the gateway gives orders 3.5 s and three attempts; orders gives inventory
//! 1 s and three attempts. Together, a request the user abandoned at 2 s keeps three services
//! busy for almost ten seconds, and under load that dead work crowds out live requests.
//!
//! With a deadline that travels, every hop knows how long the user is still waiting: it refuses
//! work that is already late, stops work nobody is waiting for, skips retries that could not
//! finish, and sends back a trace of where the time went. This crate holds every decision of
//! that as a pure function, with no I/O and no clock reads (`now` is always an argument):
//!
//! - [`budget`]: budgets and deadlines; [`header`]: the `Deadline-Budget-Ms` codec;
//!   [`dialect`]: the other headers a budget travels in (`grpc-timeout`, Connect's, Envoy's);
//!   [`absolute`]: absolute deadlines on the wall clock, with their skew guard;
//! - [`inbound`]: the set of headers a service reads a budget from, and the budget they give;
//! - [`plan`]: the call planner, with backoff, share caps and retry budgets;
//! - [`admission`]: refusing at arrival what a queue could not finish;
//! - [`trace`]: the `Deadline-Trace` codec;
//! - [`expiry`]: the expiry a message carries when work leaves the request;
//! - [`grpc`]: the gRPC status codes and message encoding a deadline answer needs;
//! - [`path`]: the timers along a path (nginx, HAProxy, services, PostgreSQL) and the rules
//!   that find the ones that disagree.
//!
//! The tower layers that use it live in the `deadline-http` crate.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use deadline_core::header::{parse_budget, BudgetValue};
//! use deadline_core::{Budget, CallPolicy, Decision, Plan};
//!
//! # #[allow(clippy::disallowed_methods)]
//! let arrival = Instant::now(); // in a service, the moment the request arrived
//!
//! // The caller sent `Deadline-Budget-Ms: 1890`.
//! let value = parse_budget(b"1890", Budget::DEFAULT_MAX).unwrap();
//! assert_eq!(value, BudgetValue::Remaining(Budget::from_millis(1890).unwrap()));
//! let deadline = value.deadline(arrival);
//!
//! // Negative means the caller already ran out: a value, never confused with "absent".
//! assert_eq!(parse_budget(b"-20", Budget::DEFAULT_MAX), Ok(BudgetValue::Expired));
//!
//! // A call with a 1 s timeout and 3 attempts, 50 ms margin and minimum useful budget.
//! let mut plan = Plan::new(CallPolicy::new(Duration::from_millis(1_000), 3).unwrap());
//! let Decision::Send(first) = plan.next(Some(deadline), arrival) else { panic!() };
//! assert_eq!(first.wait, Duration::from_millis(1_000));
//! assert_eq!(first.budget.unwrap().as_millis(), 950); // what the callee is told
//!
//! // The callee used its whole budget; 940 ms are left for the second attempt.
//! let now = arrival + Duration::from_millis(950);
//! let Decision::Send(second) = plan.next(Some(deadline), now) else { panic!() };
//! assert_eq!(second.budget.unwrap().as_millis(), 890);
//!
//! // With 50 ms left, a third attempt could not finish: it is never sent.
//! let now = arrival + Duration::from_millis(1_840);
//! assert!(matches!(plan.next(Some(deadline), now), Decision::Stop(_)));
//! ```

pub mod absolute;
pub mod admission;
pub mod budget;
pub mod decimal;
pub mod dialect;
pub mod expiry;
pub mod front;
pub mod grpc;
pub mod header;
pub mod inbound;
pub mod path;
pub mod plan;
pub mod trace;

pub use budget::{Budget, Deadline};
pub use header::{BUDGET_HEADER, BudgetValue, MalformedBudget};
pub use plan::{Attempt, CallPolicy, Decision, Plan, PolicyError, Stop};
pub use trace::{Span, TRACE_HEADER, Trace};

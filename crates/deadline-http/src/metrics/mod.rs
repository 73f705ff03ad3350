//! Prometheus metrics (cargo feature `metrics`): what the layers saw, in a registry the
//! application owns and serves.
//!
//! A single timeout counter does not say where the budget ran out. These metrics do: the budget
//! each request arrived with, how long it queued and worked, how much of its budget was left
//! when the reply went out, which phase ran out of time, and (the waste the library exists to
//! remove) how many seconds of work went on after the caller had left.
//!
//! ```
//! use deadline_http::EnforceDeadlineLayer;
//! use deadline_http::metrics::{DeadlineMetrics, Registry};
//!
//! let mut registry = Registry::default();
//! let metrics = DeadlineMetrics::register(&mut registry);
//! let inventory = metrics.service("inventory");
//! let layer = EnforceDeadlineLayer::new("inventory").record_metrics(&inventory);
//! // ... serve, and answer `GET /metrics` with `deadline_http::metrics::scrape(&registry)`.
//! let text = deadline_http::metrics::encode(&registry).unwrap();
//! assert!(text.contains("deadline_requests_total{service=\"inventory\",outcome=\"ok\"} 0"));
//! # let _ = layer;
//! ```
//!
//! # The metric set
//!
//! Every series has a `service` label (the name given to [`DeadlineMetrics::service`]); the
//! outbound ones also a `target` (the downstream's name).
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `deadline_requests_total` | counter | `outcome` | requests by how they ended: `ok`, `deadline`, `hung_up`, `rejected`, `malformed`, `expired_on_arrival`, `shed`, `error` |
//! | `deadline_budget_seconds` | histogram | | the budget a request arrived with (requests with one) |
//! | `deadline_queue_wait_seconds` | histogram | | time waiting for a worker slot (requests not rejected on arrival) |
//! | `deadline_work_seconds` | histogram | | time the work held a worker (requests whose work started) |
//! | `deadline_headroom_seconds` | histogram | | the budget left when the reply was written (requests with a budget whose reply was written; a late reply counts as 0) |
//! | `deadline_exceeded_total` | counter | `phase` | 504s the layer gave because this hop's time ran out: `queue`, `work`, `calling`, and `stream` for a response body it ended at the cutoff |
//! | `deadline_worker_seconds_after_caller_left_total` | counter | | seconds of work after the caller had gone: work nobody was waiting for |
//! | `deadline_attempts_total` | counter | `target`, `kind` | outbound attempts sent: `first`, `retry`, `hedge` |
//! | `deadline_attempts_skipped_total` | counter | `target`, `reason` | attempts the planner did not send: `not_enough_time`, `throttled`, `pushback` |
//! | `deadline_call_duration_seconds` | histogram | `target` | one outbound call, all its attempts, until it returned or was dropped |
//! | `deadline_queries_total` | counter | `outcome` | database statements by how they ended: `ok`, `deadline`, `cancelled`, `not_sent`, `error` ([`QueryMetrics`]) |
//! | `deadline_query_seconds` | histogram | | one database statement's time (statements sent) |
//! | `deadline_pool_wait_seconds` | histogram | | time waiting for a pooled database connection |
//!
//! `deadline_exceeded_total` counts only where the time ran out: a handler that relays its
//! downstream's 504 ends as `outcome="deadline"` in `deadline_requests_total`, but the phase is
//! counted once, at the hop that ran out.
//!
//! With enforcement on, the work stops the moment the caller hangs up, so
//! `deadline_worker_seconds_after_caller_left_total` stays at 0; work the layer cannot stop
//! (a thread in [`run_blocking`](crate::run_blocking), a task spawned with plain
//! `tokio::spawn`) is outside the hold and not counted. Without enforcement (the baseline), the
//! work runs on after the caller left and every second of it is counted.
//!
//! # Buckets and labels
//!
//! The histograms share one set of buckets, from 1 ms to an hour in a 1–2.5–5 series up to 10 s
//! and then 30 s, 1, 5, 15 and 60 minutes: budgets in practice run from a few milliseconds
//! (an in-datacentre call) to minutes (a batch job), and a deadline is worth reading at each of
//! those scales. Every label value comes from a fixed set (the outcomes, phases, attempt kinds
//! and skip reasons above) or from the application (its service and target names): no request
//! ids and no paths, so the number of series stays bounded.
//!
//! # Cost
//!
//! Every series of a service is created when [`DeadlineMetrics::service`] is called (so it is
//! scraped as 0 from the start), and the layers keep handles to them: recording a request is a
//! few atomic additions and histogram observations, with no lookup, no lock and no allocation.
//! The histograms are the library's own (two atomic additions an observation over a constant
//! array of bounds) rather than `prometheus-client`'s, which takes a lock for each; they encode
//! to the same text. The one exception is an outbound client with no target name: its
//! target is the request URI's authority, looked up per call. Name the target to avoid it.
//!
//! # Why `prometheus-client`
//!
//! It is the Prometheus project's own Rust client, it writes the OpenMetrics text format that
//! Prometheus scrapes, its metrics are plain values the application registers in a
//! [`Registry`] it owns (no global registry, so two services in one process or one test do not
//! collide), and it is light: no protobuf, no HTTP server, one small lock crate. (It appends
//! `_total` to counter names itself, so they are registered without it.)

mod call;
mod encode;
mod families;
mod histogram;
mod hop;
mod labels;
mod query;
mod service;

#[cfg(feature = "axum")]
mod route;

pub use prometheus_client::registry::Registry;

pub(crate) use call::{CallRecorder, TargetRecorder};
pub use encode::{CONTENT_TYPE, encode, scrape};
pub use histogram::BUCKETS;
pub(crate) use hop::HopRecorder;
pub use labels::{AttemptKind, Outcome, QueryOutcome, SkipReason};
pub use query::QueryMetrics;
#[cfg(feature = "axum")]
pub use route::route;
pub use service::{DeadlineMetrics, ServiceMetrics};

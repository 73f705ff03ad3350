//! Integration tests of the `deadline` binary, run as real processes on loopback with real time:
//! they assert statuses, counts and orderings, with generous bounds on times.

mod admission;
mod bench;
mod call;
mod demo;
mod dialects;
mod front;
mod grpc;
mod hold_log;
mod hostile_downstream;
mod hygiene;
mod jobs;
mod kernel_queue;
mod limits;
mod load;
mod metrics;
mod path;
mod placement;
mod postgres;
mod proxy;
// A private RabbitMQ node for `jobs`, the same one deadline-lapin's restart tests run (one file,
// shared). Its `kill` is for those tests.
#[allow(dead_code)]
#[path = "../../../deadline-lapin/tests/it/node.rs"]
mod rabbitmq_node;
mod service;
mod stream;
mod tls;
mod trace;
mod trace_exposure;
mod util;

//! Integration tests of the `deadline` binary, run as real processes on loopback with real time:
//! they assert statuses, counts and orderings, with generous bounds on times.

mod bench;
mod demo;
mod grpc;
mod hold_log;
mod hygiene;
mod load;
mod placement;
mod service;
mod trace;
mod util;

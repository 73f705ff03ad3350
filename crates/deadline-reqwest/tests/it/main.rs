//! The middleware's integration tests, one binary (link time matters on two cores).

mod builders;
mod loopback;
mod one_loop;

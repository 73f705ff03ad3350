//! Integration tests of the layers: middleware on paused time, HTTP in memory, real loopback.

mod loopback_client;
mod propagate;

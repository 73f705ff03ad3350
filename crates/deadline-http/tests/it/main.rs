//! Integration tests of the layers: middleware on paused time, HTTP in memory, real loopback.

mod enforce;
mod h2;
mod http_memory;
mod loopback_client;
mod loopback_server;
mod propagate;
